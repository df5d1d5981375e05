package grpctransport

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

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

// TestReachableOverGRPC follows peer 0's view of three peers: 2 and 3
// never run, 1 comes up and then stops. Until a connection is first
// ready, Reachable reports since when New was called, the same instant
// for every such peer, however often gRPC retries the connection;
// ReachChanged signals each change of peer 1; ids outside the cluster,
// and peer 0's own, are reachable.
func TestReachableOverGRPC(t *testing.T) {
	const n = 4
	ls, addrs := listeners(t, n)
	for _, l := range ls[1:] {
		require.NoError(t, l.Close())
	}
	before := time.Now()
	tr, err := New(0, addrs, WithListener(ls[0]), Insecure(), fastRetry, quiet)
	require.NoError(t, err)
	after := time.Now()
	defer func() { require.NoError(t, tr.Close()) }()
	for _, id := range []int{-1, 0, n} {
		ok, since := tr.Reachable(id)
		assert.True(t, ok, "id %d", id)
		assert.True(t, since.IsZero(), "id %d", id)
	}

	// Once each peer's watcher has seen its connection's state at least
	// once, and waits for the next change:
	require.Eventually(t, func() bool { return parkedIn("grpctransport.(*Transport).watchReach.func1(", "select") == n-1 },
		30*time.Second, time.Millisecond, "the reachability watchers never came to wait")
	var downSince []time.Time
	for id := 1; id < n; id++ {
		ok, since := tr.Reachable(id)
		require.False(t, ok, "peer %d, which does not run", id)
		downSince = append(downSince, since)
	}
	assert.False(t, downSince[0].Before(before) || downSince[0].After(after), "down since %v, New ran from %v to %v", downSince[0], before, after)
	assert.Equal(t, downSince[0], downSince[1], "peers 1 and 2 down since")
	assert.Equal(t, downSince[0], downSince[2], "peers 1 and 3 down since")

	// reach waits, through ReachChanged, until Reachable(1) says want.
	reach := func(want bool) time.Time {
		t.Helper()
		timer := time.NewTimer(30 * time.Second)
		defer timer.Stop()
		for {
			ok, since := tr.Reachable(1)
			if ok == want {
				return since
			}
			select {
			case <-tr.ReachChanged():
			case <-timer.C:
				require.FailNow(t, "ReachChanged never signalled the change", "Reachable(1) stays %v", ok)
			}
		}
	}
	l, err := net.Listen("tcp", addrs[1])
	require.NoError(t, err)
	tr1, err := New(1, addrs, WithListener(l), Insecure(), fastRetry, quiet)
	require.NoError(t, err)
	assert.True(t, reach(true).IsZero(), "since, while reachable")
	stopped := time.Now()
	require.NoError(t, tr1.Close())
	since := reach(false)
	assert.False(t, since.Before(stopped), "down since %v, stopped at %v", since, stopped)
	ok, since := tr.Reachable(2)
	assert.False(t, ok)
	assert.Equal(t, downSince[1], since, "peer 2 down since")
}

// TestRefusedRestartUnreachableAtOnce has peer 0 reach a server at peer
// 1's address (a fakeLink, so the connection stays ready), and then
// refuse a restart of peer 1, played over raw streams. Under Insecure the
// raw hello alone proves nothing: peer 1 stays reachable and peer 0 goes
// on. Once peer 0's own stream to peer 1's address is answered by the new
// process, the restart is proven: from then on peer 1 is unreachable,
// without waiting for the ready connection to change.
func TestRefusedRestartUnreachableAtOnce(t *testing.T) {
	const n = 2
	ls, addrs := listeners(t, n)
	var epoch atomic.Uint64
	epoch.Store(77)
	serveFakeLink(t, ls[1], &epoch)
	tr, err := New(0, addrs, WithListener(ls[0]), Insecure(), fastRetry, quiet)
	require.NoError(t, err)
	defer func() { require.NoError(t, tr.Close()) }()
	require.Eventually(t, func() bool { ok, _ := tr.Reachable(1); return ok }, 30*time.Second, time.Millisecond,
		"peer 0 never reached peer 1's address")

	conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := helloOpener(t, conn, n)
	first, stop := context.WithCancel(ctx)
	require.NoError(t, open(first, 77))
	stop()
	err = open(ctx, 78)
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	ok, _ := tr.Reachable(1)
	assert.True(t, ok, "an unproven restart made peer 1 unreachable")
	require.NoError(t, tr.Err(), "an unproven restart made peer 0 give up")

	epoch.Store(78) // the fake ends peer 0's stream; the next is answered by process 78
	require.Eventually(t, func() bool { return tr.Err() != nil }, 30*time.Second, time.Millisecond)
	assert.ErrorContains(t, tr.Err(), "peer 1 restarted")
	ok, since := tr.Reachable(1)
	assert.False(t, ok, "a refused restart is reachable")
	assert.False(t, since.IsZero())
	assert.Equal(t, connectivity.Ready, tr.out[1].conn.GetState(), "the connection went down, so this proves nothing")
}
