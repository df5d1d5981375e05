package dmutex

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
)

// ErrClosed is returned by [Locker.LockContext] on a peer that has been
// closed, and is the panic value of Lock on a closed peer.
var ErrClosed = errors.New("dmutex: peer closed")

// ErrLocked is returned by TryLockContext when the lock is held, or will
// be given first to a request that has priority.
var ErrLocked = errors.New("dmutex: locked")

// ErrInvalidConfig is wrapped by every error about a bad size, id, option or
// quorum given to a constructor. The wrapping error names the value.
var ErrInvalidConfig = errors.New("dmutex: invalid configuration")

// MaxPeers is the largest number of peers a cluster may have. Several
// algorithms keep O(n) state per peer, so n peers cost O(n²) memory.
const MaxPeers = 4096

// A Locker is one peer of a distributed mutual exclusion cluster. It is
// safe for concurrent use: several goroutines may call Lock on the same
// peer, and they queue locally, each entry a protocol entry of its own.
//
// As with sync.Mutex, a Locker is not reentrant, and Unlock of a peer that
// is not in the critical section panics.
type Locker interface {
	sync.Locker // Lock blocks until this peer is in the critical section; Unlock leaves it

	// LockContext is Lock that gives up when ctx ends first, returning
	// ctx.Err() unchanged. If the peer's request was already sent, the
	// peer completes it internally and leaves at once, so no other peer
	// waits for it forever; that entry takes no fencing token (see
	// Fence). Once LockContext has returned nil, the end of
	// ctx no longer matters. On a closed peer it returns ErrClosed. With
	// WithUnreachableAfter, it also gives up, with an error wrapping
	// ErrPeerUnreachable that names the peers, when a peer its request
	// needs has been unreachable too long; Lock keeps waiting then.
	LockContext(ctx context.Context) error

	// TryLock tries to enter the critical section without waiting for a
	// holder to leave, and reports whether it did. It is
	// TryLockContext(context.Background()) == nil.
	TryLock() bool

	// TryLockContext tries to enter the critical section without waiting
	// for a holder to leave. It returns nil once in, or an error for
	// which errors.Is(err, ErrLocked) holds when another peer, or another
	// caller of this peer, is inside or waiting, or the algorithm will
	// give the lock first to a request with priority. Asking may cost
	// messages, and the answer a round trip (each constructor's
	// documentation gives the cost), but no answer waits for a critical
	// section to end. If ctx ends first it returns ctx.Err() unchanged,
	// and the peer withdraws the try when its answer comes, leaving at
	// once if it was a yes. On a closed peer it returns ErrClosed.
	TryLockContext(ctx context.Context) error

	// ID returns the peer's id, 0 to n-1.
	ID() int

	// Stats returns this peer's own counts (see [Stats]).
	Stats() Stats

	// Fence returns the fencing token of the current hold: a number that
	// strictly increases, across the whole cluster, in the order in which
	// peers enter the critical section. Pass it to a store that rejects
	// writes carrying a smaller number than it has seen, and a holder that
	// stalled past its turn cannot clobber its successor. Fence returns 0
	// when the peer is not in the critical section, and once the peer's
	// fences are used up (see MaxFence), never a number that wrapped.
	// Only holds that a caller gets take one: the entry a peer makes for
	// a LockContext or TryLockContext that gave up after its request went
	// out (and leaves at once) takes none, so calls that give up do not
	// spend fences.
	Fence() uint64

	// HoldLost returns a channel that is closed once the current hold may
	// no longer be exclusive, as a context's Done channel is closed when
	// its work should stop; HoldErr then says why. Each hold has its own
	// channel, made when first asked for, so holds nobody asks about cost
	// nothing; it is not closed by Unlock. With no hold (before Lock,
	// after Unlock), HoldLost returns a closed channel.
	//
	// It closes when the peer is closed while holding, and, with
	// WithUnreachableAfter, when a peer the hold depends on becomes
	// suspected during the hold: unreachable for longer than that bound.
	// With WithRecovery the hold depends on every other peer, since any
	// of them that suspects the holder (or its coordinator or token
	// holder) may go on without it and let another peer in beside it;
	// without it, on the peers its requests need (see
	// WithUnreachableAfter), who cannot let anyone in but will not hear
	// of the release until they are reached again. A peer already
	// suspected when the hold began does not count: the hold was granted
	// without it. Suspicions that end do not reopen it.
	//
	// What it promises: it closes no earlier than WithUnreachableAfter
	// after the transport reports such a peer unreachable, and within
	// that plus the scheduling delay of the peer's watcher (milliseconds);
	// so within WithUnreachableAfter plus the transport's detection delay
	// of the cut itself. The in-memory network reports a Partition or
	// Crash at once; grpctransport reports a closed or refused connection
	// at once and a silent one after its keepalive interval and timeout
	// (grpctransport.WithKeepalive). It never closes while the peer is
	// open and every peer stays reachable. What it cannot promise: on an asynchronous network
	// nobody can tell a slow peer from a cut-off one, so it may close
	// when nobody else entered (the cut was short, or one-sided), and
	// another peer may enter before it closes, since the others suspect
	// the holder after the same bound, measured by their own transports.
	// Stop writing when it closes, to waste less; rely on fences (Fence)
	// to keep a store safe.
	HoldLost() <-chan struct{}

	// HoldErr returns nil while the current hold is not in doubt, and,
	// once HoldLost's channel is closed (whether or not it was asked
	// for), an error matching ErrHoldLost and its reason: an
	// *UnreachableError (ErrPeerUnreachable) naming the peers the hold
	// depends on whose suspicion found it lost (those the watcher
	// suspected at that moment; later ones are not added), or ErrClosed.
	// The error stays the same until the hold ends. With no hold it
	// returns an error matching ErrHoldLost alone. It is cheap enough to
	// call before every write.
	HoldErr() error
}

