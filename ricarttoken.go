package dmutex

import "fmt"

// NewRicartAgrawalaToken starts n peers running Ricart and Agrawala's
// token algorithm; the token starts at peer 0.
//
// Messages per entry: 0 at the holder of the idle token, otherwise n
// (n-1 requests and the token). Channels may reorder messages. A crashed
// holder or a lost token stops every later entry, and a lost request
// may wait for ever; there is no recovery (WithRecovery is refused).
//
// Ricart and Agrawala, "Author's response to 'On mutual exclusion in
// computer networks' by Carvalho and Roucairol", Communications of the
// ACM 26(2), 1983, where they gave this token algorithm, the ancestor of
// Suzuki and Kasami's. Every peer keeps, for each peer, the number of the
// latest request it has heard of; the token carries, for each peer, the
// number of its last request served (in Token.LN; the token has no
// queue). A request is a request message (TS its number) to every other
// peer. The holder, when it leaves, records its own request as served and
// searches the peers after it, i+1, ..., n-1, 0, ..., i-1, for the first
// whose latest request is above the one served, and sends it the token
// (a token message); if none asks, it keeps the token, and sends it at
// once to the next request that arrives above the one served. Raynal's
// presentation stamps requests with a Lamport clock; each peer's own
// request count orders that peer's requests just as well, which is all
// the search compares, and keeps the state of the model checker finite.
//
// Cost: an entry by the holder of the idle token sends nothing; any
// other costs n-1 requests and one token, n messages, whatever the load:
// one entry at a time, or every peer asking again the moment it leaves
// (TestRicartAgrawalaTokenCounts). The synchronization delay is one
// message, and a lone request waits two, the request and the token
// (TestTimedTextbook). An outdated request, one that arrives after the
// entry it asked for, is at most the number served and never moves the
// token (the variant ricart-agrawala-token-outdated shows why).
//
// Fairness: the search starts after the leaving holder and goes round
// once, so once every waiting request has reached every peer, the token
// serves them in ring order, each before any peer enters twice; there is
// no starvation. The token carries no queue: a request still on its way
// to the holder is not seen, and while it travels another peer may enter
// as often as it requests (Check finds (n-1)·r entries by others
// between a request and its entry for r requests per peer: n = 3 with
// r = 1 and 2, n = 2 with r = 4, n = 4 with r = 1).
//
// Failures: the algorithm assumes reliable peers and channels. A peer
// that crashes holding the token, even idle, or a token message that is
// lost, leaves the cluster without a token, and every later request from
// another peer waits forever (LockContext returns at its deadline). A
// peer that crashes without the token does no harm, unless the token is
// sent to serve a request of its. A request is never sent twice: a lost
// one is served only if a holder that saw it passes the token to it, but
// every later request is served (the failure table).
//
// TryLock: as for [NewSuzukiKasami]: the holder of the idle token enters
// with no message; any other peer sends a try (TS its next request
// number) to every other peer, and exactly one peer answers it: the
// holder of the idle token with the token, or a holder that is inside,
// or that receives the token for its own request, with busy, marking
// the try served in the token so that no later holder answers or serves
// it. So a try costs n messages, entered or refused.
func NewRicartAgrawalaToken(n int, opts ...Option) (*Cluster, error) {
	return New(RicartAgrawalaToken, n, opts...)
}

// ricartToken is one peer of Ricart and Agrawala's token algorithm. As in
// suzukiKasami, a token received is copied, never adopted.
type ricartToken struct {
	id, n int

	req     []uint64 // req[j]: number of the latest request heard of from peer j
	tries   []bool   // tries[j]: request req[j] is a try
	token   *Token   // the token while this peer holds it, else nil
	wanting bool     // our request is out and the token has not come
	trying  bool     // with wanting: our request is a try
	inside  bool     // in the critical section (always with the token)
}

func newRicartToken(id, n int, _ *config) (machine, error) {
	r := &ricartToken{id: id, n: n, req: make([]uint64, n), tries: make([]bool, n)}
	if id == 0 {
		r.token = &Token{LN: make([]uint64, n)}
	}
	return r, nil
}

