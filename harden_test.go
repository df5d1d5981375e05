package dmutex

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests for the runtime's hardening (issue 12): each pins one defect that
// an adversarial review found, and fails when the fix is undone.

// scriptTransport is a Transport driven by the test: it delivers what the
// test puts in in, records what the peer sends, and, if gate is set, holds
// Close until gate is closed.
type scriptTransport struct {
	in   chan Message
	sent chan Message // everything the peer sent, in order

	gate        chan struct{} // Close waits for it, if not nil
	closing     chan struct{} // closed when Close has been entered
	closeReturn chan struct{} // closed just before Close returns
	once        sync.Once
}

func newScriptTransport() *scriptTransport {
	return &scriptTransport{
		in:          make(chan Message, 64),
		sent:        make(chan Message, 1024),
		closing:     make(chan struct{}),
		closeReturn: make(chan struct{}),
	}
}

func (s *scriptTransport) Send(to int, m Message) error {
	select {
	case s.sent <- m:
	default:
		return errors.New("script transport: record full")
	}
	return nil
}

func (s *scriptTransport) Recv() <-chan Message { return s.in }

func (s *scriptTransport) Close() error {
	s.once.Do(func() {
		close(s.closing)
		if s.gate != nil {
			<-s.gate
		}
		close(s.in)
		close(s.closeReturn)
	})
	return nil
}

// nextSent returns the next message the peer sent, or fails the test
// after a generous deadline.
func (s *scriptTransport) nextSent(t *testing.T) Message {
	t.Helper()
	select {
	case m := <-s.sent:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("the peer sent nothing within 10s")
		return Message{}
	}
}

// eventually polls cond until it holds, or fails the test after a
// generous deadline. It bounds a wait, never a speed.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// delivered returns how many messages p has stepped.
func (p *Peer) deliveredCount() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delivered
}

// TestPeerConcurrentCloseWaits closes one peer from two goroutines while
// its transport is slow to close: neither Close may return before the
// transport's Close has returned, since until then the transport's channel
// is open and the receive goroutine still runs (issue 12 item 1).
func TestPeerConcurrentCloseWaits(t *testing.T) {
	tr := newScriptTransport()
	tr.gate = make(chan struct{})
	p, err := NewPeer(RicartAgrawala, 0, 1, tr)
	require.NoError(t, err)

	returned := make(chan string, 2)
	closeFrom := func(name string) {
		assert.NoError(t, p.Close())
		select {
		case <-tr.closeReturn:
			returned <- name
		default:
			returned <- name + " returned while the transport was still closing"
		}
	}
	go closeFrom("first")
	<-tr.closing // the first Close is inside the transport's Close
	go closeFrom("second")
	// Give the second Close a chance to return early, as it did before the
	// fix; a correct one blocks until the gate opens. The wait only lets
	// the bug show, no assertion depends on it.
	select {
	case r := <-returned:
		t.Fatal(r)
	case <-time.After(100 * time.Millisecond):
	}
	close(tr.gate)
	for range 2 {
		r := <-returned
		assert.NotContains(t, r, "still closing")
	}
}

// TestChanEndpointConcurrentCloseWaits closes endpoints from two
// goroutines at once, with a pump goroutine busy on a full mailbox: each
// Close must return only once its pump has exited, the backlog is
// released and the endpoint's channel is closed (issue 12 item 1).
func TestChanEndpointConcurrentCloseWaits(t *testing.T) {
	for round := range 500 {
		nw := NewChanNetwork(2)
		e0, e1 := nw.Endpoint(0), nw.Endpoint(1)
		for range mailboxSize + 8 { // the overflow starts a pump
			require.NoError(t, e0.Send(1, Message{Kind: KindRequest, From: 0, To: 1}))
		}
		var wg sync.WaitGroup
		failed := make(chan string, 2)
		start := make(chan struct{})
		closeAndCheck := func() {
			if err := e1.Close(); err != nil {
				failed <- err.Error()
				return
			}
			if !drainedAndClosed(e1.Recv()) {
				failed <- "Close returned before the endpoint's channel was closed"
			}
			e1.mu.Lock()
			defer e1.mu.Unlock()
			if e1.pumping || e1.backlog != nil {
				failed <- "Close returned before its pump exited or with the backlog kept"
			}
		}
		wg.Go(func() { <-start; closeAndCheck() })
		wg.Go(func() {
			<-start
			// Join as soon as the first Close has begun (Send from a
			// closing endpoint fails), while it still waits for its pump.
			for e1.Send(0, Message{Kind: KindReply, From: 1, To: 0}) == nil {
				runtime.Gosched()
			}
			closeAndCheck()
		})
		close(start)
		wg.Wait()
		close(failed)
		for msg := range failed {
			t.Fatalf("round %d: %s", round, msg)
		}
		require.NoError(t, nw.Close())
	}
}

