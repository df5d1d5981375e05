package dmutex

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// enterThenCrash has peer request and steps s until the peer is inside,
// then crashes it there.
func enterThenCrash(t *testing.T, s *Simulation, peer int) {
	t.Helper()
	require.NoError(t, s.Request(peer))
	for !s.w.peers[peer].d.inside {
		more, err := s.Step()
		require.NoError(t, err)
		require.True(t, more, "peer %d never entered", peer)
	}
	require.NoError(t, s.Crash(peer))
}

// entered counts peer's entries in s's trace.
func entered(s *Simulation, peer int) int {
	n := 0
	for _, e := range s.Events() {
		if e.Kind == EventEnter && e.Peer == peer {
			n++
		}
	}
	return n
}

// faultyRun runs a random workload with every kind of fault: seeded loss,
// a crash, a partition and a heal. It returns the log, the Mermaid
// diagram and the error that ended the run: nil, ErrBlocked, or for
// Lamport, which loss can make unsafe, ErrViolation.
func faultyRun(t *testing.T, v variant, d Delivery, seed int64) (string, string, error) {
	s := simulation(t, v, 5, SimConfig{Seed: uint64(seed), Delivery: d, Loss: 0.05})
	rng := rand.New(rand.NewPCG(11, 11)) // the same workload every time
	var err error
	for i := 0; i < 30 && !errors.Is(err, ErrViolation); i++ {
		switch i {
		case 10:
			err = s.Partition([]int{0, 1, 2})
		case 15:
			s.Heal()
		case 20:
			err = s.Crash(4)
		}
		if p := rng.IntN(4); err == nil || errors.Is(err, ErrBlocked) {
			err = s.Request(p)
		}
		for j := rng.IntN(6); j > 0 && (err == nil || errors.Is(err, ErrBlocked)); j-- {
			_, err = s.Step()
		}
	}
	if !errors.Is(err, ErrViolation) {
		err = s.Run()
	}
	var log, mermaid bytes.Buffer
	require.NoError(t, s.WriteLog(&log))
	require.NoError(t, s.WriteMermaid(&mermaid))
	return log.String(), mermaid.String(), err
}

// TestSimulationFaultsReplay checks that faults replay byte for byte: the
// same seed gives the same log and diagram, lost messages included, and
// another seed another run.
func TestSimulationFaultsReplay(t *testing.T) {
	for _, v := range variants() {
		for _, d := range deliveries(v) {
			t.Run(v.name+"/"+d.String(), func(t *testing.T) {
				log, mermaid, err := faultyRun(t, v, d, 42)
				if v.alg != Lamport {
					require.NotErrorIs(t, err, ErrViolation)
				}
				log2, mermaid2, err2 := faultyRun(t, v, d, 42)
				require.Equal(t, log, log2, "same seed, different run")
				require.Equal(t, mermaid, mermaid2, "same seed, different diagram")
				assert.Equal(t, fmt.Sprint(err), fmt.Sprint(err2))
				assert.Contains(t, log, " lost m")
				assert.Contains(t, log, "partition [[0 1 2] [3 4]]")
				assert.Contains(t, log, "heal")
				assert.Contains(t, log, "P4 crash")
				assert.Regexp(t, `P\d-xP\d: `, mermaid)
				log3, _, _ := faultyRun(t, v, d, 43)
				assert.NotEqual(t, log, log3, "the seed should matter")
			})
		}
	}
}

