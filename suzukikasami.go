package dmutex

import (
	"fmt"
	"slices"
)

// NewSuzukiKasami starts n peers running the Suzuki-Kasami broadcast token
// algorithm; the token starts at peer 0.
//
// Suzuki and Kasami, "A distributed mutual exclusion algorithm", ACM
// Transactions on Computer Systems 3(4), 1985. Every peer keeps RN, the
// highest request number it has seen from each peer; the token carries LN,
// the number of each peer's last satisfied request, and a FIFO queue of
// peers waiting for it. A request is a REQUEST message (TS is the request
// number) to every other peer; the token travels in a token message whose
// Token field holds LN and the queue.
//
// Cost: a peer that holds the idle token enters with no messages at all;
// any other entry costs N-1 requests and one token message, N in total.
// The synchronization delay is one message. Channels may reorder messages:
// a request that arrives after the entry it asked for is outdated
// (its number is at most LN) and never moves the token.
//
// Fairness: a releasing holder appends every peer with an unsatisfied
// request to the token's queue, scanning from its successor round the
// ring, and hands the token to the queue's head, so every request is
// served after finitely many entries by others; there is no starvation.
// There is no bound on overtaking: while a request is on its way to the
// holder, another peer may enter as often as it requests (Check finds
// (n-1)·r entries by others between a request and its entry for r
// requests per peer: n = 2 with r = 4, n = 3 with r = 1 to 3, n = 4 with
// r = 1).
//
// Failures: the algorithm assumes reliable peers and channels. A peer
// that crashes holding the token, or a token message that is lost, leaves
// the cluster without a token, and every later request from another peer
// waits forever (LockContext returns at its deadline). A peer that crashes
// without the token does no harm unless it had a request outstanding: the
// token sent to serve it is lost with it. A token sent across a partition
// that drops messages is lost too. A partition blocks every peer cut off
// from the token's side. Requests are never sent twice, so a request lost
// to a partition is served only if some peer that did see it later holds
// the token and queues it at release; otherwise its requester waits
// forever, even after the partition heals.
//
// TryLock: the holder of the idle token enters with no message. Any other
// peer sends a try (TS its next request number) to every other peer, and
// exactly one peer answers it, the one that holds the token when the try
// reaches it, or the first that receives the token afterwards: an idle
// holder sends the token, which the try enters with; a holder that is
// inside, or has just received the token for its own request, answers
// busy and marks the try satisfied in the token's LN, so no later holder
// answers it again or queues it. So a try costs n messages, entered or
// refused (n-1 tries and one token or busy). A token on its way to a
// requester means a request goes first.
//
// WithRecovery turns on token regeneration with epochs, which needs a
// failure detector (the transport's with WithUnreachableAfter, or the
// checker's, CheckConfig.Detector; see [WithRecovery]). It
// follows the regeneration of S. Nishio, K. F. Li and E. G. Manning ("A
// time-out based resilient token transfer algorithm for mutual exclusion
// in computer networks", ICDCS 1989), where one site collects the others'
// state and makes a new token only if the old one is gone, and it
// re-collects LN from the survivors as the bulletin-board recoveries do;
// unlike the decentralized scheme of D. Manivannan and M. Singhal
// (Computer Systems Science and Engineering 11(1), 1996), where a site
// that waits too long asks every site to regenerate, one coordinator
// acts at a time, and epochs, not timing, keep old tokens out. Every
// token carries an epoch in Message.Ref (0 at the start). The
// coordinator is the lowest id a peer does not suspect. On every change
// of its suspicions (a suspected peer may have held the token, or been
// sent it; one trusted again may have been left out with a request) it
// starts epoch E, the next number above every epoch it knows whose
// remainder modulo n is its own id, so that no two coordinators pick the
// same, and sends a coordinator message (Ref E) to every other peer. Any
// peer also starts one when it suspects the peer it last sent the token
// to, and when it trusts again a peer its own epoch was made without. A
// holder never sends the token to a peer it suspects; the request stays
// queued, or is served when the holder trusts the peer again. A
// peer that learns a newer epoch, from a coordinator message, a status or
// a token, adopts it: it drops its claim to any token it holds and gives
// up a round it was coordinating. Probed by E's coordinator, it answers
// with a status: TS the number of its last satisfied request, Ref its
// epoch, and its RN in Token.LN (a vector, not a token); a peer inside
// when its claim is dropped sends its status when it leaves, and passes
// no token on. A coordinator message of an older epoch is answered with a
// status of the newer one, which makes that coordinator give up. When
// every peer has sent its status or is suspected, the coordinator makes
// the token of epoch E: LN[j] is the count j reported, or, for a peer that
// did not report, the highest request number any survivor knew from it
// (so its requests are not served, and a crashed peer never gets the
// token); then it enters if it waits, or passes the token on to every
// request above LN. A token of an epoch older than the receiver's is
// discarded where it arrives; a token that comes for a request already
// served is passed on at once. A peer that adopts an epoch whose
// coordinator it suspects, while it is itself the lowest peer it does not
// suspect, starts an epoch of its own above it: its own suspicion came
// first, and the round it gave up for the newer epoch would otherwise
// wait for ever on a crashed coordinator (the checker found that deadlock
// at n = 3 after one false suspicion). A status or coordinator message that is
// malformed (no RN of n entries, a count above the sender's own request
// number, or an epoch whose remainder is not its sender) is refused.
//
// A link that comes back from a cut that no suspicion told the machine
// of (too short for the detector, or while its peer was in a minority)
// may have lost a request, a status or the token itself, and nobody can tell
// whether a token sent across it arrived. The peer that would start a
// round on a suspicion (the coordinator, or the one that last sent the
// token there) starts one when such a peer is back: the statuses carry
// every survivor's RN, so the new token serves every request, lost ones
// included, and a token that did arrive is of an older epoch (Check at
// n = 2 with a partition that heals, docs/checking.md, and
// TestRecoveryHealedPartition).
//
// Costs: nothing without suspicions; each round costs n-1 coordinator
// messages, a status from each survivor, and the token's hop to the next
// requester. With a perfect detector the new token exists only once every
// live peer has adopted its epoch and left the critical section, so
// mutual exclusion holds, and every surviving request is served (Check
// at n = 3, one crash of any peer at any point, README "Crash recovery,
// checked"). With an imperfect one a falsely suspected holder may still
// be inside when the new token lets another peer in; fences order the
// two, since the epoch is in a fence's high bits, and the survivors still
// go on entering (Check at n = 3 with the fenced store, one false
// suspicion and one crash, docs/checking.md). A peer that suspects more
// than (n-1)/2 others acts on none of its suspicions (see
// [WithRecovery]): at n = 2 a survivor waits. The public
// variant suzuki-kasami-naive-regeneration regenerates without waiting
// for the statuses, and Check finds two peers inside with a perfect
// detector.
func NewSuzukiKasami(n int, opts ...Option) (*Cluster, error) {
	return New(SuzukiKasami, n, opts...)
}

