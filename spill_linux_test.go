package dmutex

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSpillWriteFails: a merge whose writes fail (here past a file size
// limit of 4 KiB, EFBIG; the Go runtime ignores SIGXFSZ) fails with that
// error, which Flush reports, and removes the file it began, rather than
// keep a file short of the states it was given. Not parallel: the limit
// is the whole process's, and no parallel test runs beside it.
func TestSpillWriteFails(t *testing.T) {
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old))
	dir := t.TempDir()
	s := newSpill(dir, 64, 1<<10)
	t.Cleanup(s.close)
	func() {
		lim := old
		lim.Cur = 4096
		require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim))
		defer func() { require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old)) }()
		s.merge(func(yield func(fingerprint) bool) {
			for i := range 1000 {
				if !yield(fingerprint{uint64(2*i + 3)}) {
					return
				}
			}
		}, 1000)
	}()
	require.ErrorIs(t, s.err, syscall.EFBIG)
	assert.Contains(t, s.err.Error(), "spilling visited states to "+dir)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "the file the failed merge began is removed")
}
