package dmutex

import (
	"fmt"
	"strings"
)

// NewSinghalHeuristic starts n peers running Singhal's heuristically-aided
// token algorithm, repaired; the token starts at peer 0.
//
// Messages per entry: 0 at the idle token's holder, otherwise one request
// to each peer the requester believes may hold the token, and the token:
// fewer than n at light load, n at heavy load. Channels may reorder
// messages. A crashed holder or a lost token stops every later entry, and
// a crashed peer may swallow the requests sent only to it; there is no
// recovery (WithRecovery is refused).
//
// M. Singhal, "A heuristically-aided algorithm for mutual exclusion in
// distributed systems", IEEE Transactions on Computers 38(5), 1989;
// restated in Kshemkalyani and Singhal, Distributed Computing (2008), ch. 9.
// Every peer i keeps a state vector SV, what it believes of each peer: N
// (neither requesting nor holding), R (requesting), E (inside) or H
// (holding the idle token), and SN, the number of each peer's latest
// request it has heard of. The token carries TSV (R or N for each peer)
// and TSN, the number of each peer's latest request it knows of; here
// TSN is Token.LN and the peers that TSV has in state R are Token.Queue,
// in increasing order. At the start peer i has the peers 0, ..., i-1 in
// state R and the others in N (the staircase), so that of any two peers
// at least one sends its requests to the other; peer 0 holds the token.
// A request (a request message, TS its number) goes only to the peers in
// state R. A peer that receives it records it and puts the requester in
// state R; the holder of the idle token sends it the token, recording the
// request in TSV and TSN; a peer that is itself requesting, and did not
// have the requester in state R, sends it its own request too. The
// leaving holder merges its vectors with the token's, peer by peer, the
// side with the later request number winning, and sends the token to a
// peer in state R, here the first after itself round the ring; with none
// it keeps it (state H).
//
// Repair: the rules as the paper and the textbook state them are
// refuted by the model checker. In the merge, where the token's request
// number is at least its own, the leaving peer copies the token's state,
// and N overwrites the R that made it send its requests to that peer: two
// peers can then each have the other in N, a request reaches only peers
// that will not hold the token again, and the token rests idle
// elsewhere. Check finds it at n = 3 with two requests per peer, over
// FIFO and reordering channels alike (a deadlock after 19 steps, the
// variant singhal-heuristic-textbook). Two changes make it hold: (1) the
// merge never turns a peer's own R into N, so that what a peer asks
// only grows, and (2) the leaving holder sends the token to a peer that
// the token has in state R (a request it knows to be pending), not to
// any that its own vector has in R, and keeps it when the token has none
// (after 1, R in a peer's own vector also means "may hold the token",
// and the token would go to peers that asked for nothing). With these
// two, every peer asks every peer that has ever requested, and the
// heuristic is gone; (3) gives part of it back: a peer that receives the
// token forgets its sender (unless it heard of a request of the sender's
// that the token does not have), since the sender keeps it in state R
// until the token comes back. Check proves the three at n = 3 with one
// and two requests per peer and at n = 4 with one, over both networks,
// and at n = 3 with three over FIFO channels.
//
// Cost: an entry by the holder of the idle token sends nothing; any other
// costs a request to each peer the requester has in state R, and the
// token. From the staircase, peer i's first entry costs i requests and
// the token, n/2 on average; afterwards a peer asks every peer it has
// heard request since it last received the token from it, and one entry
// at a time costs fewer than n messages on average, but more than the
// paper's n/2 (TestSinghalHeuristicCounts: about 0.8 n at n = 8 and 16).
// At saturation every peer asks every other: n-1 requests and the token,
// n messages. The synchronization delay is one message (the token), and
// a lone request waits two, the request and the token (TestTimedTextbook).
//
// Fairness: the token goes to the first pending request after the
// leaving holder round the ring, among those the token knows; a request
// that has not yet reached a holder is not seen, and while it travels
// another peer may enter as often as it requests (Check finds (n-1)·r
// entries by others between a request and its entry for r requests per
// peer: n = 3 with r = 1 to 3, n = 2 with r = 4, n = 4 with r = 1). There
// is no starvation.
//
// Failures: the algorithm assumes reliable peers and channels. A lost
// token, or a crash of the peer that holds it, even idle, stops every
// later entry. A lost request, or a crashed peer that receives requests,
// leaves a requester waiting for ever when no other peer it asked
// carries its request to the token; a request is never sent twice. A
// crashed peer does no harm to others that never ask it or send it the
// token (the failure table).
//
// TryLock: the holder of the idle token enters with no message. Any
// other peer sends a try (TS its next request number) to every other
// peer, and exactly one answers it: the holder of the idle token with the
// token, or a holder that is inside, or that receives the token for its
// own request, with busy; the answer records the try's number in TSN, so
// that no later holder answers it again. So a try costs n messages,
// entered or refused. The trier may get the token, so every peer puts it
// in state R, as for a request, and a requesting peer that did not have
// it there sends it its own request (one more message); without that,
// Check finds a request that never reaches the trier, which keeps the
// token idle. The paper has no TryLock.
func NewSinghalHeuristic(n int, opts ...Option) (*Cluster, error) {
	return New(SinghalHeuristic, n, opts...)
}

