package dmutex

import (
	"errors"
	"slices"
	"strings"
)

// ErrHoldLost is matched, with errors.Is, by the error that
// [Locker.HoldErr] returns once the current hold may no longer be
// exclusive. The error also matches its reason: ErrPeerUnreachable (as an
// *UnreachableError naming the peers) when peers the hold depends on
// became unreachable for longer than WithUnreachableAfter during the
// hold, or ErrClosed when the peer was closed while holding.
var ErrHoldLost = errors.New("dmutex: hold lost")

// errNoHold is the reason HoldErr gives when the peer holds nothing.
var errNoHold = errors.New("dmutex: no hold")

// holdLostError is ErrHoldLost with its reason.
type holdLostError struct{ reason error }

func (e *holdLostError) Error() string {
	return "dmutex: hold may be lost: " + strings.TrimPrefix(e.reason.Error(), "dmutex: ")
}

func (e *holdLostError) Unwrap() []error { return []error{ErrHoldLost, e.reason} }

// closedChan is the channel HoldLost returns when there is no hold.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// holdLost is a peer's record of whether its current hold may no longer
// be exclusive. Nothing on the way into or out of the critical section
// touches it: it is made or reset when asked (HoldLost, HoldErr), when a
// peer becomes suspected, and at Close, so entries cost nothing more. It
// names its hold by the peer's count of entries when the hold began,
// which every hold, fast ones included, raises. Guarded by the peer's
// mutex.
type holdLost struct {
	serial uint64        // the hold this record is for: its entry's number, or 0 for none
	ch     chan struct{} // made by the first HoldLost of the hold, closed with err
	err    error         // why the hold may be lost, or nil
}

// HoldLost returns a channel that is closed once the current hold may no
// longer be exclusive; see Locker. It is made when first asked for in a
// hold, so holds that nobody asks about cost nothing.
func (p *Peer) HoldLost() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	hl := p.holdLocked()
	if hl == nil {
		return closedChan
	}
	if hl.ch == nil {
		hl.ch = make(chan struct{})
		if hl.err != nil {
			close(hl.ch)
		}
	}
	return hl.ch
}

// HoldErr returns nil while the current hold is not in doubt, and
// otherwise why; see Locker. It allocates nothing while the hold is not in
// doubt.
func (p *Peer) HoldErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	hl := p.holdLocked()
	if hl == nil {
		return &holdLostError{reason: errNoHold}
	}
	return hl.err
}

// holdLocked returns the record of the current hold, reset if it was
// another hold's, or nil if no caller of this peer is inside. A closed
// peer's hold is lost, whatever else happened.
func (p *Peer) holdLocked() *holdLost {
	w := p.fast.word.Load()
	if !p.d.inside && w&fastMask != fastArmed|fastInside {
		return nil
	}
	hl := &p.held
	if serial := p.d.entries + p.fastEntriesLocked(); hl.serial != serial {
		*hl = holdLost{serial: serial}
	}
	if p.closed && hl.err == nil {
		p.loseHoldLocked(hl, ErrClosed)
	}
	return hl
}

// loseHoldLocked records that hold hl may be lost, for reason.
func (p *Peer) loseHoldLocked(hl *holdLost, reason error) {
	hl.err = &holdLostError{reason: reason}
	if hl.ch != nil {
		close(hl.ch)
	}
}

// holdSuspectsLocked is told, before the driver steps the machine with
// them, which peers are suspected from now on (sus[j]): if a caller is
// inside and some peer its hold depends on (holdDependsLocked) becomes
// suspected now, the hold may be lost. A peer already suspected when the
// hold began does not count: the hold was granted without it.
func (p *Peer) holdSuspectsLocked(sus []bool) {
	if p.closed {
		return // Close has said so
	}
	hl := p.holdLocked()
	if hl == nil || hl.err != nil {
		return
	}
	rc := &p.reach
	var peers []int
	for _, j := range p.holdDependsLocked() {
		if sus[j] && !rc.suspected[j] {
			peers = append(peers, j)
		}
	}
	if peers == nil {
		return
	}
	slices.Sort(peers)
	p.loseHoldLocked(hl, &UnreachableError{Peers: slices.Compact(peers), After: rc.after})
}

// holdDependsLocked returns the peers the current hold depends on: with
// WithRecovery every other peer, since any peer that suspects the holder,
// or the coordinator or the token holder it needs, may go on without it;
// without it, the peers the machine's requests need (needer), whose
// release the hold owes and without whom nobody enters. The result is
// the reach's buffer, valid until its next use.
func (p *Peer) holdDependsLocked() []int {
	rc := &p.reach
	if nd, ok := p.m.(needer); ok && !p.recovery {
		rc.needBuf = nd.needs(rc.needBuf[:0])
		return rc.needBuf
	}
	rc.needBuf = rc.needBuf[:0]
	for j := range p.n {
		if j != p.id {
			rc.needBuf = append(rc.needBuf, j)
		}
	}
	return rc.needBuf
}
