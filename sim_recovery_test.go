package dmutex

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// crashRun runs n Ricart-Agrawala peers in a simulation with cfg and opts: every
// peer requests twice, peer n-1 crashes after steps steps, and the run
// goes on to the end. It returns the simulation and Run's error.
func crashRun(t *testing.T, n, steps int, seed int64, cfg SimConfig, opts ...Option) (*Simulation, error) {
	t.Helper()
	cfg.Seed = uint64(seed)
	s, err := NewSimulation(RicartAgrawala, n, cfg, opts...)
	require.NoError(t, err)
	for range 2 {
		for p := range n {
			require.NoError(t, s.Request(p))
		}
	}
	for range steps {
		if _, err := s.Step(); err != nil {
			return s, err
		}
	}
	require.NoError(t, s.Crash(n-1))
	return s, s.Run()
}

// TestSimulationRecoveryCrash crashes a peer in the middle of a run: with
// WithRecovery, the simulation's perfect detector has every survivor
// suspect it, and the survivors' requests are all served; without, they
// block.
func TestSimulationRecoveryCrash(t *testing.T) {
	const n = 4
	for seed := range int64(20) {
		s, err := crashRun(t, n, 10, seed, SimConfig{}, WithRecovery())
		require.NoError(t, err, "seed %d", seed)
		assert.Empty(t, s.Waiting(), "seed %d", seed)
		suspected := map[int]bool{}
		for _, e := range s.Events() {
			if e.Kind == EventSuspect {
				assert.Equal(t, n-1, e.Target, "seed %d: only the crashed peer is suspected", seed)
				suspected[e.Peer] = true
			}
		}
		assert.Len(t, suspected, n-1, "seed %d: every survivor suspects it", seed)
		assert.Zero(t, s.FalseSuspicions())

		_, err = crashRun(t, n, 10, seed, SimConfig{})
		require.ErrorIs(t, err, ErrBlocked, "seed %d: without recovery", seed)
	}
}

// TestSimulationFalseSuspicions runs long random runs with crash
// exclusion and a false suspicion rate: the suspicions fire, of live
// peers, and are trusted again; a seed replays event for event; and some
// seed finds the imperfect detector's break of mutual exclusion, which
// the same run without false suspicions never shows.
func TestSimulationFalseSuspicions(t *testing.T) {
	const n, rate = 3, 0.05
	run := func(seed int64, rate float64) (*Simulation, error) {
		s, err := NewSimulation(RicartAgrawala, n, SimConfig{Seed: uint64(seed), FalseSuspicionRate: rate}, WithRecovery())
		require.NoError(t, err)
		for range 20 {
			for p := range n {
				require.NoError(t, s.Request(p))
			}
		}
		return s, s.Run()
	}
	broken, disordered := 0, 0
	for seed := range int64(30) {
		s, err := run(seed, rate)
		if err != nil {
			// Either two peers inside, or, first, an entry out of
			// (timestamp, id) order, the other promise a falsely
			// excluded peer's request loses.
			require.ErrorIs(t, err, ErrViolation, "seed %d", seed)
			if strings.Contains(err.Error(), "entered while peer") {
				broken++
			} else {
				assert.Contains(t, err.Error(), "after the younger", "seed %d", seed)
				disordered++
			}
		}
		require.Positive(t, s.FalseSuspicions(), "seed %d", seed)
		var suspects, trusts int
		for _, e := range s.Events() {
			switch e.Kind {
			case EventSuspect:
				suspects++
				assert.NotEqual(t, e.Peer, e.Target)
			case EventTrust:
				trusts++
			}
		}
		assert.Equal(t, s.FalseSuspicions(), suspects, "seed %d: nobody crashed, so every suspicion is false", seed)
		if err == nil {
			assert.Equal(t, suspects, trusts, "seed %d: every live peer is trusted again by the end", seed)
		}

		again, err2 := run(seed, rate)
		assert.Equal(t, err, err2, "seed %d", seed)
		assert.Equal(t, s.Events(), again.Events(), "seed %d replays", seed)

		_, err = run(seed, 0)
		require.NoError(t, err, "seed %d: no false suspicion, no break", seed)
	}
	assert.Positive(t, broken, "no seed of 30 broke mutual exclusion with false suspicions")
	t.Logf("of 30 seeds, %d broke mutual exclusion and %d the order of entries", broken, disordered)
}

// TestSimulationFalseSuspicionsRateZero checks that a zero rate changes
// nothing: the same run, event for event, as without the option.
func TestSimulationFalseSuspicionsRateZero(t *testing.T) {
	s1, err1 := crashRun(t, 3, 5, 7, SimConfig{}, WithRecovery())
	s2, err2 := crashRun(t, 3, 5, 7, SimConfig{FalseSuspicionRate: 0}, WithRecovery())
	require.NoError(t, err1)
	require.NoError(t, err2)
	assert.Equal(t, s1.Events(), s2.Events())
	assert.Zero(t, s2.FalseSuspicions())
}

