package dmutex

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParallelAgrees: the parallel search finds the same result with 1,
// 2 and 3 workers (states, transitions, blocked states, every verdict
// and bound, the counterexample step for step), and the same as the
// breadth-first search on one goroutine with the graph; without the graph, the same
// states, safety and deadlock answers, and counterexample. The
// configurations include a deadlock, a safety violation, a violation at
// rest, fenced safety broken, starvation, faults, a detector, an
// unordered network and a state limit that stops the search; bigger ones
// with -dmutex.big.
func TestParallelAgrees(t *testing.T) {
	cfgs := []CheckConfig{
		{Algorithm: RicartAgrawala},
		{Algorithm: Lamport, N: 2, Requests: 1, Tries: 1},
		{Algorithm: SuzukiKasami, Network: NetworkUnordered},
		{Algorithm: TokenRing, Faults: CheckFaults{Crash: true}},
		{Algorithm: Raymond, N: 4, Faults: CheckFaults{Lose: true}},
		{Algorithm: Centralized, Options: []Option{WithRecovery()}, Detector: Detector{Kind: DetectorPerfect}, Faults: CheckFaults{Crash: true}, Fenced: true},
		{Algorithm: Centralized, Options: []Option{WithRecovery()}, Detector: Detector{Kind: DetectorImperfect, FalseSuspicions: 1}, Faults: CheckFaults{Crash: true}},
		{Variant: "maekawa-yield-unheld"},
		{Variant: "ricart-agrawala-tie-reply", Fenced: true},
		{Variant: "maekawa-no-inquire"},
		{Variant: "ricart-agrawala-token-outdated", StopAtDeadlock: true},
		{Algorithm: TokenRing, N: 3, Requests: 1, build: func(id, _ int) machine { return &bouncer{id: id, token: id == 0} }},
		{Algorithm: RicartAgrawala, N: 4, MaxStates: 5000},
		// A deadlock from which crashes still lead on: the workers must
		// expand a deadlocked state unless the search stops at it.
		{Variant: "maekawa-no-inquire", Faults: CheckFaults{Crash: true}},
		// A forged token with the fenced store: a step breaks plain
		// safety, not the store's.
		{Algorithm: Centralized, N: 2, Requests: 1, build: func(id, _ int) machine { return &forger{token: id == 0} }, Fenced: true},
		// A promise for a cluster at rest broken: a vote kept.
		{Algorithm: Maekawa, N: 3, RequestsPerPeer: []int{1, 0, 0}, build: func(id, n int) machine {
			m, _ := newMaekawa(id, n, &config{})
			return &mkLeaky{m.(*maekawa)}
		}},
		// Overlaps that the fences make harmless: the search goes on past
		// many, and reports the first it found.
		{Variant: "centralized-naive-failover", Fenced: true},
	}
	if raceEnabled && !*bigChecks {
		// Under -race (ten times slower) a few of each kind: a complete
		// space, a safety violation, a broken fenced store and a state
		// limit; TestParallelTerminates repeats the hand-over there.
		cfgs = []CheckConfig{cfgs[0], cfgs[5], cfgs[9], cfgs[12]}
	}
	if *bigChecks {
		cfgs = append(cfgs,
			CheckConfig{Algorithm: RicartAgrawala, Requests: 2},
			CheckConfig{Algorithm: SuzukiKasami, Requests: 2, Network: NetworkUnordered},
			CheckConfig{Variant: "lamport-unordered"},
			CheckConfig{Variant: "maekawa-textbook-failed", StopAtDeadlock: true},
			CheckConfig{Variant: "suzuki-kasami-outdated-token"},
		)
	}
	for _, cfg := range cfgs {
		name := cfg.Variant
		if name == "" {
			name = fmt.Sprintf("%v/n=%d/r=%d/%v/%v", cfg.Algorithm, cfg.N, cfg.Requests, cfg.Network, cfg.Faults)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel() // small searches: two configurations at once keep both cores busy between batches
			cfg.MaxMemory = -1
			ref := cfg
			ref.breadthFirst = true // the parallel search is breadth first even where it stops
			one := mustCheck(t, ref)
			for _, safetyOnly := range []bool{false, true} {
				cfg.SafetyOnly = safetyOnly
				var first CheckResult
				for _, workers := range []int{1, 2, 3} {
					cfg.Workers = workers
					got := mustCheck(t, cfg)
					if workers == 1 {
						first = got
					}
					assert.Equal(t, strip(first), strip(got), "%d workers against 1, safety only %v", workers, safetyOnly)
				}
				want := one
				if safetyOnly {
					// Without the graph: no liveness, and a starvation
					// found with it is not searched for.
					want.StarvationFree, want.Liveness, want.MaxOvertakes = Undecided, false, -1
					if want.Violation != nil && want.Violation.Property == "starvation" {
						want.Violation = nil
					}
					if first.DeadlockFree == Refuted {
						want.StarvationFree = Refuted
					}
				}
				assert.Equal(t, strip(want), strip(first), "1 worker against the search on one goroutine with the graph, safety only %v", safetyOnly)
				if first.Violation != nil {
					w, err := first.Violation.Replay()
					require.NotNil(t, w)
					if first.Violation.Property != "deadlock" && first.Violation.Property != "starvation" {
						_ = err // the last step, the broken promise, is left to take
					} else {
						require.NoError(t, err)
					}
				}
			}
		})
	}
}

