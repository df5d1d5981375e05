package dmutex

import (
	"fmt"
	"slices"
)

// NewSinghalDynamic starts n peers running M. Singhal's dynamic
// information-structure algorithm: each peer asks only the peers in its
// request set, which grows and shrinks with the load.
//
// Cost: 0 to 2(n-1) messages per entry: a request and a reply for each
// peer in the request set, none when it is empty; 2(n-1) at heavy load.
// Channels: safe without FIFO order. Crashes: none tolerated; a crashed
// peer in someone's request set blocks that peer for ever.
//
// M. Singhal, "A dynamic information-structure mutual exclusion
// algorithm for distributed systems", IEEE Transactions on Parallel and
// Distributed Systems 3(1), 1992; restated in A. Kshemkalyani and M.
// Singhal, Distributed Computing, Cambridge University Press, 2008, ch. 9.
//
// Peer i keeps a request set R_i, the peers whose REPLY it needs before
// it enters, and an inform set I_i, the peers it will REPLY to when it
// leaves. They start as a staircase: R_i holds every peer j < i, so that
// peer 0 asks nobody, and I_i is empty; of any two peers, at least one
// is in the other's request set at all times, which is what keeps two
// peers from being inside at once. A peer that wants the critical section
// stamps a request with its Lamport clock and sends it to R_i; each REPLY
// takes its sender out of R_i, and the peer enters when R_i is empty. A
// peer that receives a request:
//
//   - inside, or waiting with an older request (ties broken by the
//     smaller id), puts the requester in I_i;
//   - waiting with a younger request, replies at once and, if the
//     requester is not in R_i, puts it there and sends it its own request
//     (with its request's stamp);
//   - idle, replies at once and puts the requester in R_i.
//
// On leaving, a peer replies to every peer in I_i and moves them all to
// R_i. So the peer that entered last sits at the top of the staircase:
// every other peer must ask it, and it asks nobody.
//
// An entry costs two messages for each peer in R_i, and one at a time R_i
// holds exactly the peers that have entered since this peer's last entry
// (or, before its first entry, the peers below it): 0 to 2(n-1), 2i for
// the first entry of peer i, 2(n-1) when every other peer has entered
// since. When requesters are drawn at random, each other peer is in R_i
// with probability 1/2 and an entry costs n-1 on average, the paper's
// figure for light load. At heavy load every peer has entered between two
// entries of any one, so R_i holds all the others: 2(n-1), the paper's
// figure, which is also Ricart and Agrawala's. Synchronization delay: one
// message (the reply sent on leaving); response time at light load: two
// message delays and the critical section, or the critical section alone
// when R_i is empty.
//
// Read with R_i as the peers whose permission peer i lacks, these rules
// are those of Carvalho and Roucairol ([NewRoucairolCarvalho]): a reply
// hands a permission over, and the request sent back with a reply asks
// for it again. The two machines are written separately, each in its
// paper's terms, and Check finds the same number of states for both.
//
// Fairness: entries follow no global order: a peer with an empty R_i
// enters without asking anybody, so it may enter again and again while
// an older request is on its way to it; once that request has arrived,
// the peer enters at most once more before it replies. So no request
// starves, and between a request and its entry each other peer enters at
// most once per request it makes (Check: r(n-1) with r requests per peer
// at n = 3).
//
// This implementation departs from the paper in three points, none of
// which changes a count above. A peer has at most one request out to a
// given peer: it asks again only after that one is answered. A request
// from a peer whose reply to an earlier request or try of ours is still
// on its way waits for that reply before it is answered by the rules
// above; without TryLock this never happens, but a reply to a refused try
// can otherwise cross a reply of ours and leave each peer out of the
// other's request set. And an entry with an empty R_i does not tick the
// clock, so that such a peer re-enters in the same state and the
// runtime's fast path can skip its machine.
//
// TryLock, which the paper does not have, enters at once, with no
// message, when R_i is empty. Otherwise it sends a try, stamped as a
// request, to R_i, and each peer answers at once, never keeping it: a
// reply, by the rules for a request, if it would reply to a request; busy
// if it is inside or waiting with an older request, or if its own
// question to the trying peer is unanswered. The try enters when R_i is
// empty and is refused on the first busy: 2m messages for m peers in R_i,
// either way. The replies a refused try received take their senders out
// of R_i, as any reply does, and a trying peer that must reply to an
// older request replies and is refused at once, since that request goes
// first.
//
// WithRecovery does not apply.
func NewSinghalDynamic(n int, opts ...Option) (*Cluster, error) {
	return New(SinghalDynamic, n, opts...)
}

