package dmutex

import "fmt"

// NewTokenRing starts n peers on a logical ring 0 -> 1 -> ... -> n-1 -> 0
// that pass a single token; the token starts at peer 0, at rest.
//
// The token ring is the classic textbook algorithm (see for example Le
// Lann, "Distributed systems: towards a formal approach", IFIP 1977): the
// holder enters if it wants to, then passes the token to its successor.
// The token message carries, in TS, the number of hops the token has made
// since the start, so the peer it is at is always TS mod n, and, in Ref,
// how many peers in a row have passed it on unused.
//
// Idle policy: the rings of the textbooks pass the token for ever, which
// would spin a CPU in an idle cluster. This ring departs from them: the
// token rests at the peer where it
// completes a full lap that nobody used: it carries the number of peers in
// a row that did not want it, and the n-th such peer keeps it.
// From the hop count and the idle count of its own last pass, every peer
// knows where and at which hop the token will come to rest if nobody uses
// it before. A peer that wants the token and cannot be sure it will come
// by sends one wake message (a request, TS = that hop) to that peer, which
// sends the resting token round the ring again with its idle count reset.
// A wake that arrives before the token it is waiting for makes its
// receiver pass the token on instead of resting it; a wake that arrives
// after the token went by unresting is stale and is dropped. So no request
// is ever stranded behind a resting token, and an idle cluster sends
// nothing at all once the token rests.
//
// Cost: at full load, when every peer wants the critical section, each
// entry costs one hop. At light load, one requester at a time, waking the
// resting token costs one wake message, then the d hops from the resting
// peer to the requester, and the idle lap of n hops after the release:
// n+1+d messages for d >= 1, n+2 when the requester follows its
// predecessor on the ring, at most 2n; the resting peer itself pays only
// the lap, n (the simulator measures these, TestDocNumbers). A request
// made while the lap is still going is served by that lap, at a lower
// cost. A lone requester waits for up to n-1 hops, plus the wake. Channels
// may reorder messages; hop numbers tell current wakes from stale ones.
//
// Fairness: the token visits the peers in ring order, so a waiting peer
// enters before any other peer enters twice. There is no starvation.
// Check finds at most n-1 entries by others between a request and its
// entry, whatever the number of requests (n = 2 with four requests per
// peer, n = 3 with up to three, n = 4 with one).
//
// Failures: the algorithm assumes reliable peers and channels. A crashed
// peer breaks the ring: the token is lost when it is sent to the crashed
// peer, or with it, and from then on every request waits forever
// (LockContext returns at its deadline). A lost token message does the
// same. A partition that drops messages loses the token as soon as it is
// passed across the cut; one that only delays them holds the token at the
// cut until it heals. A lost wake leaves its sender waiting until the
// token next comes by, which is never if the token rests.
//
// TryLock: the holder of the resting token enters with no message. A peer
// that knows where the token would come to rest sends a try there (TS
// that hop); if the token rests there, idle, it comes straight to the
// trier, as if it had passed the peers in between unused (its hop count
// jumps to the trier's next turn), and otherwise the peer answers busy. So
// a try costs 2 messages, entered or refused, plus the idle lap after the
// release as for any entry. A peer that cannot know where the token rests
// (it passed the token on after using or waking it, so the token is on a
// lap in use or bound to come back here) refuses at once with no message:
// a token on the move means someone has priority. The peers the token
// jumped over wait for it as before and are served by the lap after the
// trier's release.
func NewTokenRing(n int, opts ...Option) (*Cluster, error) {
	return New(TokenRing, n, opts...)
}

// tokenRing is one peer of the token ring with a resting token.
type tokenRing struct {
	id, n int

	hold    bool // the token is here: at rest, or in use when inside
	inside  bool
	wanting bool // we want the token and do not have it yet
	trying  bool // with wanting: a try, waiting for the token or a busy

	// While holding: hop is the hop number at which the token arrived.
	hop uint64

	// While not holding: the token comes by here next at hop next, unless
	// it comes to rest first, which it does at hop rest (at peer
	// rest mod n). rest == next when it cannot rest before coming back.
	next, rest uint64
	woken      bool // a wake for the visit at hop next has arrived
}

func newTokenRing(id, n int, _ *config) (machine, error) {
	r := &tokenRing{id: id, n: n}
	if id == 0 {
		r.hold = true // at rest at hop 0
	} else {
		r.next = uint64(id) // the token's first visit here
		r.rest = 0          // it rests at peer 0, hop 0
	}
	return r, nil
}

