package dmutex

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reducibleCases are the configurations of TestModelCheck that the
// reductions apply to (FIFO, no faults), small enough to check twice.
func reducibleCases() []checkCase {
	var cs []checkCase
	for _, cc := range checkCases() {
		if cc.net == NetworkFIFO && !cc.big {
			cs = append(cs, cc)
		}
	}
	return cs
}

// TestPartialOrderKeepsVerdicts checks every small FIFO configuration of
// every algorithm twice: in full, and reduced by PartialOrder (with
// StampGaps), depth first. Both must complete with the same verdicts, the
// reduced search over no more states than the full one, and over fewer in
// all.
//
// The full search is TestModelCheck's (sharedCheck): with the graph,
// breadth first, which visits the same states and transitions as the
// depth-first search without it (TestSafetyOnlyAgrees), so the package
// explores each case in full once.
//
// The rows of docs/benchmarks.md's table of reductions are compared with
// what it counts (the row of requests 2,1,1 with -dmutex.big only).
func TestPartialOrderKeepsVerdicts(t *testing.T) {
	var full, reduced int
	cases := reducibleCases()
	counts := map[string][2]int{}
	var mu sync.Mutex // guards full, reduced and counts: the cases run in parallel
	t.Cleanup(func() { checkReductionRows(t, len(cases), full, reduced, counts) })
	for _, cc := range cases {
		t.Run(cc.name(), func(t *testing.T) {
			t.Parallel()
			if raceHeavy(cc) {
				skipRaceLight(t, "thousands to hundreds of thousands of states, twice")
			}
			a := sharedCheck(t, modelCheckConfig(cc))
			cfg := CheckConfig{Algorithm: cc.v.alg, N: cc.n, Requests: cc.requests, Options: cc.v.opts, SafetyOnly: true, MaxStates: -1, MaxMemory: -1}
			cfg.PartialOrder, cfg.StampGaps = true, true
			b := mustCheck(t, cfg)
			require.True(t, a.Complete && b.Complete)
			assert.True(t, b.PartialOrder)
			assert.Equal(t, a.Safe, b.Safe)
			assert.Equal(t, a.DeadlockFree, b.DeadlockFree)
			assert.True(t, a.Safe == Holds && a.DeadlockFree == Holds, "%+v", a.Violation)
			assert.LessOrEqual(t, b.States, a.States)
			t.Logf("%d states in full, %d reduced (%.2fx)", a.States, b.States, float64(a.States)/float64(b.States))
			mu.Lock()
			full += a.States
			reduced += b.States
			counts[cc.name()] = [2]int{a.States, b.States}
			mu.Unlock()
		})
	}
}

// checkReductionRows compares the sums and rows of
// TestPartialOrderKeepsVerdicts with docs/benchmarks.md's table of
// reductions, once every case has run.
func checkReductionRows(t *testing.T, cases, full, reduced int, counts map[string][2]int) {
	if t.Failed() || raceLight() {
		return // a case failed, stopped or was left out: the sums are short
	}
	t.Logf("all: %d states in full, %d reduced", full, reduced)
	assert.Less(t, reduced*10, full*9, "the reduction should save at least a tenth of the states")

	rows := map[string][2]int{
		fmt.Sprintf("every small FIFO configuration of TestModelCheck (%d, all algorithms)", cases): {full, reduced},
		"Lamport n=3 r=1":         counts["lamport/n=3/r=1/fifo"],
		"Lamport n=2 r=4":         counts["lamport/n=2/r=4/fifo"],
		"Ricart-Agrawala n=3 r=2": counts["ricart-agrawala/n=3/r=2/fifo"],
	}
	if *bigChecks {
		cfg := CheckConfig{Algorithm: Lamport, N: 3, RequestsPerPeer: []int{2, 1, 1}, SafetyOnly: true, MaxStates: -1, MaxMemory: -1}
		a := mustCheck(t, cfg)
		cfg.PartialOrder, cfg.StampGaps = true, true
		b := mustCheck(t, cfg)
		require.True(t, a.Safe == Holds && a.DeadlockFree == Holds && b.Safe == Holds && b.DeadlockFree == Holds && a.Complete && b.Complete)
		rows["Lamport n=3, requests 2,1,1"] = [2]int{a.States, b.States}
	}
	doc, err := os.ReadFile("docs/benchmarks.md")
	require.NoError(t, err)
	for label, n := range rows {
		require.NotZero(t, n[0], label)
		row := fmt.Sprintf("| %s | %s | %s | %.2fx |", label, commas(n[0]), commas(n[1]), float64(n[0])/float64(n[1]))
		assert.True(t, strings.Contains(string(doc), row+"\n"), "docs/benchmarks.md's table of reductions is stale; want the row\n%s", row)
	}
}

