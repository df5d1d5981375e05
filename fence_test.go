package dmutex

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fencedStore is the store of the fencing contract: it rejects a write
// whose fence is lower than the highest it has accepted.
type fencedStore struct {
	mu       sync.Mutex
	highest  uint64
	accepted []string
	rejected []string
}

func (s *fencedStore) write(fence uint64, what string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence == 0 || fence < s.highest {
		s.rejected = append(s.rejected, what)
		return false
	}
	s.highest = fence
	s.accepted = append(s.accepted, what)
	return true
}

// TestFenceFloorAcrossRestarts runs a cluster against a fenced store,
// restarts it with the store's highest fence as its floor, and checks
// that every write of the new cluster is accepted while a holder of the
// old cluster that wakes late is rejected. Without the floor, the new
// cluster's first write is rejected: the reset loses it.
func TestFenceFloorAcrossRestarts(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			const n = 4
			var st fencedStore
			run := func(c *Cluster, round string) (ok int) {
				for _, p := range c.Peers() {
					lockWithin(t, p, time.Minute)
					if st.write(p.Fence(), round+" P"+strconv.Itoa(p.ID())) {
						ok++
					}
					p.Unlock()
				}
				return ok
			}
			old := v.cluster(t, n)
			require.Equal(t, n, run(old, "first"))
			// A holder of the old cluster that stalls with its fence.
			stale := old.Peer(1)
			lockWithin(t, stale, time.Minute)
			staleFence := stale.Fence()
			stale.Unlock()
			require.Equal(t, n, run(old, "second"))
			require.NoError(t, old.Close())

			floor := st.highest
			restarted, err := New(v.alg, n, append(v.opts, WithFenceFloor(floor))...)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, restarted.Close()) })
			for _, p := range restarted.Peers() {
				lockWithin(t, p, time.Minute)
				assert.Greater(t, p.Fence(), floor, "peer %d", p.ID())
				p.Unlock()
			}
			assert.Equal(t, n, run(restarted, "after restart"), "a write lost to the reset: %v", st.rejected)
			assert.False(t, st.write(staleFence, "stale"), "the stale holder's late write was accepted")

			// Control: the same restart without the floor loses writes.
			fresh := v.cluster(t, n)
			assert.Less(t, run(fresh, "without floor"), n)
		})
	}
}

// TestFenceFloorOption checks WithFenceFloor's validation and scope.
func TestFenceFloorOption(t *testing.T) {
	for _, floor := range []uint64{MaxFenceFloor + 1, MaxFence, math.MaxUint64} {
		_, err := New(Centralized, 2, WithFenceFloor(floor))
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.Contains(t, err.Error(), fmt.Sprintf("WithFenceFloor(%d)", floor))
	}
	// A World takes the floor too: its fenced store sees the fences the
	// peers hand out.
	ch, err := newChecker(CheckConfig{Algorithm: Centralized, N: 2, Fenced: true, Options: []Option{WithFenceFloor(7)}})
	require.NoError(t, err)
	w, err := ch.startWorld(false)
	require.NoError(t, err)
	require.NoError(t, w.Request(0)) // the coordinator enters at once
	st, err := w.Apply(Transition{Kind: TransWrite, Peer: 0})
	require.NoError(t, err)
	assert.Equal(t, uint64(8), st.Fence, "the first hold's fence is above the floor")

	c, err := New(SuzukiKasami, 2, WithFenceFloor(MaxFenceFloor))
	require.NoError(t, err)
	defer c.Close()
	p := c.Peer(0)
	lockWithin(t, p, time.Minute)
	assert.Equal(t, uint64(MaxFenceFloor+1), p.Fence())
	p.Unlock()

	nw := NewChanNetwork(1)
	peer, err := NewPeer(Centralized, 0, 1, nw.Endpoint(0), WithFenceFloor(41))
	require.NoError(t, err)
	defer peer.Close()
	lockWithin(t, peer, time.Minute)
	assert.Equal(t, uint64(42), peer.Fence())
	peer.Unlock()
}

