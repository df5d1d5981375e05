// Package grpctransport carries dmutex messages between processes over
// gRPC, so that the peers of one cluster can run on different machines
// with the same algorithms and the same [dmutex.Locker] API as in one
// process.
//
// # Use
//
// Every process starts one [Transport] with the cluster's static
// membership, the address of each peer in id order, and hands it to
// [dmutex.NewPeer]:
//
//	tr, err := grpctransport.New(id, addrs, grpctransport.WithTLS(cfg),
//		grpctransport.WithCluster(dmutex.RicartAgrawala, ""))
//	...
//	p, err := dmutex.NewPeer(dmutex.RicartAgrawala, id, len(addrs), tr)
//
// The [dmutex.Peer] owns the transport from then on and closes it in
// Close. [WithServerOptions] and [WithDialOptions] add gRPC options, such
// as interceptors; every peer also serves the standard gRPC health service
// ([HealthService]). A Transport implements [dmutex.Reachability] from the
// state of its gRPC connections, kept honest by keepalive pings, so
// [dmutex.WithUnreachableAfter] works over it: a LockContext that waits
// for a peer whose process is gone returns [dmutex.ErrPeerUnreachable].
// It also implements [dmutex.Deliverer]: a Peer's machine steps for each
// message in the goroutine that read it from its sender's stream, one
// goroutine hand-off fewer than through Recv. It switches only when the
// Peer was given the *Transport itself: a wrapper that embeds a
// *Transport and declares its own Recv (middleware that inspects, filters
// or authorizes messages) keeps its Recv in use, although SetDeliver is
// promoted into its method set, since the promoted method sees that the
// peer's transport is the wrapper and refuses. A wrapper that wants push
// delivery declares SetDeliver and passes on its *Transport as self.
//
// # Wire
//
// internal/wirepb/wire.proto is the wire contract. Peer i opens one
// long-lived bidirectional stream to every other peer j: frames from i to
// j flow one way, acknowledgements the other. Frames carry sequence
// numbers, so messages from one peer to another arrive in the order sent,
// once each, across broken connections (see Transport). A stream opens
// with a hello that names the sender, the cluster size, the algorithm and
// its options (WithCluster) and the peer's fence floor (WithFenceFloor):
// peers that disagree (floors more than dmutex.MaxFloorSpread apart), or a
// restarted process of a peer that the receiver had heard from, or whose
// previous process answered the receiver's own stream, are refused with
// an error naming both sides, which Barrier and Err return;
// so is a sender's first stream to a restarted receiver, whose hello
// resumes past frames that the receiver's previous process acknowledged.
// Under Insecure a refused incoming hello alone proves nothing, so the
// receiver warns and goes on, and gives up only when the peer refuses the
// stream it dialed to that peer's address, or, for a restart, when that
// stream is answered by another process of the peer than the one it had
// heard from (see Err). A frame whose fencing
// token exceeds MaxFence is refused.
//
// # Security
//
// [New] requires [WithTLS] (mutual TLS) or, by name, [Insecure]. With TLS,
// peer i's certificate must carry the DNS name [PeerName](i), and allow
// both server and client authentication; New refuses a certificate that
// does not, or that does not chain to the given authority, with an error
// wrapping [ErrCertificate] that says which. A receiver refuses
// a stream whose sender claims an id its certificate does not name, or an
// id outside the membership, and a sender checks that it reached the peer
// it dialed. A frame that is malformed, oversized or inconsistent with
// its stream closes that stream with a logged error; the other streams,
// and the peer, keep working. A TLS handshake that fails is logged as a
// warning, with the reason, on both sides.
//
// # Logs
//
// A Transport logs through [log/slog], to slog.Default() unless
// [WithLogger] names another logger (or nil, for none). It is a quiet
// guest: it logs at warning level or above only what an operator must act
// on (a refused handshake or stream, a full queue, a transport that gives
// up), and at debug level what peers do in the ordinary course of things:
// links that break and reconnect, peers that hang up as they stop. A
// cluster that shuts down cleanly logs nothing at info level or above.
package grpctransport
