package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dmutex/dmutex"
)

// A variant is one algorithm configuration the command measures.
type variant struct {
	name string
	alg  dmutex.Algorithm
	opts []dmutex.Option
}

// implicitName is the name of Ricart-Agrawala with implicit replies.
const implicitName = "ricart-agrawala-implicit"

// allVariants returns every algorithm, in the library's order,
// with the implicit-reply variant right after Ricart-Agrawala.
func allVariants() []variant {
	var vs []variant
	for _, a := range dmutex.Algorithms() {
		vs = append(vs, variant{name: a.String(), alg: a})
		if a == dmutex.RicartAgrawala {
			vs = append(vs, variant{name: implicitName, alg: a, opts: []dmutex.Option{dmutex.WithImplicitReplies()}})
		}
	}
	return vs
}

// parseVariant returns the variant named s: an algorithm name or short form
// that dmutex.ParseAlgorithm accepts, or ricart-agrawala-implicit.
func parseVariant(s string) (variant, error) {
	if s == implicitName || s == "ra-implicit" {
		return variant{name: implicitName, alg: dmutex.RicartAgrawala, opts: []dmutex.Option{dmutex.WithImplicitReplies()}}, nil
	}
	a, err := dmutex.ParseAlgorithm(s)
	if err != nil {
		return variant{}, err
	}
	return variant{name: a.String(), alg: a}, nil
}

// A load is how many peers contend at once: 1 is one entry at a time,
// 0 stands for every peer of the cluster.
type load int

const fullLoad load = 0

// contenders returns how many peers of n contend under l.
func (l load) contenders(n int) int {
	if l == fullLoad || int(l) > n {
		return n
	}
	return int(l)
}

func (l load) String() string {
	switch l {
	case 1:
		return "light"
	case fullLoad:
		return "full"
	}
	return fmt.Sprintf("k=%d", int(l))
}

// A latency summarizes the Lock latencies measured under one load. P50
// and P99 are over every entry. An entry during which its peer neither
// sent nor received a message (a token holder entering again with its
// idle token, the coordinator entering while nobody holds the lock) is
// local; P50Sent is the median of the others, which had to coordinate.
type latency struct {
	Load       string  `json:"load"`
	Contenders int     `json:"contenders"`
	Entries    uint64  `json:"entries"`
	P50        float64 `json:"p50_us"`
	P99        float64 `json:"p99_us"`
	Local      float64 `json:"local_share"`  // share of the timed entries that were local
	P50Sent    float64 `json:"p50_us_asked"` // p50 of the entries that were not; 0 if none
	PerSecond  float64 `json:"entries_per_s"`
	MsgsEntry  float64 `json:"msgs_per_entry"`
	ShareMin   float64 `json:"share_min,omitempty"` // with k > 1: the fewest entries one caller made, as a share of all
	ShareMax   float64 `json:"share_max,omitempty"` // and the most
	elapsed    time.Duration
	contenders int
}

// msgCounter is a dmutex.Observer that counts the messages each peer sent
// and received, so that a caller can tell whether its Lock was local.
type msgCounter struct{ moved []atomic.Uint64 }

func newMsgCounter(n int) *msgCounter { return &msgCounter{moved: make([]atomic.Uint64, n)} }

func (c *msgCounter) Acquired(int, time.Duration)                     {}
func (c *msgCounter) Released(int, time.Duration)                     {}
func (c *msgCounter) Failed(int, time.Duration, error)                {}
func (c *msgCounter) Received(peer, _ int, _ dmutex.MessageKind)      { c.moved[peer].Add(1) }
func (c *msgCounter) Sent(peer, _ int, _ dmutex.MessageKind, _ error) { c.moved[peer].Add(1) }

// An entryTime is one timed Lock, and whether it was not local.
type entryTime struct {
	d     time.Duration
	asked bool
}

