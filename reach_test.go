package dmutex

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unreachableAfter is the bound of the lost-peer tests: short, since the
// tests wait for it, but the tests assert no timing.
const unreachableAfter = 20 * time.Millisecond

// reachCase is, per algorithm, a requester of a 4-peer cluster and a peer
// whose crash leaves that requester waiting for ever.
func reachCase(v variant) (requester, crashed int) {
	switch v.alg {
	case Centralized, SuzukiKasami, TokenRing, Raymond, NaimiTrehel, RicartAgrawalaToken, SinghalHeuristic:
		return 1, 0 // the coordinator, or the holder of the token
	case Maekawa:
		set := VotingSets(4)[1]
		return 1, set[slices.IndexFunc(set, func(j int) bool { return j != 1 })]
	case RoucairolCarvalho:
		return 3, 0 // 3 starts with no permission, 0 with all
	case SinghalDynamic:
		return 3, 0 // R_3 = {0, 1, 2}; R_0 is empty
	}
	return 0, 3
}

func reachCluster(t *testing.T, v variant) *Cluster {
	t.Helper()
	c, err := New(v.alg, 4, append(slices.Clone(v.opts), WithUnreachableAfter(unreachableAfter))...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// requireUnreachable checks that err is an *UnreachableError naming peer.
func requireUnreachable(t *testing.T, err error, peer int) {
	t.Helper()
	require.ErrorIs(t, err, ErrPeerUnreachable)
	var ue *UnreachableError
	require.True(t, errors.As(err, &ue), "%T", err)
	assert.Contains(t, ue.Peers, peer)
	assert.Equal(t, unreachableAfter, ue.After)
	assert.Contains(t, err.Error(), "unreachable for more than")
}

// TestUnreachableEndsWait crashes, for every algorithm, a peer that a
// request needs, while the request waits: LockContext, even with a context
// that never ends, returns ErrPeerUnreachable naming it, and so does a
// later call, at once, without sending anything. TryLockContext too.
func TestUnreachableEndsWait(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			c := reachCluster(t, v)
			req, crashed := reachCase(v)
			p := c.Peer(req)
			require.NoError(t, c.Network().Crash(crashed))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- p.LockContext(context.Background()) }()
			requireUnreachable(t, <-errc, crashed)

			before := c.Stats()
			requireUnreachable(t, p.LockContext(ctx), crashed)
			requireUnreachable(t, p.TryLockContext(ctx), crashed)
			assert.Equal(t, before.Messages, c.Stats().Messages, "a call with the peer known unreachable sends nothing")
			assert.Zero(t, p.Fence())
		})
	}
}

// TestUnreachableBeforeRequest checks that a request made once the peer it
// needs is suspected sends nothing at all, so that the peer can lock
// again once the partition heals.
func TestUnreachableBeforeRequest(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			c := reachCluster(t, v)
			req, cut := reachCase(v)
			p := c.Peer(req)
			rest := []int{}
			for j := range 4 {
				if j != cut {
					rest = append(rest, j)
				}
			}
			require.NoError(t, c.Network().Partition([]int{cut}, rest))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// Wait, asking nothing of the machine, until the peer is
			// suspected.
			for len(p.Suspected()) == 0 {
				require.NoError(t, ctx.Err(), "never suspected")
				time.Sleep(time.Millisecond)
			}
			assert.Equal(t, []int{cut}, p.Suspected())
			before := c.Stats()
			requireUnreachable(t, p.LockContext(ctx), cut)
			requireUnreachable(t, p.TryLockContext(ctx), cut)
			assert.Equal(t, before, c.Stats(), "nothing sent while the peer is unreachable")
			c.Network().Heal()
			for len(p.Suspected()) > 0 {
				require.NoError(t, ctx.Err(), "never trusted again")
				time.Sleep(time.Millisecond)
			}
			lockWithin(t, p, time.Minute)
			p.Unlock()
		})
	}
}

// TestUnreachableLockKeepsWaiting checks the documented path for Lock: it
// cannot return an error, so it keeps waiting while LockContext on the
// same peer returns; Close then wakes it with ErrClosed.
func TestUnreachableLockKeepsWaiting(t *testing.T) {
	v := variant{name: "ricart-agrawala", alg: RicartAgrawala}
	c, err := New(v.alg, 3, WithUnreachableAfter(unreachableAfter))
	require.NoError(t, err)
	p := c.Peer(0)
	require.NoError(t, c.Network().Crash(2))
	closed := lockUntilClose(t, p)
	// The Lock call's request is out (or about to be): LockContext queues
	// behind it, and the suspicion ends only its wait.
	requireUnreachable(t, p.LockContext(context.Background()), 2)
	closed(c)
}

