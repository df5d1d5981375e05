package dmutex

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// This file is an explicit-state model checker over the package's
// machines. A world is every peer's machine, the peer's local status
// (requests still to make, waiting, inside) and the network; a transition
// is one peer making a request, one message being delivered, or one peer
// leaving the critical section. Entering is not a transition of its own:
// a machine enters inside the step that lets it, and leaves by a later,
// separate transition, so every delivery is also tried while a peer is
// inside. The checker visits every world reachable from the start,
// storing each world's canonical encoding, and checks the properties of
// checkSpec in each.
//
// No reduction is applied: every enabled transition of every world is
// taken. The one merge is sound by construction: two copies of the same
// message in an unordered network give the same successor, so only one
// is tried.
//
// The big configurations store two independent 64-bit hashes of each
// encoding instead of the encoding (hash compaction). Two distinct states
// collide only if both hashes do; with s states the chance of any such
// collision is about s²/2^129, below 10^-23 for 10^8 states. A collision
// could only hide states, never report a false violation.

// netKind is the checker's model of the network.
type netKind uint8

const (
	netFIFO netKind = iota // a FIFO queue per ordered pair of peers
	netBag                 // an unordered multiset of messages in flight
)

func (k netKind) String() string {
	if k == netFIFO {
		return "fifo"
	}
	return "unordered"
}

// orderRule is the order in which an algorithm promises to grant entries.
type orderRule uint8

const (
	orderNone        orderRule = iota // no order promised (Maekawa, token algorithms)
	orderTimestamp                    // (timestamp, id) order of the requests
	orderCoordinator                  // order of arrival of the requests at the coordinator
)

// checkSpec is one model-checking problem.
type checkSpec struct {
	alg      Algorithm
	opts     []Option
	n        int
	requests int // requests per peer
	net      netKind
	order    orderRule

	bfs     bool   // breadth first, so the first counterexample found is a shortest one
	compact bool   // store 128-bit fingerprints of the states instead of the states
	want    string // stop only at a violation containing want; others are counted and cut off

	// maxStates, if positive, stops the search after that many states;
	// the result is then incomplete.
	maxStates int

	// build, if set, replaces alg's machines, for tests of the checker.
	build func(id, n int) machine
}

// checkResult is what a check found.
type checkResult struct {
	states      int  // distinct worlds visited
	transitions int  // transitions taken, to new worlds or to known ones
	finals      int  // worlds with nothing left to do
	cut         int  // violations that did not match want
	incomplete  bool // stopped at maxStates
	violation   string
	trace       []string // the steps from the start to the violation
	elapsed     time.Duration
}

// world is one global state.
type world struct {
	ms       []machine
	left     []int  // requests each peer has still to make
	waiting  []bool // the peer's request is out and it has not entered
	inside   []bool
	fifo     [][]Message // netFIFO: fifo[from*n+to], oldest first
	bag      []Message   // netBag
	lastTS   uint64      // orderTimestamp: the latest entry's request
	lastID   int         // -1 before the first entry
	arrivals []int       // orderCoordinator: requests at the coordinator, in order of arrival, not yet granted
}

// clone returns a copy of w that apply may change. The copy shares the
// machines and the messages with w, which stay immutable once in a
// visited world: apply replaces the one machine it steps by a clone, never
// writes into a shared queue, and hands a receiving machine its own copy
// of a token.
func (w *world) clone() *world {
	c := &world{
		ms:       slices.Clone(w.ms),
		left:     slices.Clone(w.left),
		waiting:  slices.Clone(w.waiting),
		inside:   slices.Clone(w.inside),
		fifo:     slices.Clone(w.fifo),
		bag:      w.bag,
		lastTS:   w.lastTS,
		lastID:   w.lastID,
		arrivals: w.arrivals,
	}
	return c
}

// transition is one move from a world.
type transition struct {
	kind eventKind // evRequest, evMessage or evRelease
	peer int
	at   int // evMessage: index of the pair (netFIFO) or of the message (netBag)
}

