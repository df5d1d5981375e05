package grpctransport

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/dmutex/dmutex"
)

// holdLostAfter is the WithUnreachableAfter bound of the hold-lost tests
// over gRPC, and holdLostSlack what they allow beyond it: gRPC's
// detection of a closed connection, which is prompt, and the watcher's
// scheduling on a loaded machine under -race.
const (
	holdLostAfter = 200 * time.Millisecond
	holdLostSlack = 3 * time.Second
)

// holdLostPeers starts n peers of alg over gRPC with opts; peer i reaches
// peer j through a proxy when via(i, j), directly otherwise. It returns
// once every peer has reached every other, with the proxies by target
// (nil where none leads). The peers are closed at the test's end.
func holdLostPeers(t *testing.T, alg dmutex.Algorithm, n int, via func(i, j int) bool, opts ...dmutex.Option) ([]*dmutex.Peer, []*proxy) {
	t.Helper()
	ls, addrs := listeners(t, n)
	pxs := make([]*proxy, n)
	peers := make([]*dmutex.Peer, n)
	trs := make([]*Transport, n)
	for i := range n {
		as := slices.Clone(addrs)
		for j := range n {
			if via(i, j) {
				if pxs[j] == nil {
					pxs[j] = newProxy(t, addrs[j])
				}
				as[j] = pxs[j].addr()
			}
		}
		tr, err := New(i, as, WithListener(ls[i]), Insecure(), fastRetry, quiet)
		require.NoError(t, err)
		p, err := dmutex.NewPeer(alg, i, n, tr, opts...)
		if err != nil {
			_ = tr.Close()
		}
		require.NoError(t, err)
		peers[i], trs[i] = p, tr
		t.Cleanup(func() { require.NoError(t, p.Close()) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var eg errgroup.Group
	for _, tr := range trs {
		eg.Go(func() error { return tr.Barrier(ctx) })
	}
	require.NoError(t, eg.Wait())
	for i, tr := range trs {
		for j := range n {
			for ok, _ := tr.Reachable(j); !ok; ok, _ = tr.Reachable(j) {
				require.NoError(t, ctx.Err(), "peer %d never saw peer %d ready", i, j)
				time.Sleep(time.Millisecond)
			}
		}
	}
	// A peer unreachable at the start, for longer than the bound, is
	// suspected and then trusted again: wait until nobody suspects anyone.
	for _, p := range peers {
		for len(p.Suspected()) > 0 {
			require.NoError(t, ctx.Err(), "peer %d still suspects %v", p.ID(), p.Suspected())
			time.Sleep(time.Millisecond)
		}
	}
	return peers, pxs
}

// TestHoldLostOverGRPC cuts the holder's connections to the others: peer
// 1 reaches peers 0 and 2 through proxies, which close while it holds.
// HoldLost closes no earlier than WithUnreachableAfter after the cut, and
// within it plus the slack, and HoldErr names peers the hold depends on
// (every other peer with recovery, the coordinator for a centralized peer
// without it): those whose suspicion found it lost.
func TestHoldLostOverGRPC(t *testing.T) {
	tests := []struct {
		alg  dmutex.Algorithm
		opts []dmutex.Option
		want []int
	}{
		{dmutex.RicartAgrawala, []dmutex.Option{dmutex.WithRecovery()}, []int{0, 2}},
		{dmutex.Centralized, nil, []int{0}},
	}
	for _, tt := range tests {
		name := tt.alg.String()
		if tt.opts != nil {
			name += "/recovery"
		}
		t.Run(name, func(t *testing.T) {
			const n, holder = 3, 1
			opts := append([]dmutex.Option{dmutex.WithUnreachableAfter(holdLostAfter)}, tt.opts...)
			peers, pxs := holdLostPeers(t, tt.alg, n, func(i, j int) bool { return i == holder && j != holder }, opts...)
			p := peers[holder]
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(t, p.LockContext(ctx))
			lost := p.HoldLost()
			require.NoError(t, p.HoldErr())
			cut := time.Now()
			for _, px := range pxs {
				if px != nil {
					px.close()
				}
			}
			timer := time.NewTimer(holdLostAfter + holdLostSlack)
			defer timer.Stop()
			select {
			case <-lost:
			case <-timer.C:
				require.FailNow(t, "HoldLost did not close within the bound", "%v after the cut", time.Since(cut))
			}
			took := time.Since(cut)
			assert.GreaterOrEqual(t, took, holdLostAfter, "closed before the bound")
			err := p.HoldErr()
			require.ErrorIs(t, err, dmutex.ErrHoldLost)
			var ue *dmutex.UnreachableError
			require.ErrorAs(t, err, &ue)
			// The connections fail one by one, so the first suspicions
			// may name only some of the peers.
			assert.NotEmpty(t, ue.Peers)
			assert.Subset(t, tt.want, ue.Peers)
			p.Unlock()
			t.Logf("closed %v after the cut", took)
		})
	}
}

var soakEntries = flag.Int("grpctransport.soak", 2000,
	"entries per cluster size in TestHoldLostNeverOverGRPC (10,000 at n = 3 and 5 took 3.2 s and 9.3 s under -race)")

// TestHoldLostNeverOverGRPC runs entries over gRPC with no fault, with
// WithUnreachableAfter at holdLostAfter and recovery on, and every hold
// asks HoldLost: it never closes, and nobody is ever suspected. n = 3
// and n = 5, -grpctransport.soak entries each (2,000 by default, 300
// under -short; 10,000 passed at both sizes), from one goroutine per
// peer.
func TestHoldLostNeverOverGRPC(t *testing.T) {
	entries := *soakEntries
	if testing.Short() {
		entries = min(entries, 300)
	}
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			peers, _ := holdLostPeers(t, dmutex.RicartAgrawala, n, func(int, int) bool { return false },
				dmutex.WithRecovery(), dmutex.WithUnreachableAfter(holdLostAfter))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			var fired, held atomic.Int64
			var wg sync.WaitGroup
			errs := make([]error, n)
			start := time.Now()
			for i, p := range peers {
				wg.Go(func() {
					for range entries/n + min(1, max(0, entries%n-i)) {
						if err := p.LockContext(ctx); err != nil {
							errs[i] = err
							return
						}
						held.Add(1)
						select {
						case <-p.HoldLost():
							fired.Add(1)
						default:
						}
						p.Unlock()
					}
				})
			}
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "peer %d", i)
			}
			assert.EqualValues(t, entries, held.Load())
			assert.Zero(t, fired.Load(), "holds whose HoldLost closed with no fault")
			var msgs uint64
			for _, p := range peers {
				assert.Empty(t, p.Suspected(), "peer %d", p.ID())
				msgs += p.Stats().Messages
			}
			assert.NotZero(t, msgs)
			t.Logf("%d entries, %d messages in %v", entries, msgs, time.Since(start))
		})
	}
}
