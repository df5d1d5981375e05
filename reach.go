package dmutex

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// ErrPeerUnreachable is matched, with errors.Is, by the error that
// LockContext and TryLockContext return when a peer that this peer's
// request needs has been unreachable for longer than WithUnreachableAfter
// allows. The error is an *UnreachableError, which names the peers.
var ErrPeerUnreachable = errors.New("dmutex: peer unreachable")

// An UnreachableError says which peers a request needed that had been
// unreachable for longer than After. It matches ErrPeerUnreachable.
type UnreachableError struct {
	Peers []int         // in increasing order
	After time.Duration // the WithUnreachableAfter bound they exceeded
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("dmutex: peers %v unreachable for more than %v", e.Peers, e.After)
}

// Is reports whether target is ErrPeerUnreachable.
func (e *UnreachableError) Is(target error) bool { return target == ErrPeerUnreachable }

// Reachability is implemented by transports that can tell whether the
// other peers answer: ChanEndpoint from its network's Crash and
// Partition, and the gRPC transport from its streams and heartbeats.
// WithUnreachableAfter needs it.
type Reachability interface {
	// Reachable reports whether peer id answers now and, if it does not,
	// since when it has not. If it does, since is when it last came back
	// from a cut that may have lost messages, or the zero time: a
	// transport that loses nothing while a link is down (one that resends
	// until acknowledged) returns the zero time. A peer running
	// WithRecovery that finds since later than its previous look asks
	// again for what it waits for, even if it never saw the peer
	// unreachable (the cut and the heal coalesced).
	Reachable(id int) (ok bool, since time.Time)

	// ReachChanged returns a channel that receives a value after the
	// answer of Reachable changes for some peer. Changes coalesce: the
	// channel has a buffer of one, and the transport never blocks on it.
	ReachChanged() <-chan struct{}
}

// WithUnreachableAfter makes a peer stop waiting, with an error wrapping
// ErrPeerUnreachable (an *UnreachableError naming the peers), when a peer
// that its request needs has been unreachable for longer than d.
// LockContext and TryLockContext return it, also with a context that
// never ends; Lock keeps waiting, since it cannot return an error. A call
// made while such a peer is already unreachable returns at once, sending
// nothing, unless the peer can enter without anyone (an idle token
// holder). A request already sent is withdrawn as a cancelled one is: if
// it is granted later, the peer leaves at once. The signal never lets
// anyone in; it only ends a wait with a reason.
//
// Which peers a request needs depends on the algorithm: the coordinator
// for a centralized peer (and, for the coordinator, the current holder),
// the voting set for Maekawa, and every other peer for the others, since
// any of them may hold the token or a permission on the way.
//
// The transport must implement Reachability; d must be positive. It
// applies to clusters and to NewPeer.
func WithUnreachableAfter(d time.Duration) Option {
	return Option{
		name:  "WithUnreachableAfter",
		where: forCluster | forPeer,
		apply: func(c *config) error {
			if d <= 0 {
				return fmt.Errorf("%w: WithUnreachableAfter(%v): want a positive duration", ErrInvalidConfig, d)
			}
			c.unreachableAfter = d
			return nil
		},
	}
}

// needer is implemented by machines whose requests need only some of the
// other peers: needs appends them to buf. Without it, a request needs
// every other peer.
type needer interface {
	needs(buf []int) []int
}

// reach is a peer's view of the others' reachability, kept by its watch
// goroutine. Guarded by the peer's mutex but for the fields marked.
type reach struct {
	r     Reachability  // set once
	after time.Duration // set once
	stop  chan struct{} // closed by Close; set once

	suspected []bool        // suspected[j]: j has been unreachable longer than after
	down      []bool        // down[j]: the watcher last saw j unreachable
	met       []bool        // met[j]: the watcher has seen j reachable at least once
	unheard   []bool        // unheard[j]: with WithRecovery, j was never met and has been unreachable longer than after
	looked    time.Time     // when the transport was last asked; under look, not the peer's mutex
	changed   chan struct{} // closed, and replaced, when a peer becomes suspected
	needBuf   []int

	// look is held for each look at the transport (reassess): by the
	// watcher, or by a caller that was refused for a peer unreachable
	// (lookAgain). It is taken before the peer's mutex, never under it.
	look sync.Mutex
}

// watch keeps p.reach.suspected up to date until Close: at every change
// the transport reports, and when a peer that is down passes the bound.
func (p *Peer) watch() {
	defer p.wg.Done()
	rc := &p.reach
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if next := p.reassess(); next > 0 {
			timer.Reset(next)
		}
		select {
		case <-rc.r.ReachChanged():
		case <-timer.C:
		case <-rc.stop:
			return
		}
	}
}

