package dmutex

import "fmt"

// MaxFenceFloor is the largest floor WithFenceFloor accepts: it leaves
// FenceWindow fences, more than any cluster uses up, before MaxFence.
const MaxFenceFloor = MaxFence - FenceWindow

// WithFenceFloor starts the peer's fencing tokens above floor: every
// Fence it hands out is larger than floor, whatever happened before.
//
// Fences are counted afresh by every new cluster, so without a floor a
// cluster restarted after a crash hands out 1, 2, ... again, and a store
// that rejects a fence lower than the highest it has accepted would
// reject every write of the new cluster. Give the new cluster, as floor,
// the highest fence the store has accepted (or any larger number, such as
// the highest any peer of the old cluster saw: see dmutexpeer -state).
// The contract then holds across restarts: the store never accepts a
// write from a holder older than the last one it accepted, and no write
// of the new cluster is refused because of the reset. Peers learn larger
// fences from each other's messages, so peers of one cluster may be given
// different floors; each hands out fences above the largest it has seen.
//
// A floor above MaxFenceFloor is an error wrapping ErrInvalidConfig, so
// that the fences cannot run out. WithFenceFloor applies to clusters, to
// NewPeer, and to a World, whose fenced store (CheckConfig.Fenced) sees
// the fences the peers hand out.
func WithFenceFloor(floor uint64) Option {
	return Option{
		name:  "WithFenceFloor",
		where: forCluster | forPeer | forWorld,
		apply: func(c *config) error {
			if floor > MaxFenceFloor {
				return fmt.Errorf("%w: WithFenceFloor(%d): want at most %d (MaxFenceFloor), so that fences do not run out",
					ErrInvalidConfig, floor, uint64(MaxFenceFloor))
			}
			c.fenceFloor = floor
			return nil
		},
	}
}