// shState is what a Singhal peer believes of one peer: the paper's N, R,
// E and H.
type shState uint8

const (
	shNone       shState = iota // N: neither requesting nor holding the token
	shRequesting                // R: requesting, or possibly holding the token
	shExecuting                 // E: inside the critical section
	shHolding                   // H: holding the idle token
)

var shNames = [...]string{shNone: "N", shRequesting: "R", shExecuting: "E", shHolding: "H"}

// singhal is one peer of Singhal's heuristically-aided algorithm. The
// token's TSN is Token.LN, and its TSV, whose entries are only R or N,
// is Token.Queue: the peers in state R, in increasing order.
type singhal struct {
	id, n int

	sv     []shState // SV: sv[j], what this peer believes of peer j; sv[id] its own state
	sn     []uint64  // SN: sn[j], the number of the latest request of peer j heard of
	tries  []uint64  // tries[j]: the number of the latest try of peer j heard of
	token  *Token    // the token while this peer holds it, else nil
	trying bool      // our try is out and unanswered
}

func newSinghal(id, n int, _ *config) (machine, error) {
	s := &singhal{id: id, n: n, sv: make([]shState, n), sn: make([]uint64, n), tries: make([]uint64, n)}
	// The staircase: peer i believes that every peer before it may hold
	// the token, so that of any two peers one sends its requests to the
	// other.
	for j := 0; j < id; j++ {
		s.sv[j] = shRequesting
	}
	if id == 0 {
		s.sv[0] = shHolding
		s.token = &Token{LN: make([]uint64, n)}
	}
	return s, nil
}

func (s *singhal) step(ev event, out *output) {
	switch ev.kind {
	case evRequest, evTry:
		if s.sv[s.id] == shHolding {
			s.sv[s.id] = shExecuting // the idle token is here
			out.enter()
			return
		}
		s.sn[s.id]++
		if ev.kind == evTry {
			s.trying = true
			out.broadcast(s.id, s.n, Message{Kind: KindTry, TS: s.sn[s.id]})
			return
		}
		s.sv[s.id] = shRequesting
		for j, st := range s.sv {
			if j != s.id && st == shRequesting {
				out.send(Message{Kind: KindRequest, From: s.id, To: j, TS: s.sn[s.id]})
			}
		}
	case evRelease:
		s.sv[s.id] = shNone
		s.setTSV(s.id, false)
		s.merge()
		s.pass(out)
	case evMessage:
		m := ev.msg
		switch m.Kind {
		case KindRequest:
			s.onRequest(m.From, m.TS, out)
		case KindTry:
			s.onTry(m.From, m.TS, out)
		case KindToken:
			s.onToken(m, out)
		case KindBusy:
			if s.trying && m.TS == s.sn[s.id] {
				s.trying = false
				out.refuse()
			}
		}
	}
}

