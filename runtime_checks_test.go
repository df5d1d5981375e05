package dmutex

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests that fail when the runtime or the in-memory network misbehaves in
// ways a mutation review found no other test noticing (issue 11 item 7).
// Each names the change it catches.

// TestRicartDeferredReplySentOnce defers a reply on purpose, round after
// round, and checks the exact 2(n-1) cost of every entry: a release that
// sent an already-sent deferred reply again (deferred[j] not cleared)
// would add a reply per later release.
func TestRicartDeferredReplySentOnce(t *testing.T) {
	const n, rounds = 3, 4
	c := variant{alg: RicartAgrawala}.cluster(t, n)
	p0, p1 := c.peers[0], c.peers[1]
	deferredTo1 := func() bool {
		p0.mu.Lock()
		defer p0.mu.Unlock()
		return p0.m.(*ricart).deferred[1] != 0
	}
	hammer(t, c, 3, 10, 30*time.Second) // every peer contending
	for range rounds {
		lockWithin(t, p0, 10*time.Second)
		locked := make(chan error, 1)
		go func() { locked <- p1.LockContext(context.Background()) }()
		eventually(t, "peer 0 defers its reply to peer 1", deferredTo1)
		p0.Unlock() // sends the deferred reply
		require.NoError(t, <-locked)
		p1.Unlock()
	}
	waitQuiet(t, c)
	s := c.Stats()
	require.Equal(t, uint64(2*rounds+n*3*10), s.Entries)
	assert.Equal(t, 2*(n-1)*s.Entries, s.Messages)
	assert.Equal(t, map[string]uint64{"request": (n - 1) * s.Entries, "reply": (n - 1) * s.Entries}, s.ByKind)
}

// TestLocalCallersInArrivalOrder queues callers of one peer one at a time
// behind a holder: they must be admitted oldest first.
func TestLocalCallersInArrivalOrder(t *testing.T) {
	for _, tt := range []struct {
		v variant
		n int
	}{
		{variant{name: "ricart-agrawala", alg: RicartAgrawala}, 3},
		{variant{name: "suzuki-kasami", alg: SuzukiKasami}, 1},
		{variant{name: "centralized", alg: Centralized}, 2},
	} {
		t.Run(tt.v.name+"/n="+strconv.Itoa(tt.n), func(t *testing.T) {
			c := tt.v.cluster(t, tt.n)
			p := c.peers[0]
			lockWithin(t, p, 10*time.Second)
			const callers = 6
			var order []int // appended by each caller while it holds the lock
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() {
					p.Lock()
					order = append(order, i)
					p.Unlock()
				})
				eventually(t, "caller "+strconv.Itoa(i)+" queues", func() bool {
					p.mu.Lock()
					defer p.mu.Unlock()
					return len(p.waiters) == i+1
				})
			}
			p.Unlock()
			wg.Wait()
			assert.Equal(t, []int{0, 1, 2, 3, 4, 5}, order)
		})
	}
}

// TestMalformedMessagesRefused hands a waiting Ricart-Agrawala peer
// messages no transport may deliver: a reply claiming to come from the
// receiver itself (which, stepped, would count as the one permission it
// needs), one from a peer out of range, one for another receiver and one
// of no kind. Each is refused and counted; the peer enters only on the
// real reply.
func TestMalformedMessagesRefused(t *testing.T) {
	nw := NewChanNetwork(2)
	p, err := NewPeer(RicartAgrawala, 0, 2, nw.Endpoint(0))
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()); require.NoError(t, nw.Close()) }()
	e1 := nw.Endpoint(1)
	locked := make(chan error, 1)
	go func() { locked <- p.LockContext(context.Background()) }()
	var req Message
	select {
	case req = <-e1.Recv():
	case <-time.After(10 * time.Second):
		t.Fatal("no request within 10s")
	}
	require.Equal(t, KindRequest, req.Kind)

	reply := Message{Kind: KindReply, From: 1, To: 0, Ref: req.TS}
	bad := []Message{reply, reply, reply, reply, reply}
	bad[0].From = 0 // from the receiver itself
	bad[1].From = 2 // no such peer
	bad[4].From = -1
	bad[2].To = 1   // another receiver
	bad[3].Kind = 0 // no kind
	for _, m := range bad {
		require.NoError(t, e1.Send(0, m))
	}
	eventually(t, "the malformed messages are refused", func() bool { return p.Stats().Refused == uint64(len(bad)) })
	select {
	case err := <-locked:
		t.Fatalf("LockContext returned %v on a malformed message", err)
	default:
	}
	assert.Equal(t, uint64(0), p.deliveredCount())

	require.NoError(t, e1.Send(0, reply))
	require.NoError(t, <-locked)
	p.Unlock()
	assert.Equal(t, uint64(1), p.Stats().Entries)
}

