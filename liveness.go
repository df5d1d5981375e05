package dmutex

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Starvation under weak fairness, decided over the explored graph.
//
// A run is an infinite path of the graph from the start. Each edge has a
// fairness class (checker.classOf), one per obligation: a holder's step
// out of the critical section (its write to the fenced store, else its
// leave), a delivery (per pair over FIFO queues, per distinct message and
// fence over a bag) and a suspicion or trust that the failure detector
// owes; requests, tries and faults are the environment's free choices and
// have none (-1). A class is enabled in a state when an edge of that class
// leaves the state. A run is weakly fair when no class is, from some point
// on, enabled in every state of the run and yet taken only finitely often.
// A request of peer p starves when a weakly fair run has p waiting from
// some point on (and a quiet state in which p waits is a deadlock, which
// Check reports as such: a finite run that stops there is a starvation
// too, so StarvationFree is false with it).
//
// The search is exact, for each p, over the subgraph of the states where
// p waits (W). Call a strongly connected component C of W fair when it
// holds at least one edge (a self-loop counts) and every class enabled in
// every state of C is taken by an edge inside C. Then a fair run starving
// p exists if and only if some component of W is fair:
//
//   - If C is fair, go from the start to C and then loop for ever round a
//     closed walk in C that visits every state of C and takes one edge of
//     each class that an edge inside C takes (C is strongly connected, so
//     one exists). A class enabled in every state of that loop is enabled
//     in every state of C, so C takes it, so the loop takes it on each
//     round: the run is fair, and p waits for ever. (The lasso fairCycle
//     reports is shorter but fair for the same reason.)
//   - If a fair run ρ has p waiting from some point on, then since the
//     graph is finite the states ρ visits infinitely often, with the edges
//     it takes infinitely often, form a strongly connected subgraph of W
//     with at least one edge, so they lie in one component C of W. A class
//     enabled in every state of C is enabled in every state ρ visits from
//     some point on, so ρ takes it infinitely often, on an edge among
//     those it takes infinitely often, which lies inside C: C is fair.
//
// Weak fairness needs no more: a cycle inside an unfair component C has
// every obligation C has (a class enabled in all of C is enabled all
// round it) and no more edges to meet it with, so it is unfair too, and
// components need not be split further as they must be for strong
// fairness. Two things the argument leans on: enabledness is a property
// of states (a state offering two edges of one class enables it once),
// and a class names the same obligation in every state; this is why a
// bag's classes are message encodings, which the state encoding keeps as
// they are (World.classify renames stamps only over FIFO queues). The
// graph is that of the states as their fingerprints tell them apart (128
// bits unless CheckConfig.Fingerprint says 64); see Check for what a
// collision could hide. The graph is kept compactly (about 100 bytes a
// state, without any World), found depth first and numbered as a
// breadth-first search would number it: deepgraph.go gives the search and
// the argument that everything read here is what the breadth-first
// search gave. onthefly.go decides the same during the search, without
// the graph (CheckConfig.OnTheFly).

// liveness computes StarvationFree and MaxOvertakes from the explored
// graph, when the search completed without a safety violation; otherwise
// neither is known, and StarvationFree is false, so that nobody reads a
// starvation-freedom that was never checked.
func (c *checker) liveness() {
	if c.fly != nil {
		return // decided during the search (onthefly.go)
	}
	if !c.graph || !c.res.Complete || !c.res.Safe {
		c.res.StarvationFree = false
		return
	}
	c.res.Liveness = true
	c.res.MaxOvertakes = 0
	// Each peer's pass reads the graph and writes only its own scratch,
	// so with workers the passes run at once, each worker with a scratch
	// of its own; their answers are then read in the order of the peers,
	// as one goroutine reads them.
	type answer struct {
		over  int
		lasso *lasso
	}
	answers := make([]answer, c.cc.N)
	var next atomic.Int32
	pass := func() {
		sc := newSCCs(len(c.info))
		defer sc.release()
		for p := int(next.Add(1) - 1); p < c.cc.N; p = int(next.Add(1) - 1) {
			answers[p].over, answers[p].lasso = c.peerLiveness(sc, p)
		}
	}
	var wg sync.WaitGroup
	for range min(c.cc.Workers, c.cc.N) - 1 {
		wg.Go(pass)
	}
	pass()
	wg.Wait()
	for p, a := range answers {
		over, lasso := a.over, a.lasso
		if over < 0 || c.res.MaxOvertakes < 0 {
			c.res.MaxOvertakes = -1
		} else {
			c.res.MaxOvertakes = max(c.res.MaxOvertakes, over)
		}
		if lasso != nil && c.res.Violation == nil {
			c.res.StarvationFree = false
			c.res.Violation = c.violation("starvation", lasso.path, lasso.cycle, Transition{},
				"starvation: a fair run in which P"+itoa(p)+" waits for ever")
		}
	}
}

