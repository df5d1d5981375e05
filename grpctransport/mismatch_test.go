package grpctransport

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/dmutex/dmutex"
	"github.com/dmutex/dmutex/grpctransport/internal/wirepb"
	"github.com/dmutex/dmutex/internal/testpki"
)

// clusterPeers starts n peers of alg over Insecure transports that name
// the algorithm (WithCluster), peer i with fence floor floors[i] given to
// both the transport and the peer, logging into logs[i].
func clusterPeers(t *testing.T, alg dmutex.Algorithm, floors []uint64) ([]*dmutex.Peer, []*Transport, []*logBuffer, []string) {
	t.Helper()
	n := len(floors)
	ls, addrs := listeners(t, n)
	peers := make([]*dmutex.Peer, n)
	trs := make([]*Transport, n)
	logs := make([]*logBuffer, n)
	for i := range n {
		logs[i] = new(logBuffer)
		tr, err := New(i, addrs, WithListener(ls[i]), Insecure(), fastRetry, WithLogger(logs[i].logger()),
			WithCluster(alg, ""), WithFenceFloor(floors[i]))
		require.NoError(t, err)
		p, err := dmutex.NewPeer(alg, i, n, tr, dmutex.WithFenceFloor(floors[i]))
		if err != nil {
			_ = tr.Close()
		}
		require.NoError(t, err)
		peers[i], trs[i] = p, tr
		t.Cleanup(func() { require.NoError(t, p.Close()) })
	}
	return peers, trs, logs, addrs
}

// TestFloorsApartOverGRPC gives one peer a fence floor of 2^48+10 and the
// others 0, as a state file taken from a store with nanosecond fences
// would. Before, every LockContext timed out and only Stats().Refused
// showed anything. Now each pair refuses the other's stream at the hello,
// every transport gives up with an error naming both peers and both
// floors, and a LockContext that gives up returns it.
func TestFloorsApartOverGRPC(t *testing.T) {
	const high = 1<<48 + 10
	for _, alg := range []dmutex.Algorithm{dmutex.RicartAgrawala, dmutex.SuzukiKasami, dmutex.Centralized} {
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%v/n=%d", alg, n), func(t *testing.T) {
				floors := make([]uint64, n)
				floors[0] = high
				peers, trs, _, _ := clusterPeers(t, alg, floors)
				for i, tr := range trs {
					require.Eventually(t, func() bool { return tr.Err() != nil }, 20*time.Second, time.Millisecond, "peer %d never gave up", i)
					err := tr.Err()
					assert.ErrorContains(t, err, "fence floors too far apart")
					assert.ErrorContains(t, err, fmt.Sprintf("peer 0 was given floor %d", uint64(high)))
					assert.ErrorContains(t, err, "floor 0 (WithFenceFloor)")
				}
				for i, p := range peers {
					ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
					err := p.LockContext(ctx)
					cancel()
					if err == nil {
						p.Unlock() // a centralized coordinator or a token holder may enter alone
						continue
					}
					require.ErrorIs(t, err, context.DeadlineExceeded, "peer %d", i)
					assert.ErrorContains(t, err, "the transport gave up", "peer %d", i)
					assert.ErrorContains(t, err, fmt.Sprint(uint64(high)), "peer %d", i)
				}
			})
		}
	}
}

// TestFloorsWithinTheSpreadWork gives two peers floors MaxFloorSpread
// apart, the most allowed: the hellos pass, and both peers enter, the
// low one with a fence above the high one's floor.
func TestFloorsWithinTheSpreadWork(t *testing.T) {
	peers, trs, _, _ := clusterPeers(t, dmutex.RicartAgrawala, []uint64{dmutex.MaxFloorSpread + 5, 5})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, p := range []*dmutex.Peer{peers[0], peers[1], peers[0]} {
		require.NoError(t, p.LockContext(ctx))
		p.Unlock()
	}
	require.NoError(t, peers[1].LockContext(ctx))
	assert.Greater(t, peers[1].Fence(), uint64(dmutex.MaxFloorSpread+5))
	peers[1].Unlock()
	for _, tr := range trs {
		assert.NoError(t, tr.Err())
		assert.Zero(t, tr.Stats().Refused)
	}
}

// TestNewPeerRefusesAnotherFloor: the transport announces one floor and
// the peer was given another, so the check at the hello would be wrong.
func TestNewPeerRefusesAnotherFloor(t *testing.T) {
	ls, addrs := listeners(t, 1)
	tr, err := New(0, addrs, WithListener(ls[0]), Insecure(), quiet, WithFenceFloor(7))
	require.NoError(t, err)
	defer func() { require.NoError(t, tr.Close()) }()
	_, err = dmutex.NewPeer(dmutex.RicartAgrawala, 0, 1, tr)
	require.ErrorIs(t, err, dmutex.ErrInvalidConfig)
	assert.ErrorContains(t, err, "announces fence floor 7 to the other peers, but the peer was given 0")
	_, err = New(0, addrs, Insecure(), WithFenceFloor(dmutex.MaxFenceFloor+1))
	require.ErrorIs(t, err, dmutex.ErrInvalidConfig)
	assert.ErrorContains(t, err, "WithFenceFloor")
	var o options
	require.NoError(t, WithFenceFloor(dmutex.MaxFenceFloor).apply(&o), "the largest floor")
	assert.Equal(t, uint64(dmutex.MaxFenceFloor), o.floor)
}

