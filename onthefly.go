package dmutex

import (
	"cmp"
	"context"
	"math"
	"slices"
)

// Liveness on the fly (CheckConfig.OnTheFly): StarvationFree and
// MaxOvertakes decided during the search, keeping per state its slot in
// the table of hashes, one bit and one byte a peer, instead of the graph.
//
// liveness.go decides both over the stored graph G: for each peer p it
// runs Tarjan's algorithm over W_p, the states where p waits, and asks of
// each strongly connected component C of W_p whether it is fair (it holds
// an edge, and every class enabled in all its states is taken by an edge
// inside it), and how many entries of others a path through W_p can take
// from C (dist, infinite when an edge inside C lets someone in). Here the
// search itself runs Tarjan's algorithm over G as it goes, depth first:
// a state's number (its order of discovery) is its Tarjan index, and the
// states whose component is not yet complete, the pending states, are
// kept in discovery order with their edges (target and the byte of their
// kind, as deepgraph.go keeps them). When the search backs up out of the
// root of a component S of G, S is exactly the pending states from the
// root on, and everything an edge of S leads to outside S is done: its
// component was complete before S's. Then, for each p:
//
//   - Every cycle of W_p is a cycle of G, so it lies inside one component
//     of G: the components of W_p inside S are those of W_p ∩ S, found by
//     Tarjan's algorithm over S's edges alone. Fairness reads only the
//     edges leaving C's states (any target, for enabledness) and those
//     inside C, all of which are S's: each component is judged as
//     liveness.go judges it.
//   - dist of a component C is, as in liveness.go, the largest of w + dist
//     over C's edges into W_p but out of C (w is 1 for an edge that lets
//     someone in). An edge into W_p ∩ S reads the dist found just before
//     (Tarjan's algorithm completes a component after all those it leads
//     to); one out of S reads the byte d[t][p] stored when t's component
//     of G was complete. Each state of C stores C's dist in its byte for
//     p, or flyOut when p does not wait there.
//   - MaxOvertakes is the largest dist over all components of every W_p,
//     or -1 if one has an edge inside that lets someone in: the very
//     maximum liveness.go takes, since the components and their dist are
//     the same. A state stays pending only until its component of G is
//     complete, so what is held beyond the table is the path's worlds and
//     the pending states' edges: for algorithms whose graph has few or
//     small cycles, about as many states as the path is long.
//
// So the search on the fly decides the same verdicts and bounds as the
// search with the graph (TestOnTheFlyAgrees compares them). It does not
// build counterexamples, which need the graph's breadth-first parents:
// at anything it would report with one (a deadlock, a safety violation or
// a broken promise at rest, a step that let two peers in with Fenced, a
// fair component, which is starvation), and where the bytes would not do
// (more than 256 kinds of edge, or a bound past 254), it hands over: the
// search is made again from the start with the graph, and its result is
// that one's. A state or memory limit, or the context, stops it as it
// stops the search with the graph, with liveness undecided.

// flyOut is a state's byte for a peer that does not wait there.
const flyOut = math.MaxUint8

// flySearch is the state of the search on the fly.
type flySearch struct {
	n int // peers
	// Per state, by number: done has its bit once its component of G is
	// complete; then d[s*n+p] is the dist of its component of W_p, or
	// flyOut if p does not wait in s.
	done []uint64
	d    []uint8
	// The pending states in order of discovery (Tarjan's stack), and
	// their edges: a state's are to[off:] up to the next one's off.
	recs []flyRecord
	to   []int32
	code []uint8
	peak int64 // the most bytes the pending arrays held (mapped pages stay backed)
	// Per peer: the largest dist so far, and whether an edge inside a
	// component of W_p let someone in.
	best      []int
	unbounded []bool
	sc        flyScratch
	// cycles counts the components of G of more than one state, and
	// largest is the most states one had: what the pending states cost
	// depends on them. (A state with an edge to itself is a component
	// with a cycle too, but none of the machines here has one, and it
	// costs nothing to hold.)
	cycles, largest int
}

// flyRecord is a pending state: its number, what holds there, and where
// its edges begin.
type flyRecord struct {
	id   int32
	info stateInfo
	off  int32
}

// flyFrame is a state on the depth-first path: its world, its number,
// its Tarjan low link, its place among the pending states, and its
// transitions with the next one to take.
type flyFrame struct {
	w    *World
	id   int32
	low  int32
	rec  int32
	trs  []Transition
	next int
}

// flyScratch is a component's analysis scratch, reused.
type flyScratch struct {
	lto  []int32 // each edge's target among the members, -1 if out of the component
	dist []int32 // per component of W_p
	sccs
}

