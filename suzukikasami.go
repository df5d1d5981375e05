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
		}
	}
}

// answerTries refuses, as the token's holder that is inside, every try
// that no holder has answered yet, and marks it satisfied in the token.
func (s *suzukiKasami) answerTries(out *output) {
	t := s.token
	for j, try := range s.tries {
		if try && j != s.id && s.rn[j] == t.LN[j]+1 {
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
	if s.rn[j] == s.token.LN[j]+1 {
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
	if s.token != nil {
		panic(fmt.Sprintf("dmutex: suzuki-kasami peer %d received a second token from peer %d", s.id, m.From))
	}
	s.token = m.Token.clone()
	if s.wanting {
		s.wanting, s.trying = false, false
		s.inside = true
		out.enter()
		s.answerTries(out)
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
// unsatisfied request, and hands the token to the head of the queue.
func (s *suzukiKasami) release(out *output) {
	s.inside = false
	t := s.token
	t.LN[s.id] = s.rn[s.id]
	if s.queued == nil {
		s.queued = make([]bool, s.n)
	}
	for _, j := range t.Queue {
		s.queued[j] = true
	}
	for k := 1; k < s.n; k++ {
		j := (s.id + k) % s.n
		if !s.queued[j] && s.rn[j] == t.LN[j]+1 {
			t.Queue = append(t.Queue, j)
		}
	}
	for _, j := range t.Queue {
		s.queued[j] = false
	}
	if len(t.Queue) > 0 {
		j := t.Queue[0]
		t.Queue = t.Queue[1:]
		s.sendToken(j, out)
	}
}

// sendToken gives the token away; this machine never touches it again.
func (s *suzukiKasami) sendToken(j int, out *output) {
	out.send(Message{Kind: KindToken, From: s.id, To: j, Token: s.token})
	s.token = nil
}

// idleViolation reports what this peer still keeps once the cluster is at
// rest, with every request and try answered and nothing in flight.
func (s *suzukiKasami) idleViolation() string {
	switch {
	case s.wanting || s.trying || s.inside:
		return "keeps a request"
	case s.token != nil && len(s.token.Queue) > 0:
		return fmt.Sprintf("keeps token queue %v", s.token.Queue)
	}
	return ""
}

func (s *suzukiKasami) hasToken() bool { return s.token != nil }

func (s *suzukiKasami) clone() machine {
	c := *s
	c.rn = append([]uint64(nil), s.rn...)
	c.tries = append([]bool(nil), s.tries...)
	c.token = s.token.clone()
	c.queued = nil
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
	return appendBool(b, s.inside)
}

func (s *suzukiKasami) describe() []Field {
	fs := []Field{
		{"RN", fmt.Sprint(s.rn)},
		{"wanting", fmt.Sprint(s.wanting)},
		{"token", fmt.Sprint(s.token != nil)},
	}
	if s.trying {
		fs = append(fs, Field{"trying", "true"})
	}
	if slices.Contains(s.tries, true) {
		fs = append(fs, Field{"tries", fmt.Sprint(s.tries)})
	}
	if s.token != nil {
		fs = append(fs, Field{"LN", fmt.Sprint(s.token.LN)}, Field{"token queue", describePeers(s.token.Queue)})
	}
	return fs
}