func TestSimulationDetectorOptions(t *testing.T) {
	tests := []struct {
		name string
		n    int
		cfg  SimConfig
		opts []Option
		want string
	}{
		{"negative rate", 3, SimConfig{FalseSuspicionRate: -0.1}, nil, "SimConfig.FalseSuspicionRate -0.1"},
		{"rate above one", 3, SimConfig{FalseSuspicionRate: 2}, nil, "SimConfig.FalseSuspicionRate 2"},
		{"NaN rate", 3, SimConfig{FalseSuspicionRate: math.NaN()}, nil, "SimConfig.FalseSuspicionRate NaN"},
		{"too many peers", 9, SimConfig{}, []Option{WithRecovery()}, "for 9 peers, want at most 8"},
		{"lock-step", 3, SimConfig{FalseSuspicionRate: 0.1, Delivery: DeliverLockStep}, nil, "uses no randomness"},
		{"recovery of lamport", 3, SimConfig{}, []Option{WithRecovery()}, "does not apply to lamport"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			alg := RicartAgrawala
			if tt.name == "recovery of lamport" {
				alg = Lamport
			}
			_, err := NewSimulation(alg, tt.n, tt.cfg, tt.opts...)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.ErrorContains(t, err, tt.want)
		})
	}
	_, err := NewSimulation(RicartAgrawala, 3, SimConfig{FalseSuspicionRate: 1})
	assert.NoError(t, err, "a rate of 1, the bound of the range, is a probability")
}

// TestSimulationRecoveryLockStep checks the lock-step policy's detector:
// the suspicions it owes are taken at the start of a round.
func TestSimulationRecoveryLockStep(t *testing.T) {
	s, err := NewSimulation(RicartAgrawala, 3, SimConfig{Delivery: DeliverLockStep}, WithRecovery())
	require.NoError(t, err)
	for p := range 3 {
		require.NoError(t, s.Request(p))
	}
	require.NoError(t, s.Crash(2))
	require.NoError(t, s.Run())
	assert.Equal(t, uint64(2), s.Stats().Entries)
	assert.Empty(t, s.Waiting())
}

