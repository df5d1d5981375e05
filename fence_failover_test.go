package dmutex

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scriptReach is a scriptTransport whose Reachability the test sets.
type scriptReach struct {
	*scriptTransport
	mu      sync.Mutex
	down    map[int]time.Time
	back    map[int]time.Time // when a reachable peer came back from a cut, if it did
	changed chan struct{}
	asked   chan int // if not nil, every Reachable call sends its id here
}

func newScriptReach() *scriptReach {
	return &scriptReach{scriptTransport: newScriptTransport(), down: map[int]time.Time{}, back: map[int]time.Time{}, changed: make(chan struct{}, 1)}
}

func (s *scriptReach) Reachable(id int) (bool, time.Time) {
	if s.asked != nil {
		s.asked <- id
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, down := s.down[id]; down {
		return false, t
	}
	return true, s.back[id]
}

// signal makes the peer's watcher ask again, as a change would.
func (s *scriptReach) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *scriptReach) ReachChanged() <-chan struct{} { return s.changed }

// cut makes peer id unreachable from now on.
func (s *scriptReach) cut(id int) {
	s.mu.Lock()
	s.down[id] = time.Now()
	s.mu.Unlock()
	s.signal()
}

// cutAndHeal makes peer id come back, now, from a cut that the peer's
// watcher never saw (a cut and a heal that coalesced into one signal).
func (s *scriptReach) cutAndHeal(id int) {
	s.mu.Lock()
	s.back[id] = time.Now()
	s.mu.Unlock()
	s.signal()
}

// TestRecoveryAsksAgainAfterACoalescedCut: a peer whose transport says
// that peer 1 is back from a cut asks peer 1 again for what it waits for,
// although its watcher never saw peer 1 down: the cut and the heal came
// between two looks, and what went across meanwhile may be lost. A look
// that finds no newer cut asks nothing again.
func TestRecoveryAsksAgainAfterACoalescedCut(t *testing.T) {
	tr := newScriptReach()
	tr.asked = make(chan int, 16)
	p, err := NewPeer(RicartAgrawala, 0, 2, tr, WithRecovery(), WithUnreachableAfter(time.Hour))
	require.NoError(t, err)
	defer p.Close()
	looked := func() { // the watcher asked about peer 1 (and, the next time, had applied that look)
		t.Helper()
		select {
		case <-tr.asked:
		case <-time.After(10 * time.Second):
			t.Fatal("the watcher never asked")
		}
	}
	looked()
	locked := make(chan error, 1)
	go func() { locked <- p.LockContext(context.Background()) }()
	first := tr.nextSent(t)
	require.Equal(t, KindRequest, first.Kind)
	tr.cutAndHeal(1)
	looked()
	assert.Equal(t, first, tr.nextSent(t), "the request again")
	tr.signal() // a look with nothing new
	looked()
	tr.signal()
	looked()
	select {
	case m := <-tr.sent:
		t.Fatalf("sent %v after a look that found no new cut", m)
	default:
	}
	tr.in <- Message{Kind: KindReply, From: 1, To: 0, TS: 1, Ref: first.TS}
	require.NoError(t, <-locked)
	p.Unlock()
}

// TestFailoverFenceEpoch: at run time, the grantee of a new coordinator
// enters with a fence of the new term's epoch, above every fence the
// crashed coordinator can have handed out, although it suspects nobody
// and so starts no epoch of its own; and so does the new coordinator.
func TestFailoverFenceEpoch(t *testing.T) {
	tr := newScriptReach()
	q, err := NewPeer(Centralized, 2, 3, tr, WithRecovery(), WithUnreachableAfter(time.Hour))
	require.NoError(t, err)
	defer q.Close()
	locked := make(chan error, 1)
	go func() { locked <- q.LockContext(context.Background()) }()
	require.Equal(t, KindRequest, tr.nextSent(t).Kind)
	tr.in <- Message{Kind: KindCoordinator, From: 1, To: 2, TS: 1}
	require.Equal(t, Message{Kind: KindRequest, From: 2, To: 1, TS: 1, Ref: 1}, tr.nextSent(t), "the report")
	tr.in <- Message{Kind: KindGrant, From: 1, To: 2, TS: 1, Ref: 1}
	require.NoError(t, <-locked)
	assert.Equal(t, uint64(FenceEpoch+1), q.Fence())
	q.Unlock()

	tr1 := newScriptReach()
	p, err := NewPeer(Centralized, 1, 3, tr1, WithRecovery(), WithUnreachableAfter(time.Millisecond))
	require.NoError(t, err)
	defer p.Close()
	tr1.cut(0)
	for _, to := range []int{0, 2} {
		m := tr1.nextSent(t)
		require.Equal(t, Message{Kind: KindCoordinator, From: 1, To: to, TS: 1}, Message{Kind: m.Kind, From: m.From, To: m.To, TS: m.TS})
	}
	tr1.in <- Message{Kind: KindStatus, From: 2, To: 1, TS: 1}
	lockWithin(t, p, time.Minute)
	assert.Greater(t, p.Fence(), uint64(FenceEpoch), "the new coordinator's own hold")
	p.Unlock()
}