// mismatchedPair starts peer 0 (Ricart-Agrawala) and peer 1 (Lamport),
// with opts, where peer 1 reaches peer 0 only through a proxy that, to
// begin with, closes every connection: peer 0's stream to peer 1 is
// refused, and peer 1's to peer 0 does not get through.
func mismatchedPair(t *testing.T, opts func(id int) []Option) ([2]*Transport, *proxy) {
	t.Helper()
	ls, addrs := listeners(t, 2)
	px := newProxy(t, addrs[0])
	px.refuse.Store(true)
	var trs [2]*Transport
	for i, a := range [][]string{addrs, {px.addr(), addrs[1]}} {
		alg := []dmutex.Algorithm{dmutex.RicartAgrawala, dmutex.Lamport}[i]
		tr, err := New(i, a, append([]Option{WithListener(ls[i]), fastRetry, quiet, WithCluster(alg, "")}, opts(i)...)...)
		require.NoError(t, err)
		trs[i] = tr
		t.Cleanup(func() { require.NoError(t, tr.Close()) })
	}
	return trs, px
}

// TestMismatchLingers makes the race of TestClusterMismatch certain:
// peer 0's own stream is refused, so it gives up and closes, before peer
// 1's stream got through. Peer 0's Close waits until that stream arrives
// and refuses it, so that peer 1 gives up too, and returns at once then;
// peer 1's Close does not wait, since peer 0's stream was answered.
// Closed again, peer 0 does not wait again.
func TestMismatchLingers(t *testing.T) {
	trs, px := mismatchedPair(t, insecureOpts)
	require.Eventually(t, func() bool { return trs[0].Err() != nil }, 20*time.Second, time.Millisecond)
	assert.NoError(t, trs[1].Err(), "peer 1 knows before its stream got through")
	closed := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		assert.NoError(t, trs[0].Close())
		closed <- time.Since(start)
	}()
	time.Sleep(50 * time.Millisecond) // peer 0 is in Close
	px.refuse.Store(false)
	require.Eventually(t, func() bool { return trs[1].Err() != nil }, 20*time.Second, time.Millisecond, "peer 1 never learnt")
	assert.ErrorContains(t, trs[1].Err(), "peer 0 refused peer 1: cluster mismatch")
	assert.Less(t, <-closed, lingerMax-100*time.Millisecond, "peer 0 waited past its refusal of peer 1")
	start := time.Now()
	require.NoError(t, trs[1].Close())
	require.NoError(t, trs[0].Close())
	assert.Less(t, time.Since(start), lingerMax/2, "peer 1 waited, though peer 0's stream was answered, or peer 0 waited again")
}

// TestMismatchLingersAtMostASecond: when the other peer's stream never
// comes, Close waits lingerMax, and a second Close does not wait again.
func TestMismatchLingersAtMostASecond(t *testing.T) {
	trs, _ := mismatchedPair(t, insecureOpts)
	require.Eventually(t, func() bool { return trs[0].Err() != nil }, 20*time.Second, time.Millisecond)
	start := time.Now()
	require.NoError(t, trs[0].Close())
	d := time.Since(start)
	assert.GreaterOrEqual(t, d, lingerMax-10*time.Millisecond)
	assert.Less(t, d, lingerMax+5*time.Second)
	start = time.Now()
	require.NoError(t, trs[0].Close())
	assert.Less(t, time.Since(start), lingerMax/2, "the second Close waited again")
}

// TestTLSMismatchIsFinal: with TLS the certificate proves the sender, so
// an incoming stream of another cluster is final, though this side's own
// stream never got through, and a side that gave up does not linger.
func TestTLSMismatchIsFinal(t *testing.T) {
	ca := testpki.New(t)
	trs, _ := mismatchedPair(t, func(id int) []Option { return []Option{WithTLS(ca.Config(t, PeerName(id)))} })
	require.Eventually(t, func() bool { return trs[1].Err() != nil }, 20*time.Second, time.Millisecond,
		"peer 1 refused peer 0's stream and did not give up")
	assert.ErrorContains(t, trs[1].Err(), "cluster mismatch: peer 0 runs ricart-agrawala")
	require.Eventually(t, func() bool { return trs[0].Err() != nil }, 20*time.Second, time.Millisecond)
	start := time.Now()
	require.NoError(t, trs[0].Close())
	require.NoError(t, trs[1].Close())
	assert.Less(t, time.Since(start), lingerMax/2, "a TLS peer lingered")
}

