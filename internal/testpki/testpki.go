// Package testpki makes throwaway certificate authorities for tests: keys
// live in memory (or in a test's temporary directory) and nothing is ever
// committed.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A CA is a certificate authority made up for one test.
type CA struct {
	Cert *x509.Certificate
	Pool *x509.CertPool // trusts only this authority
	key  *ecdsa.PrivateKey
}

var serial atomic.Int64

// New makes an authority valid for an hour either side of now.
func New(t testing.TB) *CA {
	t.Helper()
	return newCA(t, nil)
}

// Intermediate makes an authority that ca signs. Its Pool trusts it
// alone; a certificate it issues chains to ca when the intermediate's own
// certificate (Cert.Raw) follows it in the chain.
func (ca *CA) Intermediate(t testing.TB) *CA {
	t.Helper()
	return newCA(t, ca)
}

func newCA(t testing.TB, parent *CA) *CA {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: "dmutex test authority"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	issuer, signer := tmpl, key
	if parent != nil {
		tmpl.Subject.CommonName = "dmutex test intermediate authority"
		issuer, signer = parent.Cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &key.PublicKey, signer)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Pool: pool, key: key}
}

// Issue makes a certificate for client and server use that names names as
// DNS subject alternative names.
func (ca *CA) Issue(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	return ca.IssueFor(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, names...)
}

// IssueFor is Issue with the given extended key usages, for tests of
// certificates that allow too little.
func (ca *CA) IssueFor(t testing.TB, usages []x509.ExtKeyUsage, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: strings.Join(names, ",")},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Config returns a TLS 1.3 configuration whose certificate names names and
// which trusts only this authority.
func (ca *CA) Config(t testing.TB, names ...string) *tls.Config {
	t.Helper()
	return &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, names...)}, RootCAs: ca.Pool, MinVersion: tls.VersionTLS13}
}

// WriteFiles writes a certificate for names and its key as dir/prefix.crt
// and dir/prefix.key, and the authority's certificate as dir/ca.crt, all
// PEM, as command-line tools read them.
func (ca *CA) WriteFiles(t testing.TB, dir, prefix string, names ...string) (certFile, keyFile, caFile string) {
	t.Helper()
	c := ca.Issue(t, names...)
	keyDER, err := x509.MarshalECPrivateKey(c.PrivateKey.(*ecdsa.PrivateKey))
	require.NoError(t, err)
	certFile = filepath.Join(dir, prefix+".crt")
	keyFile = filepath.Join(dir, prefix+".key")
	caFile = filepath.Join(dir, "ca.crt")
	write := func(path, typ string, der []byte) {
		require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	}
	write(certFile, "CERTIFICATE", c.Certificate[0])
	write(keyFile, "EC PRIVATE KEY", keyDER)
	write(caFile, "CERTIFICATE", ca.Cert.Raw)
	return certFile, keyFile, caFile
}
