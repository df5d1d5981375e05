package dmutex

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVisited: the table finds what it holds, keeps each fingerprint's
// first id through its growth, and holds the zero fingerprint, which
// marks an empty slot, apart from the others; with 128-bit fingerprints
// and with 64-bit ones, which tell apart only their first word.
func TestVisited(t *testing.T) {
	t.Parallel() // computation on the test's goroutine only: beside the other parallel tests at the end
	for _, tt := range []struct {
		withIDs bool
		bits    int
	}{{true, 128}, {false, 128}, {true, 64}, {false, 64}} {
		withIDs := tt.withIDs
		v := newVisited(withIDs, tt.bits)
		n := 200_000 // three doublings of the table's 2^16 slots
		if raceEnabled {
			n = 100_000 // two doublings: half the CPU under -race, which has no goroutines to watch here
		}
		fp := func(i int) fingerprint { return fingerprint{uint64(i+1) * 0x9e3779b97f4a7c15, uint64(i + 1)} }
		// Plain comparisons in the loops: testify's, a million of them,
		// took most of the test's 35 s under -race.
		for i := range n {
			if id, seen := v.add(fp(i), int32(i)); seen || id != int32(i) {
				t.Fatalf("add %d: got id %d, seen %v; want %d, new", i, id, seen, i)
			}
		}
		assert.Equal(t, n, v.len())
		for i := range n {
			id, seen := v.add(fp(i), -1)
			got, ok := v.get(fp(i))
			if !seen || !ok {
				t.Fatalf("%d: seen %v, found %v after it was added", i, seen, ok)
			}
			if withIDs && (id != int32(i) || got != int32(i)) {
				t.Fatalf("%d: add gave id %d and get %d", i, id, got)
			}
		}
		_, ok := v.get(fp(n))
		assert.False(t, ok)
		_, ok = v.get(fingerprint{})
		assert.False(t, ok)
		_, seen := v.add(fingerprint{}, 7)
		assert.False(t, seen)
		_, ok = v.get(fingerprint{})
		assert.True(t, ok, "the zero fingerprint is held too")
		assert.Equal(t, n+1, v.len())
		_, ok = v.get(fingerprint{fp(5)[0], 12345})
		assert.Equal(t, tt.bits == 64, ok, "%d bits: a fingerprint that differs only in its second word", tt.bits)
		assert.Equal(t, int64(v.mask+1)*int64(tt.bits/8+map[bool]int{true: 4}[withIDs]), v.bytes())
	}
}

