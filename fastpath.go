package dmutex

import (
	"bytes"
	"sync/atomic"
)

// fastPath lets a peer that re-enters on its own skip both its mutex and
// its machine. It is for a peer whose machine enters without sending
// anything and, on leaving, sends nothing either: Suzuki-Kasami's or
// Raymond's idle token holder, centralized's coordinator, a lone peer.
//
// The runtime learns this from the machine, never from the algorithm's
// name. A probe takes two ordinary rounds: a hold entered on the Lock
// goroutine with no message sent; a release that sends none; then a
// request that again enters at once, sends none and leaves the machine in
// exactly the state it had before that release (appendState compares
// equal). No message may arrive in between. The machine being
// deterministic, it has then shown that "release, then request" from this
// state is a no-op that nobody else can observe. The peer arms the fast
// path: it keeps the machine in its entered state, and Lock and Unlock
// only flip the inside bit of word with one compare-and-swap each,
// counting fencing tokens in the same word.
//
// Anything else disarms it, under the peer's mutex, before it touches the
// machine: a message arriving (deliver), a second local caller of Lock
// while the first is inside, Close. Disarming while nobody is inside
// replays the skipped release, so the machine is in the state it would
// have reached anyway; while a caller is inside, that caller simply holds
// the machine's hold from then on. To the machine, a run of fast entries
// looks like one long hold, and the other peers could not have told the
// difference, since no message was sent or received.
type fastPath struct {
	word atomic.Uint64 // fastArmed | fastInside | fence<<fastShift, or 0 when not armed

	// Guarded by the peer's mutex.
	armFence  uint64 // fence when the path was armed: fast entries = (fence - armFence) / stride
	stride    uint64 // what each fast entry adds to the fence: 1, or n with WithRecovery (see entryFence); set once
	full      uint64 // the least word with no fence left for a fast entry; set once
	localHold bool   // this hold was entered on the Lock goroutine, sending nothing, and no message arrived since
	probe     bool   // the release after such a hold sent nothing, no message arrived since; state holds the state before it
	state     []byte // appendState buffer, reused
	skip      uint32 // local holds to let pass before the next probe
	backoff   uint32 // skip after the last failed probe: 1, 2, 4, ... maxBackoff
}

// maxBackoff bounds how rarely a machine whose rounds never repeat its
// state (Ricart-Agrawala alone: its clock ticks) is probed again. A probe
// costs two appendState calls; amortized over this many entries it is
// lost in the noise.
const maxBackoff = 1024

const (
	fastArmed  = 1 << 0
	fastInside = 1 << 1
	fastMask   = fastArmed | fastInside
	fastShift  = 2
)

// setStride sets what each fast entry adds to the fence: 1, or, with
// WithRecovery, n, which keeps the fence in the peer's class (see
// entryFence). A word at or above full has no fencing token left for a
// fast entry, which would pass MaxFence (and overflow the word).
func (f *fastPath) setStride(stride uint64) {
	f.stride = stride
	f.full = (MaxFence - stride + 1) << fastShift
}

// tryLock enters through the armed fast path, if it is armed and free and
// a fencing token is left.
func (f *fastPath) tryLock() bool {
	w := f.word.Load()
	return w&fastMask == fastArmed && w < f.full && f.word.CompareAndSwap(w, w+f.stride<<fastShift|fastInside)
}

// try decides a TryLock through the armed fast path: entered, or refused
// because a caller is inside by it. decided is false when the path is not
// armed, or a race lost the word; the caller then takes the slow path.
func (f *fastPath) try() (entered, decided bool) {
	switch w := f.word.Load(); w & fastMask {
	case fastArmed:
		if w < f.full && f.word.CompareAndSwap(w, w+f.stride<<fastShift|fastInside) {
			return true, true
		}
	case fastArmed | fastInside:
		return false, true
	}
	return false, false
}

// tryUnlock leaves through the armed fast path, if the caller came in by it.
func (f *fastPath) tryUnlock() bool {
	w := f.word.Load()
	return w&fastMask == fastArmed|fastInside && f.word.CompareAndSwap(w, w&^fastInside)
}

// fence returns the fencing token of a fast hold, or 0 if nobody is inside
// through the fast path.
func (f *fastPath) fence() uint64 {
	if w := f.word.Load(); w&fastMask == fastArmed|fastInside {
		return w >> fastShift
	}
	return 0
}

// fastEntriesLocked returns the entries taken through the fast path since
// it was armed and not yet counted in p.entries.
func (p *Peer) fastEntriesLocked() uint64 {
	if w := p.fast.word.Load(); w&fastArmed != 0 {
		return (w>>fastShift - p.fast.armFence) / p.fast.stride
	}
	return 0
}

// interruptLocked is called for every message delivered: it disarms the
// fast path and drops any probe, since the machine is about to change.
func (p *Peer) interruptLocked() {
	p.disarmLocked()
	f := &p.fast
	f.localHold, f.probe = false, false
	f.skip, f.backoff = 0, 0 // the machine's state changes: probe afresh
}

// disarmLocked turns the fast path off, if it is on, and gives the peer's
// ordinary fields the state the fast entries have reached. Every path
// that steps the machine or reads those fields calls it first.
func (p *Peer) disarmLocked() {
	f := &p.fast
	if f.word.Load()&fastArmed == 0 {
		return
	}
	f.localHold, f.probe = false, false
	w := f.word.Swap(0)
	p.d.fence = w >> fastShift
	p.d.entries += (p.d.fence - f.armFence) / f.stride
	if w&fastInside != 0 {
		p.d.inside = true // the caller inside now holds the machine's hold
		p.d.holdFence = p.d.fence
		return
	}
	if !p.closed {
		// Replay the skipped release; it sends nothing (the probe showed).
		p.d.leave(p.host(), &p.out)
	}
}

// localEntryLocked is called when a request stepped on the Lock goroutine
// has entered at once. It records whether the hold is local and, if the
// probe shows a no-op round, arms the fast path with the caller inside.
func (p *Peer) localEntryLocked() {
	f := &p.fast
	quiet := p.out.sent == 0
	f.localHold = quiet
	if quiet && f.probe && p.d.holdFence != 0 { // armed with no fence left, Fence would be wrong
		n0 := len(f.state)
		f.state = p.m.appendState(f.state)
		if bytes.Equal(f.state[:n0], f.state[n0:]) {
			p.d.inside = false // held through word from now on
			p.d.holdFence = 0
			f.armFence = p.d.fence
			f.word.Store(p.d.fence<<fastShift | fastArmed | fastInside)
			f.backoff = 0
		} else {
			f.backoff = min(max(2*f.backoff, 1), maxBackoff)
			f.skip = f.backoff
		}
	}
	f.probe = false
}

// releaseProbeLocked releases the machine for the caller that leaves, as
// releaseLocked does, and starts a probe if the hold was local and nobody
// else waits.
func (p *Peer) releaseProbeLocked() {
	f := &p.fast
	probing := f.localHold && len(p.waiters) == 0 && f.skip == 0
	if f.localHold && f.skip > 0 {
		f.skip--
	}
	f.localHold = false
	if probing {
		f.state = p.m.appendState(f.state[:0])
	}
	p.d.release(p.host(), &p.out)
	// With no waiter, the release was the last step: out counts its sends.
	f.probe = probing && p.out.sent == 0
}
