//go:build unix

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHostileStateFiles puts in a state directory what another user of a
// shared directory might: a named pipe, symbolic links, a huge file. The
// peer reads none of them, and refuses to start, naming the file, at
// once rather than after -timeout (a pipe would hang a plain read) and
// without reading more than a fence's bytes (a link to /dev/zero would
// eat memory; a link to a file elsewhere would set the floor).
func TestHostileStateFiles(t *testing.T) {
	tests := []struct {
		name string
		make func(t *testing.T, path string)
		want string
	}{
		{"fifo", func(t *testing.T, path string) {
			require.NoError(t, syscall.Mkfifo(path, 0o644))
		}, "not a regular file"},
		{"symlink", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			require.NoError(t, os.WriteFile(target, []byte("77\n"), 0o644))
			require.NoError(t, os.Symlink(target, path))
		}, "not a regular file"},
		{"huge", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte("7"), 1<<20), 0o644))
		}, "more than 64 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "peer-0.fence"), []byte("5\n"), 0o644))
			tt.make(t, filepath.Join(dir, "peer-5.fence"))
			done := make(chan string, 1)
			go func() {
				var stdout, stderr bytes.Buffer
				run([]string{"-id", "0", "-peers", freeAddrs(t, 1)[0], "-insecure", "-entries", "1",
					"-log", filepath.Join(dir, "log"), "-state", dir, "-timeout", "30s"}, &stdout, &stderr)
				done <- stderr.String()
			}()
			select {
			case stderr := <-done:
				assert.Contains(t, stderr, "peer-5.fence: "+tt.want)
			case <-time.After(20 * time.Second):
				require.FailNow(t, "the peer is still reading its state directory after 20 s")
			}
		})
	}
}