// suzukiKasami is one peer of the Suzuki-Kasami algorithm.
//
// A token received is copied, never adopted: the message that carried it
// may still be read by whoever holds a copy of it (the model checker
// delivers one message in several explored orders), so a Token that left
// a machine in a message is never written again by anyone.
type suzukiKasami struct {
	id, n int

	rn      []uint64 // rn[j]: highest request number seen from peer j
	tries   []bool   // tries[j]: request rn[j] is a try
	token   *Token   // the token while this peer holds it, else nil
	wanting bool     // our request is out and the token has not come yet
	trying  bool     // with wanting: our request is a try
	inside  bool     // in the critical section (always with the token)

	queued []bool // scratch for release and validToken: marks peers in the queue; not state

	// Token regeneration (WithRecovery only; see NewSuzukiKasami).
	recovery   bool
	epoch      uint64   // highest epoch known; a token held is of this epoch
	suspected  []bool   // suspected[j]: the failure detector suspects j
	owe        bool     // inside, the claim dropped: a status is owed to epoch's coordinator at release
	sentTo     int      // the peer this peer last sent the token of epoch to, or -1
	collecting bool     // coordinating epoch: waiting for the survivors' statuses
	reported   []bool   // collecting: reported[j], j's status is in (or owed by this peer, for itself)
	sat        []uint64 // collecting: sat[j], the number of j's last satisfied request, as j reported it
}