// TestChanEndpointSendBounds sends to ids out of range and from a closed
// endpoint: each Send returns an error and delivers nothing. Endpoint
// with an id out of range panics with a message naming it.
func TestChanEndpointSendBounds(t *testing.T) {
	nw := NewChanNetwork(2)
	defer nw.Close()
	e0, e1 := nw.Endpoint(0), nw.Endpoint(1)
	m := Message{Kind: KindRequest, From: 0}
	for _, to := range []int{2, -1, 100} {
		m.To = to
		assert.Error(t, e0.Send(to, m), "send to %d", to)
	}
	for _, id := range []int{2, -1} {
		assert.PanicsWithValue(t, "dmutex: endpoint "+strconv.Itoa(id)+" out of range [0, 2)",
			func() { nw.Endpoint(id) }, "Endpoint(%d), as indexing would", id)
	}
	require.NoError(t, e0.Close())
	m.To = 1
	assert.ErrorIs(t, e0.Send(1, m), ErrClosed)
	assert.Equal(t, 0, len(e1.Recv()), "nothing was delivered")
	require.NoError(t, e1.Send(0, Message{Kind: KindReply, From: 1, To: 0}), "a send to a closed endpoint is lost, not an error")
	_, open := <-e0.Recv()
	assert.False(t, open, "the closed endpoint received nothing")
}

// recvWithin returns the next message on e, or fails the test after a
// generous deadline.
func recvWithin(t *testing.T, e *ChanEndpoint) Message {
	t.Helper()
	select {
	case m := <-e.Recv():
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("nothing delivered within 10s")
		return Message{}
	}
}

// TestFaultsDelayHolds sends with a Delay: no message may arrive before
// the delay has passed since its send. It bounds from below only, which a
// loaded machine cannot break.
func TestFaultsDelayHolds(t *testing.T) {
	const delay = 30 * time.Millisecond
	for _, f := range []Faults{{Delay: delay}, {Delay: delay, Jitter: delay, Seed: 1}} {
		nw := NewChanNetwork(2)
		require.NoError(t, nw.SetFaults(f))
		for i := range 3 {
			sent := time.Now()
			require.NoError(t, nw.Endpoint(0).Send(1, Message{Kind: KindRequest, From: 0, To: 1, TS: uint64(i)}))
			m := recvWithin(t, nw.Endpoint(1))
			assert.GreaterOrEqual(t, time.Since(sent), delay, "%+v: message %d arrived early", f, m.TS)
		}
		require.NoError(t, nw.Close())
	}
}

// TestCrashedPeerReceivesNothing crashes a peer with a message to it
// already delayed: that message, later ones to it and its own sends are
// all lost, while the other peers still talk.
func TestCrashedPeerReceivesNothing(t *testing.T) {
	nw := NewChanNetwork(3)
	defer nw.Close()
	e0, e1, e2 := nw.Endpoint(0), nw.Endpoint(1), nw.Endpoint(2)
	require.NoError(t, nw.SetFaults(Faults{Delay: 5 * time.Millisecond}))
	require.NoError(t, e0.Send(1, Message{Kind: KindRequest, From: 0, To: 1, TS: 1})) // delayed
	require.NoError(t, nw.Crash(1))
	require.NoError(t, nw.SetFaults(Faults{}))
	require.NoError(t, e0.Send(1, Message{Kind: KindRequest, From: 0, To: 1, TS: 2}))
	require.NoError(t, e1.Send(0, Message{Kind: KindReply, From: 1, To: 0}))
	require.NoError(t, e0.Send(2, Message{Kind: KindRequest, From: 0, To: 2, TS: 3}))
	assert.Equal(t, uint64(3), recvWithin(t, e2).TS, "peers that did not crash still talk")
	eventually(t, "the delayed message is lost too", func() bool { return nw.Dropped() == 3 })
	assert.Equal(t, 0, len(e1.Recv()), "the crashed peer received something")
	assert.Equal(t, 0, len(e0.Recv()), "the crashed peer's message arrived")
}

// TestLoweredDelayKeepsPairFIFO lowers the delay while messages are still
// delayed: the later messages of the same pair must not overtake them.
func TestLoweredDelayKeepsPairFIFO(t *testing.T) {
	nw := NewChanNetwork(2)
	defer nw.Close()
	e0, e1 := nw.Endpoint(0), nw.Endpoint(1)
	send := func(ts uint64) {
		require.NoError(t, e0.Send(1, Message{Kind: KindRequest, From: 0, To: 1, TS: ts}))
	}
	require.NoError(t, nw.SetFaults(Faults{Delay: 50 * time.Millisecond}))
	send(1)
	send(2)
	require.NoError(t, nw.SetFaults(Faults{Delay: time.Millisecond, Jitter: time.Millisecond}))
	send(3)
	require.NoError(t, nw.SetFaults(Faults{}))
	send(4)
	send(5)
	for want := uint64(1); want <= 5; want++ {
		assert.Equal(t, want, recvWithin(t, e1).TS)
	}
}

// TestDeliverAfterCloseStepsNothing: a message that reaches the peer
// after Close (a Deliverer may push one from its own goroutine while
// Close runs) is dropped: the machine is not stepped, and the message is
// counted neither as delivered nor as refused.
func TestDeliverAfterCloseStepsNothing(t *testing.T) {
	m := newScripted()
	p, _ := scriptedPeer(t, m)
	require.NoError(t, p.Close())
	assert.False(t, p.deliver(Message{Kind: KindReply, From: 1, To: 0}))
	assert.NotContains(t, m.events(), evMessage, "the machine was stepped")
	assert.Zero(t, p.deliveredCount())
	assert.Zero(t, p.Stats().Refused)
}

