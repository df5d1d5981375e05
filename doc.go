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
//	Maekawa                    permission  3(K-1), K ≈ √n          FIFO          ACM TOCS 1985
//	SuzukiKasami               token       0 if held, else n       any           ACM TOCS 1985
//	TokenRing                  token       1 hop at full load      any           -
//	Raymond                    token       ≤ 2 × tree depth        any           ACM TOCS 1989
//
// Each constructor's doc comment ([NewCentralized], [NewLamport],
// [NewRicartAgrawala], [NewMaekawa], [NewSuzukiKasami], [NewTokenRing],
// [NewRaymond], or [New] with an [Algorithm]) states its paper, channel
// assumption, message cost, fairness and failure behaviour.
//
// # Choosing one
//
// A centralized coordinator is the cheapest and the simplest, and the
// coordinator is a single point of failure: that is what a lock server is.
// Ricart-Agrawala is the classic fully distributed algorithm; Lamport's
// costs a third more but shows the replicated-queue idea. Maekawa trades
// messages for √n-sized quorums. Token algorithms cost nothing while the
// token stays with one busy peer and pay to fetch it otherwise; Raymond's
// tree makes fetching O(log n). None of them tolerates a crash: they
// assume reliable peers and channels, and each blocks when a peer or a
// message is lost; none then lets two peers in, except Lamport's after a
// lost request (see Failures). See each constructor.
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
// # Observing
//
// [WithObserver] gives peers an [Observer], told of every wait, hold,
// failed call and message; a peer without one reads no clock for it. The
// module github.com/dmutex/dmutex/dmutexprom adapts an Observer to
// Prometheus.
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
// # Failures
//
// The algorithms assume reliable peers and reliable channels, as their
// papers do; none resends a message. What each does when that fails, with
// four peers and peer 0 as the coordinator or first token holder (each
// cell is a row of TestFailureSemantics, and in no case are two peers
// ever inside at once):
//
//	algorithm         idle peer crashes     holder crashes   a message is lost                    partition {0,1} | {2,3}
//	Centralized       others go on          all block        lost grant: all block                coordinator's side goes on
//	Lamport           all block             all block        lost reply: masked by the replier's  both sides block
//	                                                         next message, else all block
//	RicartAgrawala    all block             all block        lost reply: all block                both sides block
//	  implicit        all block             all block        lost reply: masked by the replier's  both sides block
//	                                                         next request
//	Maekawa           sets containing it    sets meeting     lost vote: its requester and those   sides without a whole
//	                  block                 its set block    behind it block                      voting set block
//	SuzukiKasami      others go on          token lost:      lost token: all block                token's side goes on
//	                                        all block
//	TokenRing         goes on until the     token lost:      lost token: all block                goes on until the token
//	                  token reaches it      all block                                             must cross the cut
//	Raymond           others go on if it    token lost:      lost privilege: all block            token's side goes on
//	                  is a leaf             all block
//
// Blocking is what LockContext's deadline is for: it returns ctx.Err()
// and leaves the peer usable once the fault is repaired. A partition
// that heals does not bring back what it dropped: a peer whose request
// was lost stays blocked (TestPartitionHealDoesNotRecoverLostRequests).
// [ChanNetwork] injects these faults ([ChanNetwork.Crash],
// [ChanNetwork.Partition], [ChanNetwork.DropNext], and delay, reordering
// and loss through [ChanNetwork.SetFaults] or [WithFaults]).
//
// A [Simulation] injects the same faults (Crash, Partition, Heal, DropNext
// and the seeded [WithLoss]) and replays every cell of the table
// deterministically (TestSimulationFailureSemantics); a run that a fault
// leaves stuck ends with an error wrapping [ErrBlocked] that names the
// peers waiting forever. Seeded loss finds one case outside the table: a
// lost request can let two Lamport peers in at once, because its entry
// rule takes a later message from a peer to mean that no older request
// of that peer is on its way (TestSimulationLamportLostRequestBreaksSafety).
//
// # Fencing
//
// A lock that the holder believes it has may already have passed on: the
// holder may have stalled past a timeout that another system enforced.
// [Locker.Fence] returns a number that strictly increases, across the whole
// cluster, in the order of entries; pass it with every write to a store
// that rejects numbers smaller than the largest it has seen. A peer learns
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
package dmutex
