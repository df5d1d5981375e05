package dmutex

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// benchSizes are the cluster sizes of BenchmarkEntry.
var benchSizes = []int{2, 8, 32, 128}

// BenchmarkEntry measures one critical-section entry (Lock, then Unlock)
// for every algorithm and variant, cluster size and load:
// load=one has one contender at a time (a seeded random peer, never the
// previous one), load=all has every peer contend at once, each taking an
// equal share of the b.N entries. Besides ns/op
// and allocs/op it reports msgs/op, counted at the transport, the p50 and
// p99 latency of Lock, and allocs/msg.
func BenchmarkEntry(b *testing.B) {
	for _, v := range variants() {
		for _, n := range benchSizes {
			for _, load := range []string{"one", "all"} {
				b.Run(fmt.Sprintf("alg=%s/n=%d/load=%s", v.name, n, load), func(b *testing.B) {
					benchEntry(b, v, n, load == "all")
				})
			}
		}
	}
}

// BenchmarkEntryRecovery runs BenchmarkEntry's loads for each algorithm
// with a recovery twice in one run: recovery=off is the plain cluster, and
// recovery=on the same cluster with WithRecovery and the in-memory
// network's detector, with no failure. Crash exclusion, regeneration and
// failover act only on a suspicion, so msgs/op must be equal and ns/op,
// allocs/op and allocs/msg within the noise: the off rows are the floor.
func BenchmarkEntryRecovery(b *testing.B) {
	for _, a := range recoveryAlgorithms {
		for _, load := range []string{"one", "all"} {
			for _, rec := range []string{"off", "on"} {
				v := variant{name: a.String(), alg: a}
				if rec == "on" {
					v.opts = []Option{WithRecovery(), WithUnreachableAfter(time.Second)}
				}
				b.Run(fmt.Sprintf("alg=%s/n=8/load=%s/recovery=%s", a, load, rec), func(b *testing.B) {
					benchEntry(b, v, 8, load == "all")
				})
			}
		}
	}
}

func benchEntry(b *testing.B, v variant, n int, all bool) {
	c := v.cluster(b, n)
	peers := c.Peers()
	for _, p := range peers { // warm up: every peer has entered once
		p.Lock()
		p.Unlock()
	}
	lat := make([]time.Duration, b.N)
	var run func()
	var shares func() (lo, hi float64)
	if all {
		run, shares = entriesAll(peers, lat)
	} else {
		run = entriesOne(peers, lat)
	}
	before := c.Stats()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ReportAllocs()
	b.ResetTimer()
	run()
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	d := c.Stats().Sub(before)
	require.Equal(b, uint64(b.N), d.Entries)
	reportMessages(b, d.Messages, m1.Mallocs-m0.Mallocs)
	reportLatency(b, lat)
	if shares != nil && n > 1 {
		lo, hi := shares()
		b.ReportMetric(lo, "min-share")
		b.ReportMetric(hi, "max-share")
	}
}

// entriesOne returns a run that takes len(lat) entries one after another,
// each by a peer chosen at random, and records each Lock's latency.
func entriesOne(peers []*Peer, lat []time.Duration) func() {
	order := make([]int, len(lat))
	rng := rand.New(rand.NewPCG(1, uint64(len(peers))))
	prev := -1
	for i := range order {
		id := rng.IntN(len(peers))
		if id == prev && len(peers) > 1 {
			id = (id + 1 + rng.IntN(len(peers)-1)) % len(peers)
		}
		order[i], prev = id, id
	}
	return func() {
		for i, id := range order {
			p := peers[id]
			t0 := time.Now()
			p.Lock()
			lat[i] = time.Since(t0)
			p.Unlock()
		}
	}
}