// singhalDynamic is the machine of Singhal's dynamic algorithm. Messages:
// a request or try carries its timestamp in TS; a reply carries in Ref
// the timestamp of the request or try it answers; a busy carries in Ref
// the timestamp of the try it refuses.
type singhalDynamic struct {
	id, n int

	clock  uint64   // Lamport clock: highest timestamp seen
	state  raState  // raWanted is the paper's Requesting, raHeld its Executing
	trying bool     // the outstanding request (raWanted) is a try
	ts     uint64   // timestamp of the outstanding request; 0 when released or entered without asking
	rset   []bool   // rset[j]: j is in R_i, the request set (i itself is left out)
	nr     int      // |R_i| without i
	asked  []bool   // asked[j]: a request or try to j is not answered yet
	iset   []uint64 // iset[j]: timestamp of j's request, j being in I_i, the inform set; 0 if not
}

func newSinghalDynamic(id, n int, _ *config) (machine, error) {
	s := &singhalDynamic{
		id:    id,
		n:     n,
		rset:  make([]bool, n),
		asked: make([]bool, n),
		iset:  make([]uint64, n),
	}
	for j := range id {
		s.rset[j] = true // the staircase: peer i asks the peers below it
	}
	s.nr = id
	return s, nil
}

func (s *singhalDynamic) step(ev event, out *output) {
	switch ev.kind {
	case evRequest, evTry:
		s.state = raWanted
		s.trying = ev.kind == evTry
		if s.nr == 0 {
			s.enterIfDone(out) // nobody to ask: no message, no tick
			return
		}
		s.clock++
		s.ts = s.clock
		for j := range s.n {
			s.ask(j, out)
		}
	case evRelease:
		s.state = raReleased
		s.ts = 0
		s.informAll(out)
	case evMessage:
		m := ev.msg
		switch m.Kind {
		case KindRequest:
			s.clock = max(s.clock, m.TS)
			s.iset[m.From] = m.TS
			s.answer(m.From, out)
		case KindTry:
			s.onTry(m, out)
		case KindReply:
			s.remove(m.From)
			s.asked[m.From] = false
			s.answer(m.From, out) // a request that waited for this reply
			s.enterIfDone(out)
		case KindBusy:
			s.asked[m.From] = false
			switch {
			case s.state != raWanted:
			case s.trying && m.Ref == s.ts:
				s.giveUp(out)
			default:
				// The busy refuses an earlier try, refused already: ask
				// now for the request outstanding.
				s.ask(m.From, out)
			}
		}
	}
}

// ask sends the outstanding request or try to j if j is in R_i and no
// earlier question to j waits for its answer (that answer will do).
func (s *singhalDynamic) ask(j int, out *output) {
	if !s.rset[j] || s.asked[j] {
		return
	}
	kind := KindRequest
	if s.trying {
		kind = KindTry
	}
	s.asked[j] = true
	out.send(Message{Kind: kind, From: s.id, To: j, TS: s.ts})
}

// add puts j in R_i; remove takes it out.
func (s *singhalDynamic) add(j int) {
	if !s.rset[j] {
		s.rset[j] = true
		s.nr++
	}
}

func (s *singhalDynamic) remove(j int) {
	if s.rset[j] {
		s.rset[j] = false
		s.nr--
	}
}

// first reports whether this peer goes before a request (t, j): it is
// Executing, or Requesting with an older request (the paper's
// My_priority).
func (s *singhalDynamic) first(t uint64, j int) bool {
	return s.state == raHeld || (s.state == raWanted && before(s.ts, s.id, t, j))
}

// answer replies to j's request in I_i unless this peer goes first, or
// its own question to j is unanswered.
func (s *singhalDynamic) answer(j int, out *output) {
	t := s.iset[j]
	if t == 0 || s.asked[j] || s.first(t, j) {
		return
	}
	s.iset[j] = 0
	s.reply(j, t, out)
}