// strip leaves out of a result what may differ between runs: the time,
// and a counterexample's Mermaid diagram and unexported origin (compared
// through its steps).
func strip(r CheckResult) CheckResult {
	r.Seconds = 0
	if r.Violation != nil {
		v := *r.Violation
		v.origin, v.Mermaid = nil, ""
		r.Violation = &v
	}
	return r
}

// TestParallelExpand: a worker's expansion of one state. Once the
// context has ended it takes no transition and says it was cut, and an
// expansion that follows, with the context alive, is whole again (the
// expansions are reused from batch to batch). A successor already in the
// table carries its number and no world, and the world it was stepped in
// is kept and stepped in again for the next successor.
func TestParallelExpand(t *testing.T) {
	c, err := newChecker(CheckConfig{Algorithm: RicartAgrawala, N: 2, Requests: 1, Workers: 2})
	require.NoError(t, err)
	w, err := c.startWorld(false)
	require.NoError(t, err)
	c.fps = newVisited(true, c.cc.Fingerprint)
	x := &expander{hash: hasher{seeds: &c.seeds, bits: c.cc.Fingerprint}}
	var e expansion

	ended := make(chan struct{})
	close(ended)
	c.done = ended
	c.expand(x, w, &e)
	assert.True(t, e.cut, "the context has ended")
	assert.Empty(t, e.succ, "a transition taken after the context ended")
	require.Len(t, e.trs, 2, "both peers may ask")

	c.done = make(chan struct{})
	c.expand(x, w, &e)
	assert.False(t, e.cut, "a cut left over from the last expansion")
	require.Len(t, e.succ, len(e.trs))
	for k, s := range e.succ {
		require.NotNil(t, s.w, "successor %d is new", k)
		assert.NoError(t, s.err)
		assert.Equal(t, x.hash.fingerprint(s.w), s.fp)
	}
	assert.Nil(t, x.spare, "no world left over: every successor is new")

	// The second successor is known, as state 8: it carries that number
	// and no world, and the world it was stepped in is kept...
	c.fps.add(e.succ[1].fp, 8)
	c.expand(x, w, &e)
	require.Len(t, e.succ, 2)
	assert.NotNil(t, e.succ[0].w)
	assert.Nil(t, e.succ[1].w)
	assert.Equal(t, int32(8), e.succ[1].to)
	kept := x.spare
	require.NotNil(t, kept, "the known successor's world is not kept")
	// ... and the next transition is stepped in it.
	c.fps = newVisited(true, c.cc.Fingerprint)
	c.expand(x, w, &e)
	require.Len(t, e.succ, 2)
	assert.True(t, e.succ[0].w == kept, "the kept world is not stepped in again")
	assert.Nil(t, x.spare)
}

// canceller is a centralized machine that ends a context when asked to
// enter: the context ends in the middle of a worker's expansion.
type canceller struct {
	machine
	cancel context.CancelFunc
}

func (c *canceller) step(ev event, out *output) {
	if ev.kind == evRequest {
		c.cancel()
	}
	c.machine.step(ev, out)
}

func (c *canceller) clone() machine { return &canceller{c.machine.clone(), c.cancel} }

