package grpctransport

import (
	"crypto/tls"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/dmutex/dmutex"
	"github.com/dmutex/dmutex/grpctransport/internal/wirepb"
	"github.com/dmutex/dmutex/internal/testpki"
)

func testTLS(t testing.TB) *tls.Config { return testpki.New(t).Config(t, PeerName(0)) }

func TestMutualTLS(t *testing.T) {
	ca := testpki.New(t)
	trs := startTransports(t, 3, func(id int) []Option {
		return []Option{WithTLS(ca.Config(t, PeerName(id)))}
	})
	require.NoError(t, trs[1].Send(0, msg(1, 0, 1)))
	require.NoError(t, trs[2].Send(0, msg(2, 0, 1)))
	requireInOrder(t, receive(t, trs[0], 2, 10*time.Second), []int{1, 2}, 1)
	assert.Zero(t, trs[0].Stats().Refused)
}

// TestTLSRefusals opens streams to peer 0 of a mutual-TLS cluster with
// certificates that must not get in.
func TestTLSRefusals(t *testing.T) {
	ca, other := testpki.New(t), testpki.New(t)
	var logs logBuffer
	ls, addrs := listeners(t, 3)
	tr0, err := New(0, addrs, WithListener(ls[0]), WithTLS(ca.Config(t, PeerName(0))), fastRetry, WithLogger(logs.logger()))
	require.NoError(t, err)
	defer func() { require.NoError(t, tr0.Close()) }()
	for _, l := range ls[1:] {
		require.NoError(t, l.Close())
	}

	hello := func(from uint32) []byte {
		b, err := proto.Marshal(&wirepb.Frame{Hello: &wirepb.Hello{From: from, To: 0, N: 3, Epoch: 5, FirstSeq: 1}})
		require.NoError(t, err)
		return b
	}
	creds := func(cfg *tls.Config) credentials.TransportCredentials {
		cfg.ServerName = PeerName(0)
		return credentials.NewTLS(cfg)
	}
	tests := []struct {
		name    string
		creds   credentials.TransportCredentials
		from    uint32
		code    codes.Code
		refused bool // refused by the stream handler, not by the TLS handshake
	}{
		{"certificate of another peer", creds(ca.Config(t, PeerName(2))), 1, codes.PermissionDenied, true},
		{"certificate without a peer name", creds(ca.Config(t, "mallory")), 1, codes.PermissionDenied, true},
		{"id outside the membership", creds(ca.Config(t, PeerName(7))), 7, codes.InvalidArgument, true},
		{"certificate from another authority", creds(&tls.Config{Certificates: []tls.Certificate{other.Issue(t, PeerName(1))}, RootCAs: ca.Pool}), 1, codes.Unavailable, false},
		{"no client certificate", creds(&tls.Config{RootCAs: ca.Pool}), 1, codes.Unavailable, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tr0.Stats().Refused
			err := refusal(t, addrs[0], tt.creds, hello(tt.from))
			require.Equal(t, tt.code, status.Code(err), "%v", err)
			if tt.refused {
				require.Eventually(t, func() bool { return tr0.Stats().Refused == before+1 }, 5*time.Second, time.Millisecond)
			}
		})
	}
	assert.Contains(t, logs.String(), "certificate names [peer-2]")

	// The same certificate with the id it names gets in.
	require.True(t, accepted(t, addrs[0], creds(ca.Config(t, PeerName(2))), hello(2)))
}

// TestImpostorTransport runs a whole transport that claims to be peer 1
// with peer 2's certificate: peer 0 never delivers its messages.
func TestImpostorTransport(t *testing.T) {
	ca := testpki.New(t)
	trs := startTransports(t, 3, func(id int) []Option {
		name := PeerName(id)
		if id == 1 {
			name = PeerName(2)
		}
		return []Option{WithTLS(ca.Config(t, name)), withoutCertificateCheck()}
	})
	require.NoError(t, trs[1].Send(0, msg(1, 0, 1)))
	require.NoError(t, trs[2].Send(0, msg(2, 0, 1)))
	got := receive(t, trs[0], 1, 10*time.Second)
	require.Equal(t, 2, got[0].From, "peer 2 gets through")
	require.Eventually(t, func() bool { return trs[0].Stats().Refused >= 2 }, 10*time.Second, time.Millisecond,
		"the impostor is refused, and refused again when it retries")
	assert.Equal(t, uint64(1), trs[0].Stats().Delivered)
	assert.Equal(t, 1, trs[1].unacked(0), "the impostor's message is still waiting")
}

// TestServerIdentity puts a server with peer 2's certificate at peer 0's
// address: peer 1 refuses to send to it.
func TestServerIdentity(t *testing.T) {
	ca := testpki.New(t)
	ls, addrs := listeners(t, 3)
	var logs logBuffer
	fake, err := New(2, addrs, WithListener(ls[0]), WithTLS(ca.Config(t, PeerName(2))), fastRetry, WithLogger(logs.logger()))
	// Peer 2's own certificate at peer 2's id: New's check passes; only
	// the listener at peer 0's address makes it an impostor.
	require.NoError(t, err)
	defer func() { require.NoError(t, fake.Close()) }()
	tr1, err := New(1, addrs, WithListener(ls[1]), WithTLS(ca.Config(t, PeerName(1))), fastRetry, quiet)
	require.NoError(t, err)
	defer func() { require.NoError(t, tr1.Close()) }()
	require.NoError(t, ls[2].Close())

	require.NoError(t, tr1.Send(0, msg(1, 0, 1)))
	assert.Never(t, func() bool { return tr1.unacked(0) == 0 }, 500*time.Millisecond, 10*time.Millisecond,
		"peer 1 delivered to a server that is not peer 0")
	assert.Zero(t, fake.Stats().Delivered)
}

func TestLoadTLSConfig(t *testing.T) {
	ca := testpki.New(t)
	dir := t.TempDir()
	certFile, keyFile, caFile := ca.WriteFiles(t, dir, "peer-0", PeerName(0))
	cfg, err := LoadTLSConfig(certFile, keyFile, caFile)
	require.NoError(t, err)
	require.Len(t, cfg.Certificates, 1)
	_, err = LoadTLSConfig(certFile, keyFile, filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, fs.ErrNotExist, "the authority's file is missing: %v", err)
	_, err = LoadTLSConfig(certFile, certFile, caFile)
	require.Error(t, err)
	_, err = LoadTLSConfig(certFile, keyFile, keyFile)
	require.ErrorContains(t, err, "no PEM certificate")
	_ = dmutex.ErrClosed
}
