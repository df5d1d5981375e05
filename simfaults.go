package dmutex

import (
	"errors"
	"fmt"
)

// ErrBlocked is wrapped by the error Run and Step return when requests are
// still outstanding, nothing is left to deliver, and a fault (a lost
// message or a crashed peer) has struck: the peers the error names wait
// forever. Unlike ErrViolation it breaks no promise, since the classical
// algorithms promise nothing but safety once messages are lost, and it
// does not stick: later calls to Request, Step and Run go on as usual, so
// a test can probe peer after peer. A run that blocks without any fault is
// still a deadlock and wraps ErrViolation.
var ErrBlocked = errors.New("dmutex: blocked by a fault")

// WithLoss makes a Simulation lose each message it is handed with
// probability p, drawn from the simulation's seed, so that a lossy run
// replays exactly. A lost message still counts in Stats, as it does in a
// Cluster, where it was handed to the transport. It applies to
// NewSimulation only; for a Cluster, see WithFaults.
func WithLoss(p float64) Option {
	return Option{
		name:  "WithLoss",
		where: forSimulation | forWorld,
		apply: func(c *config) error {
			if !(p >= 0 && p <= 1) {
				return fmt.Errorf("%w: WithLoss(%v): want a probability from 0 to 1", ErrInvalidConfig, p)
			}
			c.sim.loss = p
			return nil
		},
	}
}

// WithFalseSuspicions makes a Simulation's failure detector imperfect: at
// each scheduling step, with probability rate drawn from the seed, a live
// peer chosen at random starts to suspect another live peer that it
// trusts now, before the step's own choice. The detector trusts a
// suspected live peer again later, at a scheduling step of its own chosen
// like a delivery, as it suspects a crashed peer after Crash. A run with
// false suspicions replays exactly, as any run does; FalseSuspicions
// counts them. Machines act on suspicions only under WithRecovery, and
// with it a false suspicion may let two peers in at once, which the run
// reports as a violation: that is the imperfect detector's lesson.
//
// A Simulation with a detector (this option, or WithRecovery) has at most
// 8 peers. The rate must be from 0 to 1, and DeliverLockStep, which uses
// no randomness, refuses it. It applies to NewSimulation only.
func WithFalseSuspicions(rate float64) Option {
	return Option{
		name:  "WithFalseSuspicions",
		where: forSimulation,
		apply: func(c *config) error {
			if !(rate >= 0 && rate <= 1) {
				return fmt.Errorf("%w: WithFalseSuspicions(%v): want a probability from 0 to 1", ErrInvalidConfig, rate)
			}
			c.sim.suspect = rate
			return nil
		},
	}
}

// WithDetector sets a Simulation's failure detector. Without it the
// detector is perfect under WithRecovery or WithFalseSuspicions and absent
// otherwise, and a run is the same, event for event, whether or not this
// option names that default.
//
// DetectorNone runs no detector, so that machines with WithRecovery never
// hear a suspicion, as in Check without one. DetectorPerfect has each
// survivor suspect a crashed peer at a scheduling step of its own, as
// WithRecovery alone does; it needs no WithRecovery, for a variant that
// acts on suspicions by itself (ricart-agrawala-naive-exclusion).
// DetectorImperfect also allows up to d.FalseSuspicions suspicions of live
// peers, made by hand: the World offers each as a transition with an ID
// such as "s1-0" (World.Transitions, Find and Apply, as in Check), the
// scheduler never takes one, and the suspected peer is trusted again at a
// scheduling step of its own. Suspicions fired by WithFalseSuspicions
// count against that bound.
//
// A kind past DetectorImperfect, a negative bound, a bound for another
// kind, or DetectorNone with a non-zero WithFalseSuspicions rate is an
// error wrapping ErrInvalidConfig; a detector models at most 8 peers. It
// applies to NewSimulation only; Check takes CheckConfig.Detector.
func WithDetector(d Detector) Option {
	return Option{
		name:  "WithDetector",
		where: forSimulation,
		apply: func(c *config) error {
			if d.Kind > DetectorImperfect || d.FalseSuspicions < 0 || (d.Kind != DetectorImperfect && d.FalseSuspicions != 0) {
				return fmt.Errorf("%w: WithDetector: detector %v with %d false suspicions", ErrInvalidConfig, d.Kind, d.FalseSuspicions)
			}
			c.sim.detector = &d
			return nil
		},
	}
}

// Crash stops peer for good: every message to or from it is lost, those
// in flight included, it takes no more steps, and its requests are
// withdrawn (Run no longer waits for them). A peer that crashes inside the
// critical section never leaves it, so another peer that enters afterwards
// is a violation. Crashing a peer twice is harmless; a peer outside 0 to
// n-1 is an error wrapping ErrInvalidConfig.
func (s *Simulation) Crash(peer int) error { return s.w.Crash(peer) }

// Partition cuts the network into the given groups of peers: messages
// between peers of different groups are lost, those in flight included,
// until Heal. Peers named in no group form one more group together. A peer
// named twice, or out of range, is an error wrapping ErrInvalidConfig.
func (s *Simulation) Partition(groups ...[]int) error { return s.w.Partition(groups...) }

// Heal ends a partition. Messages lost while it lasted stay lost, as the
// algorithms never resend, and crashed peers stay crashed.
func (s *Simulation) Heal() { s.w.Heal() }

// DropNext makes the simulation lose the next count messages for which
// match returns true when they are sent, such as the next reply from peer
// 0 to peer 1; a nil match matches every message, so DropNext(1, nil)
// loses the next message sent, whatever it is. Rules are tried in the
// order they were added; a message lost to a crash or a partition does
// not use one up. A count of zero or less adds no rule.
func (s *Simulation) DropNext(count int, match func(m Message) bool) { s.w.DropNext(count, match) }

// Dropped returns how many messages the simulation has lost to faults.
func (s *Simulation) Dropped() uint64 { return s.w.Dropped() }

// Waiting returns the peers, crashed ones left out, that have a request
// outstanding, in increasing order.
func (s *Simulation) Waiting() []int { return s.w.Waiting() }
