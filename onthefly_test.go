package dmutex

import (
	"context"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOnTheFlyAgrees: liveness decided on the fly (onthefly.go) gives
// the result of the search with the graph, over TestDepthFirstGraphAgrees'
// corpus (every algorithm at n = 3, the liveness regression machines,
// a starvation, a deadlock, safety violations, Fenced), with recovery
// after a crash, with requests without end (cycles that let others in:
// MaxOvertakes -1), and at n = 4. Where the search on the fly met nothing
// to report it kept no graph (OnTheFly in the result); where it met a
// counterexample it handed over, and the result is the graph's, step for
// step.
func TestOnTheFlyAgrees(t *testing.T) {
	corpus := graphCorpus(t)
	recovering := []Algorithm{Centralized, RicartAgrawala, SuzukiKasami}
	if raceLight() {
		recovering = recovering[:1]
	}
	for _, alg := range recovering {
		corpus = append(corpus, named{"recovery/" + alg.String(), CheckConfig{Algorithm: alg, N: 3, Requests: 1, Options: []Option{WithRecovery()},
			Faults: CheckFaults{Crash: true}, Detector: Detector{Kind: DetectorPerfect}}})
	}
	corpus = append(corpus,
		named{"centralized/unlimited", CheckConfig{Algorithm: Centralized, N: 3, Requests: Unlimited}},
		// A crash without recovery: survivors left waiting (Blocked),
		// which is no deadlock, nor starvation without a detector.
		named{"ricart-agrawala/crash", CheckConfig{Algorithm: RicartAgrawala, N: 3, Faults: CheckFaults{Crash: true}}})
	if !raceLight() {
		// 11k to 66k states each, twice: 20 s under -race on a loaded
		// machine, with the recovery rows of Ricart-Agrawala and
		// Suzuki-Kasami.
		corpus = append(corpus,
			named{"raymond/n=4/r=2", CheckConfig{Algorithm: Raymond, N: 4, Requests: 2}},
			named{"roucairol-carvalho/n=4", CheckConfig{Algorithm: RoucairolCarvalho, N: 4, Requests: 1}},
			named{"singhal-heuristic/n=4", CheckConfig{Algorithm: SinghalHeuristic, N: 4, Requests: 1}})
	}
	kept, cyclic, unbounded, blocked := 0, false, false, false
	for _, tt := range corpus {
		t.Run(tt.name, func(t *testing.T) {
			want := strip(mustCheck(t, tt.cfg))
			cfg := tt.cfg
			cfg.OnTheFly = true
			c, err := newChecker(cfg)
			require.NoError(t, err)
			defer c.release()
			require.NoError(t, c.explore(context.Background()))
			c.liveness()
			got := strip(c.result())
			if want.Violation == nil && want.Complete {
				assert.True(t, got.OnTheFly, "kept the graph, with nothing to report")
			}
			if got.OnTheFly {
				kept++
				cyclic = cyclic || c.fly.cycles > 0
				unbounded = unbounded || got.MaxOvertakes < 0
			}
			got.OnTheFly = false
			assert.Equal(t, want, got)
			blocked = blocked || (got.Blocked > 0 && c.fly != nil)
		})
	}
	assert.Greater(t, kept, 20, "cases decided on the fly")
	assert.True(t, cyclic, "no case decided on the fly had a cycle")
	assert.True(t, unbounded, "no case decided on the fly was unbounded")
	assert.True(t, blocked, "no case decided on the fly counted blocked states")
}

// TestOnTheFlyConfig: OnTheFly names what it cannot go with.
func TestOnTheFlyConfig(t *testing.T) {
	for _, tt := range []struct {
		cfg  CheckConfig
		want string
	}{
		{CheckConfig{Algorithm: Centralized, OnTheFly: true, SafetyOnly: true}, "OnTheFly with SafetyOnly"},
		{CheckConfig{Algorithm: Centralized, OnTheFly: true, Workers: 2}, "OnTheFly with 2 workers"},
	} {
		_, err := Check(context.Background(), tt.cfg)
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.ErrorContains(t, err, tt.want)
	}
	// Past 32 peers the graph is not kept and liveness not checked (a
	// state's waiting peers are 32 bits): nor is it on the fly.
	res := mustCheck(t, CheckConfig{Algorithm: Centralized, N: 33, OnTheFly: true, MaxStates: 100})
	assert.False(t, res.OnTheFly)
	assert.False(t, res.Liveness)
}

// TestOnTheFlyStops: a state limit stops the search on the fly where it
// stops the search with the graph (both go depth first, in the same
// order), with liveness undecided; so do a memory limit and the context.
func TestOnTheFlyStops(t *testing.T) {
	cfg := CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 2, MaxStates: 5_000}
	want := strip(mustCheck(t, cfg))
	cfg.OnTheFly = true
	got := strip(mustCheck(t, cfg))
	assert.True(t, got.OnTheFly)
	got.OnTheFly = false
	assert.Equal(t, want, got)
	assert.Equal(t, StoppedAtStateLimit, got.Stopped)
	assert.False(t, got.Liveness)
	assert.Equal(t, Undecided, got.StarvationFree)
	assert.Equal(t, -1, got.MaxOvertakes)

	cfg.MaxStates, cfg.MaxMemory = -1, 1<<20
	got = mustCheck(t, cfg)
	assert.Equal(t, StoppedAtMemoryLimit, got.Stopped)
	assert.False(t, got.Complete || got.Liveness)
	assert.Equal(t, Undecided, got.Safe)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cfg.MaxMemory = 0
	got, err := Check(ctx, cfg)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, StoppedByContext, got.Stopped)
	assert.False(t, got.Complete || got.Liveness)
}