// reassess asks the transport about every other peer, records what
// changed and returns how long until a peer that is down now passes the
// bound, or 0 if none will.
func (p *Peer) reassess() time.Duration {
	rc := &p.reach
	rc.look.Lock()
	defer rc.look.Unlock()
	now := time.Now()
	var next time.Duration
	sus := make([]bool, p.n)
	down := make([]bool, p.n)
	back := make([]bool, p.n)
	for j := range p.n {
		if j == p.id {
			continue
		}
		ok, since := rc.r.Reachable(j)
		if ok {
			back[j] = since.After(rc.looked)
			continue
		}
		down[j] = true
		if down := now.Sub(since); down >= rc.after {
			sus[j] = true
		} else if left := rc.after - down; next == 0 || left < next {
			next = left
		}
	}
	// Cuts that end after this are seen as down now or, the next time,
	// as back since this look.
	looked := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for j := range p.n {
		if j == p.id {
			continue
		}
		if !down[j] {
			rc.met[j] = true
		}
		// With recovery, a peer never reached is not suspected: a late
		// start looks like a crash, and suspecting it would let others
		// in beside a peer that has not even begun. It ends the waits
		// that need it instead (see unreachableLocked).
		unheard := sus[j] && p.recovery && !rc.met[j]
		if unheard {
			sus[j] = false
		}
		if unheard != rc.unheard[j] {
			rc.unheard[j] = unheard
			if unheard {
				p.wakeWaitersLocked()
			}
		}
	}
	p.holdSuspectsLocked(sus)
	for j, s := range sus {
		switch {
		case s != rc.suspected[j]:
			p.suspectLocked(j, s)
		case (rc.down[j] || back[j]) && !down[j] && !s && p.recovery && !p.closed:
			// Back before it was suspected, or cut and back between
			// two looks: what went to or from it meanwhile may be lost
			// all the same (a short partition).
			p.interruptLocked()
			p.d.reached(p.host(), &p.out, j)
		}
	}
	rc.down = down
	rc.looked = looked
	return next
}

// lookAgain reports whether err is a refusal for a peer unreachable
// and, if so, looks at the transport again before the caller asks once
// more. The view that refused the call is the watcher's last look, and a
// link that came up since (the transport may have told the watcher, which
// has not looked yet) would refuse a call made just after it: a peer
// started after its cluster, whose first LockContext follows the first
// message it heard from the last peer up, is refused for that peer
// without this. A peer without a watcher is never refused so.
func (p *Peer) lookAgain(err error) bool {
	if !errors.Is(err, ErrPeerUnreachable) {
		return false // errors.Is, not As: nothing allocated for an entry at once (a nil error)
	}
	p.reassess()
	return true
}

// suspectLocked records that peer j is suspected to have failed, or
// trusted again, and tells the driver: without WithRecovery that only
// ends the waits that need j; with it, the machine is stepped with the
// suspicion, what it sends is sent, the critical section goes to the
// oldest waiting caller if the machine entered, and the next entry takes
// a fence of a new epoch (see driver.suspect).
func (p *Peer) suspectLocked(j int, suspected bool) {
	rc := &p.reach
	rc.suspected[j] = suspected
	if p.closed {
		return
	}
	p.interruptLocked() // the machine is stepped, as for a message
	p.d.suspect(p.host(), &p.out, j, suspected)
	if suspected {
		p.wakeWaitersLocked()
	}
}

// wakeWaitersLocked wakes the callers waiting for a suspicion, so that
// they ask unreachableLocked again.
func (p *Peer) wakeWaitersLocked() {
	rc := &p.reach
	close(rc.changed)
	rc.changed = make(chan struct{})
}

// unreachableLocked returns the error for a request that needs a suspected
// peer, or nil. It is nil when the peer does not watch reachability. With
// WithRecovery the machine goes on without suspected peers, so it is nil
// unless the peer is in a minority (see driver.suspect), and then it
// names every peer suspected, or unless the request needs a peer never
// reached (unheard), and then it names those.
func (p *Peer) unreachableLocked() error {
	rc := &p.reach
	if rc.r == nil {
		return nil
	}
	down := rc.suspected
	if p.recovery {
		if p.d.minority() {
			var peers []int
			for j, s := range rc.suspected {
				if s {
					peers = append(peers, j)
				}
			}
			return &UnreachableError{Peers: peers, After: rc.after}
		}
		down = rc.unheard
	}
	if !slices.Contains(down, true) {
		return nil
	}
	if nd, ok := p.m.(needer); ok {
		rc.needBuf = nd.needs(rc.needBuf[:0])
	} else {
		rc.needBuf = rc.needBuf[:0]
		for j := range p.n {
			if j != p.id {
				rc.needBuf = append(rc.needBuf, j)
			}
		}
	}
	var peers []int
	for _, j := range rc.needBuf {
		if down[j] {
			peers = append(peers, j)
		}
	}
	if peers == nil {
		return nil
	}
	slices.Sort(peers)
	return &UnreachableError{Peers: slices.Compact(peers), After: rc.after}
}

// entersAtOnceLocked reports whether the machine, asked with kind
// (evRequest or evTry), would enter or refuse in that very step, needing
// nobody: a copy is stepped, and its messages are dropped. Only a call
// made while a needed peer is suspected pays for the copy.
func (p *Peer) entersAtOnceLocked(kind eventKind) bool {
	var out output
	p.m.clone().step(event{kind: kind}, &out)
	return out.entered || out.refused
}

// suspicionsLocked returns the channel that is closed when a peer becomes
// suspected next, or nil if the peer does not watch reachability.
func (p *Peer) suspicionsLocked() <-chan struct{} {
	if p.reach.r == nil {
		return nil
	}
	return p.reach.changed
}

// Suspected returns the peers this peer suspects now: those unreachable
// for longer than WithUnreachableAfter allows, in increasing order. It is
// nil without WithUnreachableAfter.
func (p *Peer) Suspected() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var sus []int
	for j, s := range p.reach.suspected {
		if s {
			sus = append(sus, j)
		}
	}
	return sus
}
