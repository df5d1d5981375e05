package dmutex

// The fenced store a World models with CheckConfig.Fenced.

import (
	"fmt"
	"slices"
)

// checkStore is the World's model of a resource that checks fences
// (CheckConfig.Fenced): a store that accepts a write only if its fence is
// at least the highest it has accepted. The fences themselves are the
// peers' drivers', as at runtime. Its arrays are copied on write, as
// crashed is.
type checkStore struct {
	writes []int  // writes[p]: writes p has made in its current hold
	closed []bool // closed[p]: p's current hold wrote, and another hold wrote after it
	hi     uint64 // highest fence accepted
	last   int    // peer whose current hold made the last accepted write, or -1
	broken bool   // a write of a closed hold was accepted: fenced safety is lost
}

// writesPerHold is how many writes a holder makes before it may leave.
const writesPerHold = 2

func newCheckStore(n int) *checkStore {
	return &checkStore{
		writes: make([]int, n),
		closed: make([]bool, n),
		last:   -1,
	}
}

func (s *checkStore) clone() *checkStore {
	c := *s
	c.writes = slices.Clone(s.writes)
	c.closed = slices.Clone(s.closed)
	return &c
}

// write has peer, inside, write to the fenced store with the fence of its
// hold. The store accepts it if the fence is at least the highest it has
// accepted; fenced safety breaks if it accepts a write of a hold that
// another hold has written after.
func (w *World) write(peer int) StepResult {
	s := w.store
	s.writes[peer]++
	f := w.peers[peer].d.holdFence
	st := StepResult{Fence: f}
	if f < s.hi || f == 0 {
		return st
	}
	st.Accepted = true
	if s.closed[peer] {
		s.broken = true
		w.fail("fenced safety: the store accepted peer %d's write with fence %s after another holder's", peer, formatFence(f))
		return st
	}
	if s.last >= 0 && s.last != peer {
		s.closed[s.last] = true
	}
	s.last = peer
	s.hi = f
	return st
}

// formatFence writes a fence as epoch:count when it is past the first
// epoch (FenceEpoch), else as a plain number.
func formatFence(f uint64) string {
	if f < FenceEpoch {
		return fmt.Sprint(f)
	}
	return fmt.Sprintf("%d:%d", f/FenceEpoch, f%FenceEpoch)
}
