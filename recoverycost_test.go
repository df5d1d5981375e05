package dmutex

import (
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMeasureRecoveryRicart checks the cost of Ricart-Agrawala's crash
// exclusion against what the protocol says, under saturation with E = T.
// A holder that crashes owes every survivor its deferred reply, and each
// has all the others' already: the next enters the moment it suspects the
// holder, Detect after the crash, and nothing is sent meanwhile. A waiting
// peer that crashes as peer 0 enters held the priority over the others,
// which wait for its reply: peer 0 leaves after E, sending its n-1
// deferred replies and its next request's n-1 copies, and the next
// survivor enters when the last of two things has come, peer 0's reply
// (E + T after the crash) and the suspicion (Detect).
func TestMeasureRecoveryRicart(t *testing.T) {
	for _, n := range []int{2, 3, 5, 8} {
		for _, detect := range []float64{0, 0.5, 2, 7} {
			t.Run("n="+strconv.Itoa(n)+"/detect="+strconv.FormatFloat(detect, 'g', -1, 64), func(t *testing.T) {
				rt := RecoveryTiming{CS: 1, Detect: detect, Victim: VictimHolder}
				c, err := MeasureRecovery(RicartAgrawala, n, rt, WithRecovery())
				if n == 2 {
					// The survivor of two suspects half the cluster: in
					// a minority, it may not enter without the other.
					require.ErrorIs(t, err, ErrBlocked)
					return
				}
				require.NoError(t, err)
				assert.Equal(t, RecoveryCost{Time: detect, Messages: 0, Crashed: 0, Next: 1 % n}, c)

				if n == 2 {
					return // nobody waits but the victim
				}
				rt.Victim = VictimWaiting
				c, err = MeasureRecovery(RicartAgrawala, n, rt, WithRecovery())
				require.NoError(t, err)
				assert.Equal(t, RecoveryCost{Time: math.Max(1+1, detect), Messages: uint64(2 * (n - 1)), Crashed: 1, Next: 2}, c)
			})
		}
	}
}

// TestMeasureRecoveryWithout checks that without WithRecovery the
// survivors never enter again, and that bad timings are refused.
func TestMeasureRecoveryWithout(t *testing.T) {
	_, err := MeasureRecovery(RicartAgrawala, 3, RecoveryTiming{CS: 1, Detect: 2})
	require.ErrorIs(t, err, ErrBlocked)
	assert.ErrorContains(t, err, "no survivor entered after peer 0 crashed")

	for _, rt := range []RecoveryTiming{{Detect: -1}, {Detect: math.NaN()}, {CS: -1}, {Jitter: 1}, {Warmup: -1}, {Victim: 9}} {
		_, err := MeasureRecovery(RicartAgrawala, 3, rt, WithRecovery())
		require.ErrorIs(t, err, ErrInvalidConfig, "%+v", rt)
	}
	for _, n := range []int{1, 9} {
		_, err := MeasureRecovery(RicartAgrawala, n, RecoveryTiming{}, WithRecovery())
		require.ErrorIs(t, err, ErrInvalidConfig, "n = %d", n)
	}
}

// TestMeasureRecoveryJitter checks that a jittered run replays and stays
// within the bounds the protocol gives: a holder's crash costs exactly
// Detect whatever the delays, since nothing is awaited but the suspicion.
func TestMeasureRecoveryJitter(t *testing.T) {
	rt := RecoveryTiming{CS: 1, Detect: 3, Jitter: 0.5, Seed: 9, Warmup: 20}
	a, err := MeasureRecovery(RicartAgrawala, 4, rt, WithRecovery())
	require.NoError(t, err)
	b, err := MeasureRecovery(RicartAgrawala, 4, rt, WithRecovery())
	require.NoError(t, err)
	assert.Equal(t, a, b)
	assert.Equal(t, 3.0, a.Time)
	assert.Zero(t, a.Messages)
}

func TestAlgorithmRecovers(t *testing.T) {
	for _, a := range Algorithms() {
		c, err := New(a, 2, WithRecovery(), WithUnreachableAfter(unreachableAfter))
		if a.Recovers() {
			require.NoError(t, err, "%v", a)
			require.NoError(t, c.Close())
		} else {
			require.ErrorIs(t, err, ErrInvalidConfig, "%v", a)
		}
	}
	assert.True(t, RicartAgrawala.Recovers())
	assert.Equal(t, "holder", VictimHolder.String())
	assert.Equal(t, "waiting", VictimWaiting.String())
}