// TestPartialOrderFindsViolations: every flaw the full search finds over
// a FIFO network without faults, the reduced one finds too, with a trace
// that replays. The broken machines break each kind of promise (two
// inside, a deadlock, a second token, a lost token, the entry order), and
// the named variants are the textbook's.
func TestPartialOrderFindsViolations(t *testing.T) {
	cfgs := map[string]CheckConfig{
		"overlap":         {Algorithm: Centralized, N: 2, build: func(int, int) machine { return &fakeMachine{} }},
		"deadlock":        {Algorithm: Centralized, N: 2, build: func(int, int) machine { return &fakeMachine{never: true} }},
		"forged token":    {Algorithm: Centralized, N: 2, build: func(id, _ int) machine { return &forger{token: id == 0} }},
		"vanished token":  {Algorithm: Centralized, N: 2, build: func(id, _ int) machine { return &dropper{token: id == 0} }},
		"timestamp order": {Algorithm: Centralized, N: 2, build: backwards},
	}
	for _, v := range Variants() {
		if v.Network == NetworkUnordered || !v.Faults.zero() || v.Detector.Kind != DetectorNone {
			continue
		}
		if raceEnabled && v.N > 3 {
			continue // hundreds of thousands of states, twice: a minute under -race
		}
		cfgs[v.Name] = CheckConfig{Variant: v.Name}
	}
	require.GreaterOrEqual(t, len(cfgs), 7, "the broken machines and at least two variants")
	for name, cfg := range cfgs {
		t.Run(name, func(t *testing.T) {
			cfg.SafetyOnly = true
			cfg.MaxStates, cfg.MaxMemory = -1, -1
			a := mustCheck(t, cfg)
			require.NotNil(t, a.Violation, "the full search finds the flaw")
			cfg.PartialOrder, cfg.StampGaps = true, true
			b := mustCheck(t, cfg)
			require.NotNil(t, b.Violation, "the reduced search misses the flaw (%d states)", b.States)
			assert.Equal(t, a.Violation.Property, b.Violation.Property)
			if cfg.build == nil { // a replay builds the real machines
				requireReplays(t, b.Violation)
			}
			t.Logf("%s: full %d states, reduced %d: %s", b.Violation.Property, a.States, b.States, b.Violation.Message)
		})
	}
}

// TestStampGapsKeepsLiveness: StampGaps merges only states that behave
// alike, so with the graph too every verdict, the bound on overtaking
// included, stays what the full graph gives, over fewer states.
func TestStampGapsKeepsLiveness(t *testing.T) {
	// Searches on the test's goroutine, no timing or memory measured:
	// it runs beside the other parallel tests once the sequential ones
	// are done.
	t.Parallel()
	cfgs := []CheckConfig{
		{Algorithm: Lamport, N: 2, Requests: 4, Network: NetworkFIFO, MaxMemory: -1}, // TestModelCheck's lamport/n=2/r=4/fifo
		{Algorithm: Lamport, N: 3, RequestsPerPeer: []int{2, 1, 0}},
	}
	if !raceLight() { // 3 s under -race
		cfgs = append(cfgs, CheckConfig{Algorithm: Lamport, N: 2, Requests: 2, Tries: 1})
	}
	if !raceEnabled { // the graph of 324,459 states, twice: a minute under -race
		cfgs = append(cfgs, CheckConfig{Algorithm: Lamport, N: 3, Requests: 1})
	}
	for _, cfg := range cfgs {
		t.Run(fmt.Sprintf("n=%d/r=%d/%v/tries=%d", cfg.N, cfg.Requests, cfg.RequestsPerPeer, cfg.Tries), func(t *testing.T) {
			a := sharedCheck(t, cfg)
			cfg.StampGaps = true
			b := mustCheck(t, cfg)
			require.True(t, a.Complete && b.Complete && a.Liveness && b.Liveness)
			assert.Equal(t, a.Safe, b.Safe)
			assert.Equal(t, a.DeadlockFree, b.DeadlockFree)
			assert.Equal(t, a.StarvationFree, b.StarvationFree)
			assert.Equal(t, a.MaxOvertakes, b.MaxOvertakes)
			assert.Less(t, b.States, a.States, "wide gaps between stamps are merged")
			t.Logf("%d states, %d with StampGaps; maxOvertakes %d", a.States, b.States, b.MaxOvertakes)
		})
	}
}

