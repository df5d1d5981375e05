package grpctransport

import (
	"context"
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/dmutex/dmutex/grpctransport/internal/wirepb"
	"github.com/dmutex/dmutex/internal/testpki"
)

// TestHealthService asks a running transport, insecure and with mutual
// TLS, for its health with the standard client, and watches it turn
// NOT_SERVING at Close, before the Watch stream ends.
func TestHealthService(t *testing.T) {
	require.Equal(t, wirepb.Link_ServiceDesc.ServiceName, HealthService)
	ca := testpki.New(t)
	for _, tt := range []struct {
		name  string
		opt   Option
		creds credentials.TransportCredentials
	}{
		{"insecure", Insecure(), insecure.NewCredentials()},
		{"mtls", WithTLS(ca.Config(t, PeerName(0))), func() credentials.TransportCredentials {
			cfg := ca.Config(t, PeerName(1))
			cfg.ServerName = PeerName(0)
			return credentials.NewTLS(cfg)
		}()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ls, addrs := listeners(t, 2)
			require.NoError(t, ls[1].Close())
			tr, err := New(0, addrs, WithListener(ls[0]), tt.opt, fastRetry, quiet)
			require.NoError(t, err)
			conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(tt.creds))
			require.NoError(t, err)
			defer func() { _ = conn.Close() }()
			hc := healthpb.NewHealthClient(conn)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, svc := range []string{"", HealthService} {
				resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
				require.NoError(t, err, "service %q", svc)
				assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus(), "service %q", svc)
			}
			_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"})
			require.Error(t, err, "an unknown service is NOT_FOUND")

			watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: HealthService})
			require.NoError(t, err)
			first, err := watch.Recv()
			require.NoError(t, err)
			require.Equal(t, healthpb.HealthCheckResponse_SERVING, first.GetStatus())
			// Once the Watch handler waits for a change, the change
			// that Close makes first is handed to it before the end of
			// the stream can be.
			require.Eventually(t, func() bool { return parkedIn("grpc/health.(*Server).Watch(", "select") == 1 },
				30*time.Second, time.Millisecond, "the Watch handler never came to wait")
			closed := make(chan error, 1)
			go func() { closed <- tr.Close() }()
			next, err := watch.Recv()
			require.NoError(t, err, "the stream ended without NOT_SERVING")
			assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, next.GetStatus())
			_, err = watch.Recv()
			// Ended by the handler at Close, not cut by the server's
			// Stop once GracefulStop gave up on it.
			assert.Equal(t, codes.Canceled, status.Code(err), "%v", err)
			require.NoError(t, <-closed)
		})
	}
}

// TestServerKeepsItsClientCAs gives peer 0 a TLS config whose ClientCAs,
// the authorities it checks clients against, holds one more than its
// RootCAs, the one it checks servers against: a client with a
// certificate of that other authority is served (the health service
// answers it), and one of an authority in neither is refused. RootCAs
// stands in for ClientCAs only when the config has none.
func TestServerKeepsItsClientCAs(t *testing.T) {
	servers, clients, strangers := testpki.New(t), testpki.New(t), testpki.New(t)
	cfg := servers.Config(t, PeerName(0))
	cfg.ClientCAs = x509.NewCertPool()
	cfg.ClientCAs.AddCert(servers.Cert) // peer 0's own certificate must pass both
	cfg.ClientCAs.AddCert(clients.Cert)
	ls, addrs := listeners(t, 2)
	require.NoError(t, ls[1].Close())
	tr, err := New(0, addrs, WithListener(ls[0]), WithTLS(cfg), fastRetry, quiet)
	require.NoError(t, err)
	defer func() { require.NoError(t, tr.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check := func(ca *testpki.CA) error {
		c := ca.Config(t, PeerName(1))
		c.RootCAs, c.ServerName = servers.Pool, PeerName(0)
		conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(credentials.NewTLS(c)))
		require.NoError(t, err)
		defer func() { _ = conn.Close() }()
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	require.NoError(t, check(clients), "a client of an authority in ClientCAs only")
	require.Error(t, check(strangers), "a client of no authority peer 0 knows")
}
