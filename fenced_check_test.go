package dmutex

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEntryFence: without recovery a fence is the next one; with it,
// each peer takes the least fence above what it has seen in its own
// class (its id modulo n), so no two peers ever share one, and a new
// epoch is one of the peer's own; Suzuki-Kasami's token epoch is a floor
// taken up to the peer's class the same way.
func TestEntryFence(t *testing.T) {
	ra := newTestRicart(t)
	assert.Equal(t, uint64(6), entryFence(ra, 5, false, false, 0, 4), "without recovery, the next fence")
	assert.Equal(t, uint64(6), entryFence(ra, 5, false, true, 2, 4), "without recovery, no epoch either")
	// inClass requires that f is the least fence of peer id's class (of
	// n) above floor.
	inClass := func(f, floor uint64, id, n int, msg string) {
		t.Helper()
		assert.Equal(t, uint64(id), f%uint64(n), "%s: peer %d's class", msg, id)
		assert.Greater(t, f, floor, msg)
		assert.LessOrEqual(t, f-floor, uint64(n), "%s: the least above %d", msg, floor)
	}
	for _, seen := range []uint64{0, 5, 6, 7, 8, FenceEpoch - 1, 3*FenceEpoch + 9} {
		fences := map[uint64]int{}
		for id := range 4 {
			f := entryFence(ra, seen, true, false, id, 4)
			inClass(f, seen, id, 4, "no epoch")
			fences[f]++
			e := entryFence(ra, seen, true, true, id, 4)
			k := e / FenceEpoch
			assert.Equal(t, uint64(id), (k-1)%4, "epoch %d belongs to peer %d", k, id)
			assert.Greater(t, k, seen/FenceEpoch, "a new epoch")
			inClass(e, k*FenceEpoch, id, 4, "new epoch")
			fences[e]++
		}
		assert.Len(t, fences, 8, "four peers, with and without an epoch, never share a fence (seen %d)", seen)
	}
	// Past epoch 1, peer 0's next epoch is 5 (epochs 1, 5, 9, ... are its).
	assert.Equal(t, uint64(5), entryFence(ra, FenceEpoch+7, true, true, 0, 4)/FenceEpoch)
	assert.Equal(t, uint64(2), entryFence(ra, FenceEpoch+7, true, true, 1, 4)/FenceEpoch)
	assert.Greater(t, entryFence(ra, MaxFence-1, true, true, 0, 4), uint64(MaxFence),
		"no epoch past the end, and no fence of peer 0's class left: the caller hands out none")
	assert.Equal(t, uint64(MaxFence), entryFence(ra, MaxFence-1, true, true, int(MaxFence%4), 4),
		"the last fence, to the peer whose class it is in")

	sk := newSKRecovery(t, 1, 3)
	sk.epoch = 4
	inClass(entryFence(sk, 9, true, true, 1, 3), 4*FenceEpoch, 1, 3, "the token's epoch, whatever the suspicion")
	inClass(entryFence(sk, 4*FenceEpoch+9, true, false, 1, 3), 4*FenceEpoch+9, 1, 3, "within the token's epoch")
	plain := newSKMachine(t, 1, 3)
	assert.Equal(t, uint64(10), entryFence(plain, 9, false, true, 1, 3), "without recovery, the next fence")
}

func newTestRicart(t *testing.T) machine {
	t.Helper()
	cfg, err := newConfig(RicartAgrawala, 4, forWorld, []Option{WithRecovery()})
	require.NoError(t, err)
	m, err := cfg.newMachine(RicartAgrawala, 0, 4)
	require.NoError(t, err)
	return m
}

// TestWorldFencedStore: with the store, a holder writes twice before it
// may leave, with the fence of its hold, and the fences ride on messages
// as the runtime's do.
func TestWorldFencedStore(t *testing.T) {
	c, err := newChecker(CheckConfig{Algorithm: RicartAgrawala, N: 2, Fenced: true})
	require.NoError(t, err)
	w, err := c.startWorld(true)
	require.NoError(t, err)
	apply := func(id string) StepResult {
		t.Helper()
		tr, ok := w.Find(id)
		require.True(t, ok, "%s not enabled in\n%s", id, w)
		st, err := w.Apply(tr)
		require.NoError(t, err)
		return st
	}
	for _, id := range []string{"r0", "d1", "d2"} {
		apply(id)
	}
	require.True(t, w.Peer(0).Inside)
	_, ok := w.Find("l0")
	assert.False(t, ok, "no leave before the writes")
	st := apply("w0")
	assert.Equal(t, "P0 writes with fence 1, accepted", st.String())
	apply("w0")
	_, ok = w.Find("w0")
	assert.False(t, ok, "two writes per hold")
	apply("l0")
	apply("r1")
	apply("d3") // P1's request reaches P0, whose reply carries fence 1
	apply("d4")
	require.True(t, w.Peer(1).Inside)
	assert.Equal(t, "P1 writes with fence 2, accepted", apply("w1").String())
}

