package dmutex

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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

// simFaults is the fault injection of a Simulation, the counterpart of a
// ChanNetwork's faultState, without clocks: every message in flight is
// "delayed" until the scheduler picks it.
type simFaults struct {
	armed      bool       // some fault was ever set: only then is a send checked
	loss       float64    // WithLoss: probability that a sent message is lost
	rng        *rand.Rand // draws for loss; nil when loss is 0
	drops      []dropRule // DropNext
	crashed    []bool     // crashed[i]: peer i has crashed; nil before the first crash
	group      []int      // group[i]: partition group of peer i; nil when whole
	lost       uint64     // messages lost
	lostTokens int        // token messages lost
	deadInside []int      // peers that crashed inside the critical section
}

// WithLoss makes a Simulation lose each message it is handed with
// probability p, drawn from the simulation's seed, so that a lossy run
// replays exactly. A lost message still counts in Stats, as it does in a
// Cluster, where it was handed to the transport. It applies to
// NewSimulation only; for a Cluster, see WithFaults.
func WithLoss(p float64) Option {
	return Option{
		name:  "WithLoss",
		where: forSimulation,
		apply: func(c *config) error {
			if !(p >= 0 && p <= 1) {
				return fmt.Errorf("%w: WithLoss(%v): want a probability from 0 to 1", ErrInvalidConfig, p)
			}
			c.sim.loss = p
			return nil
		},
	}
}

// initFaults sets up the simulation's faults from its configuration.
func (s *Simulation) initFaults() {
	s.f.loss = s.cfg.sim.loss
	if s.f.loss > 0 {
		s.f.armed = true
		// A stream of its own, so that the loss draws do not shift the
		// scheduler's.
		s.f.rng = rand.New(rand.NewPCG(s.cfg.sim.seed, 0x1055))
	}
}

// Crash stops peer for good: every message to or from it is lost, those
// in flight included, it takes no more steps, and its requests are
// withdrawn (Run no longer waits for them). A peer that crashes inside the
// critical section never leaves it, so another peer that enters afterwards
// is a violation. Crashing a peer twice is harmless; a peer outside 0 to
// n-1 is an error wrapping ErrInvalidConfig.
func (s *Simulation) Crash(peer int) error {
	if peer < 0 || peer >= s.n {
		return fmt.Errorf("%w: crash of peer %d out of range [0, %d)", ErrInvalidConfig, peer, s.n)
	}
	if s.err != nil {
		return s.err
	}
	if s.f.crashed == nil {
		s.f.crashed = make([]bool, s.n)
	}
	if s.f.crashed[peer] {
		return nil
	}
	s.f.crashed[peer] = true
	s.f.armed = true
	s.record(Event{Kind: EventCrash, Peer: peer})
	p := &s.peers[peer]
	if p.inside {
		s.inside = slices.DeleteFunc(s.inside, func(q int) bool { return q == peer })
		s.f.deadInside = append(s.f.deadInside, peer)
		s.outstanding--
	}
	if p.requested {
		s.outstanding--
	}
	s.outstanding -= p.pending
	p.pending = 0
	s.purge(func(from, to int) bool { return from == peer || to == peer })
	s.err = s.checkTokens()
	return s.err
}

// Partition cuts the network into the given groups of peers: messages
// between peers of different groups are lost, those in flight included,
// until Heal. Peers named in no group form one more group together. A peer
// named twice, or out of range, is an error wrapping ErrInvalidConfig.
func (s *Simulation) Partition(groups ...[]int) error {
	group := make([]int, s.n)
	for i := range group {
		group[i] = -1
	}
	for g, ids := range groups {
		for _, id := range ids {
			if id < 0 || id >= s.n {
				return fmt.Errorf("%w: partition names peer %d, out of range [0, %d)", ErrInvalidConfig, id, s.n)
			}
			if group[id] >= 0 {
				return fmt.Errorf("%w: partition names peer %d twice", ErrInvalidConfig, id)
			}
			group[id] = g
		}
	}
	if s.err != nil {
		return s.err
	}
	resolved := make([][]int, len(groups)+1)
	for i := range group {
		if group[i] < 0 {
			group[i] = len(groups)
		}
		resolved[group[i]] = append(resolved[group[i]], i)
	}
	resolved = slices.DeleteFunc(resolved, func(g []int) bool { return len(g) == 0 })
	s.f.group = group
	s.f.armed = true
	s.record(Event{Kind: EventPartition, Peer: -1, Groups: resolved})
	s.purge(func(from, to int) bool { return group[from] != group[to] })
	s.err = s.checkTokens()
	return s.err
}