// checker holds what one check shares across worlds.
type checker struct {
	spec   checkSpec
	n      int
	tokens bool // the machines implement tokenHolder
	out    output
	buf    []byte
	sbuf   []byte   // one machine's state
	mbufs  [][]byte // message encodings, reused
	exact  map[string]struct{}
	fps    map[[2]uint64]struct{}
	seeds  [2]maphash.Seed
}

// step is a taken transition, kept for the trace.
type step struct {
	prev    *step
	kind    eventKind
	peer    int
	msg     Message
	entered bool
}

// link returns a copy of s on the heap that follows prev.
func (s step) link(prev *step) *step {
	s.prev = prev
	return &s
}

func (s *step) String() string {
	var b strings.Builder
	switch s.kind {
	case evRequest:
		fmt.Fprintf(&b, "P%d requests", s.peer)
	case evMessage:
		fmt.Fprintf(&b, "P%d receives %s", s.peer, formatMessage(s.msg, true))
	case evRelease:
		fmt.Fprintf(&b, "P%d leaves", s.peer)
	}
	if s.entered {
		b.WriteString(", enters")
	}
	return b.String()
}

// check explores every world reachable under sp.
func check(t testing.TB, sp checkSpec) checkResult {
	t.Helper()
	start := time.Now()
	// The checker allocates a world per transition and keeps a fraction:
	// collecting less often roughly halves its time.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	cfg, err := newConfig(sp.alg, sp.n, forSimulation, sp.opts)
	require.NoError(t, err)
	c := &checker{spec: sp, n: sp.n}
	w := &world{
		left:    make([]int, sp.n),
		waiting: make([]bool, sp.n),
		inside:  make([]bool, sp.n),
		lastID:  -1,
	}
	for i := range sp.n {
		m, err := cfg.newMachine(sp.alg, i, sp.n)
		if sp.build != nil {
			m = sp.build(i, sp.n)
		}
		require.NoError(t, err)
		w.ms = append(w.ms, m)
		w.left[i] = sp.requests
	}
	_, c.tokens = w.ms[0].(tokenHolder)
	if sp.net == netFIFO {
		w.fifo = make([][]Message, sp.n*sp.n)
	}
	if sp.compact {
		c.fps = make(map[[2]uint64]struct{})
		c.seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	} else {
		c.exact = make(map[string]struct{})
	}

	var res checkResult
	found := func(v string, tr *step) checkResult {
		res.violation = v
		for s := tr; s != nil; s = s.prev {
			res.trace = append(res.trace, s.String())
		}
		slices.Reverse(res.trace)
		res.elapsed = time.Since(start)
		return res
	}
	type item struct {
		w  *world
		tr *step
	}
	if v := c.tokenCheck(w); v != "" {
		return found(v, nil)
	}
	c.visit(w)
	res.states = 1
	work := []item{{w, nil}}
	head := 0
	var trs []transition
	for head < len(work) {
		var it item
		if sp.bfs {
			it = work[head]
			work[head] = item{}
			head++
		} else {
			it = work[len(work)-1]
			work[len(work)-1] = item{}
			work = work[:len(work)-1]
		}
		trs = c.transitions(it.w, trs[:0])
		if len(trs) == 0 {
			if v := c.finalCheck(it.w); v != "" {
				if c.matches(v) {
					return found(v, it.tr)
				}
				res.cut++
			}
			res.finals++
			continue
		}
		for _, tr := range trs {
			res.transitions++
			next := it.w.clone()
			st, v := c.apply(next, tr)
			if v == "" {
				v = c.tokenCheck(next)
			}
			if v != "" {
				if c.matches(v) {
					return found(v, st.link(it.tr))
				}
				res.cut++
				continue
			}
			if c.visit(next) {
				res.states++
				work = append(work, item{next, st.link(it.tr)})
			}
		}
		if sp.maxStates > 0 && res.states >= sp.maxStates {
			res.incomplete = true
			break
		}
		if sp.bfs && head > 4096 && head*2 > len(work) {
			work = append(work[:0], work[head:]...) // drop the explored prefix
			head = 0
		}
	}
	res.elapsed = time.Since(start)
	return res
}

