package dmutex

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdLostAfter is the WithUnreachableAfter bound of the hold-lost tests,
// and holdLostSlack what they allow beyond it for the watcher to run on
// a loaded machine under -race: the bound Locker.HoldLost states is the
// bound plus the watcher's scheduling delay, over a network that reports
// a cut at once.
const (
	holdLostAfter = 100 * time.Millisecond
	holdLostSlack = 3 * time.Second
)

// waitHoldLost waits for lost to close, at most holdLostAfter plus
// holdLostSlack after cut, and no earlier than holdLostAfter after it,
// and returns how long after cut it closed.
func waitHoldLost(t *testing.T, lost <-chan struct{}, cut time.Time) time.Duration {
	t.Helper()
	timer := time.NewTimer(holdLostAfter + holdLostSlack)
	defer timer.Stop()
	select {
	case <-lost:
	case <-timer.C:
		require.FailNow(t, "HoldLost did not close within the bound", "%v after the cut", time.Since(cut))
	}
	took := time.Since(cut)
	assert.GreaterOrEqual(t, took, holdLostAfter, "closed before the bound")
	return took
}

// requireOpen fails if lost is closed.
func requireOpen(t *testing.T, lost <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-lost:
		require.FailNow(t, "HoldLost closed", "%s", what)
	default:
	}
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// requireLostTo checks err, from HoldErr, names peers as unreachable.
func requireLostTo(t *testing.T, err error, peers []int) {
	t.Helper()
	require.ErrorIs(t, err, ErrHoldLost)
	require.ErrorIs(t, err, ErrPeerUnreachable)
	assert.NotErrorIs(t, err, ErrClosed)
	var ue *UnreachableError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, peers, ue.Peers)
	assert.Equal(t, holdLostAfter, ue.After)
	assert.Equal(t, fmt.Sprintf("dmutex: hold may be lost: peers %v unreachable for more than %v", peers, holdLostAfter), err.Error())
}

// TestHoldLostOnPartition cuts peer 1 off alone while it holds, for every
// algorithm, and with WithRecovery where it applies: its HoldLost closes
// no earlier than WithUnreachableAfter after the cut and within the
// bound, and HoldErr names the peers its hold depends on: every other
// peer with recovery; without it, those its requests need (the
// coordinator for a centralized peer, the quorum for Maekawa and
// Agrawal-El Abbadi, none
// for a Roucairol-Carvalho holder, which holds every permission, nor for
// a Singhal-dynamic one, whose request set is empty, so their HoldLost
// stays open; every other peer for the rest).
func TestHoldLostOnPartition(t *testing.T) {
	const n = 3
	type config struct {
		alg      Algorithm
		recovery bool
		want     []int
	}
	var configs []config
	for _, alg := range Algorithms() {
		want := []int{0, 2}
		switch alg {
		case Centralized:
			want = []int{0}
		case Maekawa:
			want = slices.DeleteFunc(slices.Clone(VotingSets(n)[1]), func(j int) bool { return j == 1 })
		case AgrawalElAbbadi:
			q, ok := TreeQuorum(1, n, nil)
			require.True(t, ok)
			want = slices.DeleteFunc(slices.Clone(q), func(j int) bool { return j == 1 })
		case RoucairolCarvalho:
			want = nil // a holder keeps every permission: nobody enters without it
		case SinghalDynamic:
			want = nil // a holder's request set is empty: every other peer must ask it
		}
		configs = append(configs, config{alg: alg, want: want})
		if slices.Contains(recoveryAlgorithms, alg) {
			configs = append(configs, config{alg: alg, recovery: true, want: []int{0, 2}})
		}
	}
	for _, tt := range configs {
		name := tt.alg.String()
		opts := []Option{WithUnreachableAfter(holdLostAfter)}
		if tt.recovery {
			name += "/recovery"
			opts = append(opts, WithRecovery())
		}
		t.Run(name, func(t *testing.T) {
			c := variant{alg: tt.alg, opts: opts}.cluster(t, n)
			p := c.Peer(1)
			p.Lock()
			lost := p.HoldLost()
			requireOpen(t, lost, "before the cut")
			require.NoError(t, p.HoldErr())
			cut := time.Now()
			require.NoError(t, c.Network().Partition([]int{1}))
			if tt.want == nil {
				eventually(t, "peer 1 suspects the others", func() bool { return len(p.Suspected()) == n-1 })
				requireOpen(t, lost, "a hold that depends on nobody")
				require.NoError(t, p.HoldErr())
				p.Unlock()
				return
			}
			took := waitHoldLost(t, lost, cut)
			requireLostTo(t, p.HoldErr(), tt.want)
			assert.Equal(t, lost, p.HoldLost(), "the same hold, the same channel")
			p.Unlock()
			t.Logf("closed %v after the cut", took)
		})
	}
}

