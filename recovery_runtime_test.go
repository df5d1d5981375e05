package dmutex

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recoveryCluster starts n peers of alg with its recovery on and the
// in-memory network's detector.
func recoveryCluster(t *testing.T, alg Algorithm, n int) *Cluster {
	t.Helper()
	c, err := New(alg, n, WithRecovery(), WithUnreachableAfter(unreachableAfter))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// TestRecoveryOptions checks where WithRecovery applies: to the
// algorithms with a recovery, and, for a cluster or NewPeer, only with
// the detector WithUnreachableAfter gives.
func TestRecoveryOptions(t *testing.T) {
	_, err := New(RicartAgrawala, 3, WithRecovery())
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.ErrorContains(t, err, "WithRecovery needs WithUnreachableAfter")

	nw := NewChanNetwork(2)
	defer nw.Close()
	_, err = NewPeer(RicartAgrawala, 0, 2, nw.Endpoint(0), WithRecovery())
	require.ErrorIs(t, err, ErrInvalidConfig)

	_, err = New(Lamport, 3, WithRecovery(), WithUnreachableAfter(time.Second))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.ErrorContains(t, err, "option WithRecovery does not apply to lamport")

	p, err := NewPeer(RicartAgrawala, 1, 2, nw.Endpoint(1), WithRecovery(), WithUnreachableAfter(time.Second))
	require.NoError(t, err)
	require.NoError(t, p.Close())
}

// TestRecoverySameCounts checks that crash exclusion costs nothing while
// nobody fails: one entry at a time costs what closedForms says it costs
// without the option, at every size.
func TestRecoverySameCounts(t *testing.T) {
	requireRecoverySameCounts(t, RicartAgrawala, func(t *testing.T, p Locker) {
		assert.Less(t, p.(*Peer).d.fence, uint64(FenceEpoch), "no suspicion, no new epoch")
	})
}

// requireRecoverySameCounts requires that alg with WithRecovery costs, one
// entry at a time and nobody failing, what closedForms says it costs
// without the option, at n = 2, 3 and 5; after each entry it calls also,
// if set, with the peer that entered.
func requireRecoverySameCounts(t *testing.T, alg Algorithm, also func(*testing.T, Locker)) {
	i := slices.IndexFunc(closedForms, func(f closedForm) bool { return f.v.alg == alg && f.v.opts == nil })
	require.GreaterOrEqual(t, i, 0, "no closed form for %v", alg)
	form := closedForms[i]
	for _, n := range []int{2, 3, 5} {
		t.Run("n="+strconv.Itoa(n), func(t *testing.T) {
			c := recoveryCluster(t, alg, n)
			for id := range n {
				before := c.Stats()
				p := c.Peer(id)
				lockWithin(t, p, time.Minute)
				p.Unlock()
				waitQuiet(t, c)
				got := c.Stats().Sub(before)
				assert.Equal(t, uint64(1), got.Entries)
				assert.Equal(t, form.want(n, id, 0), nonNil(got.ByKind), "peer %d", id)
				if also != nil {
					also(t, p)
				}
			}
		})
	}
}

// waitSuspected waits, with a generous deadline, until peer p suspects
// exactly the peers in want.
func waitSuspected(t *testing.T, p Locker, want []int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !equalInts(p.(*Peer).Suspected(), want) {
		require.False(t, time.Now().After(deadline), "peer %d suspects %v, want %v", p.ID(), p.(*Peer).Suspected(), want)
		time.Sleep(time.Millisecond)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRecoveryCrash crashes a peer of a 4-peer cluster with crash
// exclusion on, idle or inside the critical section, and checks that the
// survivors go on entering, one after another, each entry costing n-1
// requests (the crashed peer's is lost, but was handed to the transport)
// and n-2 replies; that each survivor's first fence after the crash is of
// a new epoch, and fences increase in entry order.
func TestRecoveryCrash(t *testing.T) {
	const n, crashed, rounds = 4, 3, 3
	for _, inside := range []bool{false, true} {
		t.Run("inside="+strconv.FormatBool(inside), func(t *testing.T) {
			c := recoveryCluster(t, RicartAgrawala, n)
			dead := c.Peer(crashed)
			lockWithin(t, dead, time.Minute)
			deadFence := dead.Fence()
			if !inside {
				dead.Unlock()
			}
			waitQuiet(t, c)
			require.NoError(t, c.Network().Crash(crashed))

			before := c.Stats()
			var last uint64
			for round := range rounds {
				for id := range n - 1 {
					p := c.Peer(id)
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					err := p.LockContext(ctx) // never ErrPeerUnreachable: the machine goes on without it
					cancel()
					require.NoError(t, err, "round %d peer %d", round, id)
					f := p.Fence()
					if round == 0 {
						// Each survivor's first entry since it suspected the
						// crashed peer (it cannot enter without suspecting
						// it) takes a new epoch of its own, epoch k being
						// peer k-1's: peers 0, 1, 2 in turn take 1, 2, 3.
						// The later entries take none.
						assert.Equal(t, classFence(uint64(id+1)*FenceEpoch, id, n), f, "first entry of peer %d after the suspicion", id)
					} else {
						assert.Equal(t, classFence(last, id, n), f, "round %d peer %d", round, id)
					}
					assert.Greater(t, f, max(last, deadFence), "round %d peer %d", round, id)
					last = f
					p.Unlock()
				}
			}
			for id := range n - 1 {
				waitSuspected(t, c.Peer(id), []int{crashed})
			}
			got := c.Stats().Sub(before)
			entries := uint64(rounds * (n - 1))
			assert.Equal(t, entries, got.Entries)
			assert.Equal(t, map[string]uint64{"request": entries * (n - 1), "reply": entries * (n - 2)}, nonNil(got.ByKind))
		})
	}
}

// TestRecoveryContention has the survivors of a crash contend, two
// callers each, around a guard: nobody overlaps, and every call enters.
func TestRecoveryContention(t *testing.T) {
	const n, crashed, rounds = 4, 0, 20
	c := recoveryCluster(t, RicartAgrawala, n)
	require.NoError(t, c.Network().Crash(crashed))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var g guard
	errs := make(chan error, 2*(n-1))
	for id := 1; id < n; id++ {
		p := c.Peer(id)
		for range 2 {
			go func() { errs <- guardedRounds(ctx, p, &g, rounds) }()
		}
	}
	for range 2 * (n - 1) {
		require.NoError(t, <-errs)
	}
	assert.Equal(t, 2*(n-1)*rounds, g.counter)
	assert.Equal(t, uint64(2*(n-1)*rounds), c.Stats().Entries)
}

// TestRecoveryTrustAgain cuts a peer off, lets the others enter without
// it, heals the partition and checks that, trusted again, it is needed
// again: every entry then costs 2(n-1) messages, its own included, and
// its first entry comes after all the others'.
func TestRecoveryTrustAgain(t *testing.T) {
	const n, cut = 3, 2
	c := recoveryCluster(t, RicartAgrawala, n)
	require.NoError(t, c.Network().Partition([]int{cut}))
	for id := range n - 1 {
		waitSuspected(t, c.Peer(id), []int{cut})
	}
	var last uint64
	for id := range n - 1 {
		p := c.Peer(id)
		lockWithin(t, p, time.Minute)
		last = p.Fence()
		p.Unlock()
	}
	c.Network().Heal()
	for id := range n {
		waitSuspected(t, c.Peer(id), nil)
	}
	for id := range n {
		before := c.Stats()
		p := c.Peer(id)
		lockWithin(t, p, time.Minute)
		f := p.Fence()
		// Nobody is suspected any more: no new epoch, even for the peer
		// that suspected the others while cut off and has not entered.
		assert.Equal(t, classFence(last, id, n), f, "peer %d", id)
		last = f
		p.Unlock()
		// Its n-1 replies were sent before it entered, and nothing else
		// is in flight: the requests lost to the partition are gone.
		got := c.Stats().Sub(before)
		assert.Equal(t, map[string]uint64{"request": n - 1, "reply": n - 1}, nonNil(got.ByKind), "peer %d", id)
	}
}

// TestRecoveryFastPath arms the fast path of a Suzuki-Kasami idle token
// holder with recovery on, then crashes another peer: the suspicion, which
// steps the machine that the fast path keeps in its entered state, leaves
// both survivors able to enter, the other one with a fence of a new epoch.
func TestRecoveryFastPath(t *testing.T) {
	const n = 3
	c, err := New(SuzukiKasami, n, WithRecovery(), WithUnreachableAfter(unreachableAfter))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	holder := c.Peer(0) // the token starts there
	armed := func() bool {
		holder.mu.Lock()
		defer holder.mu.Unlock()
		return holder.fast.word.Load()&fastArmed != 0
	}
	for i := 0; !armed(); i++ {
		require.Less(t, i, 10000, "the fast path never armed")
		holder.Lock()
		holder.Unlock()
	}
	require.NoError(t, c.Network().Crash(2))
	waitSuspected(t, holder, []int{2})
	lockWithin(t, c.Peer(1), time.Minute)
	assert.Greater(t, c.Peer(1).Fence(), uint64(FenceEpoch))
	c.Peer(1).Unlock()
	lockWithin(t, holder, time.Minute)
	holder.Unlock()
}

// TestRecoveryEpochOnSuspicionOnly checks that only a new suspicion starts
// an epoch: peer 4 crashes and peer 3 is cut off, peer 0 (still with a
// majority of five) enters (a new epoch), and once the partition heals
// and peer 3 is trusted again, peer 0's next entry takes its next fence,
// though it still suspects peer 4.
func TestRecoveryEpochOnSuspicionOnly(t *testing.T) {
	const n = 5
	c := recoveryCluster(t, RicartAgrawala, n)
	require.NoError(t, c.Network().Crash(4))
	require.NoError(t, c.Network().Partition([]int{3}))
	p := c.Peer(0)
	waitSuspected(t, p, []int{3, 4})
	lockWithin(t, p, time.Minute)
	first := p.Fence()
	assert.Equal(t, classFence(FenceEpoch, 0, n), first)
	p.Unlock()
	c.Network().Heal()
	waitSuspected(t, p, []int{4})
	lockWithin(t, p, time.Minute)
	assert.Equal(t, classFence(first, 0, n), p.Fence(), "a trust starts no epoch")
	p.Unlock()
}

// classFence is the fence a peer id of n takes with WithRecovery when the
// highest it has seen is floor and no epoch is due: the least number
// above floor equal to id modulo n.
func classFence(floor uint64, id, n int) uint64 {
	f := floor + 1
	for f%uint64(n) != uint64(id) {
		f++
	}
	return f
}

// TestRecoveryLonePeer cuts one peer of three off alone, for every
// algorithm with a recovery and each peer in turn. The lone peer suspects
// both others: in a minority, it does not enter, and its LockContext says
// which peers it cannot reach. The other two suspect it, go on entering
// without it, and a store that checks fences accepts every one of their
// writes: nothing the lone peer could take ranks above them. After the
// heal, the lone peer enters too, and its write is accepted.
func TestRecoveryLonePeer(t *testing.T) {
	const n, rounds = 3, 5
	for _, alg := range recoveryAlgorithms {
		for cut := range n {
			t.Run(fmt.Sprintf("%v/cut=%d", alg, cut), func(t *testing.T) {
				c := recoveryCluster(t, alg, n)
				var store fencedStore
				var pair []int
				for id := range n {
					if id != cut {
						pair = append(pair, id)
					}
				}
				require.NoError(t, c.Network().Partition([]int{cut}))
				waitSuspected(t, c.Peer(cut), pair)
				for _, id := range pair {
					waitSuspected(t, c.Peer(id), []int{cut})
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := c.Peer(cut).LockContext(ctx)
				cancel()
				var ue *UnreachableError
				require.ErrorAs(t, err, &ue, "the lone peer does not enter")
				assert.Equal(t, pair, ue.Peers)
				// The lone peer's own count: the pair may still be sending
				// among themselves (the coordinator's successor taking
				// over, when the coordinator is the one cut off).
				sent := c.Peer(cut).Stats().Messages
				ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
				err = c.Peer(cut).TryLockContext(ctx)
				cancel()
				require.ErrorAs(t, err, &ue, "the lone peer's try is refused at once")
				assert.Equal(t, sent, c.Peer(cut).Stats().Messages, "a try in a minority sends nothing")
				for round := range rounds {
					for _, id := range pair {
						p := c.Peer(id)
						lockWithin(t, p, time.Minute)
						assert.True(t, store.write(p.Fence(), fmt.Sprintf("P%d round %d", id, round)), "round %d: P%d's write with fence %d", round, id, p.Fence())
						p.Unlock()
					}
				}
				c.Network().Heal()
				for id := range n {
					waitSuspected(t, c.Peer(id), nil)
				}
				p := c.Peer(cut)
				lockWithin(t, p, time.Minute)
				assert.True(t, store.write(p.Fence(), "the lone peer"), "the lone peer's write after the heal, fence %d", p.Fence())
				p.Unlock()
				assert.Empty(t, store.rejected)
			})
		}
	}
}

// TestRecoveryHealedPartition is issue 23's healed partition, for every
// algorithm with a recovery and each peer cut off in turn (the token
// holder and the coordinator among them): the other two ask for the
// lock, the partition heals, and every peer then enters. Long, the cut
// outlasts WithUnreachableAfter (the pair suspects the cut peer and goes
// on without it); short, nobody suspects anyone, and what was sent across
// the cut is lost all the same, so the peers must ask again when the link
// is back. A store that checks fences accepts every write.
func TestRecoveryHealedPartition(t *testing.T) {
	for _, alg := range recoveryAlgorithms {
		for _, long := range []bool{false, true} {
			for cut := range 3 {
				name := "short"
				after := time.Hour // nobody is suspected
				if long {
					name, after = "long", unreachableAfter
				}
				t.Run(fmt.Sprintf("%v/%s/cut=%d", alg, name, cut), func(t *testing.T) {
					c, err := New(alg, 3, WithRecovery(), WithUnreachableAfter(after))
					require.NoError(t, err)
					t.Cleanup(func() { require.NoError(t, c.Close()) })
					var store fencedStore
					pair := slices.DeleteFunc([]int{0, 1, 2}, func(id int) bool { return id == cut })
					require.NoError(t, c.Network().Partition([]int{cut}))
					if long {
						for _, id := range pair {
							waitSuspected(t, c.Peer(id), []int{cut})
						}
					}
					done := make(chan error, 2)
					for _, id := range pair {
						go func() {
							p := c.Peer(id)
							ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
							defer cancel()
							if err := p.LockContext(ctx); err != nil {
								done <- fmt.Errorf("P%d: %w", id, err)
								return
							}
							if !store.write(p.Fence(), fmt.Sprintf("P%d", id)) {
								done <- fmt.Errorf("P%d's write with fence %d refused", id, p.Fence())
							} else {
								done <- nil
							}
							p.Unlock()
						}()
					}
					if long {
						// The pair goes on without the cut peer: both enter before the heal.
						require.NoError(t, <-done)
						require.NoError(t, <-done)
					}
					if !long {
						// Heal once the cut has lost something and the
						// network has gone quiet (or both entered).
						eventually(t, "a loss or both entries", func() bool { return c.Network().Dropped() > 0 || len(done) == 2 })
						for quiet := 0; quiet < 3 && len(done) < 2; {
							before := c.Stats().Messages
							time.Sleep(10 * time.Millisecond)
							if c.Stats().Messages == before {
								quiet++
							} else {
								quiet = 0
							}
						}
					}
					c.Network().Heal()
					if !long {
						require.NoError(t, <-done)
						require.NoError(t, <-done)
					}
					for id := range 3 {
						waitSuspected(t, c.Peer(id), nil)
					}
					for id := range 3 {
						p := c.Peer(id)
						lockWithin(t, p, time.Minute)
						assert.True(t, store.write(p.Fence(), fmt.Sprintf("P%d after", id)), "P%d's write after the heal, fence %d", id, p.Fence())
						p.Unlock()
					}
					assert.Empty(t, store.rejected)
				})
			}
		}
	}
}

// TestRecoveryPartitionStorm cuts and heals the in-memory network twelve
// times at seeded random moments, some cuts shorter than
// WithUnreachableAfter and some longer, while every peer locks and writes
// twice to a store that checks fences. Two holds never share a fence, so
// the store never accepts writes of two holders with the same one; and
// once the network is whole again every peer enters.
func TestRecoveryPartitionStorm(t *testing.T) {
	for _, alg := range recoveryAlgorithms {
		for _, n := range []int{3, 4} {
			t.Run(fmt.Sprintf("%v/n=%d", alg, n), func(t *testing.T) {
				c := recoveryCluster(t, alg, n)
				var (
					mu    sync.Mutex
					owner = map[uint64]int{} // fence -> the peer whose write the store accepted with it
					store fencedStore
					stop  = make(chan struct{})
					wg    sync.WaitGroup
				)
				for id := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						p := c.Peer(id)
						for {
							select {
							case <-stop:
								return
							default:
							}
							ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
							err := p.LockContext(ctx)
							cancel()
							if err != nil {
								time.Sleep(time.Millisecond)
								continue
							}
							f := p.Fence()
							for w := range 2 {
								if store.write(f, fmt.Sprintf("P%d fence %d write %d", id, f, w)) {
									mu.Lock()
									if o, ok := owner[f]; ok && o != id {
										t.Errorf("the store accepted writes of P%d and P%d with the same fence %d", o, id, f)
									}
									owner[f] = id
									mu.Unlock()
								}
								time.Sleep(100 * time.Microsecond)
							}
							p.Unlock()
						}
					}()
				}
				rng := rand.New(rand.NewPCG(uint64(n), uint64(alg)))
				for range 12 {
					cut := rng.IntN(n)
					require.NoError(t, c.Network().Partition([]int{cut}))
					time.Sleep(time.Duration(rng.IntN(int(3 * unreachableAfter))))
					c.Network().Heal()
					time.Sleep(time.Duration(rng.IntN(int(2 * unreachableAfter))))
				}
				close(stop)
				wg.Wait()
				for id := range n {
					waitSuspected(t, c.Peer(id), nil)
				}
				for id := range n {
					lockWithin(t, c.Peer(id), time.Minute)
					c.Peer(id).Unlock()
				}
				assert.NotEmpty(t, store.accepted)
			})
		}
	}
}
