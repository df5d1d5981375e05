package dmutex

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// variant is one algorithm configuration under test.
type variant struct {
	name string
	alg  Algorithm
	opts []Option
}

// variants lists every algorithm, plus the option variants worth testing
// on their own.
func variants() []variant {
	var vs []variant
	for _, a := range Algorithms() {
		vs = append(vs, variant{name: a.String(), alg: a})
		if a == RicartAgrawala {
			vs = append(vs, variant{name: "ricart-agrawala-implicit", alg: a, opts: []Option{WithImplicitReplies()}})
		}
	}
	return vs
}

func (v variant) cluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c, err := New(v.alg, n, v.opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// guard detects overlapping critical sections: enter fails if anyone else
// is inside. The plain counter is left unsynchronized on purpose, so that
// the race detector sees two holders that the protocol failed to order.
type guard struct {
	inside  atomic.Int32
	holder  atomic.Int64
	counter int
}

func (g *guard) enter(id int) error {
	if !g.inside.CompareAndSwap(0, 1) {
		return fmt.Errorf("peer %d entered while peer %d was inside", id, g.holder.Load())
	}
	g.holder.Store(int64(id))
	g.counter++
	return nil
}

func (g *guard) leave() { g.inside.Store(0) }

// hammer has workers goroutines on every peer each take the lock rounds
// times, around a guard, and fails the test on an overlap or if the whole
// run does not finish within limit.
func hammer(t *testing.T, c *Cluster, workers, rounds int, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var g guard
	eg, ctx := errgroup.WithContext(ctx) // the first failure stops everyone
	for _, p := range c.Peers() {
		for range workers {
			eg.Go(func() error {
				for range rounds {
					if err := p.LockContext(ctx); err != nil {
						return fmt.Errorf("peer %d: %w (a deadlock or a lost grant?)", p.ID(), err)
					}
					err := g.enter(p.ID())
					runtime.Gosched() // stay inside a while, so an overlap shows
					g.leave()
					p.Unlock()
					if err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	require.NoError(t, eg.Wait())
	want := c.Len() * workers * rounds
	require.Equal(t, want, g.counter)
	require.Equal(t, uint64(want), c.Stats().Entries)
}

// guardedRounds has p take its lock rounds times around g, and returns
// the first error: LockContext's, or g's on an overlap.
func guardedRounds(ctx context.Context, p Locker, g *guard, rounds int) error {
	for range rounds {
		if err := p.LockContext(ctx); err != nil {
			return err
		}
		err := g.enter(p.ID())
		g.leave()
		p.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// lockWithin takes p's lock or fails the test after limit.
func lockWithin(t *testing.T, p Locker, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	require.NoError(t, p.LockContext(ctx), "peer %d could not lock within %v", p.ID(), limit)
}

// cancellationStorm has two goroutines per peer make calls LockContext
// calls in all, each with a seeded random deadline under 200µs, entering
// around a guard whenever one succeeds.
func cancellationStorm(t *testing.T, c *Cluster, calls int, seed uint64) {
	t.Helper()
	n := c.Len()
	var wg sync.WaitGroup
	var g guard
	errs := make(chan error, 2*n)
	for i := range 2 * n {
		wg.Go(func() {
			p := c.Peer(i % n)
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for range calls / (2 * n) {
				d := time.Duration(rng.IntN(200)) * time.Microsecond
				ctx, cancel := context.WithTimeout(context.Background(), d)
				err := p.LockContext(ctx)
				cancel()
				switch {
				case err == nil:
					if err := g.enter(p.ID()); err != nil {
						errs <- err
					}
					g.leave()
					p.Unlock()
				case !errors.Is(err, context.DeadlineExceeded):
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// waitQuiet waits until every message the peers sent has been delivered
// and handled, so that counts read afterwards are final. It assumes a
// network that loses nothing.
func waitQuiet(t testing.TB, c *Cluster) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var sent, delivered uint64
		for _, p := range c.peers {
			p.mu.Lock()
			for _, v := range p.sent {
				sent += v
			}
			delivered += p.delivered
			p.mu.Unlock()
		}
		if sent == delivered {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("network not quiet after 10s: %d sent, %d delivered", sent, delivered)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// A closedForm is one variant's count of messages by kind for the
// entry of peer id in a cluster of n, in round round of entries by every
// peer in turn (0, 1, ..., n-1, then again) from a fresh cluster.
type closedForm struct {
	v    variant
	want func(n, id, round int) map[string]uint64
}

// closedForms gives, for the permission algorithms, the messages of one
// entry at a time by kind, as the papers count them: peer id's entry in a
// cluster of n. The runtime's and the simulator's count tests both check
// against it.
var closedForms = []closedForm{
	{variant{name: "agrawal-el-abbadi", alg: AgrawalElAbbadi}, func(n, id, _ int) map[string]uint64 {
		// A request, a vote and a release for each other peer of the
		// path from the root through id down the leftmost branch: K-1 of
		// them, K being the depth of the leaf it ends at, plus one.
		leaf := id
		for 2*leaf+1 < n {
			leaf = 2*leaf + 1
		}
		k1 := uint64(bits.Len(uint(leaf+1)) - 1)
		if k1 == 0 {
			return map[string]uint64{}
		}
		return map[string]uint64{"request": k1, "locked": k1, "release": k1}
	}},
	{variant{name: "ricart-agrawala", alg: RicartAgrawala}, func(n, _, _ int) map[string]uint64 {
		return map[string]uint64{"request": uint64(n - 1), "reply": uint64(n - 1)}
	}},
	{variant{name: "ricart-agrawala-implicit", alg: RicartAgrawala, opts: []Option{WithImplicitReplies()}}, func(n, _, _ int) map[string]uint64 {
		return map[string]uint64{"request": uint64(n - 1), "reply": uint64(n - 1)}
	}},
	{variant{name: "lamport", alg: Lamport}, func(n, _, _ int) map[string]uint64 {
		return map[string]uint64{"request": uint64(n - 1), "reply": uint64(n - 1), "release": uint64(n - 1)}
	}},
	{variant{name: "centralized", alg: Centralized}, func(_, id, _ int) map[string]uint64 {
		if id == coordinator {
			return map[string]uint64{}
		}
		return map[string]uint64{"request": 1, "grant": 1, "release": 1}
	}},
	{variant{name: "lodha-kshemkalyani", alg: LodhaKshemkalyani}, func(n, _, _ int) map[string]uint64 {
		// Alone, nobody's request is concurrent: every peer replies.
		return map[string]uint64{"request": uint64(n - 1), "reply": uint64(n - 1)}
	}},
	{variant{name: "singhal-dynamic", alg: SinghalDynamic}, func(n, id, round int) map[string]uint64 {
		// A request and a reply for each peer in R_id: in the first
		// round the staircase, the peers below id; after it, every
		// other peer, since each has entered since id's last entry.
		r := uint64(n - 1)
		if round == 0 {
			r = uint64(id)
		}
		if r == 0 {
			return map[string]uint64{}
		}
		return map[string]uint64{"request": r, "reply": r}
	}},
	{variant{name: "roucairol-carvalho", alg: RoucairolCarvalho}, func(n, id, round int) map[string]uint64 {
		// A request and a reply for each permission elsewhere: in the
		// first round, peer id lacks those of the peers before it, which
		// start with them; after it, every other peer has taken its own.
		lack := uint64(n - 1)
		if round == 0 {
			lack = uint64(id)
		}
		if lack == 0 {
			return map[string]uint64{}
		}
		return map[string]uint64{"request": lack, "reply": lack}
	}},
}

// raceLight reports whether a test should run only its small searches:
// under the race detector, which slows the model checker about tenfold
// and has nothing to find in a search on one goroutine, unless
// -dmutex.big asks for everything. What it leaves out runs without -race:
// .ci/run runs the root package a second time, as `go test .`.
func raceLight() bool { return raceEnabled && !*bigChecks }

// skipRaceLight skips t when raceLight holds, saying where it runs.
func skipRaceLight(t *testing.T, what string) {
	t.Helper()
	if raceLight() {
		t.Skipf("%s: left to the run without -race (go test -run '%s' .)", what, t.Name())
	}
}