// TestParallelStopsAtTheContext: the parallel searches (breadth first,
// and depth first with SafetyOnly) stop at the context's end, the one
// that comes before they start and the one that comes with the first
// step (inside a worker), and report it; they take no transition after
// the one that saw the context end.
func TestParallelStopsAtTheContext(t *testing.T) {
	for _, safetyOnly := range []bool{false, true} {
		for _, workers := range []int{1, 2} {
			name := fmt.Sprintf("safetyOnly=%v/workers=%d", safetyOnly, workers)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			res, err := Check(ctx, CheckConfig{Algorithm: RicartAgrawala, N: 3, SafetyOnly: safetyOnly, Workers: workers})
			require.ErrorIs(t, err, context.Canceled, name)
			assert.Equal(t, StoppedByContext, res.Stopped, name)
			assert.False(t, res.Complete, name)
			assert.Equal(t, 1, res.States, name)
			assert.Zero(t, res.Transitions, name)

			ctx, cancel = context.WithCancel(context.Background())
			res, err = Check(ctx, CheckConfig{Algorithm: Centralized, N: 3, Requests: 1, SafetyOnly: safetyOnly, Workers: workers,
				build: func(id, n int) machine {
					m, _ := newCentralized(id, n, nil)
					return &canceller{m, cancel}
				}})
			cancel()
			require.ErrorIs(t, err, context.Canceled, name)
			assert.Equal(t, StoppedByContext, res.Stopped, name)
			assert.False(t, res.Complete, name)
			assert.Equal(t, Undecided, res.Safe, name)
			assert.LessOrEqual(t, res.Transitions, 1, name)
			assert.LessOrEqual(t, res.States, 2, name)
		}
	}
}

// TestParallelMemoryLimit: MaxMemory stops the parallel searches, with
// the graph (breadth first) or without (depth first, then again breadth
// first), at the same state for 1 and 2 workers, and with the graph at
// the same state as the breadth-first search on one goroutine. (Before
// the size of a world was sampled from a fresh clone, the last stopped at
// 2,668 states and the parallel one at 2,762: each weighed the spare
// machines and array slack that its own order of reusing worlds had left.)
func TestParallelMemoryLimit(t *testing.T) {
	for _, safetyOnly := range []bool{false, true} {
		// 3 MiB: the search with the graph stops at 2,743 states of
		// 48,861. Without the graph, 1 MiB stops the depth-first search
		// (2 MiB does not), and the breadth-first one made again at its
		// first state.
		cfg := CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 2, MaxStates: -1, MaxMemory: 3 << 20, SafetyOnly: safetyOnly}
		if safetyOnly {
			cfg.MaxMemory = 1 << 20
		}
		var first CheckResult
		if !safetyOnly {
			one := cfg
			one.breadthFirst = true
			first = mustCheck(t, one)
			assert.Equal(t, StoppedAtMemoryLimit, first.Stopped, "one goroutine")
		}
		for _, workers := range []int{1, 2} {
			cfg.Workers = workers
			got := mustCheck(t, cfg)
			assert.Equal(t, StoppedAtMemoryLimit, got.Stopped, "safety only %v, %d workers", safetyOnly, workers)
			assert.False(t, got.Complete, "safety only %v, %d workers", safetyOnly, workers)
			if workers == 1 && safetyOnly {
				first = got
			}
			assert.Equal(t, strip(first), strip(got), "safety only %v, %d workers", safetyOnly, workers)
		}
	}
}

