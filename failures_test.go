package dmutex

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A probe is one LockContext attempt in a failure scenario, and what the
// documented failure semantics say must happen to it.
type probe struct {
	peer int
	want outcome
}

type outcome int

const (
	proceeds outcome = iota + 1 // locks within a generous deadline
	blocks                      // times out at a short deadline
)

func (o outcome) String() string {
	if o == proceeds {
		return "proceeds"
	}
	return "blocks"
}

// A fault scenario, on a cluster of four peers whose peer 0 is the
// coordinator or first token holder.
type scenario struct {
	name  string
	apply func(t *testing.T, c *Cluster)
	sim   func(t *testing.T, s *Simulation) // the same fault in the simulator (simfaults_test.go)
}

var (
	crashIdle = scenario{"crash-idle-peer", func(t *testing.T, c *Cluster) {
		require.NoError(t, c.Network().Crash(3))
	}, func(t *testing.T, s *Simulation) {
		require.NoError(t, s.Crash(3))
	}}
	crashHolder = scenario{"crash-holder", func(t *testing.T, c *Cluster) {
		lockWithin(t, c.Peer(0), 5*time.Second) // peer 0 enters, then dies inside
		require.NoError(t, c.Network().Crash(0))
	}, func(t *testing.T, s *Simulation) {
		enterThenCrash(t, s, 0)
	}}
	partition = scenario{"partition", func(t *testing.T, c *Cluster) {
		require.NoError(t, c.Network().Partition([]int{0, 1}, []int{2, 3}))
	}, func(t *testing.T, s *Simulation) {
		require.NoError(t, s.Partition([]int{0, 1}, []int{2, 3}))
	}}
)

// lose drops the next message of kind k from peer from to peer to.
func lose(k Kind, from, to int) scenario {
	match := func(m Message) bool { return m.Kind == k && m.From == from && m.To == to }
	return scenario{fmt.Sprintf("lost-%v-%d-to-%d", k, from, to), func(t *testing.T, c *Cluster) {
		c.Network().DropNext(1, match)
	}, func(t *testing.T, s *Simulation) {
		s.DropNext(1, match)
	}}
}

// failureSemantics is the table behind the "Failures" section of the
// package documentation: for each algorithm and fault, what each surviving
// peer's next LockContext does. Probes run in order, each on a fresh
// attempt; in no scenario may two peers be inside at once.
var failureSemantics = []struct {
	alg    string // variant name
	fault  scenario
	probes []probe
}{
	{"centralized", crashIdle, []probe{{0, proceeds}, {1, proceeds}, {2, proceeds}}},
	{"centralized", crashHolder, []probe{{1, blocks}, {2, blocks}}},
	{"centralized", lose(KindGrant, 0, 1), []probe{{1, blocks}, {2, blocks}}},
	{"centralized", partition, []probe{{0, proceeds}, {1, proceeds}, {2, blocks}, {3, blocks}}},

	{"lamport", crashIdle, []probe{{0, blocks}, {1, blocks}}},
	{"lamport", crashHolder, []probe{{1, blocks}, {2, blocks}}},
	// A later message from the same peer masks a lost reply: peer 0's own
	// request, stamped later, tells peer 1 what the reply would have.
	{"lamport", lose(KindReply, 0, 1), []probe{{1, blocks}, {2, blocks}, {0, proceeds}}},
	{"lamport", partition, []probe{{0, blocks}, {2, blocks}}},

	{"ricart-agrawala", crashIdle, []probe{{0, blocks}, {1, blocks}}},
	{"ricart-agrawala", crashHolder, []probe{{1, blocks}, {2, blocks}}},
	{"ricart-agrawala", lose(KindReply, 0, 1), []probe{{1, blocks}, {2, blocks}, {0, blocks}}},
	{"ricart-agrawala", partition, []probe{{0, blocks}, {2, blocks}}},

	{"ricart-agrawala-implicit", crashIdle, []probe{{0, blocks}, {1, blocks}}},
	{"ricart-agrawala-implicit", crashHolder, []probe{{1, blocks}, {2, blocks}}},
	// Here too: peer 0's younger request is its implicit permission.
	{"ricart-agrawala-implicit", lose(KindReply, 0, 1), []probe{{1, blocks}, {2, blocks}, {0, proceeds}}},
	{"ricart-agrawala-implicit", partition, []probe{{0, blocks}, {2, blocks}}},

	// Grid voting sets for four peers: {0,1,2} {0,1,3} {0,2,3} {1,2,3}.
	// Peer 0's set avoids peer 3; peer 1's request, stuck on peer 3's
	// vote, then holds votes that peer 2 needs.
	{"maekawa", crashIdle, []probe{{0, proceeds}, {1, blocks}, {2, blocks}}},
	{"maekawa", crashHolder, []probe{{1, blocks}, {3, blocks}}},
	{"maekawa", lose(KindLocked, 1, 0), []probe{{0, blocks}, {3, blocks}, {2, blocks}}},
	{"maekawa", partition, []probe{{0, blocks}, {3, blocks}}},

	{"suzuki-kasami", crashIdle, []probe{{0, proceeds}, {1, proceeds}, {2, proceeds}}},
	{"suzuki-kasami", crashHolder, []probe{{1, blocks}, {2, blocks}}},
	{"suzuki-kasami", lose(KindToken, 0, 1), []probe{{1, blocks}, {2, blocks}, {0, blocks}}},
	{"suzuki-kasami", partition, []probe{{0, proceeds}, {1, proceeds}, {2, blocks}, {3, blocks}}},

	// The ring goes on until the token must pass the crashed peer or the
	// cut: peer 2 is reached from the resting place, peer 0, through 1
	// alone; after peer 2's entry the token goes on to peer 3 and is lost.
	{"token-ring", crashIdle, []probe{{2, proceeds}, {1, blocks}, {0, blocks}}},
	{"token-ring", crashHolder, []probe{{1, blocks}, {2, blocks}}},
	{"token-ring", lose(KindToken, 0, 1), []probe{{1, blocks}, {2, blocks}, {0, blocks}}},
	{"token-ring", partition, []probe{{1, proceeds}, {0, blocks}, {2, blocks}}},

	// Heap-ordered tree: 0 is the root, 1 and 2 its children, 3 under 1.
	{"raymond", crashIdle, []probe{{0, proceeds}, {1, proceeds}, {2, proceeds}}},
	{"raymond", crashHolder, []probe{{1, blocks}, {2, blocks}}},
	{"raymond", lose(KindPrivilege, 0, 1), []probe{{1, blocks}, {2, blocks}, {0, blocks}}},
	{"raymond", partition, []probe{{0, proceeds}, {1, proceeds}, {2, blocks}, {3, blocks}}},
}