// Heal ends a partition. Messages lost while it lasted stay lost, as the
// algorithms never resend, and crashed peers stay crashed.
func (s *Simulation) Heal() {
	if s.f.group == nil {
		return
	}
	s.f.group = nil
	s.record(Event{Kind: EventHeal, Peer: -1})
}

// DropNext makes the simulation lose the next count messages for which
// match returns true when they are sent, such as the next reply from peer
// 0 to peer 1. Rules are tried in the order they were added; a message
// lost to a crash or a partition does not use one up.
func (s *Simulation) DropNext(count int, match func(m Message) bool) {
	s.f.drops = append(s.f.drops, dropRule{count: count, match: match})
	s.f.armed = true
}

// Dropped returns how many messages the simulation has lost to faults.
func (s *Simulation) Dropped() uint64 { return s.f.lost }

// Waiting returns the peers, crashed ones left out, that have a request
// outstanding, in increasing order.
func (s *Simulation) Waiting() []int {
	var waiting []int
	for i, p := range s.peers {
		if !s.isCrashed(i) && (p.requested || p.pending > 0) {
			waiting = append(waiting, i)
		}
	}
	return waiting
}

// isCrashed reports whether peer has crashed.
func (s *Simulation) isCrashed(peer int) bool {
	return s.f.crashed != nil && s.f.crashed[peer]
}

// faulted reports whether a fault has struck: a message lost or a peer
// crashed.
func (s *Simulation) faulted() bool {
	return s.f.lost > 0 || s.f.crashed != nil
}

// lostOnSend reports whether the network loses m as it is sent, in the
// runtime's order: a cut link first, then DropNext rules, then WithLoss.
func (s *Simulation) lostOnSend(m Message) bool {
	if s.cut(m.From, m.To) {
		return true
	}
	for i := range s.f.drops {
		if r := &s.f.drops[i]; r.count > 0 && r.match(m) {
			r.count--
			return true
		}
	}
	return s.f.rng != nil && s.f.rng.Float64() < s.f.loss
}

// cut reports whether the link from -> to is down.
func (s *Simulation) cut(from, to int) bool {
	return s.isCrashed(from) || s.isCrashed(to) || (s.f.group != nil && s.f.group[from] != s.f.group[to])
}

// lose records that message e, sent and counted, is lost.
func (s *Simulation) lose(e envelope) {
	if isTokenKind(e.m.Kind) {
		s.inFlight--
		s.f.lostTokens++
	}
	s.f.lost++
	if !s.cfg.sim.noTrace {
		s.record(Event{Kind: EventLost, Peer: e.m.To, Seq: e.seq, Msg: traced(e.m)})
	}
}

// purge loses every message in flight on a link that cut reports down, in
// order of sending.
func (s *Simulation) purge(cut func(from, to int) bool) {
	var lost []envelope
	if s.queues != nil {
		for i := 0; i < len(s.active); {
			pair := s.active[i]
			if !cut(pair/s.n, pair%s.n) {
				i++
				continue
			}
			lost = append(lost, s.queues[pair]...)
			clear(s.queues[pair])
			s.queues[pair] = s.queues[pair][:0]
			last := len(s.active) - 1
			moved := s.active[last]
			s.active[i] = moved
			s.pos[moved] = i
			s.active = s.active[:last]
			s.pos[pair] = -1
		}
	} else {
		kept := s.bag[:0]
		for _, e := range s.bag {
			if cut(e.m.From, e.m.To) {
				lost = append(lost, e)
			} else {
				kept = append(kept, e)
			}
		}
		clear(s.bag[len(kept):])
		s.bag = kept
	}
	slices.SortFunc(lost, func(a, b envelope) int { return cmp.Compare(a.seq, b.seq) })
	for _, e := range lost {
		s.lose(e)
	}
}

// blocked is the error for a run that can go no further after a fault.
func (s *Simulation) blocked(waiting []int) error {
	var crashed []int
	for i := range s.n {
		if s.isCrashed(i) {
			crashed = append(crashed, i)
		}
	}
	return fmt.Errorf("%w: after step %d: peers %v wait forever (messages lost: %d, peers crashed: %v)",
		ErrBlocked, s.step, waiting, s.f.lost, crashed)
}