// TestHoldLostOnCrash: with recovery, a holder whose own process is cut
// off (Crash) learns it as a partition; a crash of another peer closes
// HoldLost if the hold depends on that peer (Ricart-Agrawala with
// recovery: every peer), and not otherwise (a centralized peer without
// recovery needs only the coordinator). HoldErr says so also when
// HoldLost was never asked for.
func TestHoldLostOnCrash(t *testing.T) {
	tests := []struct {
		name     string
		alg      Algorithm
		recovery bool
		crash    int
		want     []int // nil: the hold stays
	}{
		{"holder crashes", RicartAgrawala, true, 1, []int{0, 2}},
		{"another peer crashes", RicartAgrawala, true, 2, []int{2}},
		{"a peer the hold needs crashes", Centralized, false, 0, []int{0}},
		{"a peer the hold does not need crashes", Centralized, false, 2, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := []Option{WithUnreachableAfter(holdLostAfter)}
			if tt.recovery {
				opts = append(opts, WithRecovery())
			}
			c := variant{alg: tt.alg, opts: opts}.cluster(t, 3)
			p := c.peers[1]
			p.Lock()
			cut := time.Now()
			require.NoError(t, c.Network().Crash(tt.crash))
			if tt.want == nil {
				eventually(t, "peer 1 suspects the crashed peer", func() bool { return slices.Contains(p.Suspected(), tt.crash) })
				require.NoError(t, p.HoldErr())
				requireOpen(t, p.HoldLost(), "for a peer the hold does not need")
			} else {
				// HoldErr alone, then HoldLost asked for after the fact.
				eventually(t, "HoldErr reports the hold lost", func() bool { return p.HoldErr() != nil })
				assert.GreaterOrEqual(t, time.Since(cut), holdLostAfter)
				requireLostTo(t, p.HoldErr(), tt.want)
				assert.True(t, isClosed(p.HoldLost()), "HoldLost asked for after HoldErr reported the hold lost")
			}
			p.Unlock()
		})
	}
}

// TestHoldLostPerHold: each hold has its record. A hold lost to a crash
// is over at Unlock; the next hold, granted with the crashed peer
// already suspected (recovery goes on without it), is not in doubt: a
// new channel, open, and HoldErr nil. With no hold, HoldLost is closed
// and HoldErr matches ErrHoldLost alone.
func TestHoldLostPerHold(t *testing.T) {
	c := variant{alg: RicartAgrawala, opts: []Option{WithRecovery(), WithUnreachableAfter(holdLostAfter)}}.cluster(t, 3)
	p := c.peers[1]

	err := p.HoldErr()
	require.ErrorIs(t, err, ErrHoldLost, "before any hold")
	assert.NotErrorIs(t, err, ErrPeerUnreachable)
	assert.NotErrorIs(t, err, ErrClosed)
	assert.True(t, isClosed(p.HoldLost()), "HoldLost with no hold")

	p.Lock()
	first := p.HoldLost()
	cut := time.Now()
	require.NoError(t, c.Network().Crash(2))
	waitHoldLost(t, first, cut)
	requireLostTo(t, p.HoldErr(), []int{2})
	p.Unlock()
	require.ErrorIs(t, p.HoldErr(), ErrHoldLost, "after Unlock")

	p.Lock()
	second := p.HoldLost()
	assert.NotEqual(t, first, second, "a new hold, a new channel")
	reassessed(t, c, p)
	requireOpen(t, second, "a hold granted without a peer suspected before it began")
	require.NoError(t, p.HoldErr())
	p.Unlock()
	assert.True(t, isClosed(p.HoldLost()), "HoldLost after Unlock")
}

// reassessed has p's watcher look at the others again, with nothing
// changed, and returns once it has: a partition into one group cuts
// nobody, but the network signals a change all the same; once the
// watcher has taken a second signal, it has done with the first.
func reassessed(t *testing.T, c *Cluster, p *Peer) {
	t.Helper()
	for range 2 {
		require.NoError(t, c.Network().Partition(slices.Collect(func(yield func(int) bool) {
			for i := range c.Len() {
				yield(i)
			}
		})))
		eventually(t, "the watcher takes the change", func() bool { return len(p.reach.r.ReachChanged()) == 0 })
	}
}

