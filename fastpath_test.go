package dmutex

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scripted is a machine for runtime tests: it enters at once on every
// request and records every event it is given.
type scripted struct {
	mu           *sync.Mutex // guards log, which the test reads
	log          *[]eventKind
	requests     int  // requests seen; part of the state if countInState
	countInState bool // the state changes every round, so rounds are no no-op
	releaseSends bool // release sends a message, as a token ring passes its token
	requestSends bool // a request that enters at once sends a message all the same
	inside       bool

	waitOnRequest   bool // a request waits (for nothing) instead of entering at once
	refuseOnMessage bool // every message refuses the outstanding try
	enterOnRelease  bool // broken: the release enters
}

func (s *scripted) step(ev event, out *output) {
	s.mu.Lock()
	*s.log = append(*s.log, ev.kind)
	s.mu.Unlock()
	switch ev.kind {
	case evRequest:
		s.requests++
		if !s.waitOnRequest {
			s.inside = true
			out.enter()
		}
		if s.requestSends {
			out.send(Message{Kind: KindRequest, From: 0, To: 1})
		}
	case evMessage:
		if s.refuseOnMessage {
			out.refuse()
		}
	case evRelease:
		s.inside = false
		if s.releaseSends {
			out.send(Message{Kind: KindToken, From: 0, To: 1})
		}
		if s.enterOnRelease {
			out.enter()
		}
	}
}

func (s *scripted) clone() machine { c := *s; return &c }

func (s *scripted) appendState(b []byte) []byte {
	b = appendBool(b, s.inside)
	if s.countInState {
		b = appendInt(b, s.requests)
	}
	return b
}

// scriptedPeer starts peer 0 of a two-endpoint network around m; the test
// plays peer 1 through the returned endpoint.
func scriptedPeer(t *testing.T, m *scripted) (*Peer, *ChanEndpoint) {
	t.Helper()
	nw := NewChanNetwork(2)
	p := startPeer(Centralized, 0, 2, m, nw.Endpoint(0), &config{})
	t.Cleanup(func() {
		require.NoError(t, p.Close())
		require.NoError(t, nw.Endpoint(1).Close())
	})
	return p, nw.Endpoint(1)
}

func (s *scripted) events() []eventKind {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]eventKind(nil), *s.log...)
}

func newScripted() *scripted { return &scripted{mu: new(sync.Mutex), log: new([]eventKind)} }

// TestFastPathArmsOnlyOnNoOpRounds takes 100 entries on a peer whose
// machine enters alone, and checks the runtime skips the machine only when
// a round of release and request has been shown to change nothing and
// send nothing; fences and entry counts must not notice either way.
func TestFastPathArmsOnlyOnNoOpRounds(t *testing.T) {
	tests := []struct {
		name         string
		countInState bool
		releaseSends bool
		requestSends bool
		wantArmed    bool
	}{
		{name: "state repeats, release silent", wantArmed: true},
		{name: "state changes every round", countInState: true},
		{name: "release sends a message", releaseSends: true},
		{name: "request sends a message", requestSends: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newScripted()
			m.countInState, m.releaseSends, m.requestSends = tt.countInState, tt.releaseSends, tt.requestSends
			p, _ := scriptedPeer(t, m)
			const entries = 100
			var last uint64
			for i := range entries {
				p.Lock()
				f := p.Fence()
				require.Greater(t, f, last, "entry %d", i)
				last = f
				p.Unlock()
				assert.Zero(t, p.Fence(), "entry %d: no fence outside", i)
			}
			assert.Equal(t, uint64(entries), p.Stats().Entries)
			assert.Equal(t, uint64(entries), last, "one fence per entry")
			requests := 0
			for _, e := range m.events() {
				if e == evRequest {
					requests++
				}
			}
			if tt.wantArmed {
				assert.Equal(t, 2, requests, "armed after two rounds: the machine sees one long hold")
				assert.NotZero(t, p.fast.word.Load()&fastArmed)
			} else {
				assert.Equal(t, entries, requests, "every entry must reach the machine")
				assert.Zero(t, p.fast.word.Load())
			}
		})
	}
}

