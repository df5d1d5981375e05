package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/dmutex/dmutex"
	"github.com/dmutex/dmutex/grpctransport"
)

// runCerts is "dmutexpeer certs": it writes a new certificate authority
// (ca.crt) and, for each of n peers, a certificate and key (peer-i.crt,
// peer-i.key) that grpctransport accepts for peer i, into dir. The
// authority's key is not kept: to add a peer, make a new set. Existing
// files are never overwritten.
func runCerts(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dmutexpeer certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 3, "number of peers")
	dir := fs.String("dir", ".", "directory to write ca.crt and peer-<i>.crt, peer-<i>.key into")
	valid := fs.Duration("valid", 365*24*time.Hour, "validity of every certificate, from now")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: dmutexpeer certs -n N -dir DIR: a throwaway authority and one certificate per peer, for trying mutual TLS")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "dmutexpeer certs: unexpected arguments %q\n", fs.Args())
		return 2
	case *n < 1 || *n > dmutex.MaxPeers:
		fmt.Fprintf(stderr, "dmutexpeer certs: -n %d, want 1 to %d\n", *n, dmutex.MaxPeers)
		return 2
	case *valid <= 0:
		fmt.Fprintf(stderr, "dmutexpeer certs: -valid %v must be positive\n", *valid)
		return 2
	}
	if err := writeCertSet(*dir, *n, *valid); err != nil {
		fmt.Fprintf(stderr, "dmutexpeer certs: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s and peer-0 to peer-%d (.crt, .key) in %s\n", "ca.crt", *n-1, *dir)
	return 0
}

// writeCertSet writes the authority and n peer certificates into dir.
func writeCertSet(dir string, n int, valid time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Check every name first, so that a refusal writes nothing.
	paths := []string{filepath.Join(dir, "ca.crt")}
	for i := range n {
		name := grpctransport.PeerName(i)
		paths = append(paths, filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("%s exists; not overwriting it", p)
		}
	}

	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serialNumber(),
		Subject:               pkix.Name{CommonName: "dmutex peers' authority"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(valid),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writePEM(paths[0], "CERTIFICATE", caDER, 0o644); err != nil {
		return err
	}
	for i := range n {
		name := grpctransport.PeerName(i)
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serialNumber(),
			Subject:      pkix.Name{CommonName: name},
			DNSNames:     []string{name},
			NotBefore:    now.Add(-time.Minute),
			NotAfter:     now.Add(valid),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			// Every peer dials the others and is dialed by them.
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, name+".key"), "PRIVATE KEY", keyDER, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// serialNumber returns a random 128-bit serial number.
func serialNumber() *big.Int {
	s, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128)) // never fails (crypto/rand)
	return s
}

// writePEM writes der as one PEM block to a new file at path.
func writePEM(path, typ string, der []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if err := pem.Encode(f, &pem.Block{Type: typ, Bytes: der}); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