func (c *checker) matches(v string) bool { return strings.Contains(v, c.spec.want) }

// visit records w and reports whether it is new.
func (c *checker) visit(w *world) bool {
	c.buf = c.encode(w, c.buf[:0])
	if c.exact != nil {
		if _, ok := c.exact[string(c.buf)]; ok {
			return false
		}
		c.exact[string(c.buf)] = struct{}{}
		return true
	}
	fp := [2]uint64{maphash.Bytes(c.seeds[0], c.buf), maphash.Bytes(c.seeds[1], c.buf)}
	if _, ok := c.fps[fp]; ok {
		return false
	}
	c.fps[fp] = struct{}{}
	return true
}

// transitions appends every transition enabled in w to trs.
func (c *checker) transitions(w *world, trs []transition) []transition {
	for p := range c.n {
		if w.inside[p] {
			trs = append(trs, transition{kind: evRelease, peer: p})
		} else if !w.waiting[p] && w.left[p] > 0 {
			trs = append(trs, transition{kind: evRequest, peer: p})
		}
	}
	if w.fifo != nil {
		for pair, q := range w.fifo {
			if len(q) > 0 {
				trs = append(trs, transition{kind: evMessage, peer: q[0].To, at: pair})
			}
		}
		return trs
	}
	// Unordered: one transition per distinct message.
	c.mbufs = c.mbufs[:0]
	for i, m := range w.bag {
		c.mbufs = append(c.mbufs, appendMessage(c.scratch(i), m))
		dup := false
		for j := range i {
			if bytes.Equal(c.mbufs[j], c.mbufs[i]) {
				dup = true
				break
			}
		}
		if !dup {
			trs = append(trs, transition{kind: evMessage, peer: m.To, at: i})
		}
	}
	return trs
}

// scratch returns a reusable empty buffer for the i-th message encoding.
func (c *checker) scratch(i int) []byte {
	if i < cap(c.mbufs) {
		if b := c.mbufs[:i+1][i]; b != nil {
			return b[:0]
		}
	}
	return nil
}

// apply takes tr in w, which it changes, and returns the step for the
// trace and the violation it caused, if any.
func (c *checker) apply(w *world, tr transition) (step, string) {
	st := step{kind: tr.kind, peer: tr.peer}
	p := tr.peer
	ev := event{kind: tr.kind}
	switch tr.kind {
	case evRequest:
		w.left[p]--
		w.waiting[p] = true
		if c.spec.order == orderCoordinator && p == coordinator {
			w.arrivals = append(slices.Clip(w.arrivals), p)
		}
	case evRelease:
		w.inside[p] = false
	case evMessage:
		if w.fifo != nil {
			q := w.fifo[tr.at]
			ev.msg = q[0]
			w.fifo[tr.at] = q[1:]
		} else {
			ev.msg = w.bag[tr.at]
			w.bag = slices.Concat(w.bag[:tr.at], w.bag[tr.at+1:])
		}
		st.msg = ev.msg
		ev.msg.Token = ev.msg.Token.clone() // the receiver's own copy
		if c.spec.order == orderCoordinator && p == coordinator && ev.msg.Kind == KindRequest {
			w.arrivals = append(slices.Clip(w.arrivals), ev.msg.From)
		}
	}
	w.ms[p] = w.ms[p].clone()
	c.out.reset()
	w.ms[p].step(ev, &c.out)
	w.bag = slices.Clip(w.bag)
	for _, m := range c.out.msgs {
		if m.From != p || m.To < 0 || m.To >= c.n || m.To == p || !m.Kind.Valid() {
			return st, fmt.Sprintf("P%d sent a malformed message %s", p, formatMessage(m, true))
		}
		if w.fifo != nil {
			pair := m.From*c.n + m.To
			w.fifo[pair] = append(slices.Clip(w.fifo[pair]), m)
		} else {
			w.bag = append(w.bag, m)
		}
	}
	if !c.out.entered {
		return st, ""
	}
	st.entered = true
	return st, c.enter(w, p, tr.kind)
}

