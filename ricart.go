package dmutex

import (
	"fmt"
	"slices"
)

// NewRicartAgrawala starts n peers running the algorithm of G. Ricart and
// A. K. Agrawala, "An optimal algorithm for mutual exclusion in computer
// networks", CACM 24(1), 1981.
//
// A peer that wants the critical section stamps a request with its Lamport
// clock and sends it to every other peer; it enters when all n-1 have
// replied. A peer replies at once unless it is inside, or waiting with an
// older request (ties broken by the smaller id): then it defers the reply
// until it leaves, and that deferred reply is the release.
//
// Cost: 2(n-1) messages per entry (n-1 requests, n-1 replies), whatever
// the contention; synchronization delay one message. Channels: safe
// without FIFO order; every reply names, in Message.Ref, the request it
// answers, so a late reply never counts for a later request. Fairness:
// entries follow (timestamp, id) order, so no peer starves. Between a
// request and its entry each other peer enters at most twice: once with a
// request stamped before it, once more before the request reaches it
// (Check: 2(n-1) at n = 2 with four requests per peer and at n = 3 with
// two, n-1 with one). Failures: the
// algorithm assumes reliable peers and channels. A crashed peer never
// replies, so every other peer blocks on its next request (LockContext
// returns at its deadline); a lost request or reply blocks its requester
// the same way; a partition blocks both sides. None of these lets two
// peers in at once.
//
// WithImplicitReplies switches to the implicit-reply variant: a waiting
// peer does not reply to an older request, because its own younger
// request, which the older requester holds, already proves it will wait.
// One entry alone still costs 2(n-1); k concurrent contenders cost
// k(n-1) requests + k(k-1)/2 + k(n-k) replies, one reply per pair of
// contenders instead of two. It is safe without FIFO order, but that exact
// count assumes per-pair FIFO channels: a reply that overtakes its
// sender's request can make the receiver, already done, answer that
// request with a reply of its own.
//
// TryLock sends a try, stamped as a request, to every other peer, and
// every peer answers it at once, never deferring it: a reply if it would
// have replied to a request, busy if it is inside or waiting with an older
// request. The try enters on n-1 replies and is refused on the first busy,
// so it costs 2(n-1) messages either way (n-1 tries, n-1 answers), in both
// variants: a try is always answered explicitly, and a trying peer answers
// an older request explicitly too, since its try may be refused. A peer
// that answered a try keeps nothing for it, and a refused peer sends at
// once the replies it deferred while trying. A lone peer enters with no
// message.
//
// WithRecovery turns on crash exclusion, which needs a failure detector:
// the runtime's (WithUnreachableAfter), or the checker's
// (CheckConfig.Detector). A peer stops waiting for
// the reply of a peer it suspects: while it suspects j, j counts as
// having replied, to the request outstanding and to later ones. It costs
// no message. A suspected peer that turns out alive is served as before:
// its requests are answered or deferred as usual, and the replies
// deferred to it are sent at the release. When j is back (trusted again,
// or reachable again after a cut too short to suspect it), j's real
// reply is needed again if it has not come; but the request, or the
// reply, may have been lost while j was cut off, so the peer sends its
// request to j once more (one message), and j answers it as it would
// have. A peer that suspects more than (n-1)/2 others acts on none of
// its suspicions (see [WithRecovery]): at n = 2 a survivor waits. With a
// perfect detector (only crashed peers are suspected) this is safe, and
// every surviving request is served (Check at n = 3, one crash of any
// peer at any point). With an imperfect one a falsely suspected peer may
// be inside while its suspecter enters, so mutual exclusion can break;
// Check finds the run (docs/checking.md, "Crash recovery, checked"). The public variant ricart-agrawala-naive-exclusion
// stops waiting only for the request outstanding when the suspicion
// comes, and Check finds its deadlock.
func NewRicartAgrawala(n int, opts ...Option) (*Cluster, error) {
	return New(RicartAgrawala, n, opts...)
}

