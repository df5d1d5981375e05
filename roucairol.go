package dmutex

import (
	"fmt"
	"slices"
)

// NewRoucairolCarvalho starts n peers running Ricart and Agrawala's
// algorithm as Carvalho and Roucairol refined it: a peer keeps every
// permission it received until the peer that gave it asks for it again.
//
// Cost: 0 to 2(n-1) messages per entry: two for each permission the peer
// does not hold (a request, a reply), none when it holds them all.
// Channels: safe without FIFO order. Crashes: none tolerated; a crashed
// peer that holds a permission someone needs blocks that peer for ever.
//
// O. S. F. Carvalho and G. Roucairol, "On mutual exclusion in computer
// networks", CACM 26(2), 1983, a technical correspondence on Ricart and
// Agrawala's paper (CACM 24(1), 1981; see [NewRicartAgrawala]).
//
// Each pair of peers shares one permission, held by one of the two or on
// its way in a reply; peer i starts with the permissions of every peer
// j > i, so that peer 0 holds them all. A peer that wants the critical
// section stamps a request with its Lamport clock and sends it to the
// peers whose permission it lacks; it enters when it holds all n-1. A
// peer that is asked for a permission gives it up at once, in a reply,
// unless it is inside or waiting with an older request (ties broken by
// the smaller id): then it keeps the request and answers it when it
// leaves. A waiting peer that gives up a permission it held, to an older
// request, asks for it back at once, with its own request's stamp. So a
// peer that enters again before anybody else asks costs nothing, and one
// entry at a time costs 2m messages when m permissions are elsewhere:
// the first entry of peer i after peer j's costs 2, an entry after
// entries of every other peer 2(n-1). At saturation, every peer asking
// again as soon as it leaves, each entry costs 2(n-1), since a peer that
// leaves gives each permission to the request it held for it; from the
// starting permissions, k peers asking at once cost k(k-1) messages in
// all, one request and one reply per pair of them. Synchronization delay:
// one message (the reply sent on leaving); response time at light load:
// two message delays and the critical section, or the critical section
// alone.
//
// Fairness: entries follow no global order. A peer that holds every
// permission it needs enters without asking anybody, so it may enter
// again and again while an older request is on its way to it; once the
// request has arrived, the peer enters at most once more (the entry it is
// in, or one older than the request) before it gives the permission up.
// So no request starves, and between a request and its entry each other
// peer enters at most once per request it makes (Check: r(n-1) with r
// requests per peer at n = 3 and, with one request, at n = 4).
//
// This implementation departs from the paper in three points, none of
// which changes a count above. A peer has at most one request out to a
// given peer: it asks again only after that one is answered, so a late
// answer to a refused try serves the next request. A request that arrives
// before the permission it asks for (over a reordering network, the reply
// that gives it can be overtaken) is held until the permission arrives.
// And an entry that needs no message does not tick the clock, so that a
// peer holding every permission re-enters in the same state and the
// runtime's fast path can skip its machine.
//
// TryLock enters at once, with no message, when the peer holds every
// permission. Otherwise it sends a try, stamped as a request, to each
// peer whose permission it lacks, and each answers at once, never
// deferring it: the permission, in a reply, if it would give it to a
// request; busy if it is inside or waiting with an older request, or if
// the permission is on its way to it. The try enters when it holds all
// n-1 and is refused on the first busy: 2m messages for m permissions
// lacking, either way. Permissions a refused try received are kept, as
// any permission is, and a trying peer that must give a permission to an
// older request gives it and is refused at once, since that request goes
// first.
//
// WithRecovery does not apply: a permission held by a crashed peer cannot
// be told apart from one on its way.
func NewRoucairolCarvalho(n int, opts ...Option) (*Cluster, error) {
	return New(RoucairolCarvalho, n, opts...)
}

// roucairol is the Roucairol-Carvalho machine. Messages: a request or try
// carries its timestamp in TS; a reply gives the sender's permission and
// carries in Ref the timestamp of the request it answers; a busy carries
// in Ref the timestamp of the try it refuses.
type roucairol struct {
	id, n int

	clock    uint64 // Lamport clock: highest timestamp seen
	state    raState
	trying   bool     // the outstanding request (raWanted) is a try
	ts       uint64   // timestamp of the outstanding request; 0 when released or entered without asking
	perm     []bool   // perm[j]: this peer holds the permission it shares with j
	nperm    int      // how many it holds
	asked    []bool   // asked[j]: a request or try to j is not answered yet
	deferred []uint64 // deferred[j]: timestamp of j's request for our permission, not answered yet; 0 if none
}

func newRoucairol(id, n int, _ *config) (machine, error) {
	r := &roucairol{
		id:       id,
		n:        n,
		perm:     make([]bool, n),
		asked:    make([]bool, n),
		deferred: make([]uint64, n),
	}
	for j := id + 1; j < n; j++ {
		r.perm[j] = true
		r.nperm++
	}
	return r, nil
}

func (r *roucairol) step(ev event, out *output) {
	switch ev.kind {
	case evRequest, evTry:
		r.state = raWanted
		r.trying = ev.kind == evTry
		if r.nperm == r.n-1 {
			r.check(out) // every permission is here: no message, no tick
			return
		}
		r.clock++
		r.ts = r.clock
		for j := range r.n {
			r.ask(j, out)
		}
	case evRelease:
		r.state = raReleased
		r.ts = 0
		r.serveAll(out)
	case evMessage:
		m := ev.msg
		switch m.Kind {
		case KindRequest:
			r.clock = max(r.clock, m.TS)
			r.deferred[m.From] = m.TS
			r.serve(m.From, out)
		case KindTry:
			r.onTry(m, out)
		case KindReply:
			if !r.perm[m.From] {
				r.perm[m.From] = true
				r.nperm++
			}
			r.asked[m.From] = false
			r.serve(m.From, out) // a request held for this permission
			r.check(out)
		case KindBusy:
			r.asked[m.From] = false
			switch {
			case r.state != raWanted:
			case r.trying && m.Ref == r.ts:
				r.withdraw(out)
			default:
				// The busy answers an earlier, refused try: ask now for
				// the request outstanding.
				r.ask(m.From, out)
			}
		}
	}
}