func newFlySearch(n int) *flySearch {
	return &flySearch{n: n, best: make([]int, n), unbounded: make([]bool, n)}
}

// isDone reports whether state s's component of G is complete.
func (f *flySearch) isDone(s int32) bool { return f.done[s/64]&(1<<uint(s%64)) != 0 }

// release returns the search's mapped arrays (bigarray.go).
func (f *flySearch) release() {
	unmapArray(f.done)
	unmapArray(f.d)
	unmapArray(f.recs)
	unmapArray(f.to)
	unmapArray(f.code)
	f.done, f.d, f.recs, f.to, f.code = nil, nil, nil, nil, nil
}

// bytes is what the search on the fly holds beside the table and the
// worlds.
func (f *flySearch) bytes() int64 {
	sc := &f.sc
	return arrayBytes(f.done) + arrayBytes(f.d) + f.peak +
		4*int64(cap(sc.lto)+cap(sc.dist)+cap(sc.index)+cap(sc.low)+cap(sc.comp)+cap(sc.stack)+cap(sc.members)) +
		int64(cap(sc.onStack)) + 8*int64(cap(sc.calls))
}

// onTheFly explores from w depth first, deciding liveness as it goes
// (see the top of this file). It reports whether it saw every state, and
// whether it met something that needs the search with the graph; it
// returns errInterrupted as soon as the context ends, and stops at the
// first state past the limit.
func (c *checker) onTheFly(w *World) (complete, handOver bool, err error) {
	f := c.fly
	c.kindOf = map[edgeKind]uint8{}
	reserve := c.stateReserve()
	addState := func() {
		s := c.res.States - 1
		if s%64 == 0 {
			f.done = append(grow(f.done, 1, reserve/64+1), 0)
		}
		f.d = grow(f.d, f.n, reserve*f.n)[:len(f.d)+f.n]
	}
	addState()
	stack := []flyFrame{{w: w}}
	// push examines the world just put on top of the stack and makes it
	// pending; it reports false when the search must hand over.
	push := func() bool {
		fr := &stack[len(stack)-1]
		var v verdict
		var flags uint8
		fr.trs, v, flags, _ = inspect(fr.w, fr.trs)
		fr.next = 0
		if flags&stBlocked != 0 {
			c.res.Blocked++
		}
		if v != vOK {
			return false // a deadlock, or a promise at rest broken
		}
		if int64(len(f.to))+int64(len(fr.trs)) > math.MaxInt32 {
			return false // the pending edges are numbered in int32
		}
		fr.rec = int32(len(f.recs))
		f.recs = append(grow(f.recs, 1, reserve), flyRecord{id: fr.id, info: c.infoOf(fr.w, flags), off: int32(len(f.to))})
		f.to = grow(f.to, len(fr.trs), math.MaxInt32)[:len(f.to)+len(fr.trs)]
		f.code = grow(f.code, len(fr.trs), math.MaxInt32)[:len(f.code)+len(fr.trs)]
		f.peak = max(f.peak, arrayBytes(f.recs)+arrayBytes(f.to)+arrayBytes(f.code))
		return true
	}
	if !push() {
		return false, true, nil
	}
	for len(stack) > 0 {
		top := len(stack) - 1
		if top+1 == cap(stack) {
			stack = append(stack, flyFrame{})[:top+1] // room for the next world
		}
		fr := &stack[top]
		if fr.next == len(fr.trs) {
			id, low, rec := fr.id, fr.low, fr.rec
			stack = stack[:top]
			if top > 0 {
				stack[top-1].low = min(stack[top-1].low, low)
			}
			if low == id && !c.flyComponent(rec) {
				return false, true, nil
			}
			continue
		}
		if c.overBudget(len(stack)) {
			return false, false, nil
		}
		if c.interrupted() {
			return false, false, errInterrupted
		}
		t := fr.trs[fr.next]
		e := f.recs[fr.rec].off + int32(fr.next)
		fr.next++
		c.res.Transitions++
		next, st, err := stepInto(fr.w, &stack[:top+2][top+1].w, t)
		if err != nil || st.overlap != nil {
			return false, true, nil // a safety violation, or two inside with Fenced
		}
		code, ok := nameKind(c.kindOf, &c.kinds, edgeKind{c.classOf(fr.w, t), int8(st.Entered)})
		if !ok {
			return false, true, nil
		}
		f.code[e] = code
		fp := c.fingerprint(next)
		to, seen := c.fps.get(fp)
		if seen {
			f.to[e] = to
			if !f.isDone(to) {
				fr.low = min(fr.low, to) // pending: on Tarjan's stack, and its index is its number
			}
			continue
		}
		if c.full() {
			return false, false, nil
		}
		to = int32(c.res.States)
		c.fps.add(fp, to)
		f.to[e] = to
		c.res.States++
		addState()
		stack = stack[:top+2]
		stack[top+1].id, stack[top+1].low = to, to
		c.tick()
		if c.res.States&1023 == 0 {
			c.sample(next)
		}
		if !push() {
			return false, true, nil
		}
	}
	return true, false, nil
}