// onRequest handles request number num of peer j.
func (s *singhal) onRequest(j int, num uint64, out *output) {
	if j < 0 || j >= s.n || j == s.id {
		return // no other peer of this cluster: a transport must not deliver it
	}
	if num <= s.sn[j] {
		return // outdated
	}
	s.sn[j] = num
	switch s.sv[s.id] {
	case shRequesting:
		if s.sv[j] != shRequesting {
			s.sv[j] = shRequesting
			out.send(Message{Kind: KindRequest, From: s.id, To: j, TS: s.sn[s.id]})
		}
	case shHolding:
		s.sv[j] = shRequesting
		s.setTSV(j, true)
		s.token.LN[j] = num
		s.sendToken(j, out)
	default:
		s.sv[j] = shRequesting
	}
}

// onTry handles try number num of peer j: the holder of the idle token
// sends it, a holder inside refuses, and the token records the try as
// answered.
func (s *singhal) onTry(j int, num uint64, out *output) {
	if j < 0 || j >= s.n || j == s.id || num <= s.tries[j] {
		return
	}
	s.tries[j] = num
	// The trier may get the token: as for a request, every peer puts it
	// in state R, and a requesting peer that did not have it there sends
	// it its own request.
	if s.sv[s.id] == shRequesting && s.sv[j] != shRequesting {
		out.send(Message{Kind: KindRequest, From: s.id, To: j, TS: s.sn[s.id]})
	}
	s.sv[j] = shRequesting
	switch {
	case s.token != nil && num <= s.token.LN[j]:
		// Answered already, by a holder before us.
	case s.sv[s.id] == shHolding:
		s.setTSV(j, true)
		s.token.LN[j] = num
		s.sendToken(j, out)
	case s.sv[s.id] == shExecuting:
		s.answerTries(out)
	}
}

// answerTries refuses, as the holder inside, every try no holder has
// answered yet, and marks it answered in the token.
func (s *singhal) answerTries(out *output) {
	for j, num := range s.tries {
		if num > s.token.LN[j] {
			s.token.LN[j] = num
			out.send(Message{Kind: KindBusy, From: s.id, To: j, TS: num})
		}
	}
}

// onToken takes the token and enters on our request or try.
func (s *singhal) onToken(m Message, out *output) {
	if m.Token == nil || len(m.Token.LN) != s.n || len(m.Token.Queue) > s.n {
		return // not a token of this cluster: a transport must not deliver it
	}
	if s.token != nil {
		panic(fmt.Sprintf("dmutex: singhal-heuristic peer %d received a second token from peer %d", s.id, m.From))
	}
	s.token = m.Token.clone()
	if f := m.From; f >= 0 && f < s.n && f != s.id && s.sn[f] <= s.token.LN[f] {
		// The sender keeps us in state R until the token comes back
		// from us, so we may forget it (repair 3), unless we heard of a
		// request of its that the token has not recorded.
		s.sv[f] = shNone
	}
	if s.sv[s.id] != shRequesting && !s.trying {
		s.sv[s.id] = shHolding // never asked for: kept idle (does not happen)
		return
	}
	s.trying = false
	s.sv[s.id] = shExecuting
	out.enter()
	s.answerTries(out)
}

// merge brings this peer's vectors and the token's up to date with each
// other, peer by peer, as the paper's release rule does: where this peer
// has heard of a later request, the token takes its number and state;
// otherwise this peer takes the token's number, and its state if that is
// R. Unlike the paper, it never takes an N over its own R (repair 1).
func (s *singhal) merge() {
	for j := range s.sv {
		switch {
		case s.sn[j] > s.token.LN[j]:
			s.setTSV(j, s.sv[j] == shRequesting)
			s.token.LN[j] = s.sn[j]
		default:
			if s.tsv(j) {
				s.sv[j] = shRequesting
			}
			s.sn[j] = s.token.LN[j]
		}
	}
}