// TestOnTheFlyMemory: what the search on the fly holds at its end is
// the table of hashes, a bit and a byte a peer for each state, and
// little more: beside the table, a fifth of what the graph holds, as
// each search counts it.
func TestOnTheFlyMemory(t *testing.T) {
	held := func(fly bool) (*checker, int64) {
		cfg := CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 2, OnTheFly: fly}
		if raceLight() {
			cfg.Requests = 1 // 2,347 states, not 48,861: 12 s under -race on a loaded machine
		}
		c, err := newChecker(cfg)
		require.NoError(t, err)
		t.Cleanup(c.release)
		require.NoError(t, c.explore(context.Background()))
		return c, c.countMemory(0)
	}
	c, fly := held(true)
	require.True(t, c.res.Liveness)
	states := int64(c.res.States)
	g, graph := held(false)
	// The same states expanded and worlds sampled for their size, as the
	// search with the graph: the memory counted for the worlds on the
	// path, and the progress reports, follow the same count.
	assert.Equal(t, g.expanded, c.expanded, "states expanded")
	assert.Equal(t, g.samples, c.samples, "worlds sampled")
	assert.Equal(t, g.worldSize, c.worldSize, "a world's size")
	table := c.fps.bytes() + c.fps.growBytes(1024)
	t.Logf("%d states: %d bytes on the fly (%d of them the table's), %d with the graph", states, fly, table, graph)
	assert.GreaterOrEqual(t, fly, table+states*int64(c.cc.N), "the table and a byte a peer a state")
	assert.LessOrEqual(t, fly, table+states*int64(c.cc.N+1)+64<<10)
	assert.Less(t, 5*(fly-table), graph-table)
}

// TestOnTheFlyUnmaps: no mapped array is left after Check on the fly,
// whether it completes (its graph acyclic, or one component), hands
// over to the graph, is stopped by a limit or by the context (arrays
// past 256 elements are mapped here, so the search's own are).
func TestOnTheFlyUnmaps(t *testing.T) {
	regions, cancelled := smallArrays(t)
	for _, tt := range []struct {
		name string
		ctx  context.Context
		cfg  CheckConfig
	}{
		// 48,861 states: a bit each, 764 words.
		{"complete", context.Background(), CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 2}},
		// One component of 382 states: that many pending, with their
		// edges.
		{"cyclic", context.Background(), CheckConfig{Algorithm: Centralized, N: 4, Requests: Unlimited}},
		{"handed over", context.Background(), CheckConfig{Variant: "singhal-heuristic-textbook"}},
		{"state limit", context.Background(), CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 2, MaxStates: 3_000}},
		{"context", cancelled, CheckConfig{Algorithm: RicartAgrawala, N: 3}},
	} {
		before := regions()
		tt.cfg.OnTheFly = true
		res, _ := Check(tt.ctx, tt.cfg)
		assert.Equal(t, before, regions(), "%s: mappings left", tt.name)
		assert.Equal(t, tt.name != "handed over", res.OnTheFly, tt.name)
	}
}

// TestOnTheFlyCycles: the search on the fly counts the components of
// the graph of more than one state, and what the pending states held at
// most: none in Ricart-Agrawala's graph with one request each, whose
// pending states are those of the path; one of every state with
// requests without end, all pending at once, which memory counts.
func TestOnTheFlyCycles(t *testing.T) {
	run := func(cfg CheckConfig) *checker {
		cfg.OnTheFly = true
		c, err := newChecker(cfg)
		require.NoError(t, err)
		t.Cleanup(c.release)
		require.NoError(t, c.explore(context.Background()))
		return c
	}
	c := run(CheckConfig{Algorithm: RicartAgrawala, N: 3})
	assert.Equal(t, 0, c.fly.cycles)
	assert.Equal(t, 0, c.fly.largest)
	c = run(CheckConfig{Algorithm: Centralized, N: 4, Requests: Unlimited})
	assert.Equal(t, 1, c.fly.cycles)
	assert.Equal(t, c.res.States, c.fly.largest)
	assert.Equal(t, -1, c.res.MaxOvertakes)
	record := int64(unsafe.Sizeof(flyRecord{}))
	assert.GreaterOrEqual(t, c.fly.peak, int64(c.res.States)*record, "every state pending at once")
	assert.GreaterOrEqual(t, c.countMemory(0), c.fps.bytes()+c.fly.peak)
}

