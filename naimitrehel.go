package dmutex

import "fmt"

// NewNaimiTrehel starts n peers running Naimi and Trehel's path-reversal
// token algorithm; the token starts at peer 0, the root of a star.
//
// Messages per entry: 0 at the idle token's holder, otherwise the request's
// hops plus one token, O(log n) on average and at most n. Channels may
// reorder messages. A crashed peer, a lost request or a lost token stops
// every request that its path or the token's queue leads through it;
// there is no recovery (WithRecovery is refused).
//
// Naimi, Trehel and Arnold, "A log(N) distributed mutual exclusion
// algorithm based on path reversal", Journal of Parallel and Distributed
// Computing 34(1), 1996 (first published by Naimi and Trehel in 1987).
// Every peer keeps LAST, its guess of the token's latest requester (none
// for the root of the tree those pointers form), and NEXT, the peer to
// hand the token to when it leaves. A request (a request message whose Ref
// is the requester's id) follows the LAST pointers to the root, and every
// peer it passes points its LAST at the requester: the path is reversed
// and the requester becomes the new root. The root, if it holds the idle
// token, sends the token (a token message without data) to the requester;
// if it is inside or waiting itself, it sets NEXT to the requester, so
// that the NEXT pointers queue the waiting peers in the order their
// requests reached the root.
//
// Cost: an entry by the root that holds the idle token sends nothing; any
// other entry sends its request along the LAST path to the root and then
// one token, so h+1 messages for a path of h hops. Every rooted tree over
// the n peers is reachable, and over every reachable tree and every
// requester other than its root, one entry at a time costs between
// log2 n and log2 n + 1 messages on average, and n at worst, a path
// through every other peer (TestNaimiTrehelMeanCost, by exploration, for
// n = 2 to 7). The synchronization delay is one message: the token goes
// from the leaving peer straight to NEXT. Under contention a request
// often stops early, at a peer that requested before it, and the cost
// per entry stays below the light-load cost's worst case (the bench
// table's heavy-load column).
//
// Fairness: the NEXT pointers form one FIFO queue, in the order in which
// requests reach the root, and every request is served after finitely
// many entries by others; there is no starvation. Entries are not in
// request order: while a request follows its path, the path is reversed
// by later requests it has not yet passed, and those may reach the root
// first, so a request can be overtaken by each other peer as often as
// that peer requests (Check finds (n-1)·r entries by others between a
// request and its entry for r requests per peer: n = 3 with r = 1 to 3,
// n = 2 with r = 4, n = 4 with r = 1 and 2).
//
// Failures: the algorithm assumes reliable peers and channels; the
// paper's fault-tolerant extension is not implemented. A lost token
// stops every later entry. A lost request leaves its requester waiting
// for ever, and, since the peers it passed point at the requester, every
// later request that reaches it waits behind it. A crashed peer loses the
// token if it held it or was sent it, breaks the NEXT chain if a waiting
// peer was queued behind it, and swallows every request that the LAST
// pointers lead to it: when peer 0, the first root, crashes idle, no
// request made after it is ever served (the failure table). A partition
// blocks every peer whose path leads across it.
//
// TryLock: the root that holds the idle token enters with no message.
// Any other peer sends a try (Ref its id) along the LAST pointers, which
// the peers it passes do not reverse; the root answers: with the token
// if it holds it idle (the try enters, and the root points its LAST at
// it), busy otherwise, since it is inside or a request queued there goes
// first. So a try costs h+1 messages for a path of h hops, entered or
// refused, and a refused try leaves every pointer as it was. Until its
// answer comes, the trying peer cannot tell whether it is the new root:
// it holds back the requests and tries that reach it meanwhile, and
// handles them, as if they arrived then, once the answer is in. The
// paper has no TryLock; without that hold, a request that the root sends
// on to the trier can overtake the token there and be forwarded back to
// the root, whose own request is then lost (Check finds it at n = 3 over
// a reordering network).
func NewNaimiTrehel(n int, opts ...Option) (*Cluster, error) {
	return New(NaimiTrehel, n, opts...)
}

// naimiTrehel is one peer of Naimi and Trehel's algorithm.
type naimiTrehel struct {
	id, n int

	last       int   // the probable owner, -1 for the root
	next       int   // the peer to pass the token to at release, or -1
	token      bool  // this peer holds the token
	requesting bool  // our request is out, or we are inside on it or on a try
	trying     bool  // our try is out and unanswered
	held       []int // the requests (a requester's id) and tries (n + its id) that reached us while our try was out, in arrival order
}

func newNaimiTrehel(id, n int, _ *config) (machine, error) {
	nt := &naimiTrehel{id: id, n: n, last: 0, next: -1}
	if id == 0 {
		nt.last, nt.token = -1, true
	}
	return nt, nil
}