// lockUntilClose calls p.Lock in a goroutine. The function it returns
// requires that Lock has not returned, closes c, and requires that Lock
// then panics with ErrClosed, as it does when Close wakes it.
func lockUntilClose(t *testing.T, p Locker) func(c *Cluster) {
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		p.Lock()
		p.Unlock()
	}()
	return func(c *Cluster) {
		t.Helper()
		select {
		case v := <-panicked:
			t.Fatalf("Lock returned (%v) while the peer it needs is down", v)
		default:
		}
		require.NoError(t, c.Close())
		err, _ := (<-panicked).(error)
		require.ErrorIs(t, err, ErrClosed)
	}
}

// TestUnreachableNeedsOnlyItsPeers checks that a peer that a request does
// not need may be down: a Maekawa peer whose voting set avoids it, and a
// centralized peer, which needs only the coordinator, still lock.
func TestUnreachableNeedsOnlyItsPeers(t *testing.T) {
	t.Run("centralized", func(t *testing.T) {
		c := reachCluster(t, variant{alg: Centralized})
		require.NoError(t, c.Network().Crash(3))
		for _, id := range []int{0, 1, 2} {
			lockWithin(t, c.Peer(id), time.Minute)
			c.Peer(id).Unlock()
		}
	})
	t.Run("maekawa", func(t *testing.T) {
		c := reachCluster(t, variant{alg: Maekawa})
		sets := VotingSets(4)
		// A peer outside peer 0's voting set.
		out := slices.IndexFunc([]int{0, 1, 2, 3}, func(j int) bool { return !slices.Contains(sets[0], j) })
		require.GreaterOrEqual(t, out, 0, "sets %v", sets)
		require.NoError(t, c.Network().Crash(out))
		lockWithin(t, c.Peer(0), time.Minute)
		c.Peer(0).Unlock()
	})
}

// TestUnreachableOption checks the option's validation.
func TestUnreachableOption(t *testing.T) {
	_, err := New(RicartAgrawala, 3, WithUnreachableAfter(0))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "WithUnreachableAfter(0s)")
	_, err = NewPeer(RicartAgrawala, 0, 2, plainTransport{NewChanNetwork(2).Endpoint(0)}, WithUnreachableAfter(time.Second))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "does not implement Reachability")
	_, err = NewWorld(RicartAgrawala, 2, WorldConfig{}, WithUnreachableAfter(time.Second))
	require.ErrorIs(t, err, ErrInvalidConfig)
}

// plainTransport hides a ChanEndpoint's Reachability and its floor claim.
type plainTransport struct{ e *ChanEndpoint }

func (p plainTransport) Send(to int, m Message) error { return p.e.Send(to, m) }
func (p plainTransport) Recv() <-chan Message         { return p.e.Recv() }
func (p plainTransport) Close() error                 { return p.e.Close() }

// TestUnreachableUnneededKeepsWaiting suspects, while peer 1 of a
// centralized cluster waits in LockContext behind the coordinator's hold,
// a peer that peer 1's request does not need. The wait must go on, parked
// again on the next change rather than spinning on the one that woke it,
// and end with the critical section once the coordinator leaves.
func TestUnreachableUnneededKeepsWaiting(t *testing.T) {
	c := reachCluster(t, variant{alg: Centralized})
	lockWithin(t, c.Peer(0), time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- c.Peer(1).LockContext(ctx) }()
	waitParked(t, "(*Peer).wait(", "select", "before the suspicion")
	require.NoError(t, c.Network().Crash(3))
	deadline := time.Now().Add(time.Minute)
	for !slices.Equal(c.Peer(1).Suspected(), []int{3}) {
		require.True(t, time.Now().Before(deadline), "peer 1 never suspected peer 3: %v", c.Peer(1).Suspected())
		time.Sleep(time.Millisecond)
	}
	// The suspicion has closed the channel the waiter selects on.
	waitParked(t, "(*Peer).wait(", "select", "after the suspicion")
	select {
	case err := <-res:
		t.Fatalf("LockContext returned %v while the coordinator holds the lock", err)
	default:
	}
	c.Peer(0).Unlock()
	require.NoError(t, <-res)
	c.Peer(1).Unlock()
}

