package dmutex

import (
	"context"
	"fmt"
	"time"
)

// An Observer is told what peers do, for metrics and tracing: how long
// callers waited for the critical section and held it, why a call gave up,
// and every message sent and received. Set one with [WithObserver]; the
// dmutexprom module adapts one to Prometheus.
//
// A peer calls its observer synchronously, the message methods under the
// peer's mutex: an Observer must be safe for concurrent use (peers of one
// cluster share it), return quickly, and never call back into a [Locker].
// A peer without an observer reads no clock and calls nothing.
type Observer interface {
	// Acquired is called when a call of Lock or LockContext on peer
	// entered the critical section, after waiting wait.
	Acquired(peer int, wait time.Duration)

	// Released is called when the holder of peer's critical section
	// called Unlock, hold after it entered.
	Released(peer int, hold time.Duration)

	// Failed is called when a call on peer gave up without entering,
	// after waiting wait, with the error it returned: ctx.Err() for a
	// timeout or a cancellation, [ErrClosed], or a refusal or a lost peer
	// as the Locker documents them. Tell them apart with errors.Is.
	Failed(peer int, wait time.Duration, err error)

	// Sent is called for every message peer handed to its transport, to
	// peer to, with the error Send returned: nil when the transport took
	// it (only those are counted in [Stats]).
	Sent(peer, to int, kind MessageKind, err error)

	// Received is called for every message peer took from its
	// transport, from peer from, before the algorithm steps it.
	Received(peer, from int, kind MessageKind)
}

// WithObserver has every peer report to o (see [Observer]). It applies to
// clusters and to NewPeer; a nil o, or an interface holding a nil pointer
// (which the first report would dereference), is an error wrapping
// [ErrInvalidConfig].
func WithObserver(o Observer) Option {
	return Option{
		name:  "WithObserver",
		where: forCluster | forPeer,
		apply: func(c *config) error {
			if o == nil {
				return fmt.Errorf("%w: WithObserver(nil)", ErrInvalidConfig)
			}
			if isNil(o) {
				return fmt.Errorf("%w: WithObserver((%T)(nil))", ErrInvalidConfig, o)
			}
			c.observer = o
			return nil
		},
	}
}

// observed is LockContext or TryLockContext, as lock, for a peer with an
// observer: it times the wait, starts the hold's clock, and reports the
// outcome.
func (p *Peer) observed(ctx context.Context, lock func(context.Context) error) error {
	t0 := time.Now()
	err := lock(ctx)
	t1 := time.Now()
	if err != nil {
		p.obs.Failed(p.id, t1.Sub(t0), err)
		return err
	}
	p.holdStart = t1 // only the holder writes it, and its Unlock reads it
	p.obs.Acquired(p.id, t1.Sub(t0))
	return nil
}
