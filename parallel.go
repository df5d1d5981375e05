package dmutex

import (
	"sync"
	"sync/atomic"
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
