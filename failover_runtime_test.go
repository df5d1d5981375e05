package dmutex

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFailoverRuntimeSameCounts: while nobody fails, failover costs
// nothing: one entry at a time costs what closedForms says it costs
// without the option.
func TestFailoverRuntimeSameCounts(t *testing.T) {
	requireRecoverySameCounts(t, Centralized, nil)
}

// TestFailoverRuntimeCrash crashes the coordinator of a 4-peer cluster,
// idle or inside the critical section, waits until every survivor
// suspects it and the network is quiet, and checks the failover's
// messages (3 COORDINATOR, one of them to the crashed peer, and 2
// STATUS) and that the survivors go on entering, one after another, the
// new coordinator at no message and the others at 3 each, with fences
// above the crashed coordinator's and increasing.
func TestFailoverRuntimeCrash(t *testing.T) {
	const n, rounds = 4, 3
	for _, inside := range []bool{false, true} {
		t.Run("inside="+strconv.FormatBool(inside), func(t *testing.T) {
			c := recoveryCluster(t, Centralized, n)
			dead := c.Peer(coordinator)
			lockWithin(t, dead, time.Minute)
			deadFence := dead.Fence()
			if !inside {
				dead.Unlock()
			}
			waitQuiet(t, c)
			before := c.Stats()
			require.NoError(t, c.Network().Crash(coordinator))
			for id := 1; id < n; id++ {
				waitSuspected(t, c.Peer(id), []int{coordinator})
			}
			eventually(t, "the survivors report to peer 1", func() bool {
				return c.Stats().Sub(before).Messages == n-1+n-2
			})
			got := c.Stats().Sub(before)
			assert.Equal(t, map[string]uint64{"coordinator": n - 1, "status": n - 2}, nonNil(got.ByKind), "the failover")

			before = c.Stats()
			var last uint64
			for round := range rounds {
				for id := 1; id < n; id++ {
					p := c.Peer(id)
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					err := p.LockContext(ctx)
					cancel()
					require.NoError(t, err, "round %d peer %d", round, id)
					f := p.Fence()
					assert.Greater(t, f, max(last, deadFence), "round %d peer %d", round, id)
					last = f
					p.Unlock()
				}
			}
			got = c.Stats().Sub(before) // the last release was handed to the transport by Unlock
			others := uint64(rounds * (n - 2))
			assert.Equal(t, uint64(rounds*(n-1)), got.Entries)
			assert.Equal(t, map[string]uint64{"request": others, "grant": others, "release": others}, nonNil(got.ByKind))
		})
	}
}

// TestFailoverRuntimeHolderCrash crashes a holder that is not the
// coordinator: the coordinator, once it suspects it, takes the lock back,
// and every survivor enters around a guard, two callers each.
func TestFailoverRuntimeHolderCrash(t *testing.T) {
	const n, crashed, rounds = 4, 2, 10
	c := recoveryCluster(t, Centralized, n)
	lockWithin(t, c.Peer(crashed), time.Minute)
	require.NoError(t, c.Network().Crash(crashed))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var g guard
	errs := make(chan error, 2*n)
	callers := 0
	for id := range n {
		if id == crashed {
			continue
		}
		p := c.Peer(id)
		for range 2 {
			callers++
			go func() { errs <- guardedRounds(ctx, p, &g, rounds) }()
		}
	}
	for range callers {
		require.NoError(t, <-errs)
	}
	assert.Equal(t, callers*rounds, g.counter)
}

// TestFailoverRuntimeContention crashes the coordinator while the
// survivors contend, two callers each, around a guard: nobody overlaps,
// and every call enters.
func TestFailoverRuntimeContention(t *testing.T) {
	const n, rounds = 4, 20
	c := recoveryCluster(t, Centralized, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var g guard
	errs := make(chan error, 2*n)
	start := make(chan struct{})
	for id := 1; id < n; id++ {
		p := c.Peer(id)
		for range 2 {
			go func() {
				<-start
				errs <- guardedRounds(ctx, p, &g, rounds)
			}()
		}
	}
	close(start)
	require.NoError(t, c.Network().Crash(coordinator))
	for range 2 * (n - 1) {
		require.NoError(t, <-errs)
	}
	assert.Equal(t, 2*(n-1)*rounds, g.counter)
}
