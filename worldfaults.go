package dmutex

// A World's faults: crashes, partitions and lost messages.

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// worldFaults are the faults of a World: those a Simulation sets by
// calling its methods, and those a checker may inject as transitions.
type worldFaults struct {
	armed      bool       // some fault was ever set: only then is a send checked
	loss       float64    // SimConfig.Loss, WorldConfig.Loss: probability that a sent message is lost
	lossSrc    *rand.PCG  // the stream of loss draws; nil when loss is 0
	rng        *rand.Rand // draws from lossSrc
	drops      []dropRule // DropNext
	crashed    []bool     // crashed[i]: peer i has crashed; nil before the first crash; never written once shared
	group      []int      // group[i]: partition group of peer i; nil when whole
	lost       uint64     // messages lost
	lostTokens int        // token messages lost
	deadInside []int      // peers that crashed inside the critical section

	// Faults a checker may inject, as transitions.
	crashLeft int         // crashes still allowed
	crashOnly uint64      // the peers that may crash (peer p is bit 1<<p); 0 for any
	crashIn   bool        // a peer may crash only inside the critical section
	crashWait bool        // a peer may crash only while its request waits
	loseLeft  int         // losses of a message in flight still allowed
	loseKind  MessageKind // the kind that may be lost; 0 for any
	partLeft  int         // partitions still allowed
	partInto  [][]int     // the groups such a partition cuts the network into
	healLeft  int         // heals still allowed, once partitioned
	parted    bool        // a partition transition was taken

	// The failure detector a checker models (CheckConfig.Detector):
	// suspects has bit i*n+j set while peer i suspects peer j, and
	// falseLeft counts the suspicions of live peers still allowed.
	detector  DetectorKind
	suspects  uint64
	falseLeft int
}

// mayCrash reports whether a checker's crash may strike peer.
func (f *worldFaults) mayCrash(peer int) bool {
	return f.crashOnly == 0 || f.crashOnly&(1<<uint(peer)) != 0
}

// isCrashed reports whether peer has crashed.
func (w *World) isCrashed(peer int) bool {
	return w.f.crashed != nil && w.f.crashed[peer]
}

// faulted reports whether a fault has struck: a message lost, a peer
// crashed, or a checker's partition.
func (w *World) faulted() bool {
	return w.f.lost > 0 || w.f.crashed != nil || w.f.parted
}

// lostOnSend reports whether the network loses m as it is sent, in the
// runtime's order: a cut link first, then DropNext rules, then the Loss rate.
func (w *World) lostOnSend(m Message) bool {
	if w.cut(m.From, m.To) {
		return true
	}
	for i := range w.f.drops {
		if r := &w.f.drops[i]; r.count > 0 && (r.match == nil || r.match(m)) {
			r.count--
			return true
		}
	}
	return w.f.rng != nil && w.f.rng.Float64() < w.f.loss
}

// cut reports whether the link from -> to is down.
func (w *World) cut(from, to int) bool {
	return w.isCrashed(from) || w.isCrashed(to) || (w.f.group != nil && w.f.group[from] != w.f.group[to])
}

// lose records that message e, sent and counted, is lost.
func (w *World) lose(e envelope) {
	if w.carriesToken(e.m) {
		w.inFlight--
		w.f.lostTokens++
	}
	w.f.lost++
	if w.trace {
		w.record(TraceEvent{Kind: EventLost, Peer: e.m.To, Seq: e.seq, Msg: traced(e.m)})
	}
}

// crash stops peer for good; see Simulation.Crash.
func (w *World) crash(peer int) {
	crashed := make([]bool, w.n)
	if w.f.crashed != nil {
		copy(crashed, w.f.crashed)
	}
	crashed[peer] = true
	w.f.crashed = crashed
	w.f.armed = true
	w.record(TraceEvent{Kind: EventCrash, Peer: peer})
	p := &w.peers[peer]
	if p.d.inside {
		w.inside = slices.DeleteFunc(w.inside, func(q int) bool { return q == peer })
		if w.f.detector == 0 {
			// With a failure detector, a peer that crashed inside has
			// left: the survivors may enter once they suspect it.
			w.f.deadInside = append(slices.Clip(w.f.deadInside), peer)
		}
	}
	p.d.waiting -= p.d.pending() // the queued callers are gone
	p.budget = 0
	w.purge(func(from, to int) bool { return from == peer || to == peer })
}

