package dmutex

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// tryN is the cluster size of the TryLock runtime tests: big enough that
// Maekawa's voting sets are proper subsets and Raymond's tree has depth 2.
const tryN = 5

// raymondDepth is peer i's distance to the root in the default heap tree.
func raymondDepth(i int) int {
	d := 0
	for ; i > 0; i = raymondParent(i) {
		d++
	}
	return d
}

// tryCosts gives, from each constructor's documentation, the messages of
// one try by peer j in a fresh cluster of n, while peer h holds the lock
// (refused) or, with h = -1, while nobody does (entered, counted up to the
// release and the quiet after it). The holder h entered first with the
// lock idle, so for the token algorithms it holds the token; the tests
// use h = 0.
func tryCosts(v variant, n, h, j int) map[string]uint64 {
	want := tryCostsWithZeros(v, n, h, j)
	maps.DeleteFunc(want, func(_ string, c uint64) bool { return c == 0 })
	return want
}

func tryCostsWithZeros(v variant, n, h, j int) map[string]uint64 {
	k := func(x int) uint64 { return uint64(x) }
	refused := h >= 0
	switch v.alg {
	case Centralized:
		switch {
		case j == coordinator:
			return map[string]uint64{}
		case refused:
			return map[string]uint64{"try": 1, "busy": 1}
		}
		return map[string]uint64{"try": 1, "grant": 1, "release": 1}
	case RicartAgrawala:
		if refused {
			return map[string]uint64{"try": k(n - 1), "reply": k(n - 2), "busy": 1}
		}
		return map[string]uint64{"try": k(n - 1), "reply": k(n - 1)}
	case Lamport:
		if refused {
			// Every other peer has the holder's older request queued.
			return map[string]uint64{"try": k(n - 1), "busy": k(n - 1), "release": k(n - 1)}
		}
		return map[string]uint64{"try": k(n - 1), "reply": k(n - 1), "release": k(n - 1)}
	case Maekawa:
		sets := VotingSets(n)
		want := map[string]uint64{}
		for _, v := range sets[j] {
			if v == j {
				continue
			}
			want["try"]++
			want["release"]++
			if refused && slices.Contains(sets[h], v) {
				want["busy"]++ // its vote is with the holder
			} else {
				want["locked"]++
			}
		}
		return want
	case SuzukiKasami, RicartAgrawalaToken, SinghalHeuristic:
		if j == 0 && !refused {
			return map[string]uint64{} // the idle token is here
		}
		if refused {
			return map[string]uint64{"try": k(n - 1), "busy": 1}
		}
		return map[string]uint64{"try": k(n - 1), "token": 1}
	case TokenRing:
		if j == 0 && !refused {
			// The token rests here; the release sends it on its idle lap.
			return map[string]uint64{"token": k(n)}
		}
		if refused {
			return map[string]uint64{"try": 1, "busy": 1}
		}
		// The token jumps to j, and after j's release makes the idle lap
		// of n hops that brings it back to rest at j.
		return map[string]uint64{"try": 1, "token": k(1 + n)}
	case LodhaKshemkalyani:
		// As Ricart-Agrawala: a reply from each idle peer, busy from the
		// holder.
		if refused {
			return map[string]uint64{"try": k(n - 1), "reply": k(n - 2), "busy": 1}
		}
		return map[string]uint64{"try": k(n - 1), "reply": k(n - 1)}
	case AgrawalElAbbadi:
		// The paths of the tree 0(1(3 4) 2) of five peers: each other
		// member gets a try and a release, and answers busy if it is on
		// the holder's path, else locked.
		paths := [][]int{{0, 1, 3}, {0, 1, 3}, {0, 2}, {0, 1, 3}, {0, 1, 4}}
		want := map[string]uint64{}
		for _, v := range paths[j] {
			if v == j {
				continue
			}
			want["try"]++
			want["release"]++
			if refused && slices.Contains(paths[h], v) {
				want["busy"]++
			} else {
				want["locked"]++
			}
		}
		return want
	case SinghalDynamic:
		// In a fresh cluster R_j holds the peers below j; the holder,
		// peer 0, answers busy, the others reply.
		if refused {
			return map[string]uint64{"try": k(j), "reply": k(j - 1), "busy": 1}
		}
		return map[string]uint64{"try": k(j), "reply": k(j)}
	case RoucairolCarvalho:
		// In a fresh cluster j lacks the permissions of the peers before
		// it; the holder, peer 0, answers busy, the others give theirs.
		if refused {
			return map[string]uint64{"try": k(j), "reply": k(j - 1), "busy": 1}
		}
		return map[string]uint64{"try": k(j), "reply": k(j)}
	case Raymond:
		d := k(raymondDepth(j))
		if refused {
			return map[string]uint64{"try": d, "busy": d}
		}
		return map[string]uint64{"try": d, "privilege": d}
	case NaimiTrehel:
		// Every peer's LAST points at peer 0, the root: a path of one hop.
		switch {
		case j == 0 && !refused:
			return map[string]uint64{} // the idle token is here
		case refused:
			return map[string]uint64{"try": 1, "busy": 1}
		}
		return map[string]uint64{"try": 1, "token": 1}
	}
	panic("no cost for " + v.name)
}

