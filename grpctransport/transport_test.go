package grpctransport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/dmutex/dmutex"
	"github.com/dmutex/dmutex/grpctransport/internal/wirepb"
	"github.com/dmutex/dmutex/internal/testpki"
)

// direct holds the channels that deliverDirect's transports deliver to.
var direct sync.Map // *Transport -> chan dmutex.Message

// deliverDirect has tr deliver through SetDeliver, as a dmutex.Peer has
// it, to a channel of size messages that receive reads.
func deliverDirect(t *testing.T, tr *Transport, size int) {
	ch := make(chan dmutex.Message, size)
	require.True(t, tr.SetDeliver(tr, func(m dmutex.Message) { ch <- m }))
	direct.Store(tr, ch)
	t.Cleanup(func() { direct.Delete(tr) })
}

// inbox returns where tr's messages arrive: Recv, or deliverDirect's
// channel.
func inbox(tr *Transport) <-chan dmutex.Message {
	if ch, ok := direct.Load(tr); ok {
		return ch.(chan dmutex.Message)
	}
	return tr.Recv()
}

// receive reads want messages from tr within limit.
func receive(t *testing.T, tr *Transport, want int, limit time.Duration) []dmutex.Message {
	t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	var got []dmutex.Message
	for len(got) < want {
		select {
		case m, ok := <-inbox(tr):
			require.True(t, ok, "Recv closed after %d of %d messages", len(got), want)
			got = append(got, m)
		case <-timer.C:
			require.FailNow(t, "timeout", "received %d of %d messages in %v", len(got), want, limit)
		}
	}
	return got
}

// requireInOrder checks that got holds, for each sender, the timestamps 1
// to count in order, each once.
func requireInOrder(t *testing.T, got []dmutex.Message, senders []int, count int) {
	t.Helper()
	next := map[int]uint64{}
	for _, m := range got {
		next[m.From]++
		require.Equal(t, next[m.From], m.TS, "message from peer %d out of order or repeated", m.From)
	}
	for _, s := range senders {
		require.Equal(t, uint64(count), next[s], "messages from peer %d", s)
	}
}

func msg(from, to int, ts uint64) dmutex.Message {
	return dmutex.Message{Kind: dmutex.KindRequest, From: from, To: to, TS: ts, Ref: ts + 1, Fence: 7}
}

// TestFIFOExactlyOnce sends from two peers to a third, which receives on
// Recv or, as a dmutex.Peer does, through SetDeliver.
func TestFIFOExactlyOnce(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(map[bool]string{false: "recv", true: "deliver"}[direct], func(t *testing.T) { testFIFOExactlyOnce(t, direct) })
	}
}

func testFIFOExactlyOnce(t *testing.T, direct bool) {
	const count = 500
	trs := startTransports(t, 3, insecureOpts)
	if direct {
		deliverDirect(t, trs[0], 2*count)
	}
	var wg sync.WaitGroup
	for _, from := range []int{1, 2} {
		wg.Go(func() {
			for ts := uint64(1); ts <= count; ts++ {
				assert.NoError(t, trs[from].Send(0, msg(from, 0, ts)))
			}
		})
	}
	wg.Wait()
	got := receive(t, trs[0], 2*count, 20*time.Second)
	requireInOrder(t, got, []int{1, 2}, count)
	assert.Equal(t, dmutex.Message{Kind: dmutex.KindRequest, From: 1, To: 0, TS: 1, Ref: 2, Fence: 7}, got[slicesIndexFrom(got, 1)])
	assert.Equal(t, uint64(2*count), trs[0].Stats().Delivered)
	assert.Equal(t, uint64(count), trs[1].Stats().Sent)
}

func slicesIndexFrom(ms []dmutex.Message, from int) int {
	for i, m := range ms {
		if m.From == from {
			return i
		}
	}
	return -1
}

func TestTokenRoundTrip(t *testing.T) {
	trs := startTransports(t, 3, insecureOpts)
	m := dmutex.Message{Kind: dmutex.KindToken, From: 2, To: 1, TS: 9, Token: &dmutex.Token{LN: []uint64{3, 0, 5}, Queue: []int{0, 1}}}
	require.NoError(t, trs[2].Send(1, m))
	got := receive(t, trs[1], 1, 10*time.Second)
	require.Equal(t, m, got[0])
}

func TestSendRefusesWhatAReceiverWould(t *testing.T) {
	trs := startTransports(t, 2, insecureOpts)
	tests := []struct {
		name string
		to   int
		m    dmutex.Message
	}{
		{"to itself", 0, msg(0, 0, 1)},
		{"to a peer out of range", 2, msg(0, 2, 1)},
		{"from another peer", 1, msg(1, 1, 1)},
		{"to another peer than addressed", 1, msg(0, 0, 1)},
		{"invalid kind", 1, dmutex.Message{Kind: 0, From: 0, To: 1}},
		{"token too large", 1, dmutex.Message{Kind: dmutex.KindToken, From: 0, To: 1, Token: &dmutex.Token{LN: []uint64{1, 2, 3}}}},
		{"token queues a stranger", 1, dmutex.Message{Kind: dmutex.KindToken, From: 0, To: 1, Token: &dmutex.Token{Queue: []int{4}}}},
		{"fence beyond the bound", 1, dmutex.Message{Kind: dmutex.KindRequest, From: 0, To: 1, Fence: MaxFence + 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Error(t, trs[0].Send(tt.to, tt.m))
		})
	}
	assert.Zero(t, trs[0].Stats().Sent)
}

func TestClose(t *testing.T) {
	ls, addrs := listeners(t, 2)
	tr, err := New(0, addrs, WithListener(ls[0]), Insecure())
	require.NoError(t, err)
	require.NoError(t, ls[1].Close())
	require.NoError(t, tr.Send(1, msg(0, 1, 1)), "a peer that is down gets its messages queued")
	require.NoError(t, tr.Close())
	require.NoError(t, tr.Close(), "second Close")
	_, ok := <-tr.Recv()
	require.False(t, ok, "Recv open after Close")
	require.ErrorIs(t, tr.Send(1, msg(0, 1, 2)), dmutex.ErrClosed)
	require.ErrorIs(t, tr.Barrier(context.Background()), dmutex.ErrClosed)
}

func TestNewBadInput(t *testing.T) {
	tooMany := make([]string, dmutex.MaxPeers+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("127.0.0.1:%d", 1+i)
	}
	tests := []struct {
		name  string
		id    int
		addrs []string
		opts  []Option
		want  string
	}{
		{"no addresses", 0, nil, []Option{Insecure()}, "0 addresses"},
		{"more addresses than MaxPeers", 0, tooMany, []Option{Insecure()}, fmt.Sprintf("%d addresses, want 1 to %d", dmutex.MaxPeers+1, dmutex.MaxPeers)},
		// MaxPeers addresses pass the first check, and id n is the
		// first out of range.
		{"id n of MaxPeers", dmutex.MaxPeers, tooMany[:dmutex.MaxPeers], []Option{Insecure()}, fmt.Sprintf("peer id %d out of range", dmutex.MaxPeers)},
		{"id out of range", 3, []string{"127.0.0.1:1", "127.0.0.1:2"}, []Option{Insecure()}, "peer id 3"},
		{"negative id", -1, []string{"127.0.0.1:1"}, []Option{Insecure()}, "peer id -1"},
		{"bad address", 0, []string{"127.0.0.1:1", "nowhere"}, []Option{Insecure()}, `"nowhere"`},
		{"no credentials", 0, []string{"127.0.0.1:1"}, nil, "no transport credentials"},
		{"both credentials", 0, []string{"127.0.0.1:1"}, []Option{Insecure(), WithTLS(testTLS(t))}, "both"},
		{"nil TLS", 0, []string{"127.0.0.1:1"}, []Option{WithTLS(nil)}, "WithTLS(nil)"},
		{"TLS without a certificate", 0, []string{"127.0.0.1:1"}, []Option{WithTLS(&tls.Config{})}, "no certificate"},
		{"bad backoff", 0, []string{"127.0.0.1:1"}, []Option{Insecure(), WithBackoff(time.Second, time.Millisecond)}, "WithBackoff(1s, 1ms)"},
		{"keepalive below gRPC's floor", 0, []string{"127.0.0.1:1"}, []Option{Insecure(), WithKeepalive(time.Second, time.Second)}, "WithKeepalive(1s, 1s)"},
		{"no keepalive timeout", 0, []string{"127.0.0.1:1"}, []Option{Insecure(), WithKeepalive(MinKeepalive, 0)}, "WithKeepalive(10s, 0s)"},
		{"tiny frames", 0, []string{"127.0.0.1:1"}, []Option{Insecure(), WithMaxFrameSize(10)}, "WithMaxFrameSize(10)"},
		{"zero option", 0, []string{"127.0.0.1:1"}, []Option{{}}, "zero Option"},
		{"unknown algorithm", 0, []string{"127.0.0.1:1"}, []Option{Insecure(), WithCluster(dmutex.Algorithm(99), "")}, "WithCluster(Algorithm(99))"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := New(tt.id, tt.addrs, tt.opts...)
			require.ErrorIs(t, err, dmutex.ErrInvalidConfig)
			require.Nil(t, tr)
			require.Contains(t, err.Error(), tt.want)
			require.True(t, strings.HasPrefix(err.Error(), "dmutex: "), err.Error())
		})
	}
}

// TestReconnectAfterBrokenConnection cuts the connection from peer 1 to
// peer 0 again and again while 1 sends: 0 must still get every message
// once, in order, on Recv or through SetDeliver.
func TestReconnectAfterBrokenConnection(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(map[bool]string{false: "recv", true: "deliver"}[direct], func(t *testing.T) { testReconnect(t, direct) })
	}
}