// TestFailoverFencesPastTheEpochs: a term's holds fence above
// term·FenceEpoch only while that fits below MaxFence; from term
// MaxFence/FenceEpoch on (reached only after a billion takeovers, or by
// forged announcements) fences count on by one.
func TestFailoverFencesPastTheEpochs(t *testing.T) {
	c := recoveryMachine(t, 1, 3)
	last := uint64(MaxFence/FenceEpoch - 1)
	c.term = last
	assert.Equal(t, last*FenceEpoch+1, c.nextFence(5), "the last term with an epoch")
	for _, term := range []uint64{last + 1, maxTerm} {
		c.term = term
		assert.Equal(t, uint64(6), c.nextFence(5), "term %d", term)
	}
}

// TestFailoverSuspicionRefusesATry: a try out to a coordinator that then
// becomes suspected is refused when its peer takes over: TryLockContext
// returns ErrLocked at once rather than wait for an answer that will not
// come.
func TestFailoverSuspicionRefusesATry(t *testing.T) {
	tr := newScriptReach()
	p, err := NewPeer(Centralized, 1, 3, tr, WithRecovery(), WithUnreachableAfter(time.Millisecond))
	require.NoError(t, err)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tried := make(chan error, 1)
	go func() { tried <- p.TryLockContext(ctx) }()
	require.Equal(t, Message{Kind: KindTry, From: 1, To: 0, Ref: 1}, tr.nextSent(t), "the try")
	tr.cut(0)
	require.ErrorIs(t, <-tried, ErrLocked)
}

// TestRecoveryNeverSuspectsAPeerNeverReached: with WithRecovery, a peer
// that was never reachable (a process not started yet) is not suspected,
// however long it stays away: a Ricart-Agrawala peer that has peer 1's
// reply does not enter without peer 2's, and its LockContext says that
// peer 2 is unreachable. Once peer 2 has been reached, a later cut is a
// suspicion as usual, and the peer goes on without it.
func TestRecoveryNeverSuspectsAPeerNeverReached(t *testing.T) {
	tr := newScriptReach()
	tr.down[2] = time.Now()
	p, err := NewPeer(RicartAgrawala, 0, 3, tr, WithRecovery(), WithUnreachableAfter(time.Millisecond))
	require.NoError(t, err)
	defer p.Close()
	locked := make(chan error, 1)
	go func() { locked <- p.LockContext(context.Background()) }()
	var req Message
	for range 2 { // the request to peers 1 and 2
		req = tr.nextSent(t)
		require.Equal(t, KindRequest, req.Kind)
	}
	tr.in <- Message{Kind: KindReply, From: 1, To: 0, TS: 1, Ref: req.TS}
	err = <-locked
	var ue *UnreachableError
	require.ErrorAs(t, err, &ue, "peer 2 was never reached")
	assert.Equal(t, []int{2}, ue.Peers)
	assert.Empty(t, p.Suspected())

	tr.mu.Lock()
	delete(tr.down, 2)
	tr.mu.Unlock()
	tr.signal()
	eventually(t, "peer 2 met", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.reach.met[2] && !p.reach.unheard[2]
	})
	tr.cut(2)
	waitSuspected(t, p, []int{2})
	go func() { locked <- p.LockContext(context.Background()) }()
	for {
		m := tr.nextSent(t)
		if m.Kind == KindRequest && m.To == 1 {
			tr.in <- Message{Kind: KindReply, From: 1, To: 0, TS: m.TS + 1, Ref: m.TS}
			break
		}
	}
	require.NoError(t, <-locked, "peer 2, once met and then cut, is suspected, and the peer goes on without it")
	p.Unlock()
}

