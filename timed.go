package dmutex

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
)

// Timing sets the clock of a timed run (see RunTimed). Every duration is
// in units of T, the mean one-way message delay.
type Timing struct {
	// Jitter spreads each message's delay uniformly over
	// [1-Jitter, 1+Jitter] T; zero (the default) makes every delay
	// exactly T. It must lie in [0, 1).
	Jitter float64

	// CS is E, how long each critical section lasts, in T. Zero makes
	// entries instantaneous.
	CS float64

	// Rate is how many requests each peer makes per T, by a Poisson
	// process: a peer that is still waiting or inside when its next
	// request arrives queues it. Zero means saturation, the heaviest
	// load: every peer requests at the start and again the moment it
	// leaves.
	Rate float64

	// Entries is how many entries the run measures; the default is 400.
	Entries int

	// Warmup is how many entries are made before measuring starts, so
	// that the start (every token at its first holder, every queue
	// empty) does not weigh on the means; the default is none.
	Warmup int

	// Seed seeds the jitter and the arrivals.
	Seed uint64

	// Network is the network model: with NetworkFIFO (the default) a
	// message never overtakes an earlier one between the same two peers;
	// with NetworkUnordered a jittered one may, for any algorithm, as in
	// a World.
	Network Network

	// Variant, if not empty, names a variant of the algorithm to run
	// instead (see WorldConfig.Variant).
	Variant string
}

// TimedResult is what a timed run measured, every time in units of T.
type TimedResult struct {
	Entries int // entries measured

	// SyncDelay is the mean time from an exit to the next entry, over
	// the exits at which another peer was waiting (the textbook's
	// synchronization delay); SyncSamples is how many exits it averages,
	// zero when no peer was ever waiting at an exit.
	SyncDelay   float64
	SyncSamples int

	// Response is the mean time from a request's arrival to the end of
	// its critical section: the textbook's response time, E included.
	// Wait is the same without E: arrival to entry.
	Response float64
	Wait     float64

	// Throughput is entries per T over the measured span, from the end
	// of the warm-up to the last measured exit.
	Throughput float64

	// Messages is the mean number of messages sent per entry.
	Messages float64

	// PerPeer is how many of the measured entries each peer made.
	PerPeer []int
}

// timedKind is what a timed event does when its time comes.
type timedKind uint8

const (
	timedDeliver timedKind = iota // a message reaches its receiver
	timedLeave                    // a peer's critical section ends
	timedArrive                   // a peer's next request arrives
	timedSuspect                  // a survivor's detector suspects the crashed peer (MeasureRecovery)
)

// timedEvent is one entry of the event queue: its virtual time, a serial
// number that breaks ties in order of scheduling, and what it does.
type timedEvent struct {
	at   float64
	ser  uint64
	kind timedKind
	peer int
	msg  InFlightMessage
}

type timedQueue []timedEvent

