package dmutex

import (
	"math"
	"runtime"
	"slices"
)

// The graph search, depth first (the default when liveness is checked).
//
// What the liveness pass needs is the transition graph: for each state
// what holds there (stateInfo) and its edges, each with its target, its
// fairness class and the peer it lets in. Stored compactly that is about
// 40 bytes a state and 5 an edge, with the table of hashes: 60 to 100
// bytes a state for the algorithms here, which have 2 to 5 edges a state
// (see "What a state costs" below). What
// made the breadth-first search cost 1 to 1.5 KB a state was not the graph
// but its frontier, the worlds found and not yet expanded (a fifth to a
// third of all states at the widest level, each a World of one or more
// kilobytes), and the garbage of a new World for every state. So this
// search keeps the same graph and drops the frontier: it runs depth first,
// holding the worlds of one path only and reusing them as the search
// backs up (as the safety-only search does), and once it has seen every
// state it renames the states to the numbers the breadth-first search
// would have given them. Re-expanding states instead of storing edges
// would save the 9 bytes an edge at the cost of rebuilding a World (a
// replay of its path, tens of steps) for each state each time a pass of
// Tarjan's algorithm visits it, once per peer and once more per fair
// component: several times the whole search's time, for less than half
// of what a state costs here. CheckConfig.OnTheFly keeps neither the
// edges nor the worlds: it runs Tarjan's algorithm during the search
// itself (onthefly.go).
//
// Why the result is the breadth-first search's:
//
//   - Both searches explore the states reachable from the start, as
//     fingerprints tell them apart, and both take, from each state, every
//     transition appendTransitions lists, in its order. The depth-first
//     search reserves a state's edges when it first examines the state,
//     one slot a transition in that order, and fills each slot when it
//     takes that transition. Two worlds with one encoding step alike (the
//     encoding's promise, which TestStateEncodingIsFaithful checks), so
//     whichever world of a state a search expands, the state's edges
//     (target state, class, peer let in) are the same multiset. The class
//     of an edge depends on its source only (a suspicion is owed when its
//     target has crashed in the source), which is the world examined
//     when the edge is taken.
//   - Over FIFO queues the order of a state's transitions is a function
//     of its encoding too (peers and pairs in order), so the two graphs
//     are the same ordered lists of edges, up to the names of the states.
//     The breadth-first numbering depends on nothing but that: the start
//     is 0, and the states are numbered in the order they are first met
//     as the states are expanded in numbering order, each along its edges
//     in order. renumber replays exactly that over the stored graph (a
//     breadth-first pass over int32 arrays, no World), and gives each
//     state its breadth-first number and parent, and the table of hashes
//     the new numbers: the arrays are the very ones the breadth-first
//     search builds (TestDepthFirstGraphAgrees compares them).
//   - Over an unordered network a world lists its deliveries in the order
//     it got the messages, which the encoding leaves out, and the two
//     searches may expand different worlds of one state: the graphs are
//     then the same up to the order of each state's edges, and the
//     numbering is a breadth-first one, not necessarily the same one.
//     What liveness decides does not depend on names or edge order: a
//     fair component of the states where p waits exists or not, the most
//     entries on a path is a property of the graph, and so are the fates
//     after a fault. A counterexample is still a shortest path from the
//     start (a breadth-first parent chain) to a deadlock, and a lasso is
//     still a fair loop (fairCycle's argument holds for any numbering),
//     but they may be other steps than the breadth-first search's. The
//     classes of an unordered network are renamed in the order this
//     numbering meets them, as the breadth-first search names them.
//   - What the breadth-first search records as it goes is recomputed in
//     the new order: the first deadlock it meets is the deadlocked state
//     with the smallest number, and, with Fenced, the first step that let
//     two peers in is the first flagged edge in numbering order. Every
//     count (states, transitions, blocked states) is a sum over states or
//     edges and does not depend on the order.
//
// So liveness, fate and every counterexample built from the graph decide
// the same verdicts and bounds as the breadth-first search, and over FIFO
// queues the same counterexamples step for step. Where the depth-first
// search could not reproduce the breadth-first one it does not try: a
// safety violation (or a broken fenced store, or a promise at rest) stops
// the breadth-first search at its first one, a shortest counterexample,
// with counts up to it, so when the depth-first search meets one, explore
// runs the breadth-first search again from the start (a broken machine is
// usually found within a few thousand states); StopAtDeadlock, and
// Workers over an unordered network, use the breadth-first search
// throughout (with Workers over FIFO queues, pargraph.go builds this
// same graph on several goroutines). When a limit or the context
// stops the depth-first search, the states it saw are renumbered the
// same way over the edges it had taken, so a deadlock it found is reported
// by a shortest path among them, not always a shortest one overall; the
// counts are of what it saw. A fingerprint collision (see Check) can make
// the two searches differ: which of two colliding states is explored
// depends on the order.