// flyComponent decides, for each peer, the components of W_p inside the
// component of G made of the pending states from recs[r] on, which the
// search has just backed out of; stores each member's bytes, marks the
// members done and drops them. It reports false when the search must
// hand over: a fair component (starvation), or a dist past a byte.
func (c *checker) flyComponent(r int32) bool {
	f, sc := c.fly, &c.fly.sc
	members := f.recs[r:]
	m := int32(len(members))
	base := members[0].off
	end := func(i int32) int32 {
		if i+1 < m {
			return members[i+1].off
		}
		return int32(len(f.to))
	}
	// Each edge's target among the members (ids rise with the records),
	// or -1 for a done state outside.
	sc.lto = sc.lto[:0]
	for _, t := range f.to[base:] {
		l := int32(-1)
		if !f.isDone(t) {
			i, _ := slices.BinarySearchFunc(members, t, func(rc flyRecord, t int32) int { return cmp.Compare(rc.id, t) })
			l = int32(i)
		}
		sc.lto = append(sc.lto, l)
	}
	if m > 1 {
		f.cycles++
		f.largest = max(f.largest, int(m))
	}
	sc.index = slices.Grow(sc.index[:0], int(m))[:m]
	sc.low = slices.Grow(sc.low[:0], int(m))[:m]
	sc.comp = slices.Grow(sc.comp[:0], int(m))[:m]
	sc.onStack = slices.Grow(sc.onStack[:0], int(m))[:m]
	edges := func(i int32) (int32, int32) { return members[i].off, end(i) }
	target := func(e int32) int32 { return sc.lto[e-base] }
	for p := range f.n {
		bit := uint32(1) << uint(p)
		in := func(i int32) bool { return members[i].info.wait&bit != 0 }
		sc.dist = sc.dist[:0]
		weigh := func(id int32) bool {
			d, cyclic := int32(0), false
			for _, u := range sc.members {
				for e := members[u].off; e < end(u); e++ {
					w := int32(0)
					if c.kinds[f.code[e]].ent >= 0 {
						w = 1
					}
					l := sc.lto[e-base]
					switch {
					case l < 0:
						if b := f.d[int(f.to[e])*f.n+p]; b != flyOut {
							d = max(d, w+int32(b))
						}
					case !in(l):
					case sc.comp[l] == id:
						cyclic = true
						if w > 0 {
							f.unbounded[p] = true
						}
					default:
						d = max(d, w+sc.dist[sc.comp[l]])
					}
				}
			}
			if f.unbounded[p] {
				d = min(d, flyOut-1) // the bound is -1 whatever d is
			}
			if d >= flyOut {
				return false
			}
			sc.dist = append(sc.dist, d)
			f.best[p] = max(f.best[p], int(d))
			return !cyclic || !fairOver(sc.members, func(u int32, yield func(int32, bool)) {
				for e := members[u].off; e < end(u); e++ {
					l := sc.lto[e-base]
					yield(c.kinds[f.code[e]].cls, l >= 0 && sc.comp[l] == id)
				}
			})
		}
		if !sc.components(m, in, edges, target, weigh) {
			return false
		}
		for i, rc := range members {
			b := uint8(flyOut)
			if in(int32(i)) {
				b = uint8(sc.dist[sc.comp[i]])
			}
			f.d[int(rc.id)*f.n+p] = b
		}
	}
	for _, rc := range members {
		f.done[rc.id/64] |= 1 << uint(rc.id%64)
	}
	f.recs = f.recs[:r]
	f.to, f.code = f.to[:base], f.code[:base]
	return true
}

// flyResult records what the search on the fly decided, once it saw
// every state without handing over: no component was fair, so no peer
// starves, and MaxOvertakes is the largest dist unless one was unbounded.
func (c *checker) flyResult() {
	f := c.fly
	c.res.Liveness = true
	c.res.MaxOvertakes = slices.Max(f.best)
	if slices.Contains(f.unbounded, true) {
		c.res.MaxOvertakes = -1
	}
}

// handOver runs the search again from the start with the graph, as a new
// checker whose result replaces c's, keeping c's start time.
func (c *checker) handOver(ctx context.Context) error {
	cc := c.given
	cc.OnTheFly = false
	return c.restart(ctx, cc)
}