func (r *tokenRing) step(ev event, out *output) {
	switch ev.kind {
	case evRequest:
		if r.hold {
			r.inside = true
			out.enter()
			return
		}
		r.wanting = true
		if r.rest != r.next {
			// The token may come to rest before it comes by: wake it.
			out.send(Message{Kind: KindRequest, From: r.id, To: r.peerAt(r.rest), TS: r.rest})
		}
	case evTry:
		switch {
		case r.hold:
			r.inside = true
			out.enter()
		case r.rest == r.next:
			out.refuse()
		default:
			r.wanting, r.trying = true, true
			out.send(Message{Kind: KindTry, From: r.id, To: r.peerAt(r.rest), TS: r.rest})
		}
	case evRelease:
		r.inside = false
		if r.n > 1 {
			r.pass(0, out)
		}
	case evMessage:
		m := ev.msg
		switch m.Kind {
		case KindToken:
			r.onToken(m, out)
		case KindRequest:
			r.onWake(m.TS, out)
		case KindTry:
			r.onTry(m.From, m.TS, out)
		case KindBusy:
			// The answer to our try names the hop it asked about; our
			// rest only changes when we pass the token, after entering.
			if r.trying && m.TS == r.rest {
				r.wanting, r.trying = false, false
				out.refuse()
			}
		}
	}
}

// onTry answers peer j's try, sent for hop k: the resting token goes
// straight to j, at the hop of j's next turn, and anything else is busy.
func (r *tokenRing) onTry(j int, k uint64, out *output) {
	if !r.hold || r.inside {
		out.send(Message{Kind: KindBusy, From: r.id, To: j, TS: k})
		return
	}
	skip := uint64((j - r.id + r.n) % r.n)
	r.hold = false
	out.send(Message{Kind: KindToken, From: r.id, To: j, TS: r.hop + skip})
	// The trier uses the token, so it comes back round after its release
	// without resting first.
	r.next = r.hop + uint64(r.n)
	r.rest = r.next
}

func (r *tokenRing) onToken(m Message, out *output) {
	if r.hold {
		panic(fmt.Sprintf("dmutex: token-ring peer %d received a second token from peer %d", r.id, m.From))
	}
	r.hold = true
	r.hop = m.TS
	woken := r.woken
	r.woken = false
	switch idle := m.Ref + 1; {
	case r.wanting:
		r.wanting, r.trying = false, false
		r.inside = true
		out.enter()
	case idle < uint64(r.n):
		r.pass(idle, out)
	case woken:
		// Someone asked for the token while it was on its way to rest
		// here: send it round again instead.
		r.pass(0, out)
	default:
		// A full lap unused: the token rests here.
	}
}

// onWake handles a wake for the token's visit at hop k.
func (r *tokenRing) onWake(k uint64, out *output) {
	switch {
	case r.hold && !r.inside && k == r.hop:
		r.pass(0, out) // resting here since hop k: send it round
	case !r.hold && k >= r.next:
		r.woken = true // the token has not got here yet: do not rest it
	default:
		// The token passed here at hop k without resting, or is in use
		// and will go round after the release: it will reach the waker
		// anyway.
	}
}

// pass sends the token to the successor, after idle consecutive unused
// hops ending here.
func (r *tokenRing) pass(idle uint64, out *output) {
	r.hold = false
	out.send(Message{Kind: KindToken, From: r.id, To: (r.id + 1) % r.n, TS: r.hop + 1, Ref: idle})
	r.next = r.hop + uint64(r.n)
	r.rest = r.hop + uint64(r.n) - idle
}

// idleViolation reports what this peer still keeps once the cluster is at
// rest, with every request and try answered and nothing in flight.
func (r *tokenRing) idleViolation() string {
	if r.wanting || r.trying || r.inside {
		return "keeps a request"
	}
	return ""
}

func (r *tokenRing) peerAt(hop uint64) int { return int(hop % uint64(r.n)) }

func (r *tokenRing) hasToken() bool { return r.hold }

// carriesToken: the token travels as KindToken, with its hop and idle
// counts.
func (r *tokenRing) carriesToken(m Message) bool { return m.Kind == KindToken }

func (r *tokenRing) clone() machine {
	c := *r
	return &c
}

func (r *tokenRing) appendState(b []byte) []byte {
	b = appendBool(b, r.hold)
	b = appendBool(b, r.inside)
	b = appendBool(b, r.wanting)
	b = appendBool(b, r.trying)
	if r.hold {
		return appendUint(b, r.hop)
	}
	b = appendUint(b, r.next)
	b = appendUint(b, r.rest)
	return appendBool(b, r.woken)
}

func (r *tokenRing) describe() []StateField {
	fs := []StateField{{"token", fmt.Sprint(r.hold)}, {"wanting", fmt.Sprint(r.wanting)}}
	if r.trying {
		fs = append(fs, StateField{"trying", "true"})
	}
	if r.hold {
		return append(fs, StateField{"arrived at hop", fmt.Sprint(r.hop)})
	}
	return append(fs, StateField{"next visit at hop", fmt.Sprint(r.next)}, StateField{"rests at hop", fmt.Sprint(r.rest)},
		StateField{"woken", fmt.Sprint(r.woken)})
}