// TestSafetyOnlyAgrees: the depth-first search without the graph, which
// reuses its worlds and their machines level by level, finds exactly the
// states, transitions and blocked states of the breadth-first search.
// Where TestModelCheck has the same configuration (n = 3, two requests,
// no faults), one of the two searches is its own (sharedCheck): with the
// graph without -race, depth first under it.
//
// Under -race without -dmutex.big (raceLight) only the configurations of
// two peers run (Lamport with three requests and with a try, the
// centralized partition, Suzuki-Kasami's fenced false suspicion): the
// others, tens of thousands of states each and Lamport at n = 3 with its
// graph of 324,459, took half a minute of CPU under the race detector.
func TestSafetyOnlyAgrees(t *testing.T) {
	// Searches on the test's goroutine, no timing or memory measured:
	// it runs beside the other parallel tests once the sequential ones
	// are done.
	t.Parallel()
	cfgs := []CheckConfig{
		{Algorithm: RicartAgrawala, N: 3, Requests: 2, Network: NetworkFIFO, MaxMemory: -1},
		{Algorithm: RicartAgrawala, N: 3, Requests: 2, Network: NetworkFIFO, MaxMemory: -1, Options: []Option{WithImplicitReplies()}},
		{Algorithm: Lamport, N: 2, Requests: 3},
		{Algorithm: Lamport, N: 2, Requests: 2, Tries: 1},
		{Algorithm: SuzukiKasami, N: 3, Requests: 2, Network: NetworkUnordered, MaxMemory: -1},
		{Algorithm: Maekawa, N: 3, Requests: 2, Network: NetworkFIFO, MaxMemory: -1},
		{Algorithm: TokenRing, N: 4, Faults: CheckFaults{Crash: true}},
		{Algorithm: Raymond, N: 4, Requests: 2, Faults: CheckFaults{Lose: true}},
		{Algorithm: Centralized, Requests: 2, Faults: CheckFaults{Partition: 1, Heal: true}},
		// Two holders at once with a false suspicion: with the store the
		// search goes on past them, depth first too.
		{Algorithm: SuzukiKasami, N: 2, Faults: CheckFaults{Crash: true},
			Detector: Detector{Kind: DetectorImperfect, FalseSuspicions: 1}, Options: []Option{WithRecovery()}, Fenced: true},
	}
	cfgs = append(cfgs, CheckConfig{Algorithm: Lamport, N: 3, Requests: 1})
	for i, cfg := range cfgs {
		t.Run(fmt.Sprintf("%d/%v/n=%d/r=%d", i, cfg.Algorithm, cfg.N, cfg.Requests), func(t *testing.T) {
			t.Parallel() // two configurations at once on two cores
			if cfg.N >= 3 {
				skipRaceLight(t, "tens of thousands of states, seconds under -race")
			}
			bfs := sharedCheck(t, cfg)
			cfg.SafetyOnly = true
			dfs := sharedCheck(t, cfg)
			name := bfs.Algorithm + "/" + bfs.Faults
			require.True(t, bfs.Complete && dfs.Complete, name)
			assert.Equal(t, bfs.States, dfs.States, name)
			assert.Equal(t, bfs.Transitions, dfs.Transitions, name)
			assert.Equal(t, bfs.Blocked, dfs.Blocked, name)
			assert.Equal(t, bfs.Safe, dfs.Safe, name)
			assert.Equal(t, bfs.DeadlockFree, dfs.DeadlockFree, name)
			assert.Equal(t, bfs.FencedSafe, dfs.FencedSafe, name)
			assert.False(t, dfs.Liveness, name)
			assert.Equal(t, bfs.DeadlockFree == Refuted, dfs.StarvationFree == Refuted, "%s: starvation freedom is not searched without the graph: refuted by a deadlock, else undecided", name)
			assert.NotEqual(t, Holds, dfs.StarvationFree, "%s: never holds without the graph", name)
			assert.Equal(t, -1, dfs.MaxOvertakes, name)
		})
	}
}

// TestSafetyOnlyCounterexamples: without the graph, a counterexample is
// the path the depth-first search stood on, and it replays.
func TestSafetyOnlyCounterexamples(t *testing.T) {
	for _, v := range Variants() {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel() // one search each: two at once on two cores
			if raceEnabled && v.N > 3 {
				t.Skip("hundreds of thousands of states, minutes under -race; TestCheckVariants checks it")
			}
			bfs := sharedCheck(t, CheckConfig{Variant: v.Name, StopAtDeadlock: true}) // TestCheckVariants's search
			require.NotNil(t, bfs.Violation)
			if bfs.States > 20_000 {
				skipRaceLight(t, fmt.Sprintf("the breadth-first search took %d states to its counterexample", bfs.States))
			}
			// Without StopAtDeadlock, so that a deadlock the search meets
			// first does not hide a safety violation.
			res, err := Check(context.Background(), CheckConfig{Variant: v.Name, SafetyOnly: true})
			require.NoError(t, err)
			if bfs.Violation.Property == "starvation" {
				require.Nil(t, res.Violation, "a starvation needs the graph")
				return
			}
			require.NotNil(t, res.Violation, "no counterexample in %d states", res.States)
			if bfs.Violation.Property == "safety" {
				assert.Equal(t, "safety", res.Violation.Property)
			}
			if res.Violation.Property != "safety" {
				assert.Equal(t, "deadlock", res.Violation.Property)
			}
			requireReplays(t, res.Violation)
		})
	}
}

// TestCollisionChance: the bound on the chance that two of s states share
// a fingerprint, s(s-1)/2^(b+1), against values worked out by hand: none
// for one state, one pair at 2^-b for two, a half less a little for 2^32
// states of 64 bits, and never past 1.
func TestCollisionChance(t *testing.T) {
	tests := []struct {
		s, bits int
		want    float64
	}{
		{0, 64, 0},
		{1, 128, 0},
		{2, 64, 0x1p-64},
		{2, 128, 0x1p-128},
		{3, 64, 3 * 0x1p-64},
		{1 << 32, 64, 0.5 - 0x1p-33},
		{1 << 33, 64, 1},
		{1 << 40, 128, 0x1p-49 - 0x1p-89},
	}
	for _, tt := range tests {
		assert.InEpsilon(t, tt.want+1e-300, collisionChance(tt.s, tt.bits)+1e-300, 1e-12, "%d states, %d bits", tt.s, tt.bits)
	}
}

