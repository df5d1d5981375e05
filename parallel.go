package dmutex

import (
	"sync"
	"sync/atomic"
	"time"
)

// The parallel breadth-first search (CheckConfig.Workers with the graph
// over an unordered network, and wherever a parallel depth-first search,
// below or in pargraph.go, is made again).
//
// It is the breadth-first search of breadthFirst, cut into batches: the
// next states of the queue, up to batchSize, are expanded by the workers
// at once, and then merged by one goroutine, in the queue's order, into
// the table of hashes, the queue, the state numbers and the graph.
// Expanding a state (listing its transitions, checking it if quiet,
// copying and stepping a world for each transition, encoding and hashing
// it, and looking the hash up) is nearly all of the cost, and the workers
// share nothing while they do it: each steps its own parents' worlds
// (whose machines their copies share only to read them), encodes with
// its own hasher, and only reads the table, which nobody writes until the
// merge. The merge does what decides the result, in exactly the order of
// the search on one goroutine: it numbers each new state, counts the
// transitions, checks the state and memory limits, stops at the first
// violation and records the first deadlock. So the result (states,
// transitions, verdicts, the counterexample itself, a shortest one) is
// the same for any number of workers, and the same as breadthFirst's;
// the workers only ever did work that the merge may throw away (past a
// violation or a limit).
//
// Breadth first rather than depth first: a parallel depth-first search
// finds states in an order that depends on timing, so where it stops (at
// a violation or a limit), and which counterexample it reports, would
// change from run to run; breadth first, the order is the queue's. The
// price is memory: without the graph the search still keeps each state's
// number and parent (8 bytes more a state than depth first) and holds the
// frontier's worlds, which MaxMemory bounds, where depth first holds only
// the worlds of one path.

// batchSize is the most states the workers expand between two merges:
// enough that they rarely wait for each other at the end of a batch, few
// enough that the successors waiting to be merged stay in the caches.
const batchSize = 256

// An expansion is what a worker found from one state of a batch.
type expansion struct {
	trs    []Transition
	v      verdict
	flags  uint8
	broken error
	succ   []successor // one per transition, until one broke a promise
	cut    bool        // the context ended before the worker finished
}

// A successor is the world one transition leads to.
type successor struct {
	w       *World // nil when the state was known to the worker
	fp      fingerprint
	to      int32 // the known state's number
	entered int8
	err     error // the step broke a promise: the search stops here
	fenced  bool  // with err: the promise of the fenced store
	overlap error // with Fenced: the step let a second peer in
}

// expander is one worker's scratch.
type expander struct {
	hash  hasher
	spare *World
}

// expand fills e with what w's transitions lead to.
func (c *checker) expand(x *expander, w *World, e *expansion) {
	e.succ = e.succ[:0]
	e.cut = false
	e.trs, e.v, e.flags, e.broken = inspect(w, e.trs)
	if e.v == vBroken || (e.v == vDeadlock && c.cc.StopAtDeadlock) {
		return
	}
	if c.interrupted() {
		e.cut = true
		return
	}
	for _, t := range e.trs {
		var next *World
		if x.spare != nil {
			next, x.spare = w.cloneInto(x.spare), nil
		} else {
			next = w.Clone()
		}
		st, err := next.apply(t)
		s := successor{entered: int8(st.Entered), err: err, overlap: st.overlap}
		if err != nil {
			s.fenced = next.store != nil && next.store.broken
			e.succ = append(e.succ, s)
			return
		}
		s.fp = x.hash.fingerprint(next)
		if to, seen := c.fps.get(s.fp); seen {
			s.to = to
			x.spare = next // a known state: reuse its arrays
		} else {
			s.w = next
		}
		e.succ = append(e.succ, s)
	}
}