// drainedAndClosed reads what ch holds without blocking and reports
// whether ch turned out closed.
func drainedAndClosed(ch <-chan Message) bool {
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return true
			}
		default:
			return false
		}
	}
}

// TestEntriesMatchSuccessfulLocksWhileClosing races, round after round, a
// waiter's admission against the end of its context and Close: Stats must
// count exactly the entries whose LockContext returned nil (issue 12 item
// 3). Before the fix, a waiter admitted just before Close and then
// abandoned returned its context's error but stayed counted.
func TestEntriesMatchSuccessfulLocksWhileClosing(t *testing.T) {
	rounds := 3000
	if testing.Short() {
		rounds = 1000
	}
	var mismatches int
	for range rounds {
		c, err := New(SuzukiKasami, 1)
		require.NoError(t, err)
		p := c.peers[0]
		p.Lock()
		ctx, cancel := context.WithCancel(context.Background())
		result := make(chan error, 1)
		go func() { result <- p.LockContext(ctx) }()
		eventually(t, "the second caller queues", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return len(p.waiters) == 1
		})
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { <-start; p.Unlock() }) // admits the waiter
		wg.Go(func() { <-start; cancel() })
		wg.Go(func() { <-start; assert.NoError(t, c.Close()) })
		close(start)
		wg.Wait()
		successes := uint64(1) // the first Lock
		switch err := <-result; {
		case err == nil:
			successes++
		case errors.Is(err, context.Canceled), errors.Is(err, ErrClosed):
		default:
			t.Fatalf("LockContext: %v", err)
		}
		if got := c.Stats().Entries; got != successes {
			mismatches++
			t.Errorf("Stats().Entries = %d, successful locks = %d", got, successes)
		}
		if mismatches > 3 {
			t.FailNow()
		}
	}
}

// TestPanickingFaultCallbackDoesNotWedge makes a DropNext callback panic
// on the Lock path: Lock panics, and then Stats and Close must still
// return, which they never did while the panic left the peer's mutex
// held (issue 12 item 4).
func TestPanickingFaultCallbackDoesNotWedge(t *testing.T) {
	c, err := New(RicartAgrawala, 2)
	require.NoError(t, err)
	c.Network().DropNext(1, func(Message) bool { panic("drop rule broke") })
	require.PanicsWithValue(t, "drop rule broke", func() { c.Peer(0).Lock() })

	done := make(chan Stats)
	go func() {
		s := c.Stats()
		assert.NoError(t, c.Close())
		done <- s
	}()
	select {
	case s := <-done:
		assert.Equal(t, uint64(0), s.Entries)
	case <-time.After(10 * time.Second):
		t.Fatal("Stats or Close blocked after a panic on the Lock path")
	}
	assert.ErrorIs(t, c.Peer(0).LockContext(context.Background()), ErrClosed)
}

// TestDropNextNilMatchesEverything pins what a nil match means: every
// message (issue 12 item 4: DropNext(1, nil) used to be accepted and then
// panic on the next send).
func TestDropNextNilMatchesEverything(t *testing.T) {
	nw := NewChanNetwork(2)
	defer nw.Close()
	nw.DropNext(2, nil)
	for ts := range uint64(3) {
		require.NoError(t, nw.Endpoint(0).Send(1, Message{Kind: KindRequest, From: 0, To: 1, TS: ts}))
	}
	assert.Equal(t, uint64(2), nw.Dropped())
	select {
	case m := <-nw.Endpoint(1).Recv():
		assert.Equal(t, uint64(2), m.TS, "the first two messages are dropped")
	default:
		t.Fatal("the third message was not delivered")
	}
}

// fencePeer is a Suzuki-Kasami peer 0 holding the idle token, and the raw
// endpoint of peer 1 through which the test forges messages.
func fencePeer(t *testing.T) (*Peer, *ChanEndpoint) {
	t.Helper()
	nw := NewChanNetwork(2)
	p, err := NewPeer(SuzukiKasami, 0, 2, nw.Endpoint(0))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()); require.NoError(t, nw.Close()) })
	return p, nw.Endpoint(1)
}

// forgeFence has peer 1 send peer 0 a request that asks for nothing (its
// number is 0, already satisfied) and carries fence f.
func forgeFence(t *testing.T, e *ChanEndpoint, f uint64) {
	t.Helper()
	require.NoError(t, e.Send(0, Message{Kind: KindRequest, From: 1, To: 0, TS: 0, Fence: f}))
}

// lockFence takes p's lock, returns the hold's fence and leaves.
func lockFence(t *testing.T, p *Peer) uint64 {
	t.Helper()
	lockWithin(t, p, 10*time.Second)
	f := p.Fence()
	p.Unlock()
	return f
}

