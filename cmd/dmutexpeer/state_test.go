package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runCluster runs n peers in this process, each entering entries times,
// sharing logPath and stateDir, and requires that all succeed.
func runCluster(t *testing.T, alg string, n, entries int, logPath, stateDir string) {
	t.Helper()
	peers := strings.Join(freeAddrs(t, n), ",")
	errs := make(chan error, n)
	for id := range n {
		go func() {
			var stdout, stderr bytes.Buffer
			code := run([]string{"-id", fmt.Sprint(id), "-peers", peers, "-alg", alg, "-insecure",
				"-entries", fmt.Sprint(entries), "-log", logPath, "-state", stateDir, "-timeout", "2m"}, &stdout, &stderr)
			if code != 0 {
				errs <- fmt.Errorf("peer %d exited with %d: %s", id, code, stderr.String())
				return
			}
			errs <- nil
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	checkLog(t, logPath, n, entries)
}

// fences returns the fencing tokens of a log's begin lines.
func fences(t *testing.T, path string) []uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var fs []uint64
	for _, m := range regexp.MustCompile(`(?m)^begin \d+ \d+ (\d+) `).FindAllStringSubmatch(string(b), -1) {
		f, err := strconv.ParseUint(m[1], 10, 64)
		require.NoError(t, err)
		fs = append(fs, f)
	}
	return fs
}

// TestStateAcrossRestarts runs a cluster twice with one -state directory:
// every fence of the second run is above every fence of the first, as a
// store that rejects lower fences needs, for a token algorithm (whose
// token restarts at peer 0, which may not have seen the last fence) and
// a permission one.
func TestStateAcrossRestarts(t *testing.T) {
	for _, alg := range []string{"suzuki-kasami", "ricart-agrawala"} {
		t.Run(alg, func(t *testing.T) {
			dir := t.TempDir()
			state := filepath.Join(dir, "state")
			first, second := filepath.Join(dir, "first.log"), filepath.Join(dir, "second.log")
			runCluster(t, alg, 3, 4, first, state)
			runCluster(t, alg, 3, 4, second, state)
			before, after := fences(t, first), fences(t, second)
			require.Len(t, before, 12)
			require.Len(t, after, 12)
			assert.Greater(t, after[0], before[len(before)-1], "first fence after the restart")
			names, err := filepath.Glob(filepath.Join(state, "*"))
			require.NoError(t, err)
			assert.Len(t, names, 3, "one state file per peer, no temporary left: %v", names)
		})
	}
}

// TestBadState checks that a state file that holds no number stops the
// peer with an error that names it.
func TestBadState(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "peer-1.fence"), []byte("lots\n"), 0o644))
	var stdout, stderr bytes.Buffer
	code := run([]string{"-id", "0", "-peers", freeAddrs(t, 1)[0], "-insecure", "-entries", "1",
		"-log", filepath.Join(dir, "log"), "-state", dir}, &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), `peer-1.fence: "lots" is not a fence`)
}

// TestStaleTemporaryStateFiles leaves the temporary files of a peer
// killed during saveFence: the next process of that peer removes its own
// and leaves another peer's alone, since that peer may be writing it.
func TestStaleTemporaryStateFiles(t *testing.T) {
	dir := t.TempDir()
	own := []string{".peer-0.fence.123", ".peer-0.fence.456"}
	other := ".peer-1.fence.789"
	for _, name := range append(own, other) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("9"), 0o644))
	}
	floor, err := readFloor(context.Background(), dir, 0)
	require.NoError(t, err)
	assert.Zero(t, floor, "a temporary file is not a fence")
	names, err := filepath.Glob(filepath.Join(dir, ".peer-*"))
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(dir, other)}, names)
}

// TestSaveFenceSyncsTheDirectory checks that saveFence syncs the state
// directory after the rename, so that the new floor is what survives a
// power loss.
func TestSaveFenceSyncsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	var synced []string
	old := syncDir
	t.Cleanup(func() { syncDir = old })
	syncDir = func(d string) error {
		b, err := os.ReadFile(filepath.Join(d, "peer-3.fence"))
		require.NoError(t, err, "the directory synced before the rename")
		synced = append(synced, d+": "+strings.TrimSpace(string(b)))
		return old(d)
	}
	c := &config{id: 3, stateDir: dir}
	require.NoError(t, c.saveFence(41))
	require.NoError(t, c.saveFence(42))
	assert.Equal(t, []string{dir + ": 41", dir + ": 42"}, synced)
}
