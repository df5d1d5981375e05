package grpctransport

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