// What a state costs, and why the savings change no result. The graph
// is kept as arrays of plain numbers: per state its offset (4 bytes),
// what holds there (stateInfo, 12) and, once renumbered, its parent (4);
// per edge its target (4) and one byte naming its kind (edgeKind: its
// fairness class and the peer it lets in, as a byte while a search has
// at most 256 kinds, which every FIFO configuration here has; past that
// the bytes are widened into the 4-byte class and the 1-byte entry they
// name). The table of hashes adds 12 to 20 bytes a slot (CheckConfig.
// Fingerprint). With four or five edges a state that is 60 to 80 bytes a
// state, against some 190 before, because:
//
//   - The arrays grew by append in the Go heap: each growth copied the
//     array into one a quarter bigger, the old copy stayed until the
//     collector ran, and the collector let the heap reach twice what it
//     had found live. Past a million elements they now live in memory
//     mapped once for the most they can hold (bigarray.go), which the
//     kernel backs only as it is written: no copy, no garbage. They are
//     the same slices of the same types, read and written as before.
//   - The byte of an edge is a name: edgeClass and edgeEntry return the
//     very class and entry classOf and the step gave, so liveness, fate
//     and the counterexamples read the same graph (TestDepthFirstGraph-
//     Compact compares it with the breadth-first search's, with the byte
//     made to widen midway).
//   - renumber copies one array at a time into its new order and returns
//     the old one at once; liveness's scratch is returned when it ends.
//   - With 64-bit fingerprints (CheckConfig.Fingerprint) the table costs
//     12 bytes a slot instead of 20; what a collision could do, and its
//     chance, which each result prints, are in Check's documentation and
//     docs/checking.md. That is the one change here that trades
//     exactness, and only when asked for.
//
// The search counts what it holds (checkmem.go) before each step,
// including the table's next doubling (the new table beside the old) and
// the larger of renumber's and liveness's additions, so that its memory
// limit stops it before the system would.

// deepFrame is one state on the depth-first path: its world, its
// number, its transitions and the next one to take.
type deepFrame struct {
	w    *World
	id   int32
	trs  []Transition
	next int
}