// TestFenceRefusesAnOutOfBoundRaise has one forged message carry a fence
// near 2^64: the peer must refuse it, count it, and go on handing out
// small fences; a message within FenceWindow is accepted (issue 12 item 5).
func TestFenceRefusesAnOutOfBoundRaise(t *testing.T) {
	p, e := fencePeer(t)
	require.Equal(t, uint64(1), lockFence(t, p))

	forgeFence(t, e, math.MaxUint64-1)
	eventually(t, "the forged message is refused", func() bool { return p.Stats().Refused == 1 })
	assert.Equal(t, uint64(2), lockFence(t, p))

	forgeFence(t, e, 2+FenceWindow+1) // one past the window
	eventually(t, "the second forged message is refused", func() bool { return p.Stats().Refused == 2 })
	assert.Equal(t, uint64(3), lockFence(t, p))

	forgeFence(t, e, 3+FenceWindow) // at the window's edge: a correct peer may be that far ahead
	eventually(t, "the message within the window is stepped", func() bool { return p.deliveredCount() == 1 })
	assert.Equal(t, uint64(3+FenceWindow+1), lockFence(t, p))
	assert.Equal(t, uint64(2), p.Stats().Refused)
	assert.Contains(t, p.Stats().String(), "refused=2")
}

// TestFenceNeverWraps walks the fence up to MaxFence with messages inside
// the window, then keeps entering, through the fast path too: fences
// increase strictly up to MaxFence and are 0 from then on, never a small
// number again (issue 12 item 5).
func TestFenceNeverWraps(t *testing.T) {
	p, e := fencePeer(t)
	require.Equal(t, uint64(1), lockFence(t, p))
	var sent uint64
	for f := uint64(1); f < MaxFence-10; {
		f = min(f+FenceWindow, MaxFence-10)
		forgeFence(t, e, f)
		sent++
	}
	eventually(t, "the raising messages are stepped", func() bool { return p.deliveredCount() == sent })
	require.Equal(t, uint64(0), p.Stats().Refused)
	forgeFence(t, e, MaxFence+1)
	eventually(t, "the message beyond MaxFence is refused", func() bool { return p.Stats().Refused == 1 })

	prev := uint64(MaxFence - 10)
	for i := range 40 { // enough rounds for the fast path to arm
		f := lockFence(t, p)
		if prev == MaxFence || prev == 0 {
			require.Equal(t, uint64(0), f, "entry %d after the fences ran out", i)
		} else {
			require.Equal(t, prev+1, f, "entry %d", i)
		}
		prev = f
	}
	assert.Equal(t, uint64(0), prev, "the fences ran out")
	assert.Equal(t, uint64(41), p.Stats().Entries)

	forgeFence(t, e, MaxFence) // MaxFence itself is a fence a peer accepts
	eventually(t, "the message at MaxFence is taken", func() bool { return p.deliveredCount()+p.Stats().Refused == sent+2 })
	assert.Equal(t, sent+1, p.deliveredCount(), "the message at MaxFence is stepped, not refused")
}

// TestWithVotingSetsCopiesWhenBuilt changes the caller's sets after WithVotingSets
// and before New: the cluster must use the sets as they were (issue 12
// item 6).
func TestWithVotingSetsCopiesWhenBuilt(t *testing.T) {
	sets := [][]int{{0, 1, 2}, {0, 1, 3}, {0, 2, 3}, {1, 2, 3}}
	opt := WithVotingSets(sets)
	sets[0][1] = 99 // invalid, if the option saw it
	sets[3] = []int{3}
	c, err := New(Maekawa, 4, opt)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, []int{0, 1, 2}, c.peers[0].m.(*maekawa).set)
	assert.Equal(t, []int{1, 2, 3}, c.peers[3].m.(*maekawa).set)
	hammer(t, c, 1, 3, 30*time.Second)
}

// TestArgumentEdgeCases pins what NewPeer does with a typed-nil transport
// and NewChanNetwork with a negative size (issue 12 item 8).
func TestArgumentEdgeCases(t *testing.T) {
	_, err := NewPeer(RicartAgrawala, 0, 1, (*ChanEndpoint)(nil))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "*dmutex.ChanEndpoint")
	_, err = NewPeer(RicartAgrawala, 0, 1, nil)
	require.ErrorIs(t, err, ErrInvalidConfig)

	require.PanicsWithValue(t, "dmutex: NewChanNetwork(-1): negative number of endpoints",
		func() { NewChanNetwork(-1) })
	assert.NotPanics(t, func() { NewChanNetwork(0).Close() })
}