// ask sends the outstanding request or try to j, unless j's permission is
// here or an earlier question to j is still unanswered (its answer will
// do).
func (r *roucairol) ask(j int, out *output) {
	if j == r.id || r.perm[j] || r.asked[j] {
		return
	}
	kind := KindRequest
	if r.trying {
		kind = KindTry
	}
	r.asked[j] = true
	out.send(Message{Kind: kind, From: r.id, To: j, TS: r.ts})
}

// mine reports whether this peer goes before a request (t, j): it is
// inside, or waiting with an older request.
func (r *roucairol) mine(t uint64, j int) bool {
	return r.state == raHeld || (r.state == raWanted && before(r.ts, r.id, t, j))
}

// serve answers j's held request if the permission is here and j goes
// first.
func (r *roucairol) serve(j int, out *output) {
	t := r.deferred[j]
	if t == 0 || !r.perm[j] || r.mine(t, j) {
		return
	}
	r.deferred[j] = 0
	r.give(j, t, out)
}

// serveAll answers every held request that may be answered now.
func (r *roucairol) serveAll(out *output) {
	for j := range r.n {
		r.serve(j, out)
	}
}

// give sends our permission to j, answering j's request or try stamped t.
// A waiting peer asks for it back at once; a trying one is refused, since
// t goes first.
func (r *roucairol) give(j int, t uint64, out *output) {
	r.perm[j] = false
	r.nperm--
	out.send(Message{Kind: KindReply, From: r.id, To: j, TS: r.clock, Ref: t})
	switch {
	case r.state != raWanted:
	case r.trying:
		r.withdraw(out)
	default:
		r.ask(j, out)
	}
}

// onTry answers a try at once: the permission, or busy.
func (r *roucairol) onTry(m Message, out *output) {
	j, t := m.From, m.TS
	r.clock = max(r.clock, t)
	if !r.perm[j] || r.mine(t, j) {
		// Inside, waiting with an older request, or the permission is on
		// its way here: the try cannot win now.
		out.send(Message{Kind: KindBusy, From: r.id, To: j, TS: r.clock, Ref: t})
		return
	}
	r.give(j, t, out)
}

// withdraw refuses the outstanding try and answers the requests it held.
func (r *roucairol) withdraw(out *output) {
	r.state = raReleased
	r.trying = false
	r.ts = 0
	out.refuse()
	r.serveAll(out)
}

func (r *roucairol) check(out *output) {
	if r.state == raWanted && r.nperm == r.n-1 {
		r.state = raHeld
		r.trying = false
		out.enter()
	}
}

// needs appends the peers whose permission this peer lacks: a request
// waits for them alone.
func (r *roucairol) needs(buf []int) []int {
	for j := range r.n {
		if j != r.id && !r.perm[j] {
			buf = append(buf, j)
		}
	}
	return buf
}

// idleViolation reports what this peer still keeps once the cluster is at
// rest: a request, a held request or an unanswered question.
func (r *roucairol) idleViolation() string {
	switch {
	case r.state != raReleased || r.trying:
		return fmt.Sprintf("keeps state %d (trying %v)", r.state, r.trying)
	case slices.ContainsFunc(r.deferred, func(t uint64) bool { return t != 0 }):
		return fmt.Sprintf("keeps requests %v", r.deferred)
	case slices.Contains(r.asked, true):
		return fmt.Sprintf("still asks %v", r.asked)
	}
	return ""
}

func (r *roucairol) clone() machine {
	c := *r
	c.perm = slices.Clone(r.perm)
	c.asked = slices.Clone(r.asked)
	c.deferred = slices.Clone(r.deferred)
	return &c
}

func (r *roucairol) assign(src machine) bool {
	s, ok := src.(*roucairol)
	if !ok {
		return false
	}
	perm, asked, deferred := r.perm, r.asked, r.deferred
	*r = *s
	r.perm, r.asked, r.deferred = reuse(perm, s.perm), reuse(asked, s.asked), reuse(deferred, s.deferred)
	return true
}

func (r *roucairol) appendState(b []byte) []byte {
	b = appendUint(b, r.clock)
	b = append(b, byte(r.state))
	b = appendBool(b, r.trying)
	b = appendUint(b, r.ts)
	b = appendBools(b, r.perm)
	b = appendBools(b, r.asked)
	return appendUints(b, r.deferred)
}

func (r *roucairol) describe() []StateField {
	state := [...]string{raReleased: "released", raWanted: "wanted", raHeld: "held"}[r.state]
	var held, asked []int
	for j := range r.n {
		if r.perm[j] {
			held = append(held, j)
		}
		if r.asked[j] {
			asked = append(asked, j)
		}
	}
	fs := []StateField{
		{"clock", fmt.Sprint(r.clock)},
		{"state", state},
		{"request", describeTS(r.ts != 0, r.ts)},
		{"permissions", describePeers(held)},
		{"asked", describePeers(asked)},
		{"held requests", describeStamps(r.deferred)},
	}
	if r.trying {
		fs = append(fs, StateField{"trying", "true"})
	}
	return fs
}