// ricart is the Ricart-Agrawala machine. Messages: REQUEST carries the
// request's timestamp in TS; REPLY carries in Ref the timestamp of the
// request it answers.
type ricart struct {
	id, n    int
	implicit bool // WithImplicitReplies
	recovery bool // WithRecovery: suspected peers count as replied

	clock    uint64 // Lamport clock: highest timestamp seen
	state    raState
	trying   bool     // the outstanding request (raWanted) is a try
	ts       uint64   // timestamp of the outstanding request
	granted  []bool   // granted[j]: j's permission for ts is in
	ngranted int      // how many are in
	deferred []uint64 // deferred[j]: timestamp of j's request we owe a reply, 0 if none

	// seen[j] is the timestamp of the latest request received from j, with
	// implicit replies only. There a request can be granted before it
	// reaches us (our own older request was its permission), so over a
	// reordering network j's next request can overtake it; the older one,
	// arriving late, is stale and must neither be deferred in place of the
	// newer one nor count as a permission.
	seen []uint64

	// suspected[j]: the failure detector suspects j (WithRecovery only).
	suspected []bool
}

type raState uint8

const (
	raReleased raState = iota
	raWanted
	raHeld
)

func newRicart(id, n int, cfg *config) (machine, error) {
	r := &ricart{
		id:       id,
		n:        n,
		implicit: cfg.implicitReplies,
		granted:  make([]bool, n),
		deferred: make([]uint64, n),
	}
	if r.implicit {
		r.seen = make([]uint64, n)
	}
	if cfg.recovery {
		r.recovery = true
		r.suspected = make([]bool, n)
	}
	return r, nil
}

func (r *ricart) step(ev event, out *output) {
	switch ev.kind {
	case evRequest, evTry:
		r.clock++
		r.ts = r.clock
		r.state = raWanted
		r.trying = ev.kind == evTry
		clear(r.granted)
		r.ngranted = 0
		kind := KindRequest
		if r.trying {
			kind = KindTry
		}
		out.broadcast(r.id, r.n, Message{Kind: kind, TS: r.ts})
		r.check(out)
	case evRelease:
		r.state = raReleased
		r.sendDeferred(out)
	case evMessage:
		m := ev.msg
		switch m.Kind {
		case KindRequest, KindTry:
			r.onRequest(m, out)
		case KindReply:
			if r.state == raWanted && m.Ref == r.ts {
				r.grant(m.From, out)
			}
		case KindBusy:
			if r.state == raWanted && r.trying && m.Ref == r.ts {
				// Refused: withdraw, and answer what the try deferred.
				r.state = raReleased
				r.trying = false
				r.sendDeferred(out)
				out.refuse()
			}
		}
	case evSuspect, evTrust:
		if r.recovery {
			r.suspected[ev.msg.From] = ev.kind == evSuspect
			r.check(out)
		}
	case evReached:
		if j := ev.msg.From; r.recovery && r.state == raWanted && !r.granted[j] {
			// j is back, and its real reply is needed; but the request,
			// or the reply, may have been lost while j was cut off. Ask
			// again: j answers a request it already has as it did (or
			// defers it), and a second reply counts once.
			kind := KindRequest
			if r.trying {
				kind = KindTry
			}
			out.send(Message{Kind: kind, From: r.id, To: j, TS: r.ts})
		}
	}
}

// sendDeferred sends every reply deferred to our release.
func (r *ricart) sendDeferred(out *output) {
	for j, t := range r.deferred {
		if t != 0 {
			r.deferred[j] = 0
			out.send(Message{Kind: KindReply, From: r.id, To: j, TS: r.clock, Ref: t})
		}
	}
}

