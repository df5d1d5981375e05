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

// TestUnreachableOverGRPC starts, for every algorithm, three peers over
// gRPC with WithUnreachableAfter, stops one that peer 1's request needs
// (the coordinator or token holder, peer 0, or a member of Maekawa's
// voting set), and checks that peer 1's LockContext then ends with
// ErrPeerUnreachable naming it, while the transport reports the stopped
// peer unreachable and the live one reachable.
func TestUnreachableOverGRPC(t *testing.T) {
	for _, alg := range dmutex.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) { testUnreachableOverGRPC(t, alg) })
	}
}

func testUnreachableOverGRPC(t *testing.T, alg dmutex.Algorithm) {
	const n, req = 3, 1
	stop := 0
	if alg == dmutex.Maekawa {
		for _, v := range dmutex.VotingSets(n)[req] {
			if v != req {
				stop = v
			}
		}
	}
	live := 3 - req - stop
	ls, addrs := listeners(t, n)
	peers := make([]*dmutex.Peer, n)
	trs := make([]*Transport, n)
	for i := range n {
		tr, err := New(i, addrs, WithListener(ls[i]), Insecure(), fastRetry, quiet)
		require.NoError(t, err)
		p, err := dmutex.NewPeer(alg, i, n, tr, dmutex.WithUnreachableAfter(100*time.Millisecond))
		if err != nil {
			_ = tr.Close()
		}
		require.NoError(t, err)
		peers[i], trs[i] = p, tr
	}
	defer func() {
		for i, p := range peers {
			if i != stop {
				require.NoError(t, p.Close())
			}
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
	require.NoError(t, peers[stop].LockContext(ctx)) // the token, if any, stays there
	peers[stop].Unlock()
	if alg == dmutex.TokenRing {
		// The ring's token leaves on its idle lap after the release and
		// comes to rest at stop again. Until it has passed req, req could
		// take it on the way without needing stop; once stop's
		// predecessor has sent it on, it is bound for stop.
		pred := (stop + n - 1) % n
		for peers[pred].Stats().Messages == 0 {
			require.NoError(t, ctx.Err(), "the token never finished its lap")
			time.Sleep(time.Millisecond)
		}
	}

	// What stop sent before it closes must have arrived: Lamport's
	// release, still on its way when req asks, would carry a later stamp
	// from stop, and req would enter without needing stop.
	for j := range n {
		for j != stop && trs[stop].unacked(j) > 0 {
			require.NoError(t, ctx.Err(), "peer %d never acknowledged what peer %d sent", j, stop)
			time.Sleep(time.Millisecond)
		}
	}
	require.NoError(t, peers[stop].Close())
	err := peers[req].LockContext(ctx)
	require.True(t, errors.Is(err, dmutex.ErrPeerUnreachable), "%v", err)
	var ue *dmutex.UnreachableError
	require.True(t, errors.As(err, &ue))
	assert.Contains(t, ue.Peers, stop)
	ok, since := trs[req].Reachable(stop)
	assert.False(t, ok)
	assert.False(t, since.IsZero())
	ok, _ = trs[req].Reachable(live)
	assert.True(t, ok)
}
