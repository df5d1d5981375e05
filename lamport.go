package dmutex

import (
	"fmt"
	"slices"
)

// NewLamport starts n peers running the mutual exclusion algorithm of L.
// Lamport, "Time, clocks, and the ordering of events in a distributed
// system", CACM 21(7), 1978.
//
// Every peer keeps a replica of one request queue ordered by (timestamp,
// id). A requester stamps its request with its Lamport clock and sends it
// to all; every receiver queues it and replies. A peer enters when its own
// request heads its queue and it has received, from every other peer, a
// message stamped later than its request. On leaving it broadcasts a
// release, and every peer drops the request from its queue.
//
// Cost: 3(n-1) messages per entry (request, reply and release to each other
// peer), whatever the contention. Channels: per-pair FIFO order is
// required. The entry rule reads "a later message from j" as "no older
// request from j is still on its way", which only FIFO channels guarantee;
// over reordering channels two peers can enter at once (the model checker
// shows the trace). The in-memory transport and the gRPC transport keep
// per-pair FIFO order. Fairness: entries follow (timestamp, id) order,
// and Check finds no starvation. Between a request and its entry each
// other peer enters at most twice: once with a request stamped before it,
// once more before its messages arrive (Check: 2(n-1) at n = 2 with up to
// four requests per peer, n-1 at n = 3 with one).
// Failures: assumes reliable peers and channels. A crashed peer stops
// replying, so every later request blocks (LockContext returns at its
// deadline); a lost reply blocks its requester unless a later message
// from the replier masks it; a lost release blocks the peer that missed
// it; a partition blocks both sides. None of these lets two peers in at
// once, but a lost request can: its sender may enter on the later
// messages of a peer that never queued the request, while that peer
// enters too (see TestSimulationLamportLostRequestBreaksSafety).
//
// TryLock sends a try, stamped as a request, to every other peer. A peer
// that is inside, or has an older request in its queue, answers busy and
// does not queue the try; any other peer queues it and replies. The try
// enters when all n-1 have replied (an older request would have made its
// sender answer busy) and is refused on the first busy; a refused try
// broadcasts a release at once, which takes it out of every queue. So
// a try costs 3(n-1) messages, entered or refused (tries, answers,
// releases). A lone peer enters with no message.
func NewLamport(n int, opts ...Option) (*Cluster, error) {
	return New(Lamport, n, opts...)
}

// lamport is the Lamport machine. Every message carries the sender's clock
// in TS; a REQUEST's TS is the request's timestamp.
type lamport struct {
	id, n int

	clock   uint64
	queue   []uint64 // queue[j]: timestamp of j's request in our queue, 0 if none
	last    []uint64 // last[j]: timestamp of the latest message received from j
	wanting bool     // our request is queued and we are not inside yet
	trying  bool     // with wanting: our request is a try
	answers int      // replies to our try so far
	held    bool
	ts      uint64 // timestamp of our latest request
}

func newLamport(id, n int, _ *config) (machine, error) {
	return &lamport{id: id, n: n, queue: make([]uint64, n), last: make([]uint64, n)}, nil
}

func (l *lamport) step(ev event, out *output) {
	switch ev.kind {
	case evRequest, evTry:
		l.clock++
		l.ts = l.clock
		l.queue[l.id] = l.ts
		l.wanting = true
		l.trying = ev.kind == evTry
		l.answers = 0
		kind := KindRequest
		if l.trying {
			kind = KindTry
		}
		out.broadcast(l.id, l.n, Message{Kind: kind, TS: l.ts})
	case evRelease:
		l.held = false
		l.queue[l.id] = 0
		l.clock++
		out.broadcast(l.id, l.n, Message{Kind: KindRelease, TS: l.clock})
	case evMessage:
		m := ev.msg
		j := m.From
		l.clock = max(l.clock, m.TS) + 1
		l.last[j] = m.TS
		switch m.Kind {
		case KindRequest:
			l.queue[j] = m.TS
			out.send(Message{Kind: KindReply, From: l.id, To: j, TS: l.clock})
		case KindTry:
			if l.ahead(m.TS, j) {
				out.send(Message{Kind: KindBusy, From: l.id, To: j, TS: l.clock, Ref: m.TS})
				break
			}
			l.queue[j] = m.TS
			out.send(Message{Kind: KindReply, From: l.id, To: j, TS: l.clock, Ref: m.TS})
		case KindReply:
			if l.trying && m.Ref == l.ts {
				l.answers++
			}
		case KindBusy:
			if l.trying && m.Ref == l.ts {
				l.refuse(out)
				return
			}
		case KindRelease:
			l.queue[j] = 0
		}
	}
	l.check(out)
}

// ahead reports whether this peer is inside or has a request queued that
// goes before request (t, j).
func (l *lamport) ahead(t uint64, j int) bool {
	if l.held {
		return true
	}
	for k, q := range l.queue {
		if q != 0 && before(q, k, t, j) {
			return true
		}
	}
	return false
}

// refuse withdraws our try: the release takes it out of every queue.
func (l *lamport) refuse(out *output) {
	l.wanting, l.trying = false, false
	l.queue[l.id] = 0
	l.clock++
	out.broadcast(l.id, l.n, Message{Kind: KindRelease, TS: l.clock})
	out.refuse()
}