// waitParked waits, with a generous deadline, until a goroutine whose
// stack contains frame is blocked in state (as runtime.Stack shows it, for
// example "select" or "chan receive").
func waitParked(t *testing.T, frame, state, when string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(time.Minute)
	for {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			header, _, _ := strings.Cut(g, "\n")
			if strings.Contains(g, frame) && (strings.Contains(header, "["+state+"]") || strings.Contains(header, "["+state+",")) {
				return
			}
		}
		require.True(t, time.Now().Before(deadline), "%s: no goroutine in %s blocked in %s:\n%s", when, frame, state, buf[:n])
		time.Sleep(time.Millisecond)
	}
}

// TestUnreachableLockAfterSuspicion calls Lock while a peer it needs is
// suspected already: unlike LockContext, which returns at once, Lock keeps
// waiting, until Close wakes it with ErrClosed.
func TestUnreachableLockAfterSuspicion(t *testing.T) {
	c, err := New(RicartAgrawala, 3, WithUnreachableAfter(unreachableAfter))
	require.NoError(t, err)
	p := c.Peer(0)
	require.NoError(t, c.Network().Crash(2))
	waitSuspected(t, p, []int{2})
	closed := lockUntilClose(t, p)
	waitParked(t, "(*Peer).wait(", "chan receive", "Lock")
	closed(c)
}

