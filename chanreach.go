package dmutex

import "time"

var _ Reachability = (*ChanEndpoint)(nil)

// Reachable reports whether peer id can be reached from this endpoint:
// neither of the two has crashed (ChanNetwork.Crash) and no partition
// separates them. If not, since is when the crash or the partition began;
// if so, since is when the last partition between the two ended (the zero
// time if none did), since the messages it cut were lost.
func (e *ChanEndpoint) Reachable(id int) (ok bool, since time.Time) {
	nw := e.net
	if !nw.faulty.Load() || id < 0 || id >= len(nw.eps) {
		return true, time.Time{}
	}
	fs := nw.faults
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, p := range [2]int{id, e.id} {
		if fs.crashed[p] {
			return false, fs.downAt[p]
		}
	}
	if fs.group != nil && fs.group[id] != fs.group[e.id] {
		return false, fs.cutAt
	}
	return true, fs.backAt[[2]int{min(id, e.id), max(id, e.id)}]
}

// ReachChanged returns a channel that receives a value after a crash, a
// partition or a heal changes what Reachable says; see Reachability.
func (e *ChanEndpoint) ReachChanged() <-chan struct{} { return e.reach }

// reachChanged tells every endpoint that reachability changed.
func (nw *ChanNetwork) reachChanged() {
	for _, e := range nw.eps {
		select {
		case e.reach <- struct{}{}:
		default: // a change is already pending
		}
	}
}