func byKind(s Stats) map[string]uint64 {
	if s.ByKind == nil {
		return map[string]uint64{}
	}
	return s.ByKind
}

func tryWithin(t *testing.T, p Locker, limit time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	err := p.TryLockContext(ctx)
	require.False(t, errors.Is(err, context.DeadlineExceeded), "peer %d: no answer to a try within %v", p.ID(), limit)
	return err
}

// TestTryLockIdle checks that in an idle cluster a try by any peer enters,
// at the documented cost.
func TestTryLockIdle(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			for j := range tryN {
				c := v.cluster(t, tryN)
				p := c.Peer(j)
				require.NoError(t, tryWithin(t, p, time.Minute))
				assert.Positive(t, p.Fence())
				p.Unlock()
				waitQuiet(t, c)
				st := c.Stats()
				assert.Equal(t, uint64(1), st.Entries)
				assert.Equal(t, tryCosts(v, tryN, -1, j), byKind(st), "peer %d", j)
			}
		})
	}
}

// TestTryLockRefused checks that while peer 0 holds the lock every other
// peer's try is refused with ErrLocked at exactly the documented cost, and
// that the refusal leaves nothing behind: afterwards every peer locks in
// turn at the same cost, message for message, as in a cluster where
// nobody tried.
func TestTryLockRefused(t *testing.T) {
	const h = 0
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			for j := 1; j < tryN; j++ {
				c := v.cluster(t, tryN)
				ref := v.cluster(t, tryN) // the same history without the try
				for _, cl := range []*Cluster{c, ref} {
					lockWithin(t, cl.Peer(h), time.Minute)
					waitQuiet(t, cl)
				}
				before := c.Stats()
				err := tryWithin(t, c.Peer(j), time.Minute)
				require.ErrorIs(t, err, ErrLocked, "peer %d", j)
				waitQuiet(t, c)
				assert.Equal(t, tryCosts(v, tryN, h, j), byKind(c.Stats().Sub(before)), "peer %d's refused try", j)
				assert.Zero(t, c.Peer(j).Fence())

				var deltas [2]Stats
				for x, cl := range []*Cluster{c, ref} {
					cl.Peer(h).Unlock()
					waitQuiet(t, cl)
					start := cl.Stats()
					for _, p := range cl.Peers() {
						lockWithin(t, p, time.Minute)
						p.Unlock()
						waitQuiet(t, cl)
					}
					deltas[x] = cl.Stats().Sub(start)
				}
				if v.alg == RoucairolCarvalho || v.alg == SinghalDynamic {
					// The permissions given to the refused try stay with
					// it, as any permission does until it is asked for
					// (Singhal: the peers that replied left its request
					// set): the later entries ask elsewhere, the same in
					// number.
					assert.Equal(t, deltas[1].Entries, deltas[0].Entries, "after peer %d's refused try", j)
					continue
				}
				if v.alg == SinghalHeuristic {
					// Every peer put the trier in state R, as it would
					// for a request: the later entries also ask it, one
					// request more for each peer that had not.
					assert.Equal(t, deltas[1].Entries, deltas[0].Entries, "after peer %d's refused try", j)
					assert.Equal(t, deltas[1].ByKind["token"], deltas[0].ByKind["token"], "after peer %d's refused try", j)
					assert.GreaterOrEqual(t, deltas[0].ByKind["request"], deltas[1].ByKind["request"], "after peer %d's refused try", j)
					continue
				}
				assert.Equal(t, deltas[1], deltas[0], "after peer %d's refused try", j)
			}
		})
	}
}