// parallelBreadthFirst explores from w breadth first, with
// c.cc.Workers goroutines expanding states, and the graph if c.graph; it
// finds what breadthFirst finds. It reports whether it saw every state,
// returns errInterrupted as soon as the context ends, and stops at the
// first state past a limit.
func (c *checker) parallelBreadthFirst(w *World) (bool, error) {
	c.parent = append(c.parent, -1)
	c.frontier = append(c.frontier[:0], w)
	work := c.frontier
	defer func() { c.frontier = work }() // kept until Check returns, for tests that weigh it
	ids := []int32{0}
	head := 0
	xs := make([]expander, c.cc.Workers)
	for i := range xs {
		xs[i].hash = hasher{seeds: &c.seeds, bits: c.cc.Fingerprint}
	}
	exps := make([]expansion, batchSize)
	batch := make([]*World, 0, batchSize)
	for head < len(work) {
		batch = append(batch[:0], work[head:min(len(work), head+batchSize)]...)
		var next atomic.Int64
		run := func(x *expander) {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(batch) {
					return
				}
				c.expand(x, batch[i], &exps[i])
			}
		}
		var wg sync.WaitGroup
		for i := 1; i < len(xs) && i < len(batch); i++ {
			wg.Go(func() { run(&xs[i]) })
		}
		run(&xs[0])
		wg.Wait()

		for i, cur := range batch {
			id := ids[head]
			work[head] = nil
			head++
			if c.overBudget(len(work) - head) {
				return false, nil
			}
			c.tick()
			e := &exps[i]
			c.record(cur, e.flags)
			switch e.v {
			case vDeadlock:
				if c.firstDeadlock < 0 {
					c.firstDeadlock = id
				}
				if c.cc.StopAtDeadlock {
					c.stopped = StoppedAtViolation
					return false, nil
				}
			case vBroken:
				c.safetyViolation(id, Transition{}, e.broken)
				return false, nil
			}
			if e.cut {
				return false, errInterrupted
			}
			for k, s := range e.succ {
				if c.interrupted() {
					return false, errInterrupted
				}
				t := e.trs[k]
				c.res.Transitions++
				if s.err != nil {
					c.safetyViolation(id, t, s.err)
					if s.fenced {
						c.res.Violation.Property = "fenced safety"
						c.unsafe, c.fencedBroken = false, true
					}
					return false, nil
				}
				if s.overlap != nil && c.overlap == nil {
					c.overlap = c.violation("safety", c.pathTo(id), -1, t, s.overlap.Error())
				}
				to := s.to
				if s.w != nil {
					var seen bool
					to, seen = c.fps.get(s.fp)
					if !seen {
						if c.full() {
							return false, nil
						}
						to = int32(c.res.States)
						c.fps.add(s.fp, to)
						c.parent = append(c.parent, id)
						c.res.States++
						work = append(work, dropSpare(s.w))
						ids = append(ids, to)
						if c.res.States&1023 == 0 {
							c.sample(s.w)
						}
					}
					e.succ[k].w = nil
				}
				if c.graph {
					c.to = append(c.to, to)
					c.cls = append(c.cls, c.classOf(cur, t))
					c.ent = append(c.ent, s.entered)
				}
			}
		}
		clear(batch)
		if head > 4096 && head*2 > len(work) {
			n := copy(work, work[head:]) // drop the explored prefix
			clear(work[n:])
			work = work[:n]
			ids = ids[:copy(ids, ids[head:])]
			head = 0
		}
	}
	return true, nil
}

