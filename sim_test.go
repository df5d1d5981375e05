package dmutex

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var longRuns = flag.Bool("dmutex.long", false, "run the long random simulations at full size (10^5 entries per configuration, n up to 64)")

func TestSimulationBadInput(t *testing.T) {
	tests := []struct {
		name    string
		alg     Algorithm
		n       int
		cfg     SimConfig
		opts    []Option
		wantMsg string
	}{
		{"zero peers", RicartAgrawala, 0, SimConfig{}, nil, "n = 0"},
		{"unknown delivery", RicartAgrawala, 3, SimConfig{Delivery: Delivery(7)}, nil, "SimConfig.Delivery 7"},
		{"the first unknown delivery", RicartAgrawala, 3, SimConfig{Delivery: numDeliveries}, nil, "SimConfig.Delivery 3"},
		{"lamport reordered", Lamport, 3, SimConfig{Delivery: DeliverReorder}, nil, "lamport needs FIFO channels and delivery reorder would reorder them"},
		{"implicit replies on lamport", Lamport, 3, SimConfig{}, []Option{WithImplicitReplies()}, "WithImplicitReplies does not apply to lamport"},
		{"zero option", Centralized, 3, SimConfig{}, []Option{{}}, "zero Option"},
		{"unknown variant", Centralized, 3, SimConfig{Variant: "nope"}, nil, `unknown variant "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSimulation(tt.alg, tt.n, tt.cfg, tt.opts...)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.wantMsg)
			assert.Nil(t, s)
		})
	}
}

func TestSimulationUnsafeDeliveryAccepted(t *testing.T) {
	s, err := NewSimulation(Lamport, 3, SimConfig{Delivery: DeliverReorder, UnsafeDelivery: true})
	require.NoError(t, err)
	require.NotNil(t, s)
}

func TestSimulationRequestOutOfRange(t *testing.T) {
	s, err := NewSimulation(RicartAgrawala, 3, SimConfig{})
	require.NoError(t, err)
	for _, p := range []int{-1, 3, 100} {
		err := s.Request(p)
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.Equal(t, fmt.Sprintf("dmutex: invalid configuration: request by peer %d out of range [0, 3)", p), err.Error())
	}
	assert.Zero(t, s.Stats().Messages)
}

// TestSimulationDropNextNilMatch checks that a nil match loses the next
// messages whatever they are, and that the run goes on (it used to panic
// on the next send).
func TestSimulationDropNextNilMatch(t *testing.T) {
	s, err := NewSimulation(Centralized, 2, SimConfig{})
	require.NoError(t, err)
	s.DropNext(1, nil)
	s.DropNext(0, nil) // no rule
	require.NoError(t, s.Request(1))
	assert.Equal(t, uint64(1), s.Dropped(), "the request to the coordinator is lost")
	require.ErrorIs(t, s.Run(), ErrBlocked)
	assert.Equal(t, []int{1}, s.Waiting())
	require.NoError(t, s.Request(0), "the next message is sent")
	require.ErrorIs(t, s.Run(), ErrBlocked)
	assert.Equal(t, uint64(1), s.Dropped())
}

func TestDeliveryString(t *testing.T) {
	assert.Equal(t, "fifo", DeliverFIFO.String())
	assert.Equal(t, "reorder", DeliverReorder.String())
	assert.Equal(t, "lock-step", DeliverLockStep.String())
	assert.Equal(t, "Delivery(9)", Delivery(9).String())
	assert.Equal(t, "Delivery(3)", numDeliveries.String(), "the first unknown policy")
	assert.Equal(t, "EventKind(0)", EventKind(0).String())
}

func simulation(t testing.TB, v variant, n int, cfg SimConfig) *Simulation {
	t.Helper()
	s, err := NewSimulation(v.alg, n, cfg, v.opts...)
	require.NoError(t, err)
	return s
}

// deliveries lists the policies a variant may run under.
func deliveries(v variant) []Delivery {
	if v.alg.NeedsFIFO() {
		return []Delivery{DeliverFIFO, DeliverLockStep}
	}
	return []Delivery{DeliverFIFO, DeliverReorder, DeliverLockStep}
}

// TestSimulationKContenders has k peers request before one Run and checks
// the classical closed forms for k concurrent contenders.
func TestSimulationKContenders(t *testing.T) {
	tests := []struct {
		v    variant
		want func(n, k int) map[string]uint64
	}{
		{variant{name: "ricart-agrawala", alg: RicartAgrawala}, func(n, k int) map[string]uint64 {
			// 2k(N-1): every entry asks everyone and is answered by everyone.
			return map[string]uint64{"request": uint64(k * (n - 1)), "reply": uint64(k * (n - 1))}
		}},
		{variant{name: "ricart-agrawala-implicit", alg: RicartAgrawala, opts: []Option{WithImplicitReplies()}}, func(n, k int) map[string]uint64 {
			// k(N-1) requests; one reply per pair of contenders, and one
			// from each non-contender to each contender. The count holds
			// over FIFO channels only: reordered, a reply can overtake the
			// request it follows, which then earns a stale reply of its
			// own (see deliveries below).
			return map[string]uint64{"request": uint64(k * (n - 1)), "reply": uint64(k*(k-1)/2 + k*(n-k))}
		}},
		{variant{name: "lamport", alg: Lamport}, func(n, k int) map[string]uint64 {
			return map[string]uint64{"request": uint64(k * (n - 1)), "reply": uint64(k * (n - 1)), "release": uint64(k * (n - 1))}
		}},
		{variant{name: "lodha-kshemkalyani", alg: LodhaKshemkalyani}, func(n, k int) map[string]uint64 {
			// Every request reaches the other contenders while theirs
			// wait: concurrent, each stands in for a reply. The others
			// reply, and each leaving contender but the last sends one
			// release to the next.
			want := map[string]uint64{"request": uint64(k * (n - 1))}
			if k < n {
				want["reply"] = uint64(k * (n - k))
			}
			if k > 1 {
				want["release"] = uint64(k - 1)
			}
			return want
		}},
		{variant{name: "singhal-dynamic", alg: SinghalDynamic}, func(_, k int) map[string]uint64 {
			// From the staircase: of each pair of contenders the lower
			// id is in the higher one's request set and not the other
			// way round, so the lower enters first and the higher asks
			// it once: one request and one reply per pair, none to or
			// from the peers that do not ask.
			m := uint64(k * (k - 1) / 2)
			if m == 0 {
				return map[string]uint64{}
			}
			return map[string]uint64{"request": m, "reply": m}
		}},
		{variant{name: "roucairol-carvalho", alg: RoucairolCarvalho}, func(_, k int) map[string]uint64 {
			// From a fresh cluster: of each pair of contenders the lower
			// id starts with the permission, enters first, and gives it
			// to the higher one, which asked for it: one request and one
			// reply per pair, none to or from the peers that do not ask.
			m := uint64(k * (k - 1) / 2)
			if m == 0 {
				return map[string]uint64{}
			}
			return map[string]uint64{"request": m, "reply": m}
		}},
		{variant{name: "centralized", alg: Centralized}, func(_, k int) map[string]uint64 {
			// The contenders are peers 0..k-1, and peer 0 is the coordinator.
			if k <= 1 {
				return map[string]uint64{}
			}
			m := uint64(k - 1)
			return map[string]uint64{"request": m, "grant": m, "release": m}
		}},
	}
	for _, tt := range tests {
		for _, n := range []int{2, 3, 5, 8} {
			for k := 1; k <= n; k++ {
				for _, d := range deliveries(tt.v) {
					if tt.v.opts != nil && d == DeliverReorder {
						continue // the implicit-reply count assumes FIFO
					}
					name := fmt.Sprintf("%s/n=%d/k=%d/%v", tt.v.name, n, k, d)
					t.Run(name, func(t *testing.T) {
						for seed := range int64(5) {
							s := simulation(t, tt.v, n, SimConfig{Seed: uint64(seed), Delivery: d, NoTrace: true})
							for p := range k {
								require.NoError(t, s.Request(p))
							}
							require.NoError(t, s.Run())
							got := s.Stats()
							assert.Equal(t, uint64(k), got.Entries, "seed %d", seed)
							assert.Equal(t, tt.want(n, k), nonNil(got.ByKind), "seed %d", seed)
						}
					})
				}
			}
		}
	}
}

// TestSimulationSequentialCounts has one peer at a time request and run to
// the end, and checks each entry's messages against the closed form.
func TestSimulationSequentialCounts(t *testing.T) {
	for _, tt := range closedForms {
		for _, n := range []int{1, 2, 3, 5, 8} {
			for _, d := range deliveries(tt.v) {
				t.Run(fmt.Sprintf("%s/n=%d/%v", tt.v.name, n, d), func(t *testing.T) {
					s := simulation(t, tt.v, n, SimConfig{Delivery: d})
					for round := range 2 {
						for id := range n {
							before := s.Stats()
							require.NoError(t, s.Request(id))
							require.NoError(t, s.Run())
							got := s.Stats().Sub(before)
							want := tt.want(n, id, round)
							if n == 1 {
								want = map[string]uint64{}
							}
							assert.Equal(t, uint64(1), got.Entries, "round %d peer %d", round, id)
							assert.Equal(t, want, nonNil(got.ByKind), "round %d peer %d", round, id)
						}
					}
				})
			}
		}
	}
}

// TestSimulationMatchesCluster checks that the simulator counts messages
// as the goroutine runtime does, on the same sequential workload.
func TestSimulationMatchesCluster(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			const n = 4
			c := v.cluster(t, n)
			s := simulation(t, v, n, SimConfig{})
			for round := range 3 {
				for id := range n {
					lockWithin(t, c.Peer(id), 10*time.Second)
					c.Peer(id).Unlock()
					require.NoError(t, s.Request(id))
					require.NoError(t, s.Run())
					// A Lamport peer may enter on a late RELEASE before
					// the REPLY it also gets, so the runtime's count can
					// lag for a moment; the simulator drains everything.
					want := s.Stats()
					require.Eventually(t, func() bool { return c.Stats().Messages == want.Messages },
						5*time.Second, time.Millisecond, "round %d peer %d", round, id)
					require.Equal(t, want, c.Stats(), "round %d peer %d", round, id)
				}
			}
		})
	}
}

// TestSimulationLocalQueue requests one peer several times at once: the
// requests queue at the peer and each is an entry of its own.
func TestSimulationLocalQueue(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			s := simulation(t, v, 3, SimConfig{})
			for range 4 {
				require.NoError(t, s.Request(1))
			}
			require.NoError(t, s.Run())
			assert.Equal(t, uint64(4), s.Stats().Entries)
			var enters int
			for _, e := range s.Events() {
				if e.Kind == EventEnter {
					assert.Equal(t, 1, e.Peer)
					enters++
				}
			}
			assert.Equal(t, 4, enters)
		})
	}
}

// TestSimulationDeterministic compares the logs of runs with equal and
// with different seeds.
func TestSimulationDeterministic(t *testing.T) {
	for _, v := range variants() {
		for _, d := range deliveries(v) {
			t.Run(v.name+"/"+d.String(), func(t *testing.T) {
				run := func(seed int64) string {
					s := simulation(t, v, 5, SimConfig{Seed: uint64(seed), Delivery: d})
					rng := rand.New(rand.NewPCG(7, 7)) // the same workload every time
					for range 20 {
						require.NoError(t, s.Request(rng.IntN(5)))
						for range rng.IntN(6) {
							_, err := s.Step()
							require.NoError(t, err)
						}
					}
					require.NoError(t, s.Run())
					var b bytes.Buffer
					require.NoError(t, s.WriteLog(&b))
					return b.String()
				}
				first := run(42)
				require.Equal(t, first, run(42), "same seed, different run")
				if d != DeliverLockStep {
					assert.NotEqual(t, first, run(43), "the seed should matter")
				}
			})
		}
	}
}

// TestSimulationLockStepLog pins the whole event log of a lock-step run,
// where the schedule is fixed: three Ricart-Agrawala peers request at once.
func TestSimulationLockStepLog(t *testing.T) {
	s := simulation(t, variant{alg: RicartAgrawala}, 3, SimConfig{Delivery: DeliverLockStep})
	for p := range 3 {
		require.NoError(t, s.Request(p))
	}
	require.NoError(t, s.Run())
	var b bytes.Buffer
	require.NoError(t, s.WriteLog(&b))
	want := `   0 P0 request
   0 P0 send m1 request P0->P1 ts=1
   0 P0 send m2 request P0->P2 ts=1
   0 P1 request
   0 P1 send m3 request P1->P0 ts=1
   0 P1 send m4 request P1->P2 ts=1
   0 P2 request
   0 P2 send m5 request P2->P0 ts=1
   0 P2 send m6 request P2->P1 ts=1
   1 P1 receive m1 request P0->P1 ts=1
   1 P1 send m7 reply P1->P0 ts=1 ref=1
   1 P2 receive m2 request P0->P2 ts=1
   1 P2 send m8 reply P2->P0 ts=1 ref=1
   1 P0 receive m3 request P1->P0 ts=1
   1 P2 receive m4 request P1->P2 ts=1
   1 P2 send m9 reply P2->P1 ts=1 ref=1
   1 P0 receive m5 request P2->P0 ts=1
   1 P1 receive m6 request P2->P1 ts=1
   2 P0 receive m7 reply P1->P0 ts=1 ref=1
   2 P0 receive m8 reply P2->P0 ts=1 ref=1
   2 P0 enter
   2 P1 receive m9 reply P2->P1 ts=1 ref=1
   3 P0 leave
   3 P0 send m10 reply P0->P1 ts=1 ref=1
   3 P0 send m11 reply P0->P2 ts=1 ref=1
   4 P1 receive m10 reply P0->P1 ts=1 ref=1
   4 P1 enter
   4 P2 receive m11 reply P0->P2 ts=1 ref=1
   5 P1 leave
   5 P1 send m12 reply P1->P2 ts=1 ref=1
   6 P2 receive m12 reply P1->P2 ts=1 ref=1
   6 P2 enter
   7 P2 leave
`
	assert.Equal(t, want, b.String())
	assert.Equal(t, "entries=3 messages=12 (reply=6 request=6)", s.Stats().String())
}

func TestSimulationMermaid(t *testing.T) {
	s := simulation(t, variant{alg: RicartAgrawala}, 2, SimConfig{Delivery: DeliverLockStep})
	require.NoError(t, s.Request(1))
	require.NoError(t, s.Request(0))
	require.NoError(t, s.Run())
	var b bytes.Buffer
	require.NoError(t, s.WriteMermaid(&b))
	want := `sequenceDiagram
    participant P0
    participant P1
    Note over P1: wants in
    Note over P0: wants in
    P1->>P0: request ts=1
    P0->>P1: request ts=1
    P1->>P0: reply ts=1 ref=1
    Note over P0: enters
    Note over P0: leaves
    P0->>P1: reply ts=1 ref=1
    Note over P1: enters
    Note over P1: leaves
`
	require.Equal(t, want, b.String())

	// The same properties, on a random run of five peers.
	s = simulation(t, variant{alg: Lamport}, 5, SimConfig{Seed: 3})
	for p := range 5 {
		require.NoError(t, s.Request(p))
	}
	require.NoError(t, s.Run())
	b.Reset()
	require.NoError(t, s.WriteMermaid(&b))
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	require.Equal(t, "sequenceDiagram", lines[0])
	for i := range 5 {
		assert.Equal(t, fmt.Sprintf("    participant P%d", i), lines[1+i])
	}
	var arrows, enters, leaves int
	for _, l := range lines[6:] {
		switch {
		case strings.Contains(l, "->>"):
			arrows++
		case strings.HasSuffix(l, ": enters"):
			enters++
		case strings.HasSuffix(l, ": leaves"):
			leaves++
		}
	}
	assert.Equal(t, int(s.Stats().Messages), arrows, "one arrow per message")
	assert.Equal(t, 5, enters)
	assert.Equal(t, 5, leaves)
}

func TestSimulationWithoutTrace(t *testing.T) {
	s := simulation(t, variant{alg: Centralized}, 2, SimConfig{NoTrace: true})
	require.NoError(t, s.Request(1))
	require.NoError(t, s.Run())
	assert.Nil(t, s.Events())
	require.ErrorContains(t, s.WriteLog(&bytes.Buffer{}), "no trace")
	require.ErrorContains(t, s.WriteMermaid(&bytes.Buffer{}), "no trace")
	assert.Equal(t, uint64(1), s.Stats().Entries)
}

// TestSimulationLeaveIsAStep checks that a peer inside stays there while
// messages are delivered: with four contenders, some message reaches
// somebody between an entry and the matching exit.
func TestSimulationLeaveIsAStep(t *testing.T) {
	s := simulation(t, variant{alg: RicartAgrawala}, 4, SimConfig{Seed: 1})
	for p := range 4 {
		require.NoError(t, s.Request(p))
	}
	require.NoError(t, s.Run())
	inside, during := false, 0
	for _, e := range s.Events() {
		switch e.Kind {
		case EventEnter:
			inside = true
		case EventLeave:
			inside = false
		case EventReceive:
			if inside {
				during++
			}
		}
	}
	assert.Positive(t, during)
}

// fakeMachine is a broken machine for tests of the simulator's checks:
// it enters on every request (so two peers overlap) unless never is set,
// in which case it never enters (so the run deadlocks).
type fakeMachine struct{ never bool }

func (f *fakeMachine) step(ev event, out *output) {
	if ev.kind == evRequest && !f.never {
		out.enter()
	}
}
func (f *fakeMachine) clone() machine              { c := *f; return &c }
func (f *fakeMachine) appendState(b []byte) []byte { return b }

func TestSimulationDetectsViolations(t *testing.T) {
	tests := []struct {
		name    string
		never   bool
		wantMsg string
	}{
		{"overlap", false, "step 0: peer 1 entered while peer 0 was inside"},
		{"deadlock", true, "deadlock after step 0: peers [0 1] wait and no message is in flight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := simulation(t, variant{alg: Centralized}, 2, SimConfig{})
			s.w.replaceMachines(func(i, _ int) machine { return &fakeMachine{never: tt.never} })
			err := s.Request(0)
			if err == nil {
				err = s.Request(1)
			}
			if err == nil {
				err = s.Run()
			}
			require.ErrorIs(t, err, ErrViolation)
			assert.Contains(t, err.Error(), tt.wantMsg)
			events := len(s.Events())
			require.ErrorIs(t, s.Run(), ErrViolation, "a violation sticks")
			more, err := s.Step()
			assert.False(t, more, "a step after a violation takes nothing")
			require.ErrorIs(t, err, ErrViolation, "and returns the violation")
			require.ErrorIs(t, s.Crash(0), ErrViolation, "a crash after a violation returns it")
			assert.Len(t, s.Events(), events, "and neither the steps nor the crash after a violation take anything")
		})
	}
}

// TestSimulationFindsMutants runs broken configurations over many seeds
// and expects some seed to expose each in the way named by wantMsg (a
// seed may first show another symptom, such as an entry out of order).
func TestSimulationFindsMutants(t *testing.T) {
	tests := []struct {
		name    string
		alg     Algorithm
		cfg     SimConfig
		wantMsg string
	}{
		{"ricart-agrawala/tie-reply", RicartAgrawala, SimConfig{Variant: "ricart-agrawala-tie-reply"}, "was inside"},
		{"lamport/reorder", Lamport, SimConfig{Delivery: DeliverReorder, UnsafeDelivery: true}, "was inside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seed := range int64(2000) {
				cfg := tt.cfg
				cfg.Seed = uint64(seed)
				s, err := NewSimulation(tt.alg, 3, cfg)
				require.NoError(t, err)
				for p := range 3 {
					require.NoError(t, s.Request(p))
				}
				if err := s.Run(); err != nil {
					require.ErrorIs(t, err, ErrViolation)
					if strings.Contains(err.Error(), tt.wantMsg) {
						t.Logf("seed %d: %v", seed, err)
						return
					}
				}
			}
			t.Fatal("no seed exposed the mutant")
		})
	}
}

// TestLongRandomRuns drives seeded simulations under random contention:
// requests arrive at random peers between random steps. Every run must
// keep mutual exclusion (and the other checks of Simulation) and serve
// every request. With -dmutex.long each configuration makes 10^5 entries.
func TestLongRandomRuns(t *testing.T) {
	entries := 2000
	sizes := []int{2, 5, 16, 64}
	if testing.Short() {
		entries = 300
	}
	if raceEnabled && !*longRuns {
		// The race detector slows the simulator about tenfold, and it
		// has no goroutines to watch here: 300 entries per
		// configuration, as with -short, and no cluster of 64, keep the
		// package inside its time budget (README); without -race each
		// makes 2,000, and -dmutex.long runs the full size.
		entries = 300
		sizes = []int{2, 5, 16}
	}
	if *longRuns {
		entries = 100_000
		sizes = []int{3, 8, 16, 64}
	}
	for _, v := range variants() {
		ns := sizes
		if v.alg == Maekawa && *longRuns {
			ns = []int{7, 13, 31, 57} // projective-plane voting sets
		}
		for _, n := range ns {
			for _, d := range deliveries(v) {
				t.Run(fmt.Sprintf("%s/n=%d/%v", v.name, n, d), func(t *testing.T) {
					t.Parallel() // a simulation on the test's goroutine: two at once on two cores
					start := time.Now()
					seed := int64(n)*1000 + int64(d)
					s := simulation(t, v, n, SimConfig{Seed: uint64(seed), Delivery: d, NoTrace: true})
					rng := rand.New(rand.NewPCG(uint64(seed), 99))
					// Bursts of requests from random peers, then a random
					// number of steps: contention comes and goes.
					for made := 0; made < entries; {
						burst := min(1+rng.IntN(n), entries-made)
						for range burst {
							require.NoError(t, s.Request(rng.IntN(n)))
						}
						made += burst
						for range rng.IntN(4 * n * n) {
							if _, err := s.Step(); err != nil {
								require.NoError(t, err, "seed %d", seed)
							}
						}
					}
					require.NoError(t, s.Run(), "seed %d", seed)
					st := s.Stats()
					require.Equal(t, uint64(entries), st.Entries)
					t.Logf("%d entries, %d messages (%.2f per entry), %v", st.Entries, st.Messages,
						float64(st.Messages)/float64(st.Entries), time.Since(start).Round(time.Millisecond))
				})
			}
		}
	}
}

func TestEventString(t *testing.T) {
	e := TraceEvent{Step: 12, Kind: EventReceive, Peer: 2, Seq: 7, Msg: Message{Kind: KindToken, From: 1, To: 2, TS: 3, Token: &Token{LN: []uint64{1, 0, 2}, Queue: []int{0}}}}
	assert.Equal(t, "  12 P2 receive m7 token P1->P2 ts=3 LN=[1 0 2] Q=[0]", e.String())
	assert.Equal(t, "   3 P0 leave", TraceEvent{Step: 3, Kind: EventLeave}.String())
}

// circler is a machine that, once asked, keeps a message circling the
// ring for ever, as a token ring that never rests would.
type circler struct{ id, n int }

func (c *circler) step(ev event, out *output) {
	switch ev.kind {
	case evRequest:
		out.enter()
	case evRelease, evMessage:
		out.send(Message{Kind: KindToken, From: c.id, To: (c.id + 1) % c.n})
	}
}
func (c *circler) clone() machine              { d := *c; return &d }
func (c *circler) appendState(b []byte) []byte { return b }

// TestSimulationRunEndsOnIdleTraffic checks that Run returns once every
// request is served even if messages never stop.
func TestSimulationRunEndsOnIdleTraffic(t *testing.T) {
	s := simulation(t, variant{alg: Centralized}, 3, SimConfig{NoTrace: true})
	s.w.replaceMachines(func(i, _ int) machine { return &circler{id: i, n: 3} })
	require.NoError(t, s.Request(0))
	require.NoError(t, s.Run())
	assert.Equal(t, uint64(1), s.Stats().Entries)
	// The release sends one message, and each delivery one more: Run
	// stops at the delivery that, with a request outstanding, would have
	// been the livelock, the (livelockLimit+1)-th without an entry.
	assert.Equal(t, uint64(s.livelockLimit+2), s.Stats().Messages)
}

// BenchmarkSimulation measures the simulator: one op is one entry, made
// under contention from bursts of requests at random peers, with messages
// counted at the simulated network.
func BenchmarkSimulation(b *testing.B) {
	for _, v := range variants() {
		for _, n := range []int{3, 16, 64} {
			b.Run(fmt.Sprintf("alg=%s/n=%d", v.name, n), func(b *testing.B) {
				b.ReportAllocs()
				s := simulation(b, v, n, SimConfig{NoTrace: true})
				rng := rand.New(rand.NewPCG(1, 2))
				for made := 0; made < b.N; {
					burst := min(1+rng.IntN(n), b.N-made)
					for range burst {
						if err := s.Request(rng.IntN(n)); err != nil {
							b.Fatal(err)
						}
					}
					made += burst
					for range rng.IntN(4 * n * n) {
						if _, err := s.Step(); err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := s.Run(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(s.Stats().Messages)/float64(b.N), "msgs/op")
			})
		}
	}
}

// TestSimulationEventsCarryTheirStep checks the step numbers of the
// trace: the requests made before the first step carry 0, and every event
// of the i-th scheduling step carries i.
func TestSimulationEventsCarryTheirStep(t *testing.T) {
	for _, d := range []Delivery{DeliverFIFO, DeliverReorder, DeliverLockStep} {
		t.Run(d.String(), func(t *testing.T) {
			s := simulation(t, variant{alg: RicartAgrawala}, 3, SimConfig{Seed: 1, Delivery: d})
			for p := range 3 {
				require.NoError(t, s.Request(p))
			}
			for _, e := range s.Events() {
				require.Zero(t, e.Step, "%v", e)
			}
			for i := 1; ; i++ {
				before := len(s.Events())
				more, err := s.Step()
				require.NoError(t, err)
				if !more {
					require.Greater(t, i, 3, "the run took steps")
					break
				}
				for _, e := range s.Events()[before:] {
					require.Equal(t, i, e.Step, "%v", e)
				}
			}
		})
	}
}

// TestSimulationSeedKeepsItsRun pins the schedule that one seed gives,
// as the order of deliveries (receiving peer) and leaves (L and the
// peer): a seed in an issue, a test or a link names one run, so the
// scheduler must not draw from its stream more or less than before, for
// instance for false suspicions that are not configured. If the
// scheduler is changed on purpose, update the strings.
func TestSimulationSeedKeepsItsRun(t *testing.T) {
	for _, tt := range []struct {
		d    Delivery
		want string
	}{
		{DeliverFIFO, "020120110L021L12L2"},
		{DeliverReorder, "021120100L021L12L2"},
	} {
		t.Run(tt.d.String(), func(t *testing.T) {
			s := simulation(t, variant{alg: RicartAgrawala}, 3, SimConfig{Seed: 5, Delivery: tt.d})
			for p := range 3 {
				require.NoError(t, s.Request(p))
			}
			require.NoError(t, s.Run())
			var b strings.Builder
			for _, e := range s.Events() {
				switch e.Kind {
				case EventReceive:
					fmt.Fprintf(&b, "%d", e.Peer)
				case EventLeave:
					fmt.Fprintf(&b, "L%d", e.Peer)
				}
			}
			assert.Equal(t, tt.want, b.String())
		})
	}
}

// swallower is a broken token machine: peer 0 starts with the token, the
// others ask it by message, and a holder that gets a message swallows
// the token.
type swallower struct {
	id    int
	token bool
}

func (m *swallower) step(ev event, out *output) {
	switch {
	case ev.kind == evRequest && m.token:
		out.enter()
	case ev.kind == evRequest:
		out.send(Message{Kind: KindRequest, From: m.id, To: 0})
	case ev.kind == evMessage:
		m.token = false
	}
}
func (m *swallower) hasToken() bool            { return m.token }
func (m *swallower) carriesToken(Message) bool { return false }

var _ tokenHolder = (*swallower)(nil)

func (m *swallower) clone() machine              { c := *m; return &c }
func (m *swallower) appendState(b []byte) []byte { return appendBool(b, m.token) }

// TestSimulationLockStepStopsAtAViolation: a lock-step round checks the
// tokens after each delivery, and a violation ends the round: the
// message after it stays undelivered, and the peer inside does not
// leave.
func TestSimulationLockStepStopsAtAViolation(t *testing.T) {
	s := simulation(t, variant{alg: Centralized}, 3, SimConfig{Delivery: DeliverLockStep})
	s.w.replaceMachines(func(id, _ int) machine { return &swallower{id: id, token: id == 0} })
	require.NoError(t, s.Request(0)) // inside, with the token
	require.NoError(t, s.Request(1))
	require.NoError(t, s.Request(2))
	more, err := s.Step()
	assert.True(t, more)
	require.ErrorIs(t, err, ErrViolation)
	assert.ErrorContains(t, err, "0 tokens held and 0 in flight, want exactly one in all")
	receives, leaves := 0, 0
	for _, e := range s.Events() {
		switch e.Kind {
		case EventReceive:
			receives++
		case EventLeave:
			leaves++
		}
	}
	assert.Equal(t, 1, receives, "the round delivered on after the violation")
	assert.Zero(t, leaves, "the round let a peer leave after the violation")
}

// TestSimulationLockStepKeepsALeaveViolation: a violation at a leave in a
// lock-step round (a machine that enters on leaving) is the round's
// error, which the token check after the leave must not overwrite.
func TestSimulationLockStepKeepsALeaveViolation(t *testing.T) {
	s := simulation(t, variant{alg: Centralized}, 2, SimConfig{Delivery: DeliverLockStep})
	s.w.replaceMachines(func(int, int) machine {
		m := newScripted()
		m.enterOnRelease = true
		return m
	})
	require.NoError(t, s.Request(0))
	_, err := s.Step()
	require.ErrorIs(t, err, ErrViolation)
	assert.ErrorContains(t, err, "peer 0 entered on leaving")
}

// spinner is a broken machine that, once asked, passes a message round
// the ring for ever and never enters.
type spinner struct{ id, n int }

func (m *spinner) step(ev event, out *output) {
	if ev.kind == evRequest || ev.kind == evMessage {
		out.send(Message{Kind: KindRequest, From: m.id, To: (m.id + 1) % m.n})
	}
}
func (m *spinner) clone() machine              { c := *m; return &c }
func (m *spinner) appendState(b []byte) []byte { return b }

// TestSimulationFindsLivelock: messages that keep flowing while a request
// waits are a livelock once they pass the bound, whatever the delivery
// policy.
func TestSimulationFindsLivelock(t *testing.T) {
	for _, d := range []Delivery{DeliverFIFO, DeliverReorder, DeliverLockStep} {
		s := simulation(t, variant{alg: Centralized}, 3, SimConfig{Delivery: d, NoTrace: true})
		s.w.replaceMachines(func(id, n int) machine { return &spinner{id: id, n: n} })
		require.NoError(t, s.Request(0))
		err := s.Run()
		require.ErrorIs(t, err, ErrViolation, "delivery %v", d)
		assert.ErrorContains(t, err, fmt.Sprintf("livelock: %d deliveries without an entry or exit", s.livelockLimit+1), "delivery %v", d)
	}
}

// simDoor is every member of World that the Simulation's and RunTimed's
// code may use: exported ones only, so that they schedule through the
// same door as the lab, and a fault or event they need becomes a
// documented World method rather than a reach inside.
var simDoor = []string{
	"AppendDue", "Apply", "ApplyDue", "CheckAtRest", "Crash", "DropNext",
	"Dropped", "Due", "Err", "Events", "FIFO", "Heal", "Idle", "Messages",
	"N", "NumDue", "Outstanding", "Partition", "Peer", "Request", "Stats",
	"Suspect", "Suspecting", "Waiting", "WriteLog", "WriteMermaid",
}

// TestSimulationUsesTheWorldsDoor type-checks the package and fails when
// the Simulation's code (sim.go, simfaults.go, simwrite.go, World's own
// methods there aside) or RunTimed's (timed.go) uses a member of World
// that is not exported, or not in simDoor.
func TestSimulationUsesTheWorldsDoor(t *testing.T) {
	for _, name := range simDoor {
		require.True(t, token.IsExported(name), "simDoor lists %s, which is not exported", name)
	}
	fset, files, info, pkg := typeCheckPackage(t)
	world := pkg.Scope().Lookup("World").Type()

	isWorld := func(typ types.Type) bool {
		if p, ok := typ.(*types.Pointer); ok {
			typ = p.Elem()
		}
		return types.Identical(typ, world)
	}
	var used, bad []string
	for _, f := range files {
		file := fset.Position(f.Pos()).Filename
		if file != "sim.go" && file != "simfaults.go" && file != "simwrite.go" && file != "timed.go" {
			continue
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil {
				if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
					if id, ok := star.X.(*ast.Ident); ok && id.Name == "World" {
						continue // the World's own methods
					}
				}
			}
			ast.Inspect(d, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if s := info.Selections[sel]; s != nil && isWorld(s.Recv()) {
					used = append(used, sel.Sel.Name)
					if !slices.Contains(simDoor, sel.Sel.Name) {
						bad = append(bad, fmt.Sprintf("%v: World.%s", fset.Position(sel.Pos()), sel.Sel.Name))
					}
				}
				return true
			})
		}
	}
	assert.Empty(t, bad, "the Simulation reaches past its door into the World")
	assert.NotEmpty(t, used, "found no use of the World at all: is the test looking at the right files?")
}