// TestFloorsApartInMemory gives peer 0 the floor 2^48+10 and the others
// 0, as a state file taken from a store with nanosecond fences would.
// Before, every LockContext timed out with nothing but Stats().Refused to
// show for it. On one ChanNetwork the floors are known together: the
// first NewPeer whose floor lies too far from another's is refused,
// naming both peers and both floors; floors MaxFloorSpread apart work.
// Over a transport that cannot tell, the peer that refuses the messages
// says why in the error of the LockContext that gives up.
func TestFloorsApartInMemory(t *testing.T) {
	const high = 1<<48 + 10
	for _, alg := range []Algorithm{RicartAgrawala, SuzukiKasami, Centralized} {
		t.Run(alg.String(), func(t *testing.T) {
			nw := NewChanNetwork(3)
			defer nw.Close()
			p0, err := NewPeer(alg, 0, 3, nw.Endpoint(0), WithFenceFloor(high))
			require.NoError(t, err)
			defer p0.Close()
			_, err = NewPeer(alg, 1, 3, nw.Endpoint(1))
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.ErrorContains(t, err, fmt.Sprintf("fence floors too far apart: peer 0 was given floor %d and peer 1 floor 0 (WithFenceFloor)", uint64(high)))
			// Within the spread, both directions, the later peers start.
			p1, err := NewPeer(alg, 1, 3, nw.Endpoint(1), WithFenceFloor(high-MaxFloorSpread))
			require.NoError(t, err)
			defer p1.Close()
			_, err = NewPeer(alg, 2, 3, nw.Endpoint(2), WithFenceFloor(high-MaxFloorSpread-1))
			assert.ErrorContains(t, err, "peer 0 was given floor")
			p2, err := NewPeer(alg, 2, 3, nw.Endpoint(2), WithFenceFloor(high+MaxFloorSpread))
			assert.ErrorContains(t, err, "peer 1 was given floor", "peer 2's floor is within peer 0's spread but not peer 1's")
			require.Nil(t, p2)
			p2, err = NewPeer(alg, 2, 3, nw.Endpoint(2), WithFenceFloor(high))
			require.NoError(t, err)
			defer p2.Close()
			for _, p := range []*Peer{p1, p0, p2, p1} {
				assert.Greater(t, lockFence(t, p), uint64(high))
			}
		})
	}

	t.Run("whichever is claimed first", func(t *testing.T) {
		// The error names the lower id first, whichever side finds it;
		// a peer started again with its id takes its own place.
		nw := NewChanNetwork(3)
		defer nw.Close()
		p2, err := NewPeer(Centralized, 2, 3, nw.Endpoint(2), WithFenceFloor(high))
		require.NoError(t, err)
		require.NoError(t, p2.Close())
		_, err = NewPeer(Centralized, 0, 3, nw.Endpoint(0))
		assert.ErrorContains(t, err, fmt.Sprintf("peer 0 was given floor 0 and peer 2 floor %d", uint64(high)))
		p2, err = NewPeer(Centralized, 2, 3, NewChanNetwork(3).Endpoint(2))
		require.NoError(t, err, "another network knows nothing of the first")
		require.NoError(t, p2.Close())
		nw2 := NewChanNetwork(3)
		defer nw2.Close()
		require.NoError(t, nw2.Endpoint(2).claimFloor(2, high))
		require.NoError(t, nw2.Endpoint(2).claimFloor(2, 0), "peer 2 started again with another floor")
		require.NoError(t, nw2.Endpoint(0).claimFloor(0, 0), "peer 2's old floor is forgotten")
	})

	t.Run("refused messages say why", func(t *testing.T) {
		// plainTransport hides the endpoint's floor claim too: a
		// transport that knows nothing of the other peers' floors.
		nw := NewChanNetwork(2)
		defer nw.Close()
		p0, err := NewPeer(RicartAgrawala, 0, 2, plainTransport{nw.Endpoint(0)}, WithFenceFloor(high))
		require.NoError(t, err)
		defer p0.Close()
		p1, err := NewPeer(RicartAgrawala, 1, 2, plainTransport{nw.Endpoint(1)})
		require.NoError(t, err)
		defer p1.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		// Peer 1 asks, peer 0 answers with its fence, and peer 1 refuses
		// the answer.
		err = p1.LockContext(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, fmt.Sprintf("peer 1 refused a reply of peer 0 whose fence %d is more than FenceWindow above its own 0", uint64(high)))
		assert.ErrorContains(t, err, "MaxFloorSpread")
		assert.Equal(t, uint64(1), p1.Stats().Refused)
	})
}

// errTransport is a transport with an Err method, as grpctransport's.
type errTransport struct {
	plainTransport
	err error
}

func (e errTransport) Err() error { return e.err }

// TestGaveUpSaysWhatItKnows: a LockContext that gives up returns the
// context's error itself when the peer refused nothing and its transport
// has not given up, and the transport's reason with it when it has.
func TestGaveUpSaysWhatItKnows(t *testing.T) {
	for _, trErr := range []error{nil, errors.New("boom")} {
		nw := NewChanNetwork(2)
		p0, err := NewPeer(RicartAgrawala, 0, 2, errTransport{plainTransport{nw.Endpoint(0)}, trErr})
		require.NoError(t, err)
		p1, err := NewPeer(RicartAgrawala, 1, 2, errTransport{plainTransport{nw.Endpoint(1)}, trErr})
		require.NoError(t, err)
		lockWithin(t, p0, 10*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err = p1.LockContext(ctx)
		cancel()
		if trErr == nil {
			assert.Equal(t, context.DeadlineExceeded, err)
		} else {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Equal(t, "context deadline exceeded; the transport gave up: boom", err.Error())
		}
		p0.Unlock()
		require.NoError(t, p0.Close())
		require.NoError(t, p1.Close())
	}
}

// floorTransport announces a fence floor, as grpctransport's does.
type floorTransport struct {
	plainTransport
	floor uint64
}

func (f floorTransport) FenceFloor() uint64 { return f.floor }

// TestNewPeerChecksTheTransportsFloor: NewPeer takes a transport that
// announces the peer's own floor, and refuses one that announces another.
func TestNewPeerChecksTheTransportsFloor(t *testing.T) {
	nw := NewChanNetwork(1)
	defer nw.Close()
	_, err := NewPeer(Centralized, 0, 1, floorTransport{plainTransport{nw.Endpoint(0)}, 8}, WithFenceFloor(7))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.ErrorContains(t, err, "announces fence floor 8 to the other peers, but the peer was given 7")
	p, err := NewPeer(Centralized, 0, 1, floorTransport{plainTransport{nw.Endpoint(0)}, 7}, WithFenceFloor(7))
	require.NoError(t, err)
	require.NoError(t, p.Close())
}