// The parallel depth-first search (CheckConfig.Workers with SafetyOnly).
//
// Each worker runs the depth-first search of depthFirst on a share of the
// state space, and all of them insert into one visited set
// (sharedVisited): the worker that inserts a state first owns it, and
// examines it and takes each of its transitions, so that every reachable
// state is examined once and every transition taken once, whatever the
// number of workers and however they interleave. A complete search thus
// counts the same States, Transitions and Blocked as depthFirst (and as
// the breadth-first search with the graph), and decides safety and
// deadlock freedom the same way. The frontier stays the workers' paths
// and the few frames handed over, and the garbage collector has little
// to scan.
//
// Only whether the search finds something is independent of timing, not
// where it stops: which violation is met first, and how many states were
// counted by then, change from run to run. So when a worker meets
// anything that would stop the search or make its answer depend on the
// order (a safety violation, a deadlock, two peers inside under Fenced,
// the state or memory limit), every worker stops, and the search is made
// again from the start by parallelBreadthFirst (checker.again), whose
// result does not depend on the workers: the states up to the violation
// or limit, and a shortest counterexample. That costs a second search,
// but one that stops early when the violation is shallow; a deadlock deep
// in a big space, or a run to a state limit, pays for it in full.
//
// # Handing work over, and knowing when it is all done
//
// A worker is busy while it holds frames with transitions left, and idle
// otherwise. An idle worker puts itself on the list p.idle, under p.mu,
// and blocks on its own condition variable until it is handed a task or
// the search is over; it never spins. A busy worker reads p.hungry (the
// length of p.idle, stored under p.mu) once a transition, and when it is
// not zero hands over the lowest frame of its path that has transitions
// left, if that frame is not its top one: under p.mu it takes an idle
// worker off the list, puts the task in that worker's slot and signals
// it. The worker handed a task is busy from that moment, before it even
// wakes, so nobody else (the giver running dry meanwhile included) can
// take the task or count that worker as idle.
//
// The search is over exactly when every worker is on the list: a task
// lives only in the slot of a worker that is off the list, or in the
// frames of a busy one, so with all of them on the list no transition is
// left to take, and no worker is left to hand one over. The worker that
// completes the list (under p.mu, where every change to it happens) sees
// that, sets p.done and wakes the others. halt, for a violation, a limit
// or the context, does the same at any time.
//
// Why it terminates: a busy worker never blocks except on p.mu, held for
// a few instructions. Each of its steps takes a transition (finitely many:
// each state is expanded once), pops a frame (at most one for each
// push), or hands a frame over. It never hands over its top frame, so it
// keeps at least one transition to take itself, and each hand-over leaves
// it one frame fewer below its top with transitions left: between two of
// its transitions it hands over at most as many frames as its path is
// deep. (The search this replaces let a worker hand over its top frame,
// the whole of a task it had just been given before taking a step of it:
// two workers then threw one task to each other for ever, each going idle
// as the other woke, 67 million hand-overs in 10 minutes under -race.) So
// the busy workers run out of transitions, and go idle one by one; the
// last completes the list.

// A task is a frame of a depth-first search handed from one worker to
// another: a state already examined, and the transitions from it still
// to take.
type task struct {
	w    *World
	trs  []Transition
	edge int32 // with the graph: the number of trs[0]'s edge (pargraph.go)
}

// pdfs is the shared part of a parallel depth-first search.
type pdfs struct {
	c       *checker
	set     *sharedVisited
	workers int
	g       *pgraph // the graph (pargraph.go), nil without

	mu   sync.Mutex
	idle []*pworker // idle workers, each waiting on its wake for a task
	done bool       // the search is over: every worker idle, or halted

	hungry atomic.Int32 // len(idle), to read without the lock
	stop   atomic.Bool  // every worker stops: see redo and cut
	redo   atomic.Bool  // a violation or limit: the search is made again breadth first
	cut    atomic.Bool  // the context ended
	states atomic.Int64
	// transitions is what the workers have taken, each adding its own
	// count every 1024 states it adds: for progress reports, which it
	// trails by at most that much a worker.
	transitions atomic.Int64

	handovers atomic.Int64 // tasks handed over (checker.handovers)
}

// pworker is one worker's scratch and counts.
type pworker struct {
	hash        hasher
	transitions int
	reported    int // transitions already added to pdfs.transitions
	blocked     int
	added       int
	first       bool // the worker that reports progress

	wake sync.Cond // on p.mu: signalled when next is set, or the search is over
	next *task     // handed over by a busy worker, under p.mu

	// With the graph (pargraph.go): the kinds of edge this worker has
	// named, and the deadlocked states and the steps that let two peers
	// in (with Fenced) that it found.
	kindOf    map[edgeKind]uint8
	deadlocks []int32
	overlaps  []int32
}

