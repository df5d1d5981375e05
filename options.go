package dmutex

import (
	"fmt"
	"slices"
	"time"
)

// An Option configures a cluster (New and the New... constructors) or a
// single peer (NewPeer): every Option applies to one or both. The
// simulator, the world and the checker take the options of the algorithm
// they run too (NewSimulation, NewWorld, CheckConfig.Options), so a
// configuration moves between them unchanged; their own settings, such
// as a seed or a delivery policy, are fields of SimConfig, WorldConfig
// and CheckConfig. An option that means nothing to the algorithm or to
// the constructor it is given to is an error wrapping ErrInvalidConfig,
// never silently ignored. The zero Option is invalid.
type Option struct {
	name  string
	algs  []Algorithm // algorithms it applies to; nil means all
	where scope       // constructors it applies to
	apply func(*config) error
}

// String returns the option's name, such as "WithRecovery", so that a
// variant's Options can be told apart and printed.
func (o Option) String() string {
	if o.name == "" {
		return "Option{}"
	}
	return o.name
}

// scope is a set of constructor families.
type scope uint8

const (
	forCluster    scope = 1 << iota // New, NewRicartAgrawala, ...
	forPeer                         // NewPeer
	forSimulation                   // NewSimulation
	forWorld                        // NewWorld and Check
	forAll        = forCluster | forPeer | forSimulation | forWorld
)

func (s scope) String() string {
	switch s {
	case forCluster:
		return "a cluster"
	case forPeer:
		return "NewPeer"
	case forSimulation:
		return "a simulation"
	case forWorld:
		return "a world"
	}
	return "this constructor"
}

// config is the result of applying options. Fields are added by the
// options that set them.
type config struct {
	alg Algorithm
	n   int

	implicitReplies bool     // Ricart-Agrawala: WithImplicitReplies
	recovery        bool     // WithRecovery
	fenced          bool     // NewWorld only: the fenced store (CheckConfig.Fenced)
	stampGaps       bool     // NewWorld only: cap the gaps between stamps (CheckConfig.StampGaps)
	faults          *Faults  // WithFaults
	observer        Observer // WithObserver; nil means none

	treeParent []int // Raymond: WithTree; nil means heap order

	votingSets [][]int // Maekawa: WithVotingSets, checked; nil means VotingSets(n)

	sim simConfig // NewSimulation and NewWorld only: seed, delivery policy, tracing

	requests int // NewWorld only: WorldConfig.Requests
	tries    int // NewWorld only: WorldConfig.Tries

	fenceFloor       uint64        // WithFenceFloor: fences start above it
	unreachableAfter time.Duration // WithUnreachableAfter; 0 for none
	variant          *Variant      // SimConfig.Variant, WorldConfig.Variant; nil for the real algorithm
}

// newConfig validates n and applies opts for a constructor of kind where.
func newConfig(alg Algorithm, n int, where scope, opts []Option) (*config, error) {
	if !alg.valid() {
		return nil, fmt.Errorf("%w: unknown algorithm %d", ErrInvalidConfig, int(alg))
	}
	if n < 1 || n > MaxPeers {
		return nil, fmt.Errorf("%w: n = %d peers, want 1 to %d", ErrInvalidConfig, n, MaxPeers)
	}
	cfg := &config{alg: alg, n: n}
	for i, o := range opts {
		if o.apply == nil {
			return nil, fmt.Errorf("%w: option %d is the zero Option", ErrInvalidConfig, i)
		}
		if o.where&where == 0 {
			return nil, fmt.Errorf("%w: option %s does not apply to %v", ErrInvalidConfig, o.name, where)
		}
		if o.algs != nil && !slices.Contains(o.algs, alg) {
			return nil, fmt.Errorf("%w: option %s does not apply to %v", ErrInvalidConfig, o.name, alg)
		}
		if err := o.apply(cfg); err != nil {
			return nil, err
		}
	}
	if cfg.recovery && where&(forCluster|forPeer) != 0 && cfg.unreachableAfter == 0 {
		return nil, fmt.Errorf("%w: WithRecovery needs WithUnreachableAfter, the bound after which an unreachable peer is suspected", ErrInvalidConfig)
	}
	return cfg, nil
}

// newMachine builds peer id's machine, wrapped as the variant says.
func (c *config) newMachine(alg Algorithm, id, n int) (machine, error) {
	m, err := algorithms[alg].build(id, n, c)
	if err != nil || c.variant == nil || c.variant.wrap == nil {
		return m, err
	}
	return c.variant.wrap(m), nil
}

// WithImplicitReplies switches Ricart-Agrawala to its implicit-reply
// variant: a waiting peer does not answer a request of higher priority,
// because its own request, which that peer holds, already says it will
// wait. With k concurrent contenders only one reply flows per pair of
// contenders. It applies to RicartAgrawala only.
func WithImplicitReplies() Option {
	return Option{
		name:  "WithImplicitReplies",
		algs:  []Algorithm{RicartAgrawala},
		where: forAll,
		apply: func(c *config) error { c.implicitReplies = true; return nil },
	}
}