// depthFirstGraph explores from w depth first, keeping the graph, and
// reports whether it saw every state. It returns errInterrupted as soon
// as the context ends, and stops at the first state past the limit, or
// at the first safety violation (which explore then searches again
// breadth first).
func (c *checker) depthFirstGraph(w *World) (bool, error) {
	along := func(stack []deepFrame) []Transition {
		var trs []Transition
		for _, f := range stack[:len(stack)-1] {
			trs = append(trs, f.trs[f.next-1])
		}
		return trs
	}
	c.compact, c.kindOf = true, map[edgeKind]uint8{}
	stack := []deepFrame{{w: w, id: 0}}
	// push examines the world just put on top of the stack and reserves
	// its edges; it reports false when the search must end.
	push := func() bool {
		f := &stack[len(stack)-1]
		var v verdict
		var broken error
		f.trs, v, broken = c.examine(f.w, f.trs)
		f.next = 0
		if int64(len(c.to))+int64(len(f.trs)) > math.MaxInt32 {
			c.stopped = StoppedAtMemoryLimit // the graph's edges are numbered in int32
			return false
		}
		c.to = grow(c.to, len(f.trs), math.MaxInt32)
		for range f.trs {
			c.to = append(c.to, -1)
		}
		if c.compact {
			c.code = grow(c.code, len(f.trs), math.MaxInt32)
			for range f.trs {
				c.code = append(c.code, 0)
			}
		} else {
			c.cls = append(c.cls, make([]int32, len(f.trs))...)
			c.ent = append(c.ent, make([]int8, len(f.trs))...)
		}
		if c.overlaps != nil {
			for len(c.overlaps)*64 < len(c.to) {
				c.overlaps = append(c.overlaps, 0)
			}
		}
		switch v {
		case vDeadlock:
			c.deadlocks = append(c.deadlocks, f.id)
		case vBroken:
			c.res.Violation = c.violationAlong("safety", along(stack), -1, Transition{}, broken.Error())
			c.unsafe, c.stopped = true, StoppedAtViolation
			return false
		}
		return true
	}
	if !push() {
		return false, nil
	}
	for len(stack) > 0 {
		top := len(stack) - 1
		f := &stack[top]
		if f.next == len(f.trs) {
			stack = stack[:top]
			continue
		}
		if c.overBudget(len(stack)) {
			return false, nil
		}
		if c.interrupted() {
			return false, errInterrupted
		}
		t := f.trs[f.next]
		e := c.off[f.id] + int32(f.next)
		f.next++
		c.res.Transitions++
		if top+1 == cap(stack) {
			stack = append(stack, deepFrame{})[:top+1]
			f = &stack[top]
		}
		next, st, err := stepInto(f.w, &stack[:top+2][top+1].w, t)
		if err != nil {
			c.brokenStep(along(stack), t, next, err)
			return false, nil
		}
		c.setEdge(e, edgeKind{c.classOf(f.w, t), int8(st.Entered)}) // the class asks about the source
		if st.overlap != nil {
			c.overlaps[e/64] |= 1 << uint(e%64)
		}
		fp := c.fingerprint(next)
		to, seen := c.fps.get(fp)
		if seen {
			c.to[e] = to
			continue
		}
		if c.full() {
			return false, nil
		}
		to = int32(c.res.States)
		c.fps.add(fp, to)
		c.to[e] = to
		c.res.States++
		stack = stack[:top+2]
		stack[top+1].id = to
		c.tick()
		if c.res.States&1023 == 0 {
			c.sample(next)
		}
		if !push() {
			return false, nil
		}
	}
	return true, nil
}

// maxEdgeKinds is how many kinds of edge a byte names (a variable, so
// that a test can make the search widen early).
var maxEdgeKinds = 256

// edgeKind is what an edge carries beside its target: its fairness
// class and the peer it lets in (-1 for none).
type edgeKind struct {
	cls int32
	ent int8
}

// setEdge records edge e's kind: as a byte naming one of the kinds met
// so far while at most 256 are, else in cls and ent. The byte is only a
// name: edgeClass and edgeEntry give back the very class and entry that
// were recorded, so nothing read from the graph changes.
func (c *checker) setEdge(e int32, k edgeKind) {
	if c.compact {
		if code, ok := nameKind(c.kindOf, &c.kinds, k); ok {
			c.code[e] = code
			return
		}
		c.widen()
	}
	c.cls[e], c.ent[e] = k.cls, k.ent
}

// nameKind returns k's name in kindOf, naming it next in kinds if it
// has none and fewer than maxEdgeKinds kinds are named; false when it
// has none and no byte is left.
func nameKind(kindOf map[edgeKind]uint8, kinds *[]edgeKind, k edgeKind) (uint8, bool) {
	code, ok := kindOf[k]
	if !ok && len(*kinds) < maxEdgeKinds {
		code, ok = uint8(len(*kinds)), true
		kindOf[k] = code
		*kinds = append(*kinds, k)
	}
	return code, ok
}

// widen turns the edges' bytes into cls and ent, for a graph with more
// than 256 kinds of edge (an unordered network's classes, one per
// message, can be that many).
func (c *checker) widen() {
	c.cls = grow([]int32(nil), len(c.code), math.MaxInt32)[:len(c.code)]
	c.ent = grow([]int8(nil), len(c.code), math.MaxInt32)[:len(c.code)]
	for e, code := range c.code {
		c.cls[e], c.ent[e] = c.kinds[code].cls, c.kinds[code].ent
	}
	unmapArray(c.code)
	c.compact, c.code, c.kinds, c.kindOf = false, nil, nil, nil
}

