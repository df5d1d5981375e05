package dmutex

import (
	"math"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The parallel depth-first search with the graph (CheckConfig.Workers
// when liveness is checked, over FIFO queues).
//
// It is the parallel depth-first search of parallel.go, the workers
// sharing one table of hashes and handing frames to each other, and each
// worker also records the graph as deepgraph.go's search does: the
// worker that adds a state numbers it (under the table's lock, so that
// whoever finds the state finds its number), examines it, records what
// holds there, and reserves its edges, one slot a transition in the
// order appendTransitions lists them; whoever takes a transition fills
// its slot with the target's number and the edge's kind. Every state is
// added once and every transition taken once, so a complete search
// builds the very graph the search on one goroutine builds: the same
// states, each with the same ordered list of edges (target, fairness
// class, peer let in), under other numbers. renumber then gives the
// states the breadth-first numbers, which depend only on that graph
// (deepgraph.go), and the arrays, and everything read from them (every
// verdict, maxOvertakes, the fates, the counterexamples, step for step),
// are those of the search on one goroutine, whatever the workers' timing.
//
// What differs is only how the arrays are laid out before renumber. The
// workers write them at once, each at places no other writes, so they
// are reserved in mapped memory (bigarray.go) for the most they can hold
// and never moved: a state's number is taken when the state is added and
// its edges' place when it is examined, by two counters, and a worker
// may take a number and then another worker the next number and its
// edges' place before the first reserves its own. So a state's edges
// run from off[s] to end[s], not to off[s+1]; renumber reads them so and
// lays them out in order.
//
// The kinds of edge (deepgraph.go's bytes) are named under a lock the
// first time any worker meets them, and each worker keeps the names it
// has used; a name is only a name, so the order in which workers name
// kinds changes nothing read from the graph. Past 256 kinds, and over an
// unordered network, whose fairness classes are named as messages are
// met, the search is breadth first instead (parallelBreadthFirst).
//
// Where the search would stop (a safety violation, a broken promise at
// rest, a state or memory limit) it is made again breadth first, as
// parallel.go's is, so that the states up to there and a shortest
// counterexample do not depend on the workers. A deadlock does not stop
// it: each worker lists the deadlocked states it examines, and renumber
// reports the first in breadth-first order. With Fenced, each worker
// lists the steps that let two peers in, and renumber reports the first.
// When the context ends, the counts are of what the workers saw, and
// nothing is read from the graph.

// pgraph is the graph the workers share.
type pgraph struct {
	// Mapped arrays of their full capacity, written at distinct places:
	// per edge its target and kind; per state where its edges begin and
	// end, and what holds there.
	to, off, end []int32
	code         []uint8
	info         []stateInfo

	edges atomic.Int64 // edges reserved so far

	mu     sync.Mutex // kinds and kindOf
	kinds  []edgeKind
	kindOf map[edgeKind]uint8
}

// maxGraphEdges is the most edges the parallel search's graph holds:
// their numbers are int32s (a variable, so that a test can make a search
// run out of them).
var maxGraphEdges int64 = math.MaxInt32

// newPGraph reserves the arrays of a graph of at most states states and
// maxGraphEdges edges, or returns false if the system refused to map
// them (then the search is breadth first).
func newPGraph(states int) (*pgraph, bool) {
	g := &pgraph{kindOf: map[edgeKind]uint8{}}
	var ok [5]bool
	g.to, ok[0] = mapArray[int32](int(maxGraphEdges))
	g.code, ok[1] = mapArray[uint8](int(maxGraphEdges))
	g.off, ok[2] = mapArray[int32](states)
	g.end, ok[3] = mapArray[int32](states)
	g.info, ok[4] = mapArray[stateInfo](states)
	if ok != [5]bool{true, true, true, true, true} {
		g.release()
		return nil, false
	}
	g.to, g.code = g.to[:cap(g.to)], g.code[:cap(g.code)]
	g.off, g.end, g.info = g.off[:states], g.end[:states], g.info[:states]
	return g, true
}

// release returns the arrays to the system.
func (g *pgraph) release() {
	unmapArray(g.to)
	unmapArray(g.code)
	unmapArray(g.off)
	unmapArray(g.end)
	unmapArray(g.info)
	g.to, g.code, g.off, g.end, g.info = nil, nil, nil, nil, nil
}

// memory returns what the graph of s states holds, and the most that
// renumber and liveness add after the search (see countMemory), with
// liveness's scratch for each of passes peers at once.
func (g *pgraph) memory(s int64, passes int) int64 {
	e := g.edges.Load()
	b := s*(8+int64(unsafe.Sizeof(stateInfo{}))) + e*5
	return b + afterSearch(s, e*4, s*int64(unsafe.Sizeof(stateInfo{})), passes)
}

// edge records edge e, transition t from the world from with step st,
// as x names its kind; it reports false when the search must stop (more
// kinds than a byte names).
func (p *pdfs) edge(x *pworker, from *World, e int32, t Transition, st StepResult) bool {
	k := edgeKind{p.c.classOf(from, t), int8(st.Entered)}
	code, ok := x.kindOf[k]
	if !ok {
		g := p.g
		g.mu.Lock()
		code, ok = nameKind(g.kindOf, &g.kinds, k)
		g.mu.Unlock()
		if !ok {
			p.halt(true) // more kinds than a byte names
			return false
		}
		x.kindOf[k] = code
	}
	p.g.code[e] = code
	if st.overlap != nil {
		x.overlaps = append(x.overlaps, e)
	}
	return true
}

// reserve records what holds in state id, the world on top of x's path
// f, given what inspect found (v, flags), and reserves its edges; it
// reports false when the search must stop (a broken promise at rest, or
// more edges than int32 numbers).
func (p *pdfs) reserve(x *pworker, id int32, f *dfsFrame, v verdict, flags uint8) bool {
	g := p.g
	n := int64(len(f.trs))
	base := g.edges.Add(n) - n
	if v == vBroken || base+n > maxGraphEdges {
		p.halt(true)
		return false
	}
	if v == vDeadlock {
		x.deadlocks = append(x.deadlocks, id)
	}
	f.edge = int32(base)
	g.off[id], g.end[id] = int32(base), int32(base+n)
	g.info[id] = p.c.infoOf(f.w, flags)
	return true
}

// parallelDepthFirstGraph explores from w as described above, with
// c.cc.Workers workers, keeping the graph. It reports whether it saw
// every state (then the graph is renumbered), and whether the search
// must be made again breadth first; it returns errInterrupted as soon
// as the context ends.
func (c *checker) parallelDepthFirstGraph(w *World) (complete, redo bool, err error) {
	g, ok := newPGraph(c.stateReserve())
	if !ok {
		return false, true, nil
	}
	p := &pdfs{c: c, set: newSharedVisited(c.cc.Fingerprint, true), workers: c.cc.Workers, g: g}
	xs := make([]*pworker, p.workers)
	for i := range xs {
		xs[i] = &pworker{hash: hasher{seeds: &c.seeds, bits: c.cc.Fingerprint}, first: i == 0, kindOf: map[edgeKind]uint8{}}
		xs[i].wake.L = &p.mu
	}
	x0 := xs[0]
	p.set.addID(x0.hash.fingerprint(w), &p.states)
	start := dfsFrame{w: w}
	var v verdict
	var flags uint8
	start.trs, v, flags, _ = inspect(w, nil)
	if flags&stBlocked != 0 {
		x0.blocked++
	}
	if p.reserve(x0, 0, &start, v, flags) {
		// The first worker starts busy with the initial state; the others
		// start idle.
		var wg sync.WaitGroup
		for _, x := range xs[1:] {
			wg.Go(func() { p.run(x, nil) })
		}
		p.run(x0, &task{w: w, trs: start.trs})
		wg.Wait()
		c.handovers = int(p.handovers.Load())
	}
	for _, x := range xs {
		c.res.Transitions += x.transitions
		c.res.Blocked += x.blocked
	}
	if p.redo.Load() || p.cut.Load() {
		states := p.states.Load()
		p.set.release()
		g.release()
		if p.cut.Load() {
			c.res.States = int(states)
			return false, false, errInterrupted
		}
		return false, true, nil
	}
	// Every state was added and examined, and every edge taken: hand the
	// graph to the checker as deepgraph.go's search leaves it.
	ns, ne := int(p.states.Load()), int(g.edges.Load())
	c.res.States = ns
	c.fps.release()
	c.fps = p.set.table()
	c.to, c.code, c.kinds, c.compact = g.to[:ne], g.code[:ne], g.kinds, true
	c.off, c.end, c.info = g.off[:ns], g.end[:ns], g.info[:ns]
	if c.overlaps != nil {
		c.overlaps = make([]uint64, (ne+63)/64) // renumber reads a bit for each edge
	}
	for _, x := range xs {
		c.deadlocks = append(c.deadlocks, x.deadlocks...)
		for _, e := range x.overlaps {
			c.overlaps[e/64] |= 1 << uint(e%64)
		}
	}
	return true, false, nil
}