func newSuzukiKasami(id, n int, cfg *config) (machine, error) {
	s := &suzukiKasami{
		id:    id,
		n:     n,
		rn:    make([]uint64, n),
		tries: make([]bool, n),
	}
	if id == 0 {
		s.token = &Token{LN: make([]uint64, n)}
	}
	if cfg.recovery {
		s.recovery = true
		s.suspected = make([]bool, n)
		s.sentTo = -1
	}
	return s, nil
}

func (s *suzukiKasami) step(ev event, out *output) {
	switch ev.kind {
	case evRequest, evTry:
		if s.token != nil {
			// The token is here and idle: enter without a message.
			s.inside = true
			out.enter()
			return
		}
		s.rn[s.id]++
		s.wanting = true
		s.trying = ev.kind == evTry
		kind := KindRequest
		if s.trying {
			kind = KindTry
		}
		out.broadcast(s.id, s.n, Message{Kind: kind, TS: s.rn[s.id]})
	case evRelease:
		s.release(out)
	case evMessage:
		m := ev.msg
		switch m.Kind {
		case KindRequest, KindTry:
			s.onRequest(m.From, m.TS, m.Kind == KindTry, out)
		case KindToken:
			s.onToken(m, out)
		case KindBusy:
			if s.trying && m.TS == s.rn[s.id] {
				s.wanting, s.trying = false, false
				out.refuse()
			}
		case KindCoordinator:
			if s.recovery {
				s.onCoordinator(m, out)
			}
		case KindStatus:
			if s.recovery {
				s.onStatus(m, out)
			}
		}
	case evSuspect, evTrust:
		if s.recovery {
			s.onDetector(ev.msg.From, ev.kind == evSuspect, out)
		}
	case evReached:
		if s.recovery && ev.msg.Ref == 0 {
			// After a trust (Ref 1), onDetector has started what the
			// change needs.
			s.onReached(ev.msg.From, out)
		}
	}
}

// unsatisfied reports whether the token should go to peer j for its
// request rn[j]. Without recovery a request is unsatisfied exactly when it
// is the one after LN[j], as in the paper. With recovery a regenerated
// token may under-count: a peer that did not report gets LN[j] = rn[j],
// and one that did reports its own count, so any number above LN[j] is a
// request to serve.
func (s *suzukiKasami) unsatisfied(j int) bool {
	if s.recovery {
		return s.rn[j] > s.token.LN[j]
	}
	return s.rn[j] == s.token.LN[j]+1
}

// answerTries refuses, as the token's holder that is inside, every try
// that no holder has answered yet, and marks it satisfied in the token.
func (s *suzukiKasami) answerTries(out *output) {
	t := s.token
	for j, try := range s.tries {
		if try && j != s.id && s.unsatisfied(j) {
			t.LN[j] = s.rn[j]
			out.send(Message{Kind: KindBusy, From: s.id, To: j, TS: s.rn[j]})
		}
	}
}

// onRequest records request number num from peer j and, if this peer
// holds the token idle and the request is not yet satisfied, sends the
// token to j at once.
func (s *suzukiKasami) onRequest(j int, num uint64, try bool, out *output) {
	if num > s.rn[j] {
		s.rn[j], s.tries[j] = num, try
	}
	if s.token == nil {
		return
	}
	if s.inside {
		if s.tries[j] {
			s.answerTries(out)
		}
		return
	}
	// An outdated request (num <= LN[j]) leaves rn[j] == LN[j], so this
	// test refuses it; the variant suzuki-kasami-outdated-token skips it.
	if s.unsatisfied(j) && !(s.recovery && s.suspected[j]) {
		s.sendToken(j, out)
	}
}