// TestSimulationLossKeepsSafety runs random workloads over a lossy
// network across many seeds: requests may block, but no two peers are ever
// inside at once, no token is duplicated and no entry is out of order. It
// also checks the accounting: lost messages count in Stats and in Dropped.
//
// Lamport is the exception: a lost request breaks its safety (see
// TestSimulationLamportLostRequestBreaksSafety), so for Lamport the test
// instead requires the seeds to find such a violation.
func TestSimulationLossKeepsSafety(t *testing.T) {
	t.Parallel() // computation on the test's goroutine only: beside the other parallel tests at the end
	seeds := 40
	if testing.Short() || raceLight() {
		seeds = 10 // the simulator runs on one goroutine: nothing for -race to watch
	}
	for _, v := range variants() {
		for _, d := range deliveries(v) {
			for _, loss := range []float64{0.02, 0.2} {
				t.Run(fmt.Sprintf("%s/%v/loss=%v", v.name, d, loss), func(t *testing.T) {
					var blocked, lost, unsafe int
					for seed := range int64(seeds) {
						s := simulation(t, v, 5, SimConfig{Seed: uint64(seed), Delivery: d, Loss: loss})
						rng := rand.New(rand.NewPCG(uint64(seed), 3))
						var err error
						for range 40 {
							require.NoError(t, s.Request(rng.IntN(5)), "seed %d", seed)
							for range rng.IntN(8) {
								if _, err = s.Step(); err != nil {
									break
								}
							}
							if err != nil && !errors.Is(err, ErrBlocked) {
								break
							}
						}
						if err == nil || errors.Is(err, ErrBlocked) {
							err = s.Run()
						}
						if v.alg == Lamport && errors.Is(err, ErrViolation) {
							unsafe++
							continue
						}
						if err != nil {
							require.ErrorIs(t, err, ErrBlocked, "seed %d", seed)
							require.NotEmpty(t, s.Waiting())
							blocked++
						}
						sends, losses := 0, 0
						for _, e := range s.Events() {
							switch e.Kind {
							case EventSend:
								sends++
							case EventLost:
								losses++
							}
						}
						assert.Equal(t, uint64(sends), s.Stats().Messages, "every message sent counts, lost or not")
						assert.Equal(t, uint64(losses), s.Dropped())
						lost += losses
					}
					if v.alg == Lamport {
						assert.NotZero(t, unsafe, "some lost request should break Lamport's safety")
					} else {
						assert.NotZero(t, lost, "the loss rate should lose something")
					}
					t.Logf("%d of %d seeds blocked, %d unsafe, %d messages lost", blocked, seeds, unsafe, lost)
				})
			}
		}
	}
}

// TestSimulationLostTrace pins a lock-step run in which peer 2 of three
// Ricart-Agrawala peers has crashed: its request is lost on sending, the
// run blocks, and the log and diagram show the loss.
func TestSimulationLostTrace(t *testing.T) {
	s := simulation(t, variant{alg: RicartAgrawala}, 3, SimConfig{Delivery: DeliverLockStep})
	require.NoError(t, s.Crash(2))
	require.NoError(t, s.Request(0))
	err := s.Run()
	require.ErrorIs(t, err, ErrBlocked)
	require.NotErrorIs(t, err, ErrViolation)
	assert.EqualError(t, err, "dmutex: blocked by a fault: after step 2: peers [0] wait forever (messages lost: 1, peers crashed: [2])")
	var b bytes.Buffer
	require.NoError(t, s.WriteLog(&b))
	assert.Equal(t, `   0 P2 crash
   0 P0 request
   0 P0 send m1 request P0->P1 ts=1
   0 P0 send m2 request P0->P2 ts=1
   0 P2 lost m2 request P0->P2 ts=1
   1 P1 receive m1 request P0->P1 ts=1
   1 P1 send m3 reply P1->P0 ts=1 ref=1
   2 P0 receive m3 reply P1->P0 ts=1 ref=1
`, b.String())
	b.Reset()
	require.NoError(t, s.WriteMermaid(&b))
	assert.Contains(t, b.String(), "    Note over P2: crashes\n    Note over P0: wants in\n    P0-xP2: request ts=1\n    P0->>P1: request ts=1\n    P1->>P0: reply ts=1 ref=1\n")
	assert.Equal(t, uint64(3), s.Stats().Messages, "the lost request was sent all the same")
	assert.Equal(t, uint64(1), s.Dropped())
	assert.Equal(t, []int{0}, s.Waiting())

	// The error does not stick: a later request runs too, and blocks as
	// well, for want of peer 2's reply.
	require.NoError(t, s.Request(1))
	err = s.Run()
	require.ErrorIs(t, err, ErrBlocked)
	assert.Equal(t, []int{0, 1}, s.Waiting())
}

