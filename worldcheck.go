package dmutex

// What a World checks of itself: tokens, epochs, and what must hold at rest.

import (
	"fmt"
	"slices"
)

// checkTokens checks that a token algorithm has exactly one token.
func (w *World) checkTokens() error {
	if !w.tokens {
		return nil
	}
	if w.regen {
		return w.checkEpochs()
	}
	held := 0
	for _, m := range w.ms {
		if m.(tokenHolder).hasToken() {
			held++
		}
	}
	switch {
	case w.f.lostTokens > 0 && held+w.inFlight+w.f.lostTokens != 1:
		return fmt.Errorf("%w: step %d: %d tokens held, %d in flight and %d lost, want exactly one in all",
			ErrViolation, w.step, held, w.inFlight, w.f.lostTokens)
	case held+w.inFlight+w.f.lostTokens != 1:
		return fmt.Errorf("%w: step %d: %d tokens held and %d in flight, want exactly one in all",
			ErrViolation, w.step, held, w.inFlight)
	}
	return nil
}

// checkEpochs checks that no two tokens of one epoch exist, held (by a
// live or crashed peer) or in flight, for machines that regenerate the
// token.
func (w *World) checkEpochs() error {
	var epochs []uint64
	for _, m := range w.ms {
		if e, ok := m.(regenerator).heldEpoch(); ok {
			epochs = append(epochs, e)
		}
	}
	r := w.ms[0].(regenerator)
	add := func(es []envelope) {
		for _, e := range es {
			if w.carriesToken(e.m) {
				epochs = append(epochs, r.sentEpoch(e.m))
			}
		}
	}
	if w.queues != nil {
		for _, pair := range w.active {
			add(w.queues[pair])
		}
	} else {
		add(w.bag)
	}
	slices.Sort(epochs)
	for i := 1; i < len(epochs); i++ {
		if epochs[i] == epochs[i-1] {
			return fmt.Errorf("%w: step %d: two tokens of epoch %d", ErrViolation, w.step, epochs[i])
		}
	}
	return nil
}

// quiet reports whether no peer can act and nothing is in flight: no
// transition but the faults is enabled.
func (w *World) quiet() bool {
	if len(w.inside) > 0 || len(w.active) > 0 || len(w.bag) > 0 {
		return false
	}
	for p := range w.n {
		if s := &w.peers[p]; !w.isCrashed(p) && s.d.idle() && s.budget != 0 {
			return false
		}
	}
	return len(w.appendDetector(nil, false)) == 0
}

// finalCheck checks a world in which nothing is left to do (quiet): any
// request still outstanding can never be served, which is a deadlock
// without faults and wraps ErrBlocked after one; and machines with a
// promise for a cluster at rest must keep it.
func (w *World) finalCheck() error {
	if w.err != nil {
		return w.err
	}
	if w.outstanding() == 0 {
		if w.faulted() || w.restChecked == w.acts+1 {
			return nil
		}
		for p, m := range w.ms {
			if ic, ok := m.(idleChecker); ok {
				if v := ic.idleViolation(); v != "" {
					w.fail("at rest, peer %d %s", p, v)
					return w.err
				}
			}
		}
		// Nothing has stepped since: a scheduler polling a world at rest
		// need not check it again.
		w.restChecked = w.acts + 1
		return nil
	}
	waiting := w.Waiting()
	if w.faulted() && (w.f.detector == 0 || w.f.group != nil || w.minorities(waiting)) {
		// After a fault, with no detector to recover from it, with a
		// partition still in force (a heal may come), or with every
		// waiting peer in a minority (WithRecovery: it suspects too many
		// peers to enter without them, see driver.suspect), the peers
		// that wait are blocked by the fault, not deadlocked by the
		// algorithm.
		return w.blocked(waiting)
	}
	w.err = fmt.Errorf("%w: deadlock after step %d: peers %v wait and no message is in flight", ErrViolation, w.step, waiting)
	return w.err
}

// minorities reports whether every peer of waiting is in a minority.
func (w *World) minorities(waiting []int) bool {
	for _, p := range waiting {
		if !w.peers[p].d.minority() {
			return false
		}
	}
	return len(waiting) > 0
}

// Waiting returns the peers, crashed ones left out, that have a request
// outstanding, in increasing order.
func (w *World) Waiting() []int {
	var waiting []int
	for i, p := range w.peers {
		if !w.isCrashed(i) && (p.d.requested || p.d.pending() > 0) {
			waiting = append(waiting, i)
		}
	}
	return waiting
}

func (w *World) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("%w: step %d: %s", ErrViolation, w.step, fmt.Sprintf(format, args...))
	}
}

// blocked is the error for a world that can go no further after a fault.
func (w *World) blocked(waiting []int) error {
	var crashed []int
	for i := range w.n {
		if w.isCrashed(i) {
			crashed = append(crashed, i)
		}
	}
	return fmt.Errorf("%w: after step %d: peers %v wait forever (messages lost: %d, peers crashed: %v)",
		ErrBlocked, w.step, waiting, w.f.lost, crashed)
}

// outstanding counts the requests made and not yet over, of peers that
// have not crashed: each caller waiting or inside, and each request a
// machine has out for a caller that gave up.
func (w *World) outstanding() int {
	k := 0
	for p := range w.peers {
		if w.isCrashed(p) {
			continue
		}
		d := &w.peers[p].d
		k += d.pending()
		if d.requested {
			k++
		}
		if d.inside {
			k++
		}
	}
	return k
}