// TestSimulationWithDetector: SimConfig.Detector naming the default changes
// nothing; an imperfect detector offers the false suspicions of its bound
// as transitions a caller takes by hand and the scheduler never takes; a
// perfect one offers only the suspicion of a crashed peer, with or
// without WithRecovery; and DetectorNone keeps recovery's machines deaf.
func TestSimulationWithDetector(t *testing.T) {
	perfect := Detector{Kind: DetectorPerfect}
	t.Run("the default", func(t *testing.T) {
		s1, err1 := crashRun(t, 3, 5, 7, SimConfig{}, WithRecovery())
		s2, err2 := crashRun(t, 3, 5, 7, SimConfig{Detector: &perfect}, WithRecovery())
		require.NoError(t, err1)
		require.NoError(t, err2)
		assert.Equal(t, s1.Events(), s2.Events())
	})
	t.Run("imperfect by hand", func(t *testing.T) {
		s, err := NewSimulation(RicartAgrawala, 3, SimConfig{Seed: 3, Detector: &Detector{Kind: DetectorImperfect, FalseSuspicions: 1}}, WithRecovery())
		require.NoError(t, err)
		w := s.World()
		tr, ok := w.Find("s1-0")
		require.True(t, ok, "a false suspicion is offered within the bound")
		_, err = w.Apply(tr)
		require.NoError(t, err)
		for _, id := range []string{"s2-0", "s2-1", "s0-1"} {
			_, ok := w.Find(id)
			assert.False(t, ok, "%s: the bound of one is used up", id)
		}
		_, ok = w.Find("u1-0")
		assert.True(t, ok, "the suspected live peer is to be trusted again")
		require.NoError(t, s.Run())
		_, ok = w.Find("u1-0")
		require.False(t, ok, "the scheduler has trusted P0 again")
		for p := range 3 {
			require.NoError(t, s.Request(p))
		}
		require.NoError(t, s.Run())
		var suspects, trusts int
		for _, e := range s.Events() {
			switch e.Kind {
			case EventSuspect:
				suspects++
			case EventTrust:
				trusts++
			}
		}
		assert.Equal(t, 1, suspects, "the scheduler takes no false suspicion of its own")
		assert.Equal(t, 1, trusts, "it takes the trust the detector owes")
		assert.Zero(t, s.FalseSuspicions(), "FalseSuspicions counts the rate's, not the hand's")
		assert.Equal(t, uint64(3), s.Stats().Entries)
	})
	t.Run("perfect without recovery", func(t *testing.T) {
		s, err := NewSimulation(RicartAgrawala, 3, SimConfig{Variant: "ricart-agrawala-naive-exclusion", Detector: &perfect})
		require.NoError(t, err)
		w := s.World()
		require.NoError(t, s.Request(1))
		_, ok := w.Find("s1-2")
		assert.False(t, ok, "a perfect detector suspects no live peer")
		require.NoError(t, s.Crash(2))
		tr, ok := w.Find("s1-2")
		require.True(t, ok, "it suspects a crashed one")
		_, err = w.Apply(tr)
		require.NoError(t, err)
		require.NoError(t, s.Run(), "the variant's suspicion counts as P2's reply to P1's request")
		assert.Equal(t, uint64(1), s.Stats().Entries)
	})
	t.Run("none", func(t *testing.T) {
		s, err := crashRun(t, 3, 5, 7, SimConfig{Detector: &Detector{}}, WithRecovery())
		require.ErrorIs(t, err, ErrBlocked, "no suspicion comes, so the survivors block")
		for _, e := range s.Events() {
			assert.NotEqual(t, EventSuspect, e.Kind)
		}
	})
	t.Run("bad", func(t *testing.T) {
		tests := []struct {
			name string
			n    int
			cfg  SimConfig
			want string
		}{
			{"unknown kind", 3, SimConfig{Detector: &Detector{Kind: 7}}, "SimConfig.Detector: detector DetectorKind(7) with 0 false suspicions"},
			{"negative bound", 3, SimConfig{Detector: &Detector{Kind: DetectorImperfect, FalseSuspicions: -1}}, "with -1 false suspicions"},
			{"bound of a perfect detector", 3, SimConfig{Detector: &Detector{Kind: DetectorPerfect, FalseSuspicions: 2}}, "detector perfect with 2 false suspicions"},
			{"none with a rate", 3, SimConfig{Detector: &Detector{}, FalseSuspicionRate: 0.1}, "SimConfig.FalseSuspicionRate 0.1 with no detector"},
			{"too many peers", 9, SimConfig{Detector: &perfect}, "for 9 peers, want at most 8"},
		}
		for _, tt := range tests {
			_, err := NewSimulation(RicartAgrawala, tt.n, tt.cfg)
			require.ErrorIs(t, err, ErrInvalidConfig, tt.name)
			assert.ErrorContains(t, err, tt.want, tt.name)
		}
		_, err := NewSimulation(RicartAgrawala, 9, SimConfig{Detector: &Detector{}})
		assert.NoError(t, err, "no detector, no bound on n")
		_, err = NewSimulation(RicartAgrawala, 8, SimConfig{Detector: &perfect})
		assert.NoError(t, err, "8 peers, the most a detector models")
		_, err = NewSimulation(RicartAgrawala, 3, SimConfig{Detector: &perfect, FalseSuspicionRate: 0.1})
		assert.NoError(t, err, "a rate with a detector")
	})
}

// TestOptionString: an option is named by its constructor.
func TestOptionString(t *testing.T) {
	assert.Equal(t, "WithRecovery", WithRecovery().String())
	assert.Equal(t, "WithImplicitReplies", WithImplicitReplies().String())
	assert.Equal(t, "Option{}", Option{}.String())
	v, err := LookupVariant("centralized-naive-failover")
	require.NoError(t, err)
	assert.Contains(t, fmt.Sprint(v.Options), "WithRecovery")
}

