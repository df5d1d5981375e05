package grpctransport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/credentials"

	"github.com/dmutex/dmutex/internal/testpki"
)

// TestRefusedHandshakesWarn starts peer 1 with a certificate that peer 0
// refuses (New's own check skipped, as for a peer whose files changed
// under it) and checks that both say why at warning level: peer 0 that it
// refused a handshake, peer 1 that its handshake failed.
func TestRefusedHandshakesWarn(t *testing.T) {
	ca, other := testpki.New(t), testpki.New(t)
	tests := []struct {
		name       string
		cert       tls.Certificate // peer 1's
		refusedBy0 string          // in peer 0's warning
		seenBy1    string          // in peer 1's warning
	}{
		{"other authority", other.Issue(t, PeerName(1)), "unknown authority", "to=0"},
		{"serverAuth only", ca.IssueFor(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, PeerName(1)), "incompatible key usage", "to=0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ls, addrs := listeners(t, 2)
			var logs [2]logBuffer
			cfgs := [2]*tls.Config{ca.Config(t, PeerName(0)),
				{Certificates: []tls.Certificate{tt.cert}, RootCAs: ca.Pool, MinVersion: tls.VersionTLS13}}
			var trs [2]*Transport
			for i := range trs {
				tr, err := New(i, addrs, WithListener(ls[i]), WithTLS(cfgs[i]), fastRetry, WithLogger(logs[i].logger()), withoutCertificateCheck())
				require.NoError(t, err)
				trs[i] = tr
			}
			require.NoError(t, trs[1].Send(0, msg(1, 0, 1)))
			require.NoError(t, trs[0].Send(1, msg(0, 1, 1)))
			warned := func(i int, msg, reason string) bool {
				for _, line := range strings.Split(logs[i].String(), "\n") {
					if strings.Contains(line, "level=WARN") && strings.Contains(line, msg) && strings.Contains(line, reason) {
						return true
					}
				}
				return false
			}
			assert.Eventually(t, func() bool { return warned(0, "refused a TLS handshake", tt.refusedBy0) }, 30*time.Second, 5*time.Millisecond,
				"peer 0 says why it refused: %s", logs[0].String())
			assert.Eventually(t, func() bool { return warned(1, "TLS handshake refused by the peer", tt.seenBy1) }, 30*time.Second, 5*time.Millisecond,
				"peer 1 says its handshake was refused: %s", logs[1].String())
			assert.Zero(t, trs[0].Stats().Delivered, "nothing got through")
			for _, tr := range trs {
				require.NoError(t, tr.Close())
			}
		})
	}
}

// TestShutdownLogsNoWarning runs three mutual-TLS transports that
// exchange messages, closes them one after another, as the processes of
// a finished run exit, and checks that none logged a warning or an
// error.
func TestShutdownLogsNoWarning(t *testing.T) {
	ca := testpki.New(t)
	ls, addrs := listeners(t, 3)
	var logs [3]logBuffer
	var trs [3]*Transport
	for i := range trs {
		tr, err := New(i, addrs, WithListener(ls[i]), WithTLS(ca.Config(t, PeerName(i))), fastRetry, WithLogger(logs[i].logger()))
		require.NoError(t, err)
		trs[i] = tr
	}
	for i, tr := range trs {
		for j := range trs {
			if j != i {
				require.NoError(t, tr.Send(j, msg(i, j, 1)))
			}
		}
	}
	for _, tr := range trs {
		receive(t, tr, 2, 30*time.Second)
	}
	for _, tr := range trs {
		require.NoError(t, tr.Close())
	}
	for i := range logs {
		out := logs[i].String()
		assert.NotContains(t, out, "level=WARN", "peer %d", i)
		assert.NotContains(t, out, "level=ERROR", "peer %d", i)
	}
}