// parallelDepthFirst explores from w as described above, with
// c.cc.Workers workers, without the graph. It reports whether it saw
// every state, and whether the search must be made again breadth first
// (see above); it returns errInterrupted as soon as the context ends.
func (c *checker) parallelDepthFirst(w *World) (complete, redo bool, err error) {
	p := &pdfs{c: c, set: newSharedVisited(c.cc.Fingerprint, false), workers: c.cc.Workers}
	defer p.set.release()
	xs := make([]*pworker, p.workers)
	for i := range xs {
		xs[i] = &pworker{hash: hasher{seeds: &c.seeds, bits: c.cc.Fingerprint}, first: i == 0}
		xs[i].wake.L = &p.mu
	}
	x0 := xs[0]
	p.set.add(x0.hash.fingerprint(w))
	p.states.Store(1)
	trs, v, flags, _ := inspect(w, nil)
	if flags&stBlocked != 0 {
		x0.blocked++
	}
	if v != vOK {
		p.redo.Store(true)
	} else {
		// The first worker starts busy with the initial state; the others
		// start idle.
		var wg sync.WaitGroup
		for _, x := range xs[1:] {
			wg.Go(func() { p.run(x, nil) })
		}
		p.run(x0, &task{w: w, trs: trs})
		wg.Wait()
		c.handovers = int(p.handovers.Load())
		for _, x := range xs {
			c.res.Transitions += x.transitions
			c.res.Blocked += x.blocked
		}
	}
	switch {
	case p.cut.Load():
		c.res.States = int(p.states.Load())
		return false, false, errInterrupted
	case p.redo.Load():
		return false, true, nil
	}
	c.res.States = p.set.len()
	c.expanded = c.res.States
	c.waiting = 0
	return true, false, nil
}

// halt stops every worker; redo says that the search must be made again.
func (p *pdfs) halt(redo bool) {
	if redo {
		p.redo.Store(true)
	} else {
		p.cut.Store(true)
	}
	p.stop.Store(true)
	p.mu.Lock()
	p.finish()
	p.mu.Unlock()
}

// finish ends the search and wakes every idle worker; p.mu is held.
func (p *pdfs) finish() {
	p.done = true
	for _, x := range p.idle {
		x.wake.Signal()
	}
}

// run explores t, if not nil, and then each task it is handed, until the
// search is over. A worker that starts without a task starts idle: it
// must be on the list, or the last busy worker would wait for it for
// ever.
func (p *pdfs) run(x *pworker, t *task) {
	if t == nil {
		t = p.get(x)
	}
	for t != nil {
		p.explore(x, t)
		t = p.get(x)
	}
}

// get makes x idle until it is handed a task, which it returns, or until
// the search is over (nil). If x is the last worker to go idle, the
// search is over (see above).
func (p *pdfs) get(x *pworker) *task {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return nil
	}
	p.idle = append(p.idle, x)
	p.hungry.Store(int32(len(p.idle)))
	if len(p.idle) == p.workers {
		p.finish()
		return nil
	}
	for x.next == nil && !p.done {
		x.wake.Wait()
	}
	t := x.next
	x.next = nil
	return t
}

// share hands stack[i], a frame with transitions left below the top one,
// to an idle worker, if one is still idle, and reports whether it did.
// The frame's world and transitions are the other worker's then: this
// worker has no frame below stack[i] with transitions left, so it never
// steps down to level i again in this task, and neither reuses the world
// nor (explore's fresh stack for each task) any world that shares
// machines with it.
func (p *pdfs) share(stack []dfsFrame, i int) bool {
	f := &stack[i]
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) == 0 || p.done {
		return false
	}
	x := p.idle[len(p.idle)-1]
	p.idle[len(p.idle)-1] = nil
	p.idle = p.idle[:len(p.idle)-1]
	p.hungry.Store(int32(len(p.idle)))
	x.next = &task{w: f.w, trs: f.trs[f.next:f.limit], edge: f.edge + int32(f.next)}
	f.w, f.trs, f.next, f.limit = nil, nil, 0, 0
	x.wake.Signal()
	p.handovers.Add(1)
	return true
}

