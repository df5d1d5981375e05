package dmutex

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The parallel search (CheckConfig.Workers).
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
						work = append(work, s.w)
						ids = append(ids, to)
						if c.res.States&1023 == 0 {
							c.sample(s.w)
						}
					}
					e.succ[k].w = nil
				}
				if c.graph {
					c.to = append(c.to, to)
					c.cls = append(c.cls, c.classOf(t))
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
// deadlock freedom the same way. Work is shared by handing over frames:
// a worker that runs dry says so (hungry), and a busy one gives it the
// lowest frame of its path that has transitions left (the world, which
// it then no longer touches, and those transitions), the biggest share
// it has. The frontier stays the workers' paths and the few frames
// handed over, and the garbage collector has little to scan.
//
// Only whether the search finds something is independent of timing, not
// where it stops: which violation is met first, and how many states were
// counted by then, change from run to run. So when a worker meets
// anything that would stop the search or make its answer depend on the
// order (a safety violation, a deadlock, two peers inside under Fenced,
// the state or memory limit), every worker stops, and the search is made
// again from the start by parallelBreadthFirst (checker.again), whose result does not
// depend on the workers: the states up to the violation or limit, and a
// shortest counterexample. That costs a second search, but one that stops
// early when the violation is shallow; a deadlock deep in a big space, or
// a run to a state limit, pays for it in full.

// A task is a frame of a depth-first search handed from one worker to
// another: a state already examined, and the transitions from it still
// to take.
type task struct {
	w   *World
	trs []Transition
}

// pdfs is the shared part of a parallel depth-first search.
type pdfs struct {
	c       *checker
	set     *sharedVisited
	workers int

	mu       sync.Mutex
	cond     sync.Cond
	pool     []task
	idle     int // workers in get
	waiting  int // workers waiting for a task that nobody has handed over yet
	promised int // tasks in pool handed over to waiting workers
	done     bool

	hungry atomic.Int32 // waiting, to read without the lock
	stop   atomic.Bool  // every worker stops: see redo and cut
	redo   atomic.Bool  // a violation or limit: the search is made again breadth first
	cut    atomic.Bool  // the context ended
	states atomic.Int64
}

// pworker is one worker's scratch and counts.
type pworker struct {
	hash        hasher
	transitions int
	blocked     int
	added       int
	first       bool // the worker that reports progress
}

// parallelDepthFirst explores from w as described above, with
// c.cc.Workers workers, without the graph. It reports whether it saw
// every state, and whether the search must be made again breadth first
// (see above); it returns errInterrupted as soon as the context ends.
func (c *checker) parallelDepthFirst(w *World) (complete, redo bool, err error) {
	p := &pdfs{c: c, set: newSharedVisited(c.cc.Fingerprint), workers: c.cc.Workers}
	p.cond.L = &p.mu
	x0 := &pworker{hash: hasher{seeds: &c.seeds, bits: c.cc.Fingerprint}, first: true}
	p.set.add(x0.hash.fingerprint(w))
	p.states.Store(1)
	trs, v, flags, _ := inspect(w, nil)
	if flags&stBlocked != 0 {
		x0.blocked++
	}
	if v != vOK {
		p.redo.Store(true)
	} else {
		p.pool = append(p.pool, task{w: w, trs: trs})
		xs := make([]*pworker, p.workers)
		xs[0] = x0
		for i := 1; i < len(xs); i++ {
			xs[i] = &pworker{hash: hasher{seeds: &c.seeds, bits: c.cc.Fingerprint}}
		}
		var wg sync.WaitGroup
		for _, x := range xs[1:] {
			wg.Go(func() { p.run(x) })
		}
		p.run(x0)
		wg.Wait()
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
	p.done = true
	p.cond.Broadcast()
	p.mu.Unlock()
}

// run takes tasks until there are none left and every worker waits for
// one, or the search stops.
func (p *pdfs) run(x *pworker) {
	for {
		t, ok := p.get()
		if !ok {
			return
		}
		p.explore(x, t)
	}
}

// get returns a task to explore, or false when the search is over. A
// task handed to a waiting worker is promised to it, so that the worker
// that handed it over, running dry first, does not take it back (and hand
// its own world over again, and again, while the other waits to be
// scheduled on a busy machine).
func (p *pdfs) get() (task, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	woken := false
	for !p.done {
		switch {
		case woken && p.promised > 0:
			p.promised--
		case len(p.pool) > p.promised:
		default:
			p.idle++
			if p.idle == p.workers && len(p.pool) == 0 {
				p.done = true // nobody is left to hand a task over
				p.cond.Broadcast()
				return task{}, false
			}
			p.waiting++
			p.hungry.Store(int32(p.waiting))
			p.cond.Wait()
			p.idle--
			woken = true
			continue
		}
		t := p.pool[len(p.pool)-1]
		p.pool[len(p.pool)-1] = task{}
		p.pool = p.pool[:len(p.pool)-1]
		return t, true
	}
	return task{}, false
}

// share hands the lowest frame of stack with transitions left to a
// worker that waits for one, if one still does.
func (p *pdfs) share(stack []dfsFrame) {
	for i := range stack {
		f := &stack[i]
		if f.next == f.limit {
			continue
		}
		p.mu.Lock()
		if p.waiting > 0 && !p.done {
			p.pool = append(p.pool, task{w: f.w, trs: slices.Clone(f.trs[f.next:f.limit])})
			// The world is the other worker's now; no frame below has
			// transitions left, so this level's world is never reused
			// for a sibling.
			f.limit, f.w = f.next, nil
			p.waiting--
			p.promised++
			p.hungry.Store(int32(p.waiting))
			p.cond.Signal()
		}
		p.mu.Unlock()
		return
	}
}

// explore runs the depth-first search from the task's world over the
// task's transitions. The worlds of its path are its own: a fresh stack
// for each task, since the worlds handed over from an earlier one may
// share machines with them.
func (p *pdfs) explore(x *pworker, t task) {
	c := p.c
	stack := []dfsFrame{{w: t.w, trs: t.trs, limit: len(t.trs)}}
	for len(stack) > 0 {
		top := len(stack) - 1
		f := &stack[top]
		if f.next == f.limit {
			stack = stack[:top]
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
			p.share(stack)
			if f.next == f.limit {
				continue
			}
		}
		tr := f.trs[f.next]
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
		if err != nil || st.overlap != nil {
			p.halt(true)
			return
		}
		if p.set.add(x.hash.fingerprint(next)) {
			continue
		}
		n := p.states.Add(1)
		if c.limit > 0 && n > int64(c.limit) {
			p.halt(true)
			return
		}
		x.added++
		if x.added&4095 == 0 && x.first && c.cc.Progress != nil && time.Since(c.lastReport) > time.Second {
			c.lastReport = time.Now()
			c.cc.Progress(CheckProgress{States: int(n), Elapsed: time.Since(c.start), Memory: p.set.bytes.Load() + int64(len(stack)*p.workers)*c.worldSize})
		}
		if x.added&1023 == 0 && c.budget > 0 && p.set.bytes.Load()+int64(len(stack)*p.workers)*c.worldSize > c.budget {
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
		if v != vOK {
			p.halt(true)
			return
		}
	}
}