// TestForgedHelloLeavesTheClusterWorking has a raw gRPC client send peer
// 1 of a running Insecure cluster a hello claiming to be peer 0 with
// n = 99 and no algorithm, then one claiming a far fence floor. Before,
// peer 1 gave up on the first ("cluster mismatch") and dmutexpeer exited.
// Now each is refused, logged at warning level and counted, and the
// cluster goes on entering.
func TestForgedHelloLeavesTheClusterWorking(t *testing.T) {
	peers, trs, logs, addrs := clusterPeers(t, dmutex.RicartAgrawala, []uint64{0, 0, 0})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lockAll := func() {
		t.Helper()
		for _, p := range peers {
			require.NoError(t, p.LockContext(ctx))
			p.Unlock()
		}
	}
	lockAll()
	forged := []*wirepb.Hello{
		{From: 0, To: 1, N: 99, Epoch: 5, FirstSeq: 1},
		{From: 0, To: 1, N: 3, Epoch: 6, FirstSeq: 1, Algorithm: dmutex.RicartAgrawala.String(), FenceFloor: 1 << 60},
	}
	for k, h := range forged {
		b, err := proto.Marshal(&wirepb.Frame{Hello: h})
		require.NoError(t, err)
		err = refusal(t, addrs[1], nil, b)
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "forged hello %d: %v", k, err)
		assert.ErrorContains(t, err, "cluster mismatch")
	}
	for i, tr := range trs {
		assert.NoError(t, tr.Err(), "peer %d gave up", i)
	}
	assert.Equal(t, uint64(2), trs[1].Stats().Refused)
	assert.Contains(t, logs[1].String(), "level=WARN")
	assert.Contains(t, logs[1].String(), "claims another cluster")
	assert.NotContains(t, logs[1].String(), "level=ERROR")
	lockAll()
}

// TestForgedRestartLeavesTheClusterWorking has a raw gRPC client send
// peer 1 of a running Insecure cluster hellos of the right cluster that
// claim to be peer 0 with a new epoch, a restart of it. Before, peer 1
// gave up on the first ("peer 0 restarted") and held peer 0 unreachable
// for good. Now each is refused, logged at warning level and counted,
// peer 0 stays reachable, and the cluster goes on entering: the restart
// is final only once peer 1's own stream to peer 0's address sees it.
func TestForgedRestartLeavesTheClusterWorking(t *testing.T) {
	peers, trs, logs, addrs := clusterPeers(t, dmutex.RicartAgrawala, []uint64{0, 0, 0})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lockAll := func() {
		t.Helper()
		for _, p := range peers {
			require.NoError(t, p.LockContext(ctx))
			p.Unlock()
		}
	}
	lockAll()
	for k, first := range []uint64{1, 1, 1 << 40} {
		h := &wirepb.Hello{From: 0, To: 1, N: 3, Epoch: 1000 + uint64(k), FirstSeq: first, Algorithm: dmutex.RicartAgrawala.String()}
		b, err := proto.Marshal(&wirepb.Frame{Hello: h})
		require.NoError(t, err)
		err = refusal(t, addrs[1], nil, b)
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "forged hello %d: %v", k, err)
		assert.ErrorContains(t, err, "peer 0 restarted")
		lockAll()
	}
	for i, tr := range trs {
		assert.NoError(t, tr.Err(), "peer %d gave up", i)
	}
	ok, _ := trs[1].Reachable(0)
	assert.True(t, ok, "peer 1 holds peer 0 unreachable")
	assert.Equal(t, uint64(3), trs[1].Stats().Refused)
	assert.Contains(t, logs[1].String(), "level=WARN")
	assert.Contains(t, logs[1].String(), "claims a restart")
	assert.NotContains(t, logs[1].String(), "level=ERROR")
	lockAll()
}

// TestForgedFirstHelloRefused: under Insecure, once peer 0's own stream
// to peer 1's address was answered (here by a fakeLink of epoch 77), a
// first hello of peer 1 from another epoch is refused as an unproven
// restart, before it could take the place of the real process; the real
// process's hello is then accepted, and nobody gave up.
func TestForgedFirstHelloRefused(t *testing.T) {
	const n = 2
	var logs logBuffer
	tr, conn := peerZeroAndRawClient(t, n, WithLogger(logs.logger()))
	l, err := net.Listen("tcp", tr.addrs[1])
	require.NoError(t, err)
	var epoch atomic.Uint64
	epoch.Store(77)
	serveFakeLink(t, l, &epoch)
	require.Eventually(t, func() bool { return tr.out[1].peerEpoch.Load() == 77 }, 30*time.Second, time.Millisecond,
		"peer 0's stream to peer 1 never answered")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := helloOpener(t, conn, n)
	err = open(ctx, 66)
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	assert.ErrorContains(t, err, "peer 1 restarted")
	assert.Contains(t, logs.String(), "claims a restart")
	require.NoError(t, open(ctx, 77), "the real process's hello")
	require.NoError(t, tr.Err())
	ok, _ := tr.Reachable(1)
	assert.True(t, ok)
}
