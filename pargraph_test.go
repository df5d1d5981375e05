package dmutex

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParallelGraphMadeAgain: where the parallel search with the graph
// would stop, or cannot keep its graph, it is made again breadth first
// (pargraph.go), and gives what the breadth-first search on one goroutine
// gives: at a state limit, at a memory limit, at a step that lets two
// peers in, at a promise for a cluster at rest broken, past the kinds of
// edge a byte names, past the edges its graph holds, and when the system
// will not map its arrays. A search that
// passes none of these is not made again (and TestDepthFirstGraphAgrees
// compares its graph).
func TestParallelGraphMadeAgain(t *testing.T) {
	defer func(k int, e int64) { maxEdgeKinds, maxGraphEdges = k, e }(maxEdgeKinds, maxGraphEdges)
	leaky := func(id, n int) machine {
		m, _ := newMaekawa(id, n, &config{})
		return &mkLeaky{m.(*maekawa)}
	}
	small := CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 1}
	want := func(cfg CheckConfig) CheckResult {
		cfg.breadthFirst = true
		return mustCheck(t, cfg)
	}
	// The kinds of edge in small's graph, as the search on one goroutine
	// names them.
	one, err := newChecker(small)
	require.NoError(t, err)
	require.NoError(t, one.explore(context.Background()))
	kinds := len(one.kinds)
	one.release()
	require.Greater(t, kinds, 2)
	for _, tt := range []struct {
		name string
		cfg  CheckConfig
		// With kinds, a byte names as many kinds of edge as the graph
		// has, less kinds-1 (so kinds = 1 names them all).
		kinds int
		// With edges, the graph holds as many edges as the search
		// takes, less short.
		edges bool
		short int64
		again bool
	}{
		{"complete", small, 0, false, 0, false},
		{"state limit", CheckConfig{Algorithm: RicartAgrawala, N: 4, MaxStates: 5000}, 0, false, 0, true},
		{"memory limit", CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 2, MaxStates: -1, MaxMemory: 3 << 20}, 0, false, 0, true},
		{"a step lets two in", CheckConfig{Variant: "ricart-agrawala-tie-reply"}, 0, false, 0, true},
		{"a promise at rest", CheckConfig{Algorithm: Maekawa, N: 3, RequestsPerPeer: []int{1, 0, 0}, build: leaky}, 0, false, 0, true},
		{"one kind short", small, 2, false, 0, true},
		{"kinds enough", small, 1, false, 0, false},
		{"one edge short", small, 0, true, 1, true},
		{"edges enough", small, 0, true, 0, false},
		// Two holders at once, which the fenced store keeps apart: the
		// search goes on past them, and reports the first.
		{"overlaps", CheckConfig{Variant: "centralized-naive-failover", Fenced: true}, 0, false, 0, false},
		// Arrays for 2^60 edges, past any address space: the system
		// refuses to map them.
		{"arrays refused", small, 0, true, int64(want(small).Transitions) - 1<<60, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := want(tt.cfg)
			maxEdgeKinds, maxGraphEdges = 256, int64(1)<<31-1
			if tt.kinds > 0 {
				maxEdgeKinds = kinds - (tt.kinds - 1)
			}
			if tt.edges {
				maxGraphEdges = int64(want.Transitions) - tt.short
			}
			cfg := tt.cfg
			cfg.Workers = 2
			c, err := newChecker(cfg)
			require.NoError(t, err)
			require.True(t, c.deep, "the search with two workers starts depth first")
			require.NoError(t, c.explore(context.Background()))
			c.liveness()
			got := c.result()
			c.release()
			assert.Equal(t, tt.again, c.cc.breadthFirst, "made again breadth first")
			assert.Equal(t, strip(want), strip(got))
		})
	}
}

// TestParallelGraphInterrupted: a context that ends stops the parallel
// search with the graph at once, with the counts it has, nothing decided
// and no goroutine left behind (goleak in TestMain).
func TestParallelGraphInterrupted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := Check(ctx, CheckConfig{Algorithm: RicartAgrawala, N: 5, Workers: 2, MaxStates: -1, MaxMemory: -1})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, StoppedByContext, res.Stopped)
	assert.Greater(t, res.States, 1)
	assert.Positive(t, res.Transitions)
	assert.Equal(t, Undecided, res.Safe)
	assert.Equal(t, Undecided, res.DeadlockFree)
	assert.Equal(t, Undecided, res.StarvationFree)
	assert.False(t, res.Liveness)
	assert.Equal(t, -1, res.MaxOvertakes)
}