// check enters when our request heads the queue and every other peer has
// sent us a message stamped later than it. The second rule is sound only
// over FIFO channels: it means no older request from that peer can still
// be on its way.
func (l *lamport) check(out *output) {
	if !l.wanting {
		return
	}
	if l.trying {
		// n-1 replies are enough: each is stamped later than the try,
		// and no older request can be in our queue, since its sender
		// queued it before our try reached it and so answered busy.
		if l.answers < l.n-1 {
			return
		}
		l.wanting, l.trying = false, false
		l.held = true
		out.enter()
		return
	}
	for j, t := range l.queue {
		if j != l.id && t != 0 && before(t, j, l.ts, l.id) {
			return
		}
		if j != l.id && l.last[j] <= l.ts {
			return
		}
	}
	l.wanting = false
	l.held = true
	out.enter()
}

// idleViolation reports what this peer still keeps once the cluster is at
// rest, with every request and try answered and nothing in flight.
func (l *lamport) idleViolation() string {
	switch {
	case l.wanting || l.trying || l.held:
		return "keeps a request"
	case slices.ContainsFunc(l.queue, func(t uint64) bool { return t != 0 }):
		return fmt.Sprintf("keeps queued requests %v", l.queue)
	}
	return ""
}

func (l *lamport) requestTS() uint64 { return l.ts }

func (l *lamport) clone() machine {
	c := *l
	c.queue = append([]uint64(nil), l.queue...)
	c.last = append([]uint64(nil), l.last...)
	return &c
}

func (l *lamport) assign(src machine) bool {
	s, ok := src.(*lamport)
	if !ok {
		return false
	}
	queue, last := l.queue, l.last
	*l = *s
	l.queue, l.last = reuse(queue, s.queue), reuse(last, s.last)
	return true
}

func (l *lamport) appendState(b []byte) []byte { return l.appendStateIn(b, false, nil) }

// appendStateIn leaves out of the encoding what no future event reads;
// two states that differ only there behave the same, and the checker
// counts them once. Two invariants carry the argument: the clock is at
// least every stamp received (last[j] and queue[j] for j != id), and a
// request is stamped above the clock, so a new request starts later than
// every stamp the peer holds.
//
//   - ts is read only while a request or try waits (the entry rule, the
//     replies to a try) or the peer is inside (by the world's order
//     check), and each request overwrites it; answers only while a try
//     waits, and each try resets it.
//   - last[j] is read only by the entry rule of a waiting request (not a
//     try), as "j sent a message stamped later than the request", and each
//     message from j overwrites it; at a new request that bit is clear for
//     every j. So it is encoded as that bit, and not at all otherwise.
//   - queue[j] is read by the entry rule, as "j's request goes before
//     ours", by a try's arrival (ahead compares it with the try's stamp),
//     and as "queued or not" at rest. Once no try will be made or
//     delivered again (noTries), it is encoded as queued or not and, while
//     a request waits, that bit of the entry rule: at a new request every
//     queued request goes before it.
//
// Every stamp is used only through <, max and +1, so the world renames
// them in order (see clockMachine and stampMap); 0 stays "none" in queue.
func (l *lamport) appendStateIn(b []byte, noTries bool, sm *stampMap) []byte {
	waits := l.wanting && !l.trying
	// The flags come first: they say what follows.
	b = appendBool(b, l.wanting)
	b = appendBool(b, l.trying)
	b = appendBool(b, l.held)
	b = appendBool(b, noTries)
	b = appendUint(b, sm.of(l.clock))
	if l.wanting || l.held {
		b = appendUint(b, sm.of(l.ts))
	}
	if l.trying {
		b = appendInt(b, l.answers)
	}
	for j, t := range l.queue {
		switch {
		case t == 0:
			b = append(b, 0)
		case !noTries:
			b = appendUint(b, sm.of(t)+1)
		case j != l.id && waits && before(t, j, l.ts, l.id):
			b = append(b, 2)
		default:
			b = append(b, 1)
		}
	}
	if waits {
		for j, t := range l.last {
			b = appendBool(b, j != l.id && t > l.ts)
		}
	}
	return b
}

// appendStamps appends the stamps appendStateIn encodes.
func (l *lamport) appendStamps(s []uint64, noTries bool) []uint64 {
	s = append(s, l.clock)
	if l.wanting || l.held {
		s = append(s, l.ts)
	}
	if !noTries {
		for _, t := range l.queue {
			if t != 0 {
				s = append(s, t)
			}
		}
	}
	return s
}

// entryEvents: a request or try, its n-1 deliveries, the n-1 deliveries
// of the replies (or busy answers) they cause, the leave or refusal, and
// the n-1 deliveries of its release.
func (l *lamport) entryEvents(n int) int { return 3*(n-1) + 2 }

// carriesTry: a try goes out as KindTry, and its delivery compares its
// stamp with the queued ones (ahead), which noTries lets the encoding
// forget; its busy answers and replies compare only with the trier's own.
func (l *lamport) carriesTry(m Message) bool { return m.Kind == KindTry }

func (l *lamport) describe() []StateField {
	fs := []StateField{
		{"clock", fmt.Sprint(l.clock)},
		{"request", describeTS(l.wanting || l.held, l.ts)},
		{"queue", describeStamps(l.queue)},
		{"last heard", fmt.Sprint(l.last)},
	}
	if l.trying {
		fs = append(fs, StateField{"try replies in", fmt.Sprintf("%d of %d", l.answers, l.n-1)})
	}
	return fs
}
