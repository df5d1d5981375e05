package grpctransport

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/dmutex/dmutex"
	"github.com/dmutex/dmutex/grpctransport/internal/wirepb"
)

// recvBuffer is the buffer of the channel Recv returns. A full buffer
// holds up the streams that feed it, which gRPC's flow control passes back
// to the senders' links; Send itself never waits.
const recvBuffer = 64

// windowSize is the fixed HTTP/2 flow-control window of every stream and
// connection, in bytes. A fixed window turns off gRPC's automatic sizing,
// whose bandwidth probes (a ping and its answer, then window updates)
// cost about as many writes as the messages themselves on a link that
// carries one small frame at a time. It holds several frames of the
// largest size.
const windowSize = 4 << 20

// gracePeriod bounds how long Close lets the server flush its last
// acknowledgements before it cuts the connections.
const gracePeriod = 2 * time.Second

// A Transport is one peer's dmutex.Transport over gRPC. Peer i opens one
// long-lived stream to every other peer j and sends all its messages for j
// on it, so messages from one peer to another arrive in the order sent.
//
// Delivery survives broken connections and restarted peers: every frame
// carries a sequence number, the receiver acknowledges what it delivered,
// and the sender keeps each frame until it is acknowledged. When a stream
// breaks, the sender reconnects with backoff and sends the unacknowledged
// frames again, in order; the receiver drops those it already delivered.
// So while both processes live, each message is delivered exactly once
// and in order, as Lamport's and Maekawa's algorithms need, and messages
// for a peer that is down wait, in order, until it is back; past the
// bound of WithMaxQueue, Send refuses more with ErrQueueFull. A peer that restarts has lost its protocol state, which none of
// the algorithms can recover from (a restarted token holder could create
// a second token): a transport that had heard from the peer's previous
// process, or whose own stream that process answered, refuses the new
// one's streams, before any of their frames is delivered, the new process
// refuses a stream that resumes past frames the previous one
// acknowledged, both give up (see Err; under Insecure, once the restart
// is proven), and it is up to the operator to restart the whole cluster.
//
// The zero Transport is not usable; New makes one. A Transport is safe for
// concurrent use. After Close, Send returns dmutex.ErrClosed, Barrier
// returns dmutex.ErrClosed, and the channel from Recv is closed.
type Transport struct {
	id, n int
	addrs []string
	opt   options
	log   *slog.Logger
	epoch uint64

	ackDelay time.Duration // see ackDelay

	recv chan dmutex.Message
	// How messages are delivered: on recv, or to the function that
	// SetDeliver set, which it can only do before any message went on
	// recv; see deliverer.
	modeMu   sync.Mutex
	toChan   atomic.Bool
	deliverF atomic.Pointer[func(dmutex.Message)]
	out      []*outbox // by receiver id; nil at id
	in       []*inlink // by sender id; nil at id

	srv    *grpc.Server
	health *health.Server // the standard health service; see health.go
	lis    *shakingListener

	handshakes handshakeLog // failed TLS handshakes; see handshake.go
	reach      reachState   // which peers answer; see reach.go

	bmu      sync.Mutex
	bchanged chan struct{} // closed and replaced when a barrier may have completed
	round    uint32        // rounds of Barrier started
	bwaiting atomic.Int32  // Barrier calls waiting for bchanged

	sent, delivered, resent, refused atomic.Uint64

	fmu   sync.Mutex
	fatal error // the first error that stopped the links for good; see Err

	// Under Insecure, the peer whose refusal of this transport's stream,
	// or whose restart seen on it, made it give up (-1 if none), and, per
	// sender, whether a hello of it was answered: Close waits a little for
	// that peer's hello, so that the refusal it gets proves the mismatch
	// (or the refused restart) to it too (see Err).
	refusedBy atomic.Int64
	answered  []atomic.Bool

	mu      sync.Mutex // guards closed and wg.Add against Close
	closed  bool
	done    chan struct{}   // closed when Close begins
	stopped chan struct{}   // closed when Close has finished
	ctx     context.Context // cancelled by Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

var _ dmutex.Deliverer = (*Transport)(nil)

// An outbox holds the frames for one receiver until it acknowledges them.
type outbox struct {
	to   int
	conn *grpc.ClientConn

	mu      sync.Mutex
	queue   []*wirepb.Frame // unacknowledged frames, by sequence number
	next    uint64          // sequence number of the next frame
	acked   uint64          // every frame up to acked was delivered
	sentMax uint64          // highest sequence number ever sent

	// The epoch of the peer's process that answered the last stream to
	// it, from the first Ack (0 until one carried it): what proves a
	// restart of the peer under Insecure, and with TLS too before the
	// peer's first stream to this transport (see Err). Written only by
	// the link's readAcks, one stream at a time.
	peerEpoch atomic.Uint64

	// The current stream, once its hello is out (else nil), the highest
	// sequence number sent on it, and whether a goroutine is sending on
	// it: the link's session, or Send writing directly (see enqueue).
	stream  wirepb.Link_ConnectClient
	sentSeq uint64
	writing bool

	wake chan struct{} // buffered 1: there are frames for the session to send
}

// directMax is the most unacknowledged frames an outbox may hold for Send
// to write a small frame itself rather than hand it to the link's
// goroutine. So few small frames cannot fill gRPC's per-stream write
// quota (64 KiB) or the flow-control window, so such a write never waits
// for the receiver.
const directMax = 64

// An inlink is what a receiver remembers of one sender.
type inlink struct {
	mu      sync.Mutex // held while delivering, so streams of one sender never interleave
	epoch   uint64     // sender's transport instance
	last    uint64     // sequence number of the last frame delivered
	barrier uint32     // highest barrier round received

	// Copies of epoch and last that this transport's frames to the same
	// peer carry as an acknowledgement, read without mu, which a delivery
	// can hold for long. epoch is set once, before last moves: a restarted
	// sender is refused.
	ackEpoch, ackLast atomic.Uint64
	carried           atomic.Uint64 // highest ackLast a frame has carried to the sender
}

// Stats counts what a transport did.
type Stats struct {
	Sent      uint64 // protocol messages accepted by Send
	Delivered uint64 // protocol messages received and handed to Recv (counted as they are handed over)
	Resent    uint64 // frames sent again on a new stream after a broken one
	Refused   uint64 // incoming streams closed for a bad identity, hello or frame
}

// New starts peer id's transport in a static cluster: addrs[i] is peer i's
// host:port, and the transport listens on addrs[id] (or on the listener
// given with WithListener). It connects to the other peers in the
// background; Send queues messages until a peer is reached. Either WithTLS
// or Insecure must be given. Bad arguments give an error wrapping
// dmutex.ErrInvalidConfig.
func New(id int, addrs []string, opts ...Option) (*Transport, error) {
	n := len(addrs)
	if n < 1 || n > dmutex.MaxPeers {
		return nil, fmt.Errorf("%w: %d addresses, want 1 to %d", dmutex.ErrInvalidConfig, n, dmutex.MaxPeers)
	}
	if id < 0 || id >= n {
		return nil, fmt.Errorf("%w: peer id %d out of range [0, %d)", dmutex.ErrInvalidConfig, id, n)
	}
	if err := distinctAddrs(addrs); err != nil {
		return nil, err
	}
	o := options{minBackoff: 50 * time.Millisecond, maxBackoff: 2 * time.Second, maxFrame: DefaultMaxFrameSize,
		keepalive: MinKeepalive, keepaliveTimeout: 5 * time.Second}
	for i, opt := range opts {
		if opt.apply == nil {
			return nil, fmt.Errorf("%w: option %d is the zero Option", dmutex.ErrInvalidConfig, i)
		}
		if err := opt.apply(&o); err != nil {
			return nil, err
		}
	}
	if o.insecure == (o.tls != nil) {
		if o.insecure {
			return nil, fmt.Errorf("%w: both Insecure and WithTLS given", dmutex.ErrInvalidConfig)
		}
		return nil, fmt.Errorf("%w: no transport credentials: give WithTLS, or Insecure by name", dmutex.ErrInvalidConfig)
	}
	if o.tls != nil && !o.noCertCheck {
		if err := checkCertificate(id, o.tls); err != nil {
			return nil, err
		}
	}
	switch {
	case !o.logSet:
		o.log = slog.Default()
	case o.log == nil:
		o.log = slog.New(slog.DiscardHandler)
	}
	lis := o.lis
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", addrs[id]); err != nil {
			return nil, fmt.Errorf("dmutex: listen: %w", err)
		}
	}

	var eb [8]byte
	_, _ = rand.Read(eb[:]) // never fails (crypto/rand)
	t := &Transport{
		id: id, n: n, addrs: slices.Clone(addrs), opt: o,
		log:      o.log.With("peer", id),
		epoch:    binary.LittleEndian.Uint64(eb[:]) | 1,
		ackDelay: ackDelay,
		recv:     make(chan dmutex.Message, recvBuffer),
		out:      make([]*outbox, n),
		in:       make([]*inlink, n),
		lis:      newShakingListener(lis),
		bchanged: make(chan struct{}),
		done:     make(chan struct{}),
		stopped:  make(chan struct{}),
		answered: make([]atomic.Bool, n),
	}
	t.refusedBy.Store(-1)
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.handshakes.log, t.handshakes.links = t.log, make([]linkTLS, n)

	// The caller's options come first, so that the transport's own win.
	t.srv = grpc.NewServer(append(slices.Clip(o.serverOpts),
		grpc.Creds(t.serverCreds()),
		// gRPC's own limit only keeps a huge frame out of memory; the codec
		// refuses anything above maxFrame with an error the handler logs.
		grpc.MaxRecvMsgSize(max(4*o.maxFrame, 1<<20)),
		grpc.ForceServerCodecV2(frameCodec{maxSize: o.maxFrame}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.StaticStreamWindowSize(windowSize),
		grpc.StaticConnWindowSize(windowSize),
	)...)
	wirepb.RegisterLinkServer(t.srv, linkServer{t: t})
	t.health = serveHealth(t.ctx, t.srv)
	for j := range n {
		if j == id {
			continue
		}
		t.in[j] = &inlink{}
		conn, err := grpc.NewClient(addrs[j], append(slices.Clip(o.dialOpts),
			grpc.WithTransportCredentials(t.clientCreds(j)),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: o.minBackoff, Multiplier: 1.6, Jitter: 0.2, MaxDelay: o.maxBackoff},
				MinConnectTimeout: time.Second,
			}),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: o.keepalive, Timeout: o.keepaliveTimeout, PermitWithoutStream: true}),
			grpc.WithStaticStreamWindowSize(windowSize),
			grpc.WithStaticConnWindowSize(windowSize),
		)...)
		if err != nil {
			t.closeConns()
			_ = lis.Close()
			return nil, fmt.Errorf("%w: peer %d at %q: %v", dmutex.ErrInvalidConfig, j, addrs[j], err)
		}
		t.out[j] = &outbox{to: j, conn: conn, next: 1, wake: make(chan struct{}, 1)}
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		if err := t.srv.Serve(t.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.log.Error("dmutex: grpctransport: serve", "err", err)
		}
	}()
	t.watchReach()
	for _, o := range t.out {
		if o != nil {
			t.wg.Add(1)
			go t.runLink(o)
			if !t.opt.insecure {
				t.wg.Add(1)
				go t.watchHandshakes(o)
			}
		}
	}
	return t, nil
}