// TestFastPathDisarms arms the fast path, then interrupts it with a
// message, a second caller or Close, and checks the machine is given the
// skipped release first where the caller had left, and that the peer
// still counts and fences right.
func TestFastPathDisarms(t *testing.T) {
	arm := func(t *testing.T) (*scripted, *Peer, *ChanEndpoint) {
		m := newScripted()
		p, other := scriptedPeer(t, m)
		for range 3 {
			p.Lock()
			p.Unlock()
		}
		require.NotZero(t, p.fast.word.Load()&fastArmed, "precondition: armed")
		return m, p, other
	}
	msg := Message{Kind: KindRequest, From: 1, To: 0}
	waitEvents := func(t *testing.T, m *scripted, n int) []eventKind {
		require.Eventually(t, func() bool { return len(m.events()) >= n }, 5*time.Second, time.Millisecond)
		return m.events()
	}

	t.Run("message while outside", func(t *testing.T) {
		m, p, other := arm(t)
		require.NoError(t, other.Send(0, msg))
		got := waitEvents(t, m, 5)
		// request, release, request (armed), then the replayed release
		// before the message.
		assert.Equal(t, []eventKind{evRequest, evRelease, evRequest, evRelease, evMessage}, got)
		assert.Zero(t, p.fast.word.Load())
		p.Lock()
		assert.Equal(t, uint64(4), p.Fence())
		p.Unlock()
		assert.Equal(t, uint64(4), p.Stats().Entries)
	})
	t.Run("message while inside", func(t *testing.T) {
		m, p, other := arm(t)
		p.Lock() // fast entry 4
		require.NoError(t, other.Send(0, msg))
		got := waitEvents(t, m, 4)
		assert.Equal(t, []eventKind{evRequest, evRelease, evRequest, evMessage}, got,
			"the caller inside keeps the machine's hold: no release yet")
		assert.Equal(t, uint64(4), p.Fence())
		p.Unlock()
		assert.Equal(t, evRelease, m.events()[4])
		assert.Equal(t, uint64(4), p.Stats().Entries)
	})
	t.Run("second caller", func(t *testing.T) {
		m, p, _ := arm(t)
		p.Lock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Lock() // disarms and waits as an ordinary waiter
			p.Unlock()
		}()
		require.Eventually(t, func() bool { return p.fast.word.Load() == 0 }, 5*time.Second, time.Millisecond)
		p.Unlock()
		<-done
		assert.Equal(t, uint64(5), p.Stats().Entries)
		assert.Equal(t, []eventKind{evRequest, evRelease, evRequest, evRelease, evRequest, evRelease}, m.events(),
			"the second caller's entry is an ordinary round")
		p.Lock()
		assert.Zero(t, p.fast.word.Load(), "the second caller's hold was not local: its release starts no probe")
		p.Unlock()
	})
	t.Run("try that lost the race to a fast entry", func(t *testing.T) {
		_, p, _ := arm(t)
		p.Lock() // fast entry 4
		// A TryLockContext whose lock-free check ran just before that
		// entry reaches the peer's mutex only now: it must see the hold.
		w, _, err := p.try()
		assert.Nil(t, w)
		require.ErrorIs(t, err, ErrLocked)
		p.Unlock()
		assert.Equal(t, uint64(4), p.Stats().Entries)
	})
	t.Run("close while inside", func(t *testing.T) {
		_, p, _ := arm(t)
		p.Lock()
		require.NoError(t, p.Close())
		require.ErrorIs(t, p.LockContext(context.Background()), ErrClosed)
		p.Unlock() // the hold from before Close can still be dropped
		require.ErrorIs(t, p.LockContext(context.Background()), ErrClosed)
		assert.Equal(t, uint64(4), p.Stats().Entries)
	})
	t.Run("close while outside", func(t *testing.T) {
		m, p, _ := arm(t)
		require.NoError(t, p.Close())
		assert.Equal(t, []eventKind{evRequest, evRelease, evRequest}, m.events(),
			"a closed peer replays no release: its machine is not stepped again")
		require.ErrorIs(t, p.LockContext(context.Background()), ErrClosed)
		require.PanicsWithError(t, ErrClosed.Error(), p.Lock)
	})
}

