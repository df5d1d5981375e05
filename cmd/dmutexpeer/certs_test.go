package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dmutex/dmutex/grpctransport"
)

// TestCerts writes a set for three peers and checks that each peer's
// files load and that grpctransport.New, which checks a certificate's
// name, authority and key usages, accepts each for its own id and
// refuses it for another.
func TestCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"certs", "-n", "3", "-dir", dir}, &stdout, &stderr), "%s", stderr.String())
	assert.Contains(t, stdout.String(), "peer-0 to peer-2")

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"ca.crt", "peer-0.crt", "peer-0.key", "peer-1.crt", "peer-1.key", "peer-2.crt", "peer-2.key"}, names)
	info, err := os.Stat(filepath.Join(dir, "peer-1.key"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "a key is for its owner only")

	addrs := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	for i := range 3 {
		name := grpctransport.PeerName(i)
		cfg, err := grpctransport.LoadTLSConfig(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"), filepath.Join(dir, "ca.crt"))
		require.NoError(t, err)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		tr, err := grpctransport.New(i, addrs, grpctransport.WithTLS(cfg), grpctransport.WithListener(lis), quietLog())
		require.NoError(t, err, "peer %d's own certificate", i)
		require.NoError(t, tr.Close())
		_, err = grpctransport.New((i+1)%3, addrs, grpctransport.WithTLS(cfg))
		require.ErrorIs(t, err, grpctransport.ErrCertificate, "peer %d's certificate used by another peer", i)
	}

	// The authority is a CA, and its key was not kept.
	b, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	block, _ := pem.Decode(b)
	require.NotNil(t, block)
	ca, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.True(t, ca.IsCA)

	// A second run refuses to overwrite anything.
	stderr.Reset()
	require.Equal(t, 1, run([]string{"certs", "-n", "3", "-dir", dir}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "exists; not overwriting it")
}

func TestCertsBadFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"certs", "-n", "0"}, "-n 0, want 1 to"},
		{[]string{"certs", "-n", "99999"}, "-n 99999"},
		{[]string{"certs", "-valid", "-1h"}, "must be positive"},
		{[]string{"certs", "extra"}, "unexpected arguments"},
		{[]string{"certs", "-bogus"}, "flag provided but not defined"},
	} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, 2, run(tt.args, &stdout, &stderr), "%v", tt.args)
		assert.Contains(t, stderr.String(), tt.want, "%v", tt.args)
	}
}

// quietLog drops a transport's log records.
func quietLog() grpctransport.Option {
	return grpctransport.WithLogger(slog.New(slog.DiscardHandler))
}

// TestReadmeWalkthrough ties the README's mutual-TLS walkthrough to what
// "dmutexpeer certs" writes and the flags TestThreeProcesses runs with.
func TestReadmeWalkthrough(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	readme := string(b)
	assert.Contains(t, readme, "./dmutexpeer certs -n 3 -dir certs")
	assert.Contains(t, readme, "-cert certs/peer-$i.crt -key certs/peer-$i.key -ca certs/ca.crt")

	dir := t.TempDir()
	args := writeCerts(t, dir, 3) // as TestThreeProcesses makes them
	for i, a := range args {
		want := []string{"-cert", "certs/peer-$i.crt", "-key", "certs/peer-$i.key", "-ca", "certs/ca.crt"}
		for j := range want {
			want[j] = strings.ReplaceAll(want[j], "$i", fmt.Sprint(i))
			if strings.HasPrefix(want[j], "certs/") {
				want[j] = filepath.Join(dir, want[j])
			}
		}
		assert.Equal(t, want, a, "peer %d", i)
	}
}