// edgeClass returns edge e's fairness class (-1 for none).
func (c *checker) edgeClass(e int32) int32 {
	if c.compact {
		return c.kinds[c.code[e]].cls
	}
	return c.cls[e]
}

// edgeEntry returns the peer edge e lets in, -1 for none.
func (c *checker) edgeEntry(e int32) int8 {
	if c.compact {
		return c.kinds[c.code[e]].ent
	}
	return c.ent[e]
}

// renumber gives the states found depth first the numbers the
// breadth-first search would have given them (see the top of this file):
// it rebuilds the graph's arrays in that order, sets parent, renames the
// classes of an unordered network in the order that search meets them,
// updates the table of hashes, and records the first deadlock and, with
// Fenced, the first step that let two peers in, as that search would
// have met them. Edges the search never took (it stopped first) are -1
// and are skipped.
func (c *checker) renumber() {
	ns := int32(len(c.info))
	// A state's edges are to[off[s]:end(s)]: up to the next state's
	// offset, or, after the parallel search (pargraph.go), which reserves
	// each state's edges when a worker first examines it and so not in
	// the order of the states' numbers, up to end[s].
	end := func(s int32) int32 { return c.off[s+1] }
	if c.end != nil {
		end = func(s int32) int32 { return c.end[s] }
	} else {
		c.off = grow(c.off, 1, c.stateReserve())
		c.off = append(c.off, int32(len(c.to)))
	}
	// perm: depth-first number to breadth-first; order: the reverse.
	perm := makeArray[int32](int(ns))
	for i := range perm {
		perm[i] = -1
	}
	order := makeArray[int32](int(ns))[:1]
	parent := makeArray[int32](int(ns))[:1]
	perm[0], parent[0] = 0, -1
	for h := 0; h < len(order); h++ {
		s := order[h]
		for e := c.off[s]; e < end(s); e++ {
			if t := c.to[e]; t >= 0 && perm[t] < 0 {
				perm[t] = int32(len(order))
				order = append(order, t)
				parent = append(parent, int32(h))
			}
		}
	}
	if int32(len(order)) != ns {
		panic("dmutex: internal error: a state the depth-first search found is unreachable in its graph")
	}
	c.parent = parent
	// The arrays in the new order, one at a time, so that at most one
	// old array is held beside its copy. A mapped array (bigarray.go) is
	// returned to the system as soon as it is copied; for one in the
	// heap, a collection after each copy lets the next reuse its memory,
	// instead of growing the heap by the whole graph.
	collect := func() {
		if len(c.to) > 1<<24 {
			runtime.GC()
		}
	}
	off := makeArray[int32](int(ns) + 1)
	for i, s := range order {
		off[i+1] = off[i] + end(s) - c.off[s]
	}
	to := makeArray[int32](len(c.to))
	for i, s := range order {
		for k, t := range c.to[c.off[s]:end(s)] {
			if t >= 0 {
				t = perm[t]
			}
			to[off[i]+int32(k)] = t
		}
	}
	unmapArray(c.to)
	c.to = to
	collect()
	if c.compact {
		code := makeArray[uint8](len(c.code))
		for i, s := range order {
			copy(code[off[i]:off[i+1]], c.code[c.off[s]:end(s)])
		}
		unmapArray(c.code)
		c.code = code
	} else {
		cls := makeArray[int32](len(c.cls))
		for i, s := range order {
			copy(cls[off[i]:off[i+1]], c.cls[c.off[s]:end(s)])
		}
		unmapArray(c.cls)
		c.cls = cls
		collect()
		ent := makeArray[int8](len(c.ent))
		for i, s := range order {
			copy(ent[off[i]:off[i+1]], c.ent[c.off[s]:end(s)])
		}
		unmapArray(c.ent)
		c.ent = ent
	}
	if c.overlaps != nil {
		first := int32(-1)
		for i, s := range order {
			for e := c.off[s]; e < end(s) && first < 0; e++ {
				if c.overlaps[e/64]&(1<<uint(e%64)) != 0 {
					first = off[i] + e - c.off[s]
				}
			}
			if first >= 0 {
				break
			}
		}
		c.overlaps = nil
		c.firstOverlap = first
	}
	collect()
	info := makeArray[stateInfo](int(ns))
	for i, s := range order {
		info[i] = c.info[s]
	}
	unmapArray(c.info)
	c.info = info
	unmapArray(c.off)
	unmapArray(c.end)
	c.off, c.end = off, nil
	unmapArray(order)
	c.fps.renumber(perm)
	c.firstDeadlock = -1
	for _, s := range c.deadlocks {
		if c.firstDeadlock < 0 || perm[s] < c.firstDeadlock {
			c.firstDeadlock = perm[s]
		}
	}
	c.deadlocks = nil
	unmapArray(perm)
	collect()
	if c.classes != nil {
		// An unordered network's classes, n and up below the detector's,
		// numbered in the order the breadth-first search meets them. With
		// the edges in bytes, the kinds are renamed: each kind names
		// one class, and the renaming is one to one, so distinct kinds
		// stay distinct.
		n := int32(c.cc.N)
		names := map[int32]int32{}
		for e := range int32(len(c.to)) {
			k := c.edgeClass(e)
			if k < n || k >= 1<<30 {
				continue
			}
			m, ok := names[k]
			if !ok {
				m = n + int32(len(names))
				names[k] = m
			}
			if !c.compact {
				c.cls[e] = m
			}
		}
		if c.compact {
			for i, k := range c.kinds {
				if m, ok := names[k.cls]; ok {
					c.kinds[i].cls = m
				}
			}
			c.kindOf = nil // stale, and no longer needed
		}
	}
	if c.firstOverlap >= 0 {
		c.overlap = c.overlapAt(c.firstOverlap)
	}
}

