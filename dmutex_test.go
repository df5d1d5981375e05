package dmutex

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSafetyUnderContention(t *testing.T) {
	for _, v := range variants() {
		for _, n := range []int{1, 2, 3, 8, 32} {
			t.Run(v.name+"/n="+strconv.Itoa(n), func(t *testing.T) {
				rounds := 30
				if n >= 32 {
					rounds = 4
				}
				if testing.Short() {
					rounds = 2
				}
				hammer(t, v.cluster(t, n), 3, rounds, 30*time.Second)
			})
		}
	}
}

// TestSequentialCounts takes the lock on one peer at a time and checks each
// entry's messages against the algorithm's closed form.
func TestSequentialCounts(t *testing.T) {
	for _, tt := range closedForms {
		for _, n := range []int{1, 2, 3, 5, 8} {
			t.Run(tt.v.name+"/n="+strconv.Itoa(n), func(t *testing.T) {
				c := tt.v.cluster(t, n)
				for round := range 2 {
					for id := range n {
						before := c.Stats()
						p := c.Peer(id)
						lockWithin(t, p, 10*time.Second)
						p.Unlock()
						waitQuiet(t, c) // Lamport may enter before the last reply is sent
						got := c.Stats().Sub(before)
						want := tt.want(n, id, round)
						if n == 1 {
							want = map[string]uint64{}
						}
						var total uint64
						for _, v := range want {
							total += v
						}
						assert.Equal(t, uint64(1), got.Entries, "round %d peer %d", round, id)
						assert.Equal(t, total, got.Messages, "round %d peer %d", round, id)
						assert.Equal(t, want, nonNil(got.ByKind), "round %d peer %d", round, id)
					}
				}
			})
		}
	}
}

func nonNil(m map[string]uint64) map[string]uint64 {
	if m == nil {
		return map[string]uint64{}
	}
	return m
}

// TestLocalQueue has several goroutines lock one peer: each gets an entry
// of its own, and they never overlap.
func TestLocalQueue(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			c := v.cluster(t, 3)
			var g guard
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for range 8 {
				wg.Go(func() {
					p := c.Peer(1)
					for range 20 {
						p.Lock()
						if err := g.enter(1); err != nil {
							errs <- err
						}
						g.leave()
						p.Unlock()
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			assert.Equal(t, uint64(160), c.Peer(1).Stats().Entries)
		})
	}
}

// TestCancellationStorm gives up thousands of LockContext calls at random
// short deadlines under contention, then checks every peer can still lock:
// no grant, reply or token was lost on the way.
func TestCancellationStorm(t *testing.T) {
	calls := 400
	if testing.Short() {
		calls = 100
	}
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			c := v.cluster(t, 5)
			cancellationStorm(t, c, calls, 1)
			for _, p := range c.Peers() {
				lockWithin(t, p, 10*time.Second)
				p.Unlock()
			}
		})
	}
}

func TestLockContextExpiredBeforeCall(t *testing.T) {
	c := variant{alg: RicartAgrawala}.cluster(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, c.Peer(0).LockContext(ctx), context.Canceled)
	assert.Zero(t, c.Stats().Messages, "a call whose context had already ended must send nothing")
}

func TestLockContextGivesUpWhileOtherHolds(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			c := v.cluster(t, 3)
			lockWithin(t, c.Peer(0), 5*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			require.ErrorIs(t, c.Peer(1).LockContext(ctx), context.DeadlineExceeded)
			assert.Zero(t, c.Peer(1).Fence(), "a peer that gave up holds nothing")
			c.Peer(0).Unlock()
			// Peer 1's withdrawn request completes internally; then both
			// others can still lock.
			for _, id := range []int{2, 1} {
				lockWithin(t, c.Peer(id), 5*time.Second)
				c.Peer(id).Unlock()
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	tests := []struct {
		name    string
		alg     Algorithm
		n       int
		opts    []Option
		wantMsg string
	}{
		{"zero peers", RicartAgrawala, 0, nil, "n = 0"},
		{"negative peers", Lamport, -3, nil, "n = -3"},
		{"too many peers", Centralized, MaxPeers + 1, nil, "n = 4097"},
		{"implicit replies on lamport", Lamport, 3, []Option{WithImplicitReplies()}, "WithImplicitReplies does not apply to lamport"},
		{"implicit replies on centralized", Centralized, 3, []Option{WithImplicitReplies()}, "WithImplicitReplies does not apply to centralized"},
		{"zero option", RicartAgrawala, 3, []Option{{}}, "zero Option"},
		{"unknown algorithm", Algorithm(99), 3, nil, "unknown algorithm 99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.alg, tt.n, tt.opts...)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.wantMsg)
			assert.Nil(t, c)
		})
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range Algorithms() {
		got, err := ParseAlgorithm(a.String())
		require.NoError(t, err)
		assert.Equal(t, a, got)
	}
	got, err := ParseAlgorithm("paxos")
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), `"paxos"`)
	assert.NotContains(t, Algorithms(), got, "an unknown name must give no algorithm")
	_, err = New(got, 3)
	require.ErrorIs(t, err, ErrInvalidConfig, "the value returned with the error must be refused")
}