// TestParallelProgress: the parallel depth-first searches, without the
// graph and with it (pargraph.go), report progress after a second and
// every second after that (the reports parallel.go makes), with the
// states found, the transitions (as the workers last added them up), the
// time and the memory, to a callback that here ends the search by its
// context at its second report. Four seconds in all, so not under
// -race.
func TestParallelProgress(t *testing.T) {
	skipRaceLight(t, "two searches of two seconds")
	for _, safetyOnly := range []bool{false, true} {
		reports, workers := 2, 1 // the first worker reports: with one, nobody else can
		ctx, cancel := context.WithCancel(context.Background())
		var got []CheckProgress
		res, err := Check(ctx, CheckConfig{Algorithm: RicartAgrawala, N: 4, Requests: 1, MaxStates: -1, MaxMemory: -1, SafetyOnly: safetyOnly, Workers: workers,
			Progress: func(p CheckProgress) {
				got = append(got, p)
				if len(got) == reports {
					cancel()
				}
			}})
		cancel()
		require.ErrorIs(t, err, context.Canceled, "safety only %v: the search ended before its last report", safetyOnly)
		require.Len(t, got, reports, "safety only %v", safetyOnly)
		assert.GreaterOrEqual(t, got[0].Elapsed, time.Second, "safety only %v", safetyOnly)
		for _, p := range got {
			assert.Positive(t, p.States, "safety only %v", safetyOnly)
			assert.Positive(t, p.Memory, "safety only %v", safetyOnly)
			assert.LessOrEqual(t, p.States, res.States, "safety only %v", safetyOnly)
			assert.Positive(t, p.Transitions, "safety only %v", safetyOnly)
			assert.LessOrEqual(t, p.Transitions, res.Transitions, "safety only %v", safetyOnly)
		}
		assert.GreaterOrEqual(t, got[1].Elapsed-got[0].Elapsed, time.Second, "safety only %v: reports less than a second apart", safetyOnly)
		assert.Less(t, got[0].States, got[1].States, "safety only %v", safetyOnly)
	}
}

// TestParallelLongQueue: past a few thousand states the breadth-first
// queue drops its explored prefix, and the states' numbers with it; the
// parallel search still reports the counterexample of the search on one
// goroutine, a safety violation found at 21,738 states and a deadlock in
// a space of 22,303. Not under -race (a second).
func TestParallelLongQueue(t *testing.T) {
	skipRaceLight(t, "two searches of 20,000 states")
	for _, v := range []string{"lamport-unordered", "ricart-agrawala-naive-exclusion"} {
		cfg := CheckConfig{Variant: v, MaxMemory: -1, breadthFirst: true}
		want := mustCheck(t, cfg)
		require.NotNil(t, want.Violation, v)
		cfg.Workers, cfg.breadthFirst = 2, false
		got := mustCheck(t, cfg)
		assert.Equal(t, strip(want), strip(got), v)
	}
}

// TestParallelConfig: Workers below zero, or with PartialOrder, is a bad
// configuration.
func TestParallelConfig(t *testing.T) {
	for _, cfg := range []CheckConfig{
		{Algorithm: Lamport, Workers: -1},
		{Algorithm: Lamport, Workers: 2, SafetyOnly: true, PartialOrder: true},
	} {
		_, err := Check(context.Background(), cfg)
		require.ErrorIs(t, err, ErrInvalidConfig, "%+v", cfg)
		assert.ErrorContains(t, err, "workers")
	}
}

// TestParallelDepthFirstAgrees: without the graph, the parallel
// depth-first search over a space big enough for the workers to hand
// frames to each other many times counts the same states, transitions and
// blocked states with 1, 2 and 4 workers as the depth-first search on one
// goroutine, and decides the same; with a state limit, or a deadlock, it
// redoes the search breadth first, with the same result for any number
// of workers. Without -race it also compares Ricart-Agrawala at n = 4
// (2.3M states) with two workers; under -race, smaller spaces with 2 and
// 3 workers. Each search must end within a deadline (checkWithin).
func TestParallelDepthFirstAgrees(t *testing.T) {
	cfgs := []CheckConfig{
		{Algorithm: Lamport, N: 3},
		{Algorithm: TokenRing, N: 4, Faults: CheckFaults{Crash: true}},
		{Algorithm: RicartAgrawala, N: 4, MaxStates: 20000},
		{Variant: "maekawa-no-inquire"},
		{Algorithm: RicartAgrawala, N: 4, Requests: 1, MaxStates: -1},
	}
	workers := []int{1, 2, 4}
	if raceEnabled && !*bigChecks {
		cfgs = []CheckConfig{
			{Algorithm: RicartAgrawala, N: 3, Requests: 1},
			{Algorithm: TokenRing, Faults: CheckFaults{Crash: true}},
			{Algorithm: RicartAgrawala, N: 4, MaxStates: 3000},
			{Variant: "maekawa-no-inquire"},
		}
		workers = []int{2, 3}
	}
	for _, cfg := range cfgs {
		cfg.SafetyOnly, cfg.MaxMemory = true, -1
		big := cfg.Algorithm == RicartAgrawala && cfg.MaxStates < 0
		one := checkWithin(t, cfg, 2*time.Minute)
		var first CheckResult
		for i, w := range workers {
			if big && w != 2 {
				continue
			}
			cfg.Workers = w
			got := checkWithin(t, cfg, 2*time.Minute)
			if i == 0 || big {
				first = got
			}
			assert.Equal(t, strip(first), strip(got), "%v: %d workers against %d", cfg.Algorithm, w, workers[0])
		}
		if one.Complete && one.Violation == nil {
			assert.Equal(t, strip(one), strip(first), "%v: workers against depth first", cfg.Algorithm)
		} else {
			assert.Equal(t, one.Safe, first.Safe)
			assert.Equal(t, one.DeadlockFree, first.DeadlockFree)
		}
	}
}

