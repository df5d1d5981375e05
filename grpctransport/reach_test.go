package grpctransport

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/dmutex/dmutex"
)

// TestUnreachableOverGRPC starts three Ricart-Agrawala peers over gRPC
// with WithUnreachableAfter, stops one, and checks that another's
// LockContext then ends with ErrPeerUnreachable naming it, while the
// transport reports the stopped peer unreachable and the live one
// reachable.
func TestUnreachableOverGRPC(t *testing.T) {
	const n = 3
	ls, addrs := listeners(t, n)
	peers := make([]*dmutex.Peer, n)
	trs := make([]*Transport, n)
	for i := range n {
		tr, err := New(i, addrs, WithListener(ls[i]), Insecure(), fastRetry, quiet)
		require.NoError(t, err)
		p, err := dmutex.NewPeer(dmutex.RicartAgrawala, i, n, tr, dmutex.WithUnreachableAfter(100*time.Millisecond))
		if err != nil {
			_ = tr.Close()
		}
		require.NoError(t, err)
		peers[i], trs[i] = p, tr
	}
	defer func() {
		for _, p := range peers[:2] {
			require.NoError(t, p.Close())
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var eg errgroup.Group
	for _, tr := range trs {
		eg.Go(func() error { return tr.Barrier(ctx) })
	}
	require.NoError(t, eg.Wait())
	// Every connection has carried the barrier, but a connection of the
	// other direction may still be on its way to ready.
	for i, tr := range trs {
		for j := range n {
			for ok, _ := tr.Reachable(j); !ok; ok, _ = tr.Reachable(j) {
				require.NoError(t, ctx.Err(), "peer %d never saw peer %d ready", i, j)
				time.Sleep(time.Millisecond)
			}
		}
	}
	require.NoError(t, peers[0].LockContext(ctx))
	peers[0].Unlock()

	require.NoError(t, peers[2].Close())
	err := peers[0].LockContext(ctx)
	require.True(t, errors.Is(err, dmutex.ErrPeerUnreachable), "%v", err)
	var ue *dmutex.UnreachableError
	require.True(t, errors.As(err, &ue))
	assert.Equal(t, []int{2}, ue.Peers)
	ok, since := trs[0].Reachable(2)
	assert.False(t, ok)
	assert.False(t, since.IsZero())
	ok, _ = trs[0].Reachable(1)
	assert.True(t, ok)
}