func (t *Transport) serverCreds() credentials.TransportCredentials {
	if t.opt.insecure {
		return insecure.NewCredentials()
	}
	cfg := t.opt.tls.Clone()
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	if cfg.ClientCAs == nil {
		cfg.ClientCAs = cfg.RootCAs
	}
	return refusalCreds{credentials.NewTLS(cfg), t}
}

func (t *Transport) clientCreds(to int) credentials.TransportCredentials {
	if t.opt.insecure {
		return insecure.NewCredentials()
	}
	cfg := t.opt.tls.Clone()
	cfg.ServerName = PeerName(to) // the peer we reach must prove it is peer to
	return clientTLS{credentials.NewTLS(cfg), &t.handshakes.links[to]}
}

// ID returns the transport's peer id.
func (t *Transport) ID() int { return t.id }

// Addr returns the address the transport listens on.
func (t *Transport) Addr() net.Addr { return t.lis.Addr() }

// Send queues m for peer to and returns at once; it never waits for the
// network or the receiver. m must be from this peer and to peer to, with a
// valid kind and a token no larger than the cluster: a message the
// receiver would refuse is refused here, so it never blocks the link.
func (t *Transport) Send(to int, m dmutex.Message) error {
	if to < 0 || to >= t.n || to == t.id {
		return fmt.Errorf("dmutex: send from peer %d to peer %d of [0, %d)", t.id, to, t.n)
	}
	f := newMsgFrame(m)
	if _, err := fromWire(f.Msg, t.id, to, t.n); err != nil {
		return fmt.Errorf("dmutex: send from peer %d to peer %d: %w", t.id, to, err)
	}
	if err := t.enqueue(t.out[to], f); err != nil {
		return err
	}
	t.sent.Add(1)
	return nil
}