// entriesAll returns a run in which every peer takes its share of
// len(lat) entries in a loop, all at once. Fixed shares keep every peer
// contending to the end: with a shared counter, a peer that enters
// without messages (centralized's coordinator) could take every entry
// before the others had sent a request. Its goroutines are started before
// it returns, so starting them is not measured. shares, after the run,
// returns the fewest and the most entries one peer had made when the
// first peer finished its share, as shares of all the entries made by
// then: the fixed shares hide how the algorithm divides its entries, the
// race to the first finish shows it.
func entriesAll(peers []*Peer, lat []time.Duration) (run func(), shares func() (lo, hi float64)) {
	start := make(chan struct{})
	var next atomic.Int64
	var wg sync.WaitGroup
	n := len(peers)
	made := make([]atomic.Int64, n)
	snap := make([]int64, n)
	var first sync.Once
	for i, p := range peers {
		share := len(lat) / n
		if i < len(lat)%n {
			share++
		}
		wg.Go(func() {
			<-start
			for range share {
				t0 := time.Now()
				p.Lock()
				d := time.Since(t0)
				made[i].Add(1)
				p.Unlock()
				lat[next.Add(1)-1] = d
			}
			first.Do(func() {
				for j := range made {
					snap[j] = made[j].Load()
				}
			})
		})
	}
	run = func() {
		close(start)
		wg.Wait()
	}
	shares = func() (lo, hi float64) {
		var sum int64
		for _, k := range snap {
			sum += k
		}
		if sum == 0 {
			return 0, 0
		}
		return float64(slices.Min(snap)) / float64(sum), float64(slices.Max(snap)) / float64(sum)
	}
	return run, shares
}

// reportMessages reports msgs/op and, when messages flowed, allocs/msg.
func reportMessages(b *testing.B, msgs, mallocs uint64) {
	b.ReportMetric(float64(msgs)/float64(b.N), "msgs/op")
	if msgs > 0 {
		b.ReportMetric(float64(mallocs)/float64(msgs), "allocs/msg")
	}
}

// reportLatency reports the median and 99th percentile of lat.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	b.ReportMetric(float64(percentile(s, 50)), "p50-ns")
	b.ReportMetric(float64(percentile(s, 99)), "p99-ns")
}

// percentile returns the q-th percentile (nearest rank) of sorted s.
func percentile(s []time.Duration, q int) time.Duration {
	i := (len(s)*q + 99) / 100 // ceil(len*q/100), the nearest rank
	return s[max(i-1, 0)]
}

// BenchmarkReentry measures Lock+Unlock by a peer that needs nobody's
// permission: the only peer of a cluster of one, for every algorithm, and
// at n=8 the idle token holder of a token algorithm, or centralized's
// coordinator, which takes the same path. Such an entry should cost no
// message and no allocation.
func BenchmarkReentry(b *testing.B) {
	for _, v := range variants() {
		b.Run(fmt.Sprintf("alg=%s/n=1", v.name), func(b *testing.B) {
			benchReentry(b, v, 1)
		})
		if reentersAlone(v) {
			b.Run(fmt.Sprintf("alg=%s/n=8", v.name), func(b *testing.B) {
				benchReentry(b, v, 8)
			})
		}
	}
}

// reentersAlone reports whether peer 0 of v can enter again without
// messages once it has entered: it is centralized's coordinator, or v is
// a token algorithm whose holder keeps an idle token.
func reentersAlone(v variant) bool {
	if v.alg == Centralized {
		return true
	}
	m, err := newConfig(v.alg, 2, forCluster, v.opts)
	if err != nil {
		return false
	}
	mc, err := m.newMachine(v.alg, 0, 2)
	if err != nil {
		return false
	}
	_, ok := mc.(tokenHolder)
	return ok
}

func benchReentry(b *testing.B, v variant, n int) {
	c := v.cluster(b, n)
	p := c.peers[0]
	p.Lock() // fetch the token, if there is one
	p.Unlock()
	before := c.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p.Lock()
		p.Unlock()
	}
	b.StopTimer()
	d := c.Stats().Sub(before)
	require.Equal(b, uint64(b.N), d.Entries)
	b.ReportMetric(float64(d.Messages)/float64(b.N), "msgs/op")
}

// BenchmarkFloor measures what the runtime cannot beat, in the same run as
// the other benchmarks so that they can be read as ratios: an uncontended
// sync.Mutex, one goroutine-to-goroutine round trip, and the message
// pattern of an uncontended Ricart-Agrawala entry at n=8 (7 messages to 7
// goroutines and 7 answers back) with no algorithm at all.
func BenchmarkFloor(b *testing.B) {
	b.Run("op=mutex", func(b *testing.B) {
		var mu sync.Mutex
		b.ReportAllocs()
		for range b.N {
			mu.Lock()
			mu.Unlock() //nolint:staticcheck // an empty critical section is the point
		}
	})
	b.Run("op=chan-roundtrip", func(b *testing.B) {
		benchFanout(b, 1)
	})
	b.Run("op=fanout/n=8", func(b *testing.B) {
		benchFanout(b, 7)
	})
}