// TestParallelTerminates: the parallel depth-first search ends, with the
// states of the search on one goroutine, however its workers hand frames
// over: 2, 3 and 4 workers, several times each, on spaces of a few
// thousand states, each search within a deadline that is reported as a
// failure (not a hang of the test), and never made again breadth first
// for limits it does not pass; without the graph and with it (over FIFO
// queues the parallel depth-first search of pargraph.go, over a bag the
// breadth-first one). Two workers once threw one task to
// each other for ever (parallel.go says why that cannot happen now), and
// a worker that started idle without being counted as idle left the
// last busy one waiting for it. Across the runs, frames were handed over.
func TestParallelTerminates(t *testing.T) {
	handovers := map[bool]int{} // by SafetyOnly
	for _, cfg := range []CheckConfig{
		{Algorithm: RicartAgrawala, N: 3, Requests: 1},
		{Algorithm: SuzukiKasami, Network: NetworkUnordered},
		{Algorithm: Raymond, N: 4, Faults: CheckFaults{Lose: true}},
	} {
		for _, safetyOnly := range []bool{true, false} {
			cfg.SafetyOnly, cfg.MaxStates, cfg.MaxMemory = safetyOnly, -1, -1
			want := checkWithin(t, cfg, time.Minute)
			require.True(t, want.Complete)
			exact := want.States
			for _, w := range []int{2, 3, 4} {
				for i := range 3 {
					// No limits, then limits the search does not pass (the
					// state limit exactly at the states there are): the
					// depth-first search must not stop at them and be made
					// again breadth first.
					cfg.MaxStates, cfg.MaxMemory = -1, -1
					if i > 0 {
						cfg.MaxStates, cfg.MaxMemory = exact, 1<<30
					}
					cfg.Workers = w
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					c, err := newChecker(cfg)
					require.NoError(t, err)
					ended := make(chan error, 1)
					go func() { ended <- c.explore(ctx) }()
					select {
					case err = <-ended:
					case <-time.After(time.Minute + 10*time.Second):
						cancel()
						t.Fatalf("%v with %d workers: the search ignored its context and did not end", cfg.Algorithm, w)
					}
					cancel()
					require.NoError(t, err, "%v with %d workers: the search did not end within a minute", cfg.Algorithm, w)
					assert.Equal(t, want.States, c.res.States, "%v with %d workers", cfg.Algorithm, w)
					assert.Equal(t, want.Transitions, c.res.Transitions, "%v with %d workers", cfg.Algorithm, w)
					assert.False(t, c.cc.breadthFirst, "%v with %d workers: the search was made again breadth first", cfg.Algorithm, w)
					handovers[safetyOnly] += c.handovers
					c.release()
				}
			}
		}
	}
	t.Logf("frames handed over: %d without the graph, %d with it", handovers[true], handovers[false])
	assert.Positive(t, handovers[true], "no worker ever handed a frame to another without the graph")
	assert.Positive(t, handovers[false], "no worker ever handed a frame to another with the graph")
}

// checkWithin is mustCheck with a deadline: a search that has not ended
// by then fails the test, whether it heeds its context or not.
func checkWithin(t *testing.T, cfg CheckConfig, d time.Duration) CheckResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	type ended struct {
		res CheckResult
		err error
	}
	ch := make(chan ended, 1)
	go func() {
		res, err := Check(ctx, cfg)
		ch <- ended{res, err}
	}()
	select {
	case e := <-ch:
		require.NoError(t, e.err, "%+v: the search did not end within %v", cfg, d)
		return e.res
	case <-time.After(d + 10*time.Second):
		t.Fatalf("%+v: the search ignored its context and did not end", cfg)
		return CheckResult{}
	}
}