// explore runs the depth-first search from the task's world over the
// task's transitions. The worlds of its path are its own: a fresh stack
// for each task, since the worlds handed over from an earlier one may
// share machines with them. With the graph (p.g), it also records each
// edge it takes and what holds in each state it adds (pargraph.go).
func (p *pdfs) explore(x *pworker, t *task) {
	c := p.c
	stack := []dfsFrame{{w: t.w, trs: t.trs, limit: len(t.trs), edge: t.edge}}
	// low is a level at or below the lowest frame with transitions left:
	// every frame under it is done, so a search for one to hand over
	// starts there, and each frame is passed over once.
	low := 0
	for len(stack) > 0 {
		top := len(stack) - 1
		f := &stack[top]
		if f.next == f.limit {
			stack = stack[:top]
			low = min(low, top)
			continue
		}
		if p.stop.Load() {
			return
		}
		if c.interrupted() {
			p.halt(false)
			return
		}
		if p.hungry.Load() > 0 {
			for low < top && stack[low].next == stack[low].limit {
				low++
			}
			if low < top && p.share(stack, low) {
				low++
				continue // another idle worker may want the next frame up
			}
		}
		tr := f.trs[f.next]
		e := f.edge + int32(f.next)
		f.next++
		x.transitions++
		if top+1 == cap(stack) {
			stack = append(stack, dfsFrame{})[:top+1]
			f = &stack[top]
		}
		child := &stack[:top+2][top+1]
		if child.w == nil {
			child.w = new(World)
		}
		next := f.w.cloneInto(child.w)
		st, err := next.apply(tr)
		if err != nil || (st.overlap != nil && p.g == nil) {
			p.halt(true)
			return
		}
		fp := x.hash.fingerprint(next)
		var n int64
		if p.g != nil {
			if !p.edge(x, f.w, e, tr, st) {
				return
			}
			id, seen := p.set.addID(fp, &p.states)
			p.g.to[e] = id
			if seen {
				continue
			}
			n = int64(id) + 1
		} else {
			if p.set.add(fp) {
				continue
			}
			n = p.states.Add(1)
		}
		if c.limit > 0 && n > int64(c.limit) || p.g != nil && n > int64(len(p.g.off)) {
			p.halt(true)
			return
		}
		x.added++
		if x.added&1023 == 0 {
			p.transitions.Add(int64(x.transitions - x.reported))
			x.reported = x.transitions
		}
		if x.added&4095 == 0 && x.first && c.cc.Progress != nil && time.Since(c.lastReport) > time.Second {
			c.lastReport = time.Now()
			c.cc.Progress(CheckProgress{States: int(p.states.Load()), Transitions: int(p.transitions.Load()), Elapsed: time.Since(c.start), Memory: p.memory(len(stack))})
		}
		if x.added&1023 == 0 && c.budget > 0 && p.memory(len(stack)) > c.budget {
			p.halt(true)
			return
		}
		stack = stack[:top+2]
		g := &stack[top+1]
		var v verdict
		var flags uint8
		g.trs, v, flags, _ = inspect(g.w, g.trs)
		g.next, g.limit = 0, len(g.trs)
		if flags&stBlocked != 0 {
			x.blocked++
		}
		if p.g != nil {
			if !p.reserve(x, int32(n-1), g, v, flags) {
				return
			}
		} else if v != vOK {
			p.halt(true)
			return
		}
	}
}

// memory returns what the search holds, with a path of the given depth
// for each worker: the shared table, the worlds on the paths, and with
// the graph what pargraph.go counts.
func (p *pdfs) memory(depth int) int64 {
	b := p.set.bytes.Load() + int64(depth*p.workers)*p.c.worldSize
	if p.g != nil {
		b += p.g.memory(p.states.Load(), min(p.workers, p.c.cc.N))
	}
	return b
}