// TestHandshakeWarningsRateLimited drives handshakeLog.warn directly: a
// reason is warned about the first time, logged at debug level while its
// last warning is less than warnEvery old, and warned about again after,
// each reason (key) on its own. The test moves the recorded times rather
// than wait for the clock.
func TestHandshakeWarningsRateLimited(t *testing.T) {
	var logs logBuffer
	h := &handshakeLog{log: logs.logger()}
	lines := func() []string {
		out := strings.Split(strings.TrimSpace(logs.String()), "\n")
		logs.mu.Lock()
		logs.buf.Reset()
		logs.mu.Unlock()
		return out
	}
	one := func(level, msg string) {
		t.Helper()
		got := lines()
		require.Len(t, got, 1, "%q", got)
		assert.Contains(t, got[0], "level="+level)
		assert.Contains(t, got[0], msg)
	}

	h.warn("a", "first a", "n", 1)
	one("WARN", "first a")
	require.Contains(t, h.last, "a", "the warning's time is recorded")
	h.warn("b", "first b")
	one("WARN", "first b")

	h.last["a"] = time.Now().Add(time.Hour) // a warning that is surely recent
	h.warn("a", "repeated a")
	one("DEBUG", "repeated a")

	old := time.Now().Add(-warnEvery - time.Minute)
	h.last["a"] = old
	h.warn("a", "late a")
	one("WARN", "late a")
	assert.True(t, h.last["a"].After(old), "the new warning's time is recorded")
}

// failingCreds are server credentials whose every handshake fails.
type failingCreds struct {
	credentials.TransportCredentials
}

func (failingCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("tls: no good")
}

// TestRefusalCredsQuietWhenClosing checks refusalCreds alone: a refused
// handshake is warned about with its reason while the transport runs,
// and not at all once it is closing, when peers hang up in mid-handshake
// as a matter of course.
func TestRefusalCredsQuietWhenClosing(t *testing.T) {
	var logs logBuffer
	tr := &Transport{done: make(chan struct{}), handshakes: handshakeLog{log: logs.logger()}}
	c := refusalCreds{failingCreds{}, tr}
	a, b := net.Pipe()
	defer func() { _ = a.Close(); _ = b.Close() }()

	_, _, err := c.ServerHandshake(a)
	require.ErrorContains(t, err, "tls: no good")
	assert.Contains(t, logs.String(), "level=WARN")
	assert.Contains(t, logs.String(), "refused a TLS handshake")

	close(tr.done)
	logs.mu.Lock()
	logs.buf.Reset()
	logs.mu.Unlock()
	tr.handshakes.last = nil // the same reason would be rate-limited otherwise
	_, _, err = c.ServerHandshake(a)
	require.ErrorContains(t, err, "tls: no good", "the error still goes to gRPC")
	assert.Empty(t, logs.String())
}

// clientCreds are client credentials whose handshake returns raw itself,
// or fails with err.
type clientCreds struct {
	credentials.TransportCredentials
	err error
}

func (c clientCreds) ClientHandshake(_ context.Context, _ string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if c.err != nil {
		return nil, nil, c.err
	}
	return raw, nil, nil
}

// TestClientTLSRecordsWhatTheLinkSaw checks what clientTLS and heardConn
// note for watchHandshakes: each handshake resets heard and records
// whether it succeeded, and only a read that returns data counts as
// having heard from the peer, once.
func TestClientTLSRecordsWhatTheLinkSaw(t *testing.T) {
	var s linkTLS
	a, b := net.Pipe()
	defer func() { _ = b.Close() }()

	s.heard.Store(true) // from an earlier connection
	conn, _, err := clientTLS{clientCreds{}, &s}.ClientHandshake(context.Background(), "peer-0", a)
	require.NoError(t, err)
	assert.True(t, s.shook.Load(), "the handshake succeeded")
	assert.False(t, s.heard.Load(), "nothing heard on the new connection yet")

	go func() { _, _ = b.Write([]byte("x")) }()
	buf := make([]byte, 4)
	n, err := conn.Read(buf)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.True(t, s.heard.Load(), "a read with data counts")

	s.heard.Store(false)
	require.NoError(t, b.Close())
	n, err = conn.Read(buf)
	require.Error(t, err)
	require.Zero(t, n)
	assert.False(t, s.heard.Load(), "a read without data does not count")

	_, _, err = clientTLS{clientCreds{err: errors.New("tls: bad")}, &s}.ClientHandshake(context.Background(), "peer-0", a)
	require.ErrorContains(t, err, "tls: bad")
	assert.False(t, s.shook.Load(), "the handshake failed")
	assert.False(t, s.heard.Load())
}
