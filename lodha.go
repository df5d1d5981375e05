package dmutex

import (
	"fmt"
	"slices"
	"strings"
)

// NewLodhaKshemkalyani starts n peers running the fair algorithm of S.
// Lodha and A. Kshemkalyani: entries in (timestamp, id) order, with
// between n-1 and 2(n-1) messages each.
//
// Cost: 2(n-1) messages for an entry alone; fewer under contention, down
// to n-1 requests and one release per entry when every peer asks at once.
// Channels: per-pair FIFO order is required. Crashes: none tolerated; a
// crashed peer blocks every later request.
//
// S. Lodha and A. Kshemkalyani, "A fair distributed mutual exclusion
// algorithm", IEEE Transactions on Parallel and Distributed Systems
// 11(6), 2000.
//
// A peer that wants the critical section numbers its request one above
// the highest request number it has seen, puts it in its local request
// queue and sends it to every other peer. It enters once it has heard
// from every other peer since its request (a request, a reply or a
// release) and its own request heads its queue. A request that arrives
// while the peer waits or is inside, from a peer not heard from since its
// own request, is concurrent with it: it goes into the queue in (number,
// id) order, and stands in for a reply, since both requesters know of
// each other. A request from a peer already heard from is younger: the
// peer answers it with a reply when it leaves. An idle peer replies at
// once. Every reply and release carries the number of the sender's latest
// request, and its receiver drops from its queue every request up to that
// one: they have all been served. On leaving, a peer sends a release (the
// paper's FLUSH) to the peer whose request follows its own in its queue,
// and replies to the younger requests it kept.
//
// So an entry costs n-1 requests, one reply from each peer that was not
// asking concurrently, and one release to the next concurrent requester:
// 2(n-1) alone, and with k peers asking at once from rest k(n-1)
// requests, k(n-k) replies and k-1 releases in all. At saturation, a peer
// that asks again at once is younger than the others' waiting requests,
// which have heard from it, so most of its answers are replies sent on
// leaving, and the cost climbs back towards 2(n-1).
// Synchronization delay: one message (the release or the reply sent on
// leaving); response time at light load: two message delays and the
// critical section.
//
// Fairness: entries follow (timestamp, id) order, so no request starves;
// between a request and its entry each other peer enters at most twice,
// once with an older request and once more with a request made before
// this one reached it (Check: 2(n-1) at n = 3 with two requests per peer,
// n-1 with one).
//
// Channels: a request must not overtake the reply its sender sent before
// it: the receiver would take it for a concurrent request, standing in
// for a reply, where it should answer it when it leaves, and its sender
// would wait for ever (the variant lodha-kshemkalyani-unordered).
//
// This implementation states two rules that the summary above leaves
// implicit, each found necessary by Check (without them a peer waits for
// ever at n = 3): a request carries in Ref the number of its sender's
// previous request, which has been served, so that a request standing in
// for a reply tells what a reply would; and a request older than one
// known to be served, which can only be a late copy of a served one, is
// not queued. Both follow from the paper's ordering argument and cost no
// message. It also adds TryLock, which the paper does not have: a try,
// numbered as a request, goes to every other peer, and each answers at
// once, never keeping it: a reply if it is idle, or waiting with a younger
// request, or trying with a younger try; busy if it is inside or its own
// request or try is older. The try enters on n-1 replies and is refused on
// the first busy, 2(n-1) messages either way. A trying peer keeps a
// younger request it receives as a late one, and replies to it when it
// leaves or is refused; it answers an older one at once. Replies carry in
// Ref the number of the request or try they answer, so that a late reply
// to a refused try counts for nothing.
//
// WithRecovery does not apply.
func NewLodhaKshemkalyani(n int, opts ...Option) (*Cluster, error) {
	return New(LodhaKshemkalyani, n, opts...)
}

