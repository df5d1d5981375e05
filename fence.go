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
// Different floors must lie within MaxFloorSpread of each other: a peer
// refuses a message whose fence is more than FenceWindow above its own,
// so a peer given a floor far above another's would never be heard by it,
// and no Lock could end. Where the floors are known together, a cluster
// that breaks the rule is refused before it starts, with an error naming
// both peers and both floors: peers started by NewPeer on one ChanNetwork
// (the second NewPeer fails), and peers over grpctransport given their
// floor there too (grpctransport.WithFenceFloor; NewPeer refuses a
// transport whose floor differs from the peer's), whose first stream
// between the two is refused and whose Err says why. Wherever else such
// a message arrives, it is refused as FenceWindow says, and a LockContext
// of the refusing peer that gives up says why in its error.
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

// MaxFloorSpread is how far apart the floors (WithFenceFloor) of two peers
// of one cluster may lie: half of FenceWindow, so that the other half is
// left for the entries that one peer makes without the other hearing of
// them.
const MaxFloorSpread = FenceWindow / 2

// FloorsApart returns an error wrapping ErrInvalidConfig that names both
// peers and both floors, the lower id first, if peer i's floor fi and peer
// j's floor fj lie more than MaxFloorSpread apart, and nil otherwise. Transports that learn other peers' floors (such as
// grpctransport) use it to refuse a cluster that could not work.
func FloorsApart(i int, fi uint64, j int, fj uint64) error {
	lo, hi := min(fi, fj), max(fi, fj)
	if hi-lo <= MaxFloorSpread {
		return nil
	}
	if j < i {
		i, fi, j, fj = j, fj, i, fi // the lower id first, whichever side finds it
	}
	return fmt.Errorf("%w: fence floors too far apart: peer %d was given floor %d and peer %d floor %d (WithFenceFloor), "+
		"more than MaxFloorSpread (%d) apart, so the lower would refuse every message of the higher; "+
		"give every peer of the cluster the same floor, such as the highest either was given",
		ErrInvalidConfig, i, fi, j, fj, uint64(MaxFloorSpread))
}

// FenceEpoch is the size of a fence epoch under WithRecovery: the first
// entry a peer makes after it starts to suspect another takes its fence
// from a new epoch, above k*FenceEpoch for the smallest k that puts it
// above every fence the peer has seen and belongs to the peer (k-1 = id
// modulo n). A peer that crashed may have entered with a fence nobody
// heard of, one above the highest its permissions carried; the epoch puts
// the survivors' fences above it, so that a store takes their writes.
const FenceEpoch = 1 << 32

// entryFence returns the fencing token of an entry by peer id of n with
// machine m, given fence, the highest the peer has seen (below MaxFence),
// whether the cluster runs WithRecovery, and whether a new epoch is due
// (the first entry since the peer began to act on a suspicion).
//
// Without recovery it is fence+1: only one peer is ever inside, and each
// entry has seen the fence of the one before, so fences grow with the
// entries. With recovery, two peers may be inside at once (a falsely
// suspected holder and the peer that went in without it), with any number
// of requests and suspicions, so the fence alone cannot order them:
// every peer takes its fences from a class of its own, the numbers equal
// to its id modulo n, the least one above what it has seen (and above the
// new epoch, when one is due). Two peers then never share a fence,
// whatever they have seen, and the store orders their holds. A machine
// that orders fences itself (fencer: Suzuki-Kasami's token epochs,
// centralized terms) gives the least fence it allows, which is then taken
// up to the peer's class. The runtime and the World's fenced store both
// take fences from here, through the driver.
func entryFence(m machine, fence uint64, recovery, epochDue bool, id, n int) uint64 {
	next := fence + 1
	if f, ok := m.(fencer); ok {
		next = f.nextFence(fence)
	} else if recovery && epochDue {
		k := fence/FenceEpoch + 1
		k += (uint64(id+1) + uint64(n) - k%uint64(n)) % uint64(n)
		if k < MaxFence/FenceEpoch {
			next = k*FenceEpoch + 1
		}
	}
	if recovery {
		next += (uint64(id) + uint64(n) - next%uint64(n)) % uint64(n)
	}
	return next // may pass MaxFence: the caller hands out no fence then
}