// TestUnreachableIdleHolderEntersAlone suspects a peer while peer 0 of a
// Suzuki-Kasami cluster holds the idle token: its LockContext and
// TryLockContext enter without asking anyone, but a second caller of
// peer 0, which would wait behind the first, gets the error at once.
func TestUnreachableIdleHolderEntersAlone(t *testing.T) {
	c := reachCluster(t, variant{alg: SuzukiKasami})
	p := c.Peer(0)
	require.NoError(t, c.Network().Crash(3))
	waitSuspected(t, p, []int{3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, p.LockContext(ctx), "the idle token holder needs nobody")
	requireUnreachable(t, p.LockContext(ctx), 3)
	p.Unlock()
	require.NoError(t, p.TryLockContext(ctx), "the idle token holder needs nobody")
	p.Unlock()
}

// TestChanEndpointReachable pins the in-memory network's Reachability,
// which the runtime's detector reads: everyone is reachable without a
// fault; a crashed peer is unreachable from every endpoint, and every
// peer from its own, since the crash; a partition cuts only across its
// groups, since it began, until Heal; each change is signalled on
// ReachChanged; and an id outside the cluster is reported reachable
// rather than read out of range.
func TestChanEndpointReachable(t *testing.T) {
	nw := NewChanNetwork(4)
	e0, e1, e2 := nw.Endpoint(0), nw.Endpoint(1), nw.Endpoint(2)
	reachable := func(e *ChanEndpoint, id int) bool {
		ok, _ := e.Reachable(id)
		return ok
	}
	changed := func(e *ChanEndpoint) bool {
		select {
		case <-e.ReachChanged():
			return true
		default:
			return false
		}
	}
	for id := range 4 {
		assert.True(t, reachable(e0, id), "peer %d without faults", id)
	}

	require.NoError(t, nw.Crash(3))
	assert.True(t, changed(e0) && changed(e1), "a crash is signalled to every endpoint")
	assert.False(t, changed(e0), "once")
	ok, since := e0.Reachable(3)
	assert.False(t, ok, "a crashed peer")
	assert.False(t, since.IsZero(), "since the crash")
	ok, since2 := nw.Endpoint(3).Reachable(1)
	assert.False(t, ok, "from a crashed peer's own endpoint")
	assert.Equal(t, since, since2, "since the same crash")
	require.NoError(t, nw.Crash(3))
	for _, e := range []*ChanEndpoint{e0, e1, e2} {
		changed(e)
	}
	_, since3 := e0.Reachable(3)
	assert.Equal(t, since, since3, "a second crash keeps the time of the first")
	assert.True(t, reachable(e0, 1), "a live peer")
	for _, id := range []int{-1, 4} {
		ok, since := e0.Reachable(id)
		assert.True(t, ok, "id %d outside the cluster", id)
		assert.True(t, since.IsZero(), "id %d", id)
	}

	require.NoError(t, nw.Partition([]int{0, 1}))
	assert.True(t, changed(e2), "a partition is signalled")
	ok, since = e0.Reachable(2)
	assert.False(t, ok, "across the partition")
	assert.False(t, since.IsZero())
	assert.False(t, reachable(e2, 1), "across the partition, the other way")
	assert.True(t, reachable(e0, 1), "inside a group")
	assert.False(t, reachable(e0, 3), "still crashed")
	for _, id := range []int{-1, 4} {
		assert.True(t, reachable(e0, id), "id %d outside the cluster, during a partition", id)
	}

	nw.Heal()
	assert.True(t, changed(e0), "a heal is signalled")
	assert.True(t, reachable(e0, 2), "healed")
	assert.True(t, reachable(e2, 1), "healed")
	assert.False(t, reachable(e2, 3), "a crash outlasts a heal")
}

// TestUnreachableNotBeforeTheBound: a peer that has been down for less
// than WithUnreachableAfter allows is not suspected. The test knows that
// the watcher has weighed the cut: it waits for the watcher to ask about
// peer 1 after the cut and then once more, after a second signal, by
// which time the first assessment has been applied.
func TestUnreachableNotBeforeTheBound(t *testing.T) {
	tr := newScriptReach()
	tr.asked = make(chan int, 16)
	p, err := NewPeer(RicartAgrawala, 0, 2, tr, WithUnreachableAfter(time.Hour))
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()
	askedAbout1 := func() {
		t.Helper()
		for {
			select {
			case id := <-tr.asked:
				if id == 1 {
					return
				}
			case <-time.After(time.Minute):
				t.Fatal("the watcher never asked about peer 1")
			}
		}
	}
	askedAbout1() // the watcher's first look
	tr.cut(1)
	askedAbout1()
	tr.signal()
	askedAbout1()
	assert.Empty(t, p.Suspected(), "peer 1 has been down for less than an hour")
}

// TestCrashedPeerDoesNotSuspectItself: a crashed endpoint finds every
// peer unreachable, its own id included; the peer suspects the others
// and never itself.
func TestCrashedPeerDoesNotSuspectItself(t *testing.T) {
	c, err := NewRicartAgrawala(2, WithUnreachableAfter(time.Millisecond))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	require.NoError(t, c.Network().Crash(0))
	p := c.Peer(0)
	deadline := time.Now().Add(time.Minute)
	for len(p.Suspected()) == 0 {
		require.False(t, time.Now().After(deadline), "the crashed peer never suspected anyone")
		time.Sleep(time.Millisecond)
	}
	assert.Equal(t, []int{1}, p.Suspected())
}

// TestUnreachableWakesForTheFirstToPassTheBound: of two peers down, the
// watcher wakes when the first of them passes the bound, whichever peer
// it asks about first: peer 2 and peer 1 here go down long before the
// other, and are suspected with no further change to wake the watcher.
func TestUnreachableWakesForTheFirstToPassTheBound(t *testing.T) {
	for _, early := range []int{1, 2} {
		t.Run(fmt.Sprintf("peer %d first", early), func(t *testing.T) {
			const after = time.Hour
			tr := newScriptReach()
			now := time.Now()
			tr.down[early] = now.Add(-after + 50*time.Millisecond) // passes the bound soon
			tr.down[3-early] = now                                 // in an hour
			p, err := NewPeer(RicartAgrawala, 0, 3, tr, WithUnreachableAfter(after))
			require.NoError(t, err)
			defer func() { require.NoError(t, p.Close()) }()
			waitSuspected(t, p, []int{early})
		})
	}
}

// TestChanReachableSinceTheHeal: the in-memory network says, for a peer
// reachable again, when the last partition between the two ended, since
// what it cut was lost; a pair that no partition separated says the zero
// time. A new partition that keeps two peers apart does not count as
// their return; one that reunites them does.
func TestChanReachableSinceTheHeal(t *testing.T) {
	c, err := NewRicartAgrawala(3)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	nw := c.Network()
	ep := func(id int) *ChanEndpoint { return nw.Endpoint(id) }
	ok, since := ep(0).Reachable(1)
	require.True(t, ok)
	require.True(t, since.IsZero())

	require.NoError(t, nw.Partition([]int{0}, []int{1, 2}))
	before := time.Now()
	require.NoError(t, nw.Partition([]int{0, 2}, []int{1})) // 0-1 still apart, 0-2 back
	ok, since = ep(0).Reachable(2)
	require.True(t, ok)
	assert.False(t, since.Before(before), "0 and 2 are back from the first partition")
	ok, _ = ep(1).Reachable(0)
	require.False(t, ok)

	healed := time.Now()
	nw.Heal()
	for _, pair := range [][2]int{{0, 1}, {1, 0}, {1, 2}, {2, 1}} {
		ok, since = ep(pair[0]).Reachable(pair[1])
		require.True(t, ok)
		assert.False(t, since.Before(healed), "%v: back at the heal", pair)
	}
	ok, since = ep(2).Reachable(0)
	require.True(t, ok)
	assert.True(t, since.Before(healed), "0 and 2 were together when the network healed")
	_, first := ep(1).Reachable(0)
	nw.Heal() // a whole network: nothing comes back
	_, again := ep(1).Reachable(0)
	assert.Equal(t, first, again)
}