// lodha is the Lodha-Kshemkalyani machine. Messages: a request or try
// carries its number in TS, and a request the number of its sender's
// previous request in Ref; a reply carries in TS the number of the
// sender's latest request and in Ref the number of the request or try it
// answers; a release (the paper's FLUSH) carries the sender's request
// number in TS and, in Ref, the number of the request it is sent to; a
// busy carries in Ref the number of the try it refuses.
type lodha struct {
	id, n int

	highest uint64 // highest request or try number seen
	state   raState
	trying  bool   // the outstanding request is a try, not entered yet (raWanted)
	ts      uint64 // number of the outstanding request or try
	seq     uint64 // number of the latest request (not try): what replies and releases carry
	heard   []bool // heard[j]: a request, reply or release of j's came since our request; for a try, j's reply
	nheard  int
	queue   []lkEntry // the local request queue, in (ts, id) order: our request and the concurrent ones
	late    []uint64  // late[j]: number of j's request answered when we leave; 0 if none

	// served is the youngest request known to be served: the latest
	// carried by a reply or release, or our own. Every older request has
	// been served too, since entries follow (number, id) order.
	served lkEntry
}

// lkEntry is one request in a local request queue.
type lkEntry struct {
	ts uint64
	id int
}

func newLodha(id, n int, _ *config) (machine, error) {
	return &lodha{
		id:    id,
		n:     n,
		heard: make([]bool, n),
		late:  make([]uint64, n),
	}, nil
}

func (l *lodha) step(ev event, out *output) {
	switch ev.kind {
	case evRequest, evTry:
		l.highest++
		l.ts = l.highest
		l.state = raWanted
		l.trying = ev.kind == evTry
		clear(l.heard)
		l.nheard = 0
		m := Message{Kind: KindTry, TS: l.ts}
		if !l.trying {
			// Ref: our previous request, served, as a reply would say.
			m = Message{Kind: KindRequest, TS: l.ts, Ref: l.seq}
			l.seq = l.ts
			l.queue = append(l.queue[:0], lkEntry{l.ts, l.id})
		}
		out.broadcast(l.id, l.n, m)
		l.check(out)
	case evRelease:
		if len(l.queue) > 1 {
			// Our request heads the queue (a try's is empty); the next
			// one is told.
			next := l.queue[1]
			out.send(Message{Kind: KindRelease, From: l.id, To: next.id, TS: l.seq, Ref: next.ts})
		}
		l.serve(lkEntry{l.seq, l.id}) // after a try, served already
		l.leave(out)
	case evMessage:
		m := ev.msg
		switch m.Kind {
		case KindRequest:
			l.highest = max(l.highest, m.TS)
			l.onRequest(m, out)
		case KindTry:
			l.highest = max(l.highest, m.TS)
			l.onTry(m, out)
		case KindReply, KindRelease:
			if l.state != raWanted || m.Ref != l.ts {
				return // stale: it answers an earlier request or try
			}
			if !l.heard[m.From] {
				l.hear(m.From)
			}
			l.serve(lkEntry{m.TS, m.From}) // a try has no queue, but learns
			l.check(out)
		case KindBusy:
			if l.trying && m.Ref == l.ts {
				l.leave(out)
				out.refuse()
			}
		}
	}
}

func (l *lodha) hear(j int) {
	l.heard[j] = true
	l.nheard++
}

// onRequest takes j's request: concurrent with ours, late, or answered.
func (l *lodha) onRequest(m Message, out *output) {
	j, t := m.From, m.TS
	switch {
	case l.state == raReleased, l.trying && before(t, j, l.ts, l.id):
		// Idle, or trying with a younger try, which will hear busy.
		out.send(Message{Kind: KindReply, From: l.id, To: j, TS: l.seq, Ref: t})
	case l.trying || l.heard[j]:
		// Younger than ours, or than a try: answered when we leave.
		l.late[j] = t
	default:
		// Concurrent: j knows of our request too, and its request is
		// the word we waited for from j. One older than a request known
		// to be served was served too, and overtook nothing but the
		// release that said so: it is not queued.
		l.hear(j)
		l.serve(lkEntry{m.Ref, j})
		if e := (lkEntry{t, j}); compareLK(e, l.served) > 0 {
			i, _ := slices.BinarySearchFunc(l.queue, e, compareLK)
			l.queue = slices.Insert(l.queue, i, e)
		}
		l.check(out)
	}
}