// TestParallelLiveness: liveness's passes over the peers at once, one a
// worker, read their answers in the order of the peers: when two peers
// starve, the first one's lasso is reported, as on one goroutine, P0's
// included.
func TestParallelLiveness(t *testing.T) {
	build := func(id, _ int) machine { return &twoStarve{id: id} }
	for _, tt := range []struct {
		reqs []int
		p    int
	}{
		{[]int{1, 1, 0, 0}, 0},
		{[]int{0, 1, 1, 0}, 1},
		{[]int{0, 0, 1, 0}, 2},
	} {
		cfg := CheckConfig{Algorithm: Centralized, N: 4, RequestsPerPeer: tt.reqs, build: build}
		want := mustCheck(t, cfg)
		require.NotNil(t, want.Violation)
		require.Equal(t, fmt.Sprintf("starvation: a fair run in which P%d waits for ever", tt.p), want.Violation.Message)
		for _, workers := range []int{1, 2, 3, 4} {
			cfg.Workers = workers
			assert.Equal(t, strip(want), strip(mustCheck(t, cfg)), "%v, %d workers", tt.reqs, workers)
		}
	}
}

// twoStarve ignores every request: a request to P3 sets P3 and P2
// pinging each other for ever, so each requester waits in a fair cycle.
type twoStarve struct{ id int }

func (m *twoStarve) step(ev event, out *output) {
	switch {
	case ev.kind == evRequest:
		out.send(Message{Kind: KindRequest, From: m.id, To: 3})
	case ev.kind == evMessage && ev.msg.Kind == KindRequest:
		out.send(Message{Kind: KindInquire, From: 3, To: 2})
	case ev.kind == evMessage && ev.msg.Kind == KindInquire:
		out.send(Message{Kind: KindInquire, From: m.id, To: ev.msg.From})
	}
}
func (m *twoStarve) clone() machine              { c := *m; return &c }
func (m *twoStarve) appendState(b []byte) []byte { return b }

// TestParallelGraphUnmaps: every array the parallel search with the graph
// maps (its graph's, and its shared table's once they grow big), and
// every one the safety search maps (its table's), is returned to the
// system by the time Check returns, whether the search
// completed, was made again, ended with its context, or had some of its
// arrays refused.
func TestParallelGraphUnmaps(t *testing.T) {
	// Small arrays mapped too: the shards of the shared table among them,
	// once they grow past 256 slots.
	defer func(e int64) { maxGraphEdges = e }(maxGraphEdges)
	regions, cancelled := smallArrays(t)
	for _, tt := range []struct {
		name  string
		ctx   context.Context
		cfg   CheckConfig
		edges int64
	}{
		{"complete", context.Background(), CheckConfig{Algorithm: RicartAgrawala, N: 3}, 0},
		// 50,000 states: the shards hold 781 on average, and grow past
		// 768.
		{"made again", context.Background(), CheckConfig{Algorithm: RicartAgrawala, N: 4, MaxStates: 50_000}, 0},
		{"context", cancelled, CheckConfig{Algorithm: RicartAgrawala, N: 3}, 0},
		{"refused", context.Background(), CheckConfig{Algorithm: RicartAgrawala, N: 3}, 1 << 60},
	} {
		maxGraphEdges = int64(1)<<31 - 1
		if tt.edges > 0 {
			maxGraphEdges = tt.edges
		}
		for _, safetyOnly := range []bool{false, true} {
			before := regions()
			tt.cfg.Workers, tt.cfg.SafetyOnly = 2, safetyOnly
			_, _ = Check(tt.ctx, tt.cfg)
			assert.Equal(t, before, regions(), "%s, safety only %v: mappings left", tt.name, safetyOnly)
		}
	}
}

// smallArrays maps arrays past 256 elements until t ends, and returns a
// count of the live mappings and a context already cancelled: what the
// tests that no mapping is left after a search need.
func smallArrays(t *testing.T) (regions func() int, cancelled context.Context) {
	m := bigArrayMin
	t.Cleanup(func() { bigArrayMin = m })
	bigArrayMin = 1 << 8
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return func() int {
		mapped.Lock()
		defer mapped.Unlock()
		return len(mapped.regions)
	}, ctx
}