// TestSuzukiKasamiRefusesForgedTokens hands a waiting Suzuki-Kasami peer,
// through a custom transport, tokens that no peer of its cluster could
// send: the machine must drop each one and stay waiting, then enter on a
// real token and pass it on (issue 12 item 9). Before the fix a queue
// entry out of range was accepted, and Unlock panicked.
func TestSuzukiKasamiRefusesForgedTokens(t *testing.T) {
	tr := newScriptTransport()
	p, err := NewPeer(SuzukiKasami, 1, 3, tr)
	require.NoError(t, err)
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	locked := make(chan error, 1)
	go func() { locked <- p.LockContext(ctx) }()
	for range 2 {
		require.Equal(t, KindRequest, tr.nextSent(t).Kind)
	}

	forged := []*Token{
		{LN: make([]uint64, 3), Queue: []int{7}},    // out of range
		{LN: make([]uint64, 3), Queue: []int{-1}},   // negative
		{LN: make([]uint64, 3), Queue: []int{2, 2}}, // duplicate
		{LN: make([]uint64, 3), Queue: []int{1}},    // the receiver itself
		{LN: make([]uint64, 3), Queue: []int{0, 2, 0, 2}},
		{LN: make([]uint64, 2)}, // LN of another cluster size
		nil,
	}
	for _, tok := range forged {
		tr.in <- Message{Kind: KindToken, From: 0, To: 1, Token: tok}
	}
	eventually(t, "the forged tokens are stepped", func() bool { return p.deliveredCount() == uint64(len(forged)) })
	select {
	case err := <-locked:
		t.Fatalf("LockContext returned %v on a forged token", err)
	default:
	}

	tr.in <- Message{Kind: KindToken, From: 0, To: 1, Token: &Token{LN: []uint64{0, 0, 0}, Queue: []int{2}}}
	require.NoError(t, <-locked)
	p.Unlock()
	m := tr.nextSent(t)
	require.Equal(t, KindToken, m.Kind)
	assert.Equal(t, 2, m.To, "the token goes to the head of its queue")
	assert.Equal(t, []uint64{0, 1, 0}, m.Token.LN)
	assert.Empty(t, m.Token.Queue)
}

// TestMachinesSurviveJunk steps every machine with junk messages that pass
// the peer's checks (a valid kind, a sender in range, any TS, Ref and
// token), between ordinary requests and releases: no field of a message
// may make a machine index out of range or otherwise panic (issue 12 item
// 9, for every algorithm). A token or privilege to a machine that holds
// one is left out: that is a duplicate, which the Transport contract
// forbids and the token machines refuse loudly.
func TestMachinesSurviveJunk(t *testing.T) {
	nums := []uint64{0, 1, 2, 3, 7, 1 << 32, math.MaxUint64 - 1, math.MaxUint64}
	for _, v := range variants() {
		for _, n := range []int{2, 3, 5} {
			t.Run(v.name+"/n="+strconv.Itoa(n), func(t *testing.T) {
				cfg, err := newConfig(v.alg, n, forSimulation, v.opts)
				require.NoError(t, err)
				rng := rand.New(rand.NewPCG(uint64(n), uint64(v.alg)))
				for id := range n {
					m, err := cfg.newMachine(v.alg, id, n)
					require.NoError(t, err)
					var out output
					wanting, inside := false, false
					for step := range 2000 {
						var ev event
						switch r := rng.IntN(10); {
						case r == 0 && !wanting && !inside:
							ev, wanting = event{kind: evRequest}, true
						case r == 1 && inside:
							ev, inside = event{kind: evRelease}, false
						default:
							msg := Message{
								Kind: MessageKind(1 + rng.IntN(int(numKinds)-1)),
								From: (id + 1 + rng.IntN(n-1)) % n,
								To:   id,
								TS:   nums[rng.IntN(len(nums))],
								Ref:  nums[rng.IntN(len(nums))],
							}
							if msg.Kind == KindToken || msg.Kind == KindPrivilege {
								if th, ok := m.(tokenHolder); ok && th.hasToken() {
									continue
								}
								msg.Token = junkToken(rng, n)
							}
							ev = event{kind: evMessage, msg: msg}
						}
						out.reset()
						require.NotPanics(t, func() { m.step(ev, &out) }, "peer %d step %d: %+v", id, step, ev)
						if out.entered {
							wanting, inside = false, true
						}
					}
				}
			})
		}
	}
}

// junkToken returns a Suzuki-Kasami token, valid or not.
func junkToken(rng *rand.Rand, n int) *Token {
	if rng.IntN(4) == 0 {
		return nil
	}
	t := &Token{LN: make([]uint64, n-1+rng.IntN(3))}
	for range rng.IntN(n + 2) {
		t.Queue = append(t.Queue, rng.IntN(n+4)-2)
	}
	return t
}
