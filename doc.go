// Package dmutex implements the classical distributed mutual exclusion
// algorithms behind one [Locker] interface, so that they can be embedded,
// swapped and compared.
//
// A cluster is n peers, each a goroutine, that keep each other out of a
// critical section by passing messages alone:
//
//	c, err := dmutex.NewRicartAgrawala(5)
//	if err != nil { ... }
//	defer c.Close()
//	p := c.Peer(2)
//	p.Lock()
//	// critical section: no other peer of c is here
//	p.Unlock()
//	fmt.Println(c.Stats()) // every message, counted at the transport
//
// # The lock API
//
// A [Locker] is one peer: Lock and Unlock as sync.Mutex has them,
// [Locker.LockContext] and [Locker.TryLock] to give up or not wait,
// [Locker.Fence] for the store it protects, and [Locker.HoldLost] for
// a hold in doubt.
//
// [New] starts a [Cluster] of n peers of an [Algorithm] in this process,
// over an in-memory [ChanNetwork]; each algorithm also has a constructor
// of its own, such as [NewRicartAgrawala] (the table below lists them).
// [Cluster.Peer] returns one of its peers, a [*Peer]: a Locker, with the
// runtime's own methods besides, such as [Peer.Suspected] and
// [Peer.Close]. For peers in separate processes, [NewPeer] builds one
// peer over a [Transport] (the module's grpctransport package is one).
//
// Constructors take [Option] values, each accepted by a cluster or a
// peer: [WithRecovery] and [WithUnreachableAfter] for lost peers,
// [WithFenceFloor] for fences across restarts, [WithObserver] for
// metrics, [WithFaults] for an in-memory network with faults, and the
// algorithms' own [WithImplicitReplies], [WithVotingSets] and
// [WithTree].
//
// Errors are sentinels to test with errors.Is: [ErrClosed],
// [ErrLocked] (a refused try), [ErrPeerUnreachable] (an
// [*UnreachableError] names the peers), [ErrHoldLost] and
// [ErrInvalidConfig].
//
// # The algorithms
//
// Permission-based algorithms ask the other peers, or some of them, for
// permission; token-based ones pass a single token, and only its holder
// may enter. Messages per entry, with one entry at a time (n peers, K a
// Maekawa voting set's size):
//
//	algorithm                  kind        msgs per entry          channels      paper
//	Centralized                permission  3 (0 at the coordinator) any           -
//	Lamport                    permission  3(n-1)                  FIFO          CACM 1978
//	RicartAgrawala             permission  2(n-1)                  any           CACM 1981
//	  WithImplicitReplies      permission  2(n-1); k(n-1)+k(k-1)/2+k(n-k) for k contenders
//	RoucairolCarvalho          permission  0 to 2(n-1)             any           CACM 1983
//	SinghalDynamic             permission  0 to 2(n-1); n-1 mean   any           IEEE TPDS 1992
//	LodhaKshemkalyani          permission  n-1 to 2(n-1)           FIFO          IEEE TPDS 2000
//	Maekawa                    permission  3(K-1), K ≤ 2⌈√n⌉-1     FIFO          ACM TOCS 1985
//	AgrawalElAbbadi            permission  3(K-1), K ≤ ⌊log₂ n⌋+1  FIFO          ACM TOCS 1991
//	SuzukiKasami               token       0 if held, else n       any           ACM TOCS 1985
//	TokenRing                  token       1 hop at full load      any           -
//	Raymond                    token       2 × tree distance       any           ACM TOCS 1989
//	NaimiTrehel                token       path + 1, O(log n) mean any           JPDC 1996
//	RicartAgrawalaToken        token       0 if held, else n       any           CACM 1983
//	SinghalHeuristic           token       below n alone, else n   any           IEEE TC 1989
//
// Each constructor's doc comment ([NewCentralized], [NewLamport],
// [NewRicartAgrawala], [NewRoucairolCarvalho], [NewSinghalDynamic], [NewLodhaKshemkalyani],
// [NewMaekawa], [NewAgrawalElAbbadi], [NewSuzukiKasami], [NewTokenRing], [NewRaymond],
// [NewNaimiTrehel], [NewRicartAgrawalaToken], [NewSinghalHeuristic], or
// [New] with an [Algorithm]) states its paper, channel
// assumption, message cost, fairness and failure behaviour. [NewMaekawa]'s also
// explains this project's repair of Maekawa's deadlock handling: the
// paper's FAILED rule deadlocks with four peers on the grid sets (the
// variant maekawa-textbook-failed), and the machine also sends FAILED to
// a queued request that a better one displaces. [NewSinghalHeuristic]'s
// explains the repair of Singhal's release rule, which deadlocks with
// three peers (the variant singhal-heuristic-textbook).
//
// # Choosing one
//
// A centralized coordinator is the cheapest and the simplest, and the
// coordinator is a single point of failure: that is what a lock server is
// (WithRecovery adds coordinator failover).
// Ricart-Agrawala is the classic fully distributed algorithm; Lamport's
// costs a third more but shows the replicated-queue idea;
// Roucairol-Carvalho's keeps each permission until it is asked for again,
// so a peer that enters again before anybody else asks pays nothing;
// Singhal's dynamic algorithm reaches the same costs by request sets
// that follow the load: a peer asks only those that entered since its
// last entry;
// Lodha-Kshemkalyani's keeps Ricart-Agrawala's (timestamp, id) order and
// lets concurrent requests stand in for replies, down to n-1 requests and
// one release per entry when all ask at once.
// Maekawa trades
// messages for smaller quorums: 2⌈√n⌉-1 peers at most on the grid, about
// √n on a projective plane; Agrawal-El Abbadi's tree quorums are
// root-to-leaf paths, about log₂ n peers, and route around failed peers.
// Token algorithms cost nothing while the
// token stays with one busy peer and pay to fetch it otherwise; Raymond's
// static tree makes fetching O(log n), and Naimi-Trehel's tree, which
// every request reshapes, O(log n) on average; Singhal's heuristic asks
// only the peers it believes may hold the token, fewer than n at light
// load. Without [WithRecovery] none of them
// tolerates a crash: they assume reliable peers and channels, and each
// blocks when a peer or a message is lost; none then lets two peers in,
// except Lamport's after a lost request, which a healed partition can
// cause too (see Failures). With WithRecovery, Ricart-Agrawala,
// Suzuki-Kasami, the centralized algorithm and Agrawal-El Abbadi go on
// without a crashed peer (see Lost peers). See each constructor.
//
// # Cancellation and closing
//
// [Locker.LockContext] gives up when its context ends, returning ctx.Err(). A
// request already sent cannot be unsent, so the peer lets it complete: when
// the permission or token arrives with nobody waiting, the peer enters and
// leaves at once. No other peer waits forever for a caller that gave up.
// [Peer.Close] stops a peer's goroutines; LockContext then returns
// [ErrClosed], and Lock panics with it rather than block forever.
//
// # Trying without waiting
//
// [Locker].TryLock and TryLockContext enter only if that needs no wait for
// a holder to leave; otherwise TryLockContext returns [ErrLocked], also when
// the algorithm will give the lock first to a request with priority. An
// idle token holder or the coordinator decides with no message; the other
// peers ask, with a try message (kind "try"), and every peer asked answers
// at once, with a permission or "busy". A refused try is withdrawn with no
// trace: no peer keeps a deferred reply, a vote or a queued request for
// it, which [Check] verifies in every final state (CheckConfig.Tries).
// Each constructor states what a try costs. The token ring's peer that has
// just passed the token on refuses at once until the token rests again.
//
// # Lost peers
//
// With [WithUnreachableAfter], a peer whose transport implements
// [Reachability] (ChanEndpoint, and the gRPC transport) stops waiting when
// a peer its request needs has been unreachable for longer than the bound:
// LockContext and TryLockContext return an [*UnreachableError] naming the
// peers, which matches [ErrPeerUnreachable]; Lock keeps waiting. The
// request is withdrawn as a cancelled one is, so the signal never lets
// anyone in.
//
// With [WithRecovery] as well, the same signal is the failure detector of
// the algorithm's crash recovery (Ricart-Agrawala's crash exclusion,
// Suzuki-Kasami's token regeneration, centralized coordinator failover,
// Agrawal-El Abbadi's quorums around the suspected peers):
// a suspicion steps the machine, which goes on without the suspected
// peer, instead of ending the wait. The detector is imperfect, so a
// falsely suspected peer may be inside while another enters; fences
// ([Peer.Fence]) are what keeps a store safe then.
//
// A holder learns that its hold may no longer be exclusive from
// [Locker.HoldLost], a channel closed when a peer its hold depends on
// becomes suspected during the hold, or the peer is closed, and
// [Locker.HoldErr], the reason ([ErrHoldLost]). It comes within
// WithUnreachableAfter of the transport noticing the cut, not before
// anyone else can enter: it tells the holder to stop writing, and the
// fences keep the store safe.
//
// # Failures
//
// The algorithms assume reliable peers and reliable channels, as their
// papers do; none resends a message. What each does when that fails is
// computed by the model checker: the fault is injected at every point of
// every interleaving, and the explored graph decides, for each surviving
// peer, whether its request is served always, sometimes or never. The
// failure and partition tables, generated and compared by TestDocTables,
// are on https://github.com/dmutex/dmutex/blob/main/docs/failures.md; what
// the checker explores and finds, crash recovery included, is on
// https://github.com/dmutex/dmutex/blob/main/docs/checking.md.
//
// [ChanNetwork] injects these faults into a running cluster
// ([ChanNetwork.Crash], [ChanNetwork.Partition], [ChanNetwork.Heal],
// [ChanNetwork.DropNext], and delay, reordering and loss through
// [ChanNetwork.SetFaults] or [WithFaults]), and a [Simulation] into a
// simulated one; a simulated run that a fault leaves stuck ends with an
// error wrapping [ErrBlocked] that names the peers waiting forever.
// Blocking is what LockContext's deadline is for: it returns ctx.Err()
// and leaves the peer usable once the fault is repaired. Without
// recovery, only Lamport's algorithm lets two peers in, after a lost
// request or a healed partition, which loses requests too: its entry
// rule takes a later message from a peer to mean that no older request
// of that peer is on its way.
//
// # Fencing
//
// A lock that the holder believes it has may already have passed on: the
// holder may have stalled past a timeout that another system enforced.
// [Locker.Fence] returns a number that strictly increases, across the whole
// cluster, in the order of entries (an entry made for a call that gave up
// takes none); pass it with every write to a store that rejects numbers
// smaller than the largest it has seen. A peer learns
// the others' fences from the messages it receives; one message may raise
// its fence by at most [FenceWindow], and never past [MaxFence], so that a
// forged message cannot use the fences up. Messages beyond that are
// refused and counted in [Stats].Refused. Fences never wrap: a peer whose
// fence has reached MaxFence gives its holds the fence 0, which such a
// store rejects.
//
// Fences are counted by the cluster, so a cluster started afresh counts
// from 1 again. [WithFenceFloor] carries them across restarts: give the new
// cluster the highest fence the store has accepted, and every fence it
// hands out is above it. A store that rejects a fence lower than the
// highest it has accepted then never accepts a stale holder, across
// restarts, and never refuses the new cluster's writes
// (TestFenceFloorAcrossRestarts).
// # Observing
//
// [WithObserver] gives peers an [Observer], told of every wait, hold,
// failed call and message; a peer without one reads no clock for it. The
// module github.com/dmutex/dmutex/dmutexprom adapts an Observer to
// Prometheus.
//
// # Simulating, checking and measuring
//
// The same machines run without goroutines or clocks, for tests, teaching
// and measurement. Each takes the options of the algorithm it runs, as a
// cluster does, and its own settings in a struct:
//
//   - [Simulation] ([NewSimulation], [SimConfig]) runs a cluster in one
//     goroutine under a seeded random schedule that replays exactly, with
//     faults, and checks every promise after every step; WriteLog and
//     WriteMermaid print the run.
//   - [World] ([NewWorld], [WorldConfig]) is a whole cluster as a value:
//     its enabled [Transition] values and Apply, one at a time.
//   - [Check] ([CheckConfig], [CheckResult]) explores every reachable
//     World of a small configuration and decides safety, deadlock and
//     starvation freedom, with a shortest counterexample; [Variants] are
//     the textbooks' broken versions it refutes.
//   - [RunTimed] ([Timing]) measures synchronization delay, response time
//     and throughput in virtual time, and [MeasureRecovery] what a crash
//     costs.
//
// The commands dmutexcheck, dmutexbench and dmutexlab (a browser
// explorer) are built on them.
//
// # Architecture
//
// Each algorithm is a pure, synchronous state machine: an event goes in (a
// local request, a local release, a message received) and messages to
// send, and whether the peer entered, come out. Machines have no
// goroutines, channels, clocks or I/O, so the same code runs under the
// goroutine runtime ([Peer]), the deterministic simulator ([Simulation]) and the model
// checker. A Peer steps its machine under its mutex, on the caller's
// goroutine when the machine can enter at once (a peer that already holds
// an idle token) and on its receive goroutine for messages. A [Transport]
// carries messages between peers: [ChanNetwork] in memory, or a network
// transport for peers in separate processes (see [NewPeer]).
package dmutex