// recoveryAlgorithms are the algorithms whose machines implement crash
// recovery: WithRecovery applies to them alone. An algorithm that gains a
// recovery adds itself here, and nowhere else.
var recoveryAlgorithms = []Algorithm{RicartAgrawala, SuzukiKasami, Centralized, AgrawalElAbbadi}

// WithRecovery turns on the algorithm's crash recovery: the machine acts
// on its failure detector's suspicions. Ricart-Agrawala: crash exclusion,
// see [NewRicartAgrawala]. Suzuki-Kasami: token regeneration with epochs,
// see [NewSuzukiKasami]. Centralized: coordinator failover, see
// [NewCentralized]. Agrawal-El Abbadi: quorums built around the suspected
// peers, whose votes their voters take back, see [NewAgrawalElAbbadi].
// Without it the suspicions are ignored, and
// nothing else changes: the same messages, the same counts.
//
// The failure detector is the runtime's for a cluster and for NewPeer,
// which then also need WithUnreachableAfter: a peer is suspected once it
// has been unreachable for longer than that bound (the in-memory
// network's Crash and Partition, the gRPC transport's broken connections
// and keepalive pings), and trusted again when it answers. Each change
// steps the machine, and whatever it sends is counted in Stats as any
// message is. A suspected peer then no longer ends a wait with
// ErrPeerUnreachable: the machine goes on without it. In a World and in
// Check the detector is the checker's (CheckConfig.Detector). In a
// Simulation it is perfect: after Crash, each survivor suspects the
// crashed peer at a scheduling step of its own, chosen like a delivery;
// SimConfig.FalseSuspicionRate makes it imperfect at a seeded rate, and
// SimConfig.Detector sets it (an imperfect one's false suspicions are
// then made by hand, as World transitions).
//
// A real detector is imperfect: a peer that is slow, or cut off by a
// partition, is suspected as a crashed one is. With a false suspicion two
// peers may be inside at once (Check finds the runs; docs/checking.md,
// "Crash recovery, checked"), so a resource that must stay consistent has
// to check fences (Peer.Fence, WithFenceFloor). What is promised:
//
//   - A majority acts, a minority waits. A suspicion is a vote that a
//     peer is gone, and only a peer that trusts a majority of the
//     cluster, itself included, casts it: a peer that suspects more than
//     (n-1)/2 others (one cut off alone, or the survivor of two) acts on
//     none of its suspicions, makes no new request, and enters only with
//     the others' real permission, token or grant. Its LockContext and
//     TryLockContext return an [*UnreachableError] naming the peers it
//     suspects; Lock waits. When it trusts a majority again it goes on.
//     So a cluster needs n >= 3 to go on after a crash.
//   - Fences never shared. With recovery on, every peer takes its fences
//     from a class of its own (the numbers equal to its id modulo n), the
//     least above every fence it has seen, so no two holds of the whole
//     cluster share a fence, whatever the requests, crashes and
//     suspicions; a store that accepts only a fence at least the highest
//     it has accepted then never interleaves two holders' writes (Check
//     with CheckConfig.Fenced). The first entry after a peer acts on a
//     new suspicion takes a fence of a new epoch of its own, above
//     k*[FenceEpoch] (k-1 = id modulo n), so that after a crash seen by a
//     perfect detector every later fence is above every fence the
//     crashed peer handed out, even those it told nobody of. Suzuki-Kasami
//     and centralized put their token epoch or term there instead.
//   - The majority's fences rank above the minority's: a minority enters
//     only by the others' real answers, so it never takes a fence from
//     an epoch of its own while cut off.
//   - A peer back from a partition is asked again: a waiting peer resends
//     what it waits for to a peer it trusts again, or that its transport
//     reports reachable again after a cut too short to suspect it
//     (Suzuki-Kasami and centralized start a round or a term, which asks
//     everyone).
//   - A peer never reached is not suspected. Processes start one by one,
//     and a peer that has not started yet looks crashed; suspecting it
//     would let the others enter beside it once it starts. So the
//     runtime's detector suspects only a peer it has seen reachable at
//     least once. A call whose request needs a peer never reached returns
//     an [*UnreachableError] naming it once the bound has passed (Lock
//     waits), and nobody enters without it: start every peer, or the
//     cluster waits for the missing one as it would without recovery.
//
// Fences are not promised to follow the order of entry across a false
// suspicion: they order holds for a store, nothing more.
func WithRecovery() Option {
	return Option{
		name:  "WithRecovery",
		algs:  recoveryAlgorithms,
		where: forAll,
		apply: func(c *config) error { c.recovery = true; return nil },
	}
}