func (nt *naimiTrehel) step(ev event, out *output) {
	switch ev.kind {
	case evRequest, evTry:
		if nt.last < 0 {
			// The root that is not requesting holds the idle token.
			nt.requesting = true
			out.enter()
			return
		}
		if ev.kind == evTry {
			nt.trying = true
			out.send(Message{Kind: KindTry, From: nt.id, To: nt.last, Ref: uint64(nt.id)})
			return
		}
		nt.requesting = true
		out.send(Message{Kind: KindRequest, From: nt.id, To: nt.last, Ref: uint64(nt.id)})
		nt.last = -1
	case evRelease:
		nt.requesting = false
		if nt.next >= 0 {
			nt.sendToken(nt.next, out)
			nt.next = -1
		}
	case evMessage:
		m := ev.msg
		switch m.Kind {
		case KindRequest, KindTry:
			if m.Ref >= uint64(nt.n) || int(m.Ref) == nt.id {
				return // no other peer of this cluster: a transport must not deliver it
			}
			j := int(m.Ref)
			if m.Kind == KindTry {
				j += nt.n
			}
			if nt.trying {
				// Until our try's answer comes we cannot tell whether
				// we are the root: hold the message back.
				nt.held = append(nt.held, j)
				return
			}
			nt.receive(j, out)
		case KindToken:
			nt.onToken(m, out)
		case KindBusy:
			if nt.trying {
				nt.trying = false
				out.refuse()
				nt.release(out)
			}
		}
	}
}

// onRequest forwards peer j's request towards the root, or, at the root,
// serves or queues it; either way j is the new probable owner.
func (nt *naimiTrehel) onRequest(j int, out *output) {
	switch {
	case nt.last >= 0:
		out.send(Message{Kind: KindRequest, From: nt.id, To: nt.last, Ref: uint64(j)})
	case nt.requesting:
		nt.next = j
	default:
		nt.sendToken(j, out)
	}
	nt.last = j
}

// onTry forwards peer j's try towards the root, leaving the path as it
// is, or, at the root, answers it.
func (nt *naimiTrehel) onTry(j int, out *output) {
	switch {
	case nt.last >= 0:
		out.send(Message{Kind: KindTry, From: nt.id, To: nt.last, Ref: uint64(j)})
	case nt.requesting:
		out.send(Message{Kind: KindBusy, From: nt.id, To: j})
	default:
		nt.sendToken(j, out)
		nt.last = j
	}
}

// onToken takes the token and enters on our request or try.
func (nt *naimiTrehel) onToken(m Message, out *output) {
	if nt.token {
		panic(fmt.Sprintf("dmutex: naimi-trehel peer %d received a second token from peer %d", nt.id, m.From))
	}
	nt.token = true
	if nt.trying {
		// A try is served without a reversed path: the root that sent
		// the token points at us, and we become the root.
		nt.trying = false
		nt.requesting = true
		nt.last = -1
		out.enter()
		nt.release(out)
		return
	}
	out.enter()
}

// receive handles peer j's request, or peer j-n's try for j >= n.
func (nt *naimiTrehel) receive(j int, out *output) {
	if j >= nt.n {
		nt.onTry(j-nt.n, out)
	} else {
		nt.onRequest(j, out)
	}
}

// release handles the requests and tries held back while our try was
// out, as if they arrived now.
func (nt *naimiTrehel) release(out *output) {
	for _, j := range nt.held {
		nt.receive(j, out)
	}
	nt.held = nt.held[:0]
}

// sendToken gives the token to peer j.
func (nt *naimiTrehel) sendToken(j int, out *output) {
	nt.token = false
	out.send(Message{Kind: KindToken, From: nt.id, To: j})
}

// idleViolation reports what this peer still keeps once the cluster is at
// rest, with every request and try answered and nothing in flight.
func (nt *naimiTrehel) idleViolation() string {
	switch {
	case nt.requesting || nt.trying:
		return "keeps a request"
	case len(nt.held) > 0:
		return fmt.Sprintf("holds requests %v back", nt.held)
	case nt.next >= 0:
		return fmt.Sprintf("keeps NEXT = P%d", nt.next)
	case (nt.last < 0) != nt.token:
		return fmt.Sprintf("is the root %v but holds the token %v", nt.last < 0, nt.token)
	}
	return ""
}

func (nt *naimiTrehel) hasToken() bool { return nt.token }

func (nt *naimiTrehel) carriesToken(m Message) bool { return m.Kind == KindToken }

func (nt *naimiTrehel) clone() machine {
	c := *nt
	c.held = append([]int(nil), nt.held...)
	return &c
}

func (nt *naimiTrehel) assign(src machine) bool {
	s, ok := src.(*naimiTrehel)
	if ok {
		held := nt.held
		*nt = *s
		nt.held = reuse(held, s.held)
	}
	return ok
}

func (nt *naimiTrehel) appendState(b []byte) []byte {
	b = appendInt(b, nt.last)
	b = appendInt(b, nt.next)
	b = appendBool(b, nt.token)
	b = appendBool(b, nt.requesting)
	b = appendBool(b, nt.trying)
	return appendInts(b, nt.held)
}

func (nt *naimiTrehel) describe() []StateField {
	peer := func(p int) string {
		if p < 0 {
			return "none"
		}
		return fmt.Sprintf("P%d", p)
	}
	fs := []StateField{
		{"LAST", peer(nt.last)},
		{"NEXT", peer(nt.next)},
		{"token", fmt.Sprint(nt.token)},
		{"requesting", fmt.Sprint(nt.requesting)},
	}
	if nt.trying {
		fs = append(fs, StateField{"try", "out"})
	}
	if len(nt.held) > 0 {
		fs = append(fs, StateField{"held back", describePeers(nt.held)})
	}
	return fs
}