// TestSimulationPartitionInFlight checks that a partition loses the
// messages already in flight between the groups, and that a heal lets
// later messages through.
func TestSimulationPartitionInFlight(t *testing.T) {
	for _, d := range []Delivery{DeliverFIFO, DeliverReorder, DeliverLockStep} {
		t.Run(d.String(), func(t *testing.T) {
			s := simulation(t, variant{alg: Centralized}, 4, SimConfig{Delivery: d})
			require.NoError(t, s.Request(2)) // request P2->P0 in flight
			require.NoError(t, s.Request(1)) // request P1->P0 in flight
			require.NoError(t, s.Partition([]int{0, 1}))
			assert.Equal(t, uint64(1), s.Dropped(), "P2's request crossed the cut")
			err := s.Run()
			require.ErrorIs(t, err, ErrBlocked)
			assert.Equal(t, []int{2}, s.Waiting())
			assert.Equal(t, 1, entered(s, 1))
			s.Heal()
			require.NoError(t, s.Request(3))
			err = s.Run()
			require.ErrorIs(t, err, ErrBlocked, "peer 2's request is never resent")
			assert.Equal(t, []int{2}, s.Waiting())
			assert.Equal(t, 1, entered(s, 3))
		})
	}
}

// TestSimulationCrashInsideHoldsForever checks that a peer that crashes
// inside never leaves: a second entry is a violation, and a crashed token
// holder does not count as a lost token.
func TestSimulationCrashInsideHoldsForever(t *testing.T) {
	s := simulation(t, variant{alg: Centralized}, 2, SimConfig{})
	s.w.replaceMachines(func(i, _ int) machine { return &fakeMachine{} })
	require.NoError(t, s.Request(0))
	require.NoError(t, s.Crash(0))
	more, err := s.Step()
	require.NoError(t, err)
	assert.False(t, more, "a crashed peer takes no step, not even to leave")
	err = s.Request(1)
	require.ErrorIs(t, err, ErrViolation)
	assert.Contains(t, err.Error(), "peer 1 entered while peer 0, which crashed inside, never left")

	tok := simulation(t, variant{alg: SuzukiKasami}, 3, SimConfig{})
	enterThenCrash(t, tok, 0)
	require.NoError(t, tok.Request(1))
	err = tok.Run()
	require.ErrorIs(t, err, ErrBlocked)
	require.NotErrorIs(t, err, ErrViolation)
}

// TestSimulationDeadlockWithoutFaultIsAViolation checks that ErrBlocked
// is kept for runs a fault has struck: a fault-free deadlock, even with
// a partition that lost nothing, is still a violation.
func TestSimulationDeadlockWithoutFaultIsAViolation(t *testing.T) {
	s := simulation(t, variant{alg: Centralized}, 2, SimConfig{})
	s.w.replaceMachines(func(i, _ int) machine { return &fakeMachine{never: true} })
	require.NoError(t, s.Partition([]int{0}, []int{1}))
	require.NoError(t, s.Request(0))
	err := s.Run()
	require.ErrorIs(t, err, ErrViolation)
	require.NotErrorIs(t, err, ErrBlocked)
}

func TestSimulationFaultsBadInput(t *testing.T) {
	for _, p := range []float64{-0.1, 1.5, math.NaN()} {
		t.Run(fmt.Sprintf("loss=%v", p), func(t *testing.T) {
			_, err := NewSimulation(Centralized, 3, SimConfig{Loss: p})
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), fmt.Sprintf("SimConfig.Loss %v", p))
		})
	}
	for _, p := range []float64{0, 1} {
		_, err := NewSimulation(Centralized, 3, SimConfig{Loss: p})
		assert.NoError(t, err, "Loss %v, a bound of the range, is a probability", p)
	}

	tests := []struct {
		name    string
		fault   func(s *Simulation) error
		wantMsg string
	}{
		{"crash below range", func(s *Simulation) error { return s.Crash(-1) }, "crash of peer -1 out of range [0, 3)"},
		{"crash above range", func(s *Simulation) error { return s.Crash(3) }, "crash of peer 3 out of range [0, 3)"},
		{"partition out of range", func(s *Simulation) error { return s.Partition([]int{0}, []int{5}) }, "partition names peer 5, out of range [0, 3)"},
		{"partition twice", func(s *Simulation) error { return s.Partition([]int{0, 1}, []int{1}) }, "partition names peer 1 twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := simulation(t, variant{alg: Centralized}, 3, SimConfig{})
			err := tt.fault(s)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.wantMsg)
			assert.Zero(t, s.Dropped())
			assert.Empty(t, s.Events(), "a refused fault leaves no trace")
		})
	}

	s := simulation(t, variant{alg: Centralized}, 3, SimConfig{})
	s.Heal()
	assert.Empty(t, s.Events(), "a heal with no partition leaves no trace")
	require.NoError(t, s.Crash(2))
	require.NoError(t, s.Crash(2), "a second crash is harmless")
	crashes := 0
	for _, e := range s.Events() {
		if e.Kind == EventCrash {
			crashes++
		}
	}
	assert.Equal(t, 1, crashes, "a second crash of a crashed peer is no event")
	err := s.Request(2)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "request by peer 2, which has crashed")
	require.NoError(t, s.Request(1), "the refusal does not stick")
	require.NoError(t, s.Run())
}