// TestFastPathCoordinatorUnderContention has centralized's coordinator
// take entries through the fast path while the other peers contend: no
// two holders ever overlap and fences keep increasing in entry order.
func TestFastPathCoordinatorUnderContention(t *testing.T) {
	c := variant{alg: Centralized}.cluster(t, 4)
	var (
		g      guard
		mu     sync.Mutex
		fences []uint64
		wg     sync.WaitGroup
		errs   = make(chan error, 4)
	)
	rounds := 300
	if testing.Short() {
		rounds = 60
	}
	for _, p := range c.Peers() {
		wg.Go(func() {
			n := rounds
			if p.ID() != 0 {
				n = rounds / 10
			}
			for range n {
				p.Lock()
				if err := g.enter(p.ID()); err != nil {
					errs <- err
				}
				mu.Lock()
				fences = append(fences, p.Fence())
				mu.Unlock()
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
	require.Len(t, fences, rounds+3*(rounds/10))
	for i := 1; i < len(fences); i++ {
		require.Greater(t, fences[i], fences[i-1], "entry %d", i)
	}
	assert.Equal(t, uint64(len(fences)), c.Stats().Entries)
}

// TestFastPathServesLockContext checks that LockContext, like Lock,
// re-enters through the armed fast path, without the machine.
func TestFastPathServesLockContext(t *testing.T) {
	m := newScripted()
	p, _ := scriptedPeer(t, m)
	const entries = 100
	for range entries {
		require.NoError(t, p.LockContext(context.Background()))
		p.Unlock()
	}
	assert.Equal(t, uint64(entries), p.Stats().Entries)
	requests := 0
	for _, e := range m.events() {
		if e == evRequest {
			requests++
		}
	}
	assert.Equal(t, 2, requests, "armed after two rounds: the machine sees one long hold")
	assert.NotZero(t, p.fast.word.Load()&fastArmed)
}

// TestFastPathArmsOnTryLock checks that an idle token holder that
// re-enters by TryLock alone arms the fast path, as one that re-enters by
// Lock does.
func TestFastPathArmsOnTryLock(t *testing.T) {
	c := variant{alg: SuzukiKasami}.cluster(t, 2)
	p := c.Peer(0) // holds the idle token
	for range 3 {
		require.True(t, p.TryLock())
		p.Unlock()
	}
	assert.NotZero(t, p.fast.word.Load()&fastArmed)
	assert.Equal(t, uint64(3), p.Stats().Entries)
}

// TestFastPathArmsOnlyAfterCleanRounds: a message ends any probe, since
// the machine is about to change, so a round with a message in it proves
// nothing, and neither does a request that sent one: the fast path arms
// only after a clean round. After a message the backoff of failed probes
// starts over, so that a machine whose state now repeats arms at once.
func TestFastPathArmsOnlyAfterCleanRounds(t *testing.T) {
	armed := func(p *Peer) bool { return p.fast.word.Load()&fastArmed != 0 }
	msg := Message{Kind: KindRequest, From: 1, To: 0}

	p, _ := scriptedPeer(t, newScripted())
	p.Lock()
	p.deliver(msg) // during the local hold
	p.Unlock()
	p.Lock()
	assert.False(t, armed(p), "a round with a message in it armed the fast path")
	p.Unlock()
	p.Lock()
	assert.True(t, armed(p), "the clean round after it arms")
	p.Unlock()

	// A probe whose request sends a message proves nothing either, even
	// when the state repeats.
	m := newScripted()
	p, _ = scriptedPeer(t, m)
	p.Lock()
	p.Unlock() // a local hold: the release starts a probe
	p.mu.Lock()
	m.requestSends = true
	p.mu.Unlock()
	p.Lock()
	assert.False(t, armed(p), "a request that sent a message armed the fast path")
	p.Unlock()

	m = newScripted()
	m.countInState = true // every probe fails, and backs off
	p, _ = scriptedPeer(t, m)
	skipping := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.fast.skip > 0
	}
	for i := 0; !skipping(); i++ {
		require.Less(t, i, 20, "no probe failed")
		p.Lock()
		p.Unlock()
	}
	p.deliver(msg)
	p.mu.Lock()
	m.countInState = false // rounds repeat from now on
	p.mu.Unlock()
	p.Lock()
	p.Unlock()
	p.Lock()
	assert.True(t, armed(p), "the backoff starts over after a message")
	p.Unlock()
}

// roundsToArm takes rounds of Lock and Unlock on p and returns the number
// of the first Lock that finds the fast path armed, which it then leaves.
func roundsToArm(t *testing.T, p *Peer) int {
	t.Helper()
	for i := 1; i <= 20; i++ {
		p.Lock()
		armed := p.fast.word.Load()&fastArmed != 0
		p.Unlock()
		if armed {
			return i
		}
	}
	t.Fatal("the fast path did not arm in 20 rounds")
	return 0
}

// failProbes takes rounds on p, whose machine m must then change its
// state every round, until a failed probe has raised the backoff to want;
// it returns with that round left.
func failProbes(t *testing.T, p *Peer, m *scripted, want uint32) {
	t.Helper()
	p.mu.Lock()
	m.countInState = true
	p.mu.Unlock()
	for i := 0; ; i++ {
		require.Less(t, i, 20, "no probe raised the backoff to %d", want)
		p.Lock()
		p.mu.Lock()
		backoff := p.fast.backoff
		p.mu.Unlock()
		p.Unlock()
		if backoff == want {
			break
		}
	}
	p.mu.Lock()
	m.countInState = false // rounds repeat from now on
	p.mu.Unlock()
}

// holdThroughADisarm takes one fast entry on p, whose path must be armed,
// and a try whose lock-free check lost the race to that entry: the try
// disarms, so the caller inside now holds the machine's hold; then it
// leaves.
func holdThroughADisarm(t *testing.T, p *Peer) {
	t.Helper()
	p.Lock() // fast entry
	w, _, err := p.try()
	require.Nil(t, w)
	require.ErrorIs(t, err, ErrLocked)
	require.Zero(t, p.fast.word.Load(), "precondition: the try disarmed")
	p.Unlock()
}

// TestFastPathBacksOff: after a failed probe, the next backoff local
// holds pass unprobed, the one after starts a probe, and the next entry
// arms (if the state now repeats), so arming takes backoff + 1 rounds.
// Each failed probe doubles the backoff; a hold whose request sent a
// message is no local hold and does not count; and once the path has
// armed, the next failed probe backs off from 1 again, also when the
// path was given up without a message (a try that found a fast holder
// inside).
func TestFastPathBacksOff(t *testing.T) {
	for _, backoff := range []uint32{1, 2, 4} {
		t.Run(fmt.Sprintf("backoff %d", backoff), func(t *testing.T) {
			m := newScripted()
			p, _ := scriptedPeer(t, m)
			failProbes(t, p, m, backoff)
			assert.Equal(t, int(backoff)+1, roundsToArm(t, p))
		})
	}
	t.Run("a hold whose request sent a message", func(t *testing.T) {
		m := newScripted()
		p, _ := scriptedPeer(t, m)
		failProbes(t, p, m, 2) // that round left one more to skip
		p.mu.Lock()
		m.requestSends = true
		p.mu.Unlock()
		p.Lock()
		p.Unlock()
		p.mu.Lock()
		m.requestSends = false
		p.mu.Unlock()
		assert.Equal(t, 3, roundsToArm(t, p), "the hold that sent a message counted against the backoff")
	})
	t.Run("after the path armed", func(t *testing.T) {
		m := newScripted()
		p, _ := scriptedPeer(t, m)
		failProbes(t, p, m, 2)
		require.Equal(t, 3, roundsToArm(t, p))
		holdThroughADisarm(t, p)
		failProbes(t, p, m, 1)
		assert.Equal(t, 2, roundsToArm(t, p), "the backoff did not start over when the path armed")
	})
}

// TestFastPathProbesOnlyLocalHolds: a probe starts only at the release
// of a hold entered on the Lock goroutine that sent nothing. A hold the
// machine gave a queued caller, or one a disarm handed back to the
// machine, is not one, so the path arms two rounds after it, not one.
func TestFastPathProbesOnlyLocalHolds(t *testing.T) {
	t.Run("a hold handed back by a disarm", func(t *testing.T) {
		p, _ := scriptedPeer(t, newScripted())
		require.Equal(t, 2, roundsToArm(t, p))
		holdThroughADisarm(t, p)
		assert.Equal(t, 2, roundsToArm(t, p))
	})
	t.Run("a hold admitted from the queue", func(t *testing.T) {
		p, _ := scriptedPeer(t, newScripted())
		p.Lock() // a local hold, not yet armed
		w, _, err := p.request(true)
		require.NoError(t, err)
		require.NotNil(t, w, "precondition: queued behind the hold")
		p.Unlock() // the machine enters again, for w
		<-w.ch
		require.NoError(t, w.done())
		p.Unlock() // w's hold, which was not local
		assert.Equal(t, 2, roundsToArm(t, p))
	})
}