// enqueue gives f the next sequence number of o and queues it. If the
// link is up and idle, nothing else waits and f is small, it writes f on
// the stream itself, which saves waking the link's goroutine; otherwise
// it wakes the link to send it.
func (t *Transport) enqueue(o *outbox, f *wirepb.Frame) error {
	o.mu.Lock()
	if t.isClosed() {
		o.mu.Unlock()
		return dmutex.ErrClosed
	}
	if q := len(o.queue); q >= t.maxQueue() {
		o.mu.Unlock()
		return t.queueFull(o, q)
	}
	f.Seq = o.next
	o.next++
	o.queue = append(o.queue, f)
	s := o.stream
	direct := s != nil && !o.writing && o.sentSeq+1 == f.Seq && f.GetMsg().GetToken() == nil && len(o.queue) <= directMax
	if direct {
		o.writing = true
	}
	o.mu.Unlock()
	if !direct {
		o.kick()
		return nil
	}
	in := t.in[o.to]
	t.carryAck(in, f)
	ack := f.Ack // once writing is off, the link may resend f and change it
	err := s.Send(f)
	o.mu.Lock()
	o.writing = false
	if err == nil && o.stream == s {
		o.sentSeq = f.Seq
		o.sentMax = max(o.sentMax, f.Seq)
	}
	pending := err != nil || o.sentSeq+1 < o.next
	o.mu.Unlock()
	if err == nil && ack != 0 {
		atomicMax(&in.carried, ack)
	}
	if pending {
		o.kick() // frames queued meanwhile, or a broken stream to resend f on
	}
	return nil
}

// kick wakes o's link goroutine.
func (o *outbox) kick() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// carryAck sets f to acknowledge, on the way, what the peer it goes to
// sent this transport, so that its receiver need not send a separate Ack.
func (t *Transport) carryAck(in *inlink, f *wirepb.Frame) {
	if ackEpoch, ackLast := in.ackEpoch.Load(), in.ackLast.Load(); ackEpoch != 0 && ackLast != 0 {
		f.AckEpoch, f.Ack = ackEpoch, ackLast
	}
}

// Recv returns the channel of messages for this peer. It is closed after
// Close.
func (t *Transport) Recv() <-chan dmutex.Message { return t.recv }

// SetDeliver makes the transport call f for each message, from the
// goroutine that read it from its sender's stream, instead of sending it
// on Recv (see dmutex.Deliverer); a dmutex.Peer calls it when it starts,
// with self the transport it was given. It reports false, and changes
// nothing, if self is not t (a wrapper that embeds a *Transport passes
// itself, so its own Recv stays in use: see dmutex.Deliverer), if a
// message already went on Recv, or if SetDeliver succeeded before.
func (t *Transport) SetDeliver(self dmutex.Transport, f func(dmutex.Message)) bool {
	if s, ok := self.(*Transport); !ok || s != t {
		return false
	}
	t.modeMu.Lock()
	defer t.modeMu.Unlock()
	if t.toChan.Load() || t.deliverF.Load() != nil {
		return false
	}
	t.deliverF.Store(&f)
	return true
}

// deliverer returns the function SetDeliver set, or nil if messages go
// on Recv, which is then settled for good.
func (t *Transport) deliverer() func(dmutex.Message) {
	if f := t.deliverF.Load(); f != nil {
		return *f
	}
	if t.toChan.Load() {
		return nil
	}
	t.modeMu.Lock()
	defer t.modeMu.Unlock()
	if f := t.deliverF.Load(); f != nil {
		return *f
	}
	t.toChan.Store(true)
	return nil
}

// Stats returns the transport's counts so far.
func (t *Transport) Stats() Stats {
	return Stats{Sent: t.sent.Load(), Delivered: t.delivered.Load(), Resent: t.resent.Load(), Refused: t.refused.Load()}
}

func (t *Transport) isClosed() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// Close stops the transport: it drops the messages not yet delivered,
// closes every stream, connection and the listener, and returns after all
// its goroutines have exited. Whatever remote parties do, it takes at most
// about two seconds, the time it gives the last acknowledgements to
// flush. Every call, including one made while another is closing, waits
// for the same end and returns nil.
func (t *Transport) Close() error {
	t.linger()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		<-t.stopped
		return nil
	}
	t.closed = true
	t.health.Shutdown() // NOT_SERVING, before Watch streams end with ctx
	close(t.done)
	t.cancel()
	t.mu.Unlock()

	// gRPC's Stop and GracefulStop wait for the handshakes in progress; a
	// client that connected and sends nothing must not hold Close up.
	t.lis.cutHandshakes()
	// The stream handlers return at done, after the acknowledgements they
	// already sent; GracefulStop flushes those before closing the
	// connections, so a peer waiting in Barrier for one gets it.
	stopped := make(chan struct{})
	go func() { t.srv.GracefulStop(); close(stopped) }()
	timer := time.NewTimer(gracePeriod)
	select {
	case <-stopped:
	case <-timer.C:
		t.srv.Stop()
		<-stopped
	}
	timer.Stop()
	t.closeConns()
	t.wg.Wait()
	close(t.recv)
	close(t.stopped)
	return nil
}

