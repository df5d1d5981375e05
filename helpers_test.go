package dmutex

import (
	"context"
	"fmt"
	"runtime"
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

// variants lists every algorithm that is available, plus the option
// variants worth testing on their own.
func variants() []variant {
	var vs []variant
	for _, a := range Algorithms() {
		if algorithms[a].build == nil {
			continue
		}
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

// lockWithin takes p's lock or fails the test after limit.
func lockWithin(t *testing.T, p Locker, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	require.NoError(t, p.LockContext(ctx), "peer %d could not lock within %v", p.ID(), limit)
}