func TestNewPeerBadInput(t *testing.T) {
	nw := NewChanNetwork(3)
	_, err := NewPeer(RicartAgrawala, 3, 3, nw.Endpoint(0))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "peer id 3")
	_, err = NewPeer(RicartAgrawala, -1, 3, nw.Endpoint(0))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "peer id -1")
	_, err = NewPeer(RicartAgrawala, 0, 3, nil)
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestUnlockWhenNotHeldPanics(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			c := v.cluster(t, 2)
			require.PanicsWithValue(t, "dmutex: unlock of unlocked mutex", c.Peer(1).Unlock)
			lockWithin(t, c.Peer(1), 5*time.Second)
			c.Peer(1).Unlock()
			require.PanicsWithValue(t, "dmutex: unlock of unlocked mutex", c.Peer(1).Unlock)
		})
	}
}

func TestPeerOutOfRangePanics(t *testing.T) {
	c := variant{alg: Centralized}.cluster(t, 2)
	require.PanicsWithValue(t, "dmutex: peer 2 out of range [0, 2)", func() { c.Peer(2) })
}

func TestCloseLifecycle(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			c, err := New(v.alg, 3, v.opts...)
			require.NoError(t, err)

			// A Lock blocked behind a holder is released by Close.
			lockWithin(t, c.Peer(0), 5*time.Second)
			blocked := make(chan error, 1)
			go func() { blocked <- c.Peer(1).LockContext(context.Background()) }()
			time.Sleep(10 * time.Millisecond)

			require.NoError(t, c.Close())
			select {
			case err := <-blocked:
				require.ErrorIs(t, err, ErrClosed)
			case <-time.After(5 * time.Second):
				t.Fatal("LockContext blocked across Close")
			}
			require.NoError(t, c.Close(), "a second Close is harmless")
			c.Peer(0).Unlock() // the hold from before Close can still be dropped

			require.ErrorIs(t, c.Peer(2).LockContext(context.Background()), ErrClosed)
			require.PanicsWithError(t, ErrClosed.Error(), c.Peer(2).Lock)
		})
	}
}

func TestFencesIncreaseInEntryOrder(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			c := v.cluster(t, 4)
			var mu sync.Mutex
			var fences []uint64
			var wg sync.WaitGroup
			for _, p := range c.Peers() {
				wg.Go(func() {
					for range 25 {
						p.Lock()
						f := p.Fence()
						mu.Lock() // under the distributed lock: appended in entry order
						fences = append(fences, f)
						mu.Unlock()
						p.Unlock()
					}
				})
			}
			wg.Wait()
			require.Len(t, fences, 100)
			for i := 1; i < len(fences); i++ {
				require.Greater(t, fences[i], fences[i-1], "entry %d", i)
			}
		})
	}
}

func TestStatsString(t *testing.T) {
	s := Stats{Entries: 2, Messages: 5, ByKind: map[string]uint64{"request": 3, "grant": 2}}
	assert.Equal(t, "entries=2 messages=5 (grant=2 request=3)", s.String())
	assert.Equal(t, "entries=0 messages=0", Stats{}.String())
}

// TestLockAllocs checks that Lock calls that wait for messages allocate
// nothing once warm: in a Ricart-Agrawala pair each entry waits for the
// other peer's reply, and its waiter comes back from a pool.
func TestLockAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("under the race detector sync.Pool drops a share of what is put back")
	}
	// allocs counts the allocations of a round in which peers 1 and 2
	// take turns: each entry needs messages (a request to the
	// coordinator, peer 0, or the token's move).
	allocs := func(t *testing.T, alg Algorithm, opts ...Option) float64 {
		c := variant{alg: alg, opts: opts}.cluster(t, 3)
		p1, p2 := c.Peer(1), c.Peer(2)
		round := func() {
			p1.Lock()
			p1.Unlock()
			p2.Lock()
			p2.Unlock()
		}
		for range 10 {
			round()
		}
		return testing.AllocsPerRun(500, round)
	}
	assert.Zero(t, allocs(t, RicartAgrawala), "ricart-agrawala")
	// With recovery on and no failure, crash exclusion, regeneration and
	// failover must cost no allocation either. (A Suzuki-Kasami token
	// that moves is a new Token: the receiver owns what it is given.)
	for _, alg := range recoveryAlgorithms {
		plain := allocs(t, alg)
		assert.Equal(t, plain, allocs(t, alg, WithRecovery(), WithUnreachableAfter(time.Minute)), "%v: with recovery, against %v without", alg, plain)
	}
}

