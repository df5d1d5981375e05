package dmutex

import "slices"

// liveness computes StarvationFree and MaxOvertakes from the explored
// graph, when the search completed without a safety violation; otherwise
// neither is known, and StarvationFree is false, so that nobody reads a
// starvation-freedom that was never checked.
func (c *checker) liveness() {
	if !c.graph || !c.res.Complete || !c.res.Safe {
		c.res.StarvationFree = false
		return
	}
	c.res.Liveness = true
	c.res.MaxOvertakes = 0
	sc := newSCCs(len(c.info))
	for p := range c.cc.N {
		over, lasso := c.peerLiveness(sc, p)
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
		index:   make([]int32, n),
		low:     make([]int32, n),
		comp:    make([]int32, n),
		onStack: make([]bool, n),
	}
}

// peerLiveness runs Tarjan's algorithm over the states where p waits and
// returns the most entries of others on a path through them (-1 if a
// cycle has one: unbounded), and a fair cycle that starves p, if any.
func (c *checker) peerLiveness(sc *sccs, p int) (int, *lasso) {
	bit := uint64(1) << uint(p)
	in := func(s int32) bool { return c.info[s].wait&bit != 0 }
	for i := range sc.index {
		sc.index[i] = -1
		sc.comp[i] = -1
	}
	var dist []int // dist[component]: most entries by others on a path from it
	unbounded := false
	var found *lasso
	next := int32(0)
	for root := range int32(len(c.info)) {
		if !in(root) || sc.index[root] >= 0 {
			continue
		}
		sc.calls = append(sc.calls[:0], sccFrame{v: root, e: c.off[root]})
		sc.index[root], sc.low[root] = next, next
		next++
		sc.stack = append(sc.stack, root)
		sc.onStack[root] = true
		for len(sc.calls) > 0 {
			f := &sc.calls[len(sc.calls)-1]
			v := f.v
			if f.e < c.off[v+1] {
				e := f.e
				f.e++
				u := c.to[e]
				if !in(u) {
					continue
				}
				if sc.index[u] < 0 {
					sc.index[u], sc.low[u] = next, next
					next++
					sc.stack = append(sc.stack, u)
					sc.onStack[u] = true
					sc.calls = append(sc.calls, sccFrame{v: u, e: c.off[u]})
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
			id := int32(len(dist))
			sc.members = sc.members[:0]
			for {
				u := sc.stack[len(sc.stack)-1]
				sc.stack = sc.stack[:len(sc.stack)-1]
				sc.onStack[u] = false
				sc.comp[u] = id
				sc.members = append(sc.members, u)
				if u == v {
					break
				}
			}
			d, cyclic := 0, false
			for _, u := range sc.members {
				for e := c.off[u]; e < c.off[u+1]; e++ {
					t := c.to[e]
					if !in(t) {
						continue
					}
					w := 0
					if c.ent[e] >= 0 {
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
			dist = append(dist, d)
			if cyclic && found == nil {
				found = c.fairCycle(sc, id)
			}
		}
	}
	if unbounded {
		return -1, found
	}
	best := 0
	for _, d := range dist {
		best = max(best, d)
	}
	return best, found
}

// fairCycle returns a lasso through component id (whose states are
// sc.members) if the component is fair (checker.fairComponent): every
// class enabled in all its states is taken by an edge inside it.
// Enabledness is a property of a state: a class is enabled in a state
// when at least one edge of that class leaves it, however many do.
func (c *checker) fairCycle(sc *sccs, id int32) *lasso {
	if !c.fairComponent(sc.members, sc.comp, id, everyEdge) {
		return nil
	}
	var need []int32 // the classes enabled in every state of the component
	enabled := map[int32]int{}
	var here []int32
	for _, u := range sc.members {
		here = here[:0]
		for e := c.off[u]; e < c.off[u+1]; e++ {
			if k := c.cls[e]; k >= 0 && !slices.Contains(here, k) {
				here = append(here, k)
				enabled[k]++
			}
		}
	}
	for k, n := range enabled {
		if n == len(sc.members) {
			need = append(need, k)
		}
	}
	slices.Sort(need)
	s0 := slices.Min(sc.members)
	path := c.pathTo(s0)
	cycle := len(path)
	cur := s0
	for _, k := range need {
		seg := c.walk(sc, id, cur, func(e int32) bool { return c.cls[e] == k })
		path = append(path, seg...)
		cur = path[len(path)-1]
	}
	// Back to s0, taking at least one step.
	seg := c.walk(sc, id, cur, func(e int32) bool { return c.to[e] == s0 })
	path = append(path, seg...)
	return &lasso{path: path, cycle: cycle}
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