// TestParallelInterrupted: a context that ends stops the parallel search
// at once, with what it found so far and no goroutine left behind (goleak
// in TestMain).
func TestParallelInterrupted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := Check(ctx, CheckConfig{Algorithm: RicartAgrawala, N: 5, SafetyOnly: true, Workers: 2, MaxStates: -1, MaxMemory: -1})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, StoppedByContext, res.Stopped)
	assert.Greater(t, res.States, 1)
	assert.Equal(t, Undecided, res.Safe)
	runtime.GC()
}

// BenchmarkCheckParallel measures the parallel search on a fixed corpus,
// safety and deadlock only: Lamport at n = 3 and Ricart-Agrawala at n = 4,
// one request per peer. In one run it checks the corpus on one goroutine
// depth first (workers=0, the default), and with one and two workers
// (each depth first, on one shared table: parallelDepthFirst), and
// reports for each the states a second of wall time and
// the CPU time a state (user and system, of the whole process), and the
// ratios of two workers' rate to one's and to the default's. On a loaded
// machine the wall-time rates fall with the share of the cores the
// benchmark gets, while CPU time a state shows what the work costs. It
// also reports the bytes a state the table of hashes holds, with 128-bit
// and 64-bit fingerprints, at the size Ricart-Agrawala's search ends
// with.
func BenchmarkCheckParallel(b *testing.B) { benchmarkParallel(b, true) }

// BenchmarkCheckParallelGraph is BenchmarkCheckParallel with the graph
// that liveness needs: the parallel depth-first search of pargraph.go,
// and liveness's passes over the peers at once, against the search on
// one goroutine; states a second count the whole of Check, liveness
// included.
func BenchmarkCheckParallelGraph(b *testing.B) { benchmarkParallel(b, false) }

func benchmarkParallel(b *testing.B, safetyOnly bool) {
	corpus := []CheckConfig{
		{Algorithm: Lamport, N: 3, Requests: 1},
		{Algorithm: RicartAgrawala, N: 4, Requests: 1},
	}
	type run struct {
		states    int
		wall, cpu time.Duration
	}
	runs := map[int]*run{0: {}, 1: {}, 2: {}}
	for b.Loop() {
		for _, workers := range []int{0, 1, 2} {
			r := runs[workers]
			for _, cfg := range corpus {
				cfg.SafetyOnly, cfg.Workers, cfg.MaxStates, cfg.MaxMemory = safetyOnly, workers, -1, -1
				cpu0 := cpuTime()
				start := time.Now()
				res, err := Check(context.Background(), cfg)
				r.wall += time.Since(start)
				r.cpu += cpuTime() - cpu0
				if err != nil || !res.Complete || res.Violation != nil {
					b.Fatalf("%v %+v", err, res)
				}
				r.states += res.States
			}
		}
	}
	rate := func(r *run) float64 { return float64(r.states) / r.wall.Seconds() }
	for _, w := range []int{0, 1, 2} {
		b.ReportMetric(rate(runs[w]), fmt.Sprintf("states/s-w%d", w))
		b.ReportMetric(float64(runs[w].cpu.Nanoseconds())/float64(runs[w].states), fmt.Sprintf("cpu-ns/state-w%d", w))
	}
	b.ReportMetric(rate(runs[2])/rate(runs[1]), "w2/w1")
	b.ReportMetric(rate(runs[2])/rate(runs[0]), "w2/w0")
	if !safetyOnly {
		return
	}
	for _, bits := range []int{128, 64} {
		c, err := newChecker(CheckConfig{Algorithm: RicartAgrawala, N: 4, SafetyOnly: true, Fingerprint: bits, MaxStates: -1, MaxMemory: -1})
		require.NoError(b, err)
		require.NoError(b, c.explore(context.Background()))
		b.ReportMetric(float64(c.fps.bytes())/float64(c.res.States), fmt.Sprintf("table-B/state-%d", bits))
	}
}