// stopped reports whether stop is closed. Callers check it after each
// entry, so every caller takes at least one however busy the machine is.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// latencyRun keeps k peers of c taking entries in a loop for d (k = 1:
// one caller on a random peer at a time, never the same peer twice in a
// row; otherwise one caller on each of k distinct peers) and measures
// each Lock's latency, the entries per second and the messages per entry.
// The cluster's observer must be msgs, which tells whether a Lock was
// local.
func latencyRun(c *dmutex.Cluster, msgs *msgCounter, k int, d time.Duration, rng *rand.Rand) (latency, error) {
	peers := c.Peers()
	n := len(peers)
	before := c.Stats()
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var (
		mu     sync.Mutex
		lats   []entryTime
		counts []int // entries per caller
		errs   atomic.Value
	)
	record := func(local []entryTime) {
		mu.Lock()
		lats = append(lats, local...)
		counts = append(counts, len(local))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	start := time.Now()
	// caller takes entries on pick(0), pick(1), ... until stop, timing
	// each Lock.
	caller := func(pick func(i int) dmutex.Locker) func() {
		return func() {
			var local []entryTime
			defer func() { record(local) }()
			for i := 0; ; i++ {
				p := pick(i)
				m0 := msgs.moved[p.ID()].Load()
				t0 := time.Now()
				if err := p.LockContext(ctx); err != nil {
					errs.Store(err)
					return
				}
				local = append(local, entryTime{time.Since(t0), msgs.moved[p.ID()].Load() != m0})
				p.Unlock()
				if stopped(stop) {
					return
				}
			}
		}
	}
	if k == 1 {
		order := rng.Perm(n)
		wg.Go(caller(func(i int) dmutex.Locker { return peers[order[i%n]] }))
	} else {
		for _, id := range rng.Perm(n)[:k] {
			wg.Go(caller(func(int) dmutex.Locker { return peers[id] }))
		}
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := errs.Load().(error); err != nil {
		return latency{}, fmt.Errorf("%v n=%d k=%d: %w", c.Algorithm(), n, k, err)
	}
	diff := c.Stats().Sub(before)
	var all, asked []time.Duration
	for _, e := range lats {
		all = append(all, e.d)
		if e.asked {
			asked = append(asked, e.d)
		}
	}
	slices.Sort(all)
	slices.Sort(asked)
	l := latency{
		Contenders: k,
		Entries:    diff.Entries,
		PerSecond:  float64(diff.Entries) / elapsed.Seconds(),
		elapsed:    elapsed,
	}
	if diff.Entries > 0 {
		l.MsgsEntry = float64(diff.Messages) / float64(diff.Entries)
	}
	if len(all) > 0 {
		l.P50 = micros(percentile(all, 50))
		l.P99 = micros(percentile(all, 99))
		l.Local = float64(len(all)-len(asked)) / float64(len(all))
	}
	if len(asked) > 0 {
		l.P50Sent = micros(percentile(asked, 50))
	}
	if k > 1 && len(lats) > 0 {
		l.ShareMin = float64(slices.Min(counts)) / float64(len(lats))
		l.ShareMax = float64(slices.Max(counts)) / float64(len(lats))
	}
	return l, nil
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// percentile returns the q-th percentile (nearest rank) of sorted s.
func percentile(s []time.Duration, q int) time.Duration {
	i := (len(s)*q + 99) / 100
	return s[max(i-1, 0)]
}

// sequentialMessages returns the messages per entry when the peers of a
// cluster of n take entries one at a time, each peer twice, in a random
// order that never has the same peer twice in a row. Counted at the
// transport after every entry has completed, this is exact: the average
// over the peers of one entry each, where the previous entry was another
// peer's.
func sequentialMessages(v variant, n int, rng *rand.Rand) (float64, error) {
	c, err := dmutex.New(v.alg, n, v.opts...)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	order := append(rng.Perm(n), rng.Perm(n)...)
	if n > 1 && order[n] == order[n-1] {
		order[n], order[n+1] = order[n+1], order[n]
	}
	// A first, uncounted entry by another peer than the first counted one
	// moves any token away from where it started.
	var before dmutex.Stats
	for i, id := range append([]int{(order[0] + 1) % n}, order...) {
		p := c.Peer(id)
		if err := p.LockContext(ctx); err != nil {
			return 0, fmt.Errorf("%s n=%d: %w", v.name, n, err)
		}
		p.Unlock()
		if i == 0 {
			before = quiesce(c)
		}
	}
	s := quiesce(c).Sub(before)
	return float64(s.Messages) / float64(s.Entries), nil
}

// quiesce waits until c has sent no message for a few milliseconds and
// returns its stats. An entry can complete before every message it
// caused is sent (a Lamport peer may enter on a RELEASE stamped later
// than its request, before the REPLY it is also owed), so counting right
// after the last Unlock could miss a message or count it for the next
// entry. It gives up after a quarter of a second, for an algorithm that
// keeps sending while idle.
func quiesce(c *dmutex.Cluster) dmutex.Stats {
	const still = 3 // consecutive quiet polls
	s := c.Stats()
	for quiet, polls := 0, 0; quiet < still && polls < 250; polls++ {
		time.Sleep(time.Millisecond)
		t := c.Stats()
		if t.Messages == s.Messages {
			quiet++
		} else {
			quiet = 0
		}
		s = t
	}
	return s
}

// contendedMessages returns the messages per entry when k of n peers ask
// for the critical section at the same moment, each once: every request is
// sent before any message is delivered. The simulator makes that moment
// exact, so the count is exact for each seeded schedule; the figure is the
// mean over several schedules and choices of the k peers.
var contendedMessages = simContendedMessages

func simContendedMessages(v variant, n, k int, rng *rand.Rand) (float64, error) {
	var msgs, entries uint64
	for range max(4, 64/k) {
		s, err := dmutex.NewSimulation(v.alg, n, dmutex.SimConfig{Seed: uint64(rng.Int64())}, v.opts...)
		if err != nil {
			return 0, err
		}
		for _, id := range rng.Perm(n)[:k] {
			if err := s.Request(id); err != nil {
				return 0, err
			}
		}
		if err := s.Run(); err != nil {
			return 0, fmt.Errorf("%s n=%d k=%d: %w", v.name, n, k, err)
		}
		st := s.Stats()
		msgs += st.Messages
		entries += st.Entries
	}
	return float64(msgs) / float64(entries), nil
}
