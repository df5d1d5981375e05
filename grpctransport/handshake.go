package grpctransport

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// warnEvery is how often a failed handshake that keeps failing for the
// same reason is logged again at warning level; the links retry with
// backoff, at most WithBackoff's max apart, and are not logged every time.
const warnEvery = 30 * time.Second

// handshakeLog logs failed TLS handshakes at warning level, each distinct
// reason once per warnEvery.
type handshakeLog struct {
	log   *slog.Logger
	links []linkTLS // by peer id: what this peer's dialing side saw

	mu   sync.Mutex
	last map[string]time.Time // by side, peer and reason
}

func (h *handshakeLog) warn(key, msg string, args ...any) {
	now := time.Now()
	h.mu.Lock()
	if h.last == nil {
		h.last = make(map[string]time.Time)
	}
	t, seen := h.last[key]
	if seen && now.Sub(t) < warnEvery {
		h.mu.Unlock()
		h.log.Debug(msg, args...)
		return
	}
	h.last[key] = now
	h.mu.Unlock()
	h.log.Warn(msg, args...)
}

// refusalCreds are the server's TLS credentials, logging every handshake
// they refuse, with the reason, unless the transport is closing. A
// handshake that ends because the client hung up is logged at debug
// level only: a peer that stops or is killed while it reconnects does
// that, and there is nothing to act on.
type refusalCreds struct {
	credentials.TransportCredentials
	t *Transport
}

func (c refusalCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	switch {
	case err == nil || c.t.isClosed():
	case hungUp(err):
		c.t.log.Debug("dmutex: grpctransport: client hung up during the TLS handshake",
			"remote", raw.RemoteAddr().String(), "err", err)
	default:
		c.t.handshakes.warn("refused "+err.Error(), "dmutex: grpctransport: refused a TLS handshake",
			"remote", raw.RemoteAddr().String(), "err", err)
	}
	return conn, info, err
}

// hungUp reports whether err says that the other end of a connection
// closed it or went away, rather than that it sent something wrong.
func hungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func (c refusalCreds) Clone() credentials.TransportCredentials {
	return refusalCreds{c.TransportCredentials.Clone(), c.t}
}

// linkTLS is what the dialing side of one link saw of its last TLS
// connection. With TLS 1.3 a client's handshake is complete before the
// server has checked the client's certificate, so a server that refuses
// it closes a connection the client believed good; the client only sees
// a broken connection that never delivered a byte.
type linkTLS struct {
	shook  atomic.Bool   // the last handshake succeeded
	heard  atomic.Bool   // and the peer has sent data on that connection since
	shakes atomic.Uint64 // handshakes so far, to tell a new one from the last
}

// clientTLS are a link's TLS credentials, which record what linkTLS says.
type clientTLS struct {
	credentials.TransportCredentials
	s *linkTLS
}

func (c clientTLS) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	c.s.heard.Store(false)
	c.s.shook.Store(err == nil)
	c.s.shakes.Add(1)
	if err != nil {
		return conn, info, err
	}
	return heardConn{conn, c.s}, info, nil
}

func (c clientTLS) Clone() credentials.TransportCredentials {
	return clientTLS{c.TransportCredentials.Clone(), c.s}
}

// heardConn notes in s when the peer first sends data.
type heardConn struct {
	net.Conn
	s *linkTLS
}

func (c heardConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.s.heard.Load() {
		c.s.heard.Store(true)
	}
	return n, err
}

// watchHandshakes logs, at warning level, why the connection to o's peer
// fails when the reason is TLS: the other peer refused this one's
// certificate, or this one refused the other's. The link itself waits for
// the connection without seeing why it fails, so this asks: a call that
// does not wait for the connection fails at once with gRPC's last
// connection error. Other reasons, such as a peer that is down or that
// hung up in mid-handshake, are logged at debug level: peers start and
// stop, and are killed.
func (t *Transport) watchHandshakes(o *outbox) {
	defer t.wg.Done()
	s := &t.handshakes.links[o.to]
	state := o.conn.GetState()
	// The handshake of the last connection that looked refused: one
	// alone is what a peer that is closing does to a connection it
	// had begun to accept, so a refusal is warned about only when the
	// next handshake is refused as well.
	var refusedAt uint64
	for {
		wait, cancel := context.WithCancel(t.ctx)
		if state == connectivity.TransientFailure {
			// gRPC stays in TRANSIENT_FAILURE while it retries: ask
			// again now and then.
			wait, cancel = context.WithTimeout(t.ctx, t.opt.maxBackoff)
		}
		o.conn.WaitForStateChange(wait, state)
		cancel()
		if t.ctx.Err() != nil {
			return
		}
		state = o.conn.GetState()
		if state != connectivity.TransientFailure {
			continue
		}
		ctx, cancel := context.WithTimeout(t.ctx, time.Second)
		_, err := healthpb.NewHealthClient(o.conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false))
		cancel()
		if err == nil || t.ctx.Err() != nil {
			continue
		}
		reason := status.Convert(err).Message()
		refused := s.shook.Load() && !s.heard.Load() && !strings.Contains(reason, "remote error: tls:")
		if !refused {
			refusedAt = 0
		}
		switch {
		case strings.Contains(reason, "remote error: tls:"):
			t.handshakes.warn("to "+PeerName(o.to)+" "+reason, "dmutex: grpctransport: TLS handshake refused by the peer, whose log says why",
				"to", o.to, "err", reason)
		case isTLSFailure(reason) && !hungUpReason(reason):
			t.handshakes.warn("to "+PeerName(o.to)+" "+reason, "dmutex: grpctransport: TLS handshake failed",
				"to", o.to, "err", reason)
		case refused && (refusedAt == 0 || refusedAt == s.shakes.Load()):
			refusedAt = s.shakes.Load()
			t.log.Debug("dmutex: grpctransport: peer closed the connection after the TLS handshake", "to", o.to, "err", reason)
		case refused:
			t.handshakes.warn("to "+PeerName(o.to)+" refused", "dmutex: grpctransport: TLS handshake refused by the peer: "+
				"it closed the connection before sending anything, as a peer does that refuses this one's certificate; its log says why",
				"to", o.to, "err", reason)
		default:
			t.log.Debug("dmutex: grpctransport: cannot reach peer", "to", o.to, "err", reason)
		}
	}
}

// hungUpReason reports whether a gRPC connection error says that the
// other end closed the connection or went away, as a peer that stops or is
// killed during a handshake does, rather than that it refused one.
func hungUpReason(reason string) bool {
	for _, s := range []string{"EOF", "connection reset by peer", "broken pipe", "use of closed network connection"} {
		if strings.Contains(reason, s) {
			return true
		}
	}
	return false
}

// isTLSFailure reports whether a gRPC connection error is about TLS.
func isTLSFailure(reason string) bool {
	for _, s := range []string{"tls:", "x509:", "authentication handshake failed", "certificate"} {
		if strings.Contains(reason, s) {
			return true
		}
	}
	return false
}