// TestTryLockLocal checks the answers a peer gives without asking anyone:
// while one of its own callers is inside, and on a closed peer.
func TestTryLockLocal(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			c := v.cluster(t, tryN)
			for _, p := range c.Peers() {
				lockWithin(t, p, time.Minute)
				waitQuiet(t, c)
				before := c.Stats()
				assert.False(t, p.TryLock(), "peer %d", p.ID())
				assert.ErrorIs(t, p.TryLockContext(context.Background()), ErrLocked)
				assert.Equal(t, before, c.Stats(), "a local refusal sends nothing")
				p.Unlock()
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			assert.ErrorIs(t, c.Peer(1).TryLockContext(ctx), context.Canceled)
			require.NoError(t, c.Close())
			assert.ErrorIs(t, c.Peer(1).TryLockContext(context.Background()), ErrClosed)
			assert.False(t, c.Peer(1).TryLock())
		})
	}
}

// TestTryLockAbandoned makes every try outlive its context: each message
// is delayed far longer than the context lasts. Each try is then withdrawn
// when its answer comes, and afterwards every peer can still lock.
func TestTryLockAbandoned(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			c, err := New(v.alg, tryN, append(slices.Clone(v.opts), WithFaults(Faults{Delay: 20 * time.Millisecond}))...)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, c.Close()) })
			for _, p := range c.Peers() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				err := p.TryLockContext(ctx)
				cancel()
				switch {
				case err == nil: // entered locally, or the machine was slower than the messages
					p.Unlock()
				case errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrLocked):
				default:
					require.NoError(t, err)
				}
			}
			for _, p := range c.Peers() {
				lockWithin(t, p, time.Minute)
				p.Unlock()
			}
			waitQuiet(t, c)
		})
	}
}

// TestTryLockRace has several goroutines on every peer mix Lock, TryLock
// and TryLockContext with short deadlines, around an overlap detector,
// under -race. Afterwards every peer must still lock.
func TestTryLockRace(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			c := v.cluster(t, tryN)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var g guard
			var entries [tryN * 2]int
			eg, ctx := errgroup.WithContext(ctx)
			for i := range 2 * tryN {
				p := c.Peer(i % tryN)
				eg.Go(func() error {
					rng := rand.New(rand.NewPCG(7, uint64(i)))
					for range 60 {
						var err error
						switch rng.IntN(3) {
						case 0:
							err = p.LockContext(ctx)
						case 1:
							if !p.TryLock() {
								err = ErrLocked
							}
						default:
							tctx, tcancel := context.WithTimeout(ctx, time.Duration(rng.IntN(300))*time.Microsecond)
							err = p.TryLockContext(tctx)
							tcancel()
							if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
								err = ErrLocked // the try's own deadline: withdrawn
							}
						}
						switch {
						case errors.Is(err, ErrLocked):
							continue
						case err != nil:
							return fmt.Errorf("peer %d: %w", p.ID(), err)
						}
						entries[i]++
						gerr := g.enter(p.ID())
						runtime.Gosched()
						g.leave()
						p.Unlock()
						if gerr != nil {
							return gerr
						}
					}
					return nil
				})
			}
			require.NoError(t, eg.Wait())
			total := 0
			for _, e := range entries {
				total += e
			}
			assert.Equal(t, total, g.counter)
			t.Logf("%d entries by Lock, TryLock and TryLockContext", total)
			for _, p := range c.Peers() {
				lockWithin(t, p, time.Minute)
				p.Unlock()
			}
			waitQuiet(t, c)
			// Abandoned tries that were granted entered and left at once:
			// entries counts only those given to a caller.
			assert.Equal(t, uint64(total+tryN), c.Stats().Entries)
		})
	}
}

// TestTryLockAllocs checks that a try by an idle token holder or by the
// coordinator, the hot path of TryLock, allocates nothing. (The token
// ring is not among them: its holder sends the token on a lap at every
// release, and refuses a try until the token rests again.)
func TestTryLockAllocs(t *testing.T) {
	for _, alg := range []Algorithm{Centralized, SuzukiKasami, Raymond} {
		t.Run(alg.String(), func(t *testing.T) {
			c := variant{alg: alg}.cluster(t, tryN)
			p := c.Peer(0)
			for _, try := range []func() bool{p.TryLock, func() bool { return p.TryLockContext(context.Background()) == nil }} {
				allocs := testing.AllocsPerRun(1000, func() {
					if !try() {
						panic("refused")
					}
					p.Unlock()
				})
				assert.Zero(t, allocs)
			}
		})
	}
}