// enter records that p entered and checks that it might.
func (c *checker) enter(w *world, p int, cause eventKind) string {
	switch {
	case cause == evRelease:
		return fmt.Sprintf("P%d entered on leaving", p)
	case !w.waiting[p]:
		return fmt.Sprintf("P%d entered without a request", p)
	}
	for q, in := range w.inside {
		if in {
			return fmt.Sprintf("P%d entered while P%d is inside", p, q)
		}
	}
	w.waiting[p] = false
	w.inside[p] = true
	switch c.spec.order {
	case orderTimestamp:
		ts := w.ms[p].(timestamped).requestTS()
		if w.lastID >= 0 && !before(w.lastTS, w.lastID, ts, p) {
			return fmt.Sprintf("P%d entered with request (%d, %d) after the younger (%d, %d)", p, ts, p, w.lastTS, w.lastID)
		}
		w.lastTS, w.lastID = ts, p
	case orderCoordinator:
		if len(w.arrivals) == 0 || w.arrivals[0] != p {
			return fmt.Sprintf("P%d entered, but the coordinator had the requests of %v first", p, w.arrivals)
		}
		w.arrivals = w.arrivals[1:]
	}
	return ""
}

// tokenCheck checks that a token algorithm has exactly one token.
func (c *checker) tokenCheck(w *world) string {
	if !c.tokens {
		return ""
	}
	held, flying := 0, 0
	for _, m := range w.ms {
		if m.(tokenHolder).hasToken() {
			held++
		}
	}
	count := func(ms []Message) {
		for _, m := range ms {
			if isTokenKind(m.Kind) {
				flying++
			}
		}
	}
	count(w.bag)
	for _, q := range w.fifo {
		count(q)
	}
	if held+flying != 1 {
		return fmt.Sprintf("%d tokens held and %d in flight", held, flying)
	}
	return ""
}

// finalCheck checks a world with nothing left to do: every request must
// have been served.
func (c *checker) finalCheck(w *world) string {
	var stuck []int
	for p := range c.n {
		if w.waiting[p] || w.left[p] > 0 {
			stuck = append(stuck, p)
		}
	}
	if stuck != nil {
		return fmt.Sprintf("deadlock: %v wait for ever", stuck)
	}
	return ""
}

// encode appends w's canonical encoding to b.
func (c *checker) encode(w *world, b []byte) []byte {
	for p, m := range w.ms {
		c.sbuf = m.appendState(c.sbuf[:0])
		b = appendInt(b, len(c.sbuf))
		b = append(b, c.sbuf...)
		b = appendInt(b, w.left[p])
		b = appendBool(b, w.waiting[p])
		b = appendBool(b, w.inside[p])
	}
	if w.fifo != nil {
		for _, q := range w.fifo {
			b = appendInt(b, len(q))
			for _, m := range q {
				b = appendMessage(b, m)
			}
		}
	} else {
		// A multiset: the messages' encodings in sorted order.
		c.mbufs = c.mbufs[:0]
		for i, m := range w.bag {
			c.mbufs = append(c.mbufs, appendMessage(c.scratch(i), m))
		}
		slices.SortFunc(c.mbufs, bytes.Compare)
		b = appendInt(b, len(c.mbufs))
		for _, mb := range c.mbufs {
			b = append(b, mb...)
		}
	}
	switch c.spec.order {
	case orderTimestamp:
		b = appendUint(b, w.lastTS)
		b = appendInt(b, w.lastID)
	case orderCoordinator:
		b = appendInts(b, w.arrivals)
	}
	return b
}

// appendMessage appends a canonical, self-delimiting encoding of m; Fence
// is left out, since only the runtime sets it.
func appendMessage(b []byte, m Message) []byte {
	b = append(b, byte(m.Kind))
	b = appendInt(b, m.From)
	b = appendInt(b, m.To)
	b = appendUint(b, m.TS)
	b = appendUint(b, m.Ref)
	b = appendBool(b, m.Token != nil)
	if m.Token != nil {
		b = appendUints(b, m.Token.LN)
		b = appendInts(b, m.Token.Queue)
	}
	return b
}
