package dmutex

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRuntimeFailureCells runs a few cells of the computed failure table
// (doctables_test.go) on a real Cluster of three peers: the fault first,
// then a fresh LockContext on a surviving peer, which must enter when the
// table says "always" and time out when it says "never".
func TestRuntimeFailureCells(t *testing.T) {
	if testing.Short() {
		t.Skip("model checks; not in -short")
	}
	small, _ := failureRows()
	rows := map[string]failureRow{}
	for _, r := range small {
		rows[r.key()] = r
	}
	crash := func(p int) func(t *testing.T, c *Cluster) {
		return func(t *testing.T, c *Cluster) { require.NoError(t, c.Network().Crash(p)) }
	}
	for _, tt := range []struct {
		row   string
		peer  int
		fault func(t *testing.T, c *Cluster)
	}{
		{"centralized | P2 crashes, idle", 1, crash(2)},
		{"centralized | P0 crashes, idle", 1, crash(0)},
		{"Ricart-Agrawala | P2 crashes, idle", 0, crash(2)},
		{"Maekawa | P0 crashes, idle", 2, crash(0)},
		{"Suzuki-Kasami | P2 crashes, idle", 1, crash(2)},
		{"Raymond | P2 crashes, idle", 1, crash(2)},
		{"Raymond | P0 crashes, idle", 1, crash(0)},
		{"token ring | P0 crashes, idle", 1, crash(0)},
		{"Roucairol-Carvalho | P2 crashes, idle", 1, crash(2)}, // 2 starts with no permission
		{"Roucairol-Carvalho | P0 crashes, idle", 1, crash(0)}, // 0 starts with every one
		{"Lodha-Kshemkalyani | P2 crashes, idle", 0, crash(2)},
		{"Agrawal-El Abbadi | P2 crashes, idle", 1, crash(2)}, // not on peer 1's path, 0-1
		{"Singhal dynamic | P2 crashes, idle", 1, crash(2)},   // R_2 = {0, 1}: nobody asks 2
		{"Singhal dynamic | P0 crashes, idle", 1, crash(0)},   // everybody else asks 0
	} {
		t.Run(tt.row, func(t *testing.T) {
			r, ok := rows[tt.row]
			require.True(t, ok, "no row %q", tt.row)
			want := strings.Fields(failureCells(t, r)[tt.peer])[0]
			require.Contains(t, []string{"always", "never"}, want, "a cell a single run can show")
			c, err := New(r.alg.alg, r.cfg.N, r.alg.opts...)
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close()) }()
			tt.fault(t, c)
			limit := 5 * time.Second
			if want == "never" {
				limit = 150 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			err = c.Peer(tt.peer).LockContext(ctx)
			if want == "always" {
				require.NoError(t, err, "the table says P%d always enters", tt.peer)
				c.Peer(tt.peer).Unlock()
				return
			}
			if err == nil {
				c.Peer(tt.peer).Unlock()
			}
			require.ErrorIs(t, err, context.DeadlineExceeded, "the table says P%d never enters", tt.peer)
		})
	}
}

// TestPartitionHealDoesNotRecoverLostRequests shows, on a running
// centralized cluster, the computed cell "healed later: P2 always /
// sometimes": a request lost to the partition is never resent, and a
// request made after the heal is served.
func TestPartitionHealDoesNotRecoverLostRequests(t *testing.T) {
	c := variant{alg: Centralized}.cluster(t, 4)
	require.NoError(t, c.Network().Partition([]int{0, 1}, []int{2, 3}))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	require.ErrorIs(t, c.Peer(2).LockContext(ctx), context.DeadlineExceeded)
	cancel()
	c.Network().Heal()
	ctx, cancel = context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.Peer(2).LockContext(ctx), context.DeadlineExceeded, "peer 2's request was lost and is never resent")
	lockWithin(t, c.Peer(3), 5*time.Second) // peer 3 asked after the heal
	c.Peer(3).Unlock()
	assert.NotZero(t, c.Network().Dropped())
}

// TestDelayAndReorderKeepSafetyAndLiveness runs the contention test over a
// network that delays every message by a seeded random time, and also
// reorders them for the algorithms that allow it.
func TestDelayAndReorderKeepSafetyAndLiveness(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, v := range variants() {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", v.name, seed), func(t *testing.T) {
				t.Parallel()
				f := Faults{Jitter: 300 * time.Microsecond, Reorder: !v.alg.NeedsFIFO(), Seed: seed}
				c, err := New(v.alg, 5, append(v.opts, WithFaults(f))...)
				require.NoError(t, err)
				defer func() { require.NoError(t, c.Close()) }()
				hammer(t, c, 2, 8, 60*time.Second)
			})
		}
	}
}