// onToken takes the token and enters if this peer is waiting for it. A
// token that nobody here asked for (only a variant sends one) stays here
// idle until a request comes.
func (s *suzukiKasami) onToken(m Message, out *output) {
	if !s.validToken(m.Token) {
		return // not a token of this cluster; a transport must not deliver it
	}
	if s.recovery {
		switch {
		case m.Ref < s.epoch:
			return // a token of an older epoch: discarded
		case m.Ref > s.epoch:
			s.adopt(m.Ref, false)
		}
	}
	if s.token != nil {
		panic(fmt.Sprintf("dmutex: suzuki-kasami peer %d received a second token from peer %d", s.id, m.From))
	}
	s.token = m.Token.clone()
	if s.wanting {
		s.wanting, s.trying = false, false
		s.inside = true
		out.enter()
		s.answerTries(out)
	} else if s.recovery && !s.inside {
		// With recovery a token may come for a request already served
		// or refused (a regenerated LN under-counts): record ours as
		// served and pass the token on at once, since the requests that
		// arrived before it would not move it.
		s.token.LN[s.id] = s.rn[s.id]
		s.pass(out)
	}
}

// validToken reports whether t can be a token of this cluster sent to
// this peer: one LN entry per peer, and a queue of distinct peer ids that
// does not name this peer, since a holder pops its receiver off the queue
// before it sends. Anything else, which only a forged or corrupted
// message carries, would make release index out of range, or send the
// token to ourselves.
func (s *suzukiKasami) validToken(t *Token) bool {
	if t == nil || len(t.LN) != s.n {
		return false
	}
	if s.queued == nil {
		s.queued = make([]bool, s.n)
	}
	ok := true
	k := 0
	for ; k < len(t.Queue); k++ {
		j := t.Queue[k]
		if j < 0 || j >= s.n || j == s.id || s.queued[j] {
			ok = false
			break
		}
		s.queued[j] = true
	}
	for _, j := range t.Queue[:k] {
		s.queued[j] = false
	}
	return ok
}

// release records our request as satisfied, queues every peer with an
// unsatisfied request, and hands the token to the head of the queue. With
// recovery, a peer whose claim was dropped while it was inside (a new
// epoch began) has no token to pass: it sends the status it owes instead.
func (s *suzukiKasami) release(out *output) {
	s.inside = false
	if s.owe {
		s.owe = false
		s.report(s.epoch, out)
	}
	if s.token == nil {
		return
	}
	s.token.LN[s.id] = s.rn[s.id]
	s.pass(out)
}

// pass queues every peer with an unsatisfied request behind those
// already queued, scanning from our successor round the ring, and sends
// the token to the head of the queue; with an empty queue it keeps it.
func (s *suzukiKasami) pass(out *output) {
	t := s.token
	if s.queued == nil {
		s.queued = make([]bool, s.n)
	}
	for _, j := range t.Queue {
		s.queued[j] = true
	}
	for k := 1; k < s.n; k++ {
		j := (s.id + k) % s.n
		if !s.queued[j] && s.unsatisfied(j) {
			t.Queue = append(t.Queue, j)
		}
	}
	for _, j := range t.Queue {
		s.queued[j] = false
	}
	k := 0
	if s.recovery {
		// Never to a peer we suspect: a crashed one would lose the
		// token. It stays queued for a holder that trusts it.
		for k < len(t.Queue) && s.suspected[t.Queue[k]] {
			k++
		}
	}
	if k < len(t.Queue) {
		j := t.Queue[k]
		t.Queue = slices.Delete(t.Queue, k, k+1)
		s.sendToken(j, out)
	}
}

// sendToken gives the token away; this machine never touches it again.
func (s *suzukiKasami) sendToken(j int, out *output) {
	out.send(Message{Kind: KindToken, From: s.id, To: j, Ref: s.epoch, Token: s.token})
	s.token = nil
	s.sentTo = j
}

// Token regeneration (WithRecovery).

