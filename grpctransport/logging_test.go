package grpctransport

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dmutex/dmutex"
	"github.com/dmutex/dmutex/internal/testpki"
)

// records is a slog.Handler that keeps every record it is given, at every
// level, for a test to read.
type records struct {
	mu    *sync.Mutex
	recs  *[]slog.Record
	attrs []slog.Attr
}

func newRecords() records { return records{mu: new(sync.Mutex), recs: new([]slog.Record)} }

func (records) Enabled(context.Context, slog.Level) bool { return true }

func (h records) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.mu.Lock()
	*h.recs = append(*h.recs, r)
	h.mu.Unlock()
	return nil
}

func (h records) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(slices.Clip(h.attrs), as...)
	return h
}

func (h records) WithGroup(string) slog.Handler { return h } // the transport uses none

// atLeast returns the records at level or above, one line each.
func (h records) atLeast(level slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range *h.recs {
		if r.Level < level {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
		r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s", a); return true })
		out = append(out, b.String())
	}
	return out
}

func (h records) logger() *slog.Logger { return slog.New(h) }

// TestCleanShutdownLogsNothing runs a 3-peer cluster over mutual-TLS gRPC,
// takes the lock on every peer, and closes the peers one after another, as
// the processes of a finished job exit. The peers that are still running
// see their links to the closed ones break: that is expected, and no
// record at INFO or above may say otherwise.
func TestCleanShutdownLogsNothing(t *testing.T) {
	for _, alg := range []dmutex.Algorithm{dmutex.RicartAgrawala, dmutex.SuzukiKasami} {
		t.Run(alg.String(), func(t *testing.T) {
			const n = 3
			ca := testpki.New(t)
			ls, addrs := listeners(t, n)
			logs := newRecords()
			peers := make([]*dmutex.Peer, n)
			for i := range peers {
				tr, err := New(i, addrs, WithListener(ls[i]), WithTLS(ca.Config(t, PeerName(i))),
					WithCluster(alg, ""), fastRetry, WithLogger(logs.logger()))
				require.NoError(t, err)
				p, err := dmutex.NewPeer(alg, i, n, tr)
				if err != nil {
					_ = tr.Close()
				}
				require.NoError(t, err)
				peers[i] = p
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, p := range peers {
				require.NoError(t, p.LockContext(ctx))
				p.Unlock()
			}
			for _, p := range peers {
				require.NoError(t, p.Close())
			}
			assert.Empty(t, logs.atLeast(slog.LevelInfo))
		})
	}
}

// TestStrangerIsWarnedAbout checks that quiet is not silent: a client
// whose certificate comes from another authority dials a running peer,
// which refuses its handshake and says so at WARN, with the reason.
func TestStrangerIsWarnedAbout(t *testing.T) {
	ca, other := testpki.New(t), testpki.New(t)
	ls, addrs := listeners(t, 2)
	logs := newRecords()
	tr, err := New(0, addrs, WithListener(ls[0]), WithTLS(ca.Config(t, PeerName(0))), fastRetry, WithLogger(logs.logger()))
	require.NoError(t, err)
	defer func() { require.NoError(t, tr.Close()) }()
	require.NoError(t, ls[1].Close())

	cfg := other.Config(t, PeerName(1))
	cfg.RootCAs = ca.Pool // the stranger trusts the cluster; the cluster does not trust it
	cfg.ServerName = PeerName(0)
	conn, err := tls.Dial("tcp", addrs[0], cfg)
	if err == nil {
		// TLS 1.3: the client's side completes before the server checks
		// the client's certificate; the refusal comes with the first read.
		_, err = conn.Read(make([]byte, 1))
		_ = conn.Close()
	}
	require.Error(t, err, "the peer refused the stranger")

	warned := func() bool {
		for _, l := range logs.atLeast(slog.LevelWarn) {
			if strings.Contains(l, "refused a TLS handshake") && strings.Contains(l, "unknown authority") {
				return true
			}
		}
		return false
	}
	assert.Eventually(t, warned, 10*time.Second, time.Millisecond, "%q", logs.atLeast(slog.LevelDebug))
}

// TestHangUpInHandshakeIsNotAWarning plays a peer killed during TLS
// handshakes, on both sides of them. As a server, peer 0 is dialed by
// clients that hang up before a byte and inside their hello; as a client,
// it dials peer 1, whose address accepts connections and resets them as a
// dying process does. That is what peers do when they stop, and is logged
// at DEBUG only.
func TestHangUpInHandshakeIsNotAWarning(t *testing.T) {
	ca := testpki.New(t)
	ls, addrs := listeners(t, 2)
	resets := make(chan struct{})
	go func() {
		defer close(resets)
		for {
			c, err := ls[1].Accept()
			if err != nil {
				return // closed at the end of the test
			}
			_, _ = c.Read(make([]byte, 1)) // the start of peer 0's hello
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
		}
	}()
	logs := newRecords()
	tr, err := New(0, addrs, WithListener(ls[0]), WithTLS(ca.Config(t, PeerName(0))), fastRetry, WithLogger(logs.logger()))
	require.NoError(t, err)

	for _, hangUp := range []func(c net.Conn){
		func(c net.Conn) { _ = c.Close() },                                              // before a byte
		func(c net.Conn) { _, _ = c.Write([]byte{22, 3, 1, 0, 200, 1}); _ = c.Close() }, // inside its hello
	} {
		c, err := net.Dial("tcp", addrs[0])
		require.NoError(t, err)
		hangUp(c)
	}
	count := func(msg string) (n int) {
		for _, l := range logs.atLeast(slog.LevelDebug) {
			if strings.Contains(l, msg) {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool {
		return count("hung up during the TLS handshake")+count("refused a TLS handshake") == 2 &&
			count("to=1 err=") >= 2 // the link and watchHandshakes each saw a reset
	}, 10*time.Second, time.Millisecond, "%q", logs.atLeast(slog.LevelDebug))
	require.NoError(t, tr.Close())
	require.NoError(t, ls[1].Close())
	<-resets
	assert.Empty(t, logs.atLeast(slog.LevelInfo))
}

// TestWithLoggerNilIsSilent checks that WithLogger(nil) turns the
// transport's logs off rather than falling back to slog.Default.
func TestWithLoggerNilIsSilent(t *testing.T) {
	logs := newRecords()
	old := slog.Default()
	slog.SetDefault(logs.logger())
	defer slog.SetDefault(old)

	ca, other := testpki.New(t), testpki.New(t)
	ls, addrs := listeners(t, 2)
	tr, err := New(0, addrs, WithListener(ls[0]), WithTLS(ca.Config(t, PeerName(0))), fastRetry, WithLogger(nil))
	require.NoError(t, err)
	require.NoError(t, ls[1].Close())
	cfg := other.Config(t, PeerName(1))
	cfg.RootCAs, cfg.ServerName = ca.Pool, PeerName(0)
	if conn, err := tls.Dial("tcp", addrs[0], cfg); err == nil {
		_, _ = conn.Read(make([]byte, 1))
		_ = conn.Close()
	}
	require.NoError(t, tr.Close()) // after the refusal: the handshake ended before Close returned
	assert.Empty(t, logs.atLeast(slog.LevelDebug))
}
