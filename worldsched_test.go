package dmutex

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWorldDueIsWhatAppendDueLists walks seeded random runs, with crashes
// and a failure detector where the algorithm recovers, and checks at every
// state that NumDue and Due agree with AppendDue, that ApplyDue takes
// exactly what AppendDue lists, and that it refuses, changing nothing, a
// transition that is enabled but not due (a request, a fault).
func TestWorldDueIsWhatAppendDueLists(t *testing.T) {
	for _, alg := range Algorithms() {
		for _, d := range []Network{NetworkFIFO, NetworkUnordered} {
			t.Run(fmt.Sprintf("%v/%v", alg, d), func(t *testing.T) {
				var opts []Option
				if alg.Recovers() {
					opts = append(opts, WithRecovery())
				}
				w, err := NewWorld(alg, 4, WorldConfig{Network: d, Requests: 2}, opts...)
				require.NoError(t, err)
				if alg.Recovers() {
					w.f.detector = DetectorPerfect
				}
				rng := rand.New(rand.NewPCG(uint64(alg), uint64(d)))
				for step := 0; step < 300 && w.Err() == nil; step++ {
					due := w.AppendDue(nil)
					require.Equal(t, len(due), w.NumDue())
					for i, tr := range due {
						require.Equal(t, tr, w.Due(i))
						require.True(t, w.isDue(tr), "%v is listed but not due", tr)
					}
					for p := range w.N() {
						leave := Transition{Kind: TransLeave, Peer: p}
						assert.Equal(t, slices.Contains(due, leave), w.isDue(leave), "%v", leave)
						st := w.Peer(p)
						assert.Equal(t, st.Inside && !st.Crashed, w.isDue(leave), "%v", leave) // a peer that crashed inside never leaves
					}
					for _, m := range w.Messages() {
						tr := Transition{Kind: TransDeliver, Peer: m.Msg.To, Seq: m.Seq, Msg: m.Msg}
						assert.Equal(t, slices.ContainsFunc(due, func(u Transition) bool { return u.Kind == TransDeliver && u.Seq == m.Seq }), w.isDue(tr), "%v", tr)
					}
					for _, tr := range w.Transitions() {
						assert.Equal(t, slices.Contains(due, tr), w.isDue(tr), "%v", tr)
						if !slices.Contains(due, tr) {
							before := w.String()
							require.ErrorIs(t, w.ApplyDue(tr), ErrInvalidConfig, "%v is not due", tr)
							require.Equal(t, before, w.String())
						}
					}
					switch {
					case step == 40 && alg.Recovers():
						require.NoError(t, w.Crash(3))
					case len(due) > 0 && rng.IntN(4) > 0:
						err := w.ApplyDue(due[rng.IntN(len(due))])
						require.True(t, err == nil || errors.Is(err, ErrViolation), "step %d: %v", step, err)
					default:
						if trs := w.Transitions(); len(trs) > 0 {
							if tr := trs[rng.IntN(len(trs))]; tr.Kind == TransRequest || tr.Kind == TransTry || !w.isDue(tr) {
								_, err := w.Apply(tr)
								require.True(t, err == nil || errors.Is(err, ErrViolation), "%v: %v", tr, err)
							}
						}
					}
				}
			})
		}
	}
}

// TestWorldApplyDueIsOneStep checks that the transitions of one ApplyDue
// share a step number, as a lock-step round's do, and that an empty one
// is a step too.
func TestWorldApplyDueIsOneStep(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 3, WorldConfig{Network: NetworkUnordered})
	require.NoError(t, err)
	require.NoError(t, w.Request(0))
	require.NoError(t, w.ApplyDue(w.AppendDue(nil)...)) // step 1: both requests arrive
	require.NoError(t, w.ApplyDue())                    // step 2: nothing
	require.NoError(t, w.ApplyDue(w.AppendDue(nil)...)) // step 3: both replies arrive, P0 enters
	var steps []int
	for _, e := range w.Events() {
		steps = append(steps, e.Step)
	}
	assert.Equal(t, []int{0, 0, 0, 1, 1, 1, 1, 3, 3, 3}, steps, "%v", w.Events())
}