func (q timedQueue) Len() int { return len(q) }
func (q timedQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].ser < q[j].ser
}
func (q timedQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *timedQueue) Push(x any)   { *q = append(*q, x.(timedEvent)) }
func (q *timedQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// timedRun is the state of one RunTimed.
type timedRun struct {
	w    *World
	tm   Timing
	rng  *rand.Rand
	q    timedQueue
	ser  uint64
	now  float64
	seen uint64    // the serial of the last message scheduled
	last []float64 // per pair: the latest delivery time scheduled, for FIFO order

	arrived  [][]float64 // per peer: arrival times of requests not yet done
	entered  []float64   // per peer: when its current critical section began
	lastExit float64
	waitExit bool // some other peer was waiting at the last exit, and nobody has entered since
}

// RunTimed runs n peers of alg on a World in virtual time and measures
// the synchronization delay, response time and throughput in units of
// T, the message delay. Every message takes T (or a seeded jittered
// delay; a message never overtakes an earlier one between the same two
// peers unless tm.Network is NetworkUnordered), every
// critical section lasts tm.CS, and requests arrive by a seeded Poisson
// process per peer at tm.Rate, or as fast as the peers can take them.
// Events due at the same instant happen in the order they were
// scheduled. The run uses no clock: the same arguments give the same
// result. It takes the algorithm's options, as NewWorld does; a protocol
// violation ends it with an error wrapping ErrViolation, and bad timing
// with one wrapping ErrInvalidConfig.
func RunTimed(alg Algorithm, n int, tm Timing, opts ...Option) (TimedResult, error) {
	switch {
	case tm.Jitter < 0 || tm.Jitter >= 1 || math.IsNaN(tm.Jitter):
		return TimedResult{}, fmt.Errorf("%w: Timing.Jitter %v: want 0 <= jitter < 1", ErrInvalidConfig, tm.Jitter)
	case tm.CS < 0 || math.IsNaN(tm.CS) || math.IsInf(tm.CS, 0):
		return TimedResult{}, fmt.Errorf("%w: Timing.CS %v: want a finite duration >= 0", ErrInvalidConfig, tm.CS)
	case tm.Rate < 0 || math.IsNaN(tm.Rate) || math.IsInf(tm.Rate, 0):
		return TimedResult{}, fmt.Errorf("%w: Timing.Rate %v: want a finite rate >= 0", ErrInvalidConfig, tm.Rate)
	case tm.Entries < 0 || tm.Warmup < 0:
		return TimedResult{}, fmt.Errorf("%w: Timing.Entries %d, Warmup %d: want >= 0", ErrInvalidConfig, tm.Entries, tm.Warmup)
	}
	if tm.Entries == 0 {
		tm.Entries = 400
	}
	w, err := NewWorld(alg, n, WorldConfig{Network: tm.Network, Variant: tm.Variant, NoTrace: true}, opts...)
	if err != nil {
		return TimedResult{}, err
	}
	r := &timedRun{
		w:       w,
		tm:      tm,
		rng:     rand.New(rand.NewPCG(tm.Seed, 0x7117ed)),
		last:    make([]float64, n*n),
		arrived: make([][]float64, n),
		entered: make([]float64, n),
	}
	return r.run()
}

func (r *timedRun) push(e timedEvent) {
	r.ser++
	e.ser = r.ser
	heap.Push(&r.q, e)
}

// delay draws one message delay.
func (r *timedRun) delay() float64 {
	if r.tm.Jitter == 0 {
		return 1
	}
	return 1 + r.tm.Jitter*(2*r.rng.Float64()-1)
}

// schedule puts the messages sent since the last call on the clock.
func (r *timedRun) schedule() {
	n, seen := r.w.N(), r.seen
	for _, f := range r.w.Messages() {
		if f.Seq <= r.seen {
			continue
		}
		seen = max(seen, f.Seq)
		at := r.now + r.delay()
		if pair := f.Msg.From*n + f.Msg.To; r.w.FIFO() {
			at = math.Max(at, r.last[pair])
			r.last[pair] = at
		}
		r.push(timedEvent{at: at, kind: timedDeliver, peer: f.Msg.To, msg: f})
	}
	r.seen = seen
}

// inside returns the peer inside, or -1: one at most, or the world
// would have failed.
func (r *timedRun) inside() int {
	for p := range r.w.N() {
		if r.w.Peer(p).Inside {
			return p
		}
	}
	return -1
}

// arrival schedules peer's next Poisson arrival.
func (r *timedRun) arrival(peer int) {
	r.push(timedEvent{at: r.now + r.rng.ExpFloat64()/r.tm.Rate, kind: timedArrive, peer: peer})
}

// request makes peer's request now.
func (r *timedRun) request(peer int) error {
	r.arrived[peer] = append(r.arrived[peer], r.now)
	return r.w.Request(peer)
}

func (r *timedRun) run() (TimedResult, error) {
	n := r.w.N()
	for p := range n {
		if r.tm.Rate == 0 {
			if err := r.request(p); err != nil {
				return TimedResult{}, err
			}
		} else {
			r.arrival(p)
		}
	}
	r.schedule()
	var (
		res      TimedResult
		entries  int     // entries made, warm-up included
		start    float64 // when the first measured entry was made
		sent0    uint64  // messages sent before it
		sync     float64
		resp     float64
		wait     float64
		done     int // measured exits
		exited   bool
		holder   = -1             // the peer inside, as seen so far
		entryIdx = make([]int, n) // per peer: the index of its current entry, from 1
	)
	res.PerPeer = make([]int, n)
	total := r.tm.Warmup + r.tm.Entries
	for done < r.tm.Entries {
		if len(r.q) == 0 {
			return res, fmt.Errorf("%w: timed run stopped after %d entries with nothing left to do", ErrViolation, entries)
		}
		e := heap.Pop(&r.q).(timedEvent)
		r.now = e.at
		var err error
		switch e.kind {
		case timedArrive:
			if entries < total {
				err = r.request(e.peer)
				r.arrival(e.peer)
			}
		case timedDeliver:
			_, err = r.w.Apply(Transition{Kind: TransDeliver, Peer: e.peer, Seq: e.msg.Seq, Msg: e.msg.Msg})
		case timedLeave:
			if entryIdx[e.peer] > r.tm.Warmup {
				done++
				res.PerPeer[e.peer]++
				resp += r.now - r.arrived[e.peer][0]
				wait += r.entered[e.peer] - r.arrived[e.peer][0]
			}
			r.arrived[e.peer] = r.arrived[e.peer][1:]
			r.waitExit = false
			for _, p := range r.w.Waiting() {
				if p != e.peer {
					r.waitExit = true
				}
			}
			r.lastExit, exited, holder = r.now, true, -1
			_, err = r.w.Apply(Transition{Kind: TransLeave, Peer: e.peer})
			if err == nil && r.tm.Rate == 0 && entries < total {
				err = r.request(e.peer)
			}
		}
		if err != nil {
			return res, err
		}
		if p := r.inside(); p >= 0 && holder < 0 {
			// An entry, in a delivery or in a request (a holder re-entering
			// on its own, a coordinator granting itself).
			holder = p
			entries++
			entryIdx[p] = entries
			if entries == r.tm.Warmup+1 {
				start = r.now
				sent0 = r.w.Stats().Messages
			}
			if entries > r.tm.Warmup+1 && exited && r.waitExit {
				sync += r.now - r.lastExit
				res.SyncSamples++
			}
			r.waitExit = false
			r.entered[p] = r.now
			r.push(timedEvent{at: r.now + r.tm.CS, kind: timedLeave, peer: p})
		}
		r.schedule()
	}
	res.Entries = done
	if res.SyncSamples > 0 {
		res.SyncDelay = sync / float64(res.SyncSamples)
	}
	res.Response = resp / float64(done)
	res.Wait = wait / float64(done)
	if span := r.now - start; span > 0 {
		res.Throughput = float64(done) / span
	}
	res.Messages = float64(r.w.Stats().Messages-sent0) / float64(done)
	return res, nil
}
