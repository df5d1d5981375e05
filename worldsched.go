package dmutex

// What a World offers a scheduler beside Transitions and Apply: the
// transitions that are due and a step of them (a single one, or a
// lock-step round), the check of a world with nothing left to do, and the
// counts a scheduler stops on.
// The Simulation schedules through these and the other exported methods
// alone (sim_test.go's TestSimulationUsesTheWorldsDoor holds it to that).

import (
	"fmt"
	"slices"
)

// AppendDue appends to trs the transitions that are due now: those that
// no user, fault or budget has to cause, and that a fair scheduler takes
// sooner or later. They are one delivery per message in flight (with FIFO
// queues, the oldest message of each pair that has any, the pairs in the
// order the world keeps them; over an unordered network every message,
// equal ones included, in the order the network keeps them), then, for
// each peer inside in order of entry, its next write to the fenced store
// or else its leave, then the suspicions and trusts the failure detector
// owes. The order depends only on what the world has done, so that a
// scheduler drawing an index from a seeded source replays exactly; the
// Simulation does, with NumDue and Due, which cost no more than the
// draw. After a violation AppendDue appends nothing.
func (w *World) AppendDue(trs []Transition) []Transition {
	for i := range w.NumDue() {
		trs = append(trs, w.Due(i))
	}
	return trs
}

// NumDue returns how many transitions AppendDue would list; 0 after a
// violation.
func (w *World) NumDue() int {
	if w.err != nil {
		return 0
	}
	k := len(w.inside)
	if w.queues != nil {
		k += len(w.active)
	} else {
		k += len(w.bag)
	}
	if w.f.detector != DetectorNone {
		k += len(w.appendDetector(nil, false))
	}
	return k
}

// Due returns the transition AppendDue would list at index i, which must
// be from 0 to NumDue()-1.
func (w *World) Due(i int) Transition {
	deliver := func(e envelope) Transition {
		return Transition{Kind: TransDeliver, Peer: e.m.To, Seq: e.seq, Msg: e.m}
	}
	if w.queues != nil {
		if i < len(w.active) {
			return deliver(w.queues[w.active[i]][0])
		}
		i -= len(w.active)
	} else {
		if i < len(w.bag) {
			return deliver(w.bag[i])
		}
		i -= len(w.bag)
	}
	if i < len(w.inside) {
		p := w.inside[i]
		if w.store != nil && w.store.writes[p] < writesPerHold {
			return Transition{Kind: TransWrite, Peer: p}
		}
		return Transition{Kind: TransLeave, Peer: p}
	}
	return w.appendDetector(nil, false)[i-len(w.inside)]
}

// ApplyDue takes the transitions trs, each due (see AppendDue) when its
// turn comes, in order as one scheduling step: one transition, as a
// scheduler that picks among the due ones takes it, or a lock-step round.
// The events and any violation of the step carry one step number, one
// past the last step's; no transitions at all make a step in which
// nothing happens. A transition that is not due when its turn comes ends
// the step with an error wrapping ErrInvalidConfig, those before it
// taken. The first violation ends the step too, and is returned.
func (w *World) ApplyDue(trs ...Transition) error {
	if w.err != nil {
		return w.err
	}
	step := w.step + 1
	for _, t := range trs {
		if !w.isDue(t) {
			return fmt.Errorf("%w: transition %s (%v) is not due", ErrInvalidConfig, t.ID(), t)
		}
		w.step = step - 1 // apply counts a step; this is one in all
		if _, err := w.apply(t); err != nil {
			return err
		}
	}
	w.step = step
	return nil
}

// isDue reports whether t is among the transitions AppendDue lists, at
// the cost of finding its message rather than of listing them all.
func (w *World) isDue(t Transition) bool {
	p, q := t.Peer, t.Target
	if p < 0 || p >= w.n || w.isCrashed(p) {
		return false
	}
	switch t.Kind {
	case TransDeliver:
		m := t.Msg
		if m.To != p || m.From < 0 || m.From >= w.n {
			return false
		}
		if w.queues != nil {
			q := w.queues[m.From*w.n+m.To]
			return len(q) > 0 && q[0].seq == t.Seq
		}
		return slices.ContainsFunc(w.bag, func(e envelope) bool { return e.seq == t.Seq })
	case TransLeave, TransWrite:
		writing := w.store != nil && w.store.writes[p] < writesPerHold
		return w.peers[p].d.inside && writing == (t.Kind == TransWrite)
	case TransSuspect, TransTrust:
		if w.f.detector == DetectorNone || q < 0 || q >= w.n || q == p {
			return false
		}
		if t.Kind == TransSuspect {
			return !w.suspects(p, q) && w.gone(p, q)
		}
		return w.suspects(p, q) && !w.gone(p, q)
	}
	return false
}

// CheckAtRest checks the world as one in which nothing is due (see
// AppendDue), so that nothing more happens unless a user or a fault acts.
// A request still outstanding can then never be served: without a fault
// that is a deadlock, which becomes the world's violation and wraps
// ErrViolation; after a fault (a message lost, a peer crashed, a
// partition) in a world without a failure detector it is an error
// wrapping ErrBlocked, which names the peers that wait and does not stick.
// With no request outstanding, a machine with a promise for a cluster at
// rest (a Maekawa voter's vote is home) must keep it. While something is
// due, CheckAtRest only returns Err.
func (w *World) CheckAtRest() error {
	if w.err != nil || w.NumDue() > 0 {
		return w.err
	}
	return w.finalCheck()
}

// Outstanding returns how many requests are outstanding: made (by
// Request or by a transition, queued at their peer or not) and not yet
// ended by a leave or a refusal, a crash withdrawing those of the peer
// that crashed.
func (w *World) Outstanding() int { return w.outstanding() }

// Idle returns how many deliveries the world has made since the last
// entry, exit or refused try. A scheduler may take a large count with
// requests outstanding as a livelock: a Simulation's world fails with one
// past a bound that grows with the square of n (see Simulation.Run).
func (w *World) Idle() int { return w.idle }