// TestCancellationStormWithDelays gives up thousands of LockContext calls
// at random short deadlines over a delaying network, then checks that
// every peer can still lock: no token or permission was lost.
func TestCancellationStormWithDelays(t *testing.T) {
	calls := 3000
	if testing.Short() {
		calls = 400
	}
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			c, err := New(v.alg, 4, append(v.opts, WithFaults(Faults{Delay: 20 * time.Microsecond, Jitter: 200 * time.Microsecond, Seed: 7}))...)
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close()) }()
			cancellationStorm(t, c, calls, 7)
			for _, p := range c.Peers() {
				lockWithin(t, p, 10*time.Second)
				p.Unlock()
			}
		})
	}
}

// TestCloseDuringContention closes a cluster while every peer has callers
// blocked in Lock and LockContext: each returns ErrClosed or panics with
// it, promptly, and goleak (TestMain) sees no goroutine left.
func TestCloseDuringContention(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			c, err := New(v.alg, 4, v.opts...)
			require.NoError(t, err)
			var wg sync.WaitGroup
			results := make(chan error, 32)
			for i := range 16 {
				p := c.Peer(i % 4)
				wg.Go(func() {
					defer func() {
						if r := recover(); r != nil {
							err, _ := r.(error)
							results <- fmt.Errorf("panic: %w", err)
						}
					}()
					for {
						if i%2 == 0 {
							if err := p.LockContext(context.Background()); err != nil {
								results <- err
								return
							}
						} else {
							p.Lock()
						}
						time.Sleep(50 * time.Microsecond)
						p.Unlock()
					}
				})
			}
			time.Sleep(20 * time.Millisecond)
			closed := make(chan error, 1)
			go func() { closed <- c.Close() }()
			select {
			case err := <-closed:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("Close did not return")
			}
			waitOrFail(t, &wg, 10*time.Second)
			close(results)
			n := 0
			for err := range results {
				n++
				require.ErrorIs(t, err, ErrClosed)
				if strings.HasPrefix(err.Error(), "panic: ") {
					require.True(t, errors.Is(err, ErrClosed))
				}
			}
			assert.Equal(t, 16, n, "every caller returned or panicked with ErrClosed")
		})
	}
}

func waitOrFail(t *testing.T, wg *sync.WaitGroup, limit time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("callers still blocked %v after Close", limit)
	}
}

func TestFaultsValidation(t *testing.T) {
	tests := []struct {
		name string
		alg  Algorithm
		f    Faults
		want string
	}{
		{"negative delay", RicartAgrawala, Faults{Delay: -1}, "Faults.Delay = -1ns"},
		{"negative jitter", RicartAgrawala, Faults{Jitter: -time.Second}, "Faults.Jitter = -1s"},
		{"loss above one", Centralized, Faults{Loss: 1.5}, "Faults.Loss = 1.5"},
		{"negative loss", Centralized, Faults{Loss: -0.1}, "Faults.Loss = -0.1"},
		{"reorder without jitter", Centralized, Faults{Reorder: true}, "needs a Jitter"},
		{"reorder without jitter for lamport", Lamport, Faults{Reorder: true}, "needs a Jitter"}, // the Faults' own check first
		{"reorder for lamport", Lamport, Faults{Jitter: time.Millisecond, Reorder: true}, "lamport is only correct over per-pair FIFO"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.alg, 3, WithFaults(tt.f))
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	for _, loss := range []float64{0, 1} {
		c, err := New(Centralized, 3, WithFaults(Faults{Loss: loss}))
		require.NoError(t, err, "Faults.Loss = %v, a bound of the range, is a probability", loss)
		require.NoError(t, c.Close())
	}
	nw := NewChanNetwork(3)
	defer nw.Close()
	require.ErrorIs(t, nw.SetFaults(Faults{Delay: -1}), ErrInvalidConfig)
	require.ErrorIs(t, nw.Crash(-1), ErrInvalidConfig)
	require.ErrorIs(t, nw.Crash(3), ErrInvalidConfig)
	require.ErrorContains(t, nw.Partition([]int{0, 1}, []int{1}), "peer 1 twice")
	require.ErrorContains(t, nw.Partition([]int{5}), "peer 5")
	require.ErrorContains(t, nw.Partition([]int{-1}), "peer -1")
	require.ErrorContains(t, nw.Partition([]int{3}), "peer 3, out of range [0, 3)")
}

// TestLossIsSeeded checks that a seeded loss rate loses the same messages
// in the same order: the numbers drawn depend on the seed only.
func TestLossIsSeeded(t *testing.T) {
	lost := func(seed uint64) []int {
		nw := NewChanNetwork(2)
		defer nw.Close()
		require.NoError(t, nw.SetFaults(Faults{Loss: 0.5, Seed: seed}))
		var got []int
		for i := range 64 {
			require.NoError(t, nw.Endpoint(0).Send(1, Message{Kind: KindRequest, From: 0, To: 1, TS: uint64(i)}))
		}
		for range 64 - int(nw.Dropped()) {
			got = append(got, int((<-nw.Endpoint(1).Recv()).TS))
		}
		return got
	}
	a, b := lost(42), lost(42)
	assert.Equal(t, a, b)
	assert.NotEqual(t, a, lost(43))
	assert.Greater(t, len(a), 10)
	assert.Less(t, len(a), 54)
}

// TestWithFaultsApplies: the faults given to New are the network's, here
// a loss of every message.
func TestWithFaultsApplies(t *testing.T) {
	c, err := New(Centralized, 2, WithFaults(Faults{Loss: 1}))
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Peer(1).LockContext(ctx) }() // its request to the coordinator is lost
	require.Eventually(t, func() bool { return c.Network().Dropped() > 0 }, time.Minute, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled, "nothing it sent arrived")
}