// makeArray returns an array of n zero elements: mapped (bigarray.go)
// when it is big, else in the heap.
func makeArray[T any](n int) []T {
	if n > bigArrayMin {
		if m, ok := mapArray[T](n); ok {
			return m[:n]
		}
	}
	return make([]T, n)
}

// stateReserve is the most states the search may hold, and one more
// (renumber's closing offset): what a mapped array of states reserves.
func (c *checker) stateReserve() int {
	if c.limit > 0 && c.limit < math.MaxInt32 {
		return c.limit + 1
	}
	return math.MaxInt32
}

// overlapAt builds the counterexample of edge e, a step that let a
// second peer in (with Fenced), as the breadth-first search builds it.
func (c *checker) overlapAt(e int32) *Violation {
	s := int32(slices.IndexFunc(c.off[1:], func(o int32) bool { return o > e }))
	path := c.pathTo(s)
	w, trs := c.worldAt(path)
	if w == nil {
		return &Violation{Property: "safety", origin: c.origin,
			Message: "dmutex: internal error: the counterexample does not replay"}
	}
	t := w.appendTransitions(nil, true)[e-c.off[s]]
	st, _ := w.Clone().apply(t)
	if st.overlap == nil {
		return &Violation{Property: "safety", origin: c.origin,
			Message: "dmutex: internal error: the overlap does not replay"}
	}
	return c.violationAlong("safety", trs, -1, t, st.overlap.Error())
}

// worldAt replays the states of path from the start, each found among
// its predecessor's successors by its fingerprint, and returns the world
// at the end and the transitions taken; nil if a step is missing.
func (c *checker) worldAt(path []int32) (*World, []Transition) {
	w, err := c.startWorld(false)
	if err != nil {
		return nil, nil
	}
	var trs []Transition
	for i := 1; i < len(path); i++ {
		var found bool
		for _, t := range w.appendTransitions(nil, true) {
			next := w.Clone()
			if _, err := next.apply(t); err != nil {
				continue
			}
			if id, _ := c.fps.get(c.fingerprint(next)); id == path[i] {
				w = next
				trs = append(trs, t)
				found = true
				break
			}
		}
		if !found {
			return nil, nil
		}
	}
	return w, trs
}