// pass sends the idle token to the first peer after this one, round the
// ring, that the token has in state R; with none, it keeps the token (H).
// The paper chooses among the peers this one has in state R, which after
// its merge are the same (repair 2).
func (s *singhal) pass(out *output) {
	for k := 1; k < s.n; k++ {
		if j := (s.id + k) % s.n; s.tsv(j) {
			s.sendToken(j, out)
			return
		}
	}
	s.sv[s.id] = shHolding
}

func (s *singhal) sendToken(j int, out *output) {
	s.sv[s.id] = shNone
	out.send(Message{Kind: KindToken, From: s.id, To: j, Token: s.token})
	s.token = nil
}

// tsv reports whether the token has peer j in state R.
func (s *singhal) tsv(j int) bool {
	for _, q := range s.token.Queue {
		if q == j {
			return true
		}
	}
	return false
}

// setTSV puts peer j in state R (r) or N in the token, keeping Queue in
// increasing order.
func (s *singhal) setTSV(j int, r bool) {
	q := s.token.Queue
	for i, p := range q {
		switch {
		case p == j && r:
			return
		case p == j:
			s.token.Queue = append(q[:i], q[i+1:]...)
			return
		case p > j && r:
			q = append(q, 0)
			copy(q[i+1:], q[i:])
			q[i] = j
			s.token.Queue = q
			return
		case p > j:
			return
		}
	}
	if r {
		s.token.Queue = append(q, j)
	}
}

// idleViolation reports what this peer still keeps once the cluster is at
// rest, with every request and try answered and nothing in flight.
func (s *singhal) idleViolation() string {
	switch st := s.sv[s.id]; {
	case st == shRequesting || st == shExecuting || s.trying:
		return "keeps a request"
	case (st == shHolding) != (s.token != nil):
		return fmt.Sprintf("is in state %s but holds the token %v", shNames[st], s.token != nil)
	}
	return ""
}

func (s *singhal) hasToken() bool { return s.token != nil }

func (s *singhal) carriesToken(m Message) bool { return m.Kind == KindToken }

func (s *singhal) clone() machine {
	c := *s
	c.sv = append([]shState(nil), s.sv...)
	c.sn = append([]uint64(nil), s.sn...)
	c.tries = append([]uint64(nil), s.tries...)
	c.token = s.token.clone()
	return &c
}

func (s *singhal) assign(src machine) bool {
	o, ok := src.(*singhal)
	if !ok {
		return false
	}
	sv, sn, tries := s.sv, s.sn, s.tries
	*s = *o
	s.sv, s.sn, s.tries = reuse(sv, o.sv), reuse(sn, o.sn), reuse(tries, o.tries)
	s.token = o.token.clone()
	return true
}

func (s *singhal) appendState(b []byte) []byte {
	b = appendInt(b, len(s.sv))
	for _, st := range s.sv {
		b = append(b, byte(st))
	}
	b = appendUints(b, s.sn)
	b = appendUints(b, s.tries)
	b = appendBool(b, s.token != nil)
	if s.token != nil {
		b = appendUints(b, s.token.LN)
		b = appendInts(b, s.token.Queue)
	}
	return appendBool(b, s.trying)
}

func (s *singhal) describe() []StateField {
	var sv strings.Builder
	for _, st := range s.sv {
		sv.WriteString(shNames[st])
	}
	fs := []StateField{
		{"SV", sv.String()},
		{"SN", fmt.Sprint(s.sn)},
	}
	if s.trying {
		fs = append(fs, StateField{"try", "out"})
	}
	if s.token != nil {
		fs = append(fs, StateField{"TSV", describePeers(s.token.Queue)}, StateField{"TSN", fmt.Sprint(s.token.LN)})
	}
	return fs
}
