package dmutex

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Faults describes faults a ChanNetwork injects into every message it
// carries. The zero Faults injects none.
type Faults struct {
	Delay   time.Duration // every message waits at least this long
	Jitter  time.Duration // plus a seeded random extra in [0, Jitter)
	Reorder bool          // delayed messages may overtake earlier ones between the same two peers
	Loss    float64       // probability, 0 to 1, that a message is lost
	Seed    uint64        // seed for jitter and loss: the same seed draws the same numbers
}

func (f Faults) validate() error {
	switch {
	case f.Delay < 0:
		return fmt.Errorf("%w: Faults.Delay = %v, want >= 0", ErrInvalidConfig, f.Delay)
	case f.Jitter < 0:
		return fmt.Errorf("%w: Faults.Jitter = %v, want >= 0", ErrInvalidConfig, f.Jitter)
	case !(f.Loss >= 0 && f.Loss <= 1):
		return fmt.Errorf("%w: Faults.Loss = %v, want 0 to 1", ErrInvalidConfig, f.Loss)
	case f.Reorder && f.Jitter == 0:
		return fmt.Errorf("%w: Faults.Reorder needs a Jitter > 0 to reorder anything", ErrInvalidConfig)
	}
	return nil
}

// WithFaults builds the cluster's in-memory network with faults f from the
// start. Reordering is refused for the algorithms that need per-pair FIFO
// channels (Algorithm.NeedsFIFO); ChanNetwork.SetFaults applies any faults
// unchecked, for experiments that want to see an algorithm break.
func WithFaults(f Faults) Option {
	return Option{
		name:  "WithFaults",
		where: forCluster,
		apply: func(c *config) error {
			if err := f.validate(); err != nil {
				return err
			}
			if f.Reorder && c.alg.NeedsFIFO() {
				return fmt.Errorf("%w: Faults.Reorder: %v is only correct over per-pair FIFO channels", ErrInvalidConfig, c.alg)
			}
			c.faults = &f
			return nil
		},
	}
}

// faultState is a ChanNetwork's fault injection. It is only consulted once
// a fault has been set, so a fault-free network pays one atomic load per
// message.
type faultState struct {
	mu      sync.Mutex
	f       Faults
	rng     *rand.Rand
	drops   []dropRule
	crashed map[int]bool
	group   []int                // group[i]: partition group of peer i; nil when whole
	downAt  map[int]time.Time    // when each crashed peer crashed, for Reachable
	cutAt   time.Time            // when the partition began, for Reachable
	backAt  map[[2]int]time.Time // when a partition last ended between a pair {i < j}, for Reachable
	dropped uint64

	// Delayed delivery: one goroutine delivers from a heap in time order.
	pending  delayHeap
	last     map[[2]int]time.Time // latest delivery time per ordered pair, for FIFO
	seq      uint64
	wake     chan struct{}
	stop     chan struct{}
	running  bool
	stopped  bool
	deliverW sync.WaitGroup
}

// SetFaults replaces the network's delay, reordering and loss faults. It
// does not check the algorithm (see WithFaults). Messages already delayed
// keep their delivery times.
func (nw *ChanNetwork) SetFaults(f Faults) error {
	if err := f.validate(); err != nil {
		return err
	}
	fs := nw.faultState()
	fs.mu.Lock()
	fs.f = f
	fs.rng = rand.New(rand.NewPCG(f.Seed, 0x9e3779b97f4a7c15))
	fs.mu.Unlock()
	return nil
}

// A dropRule loses the next count messages that match.
type dropRule struct {
	count int
	match func(Message) bool
}

// DropNext makes the network lose the next count messages for which match
// returns true, such as the next reply from peer 0 to peer 1. A nil match
// matches every message, and a count of 0 or less drops nothing. match
// runs under the network's lock and must not call into the network. A
// panic in match reaches the goroutine that sent the message: a caller of
// Lock or Unlock, after which the peer can still be closed and read, or a
// peer's receive goroutine, which ends the program.
func (nw *ChanNetwork) DropNext(count int, match func(m Message) bool) {
	if match == nil {
		match = matchAll
	}
	fs := nw.faultState()
	fs.mu.Lock()
	fs.drops = append(fs.drops, dropRule{count: count, match: match})
	fs.mu.Unlock()
}

func matchAll(Message) bool { return true }

// Crash stops peer id for good, as far as the network goes: it loses every
// message to or from id, including those already delayed.
func (nw *ChanNetwork) Crash(id int) error {
	if id < 0 || id >= len(nw.eps) {
		return fmt.Errorf("%w: crash of peer %d out of range [0, %d)", ErrInvalidConfig, id, len(nw.eps))
	}
	fs := nw.faultState()
	fs.mu.Lock()
	if !fs.crashed[id] {
		fs.downAt[id] = time.Now()
	}
	fs.crashed[id] = true
	fs.mu.Unlock()
	nw.reachChanged()
	return nil
}

// Partition cuts the network into the given groups of peer ids: messages
// between peers of different groups are lost, including those already
// delayed. Peers named in no group form one more group together. A peer
// named twice, or an id out of range, is an error.
func (nw *ChanNetwork) Partition(groups ...[]int) error {
	group := make([]int, len(nw.eps))
	for i := range group {
		group[i] = -1
	}
	for g, ids := range groups {
		for _, id := range ids {
			if id < 0 || id >= len(group) {
				return fmt.Errorf("%w: partition names peer %d, out of range [0, %d)", ErrInvalidConfig, id, len(group))
			}
			if group[id] >= 0 {
				return fmt.Errorf("%w: partition names peer %d twice", ErrInvalidConfig, id)
			}
			group[id] = g
		}
	}
	for i := range group {
		if group[i] < 0 {
			group[i] = len(groups)
		}
	}
	fs := nw.faultState()
	fs.mu.Lock()
	now := time.Now()
	fs.rejoin(group, now)
	fs.group = group
	fs.cutAt = now
	fs.mu.Unlock()
	nw.reachChanged()
	return nil
}