func testReconnect(t *testing.T, direct bool) {
	const count, cuts = 400, 5
	ls, addrs := listeners(t, 2)
	px := newProxy(t, addrs[0])
	peer1addrs := []string{px.addr(), addrs[1]}
	tr0, err := New(0, addrs, WithListener(ls[0]), Insecure(), fastRetry, quiet)
	require.NoError(t, err)
	defer func() { require.NoError(t, tr0.Close()) }()
	tr1, err := New(1, peer1addrs, WithListener(ls[1]), Insecure(), fastRetry, quiet)
	require.NoError(t, err)
	defer func() { require.NoError(t, tr1.Close()) }()
	if direct {
		deliverDirect(t, tr0, count)
	}

	var got []dmutex.Message
	for c := range cuts {
		first := uint64(c*count/cuts + 1)
		for ts := first; ts < first+count/cuts; ts++ {
			require.NoError(t, tr1.Send(0, msg(1, 0, ts)))
		}
		// Cut as soon as this batch flows, so that part of it is in flight.
		for len(got) == 0 || got[len(got)-1].TS < first {
			got = append(got, receive(t, tr0, 1, 10*time.Second)...)
		}
		px.cut()
	}
	got = append(got, receive(t, tr0, count-len(got), 20*time.Second)...)
	requireInOrder(t, got, []int{1}, count)
	assert.GreaterOrEqual(t, px.accepted(), cuts, "connections through the proxy")
	assert.Zero(t, tr0.Stats().Refused, "a broken stream counted as refused")
	t.Logf("%d connections, %d frames resent", px.accepted(), tr1.Stats().Resent)
}