// TestParallelSafetyOnlyKeepsNoGraph: without the graph, the breadth-first
// search that a parallel depth-first one is made again as (here, at
// lamport-unordered's safety violation) records no edges: their arrays
// would only count against MaxMemory and hold memory nobody reads.
func TestParallelSafetyOnlyKeepsNoGraph(t *testing.T) {
	for _, workers := range []int{1, 2} {
		c, err := newChecker(CheckConfig{Variant: "lamport-unordered", SafetyOnly: true, Workers: workers, MaxMemory: -1})
		require.NoError(t, err)
		require.NoError(t, c.explore(context.Background()))
		require.True(t, c.cc.breadthFirst, "%d workers: the search was not made again breadth first", workers)
		require.NotNil(t, c.result().Violation, "%d workers", workers)
		assert.Empty(t, c.to, "%d workers: edges recorded without the graph", workers)
		assert.Empty(t, c.cls, "%d workers", workers)
		assert.Empty(t, c.ent, "%d workers", workers)
	}
}

// TestFrontierHoldsNoSpareMachines: a world waiting in a breadth-first
// frontier, on one goroutine or with workers, holds no spare machines
// (dropSpare): it is only ever cloned from, and the size that MaxMemory
// counts for it is a fresh clone's (checker.sample).
func TestFrontierHoldsNoSpareMachines(t *testing.T) {
	for _, workers := range []int{0, 1, 2} {
		c, err := newChecker(CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 2, MaxStates: 3000, MaxMemory: -1, Workers: workers, breadthFirst: true})
		require.NoError(t, err)
		require.NoError(t, c.explore(context.Background()))
		require.Equal(t, StoppedAtStateLimit, c.result().Stopped, "%d workers", workers)
		waiting := 0
		for _, w := range c.frontier {
			if w != nil {
				waiting++
				require.Nil(t, w.spare, "%d workers: a waiting world holds spare machines", workers)
			}
		}
		require.Positive(t, waiting, "%d workers", workers)
	}
}

// TestParallelShareWithNobodyIdle: share hands a frame over only to a
// worker still on the idle list, and only while the search runs. With
// three or more workers, two busy ones may both read hungry as 1 and
// race to the same idle worker: the second finds the list empty and must
// keep its frame (indexing the empty list would panic). Once the search
// is over (halted), nothing is handed over.
func TestParallelShareWithNobodyIdle(t *testing.T) {
	frames := func() []dfsFrame {
		return []dfsFrame{{w: new(World), trs: make([]Transition, 2), limit: 2}, {w: new(World), trs: make([]Transition, 1), limit: 1}}
	}
	p := &pdfs{workers: 3}
	p.hungry.Store(1) // stale: another busy worker took the idle one
	stack := frames()
	require.False(t, p.share(stack, 0), "handed over to nobody")
	assert.Equal(t, 2, stack[0].limit, "the frame was given away")

	y := &pworker{}
	y.wake.L = &p.mu
	p.idle = []*pworker{y}
	p.done = true
	require.False(t, p.share(stack, 0), "handed over after the search ended")
	assert.Nil(t, y.next)

	p.done = false
	require.True(t, p.share(stack, 0))
	require.NotNil(t, y.next)
	assert.Len(t, y.next.trs, 2)
	assert.Empty(t, p.idle)
	assert.Zero(t, p.hungry.Load())
	assert.Zero(t, stack[0].limit, "the frame handed over is still this worker's")
}

// TestParallelProgressFromOneGoroutine: with two depth-first workers,
// only the first reports progress, on the goroutine that called Check:
// Progress is never called from two goroutines at once, as its callers
// (dmutexcheck's, which prints) may assume. Four reports, so that a
// second worker that reported too would be seen with a chance of 15 in
// 16; four seconds, so not under -race.
func TestParallelProgressFromOneGoroutine(t *testing.T) {
	skipRaceLight(t, "a search of four seconds")
	goid := func() string {
		b := make([]byte, 64)
		b = b[:runtime.Stack(b, false)]
		return string(b[:bytes.IndexByte(b, '[')])
	}
	me := goid()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var from []string
	_, err := Check(ctx, CheckConfig{Algorithm: RicartAgrawala, N: 4, Requests: 1, MaxStates: -1, MaxMemory: -1, SafetyOnly: true, Workers: 2,
		Progress: func(CheckProgress) {
			from = append(from, goid())
			if len(from) == 4 {
				cancel()
			}
		}})
	if err == nil {
		t.Skip("the search ended before it reported four times")
	}
	require.ErrorIs(t, err, context.Canceled)
	for _, g := range from {
		assert.Equal(t, me, g, "a report from another goroutine than Check's")
	}
}