// lingerMax bounds how long Close waits in linger.
const lingerMax = time.Second

// linger waits, under Insecure, when a peer's refusal of this transport's
// stream made it give up, until this transport has answered a stream of
// that peer (refusing it, if the two disagree), or for lingerMax: that
// peer needs the refusal of its own stream to give up (see Err).
func (t *Transport) linger() {
	j := t.refusedBy.Load()
	if !t.opt.insecure || j < 0 || t.isClosed() {
		return
	}
	for deadline := time.Now().Add(lingerMax); !t.answered[j].Load() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}

// FenceFloor returns the floor given with WithFenceFloor, 0 without it:
// dmutex.NewPeer checks that it is the peer's own.
func (t *Transport) FenceFloor() uint64 { return t.opt.floor }

func (t *Transport) closeConns() {
	for _, o := range t.out {
		if o != nil {
			_ = o.conn.Close()
		}
	}
}

// track counts a goroutine that starts after New, unless Close has begun.
func (t *Transport) track() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	return true
}

// runLink keeps a stream to o's peer open and feeds it o's frames, until
// Close.
func (t *Transport) runLink(o *outbox) {
	defer t.wg.Done()
	delay := t.opt.minBackoff
	for {
		start := time.Now()
		err := t.session(o)
		if t.ctx.Err() != nil {
			return
		}
		if restarted := t.restartRefusal(o, err); restarted != nil {
			// This side's own stream to peer o.to's address was answered
			// by a new process of it, or refused by one that found that
			// an earlier process had acknowledged this side's frames:
			// proof of the restart, even under Insecure. Its streams to
			// this side are refused from now on, so it gives up too; see
			// linger.
			t.refusedBy.CompareAndSwap(-1, int64(o.to))
			t.refusedRestart(o.to)
			t.fail(restarted)
			return
		}
		if status.Code(err) == codes.FailedPrecondition {
			// The peer refused this cluster's configuration or this
			// process: trying again cannot help.
			// This side dialed peer o.to's own address and was answered
			// there, so the refusal speaks for that peer even under
			// Insecure: give up.
			t.refusedBy.CompareAndSwap(-1, int64(o.to))
			t.fail(fmt.Errorf("dmutex: peer %d refused peer %d: %s", o.to, t.id, strings.TrimPrefix(status.Convert(err).Message(), "dmutex: ")))
			return
		}
		// Debug only: peers stop and restart, and a cluster that shuts
		// down breaks every link. What an operator must act on (a
		// refused handshake, a refused stream) is logged where it is
		// found, at warning level or above.
		t.log.Debug("dmutex: grpctransport: link broken, reconnecting", "to", o.to, "err", err)
		if time.Since(start) > 4*t.opt.maxBackoff {
			delay = t.opt.minBackoff // it had been working a while
		}
		timer := time.NewTimer(jitter(delay))
		select {
		case <-timer.C:
		case <-t.ctx.Done():
			timer.Stop()
			return
		}
		delay = min(2*delay, t.opt.maxBackoff)
	}
}

// jitter returns a random duration between d/2 and d.
func jitter(d time.Duration) time.Duration {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return d/2 + time.Duration(binary.LittleEndian.Uint64(b[:])%uint64(d/2+1))
}

