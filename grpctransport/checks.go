package grpctransport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/dmutex/dmutex"
)

// ErrCertificate is wrapped, together with dmutex.ErrInvalidConfig, by the
// error New returns when this peer's own certificate would fail every
// handshake: it does not name PeerName(id), does not chain to the
// authority in the config, or does not allow both server and client
// authentication. The wrapping error says which.
var ErrCertificate = errors.New("dmutex: certificate unfit for this peer")

// checkCertificate checks, before any connection is tried, that the first
// certificate of cfg is one the other peers will accept as peer id's in
// both directions: they verify it against the same authority (cfg.RootCAs
// when this peer dials, and ClientCAs, or RootCAs, when it is dialed),
// with the key usage of a server and of a client, and look for PeerName(id)
// among its DNS names. A config that picks its certificate per handshake
// (GetCertificate, no Certificates) is not checked.
func checkCertificate(id int, cfg *tls.Config) error {
	if len(cfg.Certificates) == 0 || len(cfg.Certificates[0].Certificate) == 0 {
		return nil
	}
	chain := cfg.Certificates[0].Certificate
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return certError("peer %d: certificate does not parse: %v", id, err)
	}
	if !slices.Contains(leaf.DNSNames, PeerName(id)) {
		return certError("peer %d: certificate names %s, not %q (its DNS names must include PeerName(%d))",
			id, describeNames(leaf), PeerName(id), id)
	}
	inter := x509.NewCertPool()
	for _, der := range chain[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return certError("peer %d: intermediate certificate does not parse: %v", id, err)
		}
		inter.AddCert(c)
	}
	roots := []struct {
		pool  *x509.CertPool
		usage x509.ExtKeyUsage
		as    string
	}{
		{cfg.RootCAs, x509.ExtKeyUsageServerAuth, "server"},
		{orPool(cfg.ClientCAs, cfg.RootCAs), x509.ExtKeyUsageClientAuth, "client"},
	}
	for _, r := range roots {
		opts := x509.VerifyOptions{Roots: r.pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
		if _, err := leaf.Verify(opts); err != nil {
			return certError("peer %d: certificate %q, issued by %q, does not chain to the given authority: %v",
				id, leaf.Subject.CommonName, leaf.Issuer.CommonName, err)
		}
		opts.KeyUsages = []x509.ExtKeyUsage{r.usage}
		if _, err := leaf.Verify(opts); err != nil {
			return certError("peer %d: certificate does not allow %s authentication (extended key usage %s); every peer is both a server and a client: %v",
				id, r.as, describeUsages(leaf.ExtKeyUsage), err)
		}
	}
	return nil
}

// withoutCertificateCheck lets a test start a transport with a
// certificate that checkCertificate refuses, to play an impostor.
func withoutCertificateCheck() Option {
	return Option{name: "withoutCertificateCheck", apply: func(o *options) error { o.noCertCheck = true; return nil }}
}

// orPool returns a unless it is nil, else b.
func orPool(a, b *x509.CertPool) *x509.CertPool {
	if a != nil {
		return a
	}
	return b
}

func certError(format string, args ...any) error {
	return fmt.Errorf("%w: %w: %s", dmutex.ErrInvalidConfig, ErrCertificate, fmt.Sprintf(format, args...))
}

func describeNames(c *x509.Certificate) string {
	if len(c.DNSNames) == 0 {
		return fmt.Sprintf("no DNS name (common name %q)", c.Subject.CommonName)
	}
	return fmt.Sprintf("%v", c.DNSNames)
}

var usageNames = map[x509.ExtKeyUsage]string{
	x509.ExtKeyUsageAny:        "any",
	x509.ExtKeyUsageServerAuth: "serverAuth",
	x509.ExtKeyUsageClientAuth: "clientAuth",
}

func describeUsages(us []x509.ExtKeyUsage) string {
	names := make([]string, len(us))
	for i, u := range us {
		if n, ok := usageNames[u]; ok {
			names[i] = n
		} else {
			names[i] = fmt.Sprintf("usage(%d)", u)
		}
	}
	return "[" + strings.Join(names, " ") + "]"
}

// distinctAddrs refuses a membership that lists one address for two
// peers: both would try to listen there, and each peer's messages for
// one would reach the other.
func distinctAddrs(addrs []string) error {
	seen := make(map[string]int, len(addrs))
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return fmt.Errorf("%w: address %q of peer %d: %v", dmutex.ErrInvalidConfig, a, i, err)
		}
		key := net.JoinHostPort(strings.ToLower(host), port)
		if j, dup := seen[key]; dup {
			return fmt.Errorf("%w: peers %d and %d have the same address %q", dmutex.ErrInvalidConfig, j, i, a)
		}
		seen[key] = i
	}
	return nil
}