// TestFailureSemantics injects each documented fault and checks the
// documented outcome: which peers can still enter, which block until their
// deadline, and that no two peers are ever inside at once.
func TestFailureSemantics(t *testing.T) {
	byName := map[string]variant{}
	for _, v := range variants() {
		byName[v.name] = v
	}
	covered := map[string]bool{}
	for _, tt := range failureSemantics {
		v, ok := byName[tt.alg]
		require.True(t, ok, "failureSemantics names no variant %q", tt.alg)
		covered[tt.alg] = true
		t.Run(tt.alg+"/"+tt.fault.name, func(t *testing.T) {
			t.Parallel()
			c := v.cluster(t, 4)
			tt.fault.apply(t, c)
			var g guard
			for _, pr := range tt.probes {
				p := c.Peer(pr.peer)
				limit := 5 * time.Second
				if pr.want == blocks {
					limit = 150 * time.Millisecond
				}
				ctx, cancel := context.WithTimeout(context.Background(), limit)
				err := p.LockContext(ctx)
				cancel()
				switch pr.want {
				case proceeds:
					require.NoError(t, err, "peer %d should still enter", pr.peer)
					require.NoError(t, g.enter(pr.peer))
					g.leave()
					p.Unlock()
				case blocks:
					if err == nil {
						p.Unlock()
					}
					require.ErrorIs(t, err, context.DeadlineExceeded, "peer %d should block", pr.peer)
				}
			}
		})
	}
	for _, v := range variants() {
		assert.True(t, covered[v.name], "%s has no rows in failureSemantics", v.name)
	}
}

// TestPartitionHealDoesNotRecoverLostRequests shows that healing a
// partition does not help a peer whose request was lost: the algorithms
// never resend.
func TestPartitionHealDoesNotRecoverLostRequests(t *testing.T) {
	c := variant{alg: Centralized}.cluster(t, 4)
	require.NoError(t, c.Network().Partition([]int{0, 1}, []int{2, 3}))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	require.ErrorIs(t, c.Peer(2).LockContext(ctx), context.DeadlineExceeded)
	cancel()
	c.Network().Heal()
	ctx, cancel = context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.Peer(2).LockContext(ctx), context.DeadlineExceeded, "peer 2's request was lost and is never resent")
	lockWithin(t, c.Peer(3), 5*time.Second) // peer 3 asked after the heal
	c.Peer(3).Unlock()
	assert.NotZero(t, c.Network().Dropped())
}

// TestDelayAndReorderKeepSafetyAndLiveness runs the contention test over a
// network that delays every message by a seeded random time, and also
// reorders them for the algorithms that allow it.
func TestDelayAndReorderKeepSafetyAndLiveness(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, v := range variants() {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", v.name, seed), func(t *testing.T) {
				t.Parallel()
				f := Faults{Jitter: 300 * time.Microsecond, Reorder: !v.alg.NeedsFIFO(), Seed: seed}
				c, err := New(v.alg, 5, append(v.opts, WithFaults(f))...)
				require.NoError(t, err)
				defer func() { require.NoError(t, c.Close()) }()
				hammer(t, c, 2, 8, 60*time.Second)
			})
		}
	}
}

