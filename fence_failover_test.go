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
	changed chan struct{}
}

func newScriptReach() *scriptReach {
	return &scriptReach{scriptTransport: newScriptTransport(), down: map[int]time.Time{}, changed: make(chan struct{}, 1)}
}

func (s *scriptReach) Reachable(id int) (bool, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, down := s.down[id]
	return !down, t
}

func (s *scriptReach) ReachChanged() <-chan struct{} { return s.changed }

// cut makes peer id unreachable from now on.
func (s *scriptReach) cut(id int) {
	s.mu.Lock()
	s.down[id] = time.Now()
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// TestFailoverFenceEpoch: a new coordinator's messages carry a fence of
// the new epoch from the moment it suspects the old one, so that a peer
// it grants enters above every fence the crashed coordinator handed out,
// even if that peer suspects nobody yet and so starts no epoch itself.
// (With the epoch taken only at the suspecter's own entry, the grant
// carried fence 0, and the grantee entered with fence 1, which the
// crashed coordinator may have held.)
func TestFailoverFenceEpoch(t *testing.T) {
	tr := newScriptReach()
	p, err := NewPeer(Centralized, 1, 3, tr, WithRecovery(), WithUnreachableAfter(time.Millisecond))
	require.NoError(t, err)
	defer p.Close()
	tr.cut(0)
	for _, to := range []int{0, 2} {
		m := tr.nextSent(t)
		require.Equal(t, KindCoordinator, m.Kind)
		require.Equal(t, to, m.To)
		assert.Equal(t, uint64(FenceEpoch), m.Fence, "COORDINATOR to peer %d", to)
	}
	tr.in <- Message{Kind: KindStatus, From: 2, To: 1, TS: 1}
	tr.in <- Message{Kind: KindRequest, From: 2, To: 1, TS: 1, Ref: 1}
	m := tr.nextSent(t)
	require.Equal(t, Message{Kind: KindGrant, From: 1, To: 2, TS: 1, Ref: 1, Fence: FenceEpoch}, m)

	// The grantee, which suspects nobody, enters above the epoch.
	tr2 := newScriptReach()
	q, err := NewPeer(Centralized, 2, 3, tr2, WithRecovery(), WithUnreachableAfter(time.Hour))
	require.NoError(t, err)
	defer q.Close()
	locked := make(chan error, 1)
	go func() { locked <- q.LockContext(context.Background()) }()
	require.Equal(t, KindRequest, tr2.nextSent(t).Kind)
	tr2.in <- Message{Kind: KindCoordinator, From: 1, To: 2, TS: 1, Fence: FenceEpoch}
	require.Equal(t, KindRequest, tr2.nextSent(t).Kind, "the report")
	tr2.in <- m
	require.NoError(t, <-locked)
	assert.Equal(t, uint64(FenceEpoch+1), q.Fence())
	q.Unlock()
}
