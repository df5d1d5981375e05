package grpctransport

import (
	"net"
	"sync"
	"time"
)

// handshakeTimeout bounds how long a new incoming connection may take to
// finish its TLS and HTTP/2 handshakes before the server drops it. gRPC's
// default, 120 seconds, let a client that connects and sends nothing hold
// up Close for two minutes.
const handshakeTimeout = 3 * time.Second

// A shakingListener remembers the connections it accepted until the gRPC
// server has finished their handshakes, so that Close can cut the ones that
// are still in a handshake: gRPC's Stop and GracefulStop wait for those.
//
// The server marks the end of a handshake, whether it succeeded or not, by
// clearing the deadline it set on the raw connection before it; that call
// is what takes a connection off the list.
type shakingListener struct {
	net.Listener

	mu      sync.Mutex
	cut     bool // set by cutHandshakes; later connections are closed at once
	shaking map[*shakingConn]struct{}
	shaken  int // handshakes that ended, for tests
}

func newShakingListener(l net.Listener) *shakingListener {
	return &shakingListener{Listener: l, shaking: make(map[*shakingConn]struct{})}
}

func (l *shakingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	sc := &shakingConn{Conn: c, l: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		_ = c.Close() // the server's handshake then fails at once
		return sc, nil
	}
	l.shaking[sc] = struct{}{}
	return sc, nil
}

// cutHandshakes closes every connection whose handshake has not finished,
// and every connection accepted from now on.
func (l *shakingListener) cutHandshakes() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for c := range l.shaking {
		_ = c.Conn.Close()
	}
	clear(l.shaking)
}

func (l *shakingListener) done(c *shakingConn) {
	l.mu.Lock()
	delete(l.shaking, c)
	l.mu.Unlock()
}

// A shakingConn is a connection the gRPC server is, or was, handshaking.
type shakingConn struct {
	net.Conn
	l *shakingListener
}

func (c *shakingConn) SetDeadline(t time.Time) error {
	if t.IsZero() {
		c.l.done(c) // the server clears the handshake deadline when it ends
		c.l.mu.Lock()
		c.l.shaken++
		c.l.mu.Unlock()
	}
	return c.Conn.SetDeadline(t)
}

func (c *shakingConn) Close() error {
	c.l.done(c)
	return c.Conn.Close()
}