// TestStampGapOfTheRunLeft pins the cap: one more than the steps the rest
// of the run may take, and none with a budget without end.
func TestStampGapOfTheRunLeft(t *testing.T) {
	cfg, err := newWorldConfig(Lamport, 3, WorldConfig{Requests: 2, NoTrace: true}, nil)
	require.NoError(t, err)
	cfg.stampGaps = true
	w, err := newWorld(cfg, nil)
	require.NoError(t, err)
	// Six requests to come, each of at most 3(n-1)+2 = 8 steps.
	assert.Equal(t, uint64(6*8+1), w.stampGap())
	_, err = w.Apply(Transition{Kind: TransRequest, Peer: 0})
	require.NoError(t, err)
	// Five to come and one out, with its two requests in flight.
	assert.Equal(t, uint64(6*8+2+1), w.stampGap())

	cfg.stampGaps = false
	assert.Equal(t, ^uint64(0), w.stampGap(), "without StampGaps")
	cfg, err = newWorldConfig(Lamport, 3, WorldConfig{Requests: Unlimited, NoTrace: true}, nil)
	require.NoError(t, err)
	cfg.stampGaps = true
	w, err = newWorld(cfg, nil)
	require.NoError(t, err)
	assert.Equal(t, ^uint64(0), w.stampGap(), "with requests without end")
	cfg, err = newWorldConfig(Lamport, 3, WorldConfig{Requests: 1, Tries: Unlimited, NoTrace: true}, nil)
	require.NoError(t, err)
	cfg.stampGaps = true
	w, err = newWorld(cfg, nil)
	require.NoError(t, err)
	assert.Equal(t, ^uint64(0), w.stampGap(), "with tries without end")
}

func TestPartialOrderBadConfig(t *testing.T) {
	for _, cfg := range []CheckConfig{
		{Algorithm: Lamport, PartialOrder: true},
		{Algorithm: Centralized, PartialOrder: true, SafetyOnly: true, Network: NetworkUnordered},
		{Algorithm: Centralized, PartialOrder: true, SafetyOnly: true, Faults: CheckFaults{Crash: true}},
		{Algorithm: Centralized, PartialOrder: true, SafetyOnly: true, Detector: Detector{Kind: DetectorPerfect}},
		{Algorithm: Centralized, PartialOrder: true, SafetyOnly: true, Fenced: true},
		{Algorithm: Centralized, PartialOrder: true, SafetyOnly: true, N: 65},
	} {
		_, err := Check(t.Context(), cfg)
		require.ErrorIs(t, err, ErrInvalidConfig, "%+v", cfg)
		require.ErrorContains(t, err, "PartialOrder")
	}
	// 64 peers are the most: a set of peers is one uint64.
	res, err := Check(t.Context(), CheckConfig{Algorithm: Centralized, N: 64, PartialOrder: true, SafetyOnly: true, MaxStates: 100})
	require.NoError(t, err)
	assert.False(t, res.Complete)
	assert.True(t, res.PartialOrder)
}

// lamportWorld returns a Lamport world of n peers, one request each,
// after steps, each a transition's ID.
func lamportWorld(t *testing.T, n int, steps ...string) *World {
	t.Helper()
	w, err := NewWorld(Lamport, n, WorldConfig{Requests: 1})
	require.NoError(t, err)
	for _, id := range steps {
		tr, ok := w.Find(id)
		require.True(t, ok, "%s is not enabled in\n%v", id, w)
		_, err := w.Apply(tr)
		require.NoError(t, err)
	}
	return w
}

// TestClosedSet: a closed set takes in every peer with an empty queue
// into one of its members, and so on from those.
func TestClosedSet(t *testing.T) {
	w := lamportWorld(t, 3)
	assert.Equal(t, uint64(0b111), w.closedSet(0), "nothing queued: every peer may send first")
	// Peers 0 and 1 ask: 0 has a request queued from 1 but none from 2,
	// and 2 has requests queued from both.
	w = lamportWorld(t, 3, "r0", "r1")
	assert.Equal(t, uint64(0b101), w.closedSet(0), "2 has nothing queued to 0")
	// All three ask: every queue holds a request.
	w = lamportWorld(t, 3, "r0", "r1", "r2")
	for p := range 3 {
		assert.Equal(t, uint64(1)<<uint(p), w.closedSet(p), "peer %d", p)
	}
	// Then peer 0 takes 1's request: the queue 1->0 is empty, so 1 joins
	// 0; 1 has requests queued from 0 and 2, so the set stops there.
	w = lamportWorld(t, 3, "r0", "r1", "r2", firstDelivery(t, 3, 1, 0, "r0", "r1", "r2"))
	assert.Equal(t, uint64(0b011), w.closedSet(0))
	assert.Equal(t, uint64(0b010), w.closedSet(1))
	// A chain: with four peers, where 3 has sent nothing to 1, 0's set
	// takes in 1 (empty 1->0), then 3 (empty 3->1).
	w = lamportWorld(t, 4, "r0", "r1", "r2", "r3")
	for _, id := range []string{firstDelivery(t, 4, 1, 0, "r0", "r1", "r2", "r3")} {
		tr, ok := w.Find(id)
		require.True(t, ok)
		_, err := w.Apply(tr)
		require.NoError(t, err)
	}
	w.queues[3*4+1] = nil // as if 3's request to 1 were delivered, without 1's reply
	assert.Equal(t, uint64(0b1011), w.closedSet(0), "0, then 1, then 3")
}