// rejoin records, for Reachable, that the pairs the partition in force
// separates and the groups next (nil when whole) do not are back now:
// what went between them meanwhile was lost. fs.mu is held.
func (fs *faultState) rejoin(next []int, now time.Time) {
	if fs.group == nil {
		return
	}
	for i := range fs.group {
		for j := i + 1; j < len(fs.group); j++ {
			if fs.group[i] != fs.group[j] && (next == nil || next[i] == next[j]) {
				if fs.backAt == nil {
					fs.backAt = make(map[[2]int]time.Time)
				}
				fs.backAt[[2]int{i, j}] = now
			}
		}
	}
}

// Heal ends a partition. Messages lost while it lasted stay lost; crashed
// peers stay crashed.
func (nw *ChanNetwork) Heal() {
	fs := nw.faultState()
	fs.mu.Lock()
	fs.rejoin(nil, time.Now())
	fs.group = nil
	fs.mu.Unlock()
	nw.reachChanged()
}

// Dropped returns how many messages the network has lost to faults.
func (nw *ChanNetwork) Dropped() uint64 {
	if !nw.faulty.Load() {
		return 0
	}
	fs := nw.faults
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.dropped
}

// Close closes every endpoint and stops the delivery of delayed messages.
// A second call is harmless.
func (nw *ChanNetwork) Close() error {
	for _, e := range nw.eps {
		e.Close()
	}
	if nw.faulty.Load() {
		fs := nw.faults
		fs.mu.Lock()
		if !fs.stopped {
			fs.stopped = true
			close(fs.stop)
		}
		fs.mu.Unlock()
		fs.deliverW.Wait()
	}
	return nil
}

func (nw *ChanNetwork) faultState() *faultState {
	nw.faultsOnce.Do(func() {
		nw.faults = &faultState{
			rng:     rand.New(rand.NewPCG(0, 0x9e3779b97f4a7c15)),
			crashed: make(map[int]bool),
			downAt:  make(map[int]time.Time),
			last:    make(map[[2]int]time.Time),
			wake:    make(chan struct{}, 1),
			stop:    make(chan struct{}),
		}
		nw.faulty.Store(true)
	})
	return nw.faults
}

// send is Send on a network with faults: lose m, delay it, or pass it on.
func (fs *faultState) send(nw *ChanNetwork, from, to int, m Message) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.lostLocked(from, to) {
		fs.dropped++
		return
	}
	for i := range fs.drops {
		if r := &fs.drops[i]; r.count > 0 && r.match(m) {
			r.count--
			fs.dropped++
			return
		}
	}
	if fs.f.Loss > 0 && fs.rng.Float64() < fs.f.Loss {
		fs.dropped++
		return
	}
	d := fs.f.Delay
	if fs.f.Jitter > 0 {
		d += time.Duration(fs.rng.Int64N(int64(fs.f.Jitter)))
	}
	if d == 0 && fs.pending.Len() == 0 {
		nw.eps[to].put(m)
		return
	}
	at := time.Now().Add(d)
	if !fs.f.Reorder {
		pair := [2]int{from, to}
		if prev := fs.last[pair]; at.Before(prev) {
			at = prev // never overtake an earlier message of the same pair
		}
		fs.last[pair] = at
	}
	if fs.stopped {
		return
	}
	fs.seq++
	heap.Push(&fs.pending, delayed{at: at, seq: fs.seq, from: from, to: to, m: m})
	if !fs.running {
		fs.running = true
		fs.deliverW.Add(1)
		go fs.deliver(nw)
	}
	select {
	case fs.wake <- struct{}{}:
	default:
	}
}

// lostLocked reports whether the link from -> to is down.
func (fs *faultState) lostLocked(from, to int) bool {
	return fs.crashed[from] || fs.crashed[to] || (fs.group != nil && fs.group[from] != fs.group[to])
}

// deliver hands delayed messages over when their time comes, until the
// network closes.
func (fs *faultState) deliver(nw *ChanNetwork) {
	defer fs.deliverW.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		fs.mu.Lock()
		for fs.pending.Len() > 0 && !fs.pending[0].at.After(time.Now()) {
			d := heap.Pop(&fs.pending).(delayed)
			if fs.lostLocked(d.from, d.to) {
				fs.dropped++
				continue
			}
			nw.eps[d.to].put(d.m)
		}
		wait := time.Hour
		if fs.pending.Len() > 0 {
			wait = time.Until(fs.pending[0].at)
		}
		fs.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-fs.wake:
		case <-fs.stop:
			return
		}
	}
}

type delayed struct {
	at       time.Time
	seq      uint64
	from, to int
	m        Message
}

// delayHeap orders delayed messages by time, then by sending order.
type delayHeap []delayed

func (h delayHeap) Len() int { return len(h) }
func (h delayHeap) Less(i, j int) bool {
	return h[i].at.Before(h[j].at) || (h[i].at.Equal(h[j].at) && h[i].seq < h[j].seq)
}
func (h delayHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x any)   { *h = append(*h, x.(delayed)) }
func (h *delayHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