// Stats counts what a peer or a cluster did.
type Stats struct {
	Entries  uint64            // critical-section entries granted to callers of Lock or LockContext
	Messages uint64            // messages handed to the transport
	ByKind   map[string]uint64 // Messages by kind name ("request", "reply", ...); kinds never sent are absent

	// Refused counts messages a peer received and dropped unstepped:
	// malformed ones (an unknown kind, another receiver, a sender out of
	// range or the receiver itself) and those whose Fence is beyond
	// MaxFence or more than FenceWindow above the receiver's fence. No
	// correct peer and transport produce one.
	Refused uint64
}

// add adds o's counts into s.
func (s *Stats) add(o Stats) {
	s.Entries += o.Entries
	s.Messages += o.Messages
	s.Refused += o.Refused
	if len(o.ByKind) > 0 && s.ByKind == nil {
		s.ByKind = make(map[string]uint64, len(o.ByKind))
	}
	for k, v := range o.ByKind {
		s.ByKind[k] += v
	}
}

// Sub returns the counts that s has beyond an earlier snapshot old: what
// happened between the two.
func (s Stats) Sub(old Stats) Stats {
	d := Stats{Entries: s.Entries - old.Entries, Messages: s.Messages - old.Messages, Refused: s.Refused - old.Refused}
	for k, v := range s.ByKind {
		if v -= old.ByKind[k]; v != 0 {
			if d.ByKind == nil {
				d.ByKind = make(map[string]uint64)
			}
			d.ByKind[k] = v
		}
	}
	return d
}

// String formats s as "entries=3 messages=12 (reply=6 request=6)", with
// " refused=1" at the end when a message was refused.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "entries=%d messages=%d", s.Entries, s.Messages)
	if len(s.ByKind) > 0 {
		b.WriteString(" (")
		for i, k := range sortedKeys(s.ByKind) {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s=%d", k, s.ByKind[k])
		}
		b.WriteByte(')')
	}
	if s.Refused > 0 {
		fmt.Fprintf(&b, " refused=%d", s.Refused)
	}
	return b.String()
}

func sortedKeys(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range maps.Keys(m) {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ { // insertion sort: a handful of keys
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// A Cluster is n peers of one algorithm in this process, each a goroutine,
// connected by an in-memory transport that keeps per-pair FIFO order.
// Its methods are safe for concurrent use. After Close, every peer is
// closed (see Peer.Close).
type Cluster struct {
	alg   Algorithm
	net   *ChanNetwork
	peers []*Peer
}

// New starts a cluster of n peers, ids 0 to n-1, running alg over a fresh
// in-memory network. Invalid n or options give an error wrapping
// [ErrInvalidConfig].
func New(alg Algorithm, n int, opts ...Option) (*Cluster, error) {
	cfg, err := newConfig(alg, n, forCluster, opts)
	if err != nil {
		return nil, err
	}
	c := &Cluster{alg: alg, net: NewChanNetwork(n)}
	if cfg.faults != nil {
		if err := c.net.SetFaults(*cfg.faults); err != nil {
			return nil, err
		}
	}
	for i := range n {
		m, err := cfg.newMachine(alg, i, n)
		if err != nil {
			c.Close()
			return nil, err
		}
		p := startPeer(alg, i, n, m, c.net.Endpoint(i), cfg)
		c.peers = append(c.peers, p)
	}
	return c, nil
}

// Algorithm returns the algorithm the cluster runs.
func (c *Cluster) Algorithm() Algorithm { return c.alg }

// Len returns the number of peers.
func (c *Cluster) Len() int { return len(c.peers) }

// Peers returns every peer; index i is peer i. The slice is the caller's.
func (c *Cluster) Peers() []*Peer { return append([]*Peer(nil), c.peers...) }

// Peer returns peer i, a *Peer as NewPeer builds for another process:
// beside the Locker methods it has the runtime's own, such as Suspected
// (the peers its failure detector suspects now) and Close. It panics if
// i is not in [0, n), as indexing a slice would.
func (c *Cluster) Peer(i int) *Peer {
	if i < 0 || i >= len(c.peers) {
		panic(fmt.Sprintf("dmutex: peer %d out of range [0, %d)", i, len(c.peers)))
	}
	return c.peers[i]
}

// Network returns the in-memory network that connects the peers, for
// tests and experiments that inject faults.
func (c *Cluster) Network() *ChanNetwork { return c.net }

// Stats returns the totals over all peers.
func (c *Cluster) Stats() Stats {
	var s Stats
	for _, p := range c.peers {
		s.add(p.Stats())
	}
	return s
}

// Close closes every peer and returns after all their goroutines have
// exited. A second call is harmless and returns nil.
func (c *Cluster) Close() error {
	var errs []error
	for _, p := range c.peers {
		errs = append(errs, p.Close())
	}
	errs = append(errs, c.net.Close())
	return errors.Join(errs...)
}