// coordinator reports whether this peer is the lowest id it does not
// suspect, the one that starts a new epoch.
func (s *suzukiKasami) coordinator() bool {
	return !slices.Contains(s.suspected[:s.id], false)
}

// onDetector records that peer j is suspected, or trusted again. A
// coordinator that is not collecting starts a new epoch on every change:
// a suspected peer may have held the token or been sent it, and a peer
// trusted again may have been left out of the last epoch with a request
// that epoch counted as served. Any peer starts one when it suspects the
// peer it last sent the token to, which the coordinator may have
// suspected before the token went there. A coordinator collecting stops
// waiting for a peer it suspects, and waits again for one it trusts again
// (which was sent the coordinator message, so its status comes). A holder
// of the idle token that trusts a peer again serves its request, which it
// kept from a suspected peer. A peer that coordinated the current epoch
// and trusts again a peer that epoch left out starts another, since the
// one left out may wait with a request the epoch counted as served.
func (s *suzukiKasami) onDetector(j int, suspect bool, out *output) {
	s.suspected[j] = suspect
	switch {
	case s.collecting:
		s.checkRound(out)
	case s.coordinator() || (suspect && j == s.sentTo) || (!suspect && s.leftOut(j)):
		s.startRound(out)
	case !suspect && s.token != nil && !s.inside:
		s.pass(out)
	}
}

// onReached handles peer j's return from a cut that may have lost
// messages: a request, a status, a coordinator message or the token
// itself. Nobody can tell whether a token sent across the cut arrived,
// so the peer that would start a round on a suspicion (the coordinator,
// or the one that last sent the token to j), or one collecting a round
// whose messages to and from j may be lost, starts a new round: the
// statuses carry every survivor's RN, so the new token serves every
// request, lost ones included, and its epoch makes a token that did
// arrive a stale one. A partition too short for any suspicion costs one
// round, 3(n-1) messages and the token's hop.
func (s *suzukiKasami) onReached(j int, out *output) {
	if j < 0 || j >= s.n || j == s.id {
		return
	}
	if s.collecting || s.coordinator() || j == s.sentTo {
		s.startRound(out)
	}
}

// leftOut reports whether this peer coordinated the current epoch and
// made its token without peer j's status.
func (s *suzukiKasami) leftOut(j int) bool {
	return s.reported != nil && s.epoch%uint64(s.n) == uint64(s.id) && !s.reported[j]
}

// startRound begins epoch E, the smallest above every epoch known whose
// remainder modulo n is this peer's id, so that two coordinators never
// pick the same epoch. It drops this peer's own claim to the old token,
// tells every other peer (suspected or not) that it coordinates E, and
// waits for the statuses of those it does not suspect.
func (s *suzukiKasami) startRound(out *output) {
	n := uint64(s.n)
	s.adopt((s.epoch/n+1)*n+uint64(s.id), true)
	s.collecting = true
	if s.reported == nil {
		s.reported = make([]bool, s.n)
		s.sat = make([]uint64, s.n)
	} else {
		clear(s.reported)
		clear(s.sat)
	}
	if !s.owe {
		s.reported[s.id] = true
		s.sat[s.id] = s.satisfied()
	}
	out.broadcast(s.id, s.n, Message{Kind: KindCoordinator, Ref: s.epoch})
	s.checkRound(out)
}

// adopt moves this peer to epoch e, above its own: it abandons a round it
// was collecting and drops its claim to the token of the older epoch.
// When the drop comes with e's coordinator message (probed) and the peer
// is inside, its status waits for the release.
func (s *suzukiKasami) adopt(e uint64, probed bool) {
	s.epoch = e
	s.collecting = false
	s.sentTo = -1
	if s.token != nil {
		s.token = nil
	}
	if probed && s.inside {
		s.owe = true
	}
}

// satisfied is the number of this peer's last satisfied request.
func (s *suzukiKasami) satisfied() uint64 {
	if s.wanting {
		return s.rn[s.id] - 1
	}
	return s.rn[s.id]
}

