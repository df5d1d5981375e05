package grpctransport

import (
	"errors"
	"fmt"

	"github.com/dmutex/dmutex"
)

// DefaultMaxQueue is how many frames a Transport keeps for one peer,
// waiting to be acknowledged, unless WithMaxQueue says otherwise: some
// megabytes, far more than any algorithm has in flight to a peer that
// answers.
const DefaultMaxQueue = 1 << 16

// ErrQueueFull is wrapped by the error Send (or Barrier) returns when the
// frames waiting for one peer's acknowledgement have reached the bound of
// WithMaxQueue: the peer has been unreachable for that long. The message
// is not queued; the peer's Observer sees the error (dmutex.Observer.Sent).
var ErrQueueFull = errors.New("dmutex: too many messages waiting for a peer")

// WithMaxQueue bounds the frames kept for each other peer until it
// acknowledges them (DefaultMaxQueue otherwise). While a peer is down its
// frames wait, in order, to be sent again when it is back; past the bound
// Send fails with an error wrapping ErrQueueFull instead of letting them
// grow without limit.
func WithMaxQueue(frames int) Option {
	return Option{name: "WithMaxQueue", apply: func(o *options) error {
		if frames < 1 {
			return fmt.Errorf("%w: WithMaxQueue(%d), want at least 1", dmutex.ErrInvalidConfig, frames)
		}
		o.maxQueue = frames
		return nil
	}}
}

// queueFull returns the error for a frame to o's peer that finds its
// queue of queued frames full, and warns of it, once per reason and
// warnEvery.
func (t *Transport) queueFull(o *outbox, queued int) error {
	err := fmt.Errorf("%w: %d messages for peer %d unacknowledged, the bound of WithMaxQueue", ErrQueueFull, queued, o.to)
	t.handshakes.warn(fmt.Sprintf("queue full %d", o.to), "dmutex: grpctransport: peer unreachable, refusing to queue more for it",
		"to", o.to, "queued", queued)
	return err
}

// maxQueue returns the bound of each outbox.
func (t *Transport) maxQueue() int {
	if t.opt.maxQueue == 0 {
		return DefaultMaxQueue
	}
	return t.opt.maxQueue
}