// partition cuts the network into the given groups; see
// Simulation.Partition.
func (w *World) partition(groups [][]int) error {
	group := make([]int, w.n)
	for i := range group {
		group[i] = -1
	}
	for g, ids := range groups {
		for _, id := range ids {
			if id < 0 || id >= w.n {
				return fmt.Errorf("%w: partition names peer %d, out of range [0, %d)", ErrInvalidConfig, id, w.n)
			}
			if group[id] >= 0 {
				return fmt.Errorf("%w: partition names peer %d twice", ErrInvalidConfig, id)
			}
			group[id] = g
		}
	}
	if w.err != nil {
		return w.err
	}
	resolved := make([][]int, len(groups)+1)
	for i := range group {
		if group[i] < 0 {
			group[i] = len(groups)
		}
		resolved[group[i]] = append(resolved[group[i]], i)
	}
	resolved = slices.DeleteFunc(resolved, func(g []int) bool { return len(g) == 0 })
	w.f.group = group
	w.f.armed = true
	w.record(TraceEvent{Kind: EventPartition, Peer: -1, Groups: resolved})
	w.purge(func(from, to int) bool { return group[from] != group[to] })
	w.err = w.checkTokens()
	return w.err
}

// Crash stops peer for good, now, outside the transitions and whatever
// budget of crashes a checker has: every message to or from it is lost,
// those in flight included, it takes no more steps, and its requests are
// withdrawn. A peer that crashes inside the critical section never leaves
// it, so another peer that enters afterwards is a violation, unless the
// world has a failure detector. Crashing a peer twice is harmless; a peer
// outside 0 to n-1 is an error wrapping ErrInvalidConfig. After a
// violation Crash returns it. Simulation.Crash is this method.
func (w *World) Crash(peer int) error {
	if peer < 0 || peer >= w.n {
		return fmt.Errorf("%w: crash of peer %d out of range [0, %d)", ErrInvalidConfig, peer, w.n)
	}
	if w.err != nil {
		return w.err
	}
	if w.isCrashed(peer) {
		return nil
	}
	w.crash(peer)
	w.err = w.checkTokens()
	return w.err
}

// Partition cuts the network into the given groups of peers, now, outside
// the transitions: messages between peers of different groups are lost,
// those in flight included, until Heal. Peers named in no group form one
// more group together. A peer named twice, or out of range, is an error
// wrapping ErrInvalidConfig. Simulation.Partition is this method.
func (w *World) Partition(groups ...[]int) error { return w.partition(groups) }

// Heal ends a partition, now, outside the transitions. Messages lost while
// it lasted stay lost, and crashed peers stay crashed. Healing a whole
// network does nothing.
func (w *World) Heal() {
	if w.f.group == nil {
		return
	}
	w.f.group = nil
	w.record(TraceEvent{Kind: EventHeal, Peer: -1})
}

// DropNext makes the world lose the next count messages for which match
// returns true when they are sent; a nil match matches every message.
// Rules are tried in the order they were added; a message lost to a crash
// or a partition does not use one up. A count of zero or less adds no
// rule. Simulation.DropNext is this method.
func (w *World) DropNext(count int, match func(m Message) bool) {
	if count <= 0 {
		return
	}
	w.f.drops = append(w.f.drops, dropRule{count: count, match: match})
	w.f.armed = true
}

// Dropped returns how many messages the world has lost to faults: on
// sending (a cut link, DropNext, a Loss rate), in flight (a crash, a
// partition), or by a checker's TransLose.
func (w *World) Dropped() uint64 { return w.f.lost }

// Suspect has peer's failure detector start suspecting target, a live
// peer that it trusts now, as a step of its own outside the transitions: a
// false suspicion, such as SimConfig.FalseSuspicionRate makes. It counts against an
// imperfect detector's bound of false suspicions, as the transition
// TransSuspect of a live peer does, and the detector owes a TransTrust of
// target from then on (see AppendDue). It returns what the step did, as
// Apply does. A world without a failure detector, a peer or target out of
// range or crashed, a peer that is its target, and a target already
// suspected are errors wrapping ErrInvalidConfig, and change nothing.
func (w *World) Suspect(peer, target int) (StepResult, error) {
	switch {
	case w.err != nil:
		return StepResult{Entered: -1}, w.err
	case w.f.detector == DetectorNone:
		return StepResult{Entered: -1}, fmt.Errorf("%w: suspicion of peer %d by peer %d in a world without a failure detector", ErrInvalidConfig, target, peer)
	case peer < 0 || peer >= w.n || target < 0 || target >= w.n || peer == target:
		return StepResult{Entered: -1}, fmt.Errorf("%w: suspicion of peer %d by peer %d: want two peers in range [0, %d)", ErrInvalidConfig, target, peer, w.n)
	case w.isCrashed(peer) || w.isCrashed(target) || w.suspects(peer, target):
		return StepResult{Entered: -1}, fmt.Errorf("%w: suspicion of peer %d by peer %d: want two live peers, the second trusted by the first", ErrInvalidConfig, target, peer)
	}
	return w.apply(Transition{Kind: TransSuspect, Peer: peer, Target: target})
}

// Suspecting reports whether peer's failure detector suspects target now;
// both must be in range.
func (w *World) Suspecting(peer, target int) bool { return w.suspects(peer, target) }