func (r *ricart) onRequest(m Message, out *output) {
	j, t := m.From, m.TS
	r.clock = max(r.clock, t)
	if r.implicit {
		if t < r.seen[j] {
			return // stale: j's newer request is already here
		}
		r.seen[j] = t
	}
	mine := r.state == raHeld || (r.state == raWanted && before(r.ts, r.id, t, j))
	try := m.Kind == KindTry
	switch {
	case mine && try:
		// A try is never deferred, nor taken as a permission: it is
		// refused, and j keeps nothing of it.
		out.send(Message{Kind: KindBusy, From: r.id, To: j, TS: r.clock, Ref: t})
	case mine:
		// We go first: defer the reply to our release. With implicit
		// replies, j's request, older than nothing of ours, is also j's
		// permission: j waits for our reply and sends none itself.
		r.deferred[j] = t
		if r.implicit && r.state == raWanted {
			r.grant(j, out)
		}
	case try || r.trying:
		// A try is answered explicitly; and while we try, our own try is
		// no permission for j, who refuses it rather than count it.
		out.send(Message{Kind: KindReply, From: r.id, To: j, TS: r.clock, Ref: t})
	case r.implicit && r.state == raWanted:
		// j goes first, and our own request, on its way to j or already
		// there, is our permission for j: no reply.
	default:
		out.send(Message{Kind: KindReply, From: r.id, To: j, TS: r.clock, Ref: t})
	}
}

func (r *ricart) grant(j int, out *output) {
	if !r.granted[j] {
		r.granted[j] = true
		r.ngranted++
		r.check(out)
	}
}

func (r *ricart) check(out *output) {
	if r.state == raWanted && (r.ngranted == r.n-1 || r.recovery && r.excused()) {
		r.state = raHeld
		r.trying = false
		out.enter()
	}
}

// excused reports whether every other peer has replied or is suspected.
func (r *ricart) excused() bool {
	for j := range r.n {
		if j != r.id && !r.granted[j] && !r.suspected[j] {
			return false
		}
	}
	return true
}

// idleViolation reports what this peer still keeps once the cluster is at
// rest, with every request and try answered and nothing in flight.
func (r *ricart) idleViolation() string {
	switch {
	case r.state != raReleased || r.trying:
		return fmt.Sprintf("keeps state %d (trying %v)", r.state, r.trying)
	case slices.ContainsFunc(r.deferred, func(t uint64) bool { return t != 0 }):
		return fmt.Sprintf("keeps deferred replies %v", r.deferred)
	}
	return ""
}

func (r *ricart) requestTS() uint64 { return r.ts }

func (r *ricart) clone() machine {
	c := *r
	c.granted = append([]bool(nil), r.granted...)
	c.deferred = append([]uint64(nil), r.deferred...)
	c.seen = append([]uint64(nil), r.seen...)
	c.suspected = append([]bool(nil), r.suspected...)
	return &c
}

func (r *ricart) assign(src machine) bool {
	s, ok := src.(*ricart)
	if !ok {
		return false
	}
	granted, deferred, seen, suspected := r.granted, r.deferred, r.seen, r.suspected
	*r = *s
	r.granted, r.deferred = reuse(granted, s.granted), reuse(deferred, s.deferred)
	r.seen, r.suspected = reuse(seen, s.seen), reuse(suspected, s.suspected)
	return true
}

func (r *ricart) appendState(b []byte) []byte {
	b = appendUint(b, r.clock)
	b = append(b, byte(r.state))
	b = appendBool(b, r.trying)
	b = appendUint(b, r.ts)
	b = appendBools(b, r.granted)
	b = appendUints(b, r.deferred)
	b = appendUints(b, r.seen)
	if r.recovery {
		b = appendBools(b, r.suspected)
	}
	return b
}

func (r *ricart) describe() []StateField {
	state := [...]string{raReleased: "released", raWanted: "wanted", raHeld: "held"}[r.state]
	fs := []StateField{
		{"clock", fmt.Sprint(r.clock)},
		{"state", state},
		{"request", describeTS(r.state != raReleased, r.ts)},
		{"replies in", fmt.Sprintf("%d of %d", r.ngranted, r.n-1)},
		{"deferred", describeStamps(r.deferred)},
	}
	if r.trying {
		fs = append(fs, StateField{"trying", "true"})
	}
	if r.implicit {
		fs = append(fs, StateField{"latest request seen", fmt.Sprint(r.seen)})
	}
	if r.recovery {
		var sus []int
		for j, s := range r.suspected {
			if s {
				sus = append(sus, j)
			}
		}
		fs = append(fs, StateField{"suspected", describePeers(sus)})
	}
	return fs
}