// report sends this peer's status for epoch e to e's coordinator, or, if
// that is this peer, counts it.
func (s *suzukiKasami) report(e uint64, out *output) {
	c := int(e % uint64(s.n))
	if c == s.id {
		if s.collecting && e == s.epoch {
			s.reported[s.id] = true
			s.sat[s.id] = s.satisfied()
			s.checkRound(out)
		}
		return
	}
	out.send(Message{Kind: KindStatus, From: s.id, To: c, TS: s.satisfied(), Ref: s.epoch,
		Token: &Token{LN: slices.Clone(s.rn)}})
}

// onCoordinator handles peer m.From's message that it coordinates epoch
// m.Ref. An older epoch is answered with a status of ours, whose newer
// epoch makes that coordinator give up. A newer one is adopted; then the
// peer reports, or, inside with its claim dropped, owes the status until
// it leaves.
func (s *suzukiKasami) onCoordinator(m Message, out *output) {
	e := m.Ref
	if e == 0 || e%uint64(s.n) != uint64(m.From) {
		return // not an epoch the sender may coordinate: refused
	}
	if e < s.epoch {
		out.send(Message{Kind: KindStatus, From: s.id, To: m.From, TS: s.satisfied(), Ref: s.epoch,
			Token: &Token{LN: slices.Clone(s.rn)}})
		return
	}
	if e > s.epoch {
		s.adopt(e, true)
	}
	if s.inside && s.token == nil {
		s.owe = true
	} else {
		s.report(e, out)
	}
	s.takeOver(out)
}

// takeOver starts a new epoch if this peer has just adopted one whose
// coordinator it suspects while it is itself the lowest peer it does not
// suspect: the suspicion that would have made it start one came before,
// and that round was given up for the newer epoch, which a crashed
// coordinator would never complete (the checker's deadlock at n = 3 with
// one false suspicion).
func (s *suzukiKasami) takeOver(out *output) {
	if s.suspected[int(s.epoch%uint64(s.n))] && s.coordinator() { // adopting ended any round of ours
		s.startRound(out)
	}
}

// onStatus takes peer m.From's status: TS, the number of its last
// satisfied request, and in Token.LN its RN (not a token).
func (s *suzukiKasami) onStatus(m Message, out *output) {
	if m.Token == nil || len(m.Token.LN) != s.n || len(m.Token.Queue) != 0 || m.TS > m.Token.LN[m.From] {
		return // malformed: refused
	}
	switch {
	case m.Ref > s.epoch:
		s.adopt(m.Ref, false)
		s.takeOver(out)
		return
	case m.Ref < s.epoch || !s.collecting || s.reported[m.From]:
		return // for an older epoch, or late
	}
	s.reported[m.From] = true
	s.sat[m.From] = m.TS
	for j, v := range m.Token.LN {
		if v > s.rn[j] {
			s.rn[j], s.tries[j] = v, false
		}
	}
	s.checkRound(out)
}

// checkRound regenerates the token once every peer has reported or is
// suspected.
func (s *suzukiKasami) checkRound(out *output) {
	for j := range s.n {
		if !s.reported[j] && !s.suspected[j] {
			return
		}
	}
	s.regenerate(out)
}

// regenerate ends the round: the token of the new epoch gets, for each
// peer that reported, the number it reported as satisfied, and for any
// other, the highest request number known from it, which no survivor
// then serves. Its queue is empty: pass queues every request above LN.
// The coordinator enters if it waits, and else passes the token on.
func (s *suzukiKasami) regenerate(out *output) {
	s.collecting = false
	ln := make([]uint64, s.n)
	for j := range s.n {
		if s.reported[j] {
			ln[j] = s.sat[j]
		} else {
			ln[j] = s.rn[j]
		}
	}
	s.token = &Token{LN: ln}
	switch {
	case s.wanting:
		s.wanting, s.trying = false, false
		s.inside = true
		out.enter()
		s.answerTries(out)
	case !s.inside:
		s.pass(out)
	}
}