func TestEventKindStringFaults(t *testing.T) {
	for k, want := range map[EventKind]string{EventLost: "lost", EventCrash: "crash", EventPartition: "partition", EventHeal: "heal", EventTry: "try", EventRefused: "refused", EventSuspect: "suspect", EventTrust: "trust", EventCancel: "cancel", EventCancel + 1: "EventKind(15)"} {
		assert.Equal(t, want, k.String())
	}
}

// TestSimulationLamportLostRequestBreaksSafety replays the shortest way a
// lost message lets two Lamport peers in at once. After two full rounds
// peer 1's clock is ahead of peer 0's. Peer 0's next request is lost;
// peer 1's later request reaches peer 0, whose own, older request then
// heads its queue with a later message from peer 1, so it enters. Its
// reply is a later message for peer 1, whose queue never held peer 0's
// request, so peer 1 enters too. The entry rule's "a later message from
// j" stands for "no older request from j is on its way", which a lost
// request falsifies for good.
func TestSimulationLamportLostRequestBreaksSafety(t *testing.T) {
	s := simulation(t, variant{alg: Lamport}, 2, SimConfig{Delivery: DeliverLockStep})
	for _, p := range []int{1, 0} {
		require.NoError(t, s.Request(p))
		require.NoError(t, s.Run())
	}
	s.DropNext(1, func(m Message) bool { return m.Kind == KindRequest && m.From == 0 })
	require.NoError(t, s.Request(0))
	require.NoError(t, s.Request(1))
	err := s.Run()
	require.ErrorIs(t, err, ErrViolation)
	assert.Contains(t, err.Error(), "peer 1 entered while peer 0 was inside")
	assert.Equal(t, uint64(1), s.Dropped())
}

// TestSimulationCrashLosesInFlight checks that a crash loses the messages
// already in flight to and from the crashed peer, in order of sending,
// and that the crashed peer's own request is withdrawn.
func TestSimulationCrashLosesInFlight(t *testing.T) {
	for _, d := range []Delivery{DeliverFIFO, DeliverReorder, DeliverLockStep} {
		t.Run(d.String(), func(t *testing.T) {
			s := simulation(t, variant{alg: RicartAgrawala}, 3, SimConfig{Delivery: d})
			require.NoError(t, s.Request(0)) // m1 P0->P1, m2 P0->P2
			require.NoError(t, s.Request(1)) // m3 P1->P0, m4 P1->P2
			require.NoError(t, s.Crash(0))
			assert.Equal(t, uint64(3), s.Dropped(), "m1, m2 and m3 touch peer 0")
			var lost []uint64
			for _, e := range s.Events() {
				if e.Kind == EventLost {
					lost = append(lost, e.Seq)
				}
			}
			assert.Equal(t, []uint64{1, 2, 3}, lost)
			err := s.Run()
			require.ErrorIs(t, err, ErrBlocked)
			assert.Equal(t, []int{1}, s.Waiting(), "peer 0's request died with it")
			assert.Zero(t, entered(s, 0))
		})
	}
}

// TestSimulationCrashWithdrawsRequests checks that Run does not wait for
// the requests of a crashed peer, made or queued: with nobody else
// asking, it ends cleanly.
func TestSimulationCrashWithdrawsRequests(t *testing.T) {
	for _, requests := range []int{1, 2} {
		t.Run(fmt.Sprintf("requests=%d", requests), func(t *testing.T) {
			s := simulation(t, variant{alg: RicartAgrawala}, 3, SimConfig{})
			for range requests {
				require.NoError(t, s.Request(1)) // the second is queued at the peer
			}
			require.NoError(t, s.Crash(1))
			require.NoError(t, s.Run())
			assert.Empty(t, s.Waiting())
		})
	}
}
