package dmutex

import (
	"errors"
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

// valid reports whether d is a detector a Simulation can run: a known
// kind, and a bound of false suspicions only for an imperfect one.
func (d Detector) valid() bool {
	return d.Kind <= DetectorImperfect && d.FalseSuspicions >= 0 && (d.Kind == DetectorImperfect || d.FalseSuspicions == 0)
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