// idleViolation reports what this peer still keeps once the cluster is at
// rest, with every request and try answered and nothing in flight.
func (s *suzukiKasami) idleViolation() string {
	switch {
	case s.wanting || s.trying || s.inside:
		return "keeps a request"
	case s.token != nil && len(s.token.Queue) > 0:
		return fmt.Sprintf("keeps token queue %v", s.token.Queue)
	case s.collecting || s.owe:
		return fmt.Sprintf("keeps the round of epoch %d (collecting %v, status owed %v)", s.epoch, s.collecting, s.owe)
	}
	return ""
}

func (s *suzukiKasami) hasToken() bool { return s.token != nil }

// carriesToken: the token travels as KindToken, with its queue and LN.
func (s *suzukiKasami) carriesToken(m Message) bool { return m.Kind == KindToken }

func (s *suzukiKasami) clone() machine {
	c := *s
	c.rn = append([]uint64(nil), s.rn...)
	c.tries = append([]bool(nil), s.tries...)
	c.token = s.token.clone()
	c.queued = nil
	c.suspected = slices.Clone(s.suspected)
	c.reported = slices.Clone(s.reported)
	c.sat = slices.Clone(s.sat)
	return &c
}

func (s *suzukiKasami) appendState(b []byte) []byte {
	b = appendUints(b, s.rn)
	b = appendBools(b, s.tries)
	b = appendBool(b, s.token != nil)
	if s.token != nil {
		b = appendUints(b, s.token.LN)
		b = appendInts(b, s.token.Queue)
	}
	b = appendBool(b, s.wanting)
	b = appendBool(b, s.trying)
	b = appendBool(b, s.inside)
	if s.recovery {
		b = appendUint(b, s.epoch)
		b = appendBools(b, s.suspected)
		b = appendBool(b, s.owe)
		b = appendInt(b, s.sentTo)
		b = appendBool(b, s.collecting)
		if s.collecting {
			b = appendBools(b, s.reported)
			b = appendUints(b, s.sat)
		} else if s.epoch%uint64(s.n) == uint64(s.id) {
			b = appendBools(b, s.reported) // who the epoch left out
		}
	}
	return b
}

func (s *suzukiKasami) describe() []StateField {
	fs := []StateField{
		{"RN", fmt.Sprint(s.rn)},
		{"wanting", fmt.Sprint(s.wanting)},
		{"token", fmt.Sprint(s.token != nil)},
	}
	if s.trying {
		fs = append(fs, StateField{"trying", "true"})
	}
	if slices.Contains(s.tries, true) {
		fs = append(fs, StateField{"tries", fmt.Sprint(s.tries)})
	}
	if s.token != nil {
		fs = append(fs, StateField{"LN", fmt.Sprint(s.token.LN)}, StateField{"token queue", describePeers(s.token.Queue)})
	}
	if s.recovery {
		var sus []int
		for j, x := range s.suspected {
			if x {
				sus = append(sus, j)
			}
		}
		fs = append(fs, StateField{"epoch", fmt.Sprint(s.epoch)}, StateField{"suspected", describePeers(sus)})
		if s.owe {
			fs = append(fs, StateField{"status owed", "true"})
		}
		if s.collecting {
			fs = append(fs, StateField{"statuses in", fmt.Sprint(s.reported)})
		}
	}
	return fs
}

// Token epochs, for the World's check that no two tokens share one.

func (s *suzukiKasami) regenerates() bool { return s.recovery }

func (s *suzukiKasami) heldEpoch() (uint64, bool) { return s.epoch, s.token != nil }

func (s *suzukiKasami) sentEpoch(m Message) uint64 { return m.Ref }

// nextFence puts the epoch in the fence's high bits, with recovery, so
// that every hold of a newer epoch has a larger fence than every hold of
// an older one: a holder whose claim was dropped and its successor in
// the new epoch never share a fence.
func (s *suzukiKasami) nextFence(fence uint64) uint64 {
	if s.recovery {
		if s.epoch >= MaxFence/FenceEpoch {
			return MaxFence
		}
		return max(fence, s.epoch*FenceEpoch) + 1
	}
	return fence + 1
}