// TestBrokenMachineEntriesPanic: a machine that enters while the peer is
// already inside, or on a release, has broken mutual exclusion, and the
// runtime panics rather than hand the lock to a second caller.
func TestBrokenMachineEntriesPanic(t *testing.T) {
	p, _ := scriptedPeer(t, newScripted()) // its machine enters on every request
	p.Lock()
	p.mu.Lock()
	assert.Panics(t, func() { p.d.enter(p.host(), &p.out, evMessage) }, "an entry while inside")
	p.mu.Unlock()
	p.Unlock()
	assert.Equal(t, uint64(1), p.Stats().Entries)

	m := newScripted()
	m.enterOnRelease = true
	p, _ = scriptedPeer(t, m)
	p.Lock()
	assert.Panics(t, p.Unlock, "an entry on the release")
}

// queueBehindTry starts a TryLockContext on p, whose machine answers a
// try only when a message comes, and a LockContext with ctx behind it,
// and returns their results once both wait.
func queueBehindTry(t *testing.T, p *Peer, ctx context.Context) (tried, locked <-chan error) {
	t.Helper()
	tc, lc := make(chan error, 1), make(chan error, 1)
	queued := func(n int) func() bool {
		return func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return len(p.waiters) == n && p.tryWaiter != nil
		}
	}
	go func() { tc <- p.TryLockContext(context.Background()) }()
	eventually(t, "the try waits", queued(1))
	go func() { lc <- p.LockContext(ctx) }()
	eventually(t, "the Lock caller queues behind the try", queued(2))
	return tc, lc
}

// TestLockAfterRefusedTry: when the try a Lock caller queued behind is
// refused, the peer requests for that caller; a request that enters at
// once admits it, and one that waits is outstanding, so that a TryLock
// after the caller gave up is refused at once instead of trying again
// beside it.
func TestLockAfterRefusedTry(t *testing.T) {
	m := newScripted()
	m.refuseOnMessage = true
	p, _ := scriptedPeer(t, m)
	tried, locked := queueBehindTry(t, p, context.Background())
	p.deliver(Message{Kind: KindBusy, From: 1, To: 0})
	require.ErrorIs(t, <-tried, ErrLocked)
	select {
	case err := <-locked:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the Lock caller was not admitted on the request that entered at once")
	}
	p.Unlock()

	m = newScripted()
	m.refuseOnMessage, m.waitOnRequest = true, true
	p, _ = scriptedPeer(t, m)
	ctx, cancel := context.WithCancel(context.Background())
	tried, locked = queueBehindTry(t, p, ctx)
	p.deliver(Message{Kind: KindBusy, From: 1, To: 0})
	require.ErrorIs(t, <-tried, ErrLocked)
	cancel()
	require.ErrorIs(t, <-locked, context.Canceled)
	ends := &endsOnWait{Context: context.Background(), done: make(chan struct{})}
	close(ends.done)
	assert.ErrorIs(t, p.TryLockContext(ends), ErrLocked, "the request for the caller that gave up is outstanding")
	evs := m.events()
	assert.Equal(t, []eventKind{evTry, evMessage, evRequest}, evs)
}

// TestWithdrawnEntryTakesNoFence: a request whose caller gave up is still
// granted, and the peer enters and leaves at once; that entry takes no
// fencing token, since nobody holds it, so the next hold, by any peer,
// has the fence right after the last hold a caller got. The same goes
// for a try whose caller gave up before its yes came.
func TestWithdrawnEntryTakesNoFence(t *testing.T) {
	for _, try := range []bool{false, true} {
		t.Run(map[bool]string{false: "lock", true: "try"}[try], func(t *testing.T) {
			c := variant{alg: RicartAgrawala}.cluster(t, 2)
			p0, p1 := c.peers[0], c.peers[1]
			p1.Lock()
			f1 := p1.Fence()
			ends := &endsOnWait{Context: context.Background(), done: make(chan struct{})}
			close(ends.done)
			if try {
				// A try asked while peer 1 holds is refused: give up on
				// one asked after peer 1 left, before its answer.
				p1.Unlock()
				got := p0.deliveredCount() // peer 1's request
				require.ErrorIs(t, p0.TryLockContext(ends), context.Canceled)
				eventually(t, "peer 0 takes peer 1's yes, enters for the withdrawn try and leaves", func() bool { return p0.deliveredCount() == got+1 })
			} else {
				require.ErrorIs(t, p0.LockContext(ends), context.Canceled)
				p1.Unlock()
				eventually(t, "peer 0 takes peer 1's reply, enters for the withdrawn request and leaves", func() bool { return p0.deliveredCount() == 2 })
			}
			p1.Lock()
			assert.Equal(t, f1+1, p1.Fence(), "the next hold's fence, after an entry nobody held")
			p1.Unlock()
			p0.Lock()
			assert.Equal(t, f1+2, p0.Fence())
			p0.Unlock()
		})
	}
}
