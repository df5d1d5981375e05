package grpctransport

import (
	"sync"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/dmutex/dmutex"
)

var _ dmutex.Reachability = (*Transport)(nil)

// reachState is what the transport knows of the other peers' reachability:
// a peer answers while the gRPC connection to it is ready. gRPC's
// keepalive pings (every 10 s, with a 5 s timeout, or as WithKeepalive
// says) take a connection out of the ready state when the peer stops
// answering without closing it; a peer whose process exits closes its
// connections, which shows at once. A restarted process of a peer that
// this transport refused (see Err) stays unreachable, ready connection or
// not: it is not part of the cluster.
type reachState struct {
	mu      sync.Mutex
	down    []time.Time   // down[j]: since when peer j has not been ready; zero while it is
	gone    []bool        // gone[j]: peer j's restarted process was refused
	changed chan struct{} // buffered 1: ReachChanged
}

// watchReach starts one goroutine per other peer that follows the state of
// the connection to it, until Close. Every peer is unreachable until its
// connection first becomes ready.
func (t *Transport) watchReach() {
	now := time.Now()
	t.reach.down = make([]time.Time, t.n)
	t.reach.gone = make([]bool, t.n)
	t.reach.changed = make(chan struct{}, 1)
	for j, o := range t.out {
		if o == nil {
			continue
		}
		t.reach.down[j] = now
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			for {
				s := o.conn.GetState()
				t.setReachable(j, s == connectivity.Ready)
				if !o.conn.WaitForStateChange(t.ctx, s) {
					return // closed
				}
			}
		}()
	}
}

func (t *Transport) setReachable(j int, ok bool) {
	r := &t.reach
	r.mu.Lock()
	ok = ok && !r.gone[j]
	was := r.down[j].IsZero()
	switch {
	case ok:
		r.down[j] = time.Time{}
	case was:
		r.down[j] = time.Now()
	}
	r.mu.Unlock()
	if was != ok {
		select {
		case r.changed <- struct{}{}:
		default: // a change is pending already
		}
	}
}

// refusedRestart records that peer j's restarted process was refused: it
// is unreachable from now on.
func (t *Transport) refusedRestart(j int) {
	r := &t.reach
	r.mu.Lock()
	r.gone[j] = true
	r.mu.Unlock()
	t.setReachable(j, false)
}

// isGone reports whether peer j's restart was refused for good.
func (t *Transport) isGone(j int) bool {
	r := &t.reach
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gone[j]
}

// Reachable reports whether the connection to peer id is ready and, if it
// is not, since when it has not been; see dmutex.Reachability. Before the
// connection first becomes ready, since is when New was called. A peer
// whose restarted process this transport refused (see Err) is never
// reachable again, so that a failure detector built on it (dmutex
// WithRecovery) does not take the new process for the old one.
func (t *Transport) Reachable(id int) (ok bool, since time.Time) {
	if id < 0 || id >= t.n || id == t.id {
		return true, time.Time{}
	}
	r := &t.reach
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down[id].IsZero(), r.down[id]
}

// ReachChanged returns a channel that receives a value after Reachable
// changes for some peer.
func (t *Transport) ReachChanged() <-chan struct{} { return t.reach.changed }