// endsOnWait is a context that is live when LockContext first asks and
// ended from its first Done on, so that the call queues a waiter and then
// gives it up. It allocates nothing, and arm makes it live again.
type endsOnWait struct {
	context.Context
	done  chan struct{}
	ended bool
}

func (c *endsOnWait) Done() <-chan struct{} { c.ended = true; return c.done }

func (c *endsOnWait) Err() error {
	if c.ended {
		return context.Canceled
	}
	return nil
}

func (c *endsOnWait) arm() { c.ended = false }

// TestAbandonedWaitAllocsNothing gives up a queued LockContext behind a
// holder, again and again: abandon must return the waiter to the pool, so
// that a caller whose context ends costs no allocation either.
func TestAbandonedWaitAllocsNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("under the race detector sync.Pool drops a share of what is put back")
	}
	c := variant{alg: RicartAgrawala}.cluster(t, 2)
	p0, p1 := c.Peer(0), c.Peer(1)
	ctx := &endsOnWait{Context: context.Background(), done: make(chan struct{})}
	close(ctx.done)
	wrong := 0
	round := func() {
		p1.Lock()
		ctx.arm()
		if err := p0.LockContext(ctx); err != context.Canceled {
			wrong++
		}
		p1.Unlock()
	}
	for range 10 {
		round()
	}
	assert.Zero(t, testing.AllocsPerRun(500, round))
	assert.Zero(t, wrong, "every LockContext behind the holder gives up with its context's error")
}

// TestAbandonAfterGrantAndClose plays the race that abandon documents: a
// waiter whose context ended was given the critical section, and the peer
// was closed, before abandon took the peer's mutex. The caller must get
// its context's error, not a hold on a closed peer, and the entry must not
// count.
func TestAbandonAfterGrantAndClose(t *testing.T) {
	p, _ := scriptedPeer(t, newScripted()) // its machine enters on every request
	w := waiterPool.Get().(*waiter)
	p.mu.Lock()
	p.waiters = append(p.waiters, w)
	p.d.waiting++                    // w waits, as request queues it
	p.d.ask(p.host(), &p.out, false) // the machine enters: the driver gives the critical section to w and signals it
	require.True(t, p.d.inside)
	p.mu.Unlock()
	require.NoError(t, p.Close())
	require.ErrorIs(t, p.abandon(w, context.Canceled), context.Canceled)
	p.mu.Lock()
	assert.False(t, p.d.inside, "the hold is dropped")
	assert.Zero(t, p.d.holdFence)
	p.mu.Unlock()
	assert.Zero(t, p.Stats().Entries, "no call returned nil")
}

// closeFails is a transport whose Close reports an error after closing.
type closeFails struct{ *ChanEndpoint }

var errCloseFails = errors.New("close failed")

func (c closeFails) Close() error {
	_ = c.ChanEndpoint.Close()
	return errCloseFails
}

// TestCloseReturnsTransportError checks that the first Close returns the
// transport's error, and a second Close nil.
func TestCloseReturnsTransportError(t *testing.T) {
	nw := NewChanNetwork(2)
	p, err := NewPeer(Centralized, 1, 2, closeFails{nw.Endpoint(1)})
	require.NoError(t, err)
	require.ErrorIs(t, p.Close(), errCloseFails)
	require.NoError(t, p.Close())
	require.NoError(t, nw.Endpoint(0).Close())
}

// lateCloser is a transport whose Close returns before it closes its
// receive channel, as a network transport may while its reader drains.
type lateCloser struct {
	in      chan Message
	called  chan struct{}
	release chan struct{}
}

func (l *lateCloser) Send(int, Message) error { return nil }
func (l *lateCloser) Recv() <-chan Message    { return l.in }
func (l *lateCloser) Close() error {
	close(l.called)
	go func() {
		<-l.release
		close(l.in)
	}()
	return nil
}

// TestCloseWaitsForTheReceiveGoroutine checks that Close returns only
// after the peer's receive goroutine has exited, even when the transport's
// Close returns first.
func TestCloseWaitsForTheReceiveGoroutine(t *testing.T) {
	tr := &lateCloser{in: make(chan Message), called: make(chan struct{}), release: make(chan struct{})}
	p, err := NewPeer(Centralized, 1, 2, tr)
	require.NoError(t, err)
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	<-tr.called
	waitParked(t, "(*Peer).Close(", "sync.WaitGroup.Wait", "Close")
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the receive goroutine exited", err)
	default:
	}
	close(tr.release)
	require.NoError(t, <-closed)
}
