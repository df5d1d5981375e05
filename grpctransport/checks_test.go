package grpctransport

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dmutex/dmutex"
	"github.com/dmutex/dmutex/internal/testpki"
)

// TestNewChecksOwnCertificate starts peer 1 with certificates that every
// other peer would refuse: New must say which fault it is, and the right
// certificate must pass.
func TestNewChecksOwnCertificate(t *testing.T) {
	ca, other := testpki.New(t), testpki.New(t)
	addrs := []string{"127.0.0.1:1", "127.0.0.1:2"}
	cfg := func(c tls.Certificate) *tls.Config {
		return &tls.Config{Certificates: []tls.Certificate{c}, RootCAs: ca.Pool, MinVersion: tls.VersionTLS13}
	}
	tests := []struct {
		name string
		cfg  *tls.Config
		want string
	}{
		{"wrong authority", cfg(other.Issue(t, PeerName(1))), "does not chain to the given authority"},
		{"serverAuth only", cfg(ca.IssueFor(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, PeerName(1))), "does not allow client authentication (extended key usage [serverAuth])"},
		{"clientAuth only", cfg(ca.IssueFor(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, PeerName(1))), "does not allow server authentication (extended key usage [clientAuth])"},
		{"no DNS name", cfg(ca.Issue(t)), `certificate names no DNS name (common name ""), not "peer-1"`},
		{"another peer's name", cfg(ca.Issue(t, PeerName(0))), `certificate names [peer-0], not "peer-1"`},
		{"client authority differs", func() *tls.Config {
			c := cfg(ca.Issue(t, PeerName(1)))
			c.ClientCAs = other.Pool
			return c
		}(), "does not chain to the given authority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireCertificateRefused(t, addrs, tt.cfg, tt.want)
		})
	}

	ls, laddrs := listeners(t, 2)
	require.NoError(t, ls[0].Close())
	tr, err := New(1, laddrs, WithListener(ls[1]), WithTLS(cfg(ca.Issue(t, "other-name", PeerName(1)))), quiet)
	require.NoError(t, err, "a certificate that names peer-1 among others, from the authority, for both uses")
	require.NoError(t, tr.Close())
}

// TestNewChecksCertificateChain checks the parts of a certificate chain
// that New parses: a leaf or an intermediate that does not parse is
// refused with an error, never a panic, and a leaf issued by an
// intermediate authority passes when the intermediate follows it. An
// extended key usage without a name is shown by its number.
func TestNewChecksCertificateChain(t *testing.T) {
	ca := testpki.New(t)
	inter := ca.Intermediate(t)
	addrs := []string{"127.0.0.1:1", "127.0.0.1:2"}
	cfg := func(c tls.Certificate) *tls.Config {
		return &tls.Config{Certificates: []tls.Certificate{c}, RootCAs: ca.Pool, MinVersion: tls.VersionTLS13}
	}
	viaInter := inter.Issue(t, PeerName(1))
	withChain := func(c tls.Certificate, more ...[]byte) tls.Certificate {
		c.Certificate = append(append([][]byte(nil), c.Certificate...), more...)
		return c
	}
	refused := []struct {
		name string
		cfg  *tls.Config
		want string
	}{
		{"leaf does not parse", cfg(tls.Certificate{Certificate: [][]byte{{1, 2, 3}}}), "peer 1: certificate does not parse"},
		{"intermediate does not parse", cfg(withChain(viaInter, []byte{1, 2, 3})), "intermediate certificate does not parse"},
		{"intermediate left out", cfg(viaInter), "does not chain to the given authority"},
		{"code signing only", cfg(ca.IssueFor(t, []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning}, PeerName(1))),
			"does not allow server authentication (extended key usage [usage(3)])"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			requireCertificateRefused(t, addrs, tt.cfg, tt.want)
		})
	}

	pick := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, nil }
	accepted := []struct {
		name string
		cfg  *tls.Config
	}{
		{"leaf and intermediate", cfg(withChain(viaInter, inter.Cert.Raw))},
		{"GetCertificate, no Certificates", &tls.Config{GetCertificate: pick, RootCAs: ca.Pool, MinVersion: tls.VersionTLS13}},
		{"GetCertificate beside an empty certificate", &tls.Config{Certificates: []tls.Certificate{{}}, GetCertificate: pick, RootCAs: ca.Pool, MinVersion: tls.VersionTLS13}},
	}
	for _, tt := range accepted {
		t.Run(tt.name, func(t *testing.T) {
			ls, laddrs := listeners(t, 2)
			require.NoError(t, ls[0].Close())
			tr, err := New(1, laddrs, WithListener(ls[1]), WithTLS(tt.cfg), quiet)
			require.NoError(t, err)
			require.NoError(t, tr.Close())
		})
	}
}

// TestNewRefusesDuplicateAddresses checks that two peers at one address
// are refused, with both ids named, whatever the case of the host.
func TestNewRefusesDuplicateAddresses(t *testing.T) {
	for _, addrs := range [][]string{
		{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7000"},
		{"LocalHost:7000", "127.0.0.1:7001", "localhost:7000"},
	} {
		tr, err := New(1, addrs, Insecure())
		require.Nil(t, tr)
		require.ErrorIs(t, err, dmutex.ErrInvalidConfig)
		assert.Contains(t, err.Error(), "peers 0 and 2 have the same address")
	}
}

// requireCertificateRefused requires New to refuse peer 1's TLS config
// cfg with an ErrCertificate (and so ErrInvalidConfig) that says want.
func requireCertificateRefused(t *testing.T, addrs []string, cfg *tls.Config, want string) {
	t.Helper()
	tr, err := New(1, addrs, WithTLS(cfg))
	require.Nil(t, tr)
	require.ErrorIs(t, err, ErrCertificate)
	require.ErrorIs(t, err, dmutex.ErrInvalidConfig)
	assert.Contains(t, err.Error(), want)
}