// session runs one stream to o's peer until it breaks or Close.
func (t *Transport) session(o *outbox) (err error) {
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	stream, err := wirepb.NewLinkClient(o.conn).Connect(ctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	o.mu.Lock()
	first := o.acked    // frames after this one go out on this stream
	resend := o.sentMax // frames up to this one went out on an earlier stream
	o.mu.Unlock()
	hello := &wirepb.Frame{Hello: &wirepb.Hello{
		From: uint32(t.id), To: uint32(o.to), N: uint32(t.n), Epoch: t.epoch, FirstSeq: first + 1,
		Algorithm: t.opt.alg, Options: t.opt.algOptions, FenceFloor: t.opt.floor,
	}}
	if err := stream.Send(hello); err != nil {
		if errors.Is(err, io.EOF) {
			_, err = stream.Recv() // the stream ended: Recv says why
		}
		return err
	}
	acks := make(chan error, 1)
	go func() { acks <- t.readAcks(stream, o) }()
	o.mu.Lock()
	o.stream, o.sentSeq = stream, first
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		if o.stream == stream {
			o.stream = nil // no more direct writes on it
		}
		o.mu.Unlock()
		if errors.Is(err, io.EOF) {
			// Send found the stream ended, perhaps refused: readAcks gets
			// the reason from Recv, unless a cancel comes first. A peer
			// that refused this one may exit right after, so this may be
			// the only chance to learn why.
			if e := <-acks; e != nil {
				err = e
			}
			acks <- nil
		}
		cancel()
		if e := <-acks; err == nil {
			err = e
		}
	}()

	in := t.in[o.to]
	var batch []*wirepb.Frame
	for {
		o.mu.Lock()
		// The receiver may acknowledge frames this stream has not sent
		// yet, when an earlier stream delivered them and its
		// acknowledgement was lost.
		o.sentSeq = max(o.sentSeq, o.acked)
		batch = batch[:0]
		if !o.writing { // else Send is writing, and kicks when it is done
			batch = append(batch, o.queue[o.sentSeq-o.acked:]...)
			o.writing = len(batch) > 0
		}
		o.mu.Unlock()
		for i, f := range batch {
			t.carryAck(in, f)
			if err := stream.Send(f); err != nil {
				o.mu.Lock()
				o.writing = false
				o.mu.Unlock()
				clear(batch)
				return err
			}
			if f.Ack != 0 {
				atomicMax(&in.carried, f.Ack)
			}
			if f.Seq <= resend {
				t.resent.Add(1)
			}
			o.mu.Lock()
			o.sentSeq = f.Seq
			o.sentMax = max(o.sentMax, f.Seq)
			o.mu.Unlock()
			batch[i] = nil
		}
		if len(batch) > 0 {
			o.mu.Lock()
			o.writing = false
			o.mu.Unlock()
			continue
		}
		select {
		case <-o.wake:
		case err := <-acks:
			acks <- err // for the deferred wait
			if err == nil {
				err = io.EOF
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// readAcks applies the receiver's acknowledgements to o until the stream
// ends.
func (t *Transport) readAcks(stream wirepb.Link_ConnectClient, o *outbox) error {
	for {
		a, err := stream.Recv()
		if err != nil {
			if c := status.Code(err); c == codes.PermissionDenied || c == codes.InvalidArgument || c == codes.FailedPrecondition {
				t.log.Error("dmutex: grpctransport: peer refused the stream", "to", o.to, "err", err)
			}
			return err
		}
		if e := a.GetEpoch(); e != 0 {
			if err := t.peerProcess(o, e); err != nil {
				return err
			}
		}
		if err := t.applyAck(o, a.GetSeq()); err != nil {
			return err
		}
	}
}

// A restartError says that a peer restarted while this transport had heard
// from its previous process.
type restartError struct{ from, to int }

func (e *restartError) Error() string {
	return fmt.Sprintf("dmutex: peer %d restarted (its transport is a new process) while peer %d had heard from its previous process: "+
		"a restarted peer has lost its protocol state and cannot rejoin; restart the whole cluster", e.from, e.to)
}

// refuseUnproven refuses, under Insecure, a stream from peer from whose
// hello claims something that would make this transport give up (what,
// and err) but that nothing proves: refused so that an honest sender
// gives up, warned about and counted, and the transport goes on. See Err.
func (t *Transport) refuseUnproven(from int, what string, err error) error {
	t.refused.Add(1)
	t.log.Warn("dmutex: grpctransport: stream refused, its hello "+what+"; "+
		"not giving up, since nothing proves who sent it (Insecure)", "from", from, "err", err)
	return status.Error(codes.FailedPrecondition, err.Error())
}

// restartRefusal returns the restartError that err, which ended a stream
// of this transport to o's peer, carries, or nil: one that peerProcess
// returned, or the refusal of a peer that found itself to be a restart
// (a new process, which the stream's hello told that an earlier process
// had acknowledged frames).
func (t *Transport) restartRefusal(o *outbox, err error) *restartError {
	if restarted := (*restartError)(nil); errors.As(err, &restarted) {
		return restarted
	}
	restarted := &restartError{from: o.to, to: t.id}
	if s := status.Convert(err); s.Code() == codes.FailedPrecondition && s.Message() == restarted.Error() {
		return restarted
	}
	return nil
}

// peerProcess records that the process of o's peer that answered this
// transport's stream, at the address configured for it, has epoch e, and
// returns a restartError if an earlier stream was answered by another
// process of it, or if this transport received from another process of it.
func (t *Transport) peerProcess(o *outbox, e uint64) error {
	prev := o.peerEpoch.Load()
	if cur := t.in[o.to].ackEpoch.Load(); (prev != 0 && e != prev) || (cur != 0 && e != cur) {
		return &restartError{from: o.to, to: t.id} // keep the old epoch, so a next stream finds it again
	}
	o.peerEpoch.Store(e)
	return nil
}

// applyAck lets o forget the frames up to seq, which its peer delivered.
// An acknowledgement of what was already acknowledged changes nothing;
// one of a frame not yet queued is an error.
func (t *Transport) applyAck(o *outbox, seq uint64) error {
	o.mu.Lock()
	if seq >= o.next {
		o.mu.Unlock()
		return fmt.Errorf("dmutex: peer %d acknowledged frame %d, but only %d were queued", o.to, seq, o.next-1)
	}
	if seq <= o.acked {
		o.mu.Unlock()
		return nil
	}
	// Move the rest to the front, so that the queue's array is reused
	// rather than re-grown as frames come and go.
	k := int(seq - o.acked)
	rest := copy(o.queue, o.queue[k:])
	clear(o.queue[rest:])
	o.queue = o.queue[:rest]
	o.acked = seq
	o.mu.Unlock()
	t.changed()
	return nil
}

// changed wakes Barrier callers to check again.
func (t *Transport) changed() {
	if t.bwaiting.Load() == 0 {
		return // a Barrier that starts waiting checks before it waits
	}
	t.bmu.Lock()
	close(t.bchanged)
	t.bchanged = make(chan struct{})
	t.bmu.Unlock()
}

// fail records err as the reason the transport cannot work, unless one is
// recorded already, and wakes Barrier callers.
func (t *Transport) fail(err error) {
	t.fmu.Lock()
	first := t.fatal == nil
	if first {
		t.fatal = err
	}
	t.fmu.Unlock()
	if first {
		t.log.Error("dmutex: grpctransport: giving up", "err", err)
		t.changed()
	}
}

// Err returns the error that made the transport give up on the cluster, or
// nil. A transport gives up when a stream is refused, in either direction,
// because the two peers disagree on the cluster (size, algorithm and
// options given with WithCluster, or fence floors more than
// dmutex.MaxFloorSpread apart, WithFenceFloor), because the sender is
// a restarted process of a peer this transport had heard from before, or
// whose previous process answered this transport's stream (the epoch in
// the acknowledgement of the hello), or because the receiver is one: the
// answer to this transport's stream names another process of the peer
// than an earlier answer did, or a first stream of a sender process that
// resumes past frame 1 says that another process of the receiver
// acknowledged the frames before, so the receiver refuses it before it
// delivers anything, and the sender, refused so, gives up on the restart
// as if it had found it itself. The error names both sides. The transport
// keeps running, but the cluster cannot work until it is restarted with
// one configuration.
//
// Under Insecure, nothing proves who opened an incoming stream, so a
// stream whose hello claims another cluster is refused, logged at
// warning level and counted in Stats.Refused, and the transport goes on:
// one forged hello cannot stop a cluster. The mismatch is final only from
// a refusal of this transport's own stream to the peer, dialed at the
// address configured for it, which speaks for that peer: two honest
// peers that disagree each refuse the other's stream, and so both give
// up. Likewise a stream whose hello claims a restart of its sender (a new
// epoch) is refused, warned about and counted, and the transport goes on
// serving the process it knows; the restart is final once this
// transport's own stream to the peer's address is answered by another
// process of it (the epoch in the hello's acknowledgement), and a
// restarted peer, refused, gives up as above. A hello that resumes past
// frames this process never received is refused, warned about and
// counted too, and the transport goes on; an honest sender gives up at
// the refusal, and this restarted process at the refusal of its own
// stream. A first hello of a peer whose epoch differs from that of the process that answered this
// transport's stream is refused so too; one that comes before either the
// real peer's first hello or the answer to this side's stream is
// believed, as any frame is under Insecure. A transport that gave up so waits in Close, for up
// to a second, until it has answered the other peer's stream in turn, so
// that a peer that exits at once still lets the other one know. With TLS, the
// certificate proves the sender, and a refused incoming stream is final
// too; so is a restart seen on this transport's own stream, whose answer
// the peer's server certificate proves: a new process answering it, or a
// first hello of another process than the one that answered, makes the
// transport give up at once, even if it never heard from the peer's
// previous process.
func (t *Transport) Err() error {
	t.fmu.Lock()
	defer t.fmu.Unlock()
	return t.fatal
}

// Barrier waits until every peer of the cluster has called Barrier as many
// times as this one, and every peer has received this peer's marker. It
// sends a marker to every other peer on the same streams as the
// messages, so a marker arrives after every message its sender sent
// before it. It returns the transport's Err as soon as there is one.
// Tools that run a fixed workload use it to start together
// (the first Barrier also waits until every peer is reachable) and to
// stay up, serving the others, until everyone is done. Barrier markers
// never appear on Recv. Calls must not overlap.
func (t *Transport) Barrier(ctx context.Context) error {
	t.bmu.Lock()
	t.round++
	r := t.round
	t.bmu.Unlock()
	marks := make([]uint64, t.n)
	for j, o := range t.out {
		if o == nil {
			continue
		}
		f := &wirepb.Frame{Barrier: r}
		if err := t.enqueue(o, f); err != nil {
			return err
		}
		marks[j] = f.Seq
	}
	t.bwaiting.Add(1)
	defer t.bwaiting.Add(-1)
	for {
		t.bmu.Lock()
		ch := t.bchanged
		t.bmu.Unlock()
		if err := t.Err(); err != nil {
			return err
		}
		if t.barrierDone(r, marks) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.done:
			return dmutex.ErrClosed
		}
	}
}

func (t *Transport) barrierDone(r uint32, marks []uint64) bool {
	for j := range t.n {
		if j == t.id {
			continue
		}
		o, in := t.out[j], t.in[j]
		o.mu.Lock()
		acked := o.acked >= marks[j]
		o.mu.Unlock()
		in.mu.Lock()
		seen := in.barrier >= r
		in.mu.Unlock()
		if !acked || !seen {
			return false
		}
	}
	return true
}

// linkServer receives the streams other peers open to this one.
type linkServer struct {
	wirepb.UnimplementedLinkServer
	t *Transport
}

// errStop ends a stream handler when the transport closes.
var errStop = errors.New("dmutex: transport closed")

// ackDelay is how long a receiver may sit on an acknowledgement of
// protocol messages before it sends a separate Ack. Acknowledgements only
// let the sender forget frames, so nothing waits for them but memory and
// Barrier, whose markers are acknowledged at once. Most acknowledgements
// travel on the frames the other way within that time (a reply carries
// the acknowledgement of its request, the next request that of the
// reply), which saves a write per message.
var ackDelay = 10 * time.Millisecond // a variable for tests; New copies it

// An inStream is the receiving end of one stream from another peer. Its
// reader goroutine receives, checks and delivers the frames; the stream
// handler's goroutine sends the acknowledgements, since Recv cannot be
// interrupted and the handler must be able to return at Close.
type inStream struct {
	t      *Transport
	stream wirepb.Link_ConnectServer
	from   int    // -1 until the hello is accepted; set by the reader before it first signals the handler
	epoch  uint64 // the sender's epoch, from the hello

	last  atomic.Uint64 // highest sequence number delivered on this stream
	armed atomic.Bool   // an acknowledgement of last is due within ackDelay
	kick  chan struct{} // buffered 1: armed became true
	now   chan struct{} // acknowledge at once: the hello or a barrier marker
	end   chan error    // buffered 1: the reader's result
	fatal error         // set by the reader before end when it refused the stream for good
}

// Connect serves one stream from another peer.
func (s linkServer) Connect(stream wirepb.Link_ConnectServer) error {
	t := s.t
	if !t.track() {
		return status.Error(codes.Unavailable, "dmutex: transport closed")
	}
	defer t.wg.Done()
	is := &inStream{t: t, stream: stream, from: -1,
		kick: make(chan struct{}, 1), now: make(chan struct{}), end: make(chan error, 1)}
	t.wg.Add(1) // the handler's own count keeps wg above zero here
	go func() {
		defer t.wg.Done()
		is.end <- is.read()
	}()
	return is.acknowledge()
}

// acknowledge sends the stream's acknowledgements until the reader ends
// or the transport closes, and returns the handler's result.
func (is *inStream) acknowledge() error {
	t := is.t
	var sent uint64 // highest sequence number acknowledged
	acked := false  // whether any acknowledgement went out
	ack := func(force bool) error {
		last := is.last.Load()
		if acked && !force && (last <= sent || last <= is.carried()) {
			return nil // acknowledged already, here or on a frame the other way
		}
		a := &wirepb.Ack{Seq: last}
		if !acked {
			a.Epoch = t.epoch // the hello's acknowledgement: see peerProcess
		}
		sent, acked = last, true
		return is.stream.Send(a)
	}
	timer := time.NewTimer(t.ackDelay)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-is.kick:
			timer.Reset(t.ackDelay)
		case <-timer.C:
			is.armed.Store(false) // before reading last: a later delivery arms again
			if err := ack(false); err != nil {
				return t.streamEnd(is.from, err)
			}
		case <-is.now:
			if err := ack(true); err != nil {
				return t.streamEnd(is.from, err)
			}
		case err := <-is.end:
			if is.from >= 0 {
				// The hello was read, and refused or answered: a refusal
				// goes out as this handler returns, and Close waits for
				// handlers. See linger.
				t.answered[is.from].Store(true)
			}
			if is.fatal != nil {
				// Give up only now: a Barrier that returns at this and
				// closes the transport must not cut the refusal off.
				t.fail(is.fatal)
				return err
			}
			if t.isClosed() {
				// The reader saw Close first: flush as below.
				is.flush(ack, acked)
			}
			return err
		case <-t.done:
			is.flush(ack, acked)
			return nil
		}
	}
}

// flush sends, at Close, the acknowledgement of what was delivered, so
// the sender can forget it, and so that a sender in Barrier gets the
// acknowledgement of its marker: this side may have recorded the marker
// and passed its own Barrier before the handler acknowledged it, and an
// acknowledgement carried on a frame the other way may be cut off by the
// close.
func (is *inStream) flush(ack func(force bool) error, acked bool) {
	if acked { // the hello was acknowledged: the stream was accepted
		_ = ack(true)
	}
}

// carried returns the highest sequence number of this stream's sender
// that frames the other way have acknowledged.
func (is *inStream) carried() uint64 {
	in := is.t.in[is.from]
	if in.ackEpoch.Load() != is.epoch {
		return 0
	}
	return in.carried.Load()
}

// atomicMax raises a to v if v is larger.
func atomicMax(a *atomic.Uint64, v uint64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// ackNow asks the handler to acknowledge at once: the hello, so the sender
// learns where the stream resumes, and barrier markers, which a Barrier
// waits for. It reports false if the stream or the transport ended.
func (is *inStream) ackNow() bool {
	select {
	case is.now <- struct{}{}:
		return true
	case <-is.stream.Context().Done():
	case <-is.t.done:
	}
	return false
}

// read receives the stream's hello and frames, checks them and delivers
// the messages, until the stream ends, a frame is refused, or the
// transport closes. It returns the handler's result.
func (is *inStream) read() error {
	t := is.t
	refuse := func(code codes.Code, err error) error {
		t.refused.Add(1)
		t.log.Error("dmutex: grpctransport: stream refused", "from", is.from, "err", err)
		return status.Error(code, err.Error())
	}
	f, err := is.stream.Recv()
	if err != nil {
		return t.streamEnd(is.from, err)
	}
	from, err := checkHello(f, t.id, t.n)
	if err != nil {
		return refuse(codes.InvalidArgument, err)
	}
	if err := t.authorize(is.stream.Context(), from); err != nil {
		return refuse(codes.PermissionDenied, err)
	}
	in := t.in[from]
	h := f.GetHello()
	epoch := h.GetEpoch()
	is.from, is.epoch = from, epoch
	if err := t.sameCluster(h); err != nil {
		if t.opt.insecure {
			// Unproven: refuse it, so that an honest sender gives up,
			// but go on; see Err.
			return t.refuseUnproven(from, "claims another cluster", err)
		}
		is.fatal = err
		return refuse(codes.FailedPrecondition, err)
	}
	in.mu.Lock()
	known := in.epoch
	if known == 0 {
		// This side's own stream to the peer's address may have been
		// answered already: a first hello of another process is a
		// restart of that one (with TLS, whose certificates prove who
		// answered and who sends) or a forgery (under Insecure).
		known = t.out[from].peerEpoch.Load()
	}
	if known != 0 && epoch != known {
		in.mu.Unlock()
		// Until dmutex can take a peer back after a crash, a restarted
		// peer must not rejoin: it has forgotten its requests, grants
		// and tokens, and a token holder could create a second token.
		err := &restartError{from: from, to: t.id}
		if t.opt.insecure && !t.isGone(from) {
			// Unproven: refuse it, so that an honest restarted sender
			// gives up, but go on serving the process this transport
			// knows; the restart is final once this transport's own
			// stream to the peer sees it (peerProcess). See Err.
			return t.refuseUnproven(from, "claims a restart of its sender", err)
		}
		is.fatal = err
		t.refusedRestart(from)
		return refuse(codes.FailedPrecondition, err)
	}
	if epoch != in.epoch && h.GetFirstSeq() > 1 {
		in.mu.Unlock()
		// The first stream of this sender process that this process
		// sees resumes past frames it never received: a sender moves its
		// first frame only at an acknowledgement, so another process of
		// this peer acknowledged them, and this one is a restart that
		// the sender does not know of yet. What the sender meant for the
		// previous process (a reply to its request, a token) must not
		// reach this one; the refusal names the restart, so that the
		// sender gives up on this peer (see restartRefusal).
		err := &restartError{from: t.id, to: from}
		if t.opt.insecure {
			// Unproven: refuse it, so that an honest sender gives up,
			// but go on; this process gives up once its own stream to
			// the sender's address is refused. See Err.
			return t.refuseUnproven(from, "resumes past frames this process never received (a restart of this process)", err)
		}
		is.fatal = err
		return refuse(codes.FailedPrecondition, err)
	}
	if epoch != in.epoch {
		// The first stream of this sender process: it starts at frame 1.
		in.epoch, in.last, in.barrier = epoch, h.GetFirstSeq()-1, 0
		in.ackEpoch.Store(epoch)
		in.ackLast.Store(in.last)
	} else if h.GetFirstSeq() > in.last+1 {
		in.mu.Unlock()
		return refuse(codes.InvalidArgument, fmt.Errorf("%w: stream resumes at frame %d, but frame %d is missing", errFrame, h.GetFirstSeq(), in.last+1))
	}
	is.last.Store(in.last)
	in.mu.Unlock()
	if !is.ackNow() {
		return nil
	}
	t.answered[from].Store(true)

	f = new(wirepb.Frame) // reused: each frame is decoded into it and copied out
	var deliver func(dmutex.Message)
	settled := false // whether deliver is what it will stay
	for {
		if err := is.stream.RecvMsg(f); err != nil {
			return t.streamEnd(from, err)
		}
		m, isMsg, err := checkBody(f, from, t.id, t.n)
		if err != nil {
			return refuse(codes.InvalidArgument, err)
		}
		if f.GetAckEpoch() == t.epoch && f.GetAck() != 0 {
			if err := t.applyAck(t.out[from], f.GetAck()); err != nil {
				return refuse(codes.InvalidArgument, fmt.Errorf("%w: %v", errFrame, err))
			}
		}
		seq := f.GetSeq()
		in.mu.Lock()
		if in.epoch != epoch {
			in.mu.Unlock() // a newer process of the same peer took over
			return refuse(codes.Aborted, fmt.Errorf("stream of an older process of peer %d", from))
		}
		switch {
		case seq <= in.last:
			in.mu.Unlock() // delivered on an earlier stream
			continue
		case seq > in.last+1:
			in.mu.Unlock()
			return refuse(codes.InvalidArgument, fmt.Errorf("%w: frame %d after frame %d", errFrame, seq, in.last))
		}
		if isMsg && !settled {
			// Under in.mu: a message that went on Recv is the first of
			// its sender, or comes after the others of its sender there.
			deliver = t.deliverer()
			settled = true
		}
		switch {
		case isMsg && deliver != nil:
			// Acknowledged before it is stepped, so that the reply
			// the peer may send from deliver carries the acknowledgement.
			in.last = seq
			in.ackLast.Store(seq)
			t.delivered.Add(1)
			deliver(m)
		case isMsg:
			// Count before handing over: a reader that has taken k
			// messages from Recv must see Delivered >= k.
			t.delivered.Add(1)
			select {
			case t.recv <- m:
			case <-t.done:
				t.delivered.Add(^uint64(0)) // not delivered after all
				in.mu.Unlock()
				return nil
			}
		}
		in.last = seq
		if !isMsg {
			// Record the marker before anything can acknowledge it: the
			// acknowledgement may ride on a frame the other way (carryAck
			// reads ackLast), and its sender may then pass its Barrier
			// and close, ending this stream before the handler could.
			in.barrier = max(in.barrier, f.GetBarrier())
		}
		in.ackLast.Store(seq)
		in.mu.Unlock()
		is.last.Store(seq)
		if !isMsg {
			t.changed()
			if !is.ackNow() {
				return nil
			}
			continue
		}
		if !is.armed.Swap(true) {
			select {
			case is.kick <- struct{}{}:
			default:
			}
		}
	}
}

// sameCluster checks that the sender of hello h runs the same cluster as
// this transport, and names both sides if not.
func (t *Transport) sameCluster(h *wirepb.Hello) error {
	if int64(h.GetN()) == int64(t.n) && h.GetAlgorithm() == t.opt.alg && h.GetOptions() == t.opt.algOptions {
		if err := dmutex.FloorsApart(int(h.GetFrom()), h.GetFenceFloor(), t.id, t.opt.floor); err != nil {
			return fmt.Errorf("dmutex: cluster mismatch: %s", strings.TrimPrefix(err.Error(), dmutex.ErrInvalidConfig.Error()+": "))
		}
		return nil
	}
	return fmt.Errorf("dmutex: cluster mismatch: peer %d runs %s, peer %d runs %s",
		h.GetFrom(), describeCluster(h.GetAlgorithm(), h.GetOptions(), int64(h.GetN())),
		t.id, describeCluster(t.opt.alg, t.opt.algOptions, int64(t.n)))
}

func describeCluster(alg, opts string, n int64) string {
	if alg == "" {
		alg = "an unnamed algorithm"
	}
	if opts == "" {
		return fmt.Sprintf("%s with n=%d and no options", alg, n)
	}
	return fmt.Sprintf("%s with n=%d and options %q", alg, n, opts)
}

// streamEnd logs why a stream from peer from ended, unless it ended
// normally, and returns the handler's result.
func (t *Transport) streamEnd(from int, err error) error {
	switch {
	case errors.Is(err, errStop):
		return nil
	case errors.Is(err, io.EOF), status.Code(err) == codes.Canceled, errors.Is(err, context.Canceled):
		t.log.Debug("dmutex: grpctransport: stream ended", "from", from, "err", err)
		return nil
	case status.Code(err) == codes.Unavailable, truncated(err):
		t.log.Debug("dmutex: grpctransport: stream broken", "from", from, "err", err)
		return err
	}
	// Malformed or oversized frames end up here: gRPC refuses them before
	// the handler sees them.
	t.refused.Add(1)
	t.log.Error("dmutex: grpctransport: stream closed", "from", from, "err", err)
	return err
}

// truncated reports whether err says that a stream ended in the middle
// of a frame: its connection broke, or its sender cancelled it, after
// part of the frame had come. gRPC (since 1.84) reports that as Internal
// "unexpected EOF" rather than as the cancellation or the broken
// connection it was; a frame that came whole but does not decode is
// Internal too, with another message, and is refused.
func truncated(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Internal && s.Message() == io.ErrUnexpectedEOF.Error()
}

// authorize checks that the stream's authenticated identity is peer from.
func (t *Transport) authorize(ctx context.Context, from int) error {
	if t.opt.insecure {
		return nil // nothing to check against: Insecure believes the hello
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return errors.New("dmutex: no peer information on the stream")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.PeerCertificates) == 0 {
		return errors.New("dmutex: stream without a verified client certificate")
	}
	cert := info.State.PeerCertificates[0]
	if !slices.Contains(cert.DNSNames, PeerName(from)) {
		return fmt.Errorf("dmutex: stream claims to be from peer %d, but its certificate names %v", from, cert.DNSNames)
	}
	return nil
}