// BenchmarkTryLock measures one try by peer 1 while peer 0 holds the lock
// (refused) and while nobody does (entered and left), per algorithm. With
// a token algorithm peer 1 keeps the token after its first entry, and
// re-enters by the fast path.
func BenchmarkTryLock(b *testing.B) {
	for _, v := range variants() {
		for _, held := range []bool{true, false} {
			b.Run(fmt.Sprintf("alg=%s/n=%d/held=%v", v.name, tryN, held), func(b *testing.B) {
				if v.alg == TokenRing && !held {
					b.Skip("after its release the trier refuses until the token's idle lap ends")
				}
				c := v.cluster(b, tryN)
				if held {
					require.NoError(b, c.Peer(0).LockContext(context.Background()))
				}
				p := c.Peer(1)
				b.ReportAllocs()
				before := c.Stats()
				for b.Loop() {
					err := p.TryLockContext(context.Background())
					if held != errors.Is(err, ErrLocked) {
						b.Fatalf("held %v: %v", held, err)
					}
					if err == nil {
						p.Unlock()
					}
				}
				b.StopTimer()
				waitQuiet(b, c)
				b.ReportMetric(float64(c.Stats().Sub(before).Messages)/float64(b.N), "msgs/op")
			})
		}
	}
}

// TestTryRefusedAfterAQueuedCallerGaveUp has a Lock caller queue behind an
// outstanding try of the same peer and give up before the try's answer:
// the refusal must still reach the try's caller, as ErrLocked, and the
// peer must not ask again for it. The test plays the coordinator of a
// centralized pair.
func TestTryRefusedAfterAQueuedCallerGaveUp(t *testing.T) {
	nw := NewChanNetwork(2)
	m, err := newCentralized(1, 2, &config{})
	require.NoError(t, err)
	p := startPeer(Centralized, 1, 2, m, nw.Endpoint(1), &config{})
	coord := nw.Endpoint(0)
	t.Cleanup(func() {
		require.NoError(t, p.Close())
		require.NoError(t, coord.Close())
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tried := make(chan error, 1)
	go func() { tried <- p.TryLockContext(ctx) }()
	require.Equal(t, KindTry, (<-coord.Recv()).Kind)

	queued, giveUp := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- p.LockContext(queued) }()
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.waiters) == 2
	}, time.Minute, time.Millisecond, "the Lock caller never queued behind the try")
	giveUp()
	require.ErrorIs(t, <-gaveUp, context.Canceled)

	require.NoError(t, coord.Send(1, Message{Kind: KindBusy, From: 0, To: 1}))
	select {
	case err := <-tried:
		require.ErrorIs(t, err, ErrLocked)
	case msg := <-coord.Recv():
		t.Fatalf("the peer asked again (%v) instead of refusing the try", msg)
	case <-ctx.Done():
		t.Fatal("the try's caller was never answered")
	}
}

// TestTryAnsweredAfterALockCallerGaveUp: a Lock caller queued behind an
// outstanding try gives up; the try's answer still goes to the try's
// caller.
func TestTryAnsweredAfterALockCallerGaveUp(t *testing.T) {
	tr := newScriptTransport()
	p, err := NewPeer(RicartAgrawala, 0, 2, tr)
	require.NoError(t, err)
	defer p.Close()
	tried := make(chan error, 1)
	go func() { tried <- p.TryLockContext(context.Background()) }()
	try := tr.nextSent(t)
	require.Equal(t, KindTry, try.Kind)
	waitParked(t, "(*Peer).wait(", "chan receive", "the try")
	ctx, cancel := context.WithCancel(context.Background())
	locked := make(chan error, 1)
	go func() { locked <- p.LockContext(ctx) }()
	waitParked(t, "(*Peer).wait(", "select", "the Lock caller queued behind the try")
	cancel()
	require.ErrorIs(t, <-locked, context.Canceled)
	tr.in <- Message{Kind: KindReply, From: 1, To: 0, TS: 1, Ref: try.TS}
	require.NoError(t, <-tried, "the try's caller is let in")
	p.Unlock()
}
