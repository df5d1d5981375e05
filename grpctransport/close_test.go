package grpctransport

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dmutex/dmutex/internal/testpki"
)

// TestConcurrentClose closes one transport from several goroutines at
// once: each call returns only after the transport has stopped, which the
// closed Recv channel shows.
func TestConcurrentClose(t *testing.T) {
	for round := range 5 {
		trs := startTransports(t, 2, insecureOpts)
		require.NoError(t, trs[0].Send(1, msg(0, 1, 1)))
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				assert.NoError(t, trs[0].Close())
				select {
				case _, ok := <-trs[0].Recv():
					assert.False(t, ok, "round %d: a message on Recv after Close", round)
				default:
					assert.Fail(t, "Close returned before the transport stopped", "round %d", round)
				}
			})
		}
		wg.Wait()
	}
}

// TestCloseWithIdleConnections opens TCP connections to a transport that
// never send a byte, or stop in the middle of a handshake, and closes the
// transport: Close must not wait for gRPC's handshake timeout (120 s by
// default, when this test was written). A client that finishes its
// handshake and then answers nothing holds Close for the grace period
// (2 s), no more. The deadline here is generous; the time Close took is
// logged.
func TestCloseWithIdleConnections(t *testing.T) {
	ca := testpki.New(t)
	tests := []struct {
		name string
		opts func(int) []Option
		idle int // connections left in a handshake
	}{
		{"insecure", insecureOpts, 4},
		// A TLS server drops the half HTTP/2 preface at once: it is not a
		// TLS record.
		{"tls", func(id int) []Option { return []Option{WithTLS(ca.Config(t, PeerName(id)))} }, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			trs := startTransports(t, 2, tt.opts)
			addr := trs[0].Addr().String()
			// Connect the peers first, so that the only handshakes
			// from now on are this test's.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for _, tr := range trs {
				wg.Go(func() { assert.NoError(t, tr.Barrier(ctx)) })
			}
			wg.Wait()
			var conns []net.Conn
			for i := range 4 {
				c, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				conns = append(conns, c)
				switch i {
				case 1: // half of the HTTP/2 client preface
					_, err = c.Write([]byte("PRI * HTTP/2.0\r\n"))
				case 2: // a TLS record header and nothing more
					_, err = c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00})
				}
				require.NoError(t, err)
			}
			// On a plain port, one more client completes the HTTP/2
			// handshake (preface and an empty SETTINGS frame) and then
			// reads and answers nothing, so the server's graceful stop
			// waits on it: the slowest case, bounded by the grace period.
			silent := 0
			if tt.name == "insecure" {
				before := trs[0].lis.handshakes()
				c, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				_, err = c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0))
				require.NoError(t, err)
				defer func() { _ = c.Close() }()
				silent = 1
				require.Eventually(t, func() bool { return trs[0].lis.handshakes() >= before+1 }, 30*time.Second, time.Millisecond)
			}
			defer func() {
				for _, c := range conns {
					_ = c.Close()
				}
			}()
			// Wait until the server is handshaking all of them, so that
			// none is merely waiting in the listen queue.
			require.Eventually(t, func() bool { return trs[0].lis.handshaking() >= tt.idle }, 30*time.Second, time.Millisecond)

			start := time.Now()
			closed := make(chan error, 1)
			go func() { closed <- trs[0].Close() }()
			select {
			case err := <-closed:
				require.NoError(t, err)
			case <-time.After(60 * time.Second):
				require.FailNow(t, "Close waits for idle connections")
			}
			t.Logf("Close took %v with %d connections in a handshake and %d silent after one", time.Since(start), len(conns), silent)
		})
	}
}

// handshakes returns how many handshakes have ended.
func (l *shakingListener) handshakes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.shaken
}

// handshaking returns how many accepted connections are in a handshake.
func (l *shakingListener) handshaking() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.shaking)
}

// TestConnectionsAcceptedAfterCutAreClosed accepts a connection, cuts the
// listener's handshakes as Close does, and accepts another: the first is
// closed by the cut, and the second, which arrived while Close runs, is
// closed as Accept returns it, so that no handshake can start on it and
// hold up the server's stop.
func TestConnectionsAcceptedAfterCutAreClosed(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := newShakingListener(raw)
	defer func() { _ = l.Close() }()
	accept := func() net.Conn {
		t.Helper()
		client, err := net.Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = client.Close() })
		c, err := l.Accept()
		require.NoError(t, err)
		return c
	}

	before := accept()
	require.Equal(t, 1, l.handshaking())
	l.cutHandshakes()
	_, err = before.Write([]byte("x"))
	require.ErrorIs(t, err, net.ErrClosed, "a connection in a handshake at the cut")
	require.Zero(t, l.handshaking())

	after := accept()
	_, err = after.Write([]byte("x"))
	require.ErrorIs(t, err, net.ErrClosed, "a connection accepted after the cut")
	require.Zero(t, l.handshaking())
}