// TestSimulationFalseSuspicionsOnTopOfTheStep drives runs with a crash and
// a false suspicion rate one Step at a time and checks each step: it
// takes exactly one choice of its own (a delivery, a leave, or a
// suspicion or trust the detector owes), and at most one false suspicion
// on top of it, of a live peer that the live suspecter trusts, counted by
// FalseSuspicions. A step whose false suspicion breaks a promise ends
// there. Over all steps the suspicions fire at about their rate.
func TestSimulationFalseSuspicionsOnTopOfTheStep(t *testing.T) {
	const n, rate = 3, 0.2
	stepRE := regexp.MustCompile(`step (\d+):`)
	steps, fired := 0, 0
seeds:
	for seed := range int64(30) {
		s, err := NewSimulation(RicartAgrawala, n, SimConfig{Seed: uint64(seed), FalseSuspicionRate: rate}, WithRecovery())
		require.NoError(t, err)
		crashed := make([]bool, n)
		suspects := make([][]bool, n)
		for i := range suspects {
			suspects[i] = make([]bool, n)
		}
		for i := 0; i < 200; i++ {
			switch {
			case i == 40:
				require.NoError(t, s.Crash(n-1))
				crashed[n-1] = true
			case i%10 == 0:
				for p := range n {
					if crashed[p] {
						continue
					}
					if err := s.Request(p); err != nil {
						require.ErrorIs(t, err, ErrViolation) // the last step's, which a request returns
						continue seeds
					}
				}
			}
			before, firedBefore := len(s.Events()), s.FalseSuspicions()
			more, err := s.Step()
			if !more {
				if err != nil {
					break // a deadlock that the false suspicions made
				}
				continue // nothing to do until the next requests
			}
			steps++
			own, falseOnes := 0, 0
			for _, e := range s.Events()[before:] {
				switch e.Kind {
				case EventReceive, EventLeave:
					own++
				case EventTrust:
					own++
					suspects[e.Peer][e.Target] = false
				case EventSuspect:
					require.False(t, crashed[e.Peer], "seed %d: crashed peer %d suspects", seed, e.Peer)
					require.False(t, suspects[e.Peer][e.Target], "seed %d: P%d suspects P%d twice", seed, e.Peer, e.Target)
					suspects[e.Peer][e.Target] = true
					if crashed[e.Target] {
						own++ // owed by the detector
					} else {
						falseOnes++
					}
				}
			}
			assert.Equal(t, s.FalseSuspicions()-firedBefore, falseOnes, "seed %d step %d: FalseSuspicions counts the false ones", seed, i)
			require.LessOrEqual(t, falseOnes, 1, "seed %d step %d", seed, i)
			fired += falseOnes
			if err != nil {
				require.ErrorIs(t, err, ErrViolation)
				m := stepRE.FindStringSubmatch(err.Error())
				require.NotNil(t, m, "%v", err)
				last, _ := strconv.Atoi(m[1])
				for _, e := range s.Events()[before:] {
					assert.LessOrEqual(t, e.Step, last, "seed %d: an event after the violation of step %d: %v", seed, last, e)
				}
				break
			}
			assert.Equal(t, 1, own, "seed %d step %d: one choice of the step's own", seed, i)
		}
	}
	require.Greater(t, steps, 500)
	frac := float64(fired) / float64(steps)
	t.Logf("%d false suspicions in %d steps", fired, steps)
	assert.True(t, frac > rate/2 && frac < 2*rate, "%d false suspicions in %d steps at a rate of %v", fired, steps, rate)
}

// suspectEnters is a broken machine for the lock-step round's checks: it
// enters on a request, and also, with no request, when it starts to
// suspect a peer.
type suspectEnters struct{}

func (suspectEnters) step(ev event, out *output) {
	if ev.kind == evRequest || ev.kind == evSuspect {
		out.enter()
	}
}
func (suspectEnters) clone() machine              { return suspectEnters{} }
func (suspectEnters) appendState(b []byte) []byte { return b }

// TestSimulationLockStepOwedSuspicions: a crash at rest, with nothing in
// flight and nobody inside, still leaves a round to take, the
// suspicions the detector owes; and a suspicion that breaks a promise
// ends the round, before the next one owed.
func TestSimulationLockStepOwedSuspicions(t *testing.T) {
	s, err := NewSimulation(RicartAgrawala, 3, SimConfig{Delivery: DeliverLockStep}, WithRecovery())
	require.NoError(t, err)
	require.NoError(t, s.Request(0))
	require.NoError(t, s.Run())
	require.NoError(t, s.Crash(2))
	more, err := s.Step()
	require.NoError(t, err)
	assert.True(t, more, "the suspicions owed are a round")
	suspicions := func() (n int) {
		for _, e := range s.Events() {
			if e.Kind == EventSuspect {
				n++
			}
		}
		return n
	}
	assert.Equal(t, 2, suspicions(), "both survivors suspect the crashed peer")

	s, err = NewSimulation(Centralized, 3, SimConfig{Delivery: DeliverLockStep}, WithRecovery())
	require.NoError(t, err)
	s.w.replaceMachines(func(int, int) machine { return suspectEnters{} })
	require.NoError(t, s.Request(1)) // inside
	require.NoError(t, s.Crash(2))
	_, err = s.Step()
	require.ErrorIs(t, err, ErrViolation)
	assert.ErrorContains(t, err, "peer 0 entered without a request")
	assert.Equal(t, 1, suspicions(), "the round ended at the violation")
}

// TestSimulationFalseSuspicionsNeedALivePair: with every live peer's
// every live peer suspected, or none left to suspect, a false suspicion
// due has nothing to fire and is not counted.
func TestSimulationFalseSuspicionsNeedALivePair(t *testing.T) {
	s, err := NewSimulation(RicartAgrawala, 2, SimConfig{FalseSuspicionRate: 1}, WithRecovery())
	require.NoError(t, err)
	require.NoError(t, s.Request(0))
	require.NoError(t, s.Crash(1)) // peer 0 has no live peer to suspect
	// Suspecting its only other peer, peer 0 is in a minority: it waits.
	require.ErrorIs(t, s.Run(), ErrBlocked)
	assert.Zero(t, s.FalseSuspicions())
	assert.Zero(t, s.Stats().Entries)
}