// checkBoth runs cfg's Check with the graph and, where it may, on the
// fly, requires the same result of both (but OnTheFly), and returns the
// first: the liveness tests' regressions judge the search on the fly
// too.
func checkBoth(t testing.TB, cfg CheckConfig) CheckResult {
	t.Helper()
	res := mustCheck(t, cfg)
	if cfg.SafetyOnly || cfg.Workers > 0 {
		return res
	}
	cfg.OnTheFly = true
	fly := strip(mustCheck(t, cfg))
	fly.OnTheFly = false
	require.Equal(t, strip(res), fly, "on the fly")
	return res
}

// TestOnTheFlyDistances: the byte the search on the fly keeps for each
// state and peer p is the dist of the state's component of W_p, the most
// entries of others on a path on which p waits throughout, as read from
// the graph: for each p the same number of states have each dist. The
// cases have components of several states, with requests without end
// (where MaxOvertakes is -1, and the bytes are still exact).
func TestOnTheFlyDistances(t *testing.T) {
	for _, cfg := range []CheckConfig{
		{Algorithm: Centralized, N: 3, RequestsPerPeer: []int{Unlimited, Unlimited, 1}},
		{Algorithm: Raymond, N: 3, RequestsPerPeer: []int{Unlimited, Unlimited, 1}},
		{Algorithm: NaimiTrehel, N: 3, RequestsPerPeer: []int{Unlimited, Unlimited, 1}},
		{Algorithm: SuzukiKasami, N: 3, RequestsPerPeer: []int{Unlimited, 1, 1}},
		{Algorithm: RicartAgrawala, N: 3, Requests: 2},
		// One component of all 98 states, and one of 282.
		{Algorithm: Centralized, N: 3, Requests: Unlimited, Network: NetworkUnordered},
		{Algorithm: NaimiTrehel, N: 4, RequestsPerPeer: []int{Unlimited, Unlimited, Unlimited, 1}},
	} {
		explored := func(fly bool) *checker {
			cfg.OnTheFly = fly
			c, err := newChecker(cfg)
			require.NoError(t, err)
			t.Cleanup(c.release)
			require.NoError(t, c.explore(context.Background()))
			require.True(t, c.res.Complete)
			return c
		}
		g, f := explored(false), explored(true)
		require.NotNil(t, f.fly, "handed over")
		sc := newSCCs(len(g.info))
		for p := range cfg.N {
			in := func(s int32) bool { return g.info[s].wait&(1<<uint(p)) != 0 }
			var dist []int32
			sc.components(int32(len(g.info)), in, g.edges, g.target, func(id int32) bool {
				d := int32(0)
				for _, u := range sc.members {
					for e := g.off[u]; e < g.off[u+1]; e++ {
						if to := g.to[e]; in(to) && sc.comp[to] != id {
							d = max(d, int32(min(g.edgeEntry(e)+1, 1))+dist[sc.comp[to]])
						}
					}
				}
				dist = append(dist, d)
				return true
			})
			want, got := map[int32]int{}, map[int32]int{}
			for s := range int32(len(g.info)) {
				if in(s) {
					want[dist[sc.comp[s]]]++
				}
			}
			for s := range f.res.States {
				if b := f.fly.d[s*cfg.N+p]; b != flyOut {
					got[int32(b)]++
				}
			}
			assert.Equal(t, want, got, "%v, P%d: states by dist", cfg.Algorithm, p)
		}
		sc.release()
		t.Logf("%v: %d states, %d components of several, the largest of %d", cfg.Algorithm, f.res.States, f.fly.cycles, f.fly.largest)
	}
}

// TestOnTheFlyFairComponent: flyComponent's fairness, on a component
// made by hand. P0 waits in A and B, which go round A -> B (class 5)
// -> A (class 6); A also has an edge of class 6 out to a done state X.
// Class 6 is enabled in both and taken only by the edge into A, the
// component's root (its first member): the component is fair, and the
// search hands over. Without the edge B -> A it is no cycle but two
// components, and the search goes on with each state's bytes.
func TestOnTheFlyFairComponent(t *testing.T) {
	build := func(back bool) *checker {
		c := &checker{cc: CheckConfig{N: 1}, kinds: []edgeKind{{cls: 5, ent: -1}, {cls: 6, ent: -1}}}
		c.fly = newFlySearch(1)
		f := c.fly
		f.done = []uint64{1 << 2} // X, state 2, is done
		f.d = []uint8{0, 0, 0}
		wait := stateInfo{wait: 1}
		f.recs = []flyRecord{{id: 0, info: wait, off: 0}, {id: 1, info: wait, off: 2}}
		f.to, f.code = []int32{1, 2}, []uint8{0, 1}
		if back {
			f.to, f.code = append(f.to, 0), append(f.code, 1)
		}
		return c
	}
	c := build(true)
	assert.False(t, c.flyComponent(0), "a fair cycle through the root: hand over")
	c = build(false)
	assert.True(t, c.flyComponent(1), "B alone")
	assert.True(t, c.flyComponent(0), "A, with an edge to B")
	assert.Equal(t, []uint8{0, 0, 0}, c.fly.d)
	assert.Equal(t, []uint64{7}, c.fly.done)
	assert.Empty(t, c.fly.recs)
}