func (r *ricartToken) step(ev event, out *output) {
	switch ev.kind {
	case evRequest, evTry:
		if r.token != nil {
			r.inside = true // the token is here and idle
			out.enter()
			return
		}
		r.req[r.id]++
		r.wanting, r.trying = true, ev.kind == evTry
		kind := KindRequest
		if r.trying {
			kind = KindTry
		}
		out.broadcast(r.id, r.n, Message{Kind: kind, TS: r.req[r.id]})
	case evRelease:
		r.inside = false
		r.token.LN[r.id] = r.req[r.id]
		r.pass(out)
	case evMessage:
		m := ev.msg
		switch m.Kind {
		case KindRequest, KindTry:
			r.onRequest(m.From, m.TS, m.Kind == KindTry, out)
		case KindToken:
			r.onToken(m, out)
		case KindBusy:
			if r.trying && m.TS == r.req[r.id] {
				r.wanting, r.trying = false, false
				out.refuse()
			}
		}
	}
}

// onRequest records request num of peer j; the holder of the idle token
// serves it if it is above the one served, and a holder inside refuses
// a try.
func (r *ricartToken) onRequest(j int, num uint64, try bool, out *output) {
	if j < 0 || j >= r.n || j == r.id {
		return // no other peer of this cluster: a transport must not deliver it
	}
	if num > r.req[j] {
		r.req[j], r.tries[j] = num, try
	}
	switch {
	case r.token == nil:
	case r.inside:
		r.answerTries(out)
	default:
		r.pass(out)
	}
}

// answerTries refuses, as the holder inside, every try no holder has
// answered yet, and marks it served in the token.
func (r *ricartToken) answerTries(out *output) {
	for j, try := range r.tries {
		if try && r.req[j] > r.token.LN[j] {
			r.token.LN[j] = r.req[j]
			out.send(Message{Kind: KindBusy, From: r.id, To: j, TS: r.req[j]})
		}
	}
}

// onToken takes the token and enters on our request, refusing the tries
// that wait; a token nobody here asked for stays idle.
func (r *ricartToken) onToken(m Message, out *output) {
	if m.Token == nil || len(m.Token.LN) != r.n || len(m.Token.Queue) != 0 {
		return // not a token of this cluster: a transport must not deliver it
	}
	if r.token != nil {
		panic(fmt.Sprintf("dmutex: ricart-agrawala-token peer %d received a second token from peer %d", r.id, m.From))
	}
	r.token = m.Token.clone()
	if r.wanting {
		r.wanting, r.trying = false, false
		r.inside = true
		out.enter()
		r.answerTries(out)
	}
}

// pass sends the idle token to the first peer after this one, round the
// ring, whose latest request is above the one served; with none, it
// keeps the token.
func (r *ricartToken) pass(out *output) {
	for k := 1; k < r.n; k++ {
		j := (r.id + k) % r.n
		if r.req[j] > r.token.LN[j] {
			out.send(Message{Kind: KindToken, From: r.id, To: j, Token: r.token})
			r.token = nil
			return
		}
	}
}

// idleViolation reports what this peer still keeps once the cluster is at
// rest, with every request and try answered and nothing in flight.
func (r *ricartToken) idleViolation() string {
	if r.wanting || r.inside {
		return "keeps a request"
	}
	return ""
}

func (r *ricartToken) hasToken() bool { return r.token != nil }

func (r *ricartToken) carriesToken(m Message) bool { return m.Kind == KindToken }

func (r *ricartToken) clone() machine {
	c := *r
	c.req = append([]uint64(nil), r.req...)
	c.tries = append([]bool(nil), r.tries...)
	c.token = r.token.clone()
	return &c
}

func (r *ricartToken) assign(src machine) bool {
	s, ok := src.(*ricartToken)
	if !ok {
		return false
	}
	req, tries := r.req, r.tries
	*r = *s
	r.req, r.tries = reuse(req, s.req), reuse(tries, s.tries)
	r.token = s.token.clone()
	return true
}

func (r *ricartToken) appendState(b []byte) []byte {
	b = appendUints(b, r.req)
	b = appendBools(b, r.tries)
	b = appendBool(b, r.token != nil)
	if r.token != nil {
		b = appendUints(b, r.token.LN)
	}
	b = appendBool(b, r.wanting)
	b = appendBool(b, r.trying)
	return appendBool(b, r.inside)
}

func (r *ricartToken) describe() []StateField {
	fs := []StateField{
		{"request", fmt.Sprint(r.req)},
		{"wanting", fmt.Sprint(r.wanting)},
		{"token", fmt.Sprint(r.token != nil)},
	}
	if r.trying {
		fs = append(fs, StateField{"trying", "true"})
	}
	if r.token != nil {
		fs = append(fs, StateField{"token served", fmt.Sprint(r.token.LN)})
	}
	return fs
}