func itoa(i int) string { return string(appendDecimal(nil, i)) }

func appendDecimal(b []byte, i int) []byte {
	if i >= 10 {
		b = appendDecimal(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

// lasso is a path of states from the start whose steps into path[cycle:]
// form a loop: the last state is path[cycle-1], where the loop begins.
type lasso struct {
	path  []int32
	cycle int
}

// sccs is the scratch of Tarjan's algorithm, reused across peers.
type sccs struct {
	index, low, comp []int32
	onStack          []bool
	stack            []int32
	calls            []sccFrame
	members          []int32 // the current component's states
}

type sccFrame struct {
	v int32
	e int32 // next edge to look at
}

func newSCCs(n int) *sccs {
	return &sccs{
		index:   makeArray[int32](n),
		low:     makeArray[int32](n),
		comp:    makeArray[int32](n),
		onStack: makeArray[bool](n),
	}
}

// release returns the scratch's mapped arrays (bigarray.go) to the
// system.
func (sc *sccs) release() {
	unmapArray(sc.index)
	unmapArray(sc.low)
	unmapArray(sc.comp)
	unmapArray(sc.onStack)
	sc.index, sc.low, sc.comp, sc.onStack = nil, nil, nil, nil
}

// peerLiveness runs Tarjan's algorithm over the states where p waits and
// returns the most entries of others on a path through them (-1 if a
// cycle has one: unbounded), and a fair cycle that starves p, if any.
func (c *checker) peerLiveness(sc *sccs, p int) (int, *lasso) {
	bit := uint32(1) << uint(p)
	in := func(s int32) bool { return c.info[s].wait&bit != 0 }
	var dist []int32 // dist[component]: most entries by others on a path from it
	unbounded := false
	var found *lasso
	sc.components(int32(len(c.info)), in, c.edges, c.target, func(id int32) bool {
		d, cyclic := int32(0), false
		for _, u := range sc.members {
			for e := c.off[u]; e < c.off[u+1]; e++ {
				t := c.to[e]
				if !in(t) {
					continue
				}
				w := int32(0)
				if c.edgeEntry(e) >= 0 {
					w = 1
				}
				if sc.comp[t] == id {
					cyclic = true
					if w > 0 {
						unbounded = true
					}
					continue
				}
				d = max(d, w+dist[sc.comp[t]])
			}
		}
		dist = append(grow(dist, 1, len(c.info)), d)
		if cyclic && found == nil {
			found = c.fairCycle(sc, id)
		}
		return true
	})
	defer unmapArray(dist)
	if unbounded {
		return -1, found
	}
	best := int32(0)
	for _, d := range dist {
		best = max(best, d)
	}
	return int(best), found
}

// edges returns where state s's edges begin and end in the graph.
func (c *checker) edges(s int32) (int32, int32) { return c.off[s], c.off[s+1] }

// target returns edge e's target in the graph.
func (c *checker) target(e int32) int32 { return c.to[e] }

// components runs Tarjan's algorithm over the states 0 to n-1 for which
// in holds, along each state s's edges, numbered from the first result
// of edges(s) up to the second, to their targets (target(e), or -1 to
// leave the edge out) where in holds too. As each strongly connected
// component completes, which is after every component it has an edge
// to, it numbers it (0, 1, ... in that order), sets comp of its states
// to that number, puts them in members, and calls pop with the number;
// pop returning false ends the search, and components returns false.
func (sc *sccs) components(n int32, in func(int32) bool, edges func(int32) (int32, int32), target func(int32) int32, pop func(id int32) bool) bool {
	for i := range n {
		sc.index[i], sc.comp[i] = -1, -1
	}
	next, ncomp := int32(0), int32(0)
	for root := range n {
		if !in(root) || sc.index[root] >= 0 {
			continue
		}
		first, _ := edges(root)
		sc.calls = append(sc.calls[:0], sccFrame{v: root, e: first})
		sc.index[root], sc.low[root] = next, next
		next++
		sc.stack = append(sc.stack[:0], root)
		sc.onStack[root] = true
		for len(sc.calls) > 0 {
			f := &sc.calls[len(sc.calls)-1]
			v := f.v
			if _, last := edges(v); f.e < last {
				u := target(f.e)
				f.e++
				if u < 0 || !in(u) {
					continue
				}
				if sc.index[u] < 0 {
					sc.index[u], sc.low[u] = next, next
					next++
					sc.stack = append(sc.stack, u)
					sc.onStack[u] = true
					first, _ := edges(u)
					sc.calls = append(sc.calls, sccFrame{v: u, e: first})
				} else if sc.onStack[u] {
					sc.low[v] = min(sc.low[v], sc.index[u])
				}
				continue
			}
			// v is done.
			sc.calls = sc.calls[:len(sc.calls)-1]
			if len(sc.calls) > 0 {
				w := sc.calls[len(sc.calls)-1].v
				sc.low[w] = min(sc.low[w], sc.low[v])
			}
			if sc.low[v] != sc.index[v] {
				continue
			}
			// v roots a component: pop it.
			sc.members = sc.members[:0]
			for {
				u := sc.stack[len(sc.stack)-1]
				sc.stack = sc.stack[:len(sc.stack)-1]
				sc.onStack[u] = false
				sc.comp[u] = ncomp
				sc.members = append(sc.members, u)
				if u == v {
					break
				}
			}
			if !pop(ncomp) {
				return false
			}
			ncomp++
		}
	}
	return true
}

// fairCycle returns a lasso through component id (whose states are
// sc.members) if the component is fair (checker.fairComponent): every
// class enabled in all its states is taken by an edge inside it.
// Enabledness is a property of a state: a class is enabled in a state
// when at least one edge of that class leaves it, however many do.
//
// The lasso's loop is itself a fair run, not merely a cycle of a fair
// component: from s0, the component's first state, it takes in turn, for
// each class enabled somewhere in the component, an edge of that class
// inside the component if there is one, and otherwise goes to a state of
// the component where the class is not enabled (there is one, since the
// component is fair), and then comes back to s0. A class enabled in every
// state of the loop is therefore taken on it.
func (c *checker) fairCycle(sc *sccs, id int32) *lasso {
	if !c.fairComponent(sc.members, sc.comp, id, everyEdge) {
		return nil
	}
	var classes []int32       // enabled somewhere in the component
	taken := map[int32]bool{} // taken by an edge inside it
	for _, u := range sc.members {
		for e := c.off[u]; e < c.off[u+1]; e++ {
			if k := c.edgeClass(e); k >= 0 {
				classes = append(classes, k)
				if sc.comp[c.to[e]] == id {
					taken[k] = true
				}
			}
		}
	}
	slices.Sort(classes)
	classes = slices.Compact(classes)
	s0 := slices.Min(sc.members)
	path := c.pathTo(s0)
	cycle := len(path)
	cur := s0
	for _, k := range classes {
		var seg []int32
		switch {
		case taken[k]:
			seg = c.walk(sc, id, cur, func(e int32) bool { return c.edgeClass(e) == k })
		case c.enables(cur, k):
			seg = c.walk(sc, id, cur, func(e int32) bool { return !c.enables(c.to[e], k) })
		}
		path = append(path, seg...)
		cur = path[len(path)-1]
	}
	// Back to s0, taking at least one step.
	seg := c.walk(sc, id, cur, func(e int32) bool { return c.to[e] == s0 })
	path = append(path, seg...)
	return &lasso{path: path, cycle: cycle}
}

// enables reports whether an edge of class k leaves state s.
func (c *checker) enables(s, k int32) bool {
	for e := c.off[s]; e < c.off[s+1]; e++ {
		if c.edgeClass(e) == k {
			return true
		}
	}
	return false
}

// everyEdge keeps every edge of the graph.
func everyEdge(int32) bool { return true }

// walk returns the states of a shortest path inside component id from
// state from that ends with an edge for which goal holds (from itself
// left out, the edge's target included).
func (c *checker) walk(sc *sccs, id int32, from int32, goal func(e int32) bool) []int32 {
	type hop struct {
		state, prev int32
	}
	hops := []hop{{from, -1}}
	seen := map[int32]bool{from: true}
	for h := 0; h < len(hops); h++ {
		u := hops[h].state
		for e := c.off[u]; e < c.off[u+1]; e++ {
			t := c.to[e]
			if sc.comp[t] != id {
				continue
			}
			if goal(e) {
				path := []int32{t}
				for k := int32(h); k > 0; k = hops[k].prev {
					path = append(path, hops[k].state)
				}
				slices.Reverse(path)
				return path
			}
			if !seen[t] {
				seen[t] = true
				hops = append(hops, hop{t, int32(h)})
			}
		}
	}
	return nil
}