// TestCancellationStormWithDelays gives up thousands of LockContext calls
// at random short deadlines over a delaying network, then checks that
// every peer can still lock: no token or permission was lost.
func TestCancellationStormWithDelays(t *testing.T) {
	calls := 3000
	if testing.Short() {
		calls = 400
	}
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			c, err := New(v.alg, 4, append(v.opts, WithFaults(Faults{Delay: 20 * time.Microsecond, Jitter: 200 * time.Microsecond, Seed: 7}))...)
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close()) }()
			cancellationStorm(t, c, calls, 7)
			for _, p := range c.Peers() {
				lockWithin(t, p, 10*time.Second)
				p.Unlock()
			}
		})
	}
}

// TestCloseDuringContention closes a cluster while every peer has callers
// blocked in Lock and LockContext: each returns ErrClosed or panics with
// it, promptly, and goleak (TestMain) sees no goroutine left.
func TestCloseDuringContention(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			c, err := New(v.alg, 4, v.opts...)
			require.NoError(t, err)
			var wg sync.WaitGroup
			results := make(chan error, 32)
			for i := range 16 {
				p := c.Peer(i % 4)
				wg.Go(func() {
					defer func() {
						if r := recover(); r != nil {
							err, _ := r.(error)
							results <- fmt.Errorf("panic: %w", err)
						}
					}()
					for {
						if i%2 == 0 {
							if err := p.LockContext(context.Background()); err != nil {
								results <- err
								return
							}
						} else {
							p.Lock()
						}
						time.Sleep(50 * time.Microsecond)
						p.Unlock()
					}
				})
			}
			time.Sleep(20 * time.Millisecond)
			closed := make(chan error, 1)
			go func() { closed <- c.Close() }()
			select {
			case err := <-closed:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("Close did not return")
			}
			waitOrFail(t, &wg, 10*time.Second)
			close(results)
			n := 0
			for err := range results {
				n++
				require.ErrorIs(t, err, ErrClosed)
				if strings.HasPrefix(err.Error(), "panic: ") {
					require.True(t, errors.Is(err, ErrClosed))
				}
			}
			assert.Equal(t, 16, n, "every caller returned or panicked with ErrClosed")
		})
	}
}

func waitOrFail(t *testing.T, wg *sync.WaitGroup, limit time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("callers still blocked %v after Close", limit)
	}
}

func TestFaultsValidation(t *testing.T) {
	tests := []struct {
		name string
		alg  Algorithm
		f    Faults
		want string
	}{
		{"negative delay", RicartAgrawala, Faults{Delay: -1}, "Faults.Delay = -1ns"},
		{"negative jitter", RicartAgrawala, Faults{Jitter: -time.Second}, "Faults.Jitter = -1s"},
		{"loss above one", Centralized, Faults{Loss: 1.5}, "Faults.Loss = 1.5"},
		{"reorder without jitter", Centralized, Faults{Reorder: true}, "needs a Jitter"},
		{"reorder for lamport", Lamport, Faults{Jitter: time.Millisecond, Reorder: true}, "lamport is only correct over per-pair FIFO"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.alg, 3, WithFaults(tt.f))
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	nw := NewChanNetwork(3)
	defer nw.Close()
	require.ErrorIs(t, nw.Crash(3), ErrInvalidConfig)
	require.ErrorContains(t, nw.Partition([]int{0, 1}, []int{1}), "peer 1 twice")
	require.ErrorContains(t, nw.Partition([]int{5}), "peer 5")
}

// TestLossIsSeeded checks that a seeded loss rate loses the same messages
// in the same order: the numbers drawn depend on the seed only.
func TestLossIsSeeded(t *testing.T) {
	lost := func(seed uint64) []int {
		nw := NewChanNetwork(2)
		defer nw.Close()
		require.NoError(t, nw.SetFaults(Faults{Loss: 0.5, Seed: seed}))
		var got []int
		for i := range 64 {
			require.NoError(t, nw.Endpoint(0).Send(1, Message{Kind: KindRequest, From: 0, To: 1, TS: uint64(i)}))
		}
		for range 64 - int(nw.Dropped()) {
			got = append(got, int((<-nw.Endpoint(1).Recv()).TS))
		}
		return got
	}
	a, b := lost(42), lost(42)
	assert.Equal(t, a, b)
	assert.NotEqual(t, a, lost(43))
	assert.Greater(t, len(a), 10)
	assert.Less(t, len(a), 54)
}