// firstDelivery returns the ID of the delivery from -> to enabled after
// steps, in a fresh Lamport world of n peers.
func firstDelivery(t *testing.T, n, from, to int, steps ...string) string {
	t.Helper()
	w := lamportWorld(t, n, steps...)
	for _, tr := range w.Transitions() {
		if tr.Kind == TransDeliver && tr.Msg.From == from && tr.Msg.To == to {
			return tr.ID()
		}
	}
	t.Fatalf("no delivery %d -> %d after %v", from, to, steps)
	return ""
}

// TestPersistent: the persistent set comes first, it holds the steps of
// the closed set with the fewest steps (the first found among equals),
// and there is none when every closed set is every peer.
func TestPersistent(t *testing.T) {
	peersOf := func(trs []Transition) []int {
		var ps []int
		for _, tr := range trs {
			ps = append(ps, tr.Peer)
		}
		return ps
	}
	w := lamportWorld(t, 3)
	trs := w.Transitions()
	assert.Equal(t, len(trs), w.persistent(trs), "every closed set is every peer")
	assert.Len(t, trs, 3)

	// {0, 2} has four steps (a delivery at 0; two and a request at 2),
	// {1, 2} as many, and {2} alone three.
	w = lamportWorld(t, 3, "r0", "r1")
	trs = w.Transitions()
	k := w.persistent(trs)
	assert.Equal(t, []int{2, 2, 2}, peersOf(trs[:k]))

	w = lamportWorld(t, 3, "r0", "r1", "r2")
	trs = w.Transitions()
	k = w.persistent(trs)
	assert.Equal(t, 2, k, "peer 0's two deliveries")
	assert.Equal(t, []int{0, 0}, peersOf(trs[:k]), "the first of three equal sets")
	assert.NotContains(t, peersOf(trs[k:]), 0)
	assert.Len(t, trs, 6, "the others stay, after the set")

	// Over a bag, a message sent later may be delivered first: no set.
	u, err := NewWorld(Lamport, 3, WorldConfig{Requests: 1, Network: NetworkUnordered})
	require.NoError(t, err)
	for p := range 3 {
		_, err := u.Apply(Transition{Kind: TransRequest, Peer: p})
		require.NoError(t, err)
	}
	trs = u.Transitions()
	assert.Equal(t, len(trs), u.persistent(trs))

	// {0, 1} has three steps, {1} and {2} two each: {1}, a subset of the
	// set found first, goes first.
	w = lamportWorld(t, 3, "r0", "r1", "r2", firstDelivery(t, 3, 1, 0, "r0", "r1", "r2"))
	trs = w.Transitions()
	k = w.persistent(trs)
	assert.Equal(t, []int{1, 1}, peersOf(trs[:k]))
	assert.NotContains(t, peersOf(trs[k:]), 1)
}

// TestStampMapKeepsRefApartFromNone: the least stamp is named 0, and a
// message's Ref of 0 means "none", so a Ref equal to the least stamp
// must not be written as 0: a reply to a try would then encode as a
// reply to a request.
func TestStampMapKeepsRefApartFromNone(t *testing.T) {
	sm := &stampMap{vals: []uint64{5, 7}, to: []uint64{0, 2}}
	try := sm.message(Message{Kind: KindReply, TS: 7, Ref: 5})
	plain := sm.message(Message{Kind: KindReply, TS: 7})
	assert.Equal(t, uint64(2), try.TS)
	assert.NotEqual(t, plain, try)
	assert.Zero(t, plain.Ref)
	assert.Equal(t, appendMessage(nil, sm.message(Message{Kind: KindReply, TS: 5, Ref: 7})), appendMessage(nil, Message{Kind: KindReply, TS: 0, Ref: 3}))
}