// TestRestartedReceiver closes peer 1 and starts a new process of it on
// the same address while peer 0 has messages queued for it, under
// Insecure and under TLS. Peer 0's stream to the new process resumes at
// frame 11, past the ten frames the old process acknowledged, which the
// new process never received: it refuses the stream before any frame
// reaches it (a restarted peer has lost its protocol state, and a reply
// meant for the old process's request could let it in; see Err), and both
// give up naming the restart. The new process used to be handed some of
// the frames (under load, or under TLS, where nothing stopped peer 0's
// link, all of them) before peer 0 read the answer naming it.
func TestRestartedReceiver(t *testing.T) {
	ca := testpki.New(t)
	tests := []struct {
		name string
		opts func(id int) []Option
	}{
		{"insecure", insecureOpts},
		{"TLS", func(id int) []Option { return []Option{WithTLS(ca.Config(t, PeerName(id)))} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { testRestartedReceiver(t, tt.opts) })
	}
}

func testRestartedReceiver(t *testing.T, opts func(id int) []Option) {
	ls, addrs := listeners(t, 2)
	tr0, err := New(0, addrs, append([]Option{WithListener(ls[0]), fastRetry, quiet}, opts(0)...)...)
	require.NoError(t, err)
	defer func() { require.NoError(t, tr0.Close()) }()
	tr1, err := New(1, addrs, append([]Option{WithListener(ls[1]), fastRetry, quiet}, opts(1)...)...)
	require.NoError(t, err)

	for ts := uint64(1); ts <= 10; ts++ {
		require.NoError(t, tr0.Send(1, msg(0, 1, ts)))
	}
	requireInOrder(t, receive(t, tr1, 10, 10*time.Second), []int{0}, 10)
	require.Eventually(t, func() bool { return tr0.unacked(1) == 0 }, 10*time.Second, time.Millisecond)
	require.NoError(t, tr1.Close())

	for ts := uint64(11); ts <= 20; ts++ {
		require.NoError(t, tr0.Send(1, msg(0, 1, ts)), "send while peer 1 is down")
	}
	l, err := net.Listen("tcp", addrs[1])
	require.NoError(t, err)
	tr1, err = New(1, addrs, append([]Option{WithListener(l), fastRetry, quiet}, opts(1)...)...)
	require.NoError(t, err)
	defer func() { require.NoError(t, tr1.Close()) }()
	require.Eventually(t, func() bool { return tr0.Err() != nil }, 30*time.Second, time.Millisecond, "peer 0 never saw the restart")
	var restarted *restartError
	require.ErrorAs(t, tr0.Err(), &restarted)
	assert.Equal(t, restartError{from: 1, to: 0}, *restarted)
	ok, _ := tr0.Reachable(1)
	assert.False(t, ok, "the restarted receiver is reachable")
	require.Eventually(t, func() bool { return tr1.Err() != nil }, 30*time.Second, time.Millisecond, "the new process never gave up")
	require.ErrorContains(t, tr1.Err(), "peer 1 restarted")
	// The new process refused peer 0's stream, and counted it.
	require.Eventually(t, func() bool { return tr1.Stats().Refused >= 1 }, 30*time.Second, time.Millisecond)
	assert.Zero(t, tr1.Stats().Delivered, "frames meant for the old process reached the new one")
	select {
	case m := <-tr1.Recv():
		require.Failf(t, "a message meant for the old process reached the new one", "%v", m)
	default:
	}
	assert.Equal(t, 10, tr0.unacked(1), "the new process acknowledged frames it must not have received")
}

// TestRestartSeenOnOwnStream has peer 0 stream to peer 1's first process,
// which acknowledges the frames but never gets a stream through to peer 0
// (it reaches peer 0 only through a proxy that closes every connection);
// peer 1 then restarts on the same address, with the same certificate
// under TLS, and its new process, which reaches peer 0 directly, sends to
// it. Peer 0 has no sender process of peer 1
// on record, but its own stream was answered by the first process: the new
// one's first hello is of another process, a restart, and peer 0 refuses
// it, delivering none of its messages (a request of a process that has
// forgotten the grants of its predecessor), and both give up naming the
// restart. Under TLS the answer's epoch is proof, since the certificate
// proves who answered; peer 0 used to ignore it there and deliver the new
// process's messages.
func TestRestartSeenOnOwnStream(t *testing.T) {
	ca := testpki.New(t)
	tests := []struct {
		name string
		opts func(id int) []Option
	}{
		{"insecure", insecureOpts},
		{"TLS", func() func(id int) []Option {
			cfgs := []*tls.Config{ca.Config(t, PeerName(0)), ca.Config(t, PeerName(1))}
			return func(id int) []Option { return []Option{WithTLS(cfgs[id])} }
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { testRestartSeenOnOwnStream(t, tt.opts) })
	}
}

func testRestartSeenOnOwnStream(t *testing.T, opts func(id int) []Option) {
	ls, addrs := listeners(t, 2)
	tr0, err := New(0, addrs, append([]Option{WithListener(ls[0]), fastRetry, quiet}, opts(0)...)...)
	require.NoError(t, err)
	defer func() { require.NoError(t, tr0.Close()) }()
	px := newProxy(t, addrs[0])
	px.refuse.Store(true)
	tr1, err := New(1, []string{px.addr(), addrs[1]}, append([]Option{WithListener(ls[1]), fastRetry, quiet}, opts(1)...)...)
	require.NoError(t, err)
	for ts := uint64(1); ts <= 3; ts++ {
		require.NoError(t, tr0.Send(1, msg(0, 1, ts)))
	}
	requireInOrder(t, receive(t, tr1, 3, 10*time.Second), []int{0}, 3)
	require.Eventually(t, func() bool { return tr0.unacked(1) == 0 }, 10*time.Second, time.Millisecond)
	require.NoError(t, tr1.Close())
	require.Zero(t, tr0.Stats().Delivered, "peer 1's first process sent to peer 0")

	l, err := net.Listen("tcp", addrs[1])
	require.NoError(t, err)
	tr1, err = New(1, addrs, append([]Option{WithListener(l), fastRetry, quiet}, opts(1)...)...)
	require.NoError(t, err)
	defer func() { require.NoError(t, tr1.Close()) }()
	require.NoError(t, tr1.Send(0, msg(1, 0, 1)))
	// The new process's stream reaches peer 0 whatever else happens: its
	// link keeps dialing until a refusal of its own stream stops it.
	require.Eventually(t, func() bool { return tr0.Stats().Refused >= 1 || tr0.Stats().Delivered > 0 },
		30*time.Second, time.Millisecond, "the new process's stream never reached peer 0")
	select {
	case m := <-tr0.Recv():
		require.Failf(t, "a message of the restarted process reached peer 0", "%v", m)
	default:
	}
	assert.Zero(t, tr0.Stats().Delivered, "a message of the restarted process reached peer 0")
	require.Eventually(t, func() bool { return tr0.Err() != nil }, 30*time.Second, time.Millisecond, "peer 0 never saw the restart")
	var restarted *restartError
	require.ErrorAs(t, tr0.Err(), &restarted)
	assert.Equal(t, restartError{from: 1, to: 0}, *restarted)
	ok, _ := tr0.Reachable(1)
	assert.False(t, ok, "the restarted peer is reachable")
	require.Eventually(t, func() bool { return tr1.Err() != nil }, 30*time.Second, time.Millisecond, "the new process never gave up")
	require.ErrorContains(t, tr1.Err(), "peer 1 restarted")
	assert.Equal(t, 1, tr1.unacked(0), "peer 0 acknowledged the restarted process's message")
}

// TestRestartedSender closes peer 1 and starts a new process of it: peer 0,
// which had heard from the old process, refuses the new one's stream, and
// both give up with an error that says why, rather than let a peer that
// has lost its state (perhaps a token) back in. Under Insecure, peer 1
// gives up at the refusal of the stream it dialed, and peer 0 once its
// own stream to peer 1's address is answered by the new process (the
// epoch in the acknowledgement of its hello), which may come a little
// later.
func TestRestartedSender(t *testing.T) {
	ls, addrs := listeners(t, 2)
	tr0, err := New(0, addrs, WithListener(ls[0]), Insecure(), fastRetry, quiet)
	require.NoError(t, err)
	defer func() { require.NoError(t, tr0.Close()) }()
	tr1, err := New(1, addrs, WithListener(ls[1]), Insecure(), fastRetry, quiet)
	require.NoError(t, err)
	for ts := uint64(1); ts <= 5; ts++ {
		require.NoError(t, tr1.Send(0, msg(1, 0, ts)))
	}
	requireInOrder(t, receive(t, tr0, 5, 10*time.Second), []int{1}, 5)
	require.NoError(t, tr1.Close())

	l, err := net.Listen("tcp", addrs[1])
	require.NoError(t, err)
	tr1, err = New(1, addrs, WithListener(l), Insecure(), fastRetry, quiet)
	require.NoError(t, err)
	defer func() {
		// Peer 0's stream to the new process was answered (accepted):
		// Close does not wait for it (see linger).
		start := time.Now()
		require.NoError(t, tr1.Close())
		assert.Less(t, time.Since(start), lingerMax/2)
	}()
	require.NoError(t, tr1.Send(0, msg(1, 0, 1)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = tr1.Barrier(ctx)
	require.ErrorContains(t, err, "peer 1 restarted")
	require.ErrorContains(t, err, "peer 0 refused peer 1")
	require.Eventually(t, func() bool { return tr0.Err() != nil }, 30*time.Second, time.Millisecond, "peer 0 never saw the restart")
	require.ErrorContains(t, tr0.Err(), "peer 1 restarted")
	require.Equal(t, err, tr1.Err(), "Err after Barrier")
	// The refused process is no part of the cluster: unreachable for good,
	// though its connection is up, so that a failure detector built on
	// Reachable never trusts it again.
	require.Eventually(t, func() bool { return tr0.out[1].conn.GetState() == connectivity.Ready }, 30*time.Second, time.Millisecond,
		"peer 0's connection to the new process")
	ok, since := tr0.Reachable(1)
	assert.False(t, ok, "the refused restart is reachable")
	assert.False(t, since.IsZero())
	select {
	case m := <-tr0.Recv():
		require.Failf(t, "the restarted peer got a message through", "%v", m)
	default:
	}
	assert.Equal(t, uint64(5), tr0.Stats().Delivered)
}

// unacked returns how many frames for peer to wait for acknowledgement.
func (t *Transport) unacked(to int) int {
	o := t.out[to]
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.queue)
}

func TestBarrier(t *testing.T) {
	trs := startTransports(t, 3, insecureOpts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for round := range 3 {
		var wg sync.WaitGroup
		for _, tr := range trs {
			wg.Go(func() { assert.NoError(t, tr.Barrier(ctx), "round %d", round) })
		}
		wg.Wait()
	}

	// A barrier that one peer never reaches does not complete.
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	var wg sync.WaitGroup
	for _, tr := range trs[:2] {
		wg.Go(func() { assert.ErrorIs(t, tr.Barrier(short), context.DeadlineExceeded) })
	}
	wg.Wait()
}

// TestMalformedFrames opens streams to peer 0 that carry bad frames: each
// is closed with an error that is logged, and peer 0 keeps working. Each
// case claims to be its own peer, 2 or more, none of which runs, so that
// no case looks like a restart of another's sender.
func TestMalformedFrames(t *testing.T) {
	const n = 2 + 15  // peers 0 and 1, and one claimed by each case
	var epoch0 uint64 // peer 0's epoch, once it runs
	enc := func(f *wirepb.Frame) []byte {
		b, err := proto.Marshal(f)
		require.NoError(t, err)
		return b
	}
	// A case's streams all come from one process of its sender: a retry
	// repeats the epoch, and peer 0 drops what the first stream delivered.
	hello := func(from uint32, mod func(h *wirepb.Hello)) []byte {
		h := &wirepb.Hello{From: from, To: 0, N: uint32(n), Epoch: 100 + uint64(from), FirstSeq: 1}
		if mod != nil {
			mod(h)
		}
		return enc(&wirepb.Frame{Hello: h})
	}
	good := func(from uint32, seq uint64) *wirepb.Frame {
		return &wirepb.Frame{Seq: seq, Msg: toWire(msg(int(from), 0, seq))}
	}
	tests := []struct {
		name   string
		frames func(from uint32) [][]byte
		code   codes.Code
	}{
		{"not protobuf", func(uint32) [][]byte { return [][]byte{{0xff, 0xff, 0xff}} }, codes.Internal},
		{"oversized", func(from uint32) [][]byte {
			return [][]byte{hello(from, nil), enc(good(from, 1)), make([]byte, 4096)}
		}, codes.Internal},
		{"message before hello", func(from uint32) [][]byte { return [][]byte{enc(good(from, 1))} }, codes.InvalidArgument},
		{"hello from outside the membership", func(from uint32) [][]byte {
			return [][]byte{hello(from, func(h *wirepb.Hello) { h.From = 70 })}
		}, codes.InvalidArgument},
		{"hello from itself", func(from uint32) [][]byte { return [][]byte{hello(from, func(h *wirepb.Hello) { h.From = 0 })} }, codes.InvalidArgument},
		{"hello for another peer", func(from uint32) [][]byte { return [][]byte{hello(from, func(h *wirepb.Hello) { h.To = 1 })} }, codes.InvalidArgument},
		{"hello with another cluster size", func(from uint32) [][]byte {
			return [][]byte{hello(from, func(h *wirepb.Hello) { h.N = 4 })}
		}, codes.FailedPrecondition},
		{"hello with another algorithm", func(from uint32) [][]byte {
			return [][]byte{hello(from, func(h *wirepb.Hello) { h.Algorithm = "lamport" })}
		}, codes.FailedPrecondition},
		{"unknown kind", func(from uint32) [][]byte {
			f := good(from, 1)
			f.Msg.Kind = 99
			return [][]byte{hello(from, nil), enc(f)}
		}, codes.InvalidArgument},
		{"message claims another sender", func(from uint32) [][]byte {
			f := good(from, 1)
			f.Msg.From = 1
			return [][]byte{hello(from, nil), enc(f)}
		}, codes.InvalidArgument},
		{"token larger than the cluster", func(from uint32) [][]byte {
			f := good(from, 1)
			f.Msg.Token = &wirepb.Token{Ln: make([]uint64, 100)}
			return [][]byte{hello(from, nil), enc(f)}
		}, codes.InvalidArgument},
		{"fence beyond the bound", func(from uint32) [][]byte {
			f := good(from, 1)
			f.Msg.Fence = 1<<64 - 2
			return [][]byte{hello(from, nil), enc(f)}
		}, codes.InvalidArgument},
		{"both message and barrier", func(from uint32) [][]byte {
			f := good(from, 1)
			f.Barrier = 1
			return [][]byte{hello(from, nil), enc(f)}
		}, codes.InvalidArgument},
		{"acknowledgement of frames never sent", func(from uint32) [][]byte {
			f := good(from, 1)
			f.Ack, f.AckEpoch = 1000, epoch0
			return [][]byte{hello(from, nil), enc(f)}
		}, codes.InvalidArgument},
		{"gap in sequence numbers", func(from uint32) [][]byte {
			return [][]byte{hello(from, nil), enc(good(from, 1)), enc(good(from, 3))}
		}, codes.InvalidArgument},
	}

	require.Len(t, tests, n-2)
	var logs logBuffer
	ls, addrs := listeners(t, n)
	for _, l := range ls[2:] {
		require.NoError(t, l.Close()) // the raw streams claim to be these peers
	}
	tr0, err := New(0, addrs, WithListener(ls[0]), Insecure(), fastRetry, WithMaxFrameSize(1024), WithLogger(logs.logger()))
	require.NoError(t, err)
	defer func() { require.NoError(t, tr0.Close()) }()
	epoch0 = tr0.epoch
	tr1, err := New(1, addrs, WithListener(ls[1]), Insecure(), fastRetry, quiet)
	require.NoError(t, err)
	defer func() { require.NoError(t, tr1.Close()) }()
	for i, tt := range tests {
		from := uint32(2 + i)
		t.Run(tt.name, func(t *testing.T) {
			// The refusal is always sent, but on a loaded machine this
			// client's hang-up can reach the server before gRPC decodes
			// a frame it has already refused, and the handler then sees
			// a cancelled stream, not the bad frame, and counts nothing.
			// So a case may take a second stream to be counted.
			before := tr0.Stats().Refused
			counted := func() bool {
				for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					if tr0.Stats().Refused > before {
						return true
					}
				}
				return false
			}
			for try := 0; ; try++ {
				err := refusal(t, addrs[0], nil, tt.frames(from)...)
				require.Equal(t, tt.code, status.Code(err), "%v", err)
				if counted() {
					break
				}
				require.Less(t, try, 2, "the bad frame was never counted as refused")
			}
		})
	}
	assert.GreaterOrEqual(t, strings.Count(logs.String(), "level=ERROR")+strings.Count(logs.String(), "level=WARN"), len(tests), logs.String())

	// Peer 0 still serves peer 1, and the valid frames that came before
	// the bad ones were delivered, once each: those of the oversized and
	// gap cases, and nothing else from the raw streams.
	require.NoError(t, tr1.Send(0, msg(1, 0, 1)))
	var fromRaw []dmutex.Message
	for {
		m := receive(t, tr0, 1, 10*time.Second)[0]
		if m.From == 1 {
			assert.Equal(t, msg(1, 0, 1), m)
			break
		}
		fromRaw = append(fromRaw, m)
	}
	assert.Len(t, fromRaw, 2, "%v", fromRaw)
	for _, m := range fromRaw {
		assert.Equal(t, msg(m.From, 0, 1), m)
	}
	// Under Insecure, nothing proves who sent it: refused and logged, but
	// peer 0 goes on (see TestForgedHelloLeavesTheClusterWorking).
	require.NoError(t, tr0.Err(), "a hello of another cluster made peer 0 give up")
}

func TestKindsMatchTheWire(t *testing.T) {
	for k := dmutex.MessageKind(0); k < 255; k++ {
		name, ok := wirepb.Kind_name[int32(k)]
		if !k.Valid() {
			assert.True(t, !ok || k == 0, "wire kind %d (%s) that dmutex does not have", k, name)
			continue
		}
		assert.Equal(t, "KIND_"+strings.ToUpper(k.String()), name, "kind %d", k)
	}
}

// A proxy forwards TCP connections to a target and can cut them all, or
// drop what the clients send from some point on.
type proxy struct {
	l      net.Listener
	target string
	drop   atomic.Bool // drop the bytes from clients instead of forwarding them
	refuse atomic.Bool // close every new connection at once, as a partition does

	mu    sync.Mutex
	conns []net.Conn
	count int
	wg    sync.WaitGroup
}

// proxiedPair starts two insecure transports, closed at the test's end,
// where peer 1 reaches peer 0 through a proxy and peer 0 reaches peer 1
// directly; opts1 come last in peer 1's options (after fastRetry, so a
// WithBackoff there wins).
func proxiedPair(t *testing.T, opts1 ...Option) ([]*Transport, *proxy) {
	t.Helper()
	ls, addrs := listeners(t, 2)
	px := newProxy(t, addrs[0])
	var trs []*Transport
	for i, a := range [][]string{addrs, {px.addr(), addrs[1]}} {
		opts := []Option{WithListener(ls[i]), Insecure(), fastRetry, quiet}
		if i == 1 {
			opts = append(opts, opts1...)
		}
		tr, err := New(i, a, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, tr.Close()) })
		trs = append(trs, tr)
	}
	return trs, px
}

func newProxy(t *testing.T, target string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{l: l, target: target}
	p.wg.Go(p.run)
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) run() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			_ = c.Close()
			continue
		}
		d, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, d)
		p.count++
		p.mu.Unlock()
		p.wg.Go(func() { p.forward(d, c); _ = d.Close() })
		p.wg.Go(func() { _, _ = io.Copy(c, d); _ = c.Close() })
	}
}