// onTry answers a try at once: a reply, or busy.
func (l *lodha) onTry(m Message, out *output) {
	j, t := m.From, m.TS
	if l.state == raHeld || (l.state == raWanted && before(l.ts, l.id, t, j)) {
		out.send(Message{Kind: KindBusy, From: l.id, To: j, TS: l.highest, Ref: t})
		return
	}
	out.send(Message{Kind: KindReply, From: l.id, To: j, TS: l.seq, Ref: t})
}

// serve records that request e has been served, and drops from the
// queue every request up to it: they have all been served; never our own.
func (l *lodha) serve(e lkEntry) {
	if e.ts == 0 {
		return // no request yet
	}
	if compareLK(e, l.served) > 0 {
		l.served = e
	}
	drop := 0
	for drop < len(l.queue) && l.queue[drop].id != l.id && compareLK(l.queue[drop], l.served) <= 0 {
		drop++
	}
	l.queue = slices.Delete(l.queue, 0, drop)
}

// leave ends the outstanding request or try and answers the late
// requests.
func (l *lodha) leave(out *output) {
	l.state = raReleased
	l.trying = false
	l.queue = l.queue[:0]
	for j, t := range l.late {
		if t != 0 {
			l.late[j] = 0
			out.send(Message{Kind: KindReply, From: l.id, To: j, TS: l.seq, Ref: t})
		}
	}
}

func (l *lodha) check(out *output) {
	if l.state != raWanted || l.nheard < l.n-1 {
		return
	}
	if !l.trying && l.queue[0].id != l.id {
		return
	}
	l.state = raHeld
	l.trying = false
	out.enter()
}

func compareLK(a, b lkEntry) int {
	switch {
	case before(a.ts, a.id, b.ts, b.id):
		return -1
	case a == b:
		return 0
	}
	return 1
}

// idleViolation reports what this peer still keeps once the cluster is at
// rest.
func (l *lodha) idleViolation() string {
	switch {
	case l.state != raReleased || l.trying:
		return fmt.Sprintf("keeps state %d (trying %v)", l.state, l.trying)
	case len(l.queue) > 0:
		return fmt.Sprintf("keeps queue %v", l.queue)
	case slices.ContainsFunc(l.late, func(t uint64) bool { return t != 0 }):
		return fmt.Sprintf("keeps late requests %v", l.late)
	}
	return ""
}

func (l *lodha) requestTS() uint64 { return l.ts }

func (l *lodha) clone() machine {
	c := *l
	c.heard = slices.Clone(l.heard)
	c.queue = slices.Clone(l.queue)
	c.late = slices.Clone(l.late)
	return &c
}

func (l *lodha) assign(src machine) bool {
	s, ok := src.(*lodha)
	if !ok {
		return false
	}
	heard, queue, late := l.heard, l.queue, l.late
	*l = *s
	l.heard, l.late = reuse(heard, s.heard), reuse(late, s.late)
	l.queue = append(queue[:0], s.queue...)
	return true
}

func (l *lodha) appendState(b []byte) []byte {
	b = appendUint(b, l.highest)
	b = append(b, byte(l.state))
	b = appendBool(b, l.trying)
	b = appendUint(b, l.ts)
	b = appendUint(b, l.seq)
	b = appendBools(b, l.heard)
	b = appendInt(b, len(l.queue))
	for _, e := range l.queue {
		b = appendInt(appendUint(b, e.ts), e.id)
	}
	b = appendUints(b, l.late)
	return appendInt(appendUint(b, l.served.ts), l.served.id)
}

func (l *lodha) describe() []StateField {
	state := [...]string{raReleased: "released", raWanted: "wanted", raHeld: "held"}[l.state]
	queue := make([]string, len(l.queue))
	for i, e := range l.queue {
		queue[i] = fmt.Sprintf("P%d:%d", e.id, e.ts)
	}
	fs := []StateField{
		{"highest", fmt.Sprint(l.highest)},
		{"state", state},
		{"request", describeTS(l.state != raReleased, l.ts)},
		{"heard from", fmt.Sprintf("%d of %d", l.nheard, l.n-1)},
		{"queue", "[" + strings.Join(queue, " ") + "]"},
		{"late", describeStamps(l.late)},
		{"served up to", fmt.Sprintf("P%d:%d", l.served.id, l.served.ts)},
	}
	if l.trying {
		fs = append(fs, StateField{"trying", "true"})
	}
	return fs
}