// TestFingerprintBits: with 64-bit fingerprints the search finds the
// states, transitions and verdicts of 128-bit ones, with the graph and
// without, and says which it kept and the chance of a collision; other
// sizes are refused.
func TestFingerprintBits(t *testing.T) {
	t.Parallel() // computation on the test's goroutine only: beside the other parallel tests at the end
	ring := 4    // 27,176 states with the graph, each searched twice
	if raceEnabled {
		ring = 3 // a tenth of the states: most of the test's time under -race
	}
	for _, cfg := range []CheckConfig{
		{Algorithm: RicartAgrawala},
		{Algorithm: SuzukiKasami, Requests: 2, SafetyOnly: true},
		{Algorithm: TokenRing, N: ring, Faults: CheckFaults{Crash: true}},
		{Variant: "maekawa-no-inquire"},
	} {
		wide := mustCheck(t, cfg)
		cfg.Fingerprint = 64
		narrow := mustCheck(t, cfg)
		assert.Equal(t, 128, wide.FingerprintBits)
		assert.Equal(t, 64, narrow.FingerprintBits)
		assert.Equal(t, collisionChance(narrow.States, 64), narrow.CollisionChance)
		assert.Equal(t, collisionChance(wide.States, 128), wide.CollisionChance)
		wide.Seconds, narrow.Seconds = 0, 0
		wide.FingerprintBits, wide.CollisionChance = 64, narrow.CollisionChance
		assert.Equal(t, wide.Violation == nil, narrow.Violation == nil)
		wide.Violation, narrow.Violation = nil, nil
		assert.Equal(t, wide, narrow, "%+v", cfg)
	}
	_, err := Check(context.Background(), CheckConfig{Algorithm: Lamport, Fingerprint: 32})
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.ErrorContains(t, err, "32-bit fingerprints")
}

// TestSharedVisitedIDs: a shared table with ids numbers each fingerprint
// once, in the order the counter gives, answers a fingerprint already in
// it with its number, counts the bytes its shards hold as they grow, and
// read as one table (table) finds every fingerprint's number, counts
// them, and renumbers them.
func TestSharedVisitedIDs(t *testing.T) {
	for _, bits := range []int{128, 64} {
		s := newSharedVisited(bits, true)
		var next atomic.Int64
		const n = 100_000 // past 768 a shard: every shard grows
		fp := func(i int) fingerprint {
			return fingerprint{uint64(i)*0x9e3779b97f4a7c15 + 1, uint64(i) + 7}
		}
		for i := range n {
			id, seen := s.addID(fp(i), &next)
			require.False(t, seen, "%d bits: %d", bits, i)
			require.Equal(t, int32(i), id, "%d bits", bits)
		}
		for _, i := range []int{0, 1, n / 2, n - 1} {
			id, seen := s.addID(fp(i), &next)
			assert.True(t, seen, "%d bits: %d again", bits, i)
			assert.Equal(t, int32(i), id, "%d bits: %d again", bits, i)
		}
		assert.Equal(t, int64(n), next.Load(), "%d bits: a number taken for a known fingerprint", bits)
		var held int64
		for i := range s.shards {
			held += s.shards[i].v.bytes()
		}
		assert.Equal(t, held, s.bytes.Load(), "%d bits: the bytes counted", bits)
		v := s.table()
		assert.Equal(t, n, v.len(), "%d bits", bits)
		assert.Equal(t, held, v.bytes(), "%d bits", bits)
		perm := make([]int32, n)
		for i := range perm {
			perm[i] = int32(n - 1 - i)
		}
		v.renumber(perm)
		for _, i := range []int{0, 1, n / 2, n - 1} {
			id, ok := v.get(fp(i))
			assert.True(t, ok, "%d bits: %d", bits, i)
			assert.Equal(t, int32(n-1-i), id, "%d bits: %d renumbered", bits, i)
		}
		_, ok := v.get(fp(n))
		assert.False(t, ok, "%d bits: a fingerprint never added", bits)
		v.release()
	}
}