// informAll answers every request in I_i that may be answered now: on
// leaving, or on giving up a try, all of them.
func (s *singhalDynamic) informAll(out *output) {
	for j := range s.n {
		s.answer(j, out)
	}
}

// reply sends j a reply to its request or try stamped t and puts j in
// R_i. A Requesting peer also sends j its own request, unless j was in
// R_i already; a trying one gives up, since t goes first.
func (s *singhalDynamic) reply(j int, t uint64, out *output) {
	out.send(Message{Kind: KindReply, From: s.id, To: j, TS: s.clock, Ref: t})
	s.add(j)
	switch {
	case s.state != raWanted:
	case s.trying:
		s.giveUp(out)
	default:
		s.ask(j, out)
	}
}

// onTry answers a try at once: a reply, or busy.
func (s *singhalDynamic) onTry(m Message, out *output) {
	j, t := m.From, m.TS
	s.clock = max(s.clock, t)
	if s.asked[j] || s.first(t, j) {
		// Executing, Requesting with an older request, or waiting for
		// j's reply: the try cannot win now.
		out.send(Message{Kind: KindBusy, From: s.id, To: j, TS: s.clock, Ref: t})
		return
	}
	s.reply(j, t, out)
}

// giveUp refuses the outstanding try and answers the requests it kept.
func (s *singhalDynamic) giveUp(out *output) {
	s.state = raReleased
	s.trying = false
	s.ts = 0
	out.refuse()
	s.informAll(out)
}

func (s *singhalDynamic) enterIfDone(out *output) {
	if s.state == raWanted && s.nr == 0 {
		s.state = raHeld
		s.trying = false
		out.enter()
	}
}

// needs appends R_i: a request waits for those peers alone.
func (s *singhalDynamic) needs(buf []int) []int {
	for j := range s.n {
		if s.rset[j] {
			buf = append(buf, j)
		}
	}
	return buf
}

// idleViolation reports what this peer still keeps once the cluster is at
// rest: a request, a peer in I_i or an unanswered question; or a pair of
// peers each in the other's request set, which only a message in flight
// explains.
func (s *singhalDynamic) idleViolation() string {
	switch {
	case s.state != raReleased || s.trying:
		return fmt.Sprintf("keeps state %d (trying %v)", s.state, s.trying)
	case slices.ContainsFunc(s.iset, func(t uint64) bool { return t != 0 }):
		return fmt.Sprintf("keeps the inform set %v", s.iset)
	case slices.Contains(s.asked, true):
		return fmt.Sprintf("still asks %v", s.asked)
	}
	return ""
}

func (s *singhalDynamic) clone() machine {
	c := *s
	c.rset = slices.Clone(s.rset)
	c.asked = slices.Clone(s.asked)
	c.iset = slices.Clone(s.iset)
	return &c
}

func (s *singhalDynamic) assign(src machine) bool {
	o, ok := src.(*singhalDynamic)
	if !ok {
		return false
	}
	rset, asked, iset := s.rset, s.asked, s.iset
	*s = *o
	s.rset, s.asked, s.iset = reuse(rset, o.rset), reuse(asked, o.asked), reuse(iset, o.iset)
	return true
}

func (s *singhalDynamic) appendState(b []byte) []byte {
	b = appendUint(b, s.clock)
	b = append(b, byte(s.state))
	b = appendBool(b, s.trying)
	b = appendUint(b, s.ts)
	b = appendBools(b, s.rset)
	b = appendBools(b, s.asked)
	return appendUints(b, s.iset)
}

func (s *singhalDynamic) describe() []StateField {
	state := [...]string{raReleased: "released", raWanted: "requesting", raHeld: "executing"}[s.state]
	var r, asked, inform []int
	for j := range s.n {
		if s.rset[j] {
			r = append(r, j)
		}
		if s.asked[j] {
			asked = append(asked, j)
		}
		if s.iset[j] != 0 {
			inform = append(inform, j)
		}
	}
	fs := []StateField{
		{"clock", fmt.Sprint(s.clock)},
		{"state", state},
		{"request", describeTS(s.ts != 0, s.ts)},
		{"request set", describePeers(r)},
		{"inform set", describePeers(inform)},
		{"asked", describePeers(asked)},
	}
	if s.trying {
		fs = append(fs, StateField{"trying", "true"})
	}
	return fs
}