// benchFanout sends a Message to each of k goroutines and waits for their
// k answers, b.N times, reporting p50 and p99 of a round as BenchmarkEntry
// does of Lock. The channels are buffered like the transport's mailboxes.
func benchFanout(b *testing.B, k int) {
	back := make(chan Message, mailboxSize)
	ins := make([]chan Message, k)
	var wg sync.WaitGroup
	for i := range ins {
		ins[i] = make(chan Message, mailboxSize)
		wg.Go(func() {
			for m := range ins[i] {
				m.From, m.To = m.To, m.From
				back <- m
			}
		})
	}
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for j := range b.N {
		t0 := time.Now() // timed as BenchmarkEntry times Lock, for a like-for-like p50
		for i, in := range ins {
			in <- Message{Kind: KindRequest, To: i + 1}
		}
		for range ins {
			<-back
		}
		lat[j] = time.Since(t0)
	}
	b.StopTimer()
	reportLatency(b, lat)
	for _, in := range ins {
		close(in)
	}
	wg.Wait()
}

// BenchmarkIdlePeer measures what an idle peer costs: the heap and stack
// that creating a cluster adds, divided by its peers, reported as
// bytes/peer and split into heap-bytes/peer and stack-bytes/peer. ns/op is
// the time to start and close the whole cluster.
func BenchmarkIdlePeer(b *testing.B) {
	for _, v := range variants() {
		for _, n := range []int{8, 128, 1024} {
			b.Run(fmt.Sprintf("alg=%s/n=%d", v.name, n), func(b *testing.B) {
				heap, stack := idleBytesPerPeer(b, v, n)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					c, err := New(v.alg, n, v.opts...)
					require.NoError(b, err)
					require.NoError(b, c.Close())
				}
				// After ResetTimer, which drops metrics.
				b.ReportMetric(heap+stack, "bytes/peer")
				b.ReportMetric(heap, "heap-bytes/peer")
				b.ReportMetric(stack, "stack-bytes/peer")
			})
		}
	}
}

// idleBytesPerPeer returns the memory a fresh, idle cluster of n holds per
// peer: heap in use plus goroutine stacks, measured after a GC on both
// sides of New. Small clusters are built several times over, so that at
// least 1024 peers are measured and the GC's noise averages out.
func idleBytesPerPeer(tb testing.TB, v variant, n int) (heap, stack float64) {
	reps := (1024 + n - 1) / n
	cs := make([]*Cluster, 0, reps)
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	for range reps {
		c, err := New(v.alg, n, v.opts...)
		require.NoError(tb, err)
		cs = append(cs, c)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	heap = float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / float64(reps*n)
	stack = float64(int64(m1.StackInuse)-int64(m0.StackInuse)) / float64(reps*n)
	for _, c := range cs {
		require.NoError(tb, c.Close())
	}
	return heap, stack
}

// TestScale1024 starts 1024 Ricart-Agrawala peers, takes 1000 entries with
// every peer contending, and closes the cluster, logging how long each
// part took (run with -v to see it). It asserts no time: the target, under
// 10 s in all on two cores, is read from the log.
//
// Under -race (CI's run) it starts 256 peers and takes 256 entries: at
// 1024 the race detector's shadow of 2,000 goroutines took 1.2 GB and
// half a minute of CPU, and a quarter of the peers exercises the same
// code. Without -race, or with -dmutex.big, it runs at full size.
func TestScale1024(t *testing.T) {
	if testing.Short() {
		t.Skip("1024 peers and two million messages: not in -short")
	}
	n, entries := 1024, 1000
	if raceEnabled && !*bigChecks {
		n, entries = 256, 256
	}
	t0 := time.Now()
	c, err := NewRicartAgrawala(n)
	require.NoError(t, err)
	started := time.Since(t0)

	t1 := time.Now()
	lat := make([]time.Duration, entries)
	run, _ := entriesAll(c.Peers(), lat)
	run()
	ran := time.Since(t1)
	s := c.Stats()

	t2 := time.Now()
	require.NoError(t, c.Close())
	closed := time.Since(t2)
	require.Equal(t, uint64(entries), s.Entries)
	t.Logf("n=%d: start %v, %d entries %v (%.0f msgs/entry), close %v, total %v",
		n, started, entries, ran, float64(s.Messages)/float64(entries), closed, time.Since(t0))
}