// TestHoldLostOnClose: closing a holding peer closes HoldLost, with
// ErrClosed as the reason, for a channel asked for before Close and
// after; a peer without WithUnreachableAfter has only that reason.
func TestHoldLostOnClose(t *testing.T) {
	for _, asked := range []string{"before", "after"} {
		t.Run(asked, func(t *testing.T) {
			c := variant{alg: RicartAgrawala}.cluster(t, 3)
			p := c.peers[0]
			p.Lock()
			var lost <-chan struct{}
			if asked == "before" {
				lost = p.HoldLost()
				requireOpen(t, lost, "before Close")
			}
			require.NoError(t, p.Close())
			if lost == nil {
				lost = p.HoldLost()
			}
			assert.True(t, isClosed(lost), "HoldLost of a hold on a closed peer")
			err := p.HoldErr()
			require.ErrorIs(t, err, ErrHoldLost)
			require.ErrorIs(t, err, ErrClosed)
			assert.EqualError(t, err, "dmutex: hold may be lost: peer closed")
			p.Unlock()
		})
	}
}

// TestHoldLostFastPath: a Suzuki-Kasami token holder re-entering alone
// through its fast path may ask HoldLost without leaving the fast path,
// gets a channel of its own for each hold, and learns of a cut as a
// slow hold does.
func TestHoldLostFastPath(t *testing.T) {
	c := variant{alg: SuzukiKasami, opts: []Option{WithRecovery(), WithUnreachableAfter(holdLostAfter)}}.cluster(t, 3)
	p := c.peers[0]
	roundsToArm(t, p)
	armedInside := func() bool { return p.fast.word.Load()&fastMask == fastArmed|fastInside }

	p.Lock()
	require.True(t, armedInside(), "precondition: a fast hold")
	first := p.HoldLost()
	require.NoError(t, p.HoldErr())
	assert.True(t, armedInside(), "HoldLost and HoldErr left the fast path")
	p.Unlock()

	p.Lock()
	require.True(t, armedInside(), "precondition: a fast hold")
	lost := p.HoldLost()
	assert.NotEqual(t, first, lost, "a new hold, a new channel")
	requireOpen(t, lost, "a fast hold with every peer reachable")
	cut := time.Now()
	require.NoError(t, c.Network().Partition([]int{0}))
	waitHoldLost(t, lost, cut)
	requireLostTo(t, p.HoldErr(), []int{1, 2})
	requireOpen(t, first, "the earlier hold's channel")
	p.Unlock()
}

// TestHoldLostSoak runs entries with no fault, and every hold asks
// HoldLost: it never closes. Every algorithm, with WithRecovery where it
// applies, at n = 3 and n = 5, 10,000 entries each (1,000
// under -race or -short), from one goroutine per peer.
func TestHoldLostSoak(t *testing.T) {
	entries := 10000
	if raceEnabled || testing.Short() {
		entries = 1000
	}
	for _, alg := range Algorithms() {
		opts := []Option{WithUnreachableAfter(holdLostAfter)}
		if slices.Contains(recoveryAlgorithms, alg) {
			opts = append(opts, WithRecovery())
		}
		for _, n := range []int{3, 5} {
			t.Run(fmt.Sprintf("%v/n=%d", alg, n), func(t *testing.T) {
				c := variant{alg: alg, opts: opts}.cluster(t, n)
				var fired, asked atomic.Int64
				var wg sync.WaitGroup
				for i, p := range c.Peers() {
					wg.Go(func() {
						for range entries/n + min(1, max(0, entries%n-i)) {
							p.Lock()
							lost := p.HoldLost()
							asked.Add(1)
							select {
							case <-lost:
								fired.Add(1)
							default:
							}
							if p.HoldErr() != nil {
								fired.Add(1)
							}
							p.Unlock()
						}
					})
				}
				wg.Wait()
				assert.Zero(t, fired.Load(), "holds that lost HoldLost with no fault")
				assert.EqualValues(t, entries, asked.Load())
				assert.EqualValues(t, entries, c.Stats().Entries)
				for _, p := range c.peers {
					assert.Empty(t, p.Suspected(), "peer %d", p.ID())
				}
			})
		}
	}
}

// TestHoldErrAllocatesNothing: HoldErr, cheap enough for every write,
// allocates nothing while the hold is not in doubt.
func TestHoldErrAllocatesNothing(t *testing.T) {
	c := variant{alg: RicartAgrawala, opts: []Option{WithUnreachableAfter(time.Hour)}}.cluster(t, 3)
	p := c.Peer(0)
	p.Lock()
	defer p.Unlock()
	var err error
	allocs := testing.AllocsPerRun(100, func() { err = p.HoldErr() })
	require.NoError(t, err)
	assert.Zero(t, allocs)
	assert.False(t, errors.Is(err, ErrHoldLost))
}