// TestChanNetworkCloseTwice: a network closes twice without harm, also
// with faults and a delayed message pending; one that never had faults
// has dropped nothing.
func TestChanNetworkCloseTwice(t *testing.T) {
	nw := NewChanNetwork(2)
	assert.Zero(t, nw.Dropped(), "no faults, nothing dropped")
	require.NoError(t, nw.Close())
	require.NoError(t, nw.Close())

	nw = NewChanNetwork(2)
	require.NoError(t, nw.SetFaults(Faults{Delay: time.Hour}))
	require.NoError(t, nw.Endpoint(0).Send(1, Message{Kind: KindRequest, From: 0, To: 1}))
	require.NoError(t, nw.Close())
	require.NoError(t, nw.Close(), "a second Close")
	assert.Zero(t, nw.Dropped())
}

// TestLossAtItsRate: a loss rate of 0.1 loses about a tenth of the
// messages, for a fixed seed exactly the same ones every run.
func TestLossAtItsRate(t *testing.T) {
	nw := NewChanNetwork(2)
	defer nw.Close()
	require.NoError(t, nw.SetFaults(Faults{Loss: 0.1, Seed: 1}))
	const sent = 1000
	for range sent {
		require.NoError(t, nw.Endpoint(0).Send(1, Message{Kind: KindRequest, From: 0, To: 1}))
	}
	lost := nw.Dropped()
	assert.True(t, lost > sent/20 && lost < sent/5, "%d of %d messages lost at a rate of 0.1", lost, sent)
}

// TestJitterDelaysAndReorders: a jitter alone delays a message (for this
// seed, by minutes: it is not delivered at once), and with Reorder a
// later message of the same pair may fall due before an earlier one,
// where without it each waits for the one before.
func TestJitterDelaysAndReorders(t *testing.T) {
	for _, reorder := range []bool{false, true} {
		nw := NewChanNetwork(2)
		require.NoError(t, nw.SetFaults(Faults{Jitter: time.Hour, Reorder: reorder, Seed: 3}))
		for range 2 {
			require.NoError(t, nw.Endpoint(0).Send(1, Message{Kind: KindRequest, From: 0, To: 1}))
		}
		assert.Zero(t, len(nw.Endpoint(1).Recv()), "jittered messages delivered at once")
		fs := nw.faults
		fs.mu.Lock()
		at := map[uint64]time.Time{}
		for _, d := range fs.pending {
			at[d.seq] = d.at
		}
		fs.mu.Unlock()
		require.Len(t, at, 2)
		if reorder {
			assert.True(t, at[2].Before(at[1]), "with Reorder the second message falls due first (seed 3)")
		} else {
			assert.False(t, at[2].Before(at[1]), "without Reorder the second waits for the first")
		}
		require.NoError(t, nw.Close())
	}
}