// TestRecoveryLooksAgainBeforeRefusing: the view that refuses a call for
// a peer never reached is the watcher's last look. Peer 2 is unheard, then
// comes up, and the transport knows it before the watcher has looked
// again (here: never told); LockContext and TryLockContext look at the
// transport themselves before refusing, and go ahead. dmutexpeer's
// staggered start met the refusal on CI: peer 0's first entry, just after
// its barrier had heard from peer 2, named peer 2 unreachable.
func TestRecoveryLooksAgainBeforeRefusing(t *testing.T) {
	for _, try := range []bool{false, true} {
		tr := newScriptReach()
		tr.down[2] = time.Now()
		p, err := NewPeer(RicartAgrawala, 0, 3, tr, WithRecovery(), WithUnreachableAfter(time.Millisecond))
		require.NoError(t, err)
		eventually(t, "peer 2 unheard", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.reach.unheard[2]
		})
		tr.mu.Lock()
		delete(tr.down, 2) // up, and the watcher not told
		tr.mu.Unlock()

		locked := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if try {
				locked <- p.TryLockContext(ctx)
			} else {
				locked <- p.LockContext(ctx)
			}
		}()
		kind := KindRequest
		if try {
			kind = KindTry
		}
		for range 2 { // the request (or try) to peers 1 and 2, each answered
			m := tr.nextSent(t)
			require.Equal(t, kind, m.Kind, "try %v", try)
			tr.in <- Message{Kind: KindReply, From: m.To, To: 0, TS: m.TS + 1, Ref: m.TS}
		}
		require.NoError(t, <-locked, "try %v: refused for a peer the transport has reached", try)
		p.Unlock()
		p.Close()
	}
}

// TestRecoveryNeverReachedWithinTheBound: a peer never reached counts as
// unheard only once it has been away for the bound, as a suspicion would:
// until then a request that needs it waits, and a LockContext that gives
// up returns its context's error alone.
func TestRecoveryNeverReachedWithinTheBound(t *testing.T) {
	tr := newScriptReach()
	tr.down[2] = time.Now()
	p, err := NewPeer(RicartAgrawala, 0, 3, tr, WithRecovery(), WithUnreachableAfter(time.Hour))
	require.NoError(t, err)
	defer p.Close()
	tr.signal()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	assert.Equal(t, context.DeadlineExceeded, p.LockContext(ctx))
	assert.Empty(t, p.Suspected())
}

// TestRecoveryAsksAgainAfterASeenCut: a cut that the watcher saw, shorter
// than the bound, makes the peer ask peer 1 again once it is back, though
// the transport gives no time for the heal (as gRPC, which loses nothing
// while a link is down, does not); while peer 1 is still down, looks ask
// nothing. Without recovery, the machine is told nothing of the cut, and
// nothing is sent.
func TestRecoveryAsksAgainAfterASeenCut(t *testing.T) {
	start := func(t *testing.T, alg Algorithm, opts ...Option) (*scriptReach, *Peer, func()) {
		tr := newScriptReach()
		tr.asked = make(chan int, 16)
		p, err := NewPeer(alg, 0, 2, tr, append(opts, WithUnreachableAfter(time.Hour))...)
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		looked := func() { // the watcher asked about peer 1 (and, the next time, had applied that look)
			t.Helper()
			select {
			case <-tr.asked:
			case <-time.After(10 * time.Second):
				t.Fatal("the watcher never asked")
			}
		}
		looked()
		return tr, p, looked
	}
	quiet := func(t *testing.T, tr *scriptReach, looked func(), what string) {
		t.Helper()
		for range 2 {
			tr.signal()
			looked()
		}
		select {
		case m := <-tr.sent:
			t.Fatalf("sent %v %s", m, what)
		default:
		}
	}
	heal := func(tr *scriptReach) {
		tr.mu.Lock()
		delete(tr.down, 1)
		tr.mu.Unlock()
		tr.signal()
	}

	t.Run("recovery", func(t *testing.T) {
		tr, p, looked := start(t, RicartAgrawala, WithRecovery())
		locked := make(chan error, 1)
		go func() { locked <- p.LockContext(context.Background()) }()
		first := tr.nextSent(t)
		require.Equal(t, KindRequest, first.Kind)
		tr.cut(1)
		looked()
		quiet(t, tr, looked, "while peer 1 is down")
		heal(tr)
		looked()
		assert.Equal(t, first, tr.nextSent(t), "the request again")
		tr.in <- Message{Kind: KindReply, From: 1, To: 0, TS: 1, Ref: first.TS}
		require.NoError(t, <-locked)
		p.Unlock()
	})

	t.Run("no recovery", func(t *testing.T) {
		tr, _, looked := start(t, Centralized)
		tr.cut(1)
		looked()
		heal(tr)
		looked()
		quiet(t, tr, looked, "after a cut, without recovery")
	})
}