// forward copies what the client c sends to d, until drop is set; from
// then on it reads and discards it.
func (p *proxy) forward(d, c net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		k, err := c.Read(buf)
		if k > 0 && !p.drop.Load() {
			if _, err := d.Write(buf[:k]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count
}

// cut closes every connection through the proxy.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *proxy) close() {
	_ = p.l.Close()
	p.cut()
	p.wg.Wait()
}

// TestDeliveredNeverBehindRecv reads Stats right after each message taken
// from Recv: Delivered must already count it. TestFIFOExactlyOnce once saw
// 999 of 1000 because the count came after the hand-over.
func TestDeliveredNeverBehindRecv(t *testing.T) {
	const count = 300
	trs := startTransports(t, 2, insecureOpts)
	for ts := uint64(1); ts <= count; ts++ {
		require.NoError(t, trs[1].Send(0, msg(1, 0, ts)))
		receive(t, trs[0], 1, 20*time.Second)
		require.GreaterOrEqual(t, trs[0].Stats().Delivered, ts, "after taking message %d from Recv", ts)
	}
}

// TestClusterMismatch starts peers that disagree on the algorithm or its
// options: each side's Barrier fails with an error naming both, instead
// of waiting for a cluster that can never work, even when the other side
// closes as soon as it knows.
func TestClusterMismatch(t *testing.T) {
	tests := []struct {
		name       string
		alg0, alg1 dmutex.Algorithm
		opt0, opt1 string
		want0      string
		want1      string
	}{
		{"algorithm", dmutex.RicartAgrawala, dmutex.Lamport, "", "", "peer 0 runs ricart-agrawala with n=2", "peer 1 runs lamport with n=2"},
		{"options", dmutex.RicartAgrawala, dmutex.RicartAgrawala, "", "implicit-replies",
			"peer 0 runs ricart-agrawala with n=2 and no options", `peer 1 runs ricart-agrawala with n=2 and options "implicit-replies"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			trs := startTransports(t, 2, func(id int) []Option {
				if id == 0 {
					return []Option{Insecure(), WithCluster(tt.alg0, tt.opt0)}
				}
				return []Option{Insecure(), WithCluster(tt.alg1, tt.opt1)}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for _, tr := range trs {
				wg.Go(func() {
					err := tr.Barrier(ctx)
					// Leave at once, as dmutexpeer does: the other side must
					// have learnt why from the refusal already.
					assert.NoError(t, tr.Close())
					assert.ErrorContains(t, err, "cluster mismatch")
					assert.ErrorContains(t, err, tt.want0)
					assert.ErrorContains(t, err, tt.want1)
				})
			}
			wg.Wait()
		})
	}
}

// TestAcksRideOnFrames turns separate acknowledgements off (their delay is
// an hour): the frames peer 0 sends back must carry the acknowledgement of
// what peer 1 sent, so that peer 1 forgets its frames. A request goes out
// on the stream from Send itself, a token from the link's goroutine; each
// way must carry it.
func TestAcksRideOnFrames(t *testing.T) {
	back := map[string]dmutex.Message{
		"request": msg(0, 1, 1),
		"token":   {Kind: dmutex.KindToken, From: 0, To: 1, TS: 1, Token: &dmutex.Token{LN: []uint64{1, 1}}},
	}
	for _, name := range []string{"request", "token"} {
		t.Run(name, func(t *testing.T) { testAcksRideOnFrames(t, back[name]) })
	}
}

func testAcksRideOnFrames(t *testing.T, back dmutex.Message) {
	trs := startWithoutSeparateAcks(t, 2)
	// A barrier opens both streams and has their hellos and markers
	// acknowledged, which would cover messages delivered meanwhile.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, tr := range trs {
		wg.Go(func() { assert.NoError(t, tr.Barrier(ctx)) })
	}
	wg.Wait()
	for ts := uint64(1); ts <= 5; ts++ {
		require.NoError(t, trs[1].Send(0, msg(1, 0, ts)))
	}
	requireInOrder(t, receive(t, trs[0], 5, 10*time.Second), []int{1}, 5)
	require.Equal(t, 5, trs[1].unacked(0), "acknowledged without a frame back")
	// Recv hands a message over before its reader records it as
	// delivered, so a frame sent at once may acknowledge one fewer.
	o := trs[1].out[0]
	o.mu.Lock()
	last := o.next - 1
	o.mu.Unlock()
	require.Eventually(t, func() bool { return trs[0].in[1].ackLast.Load() == last }, 10*time.Second, time.Millisecond)
	require.NoError(t, trs[0].Send(1, back))
	receive(t, trs[1], 1, 10*time.Second)
	require.Eventually(t, func() bool { return trs[1].unacked(0) == 0 }, 10*time.Second, time.Millisecond)
}

// TestReplyFromDeliverCarriesAck is TestAcksRideOnFrames for a peer that
// answers from SetDeliver's function, as a dmutex.Peer does: the reply
// sent while the request is being delivered must acknowledge it.
func TestReplyFromDeliverCarriesAck(t *testing.T) {
	trs := startWithoutSeparateAcks(t, 2)
	got := make(chan dmutex.Message, 1)
	require.True(t, trs[0].SetDeliver(trs[0], func(m dmutex.Message) {
		assert.NoError(t, trs[0].Send(1, msg(0, 1, m.TS)))
		got <- m
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, tr := range trs {
		wg.Go(func() { assert.NoError(t, tr.Barrier(ctx)) })
	}
	wg.Wait()
	require.NoError(t, trs[1].Send(0, msg(1, 0, 1)))
	requireInOrder(t, receive(t, trs[1], 1, 10*time.Second), []int{0}, 1)
	<-got
	require.Eventually(t, func() bool { return trs[1].unacked(0) == 0 }, 10*time.Second, time.Millisecond,
		"the reply did not acknowledge the request")
}

// TestBarrierThenClose has every peer pass a barrier and close at once,
// as dmutexpeer does at the end of a run, many times over. A marker's
// acknowledgement may ride on the receiver's own marker the other way, so
// its sender can pass and close before the receiver has recorded the
// marker: the receiver must not then wait for it for ever.
func TestBarrierThenClose(t *testing.T) {
	const n, rounds = 3, 40
	for round := range rounds {
		ls, addrs := listeners(t, n)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var wg sync.WaitGroup
		for i := range n {
			tr, err := New(i, addrs, WithListener(ls[i]), Insecure(), fastRetry, quiet)
			require.NoError(t, err)
			wg.Go(func() {
				assert.NoError(t, tr.Barrier(ctx), "round %d: peer %d", round, i)
				assert.NoError(t, tr.Barrier(ctx), "round %d: peer %d, second barrier", round, i)
				assert.NoError(t, tr.Close())
			})
		}
		wg.Wait()
		cancel()
		if t.Failed() {
			return
		}
	}
}

// TestSetDeliver checks when a transport switches to SetDeliver: once,
// and only before a message went on Recv; after a switch, Recv gets
// nothing.
func TestSetDeliver(t *testing.T) {
	trs := startTransports(t, 2, insecureOpts)
	deliverDirect(t, trs[0], 10)
	require.False(t, trs[0].SetDeliver(trs[0], func(dmutex.Message) {}), "a second SetDeliver")
	for _, self := range []dmutex.Transport{nil, trs[0], struct{ *Transport }{trs[1]}} {
		require.False(t, trs[1].SetDeliver(self, func(dmutex.Message) { t.Error("delivered to a SetDeliver whose self was not the transport") }), "self %T", self)
	}
	require.NoError(t, trs[1].Send(0, msg(1, 0, 1)))
	require.NoError(t, trs[0].Send(1, msg(0, 1, 1)))
	requireInOrder(t, receive(t, trs[0], 1, 10*time.Second), []int{1}, 1)
	require.Empty(t, trs[0].Recv(), "a message on Recv after SetDeliver")

	// Peer 1 has delivered a message on Recv: it cannot switch, and goes
	// on with Recv.
	requireInOrder(t, receive(t, trs[1], 1, 10*time.Second), []int{0}, 1)
	require.False(t, trs[1].SetDeliver(trs[1], func(dmutex.Message) { t.Error("delivered through SetDeliver after Recv") }))
	require.NoError(t, trs[0].Send(1, msg(0, 1, 2)))
	got := receive(t, trs[1], 1, 10*time.Second)
	assert.Equal(t, uint64(2), got[0].TS)
}

// TestSetDeliverAfterBarrier passes a Barrier, whose markers cross both
// ways, before either side chose how to deliver: a marker is not a
// message, so SetDeliver still succeeds. The marker of a second Barrier,
// after a message went to SetDeliver's function, does not reach it
// either; the message after it does.
func TestSetDeliverAfterBarrier(t *testing.T) {
	trs := startTransports(t, 2, insecureOpts)
	barrier := func() { barrierPair(t, trs) }
	barrier()
	deliverDirect(t, trs[0], 2)
	require.NoError(t, trs[1].Send(0, msg(1, 0, 1)))
	got := receive(t, trs[0], 1, 10*time.Second)
	barrier()
	require.NoError(t, trs[1].Send(0, msg(1, 0, 2)))
	got = append(got, receive(t, trs[0], 1, 10*time.Second)...)
	requireInOrder(t, got, []int{1}, 2)
	assert.Equal(t, uint64(2), trs[0].Stats().Delivered)
}

// countingStream counts the frames a stream handler receives.
type countingStream struct {
	grpc.ServerStream
	frames *atomic.Int64
}

func (s countingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.frames.Add(1)
	}
	return err
}

// TestOneStreamCarriesEachFrameOnce opens the streams with a barrier,
// then has four goroutines of peer 0 send requests and tokens to peer 1
// at once, so that Send writes some frames itself and the link's
// goroutine the others (tokens always), and counts on peer 1's server
// what came over the wire. On a stream that never breaks, each frame
// crosses once, in order: the hello, the first barrier's marker, every
// message, and the second barrier's marker, which shows that every frame
// before it has arrived. A frame written twice, or one written ahead of
// another, which the receiver refuses and the sender then resends on a
// new stream, shows as a count off, a second stream, or a refusal.
func TestOneStreamCarriesEachFrameOnce(t *testing.T) {
	const senders, each = 4, 150
	trs, streams, frames, barrier := countedPair(t)
	barrier()

	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for i := range each {
				m := msg(0, 1, uint64(g*1000+i+1))
				if i%3 == 2 {
					m.Kind, m.Token = dmutex.KindToken, &dmutex.Token{LN: []uint64{uint64(i), 1}, Queue: []int{1}}
				}
				assert.NoError(t, trs[0].Send(1, m))
			}
		})
	}
	wg.Wait()
	got := receive(t, trs[1], senders*each, 30*time.Second)
	next := map[uint64]uint64{}
	for _, m := range got {
		g := m.TS / 1000
		next[g]++
		require.Equal(t, g*1000+next[g], m.TS, "sender %d's messages out of order or repeated", g)
	}
	barrier()

	require.Zero(t, trs[1].Stats().Refused, "peer 1 refused a stream")
	require.Equal(t, int64(1), streams.Load(), "streams from peer 0")
	assert.Equal(t, int64(1+1+senders*each+1), frames.Load(), "frames on the stream: the hello, a marker, the messages, a marker")
	assert.Zero(t, trs[0].Stats().Resent)
}

// countedPair starts two transports and counts, on peer 1's server, the
// link streams and the frames that arrive on them; barrier has both pass
// a Barrier.
func countedPair(t *testing.T) (trs []*Transport, streams, frames *atomic.Int64, barrier func()) {
	streams, frames = new(atomic.Int64), new(atomic.Int64)
	trs = startTransports(t, 2, func(id int) []Option {
		if id != 1 {
			return []Option{Insecure()}
		}
		count := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if info.FullMethod != "/dmutex.wire.v1.Link/Connect" {
				return h(srv, ss)
			}
			streams.Add(1)
			return h(srv, countingStream{ss, frames})
		}
		return []Option{Insecure(), WithServerOptions(grpc.ChainStreamInterceptor(count))}
	})
	barrier = func() { barrierPair(t, trs) }
	return trs, streams, frames, barrier
}

// TestConcurrentSendsLeaveNothingBehind has two goroutines of peer 0
// send one message each at the same instant, round after round, and
// waits for both to arrive before the next round. One of the two Sends
// may find the other writing its frame directly and leave its own to the
// link's goroutine, whose wake-up can come while that write still goes
// on: the writer must then wake the link again, or the frame waits for a
// Send that never comes. Each frame must still cross once.
func TestConcurrentSendsLeaveNothingBehind(t *testing.T) {
	const rounds = 300
	trs, streams, frames, barrier := countedPair(t)
	barrier()
	for r := range rounds {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 2 {
			wg.Go(func() {
				<-start
				assert.NoError(t, trs[0].Send(1, msg(0, 1, uint64(2*r+g+1))))
			})
		}
		close(start)
		wg.Wait()
		got := receive(t, trs[1], 2, 30*time.Second)
		assert.ElementsMatch(t, []uint64{uint64(2*r + 1), uint64(2*r + 2)}, []uint64{got[0].TS, got[1].TS}, "round %d", r)
	}
	barrier()
	require.Equal(t, int64(1), streams.Load(), "streams from peer 0")
	assert.Equal(t, int64(1+1+2*rounds+1), frames.Load(), "frames on the stream: the hello, a marker, the messages, a marker")
}

// ackingServer is a peer's link server that answers each stream's hello
// with the acknowledgement ack and then keeps the stream open.
type ackingServer struct {
	wirepb.UnimplementedLinkServer
	ack     uint64
	streams chan struct{} // one value per stream whose hello arrived
}

func (s *ackingServer) Connect(stream wirepb.Link_ConnectServer) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	s.streams <- struct{}{}
	if err := stream.Send(&wirepb.Ack{Seq: s.ack}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// TestAckOfFramesNeverQueuedEndsTheStream has a fake peer 1 acknowledge
// frame 1 to a transport that has queued nothing for it: the sender must
// say so, drop that stream and open another, rather than believe the
// acknowledgement (which would cut frames from an empty queue).
func TestAckOfFramesNeverQueuedEndsTheStream(t *testing.T) {
	ls, addrs := listeners(t, 2)
	fake := &ackingServer{ack: 1, streams: make(chan struct{}, 16)}
	srv := grpc.NewServer()
	wirepb.RegisterLinkServer(srv, fake)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ls[1]) }()
	defer func() { srv.Stop(); <-served }()

	var logs logBuffer
	tr, err := New(0, addrs, WithListener(ls[0]), Insecure(), fastRetry, WithLogger(logs.logger()))
	require.NoError(t, err)
	defer func() { require.NoError(t, tr.Close()) }()
	for k := range 2 {
		select {
		case <-fake.streams:
		case <-time.After(30 * time.Second):
			require.FailNow(t, "no new stream", "stream %d never came: %s", k+1, logs.String())
		}
	}
	assert.Contains(t, logs.String(), "peer 1 acknowledged frame 1, but only 0 were queued")
	assert.Zero(t, tr.unacked(1))
}

// TestSeparateAcksWhenNothingGoesBack sends two batches from peer 0 to
// peer 1, which sends nothing back, so no frame can carry an
// acknowledgement: each batch must be acknowledged by a separate Ack
// after ackDelay, on the same stream, which stays open. The first batch
// arms the handler's timer and the second must arm it again.
func TestSeparateAcksWhenNothingGoesBack(t *testing.T) {
	trs, streams, _, barrier := countedPair(t)
	barrier()
	for b := range 2 {
		for i := range 10 {
			require.NoError(t, trs[0].Send(1, msg(0, 1, uint64(10*b+i+1))))
		}
		receive(t, trs[1], 10, 30*time.Second)
		require.Eventually(t, func() bool { return trs[0].unacked(1) == 0 }, 30*time.Second, time.Millisecond,
			"batch %d never acknowledged", b+1)
	}
	assert.Equal(t, int64(1), streams.Load(), "streams from peer 0")
	assert.Zero(t, trs[1].Stats().Refused)
}

// TestCloseFlushesTheLastAck turns timed acknowledgements off (their
// delay is an hour) and has peer 1, which sends nothing back, close after
// a message from peer 0 arrived: Close must send the acknowledgement of
// what was delivered, so that peer 0 forgets the message. A barrier opens
// the streams first, so that the message cannot be acknowledged with a
// hello.
func TestCloseFlushesTheLastAck(t *testing.T) {
	trs := startWithoutSeparateAcks(t, 2)
	barrierPair(t, trs)
	require.NoError(t, trs[0].Send(1, msg(0, 1, 1)))
	receive(t, trs[1], 1, 30*time.Second)
	require.Equal(t, 1, trs[0].unacked(1), "acknowledged before Close")
	require.NoError(t, trs[1].Close())
	require.Eventually(t, func() bool { return trs[0].unacked(1) == 0 }, 30*time.Second, time.Millisecond,
		"Close did not acknowledge what peer 1 delivered")
}

// TestStreamEndingBeforeHelloIsNotRefused opens a stream to peer 0 and
// closes its sending side at once, as a client that gives up does: the
// stream ends normally, and nothing is counted as refused.
func TestStreamEndingBeforeHelloIsNotRefused(t *testing.T) {
	var logs logBuffer
	tr, conn := peerZeroAndRawClient(t, 2, WithLogger(logs.logger()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
		"/dmutex.wire.v1.Link/Connect", grpc.ForceCodec(rawCodec{}))
	require.NoError(t, err)
	require.NoError(t, s.CloseSend())
	var b []byte
	require.ErrorIs(t, s.RecvMsg(&b), io.EOF, "the server ends the stream normally")
	assert.Zero(t, tr.Stats().Refused)
	assert.NotContains(t, logs.String(), "level=ERROR")
}

// TestTruncatedFrameIsABrokenStream: gRPC reports a stream that ended
// in the middle of a frame (its connection cut, or its sender cancelled
// it, after part of the frame came) as Internal "unexpected EOF". That is
// a broken stream, logged at Debug and not counted as refused; an
// Internal error of another kind (a frame that came whole and does not
// decode) is refused. TestReconnectAfterBrokenConnection met the first on
// CI once in several hundred runs, when a cut fell inside a frame.
func TestTruncatedFrameIsABrokenStream(t *testing.T) {
	var logs logBuffer
	tr, _ := peerZeroAndRawClient(t, 2, WithLogger(logs.logger()))
	truncated := status.Error(codes.Internal, io.ErrUnexpectedEOF.Error())
	require.Equal(t, truncated, tr.streamEnd(1, truncated), "the handler's result")
	assert.Zero(t, tr.Stats().Refused, "a truncated frame counted as refused")
	assert.NotContains(t, logs.String(), "level=ERROR")

	undecodable := status.Error(codes.Internal, "grpc: failed to unmarshal the received message: proto: cannot parse invalid wire-format data")
	require.Equal(t, undecodable, tr.streamEnd(1, undecodable))
	assert.Equal(t, uint64(1), tr.Stats().Refused, "an undecodable frame not counted as refused")
	assert.Contains(t, logs.String(), "level=ERROR")

	// Only gRPC's Internal status says a frame was cut: the same words
	// with another code, or in an error that is no status, are refused.
	other := status.Error(codes.Unknown, io.ErrUnexpectedEOF.Error())
	require.Equal(t, other, tr.streamEnd(1, other))
	assert.Equal(t, uint64(2), tr.Stats().Refused, "unexpected EOF under another code")
	plain := fmt.Errorf("read: %w", io.ErrUnexpectedEOF)
	require.Equal(t, plain, tr.streamEnd(1, plain))
	assert.Equal(t, uint64(3), tr.Stats().Refused, "an error that is no gRPC status")
}

// TestStreamResumesWhereDeliveryStopped plays a sender process, peer 1
// with one epoch, over raw streams to peer 0: after frame 1 was delivered
// on a first stream, a second stream of the same process may resume at
// frame 1 or 2, and its hello is acknowledged with 1, so the sender
// learns what the first stream delivered; one that resumes at frame 3
// leaves frame 2 out and is refused.
func TestStreamResumesWhereDeliveryStopped(t *testing.T) {
	const n = 3
	tr, conn := peerZeroAndRawClient(t, n)

	open := func(ctx context.Context, firstSeq uint64, frames ...*wirepb.Frame) func() (*wirepb.Ack, error) {
		return openStream(t, ctx, conn, &wirepb.Hello{From: 1, To: 0, N: n, Epoch: 77, FirstSeq: firstSeq}, frames...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	first, stop := context.WithCancel(ctx)
	next := open(first, 1, &wirepb.Frame{Seq: 1, Msg: toWire(msg(1, 0, 1))})
	for {
		a, err := next()
		require.NoError(t, err)
		if a.GetSeq() == 1 {
			break // frame 1 delivered and acknowledged
		}
	}
	stop()
	require.Equal(t, msg(1, 0, 1), receive(t, tr, 1, 30*time.Second)[0])

	_, err := open(ctx, 3)()
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "stream resumes at frame 3, but frame 2 is missing")

	for _, firstSeq := range []uint64{1, 2} {
		s, stop := context.WithCancel(ctx)
		a, err := open(s, firstSeq)()
		require.NoError(t, err, "a stream resuming at frame %d", firstSeq)
		assert.Equal(t, uint64(1), a.GetSeq(), "the hello's acknowledgement of a stream resuming at frame %d", firstSeq)
		stop()
	}

	// A gap inside a stream is refused too, and the sender's next stream
	// is served.
	next = open(ctx, 2, &wirepb.Frame{Seq: 3, Msg: toWire(msg(1, 0, 3))})
	for {
		_, err := next()
		if err != nil {
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "frame 3 after frame 1")
			break
		}
	}
	s, stop := context.WithCancel(ctx)
	defer stop()
	a, err := open(s, 2)()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), a.GetSeq())
	assert.Equal(t, uint64(2), tr.Stats().Refused)
}

// openStream starts a raw Link.Connect stream on conn, sends the hello and
// the frames, and returns a function that reads the next Ack.
func openStream(t *testing.T, ctx context.Context, conn *grpc.ClientConn, hello *wirepb.Hello, frames ...*wirepb.Frame) func() (*wirepb.Ack, error) {
	t.Helper()
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
		"/dmutex.wire.v1.Link/Connect", grpc.ForceCodec(rawCodec{}))
	require.NoError(t, err)
	for _, f := range append([]*wirepb.Frame{{Hello: hello}}, frames...) {
		b, err := proto.Marshal(f)
		require.NoError(t, err)
		require.NoError(t, s.SendMsg(&b))
	}
	return func() (*wirepb.Ack, error) {
		var b []byte
		if err := s.RecvMsg(&b); err != nil {
			return nil, err
		}
		a := new(wirepb.Ack)
		require.NoError(t, proto.Unmarshal(b, a))
		return a, nil
	}
}

// TestAckOfAnotherEpochIgnored queues a message for peer 2, which is
// down, and has a raw stream of peer 2 carry an acknowledgement of it
// stamped with another epoch than peer 0's: it was meant for an earlier
// process of peer 0, and must not cut the new process's queue.
func TestAckOfAnotherEpochIgnored(t *testing.T) {
	const n = 3
	tr, conn := peerZeroAndRawClient(t, n)
	require.NoError(t, tr.Send(2, msg(0, 2, 1)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	openStream(t, ctx, conn, &wirepb.Hello{From: 2, To: 0, N: n, Epoch: 88, FirstSeq: 1},
		&wirepb.Frame{Seq: 1, Msg: toWire(msg(2, 0, 1)), Ack: 1, AckEpoch: tr.epoch + 1},
		&wirepb.Frame{Seq: 2, Msg: toWire(msg(2, 0, 2)), Ack: 1, AckEpoch: tr.epoch - 1})
	receive(t, tr, 2, 30*time.Second) // both acknowledgements were read
	assert.Equal(t, 1, tr.unacked(2))
}

// TestOptionBounds holds each option's check to its boundary: the first
// value refused, with its name in the error, and the last accepted, which
// New then keeps.
func TestOptionBounds(t *testing.T) {
	addr := []string{"127.0.0.1:1"}
	noRoots := testTLS(t)
	noRoots.RootCAs = nil
	refused := []struct {
		name string
		opt  Option
		want string
	}{
		{"TLS without RootCAs", WithTLS(noRoots), "no RootCAs"},
		{"nil listener", WithListener(nil), "WithListener(nil)"},
		{"zero first backoff", WithBackoff(0, time.Second), "WithBackoff(0s, 1s)"},
		{"keepalive just below the floor", WithKeepalive(MinKeepalive-time.Nanosecond, time.Second), "WithKeepalive(9.999999999s, 1s)"},
		{"frames of 63 bytes", WithMaxFrameSize(63), "WithMaxFrameSize(63)"},
		{"the algorithm ParseAlgorithm returns with its error", WithCluster(dmutex.Algorithm(-1), ""), "WithCluster(Algorithm(-1))"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			opts := []Option{tt.opt}
			if tt.name != "TLS without RootCAs" {
				opts = append(opts, Insecure())
			}
			tr, err := New(0, addr, opts...)
			require.Nil(t, tr)
			require.ErrorIs(t, err, dmutex.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.want)
		})
	}

	ls, _ := listeners(t, 1)
	var logs logBuffer
	tr, err := New(0, addr, Insecure(), WithListener(ls[0]), WithLogger(logs.logger()),
		WithBackoff(time.Second, time.Second), WithKeepalive(MinKeepalive, time.Nanosecond),
		WithMaxFrameSize(64), WithCluster(dmutex.Maekawa, "sets"))
	require.NoError(t, err, "each option at its last accepted value")
	defer func() { require.NoError(t, tr.Close()) }()
	o := tr.opt
	assert.True(t, o.insecure)
	assert.Equal(t, ls[0].Addr(), tr.Addr(), "WithListener's listener")
	assert.Equal(t, [2]time.Duration{time.Second, time.Second}, [2]time.Duration{o.minBackoff, o.maxBackoff})
	assert.Equal(t, [2]time.Duration{MinKeepalive, time.Nanosecond}, [2]time.Duration{o.keepalive, o.keepaliveTimeout})
	assert.Equal(t, 64, o.maxFrame)
	assert.Equal(t, [2]string{dmutex.Maekawa.String(), "sets"}, [2]string{o.alg, o.algOptions})
	tr.log.Info("hello")
	assert.Contains(t, logs.String(), "hello", "WithLogger's logger")
}

// peerZeroAndRawClient starts peer 0 of n on a free loopback port, the
// others' ports closed, with opts after the tests' usual ones, and a raw
// insecure client connection to it, for a test that plays another peer
// by hand. Both are closed when the test ends, the connection first.
func peerZeroAndRawClient(t *testing.T, n int, opts ...Option) (*Transport, *grpc.ClientConn) {
	t.Helper()
	ls, addrs := listeners(t, n)
	for _, l := range ls[1:] {
		require.NoError(t, l.Close())
	}
	tr, err := New(0, addrs, append([]Option{WithListener(ls[0]), Insecure(), fastRetry, quiet}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close()) })
	conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return tr, conn
}

// startWithoutSeparateAcks starts n transports whose separate
// acknowledgements wait an hour, so that only acknowledgements riding on
// frames, hellos or Close reach the senders.
func startWithoutSeparateAcks(t *testing.T, n int) []*Transport {
	t.Helper()
	d := ackDelay
	ackDelay = time.Hour
	defer func() { ackDelay = d }()
	return startTransports(t, n, insecureOpts)
}

// barrierPair passes Barrier on both of two transports at once, with a
// generous deadline: it opens both streams and has their hellos
// acknowledged.
func barrierPair(t *testing.T, trs []*Transport) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- trs[1].Barrier(ctx) }()
	require.NoError(t, trs[0].Barrier(ctx))
	require.NoError(t, <-done)
}

// helloOpener returns a function that opens a stream to peer 0 over conn
// as peer 1 of n, with epoch, and returns what its hello got back.
func helloOpener(t *testing.T, conn *grpc.ClientConn, n uint32) func(ctx context.Context, epoch uint64) error {
	return func(ctx context.Context, epoch uint64) error {
		_, err := openStream(t, ctx, conn, &wirepb.Hello{From: 1, To: 0, N: n, Epoch: epoch, FirstSeq: 1})()
		return err
	}
}

// TestEveryRestartRefused plays three processes of peer 1 over raw
// streams to peer 0: the first is served, and the second and the third,
// restarts of it, are each refused. The refusal of the second must leave
// peer 1's record free for the third's hello, and for Close.
func TestEveryRestartRefused(t *testing.T) {
	const n = 2
	tr, conn := peerZeroAndRawClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := helloOpener(t, conn, n)

	first, stop := context.WithCancel(ctx)
	require.NoError(t, open(first, 77), "the first process's hello is acknowledged")
	stop()
	for _, epoch := range []uint64{78, 79} {
		err := open(ctx, epoch)
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "process %d: %v", epoch, err)
		assert.Contains(t, status.Convert(err).Message(), "peer 1 restarted")
	}
	assert.Equal(t, uint64(2), tr.Stats().Refused)
}

// TestResumedFirstStreamRefused plays peer 1 over a raw stream to a new
// peer 0 whose first hello from peer 1's process resumes at frame 11: an
// earlier process of peer 0 acknowledged the first ten, so this one is a
// restart. The stream is refused with the restart named, before its
// frames are delivered. Under Insecure nothing proves the hello, so peer
// 0 warns and goes on, and a hello of the same process that starts at
// frame 1 is still served; with TLS the certificate proves it, and peer 0
// gives up.
func TestResumedFirstStreamRefused(t *testing.T) {
	const n = 2
	ca := testpki.New(t)
	tests := []struct {
		name  string
		opts  []Option
		creds credentials.TransportCredentials
	}{
		{"insecure", []Option{Insecure()}, nil},
		{"TLS", []Option{WithTLS(ca.Config(t, PeerName(0)))}, func() credentials.TransportCredentials {
			cfg := ca.Config(t, PeerName(1))
			cfg.ServerName = PeerName(0)
			return credentials.NewTLS(cfg)
		}()},
	}
	enc := func(f *wirepb.Frame) []byte {
		b, err := proto.Marshal(f)
		require.NoError(t, err)
		return b
	}
	hello := func(first uint64) []byte {
		return enc(&wirepb.Frame{Hello: &wirepb.Hello{From: 1, To: 0, N: n, Epoch: 77, FirstSeq: first}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs logBuffer
			ls, addrs := listeners(t, n)
			require.NoError(t, ls[1].Close())
			tr, err := New(0, addrs, append([]Option{WithListener(ls[0]), fastRetry, WithLogger(logs.logger())}, tt.opts...)...)
			require.NoError(t, err)
			defer func() { require.NoError(t, tr.Close()) }()

			err = refusal(t, addrs[0], tt.creds, hello(11),
				enc(&wirepb.Frame{Seq: 11, Msg: toWire(msg(1, 0, 11))}), enc(&wirepb.Frame{Seq: 12, Msg: toWire(msg(1, 0, 12))}))
			require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
			// The exact words a sender takes for the restart of the peer
			// it dialed (restartRefusal).
			assert.Equal(t, (&restartError{from: 0, to: 1}).Error(), status.Convert(err).Message())
			assert.Equal(t, uint64(1), tr.Stats().Refused)
			assert.Zero(t, tr.Stats().Delivered)
			select {
			case m := <-tr.Recv():
				require.Failf(t, "a frame of the refused stream was delivered", "%v", m)
			default:
			}
			ok, _ := tr.Reachable(1)
			assert.False(t, ok, "peer 1 never ran")
			assert.False(t, tr.isGone(1), "peer 1 did not restart: peer 0 did")

			if tt.creds == nil {
				require.NoError(t, tr.Err())
				assert.Contains(t, logs.String(), "level=WARN")
				assert.Contains(t, logs.String(), "resumes past frames this process never received")
				assert.NotContains(t, logs.String(), "level=ERROR")
				assert.True(t, accepted(t, addrs[0], nil, hello(1)), "the same process's hello from frame 1, after the refusal")
				require.NoError(t, tr.Err())
				return
			}
			var restarted *restartError
			require.ErrorAs(t, tr.Err(), &restarted)
			assert.Equal(t, restartError{from: 0, to: 1}, *restarted)
			assert.Contains(t, logs.String(), "level=ERROR")
			assert.Contains(t, logs.String(), "stream refused")
		})
	}
}

// TestRefusalNamingARestart has a fake peer 1 refuse every stream of peer
// 0 with a status: only FailedPrecondition with the words of peer 1's own
// restart (what a restarted receiver answers a stream that resumes past
// frames it never received) makes peer 0 give up on a restart, holding
// peer 1 unreachable for good, as when the answer to its hello names a
// new process; the same words under another code are a broken link, and
// the restart of peer 0 that peer 1 claims is a refusal like any other.
func TestRefusalNamingARestart(t *testing.T) {
	tests := []struct {
		name    string
		refusal error
		gone    bool
		want    string // in Err; "" if peer 0 must not give up
	}{
		{"peer 1 restarted", status.Error(codes.FailedPrecondition, (&restartError{from: 1, to: 0}).Error()), true,
			(&restartError{from: 1, to: 0}).Error()},
		{"peer 0 restarted", status.Error(codes.FailedPrecondition, (&restartError{from: 0, to: 1}).Error()), false,
			"dmutex: peer 1 refused peer 0: peer 0 restarted"},
		{"peer 1 restarted, not as a refusal", status.Error(codes.Unavailable, (&restartError{from: 1, to: 0}).Error()), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ls, addrs := listeners(t, 2)
			var streams atomic.Int32
			srv := grpc.NewServer()
			wirepb.RegisterLinkServer(srv, refusingLink{err: tt.refusal, streams: &streams})
			go func() { _ = srv.Serve(ls[1]) }()
			defer srv.Stop()
			tr, err := New(0, addrs, WithListener(ls[0]), Insecure(), fastRetry, quiet)
			require.NoError(t, err)
			defer func() { require.NoError(t, tr.Close()) }()
			require.NoError(t, tr.Send(1, msg(0, 1, 1)))

			if tt.want == "" {
				require.Eventually(t, func() bool { return streams.Load() >= 3 }, 30*time.Second, time.Millisecond, "peer 0 stopped dialing")
				require.NoError(t, tr.Err())
				assert.False(t, tr.isGone(1))
				return
			}
			require.Eventually(t, func() bool { return tr.Err() != nil }, 30*time.Second, time.Millisecond)
			require.ErrorContains(t, tr.Err(), tt.want)
			var restarted *restartError
			assert.Equal(t, tt.gone, errors.As(tr.Err(), &restarted), "Err is a restartError")
			assert.Equal(t, tt.gone, tr.isGone(1), "peer 1 held gone")
			assert.Equal(t, int64(1), tr.refusedBy.Load(), "the peer Close lingers for")
		})
	}
}

// refusingLink plays a peer's Link service that reads each stream's hello
// and ends the stream with err.
type refusingLink struct {
	wirepb.UnimplementedLinkServer
	err     error
	streams *atomic.Int32
}

func (f refusingLink) Connect(stream wirepb.Link_ConnectServer) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	f.streams.Add(1)
	return f.err
}

// TestCloseWhileADeliveryWaits plays peer 1 over raw streams to peer 0,
// which reads nothing from Recv: the first stream's messages fill Recv's
// buffer and the next one waits to go on it, holding peer 1's record; a
// second stream of the same process waits behind it for that record.
// Close must stop the waiting delivery, let the second stream's reader
// through to its end and return; Delivered then counts only the messages
// that went on Recv, which Recv still yields.
func TestCloseWhileADeliveryWaits(t *testing.T) {
	const n = 2
	tr, conn := peerZeroAndRawClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hello := &wirepb.Hello{From: 1, To: 0, N: n, Epoch: 77, FirstSeq: 1}
	var frames []*wirepb.Frame
	for seq := uint64(1); seq <= recvBuffer+1; seq++ {
		frames = append(frames, &wirepb.Frame{Seq: seq, Msg: toWire(msg(1, 0, seq))})
	}
	openStream(t, ctx, conn, hello, frames...)
	// Delivered counts a message before it goes on Recv, so the last one
	// is counted, and waits, once Recv's buffer is full.
	require.Eventually(t, func() bool { return tr.Stats().Delivered == recvBuffer+1 }, 30*time.Second, time.Millisecond)
	openStream(t, ctx, conn, hello)
	require.Eventually(t, func() bool { return parkedIn("grpctransport.(*inStream).read(", "sync.Mutex.Lock") == 1 }, 30*time.Second, time.Millisecond,
		"the second stream's reader never came to wait for peer 1's record")

	closed := make(chan error, 1)
	go func() { closed <- tr.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-ctx.Done():
		require.FailNow(t, "Close waits for a stream reader")
	}
	var got []dmutex.Message
	for m := range tr.Recv() {
		got = append(got, m)
	}
	requireInOrder(t, got, []int{1}, recvBuffer)
	assert.Equal(t, uint64(recvBuffer), tr.Stats().Delivered, "the message Close stopped is not delivered")
}

// parkedIn counts the goroutines that are parked for reason (a wait
// reason as a stack dump prints it, such as "sync.Mutex.Lock") inside
// function fn: the one way for a test to see that a goroutine has come as
// far as a lock or a wait that another goroutine holds up. A goroutine
// that still spins for a lock is not counted.
func parkedIn(fn, reason string) int {
	buf := make([]byte, 1<<20)
	for {
		k := runtime.Stack(buf, true)
		if k < len(buf) {
			buf = buf[:k]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, stack, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "["+reason) && strings.Contains(stack, fn) {
			count++
		}
	}
	return count
}

// TestCloseWaitsForADeliveryInProgress has SetDeliver's function hold a
// message until the test lets it go: Close, called meanwhile, must wait
// for it, as it returns only after every goroutine of the transport has
// exited.
func TestCloseWaitsForADeliveryInProgress(t *testing.T) {
	trs := startTransports(t, 2, insecureOpts)
	inside, release := make(chan struct{}), make(chan struct{})
	var returned atomic.Bool
	require.True(t, trs[0].SetDeliver(trs[0], func(dmutex.Message) {
		close(inside)
		<-release
		returned.Store(true)
	}))
	require.NoError(t, trs[1].Send(0, msg(1, 0, 1)))
	select {
	case <-inside:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the message never reached SetDeliver's function")
	}
	closed := make(chan bool, 1)
	go func() {
		assert.NoError(t, trs[0].Close())
		closed <- returned.Load()
	}()
	require.Eventually(t, func() bool {
		return len(closed) > 0 || parkedIn("grpctransport.(*Transport).Close(", "sync.WaitGroup.Wait") == 1
	}, 30*time.Second, time.Millisecond, "Close never came to wait for its goroutines")
	close(release)
	require.True(t, <-closed, "Close returned while a delivery was in progress")
}

// TestSetDeliverRacingTheFirstMessage has SetDeliver and the first
// message's reader ask for the delivery mode at once: while the test
// holds the mode's lock, SetDeliver waits for it first and the reader
// second, so SetDeliver gets it first and succeeds. The reader must then
// hand the message to SetDeliver's function, not to Recv, which a peer
// that switched would never read.
func TestSetDeliverRacingTheFirstMessage(t *testing.T) {
	trs := startTransports(t, 2, insecureOpts)
	got := make(chan dmutex.Message, 1)
	trs[0].modeMu.Lock()
	set := make(chan bool, 1)
	go func() { set <- trs[0].SetDeliver(trs[0], func(m dmutex.Message) { got <- m }) }()
	waitFor := func(fn string) {
		t.Helper()
		require.Eventually(t, func() bool { return parkedIn(fn, "sync.Mutex.Lock") == 1 }, 30*time.Second, time.Millisecond,
			"%s never came to wait for the mode's lock", fn)
	}
	waitFor("grpctransport.(*Transport).SetDeliver(")
	require.NoError(t, trs[1].Send(0, msg(1, 0, 1)))
	waitFor("grpctransport.(*Transport).deliverer(")
	trs[0].modeMu.Unlock()
	require.True(t, <-set, "SetDeliver before any message went on Recv")
	select {
	case m := <-got:
		assert.Equal(t, msg(1, 0, 1), m)
	case m := <-trs[0].Recv():
		require.Failf(t, "the message went on Recv after SetDeliver succeeded", "%v", m)
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the message was never delivered")
	}
}

// TestReconnectWithTheSmallestBackoff cuts a link whose backoff starts at
// the least WithBackoff accepts, one nanosecond: the wait before the
// first retry, drawn between half the backoff and all of it, must come
// out of that range without a division by zero, and the link reconnect.
func TestReconnectWithTheSmallestBackoff(t *testing.T) {
	trs, px := proxiedPair(t, WithBackoff(time.Nanosecond, 100*time.Millisecond))
	require.NoError(t, trs[1].Send(0, msg(1, 0, 1)))
	got := receive(t, trs[0], 1, 30*time.Second)
	px.cut()
	require.NoError(t, trs[1].Send(0, msg(1, 0, 2)))
	got = append(got, receive(t, trs[0], 1, 30*time.Second)...)
	requireInOrder(t, got, []int{1}, 2)
	assert.GreaterOrEqual(t, px.accepted(), 2, "connections through the proxy")
}

// TestErrKeepsTheFirstReason plays peer 1 over raw streams to peer 0,
// which runs Insecure. A stream that claims another algorithm is refused
// with a reason naming both sides' clusters (a side without WithCluster as
// running an unnamed algorithm), logged and counted, but peer 0 does not
// give up: nothing proves who sent it. Then a restart of the process it
// went on to serve, claimed by a raw stream (refused, not final either)
// and seen by peer 0's own stream to peer 1's address (a fakeLink), makes
// it give up, and a later mismatch leaves Err naming that first reason.
func TestErrKeepsTheFirstReason(t *testing.T) {
	const n = 2
	var logs logBuffer
	tr, conn := peerZeroAndRawClient(t, n, WithLogger(logs.logger()))
	l, err := net.Listen("tcp", tr.addrs[1])
	require.NoError(t, err)
	var epoch atomic.Uint64
	epoch.Store(77)
	serveFakeLink(t, l, &epoch)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(ctx context.Context, epoch uint64, alg string) error {
		_, err := openStream(t, ctx, conn, &wirepb.Hello{From: 1, To: 0, N: n, Epoch: epoch, FirstSeq: 1, Algorithm: alg})()
		return err
	}
	err = open(ctx, 76, dmutex.Lamport.String())
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "cluster mismatch: peer 1 runs "+dmutex.Lamport.String()+" with n=2 and no options, "+
		"peer 0 runs an unnamed algorithm with n=2 and no options")
	require.NoError(t, tr.Err(), "an unproven hello made peer 0 give up")
	assert.Equal(t, uint64(1), tr.Stats().Refused)
	assert.Contains(t, logs.String(), "level=WARN")
	assert.Contains(t, logs.String(), "claims another cluster")

	first, stop := context.WithCancel(ctx)
	require.NoError(t, open(first, 77, ""))
	stop()
	err = open(ctx, 78, "")
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "peer 1 restarted")
	require.NoError(t, tr.Err(), "an unproven restart made peer 0 give up")
	assert.Contains(t, logs.String(), "claims a restart")
	epoch.Store(78)
	require.Eventually(t, func() bool { return tr.Err() != nil }, 30*time.Second, time.Millisecond)
	require.ErrorContains(t, tr.Err(), "peer 1 restarted")
	err = open(ctx, 79, dmutex.Lamport.String())
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.ErrorContains(t, tr.Err(), "peer 1 restarted", "Err keeps the first reason")
}

// TestCloseFlushesAnAckAFrameCarried has peer 1, which sends nothing back
// but one frame, close after a message from peer 0 arrived, as
// TestCloseFlushesTheLastAck does; here the frame peer 1 sends to peer 0
// before it closes carries the acknowledgement, and is lost on the way
// (a proxy drops it). Close must still send its own acknowledgement, as
// a carried one may not arrive.
func TestCloseFlushesAnAckAFrameCarried(t *testing.T) {
	d := ackDelay
	ackDelay = time.Hour // only acknowledgements riding on frames, hellos or Close
	trs, px := proxiedPair(t)
	ackDelay = d
	barrierPair(t, trs)

	require.NoError(t, trs[0].Send(1, msg(0, 1, 1)))
	receive(t, trs[1], 1, 30*time.Second)
	o := trs[0].out[1]
	o.mu.Lock()
	seq := o.next - 1
	o.mu.Unlock()
	in := trs[1].in[0]
	require.Eventually(t, func() bool { return in.ackLast.Load() == seq }, 30*time.Second, time.Millisecond)
	px.drop.Store(true)
	require.NoError(t, trs[1].Send(0, msg(1, 0, 1)))
	require.Eventually(t, func() bool { return in.carried.Load() == seq }, 30*time.Second, time.Millisecond,
		"peer 1's frame never carried the acknowledgement")
	require.Equal(t, 1, trs[0].unacked(1), "acknowledged before Close")
	require.NoError(t, trs[1].Close())
	require.Eventually(t, func() bool { return trs[0].unacked(1) == 0 }, 30*time.Second, time.Millisecond,
		"Close did not acknowledge what peer 1 delivered")
}

// TestResentCountsEachFrameSentAgain has peer 1 send two messages that
// a proxy drops on the way to peer 0, and then cuts the connection: the
// new stream sends both again, and Stats.Resent counts exactly those two.
// Requests go out from Send itself and tokens from the link's goroutine,
// and either way the transport must remember how far it had sent.
func TestResentCountsEachFrameSentAgain(t *testing.T) {
	token := func(ts uint64) dmutex.Message {
		return dmutex.Message{Kind: dmutex.KindToken, From: 1, To: 0, TS: ts, Token: &dmutex.Token{LN: []uint64{ts, 0}}}
	}
	for _, tt := range []struct {
		name string
		m    func(ts uint64) dmutex.Message
	}{
		{"requests", func(ts uint64) dmutex.Message { return msg(1, 0, ts) }},
		{"tokens", token},
	} {
		t.Run(tt.name, func(t *testing.T) {
			trs, px := proxiedPair(t)
			require.NoError(t, trs[1].Send(0, msg(1, 0, 1)))
			got := receive(t, trs[0], 1, 30*time.Second)
			require.Eventually(t, func() bool { return trs[1].unacked(0) == 0 }, 30*time.Second, time.Millisecond)

			px.drop.Store(true)
			o := trs[1].out[0]
			for ts := uint64(2); ts <= 3; ts++ {
				require.NoError(t, trs[1].Send(0, tt.m(ts)))
				// One at a time, so that each request finds the
				// stream idle and goes out from Send.
				require.Eventually(t, func() bool {
					o.mu.Lock()
					defer o.mu.Unlock()
					return o.sentSeq == ts && !o.writing
				}, 30*time.Second, time.Millisecond, "frame %d never went out", ts)
			}
			require.Zero(t, trs[1].Stats().Resent)
			px.drop.Store(false)
			px.cut()
			got = append(got, receive(t, trs[0], 2, 30*time.Second)...)
			require.Equal(t, []uint64{1, 2, 3}, []uint64{got[0].TS, got[1].TS, got[2].TS})
			// The link counts a frame after its write returns, which the
			// frame's acknowledgement may overtake.
			require.Eventually(t, func() bool { return trs[1].Stats().Resent == 2 }, 30*time.Second, time.Millisecond,
				"Stats.Resent never came to 2")
		})
	}
}

// TestNewListensOnItsAddress starts a transport without WithListener: it
// listens on its own address (port 0 picks a free one) and serves there;
// a second transport on the same address cannot listen, and says so.
func TestNewListensOnItsAddress(t *testing.T) {
	tr, err := New(0, []string{"127.0.0.1:0"}, Insecure(), quiet)
	require.NoError(t, err)
	defer func() { require.NoError(t, tr.Close()) }()
	addr := tr.Addr().String()
	require.NotZero(t, tr.Addr().(*net.TCPAddr).Port)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err, "nothing listens on the transport's address")
	require.NoError(t, c.Close())

	taken, err := New(0, []string{addr}, Insecure(), quiet)
	require.ErrorContains(t, err, "dmutex: listen")
	require.Nil(t, taken)
}

// TestNewFailingLeavesNothingOpen has New fail on an address that gRPC
// cannot parse, after it has listened on its own address and made a
// client for an earlier peer: the error names the address, and New
// closes what it had opened (goleak checks the client; listening on the
// same port again checks the listener).
func TestNewFailingLeavesNothingOpen(t *testing.T) {
	ls, addrs := listeners(t, 2)
	for _, l := range ls {
		require.NoError(t, l.Close())
	}
	tr, err := New(0, []string{addrs[0], addrs[1], "%zz:1"}, Insecure(), quiet)
	require.ErrorIs(t, err, dmutex.ErrInvalidConfig)
	require.Nil(t, tr)
	assert.Contains(t, err.Error(), `peer 2 at "%zz:1"`)
	l, err := net.Listen("tcp", addrs[0])
	require.NoError(t, err, "New left its listener open")
	require.NoError(t, l.Close())
}