// eager enters on every request at once: two of them in a world are two
// holders with the same fence, which the fenced store must catch.
type eager struct{}

func (eager) step(ev event, out *output) {
	if ev.kind == evRequest {
		out.enter()
	}
}
func (e eager) clone() machine            { return e }
func (eager) appendState(b []byte) []byte { return b }
func (eager) describe() []StateField      { return nil }
func newEager(id, n int) machine          { return eager{} }

// TestCheckFencedCatchesSharedFences: two holders with fence 1 write
// P0, P1, P0, and Check reports fenced safety broken, with the run.
func TestCheckFencedCatchesSharedFences(t *testing.T) {
	res := mustCheck(t, CheckConfig{Algorithm: RicartAgrawala, N: 2, Fenced: true, build: newEager})
	assert.Equal(t, Refuted, res.FencedSafe)
	assert.Equal(t, Refuted, res.Safe, "two were inside at once before the store broke")
	require.NotNil(t, res.Violation)
	assert.Equal(t, "fenced safety", res.Violation.Property)
	assert.Contains(t, res.Violation.Message, "after another holder's")
	t.Log(res.Violation.Trace)

	res = mustCheck(t, CheckConfig{Algorithm: RicartAgrawala, N: 2, Requests: 2, Fenced: true})
	assert.Equal(t, Holds, res.FencedSafe)
	assert.True(t, res.Safe == Holds && res.StarvationFree == Holds)
	res = mustCheck(t, CheckConfig{Algorithm: RicartAgrawala, N: 2})
	assert.Equal(t, Undecided, res.FencedSafe, "not checked")
	assert.False(t, res.Fenced)
}

// sharedEpochs is Ricart-Agrawala with the first rule for a new fence
// epoch: the next multiple of FenceEpoch, the same for every peer.
type sharedEpochs struct {
	*ricart
	due, fresh bool // a suspicion since the last entry; this hold starts an epoch
}

func (r *sharedEpochs) step(ev event, out *output) {
	if ev.kind == evSuspect {
		r.due = true
	}
	r.ricart.step(ev, out)
	if out.entered {
		r.fresh = r.due && slices.Contains(r.suspected, true)
		r.due = false
	}
}

func (r *sharedEpochs) nextFence(fence uint64) uint64 {
	if r.fresh {
		return (fence/FenceEpoch+1)*FenceEpoch + 1
	}
	return fence + 1
}

func (r *sharedEpochs) clone() machine {
	c := *r
	c.ricart = r.ricart.clone().(*ricart)
	return &c
}

func (r *sharedEpochs) appendState(b []byte) []byte {
	return appendBool(appendBool(r.ricart.appendState(b), r.due), r.fresh)
}

// TestCheckFencedSharedEpochsKeptApart: a machine whose fence rule
// starts one epoch number for every peer (the first rule this project
// had) let a falsely suspected holder and the peer that went in without
// it both take 2^32+1, and the store accepted P0, P1, P0. The driver now
// takes whatever a machine's rule gives up to the peer's own class
// (entryFence), so even that rule is fenced safe in the same
// configuration.
func TestCheckFencedSharedEpochsKeptApart(t *testing.T) {
	// Searches on the test's goroutine, no timing or memory measured:
	// it runs beside the other parallel tests once the sequential ones
	// are done.
	t.Parallel()
	skipRaceLight(t, "a quarter of a minute of CPU under -race")
	build := func(id, n int) machine {
		m, err := newRicart(id, n, &config{recovery: true})
		require.NoError(t, err)
		return &sharedEpochs{ricart: m.(*ricart)}
	}
	// Depth first without the graph: fenced safety is decided over the
	// same states (TestSafetyOnlyAgrees), at a fraction of the memory.
	cfg := CheckConfig{Algorithm: RicartAgrawala, N: 3, Options: []Option{WithRecovery()},
		Detector: Detector{Kind: DetectorImperfect, FalseSuspicions: 1}, Fenced: true, build: build, SafetyOnly: true}
	if *bigChecks {
		cfg.Faults = CheckFaults{Crash: true} // a million states: a minute under -race
	}
	res := mustCheck(t, cfg)
	assert.Equal(t, Holds, res.FencedSafe, "%v", res.Violation)
	assert.True(t, res.Complete)
}
