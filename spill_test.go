package dmutex

import (
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSpilledSetIsExact: a visited set whose table may not grow past
// 2^12 slots, and so empties into its file again and again, finds every
// fingerprint it was given, in the table or in the file, and no other:
// the first and last of the file, those at the start of a block, and
// those just beside them that it was never given. The file stays sorted
// and holds each fingerprint once. With 64-bit and 128-bit fingerprints.
func TestSpilledSetIsExact(t *testing.T) {
	t.Parallel()
	for _, bits := range []int{64, 128} {
		dir := t.TempDir()
		v := newVisitedSize(false, bits, 1<<10)
		v.spill = newSpill(dir, bits, 1<<12)
		// Odd multiples of a big odd number, so that fp(i)+1 is never
		// an fp(j); the second word tells 128-bit ones apart only.
		fp := func(i int) fingerprint { return fingerprint{uint64(2*i+1) * 0x9e3779b97f4a7c15, uint64(i) << 1} }
		n := 20_000 // six merges
		for i := range n {
			if _, seen := v.add(fp(i), 0); seen {
				t.Fatalf("%d bits: %d seen before it was added", bits, i)
			}
		}
		require.NoError(t, v.failed())
		assert.Equal(t, n, v.len())
		assert.Greater(t, v.merges(), 4, "%d bits", bits)
		assert.Equal(t, n, v.n+v.spilled())
		assert.Equal(t, uint64(1<<12), v.mask+1, "the table grows to its spill's limit, and no further")

		// The file: sorted, each once, every one in it also found.
		raw, err := os.ReadFile(v.spill.f.Name())
		require.NoError(t, err)
		size := bits / 8
		require.Len(t, raw, v.spilled()*size)
		file := make([]fingerprint, 0, v.spilled())
		for b := raw; len(b) > 0; b = b[size:] {
			file = append(file, v.spill.decode(b))
		}
		require.True(t, slices.IsSortedFunc(file, compareFP))
		require.Len(t, slices.CompactFunc(slices.Clone(file), func(a, b fingerprint) bool { return a == b }), len(file))
		for k, first := range v.spill.index {
			require.Equal(t, file[int64(k)*v.spill.perBlock()], first, "block %d", k)
		}

		for i := range n {
			if _, ok := v.get(fp(i)); !ok {
				t.Fatalf("%d bits: %d was added but is not found", bits, i)
			}
			if _, seen := v.add(fp(i), 0); !seen {
				t.Fatalf("%d bits: %d was added but is added again", bits, i)
			}
		}
		assert.Equal(t, n, v.len(), "adding again adds nothing")
		// Beside each fingerprint of the file: one that differs in the
		// last bit of the word the file orders by last.
		for _, f := range file {
			near := f
			if bits == 64 {
				near[0]++
			} else {
				near[1]++
			}
			_, ok := v.get(near)
			require.False(t, ok, "%d bits: %x was never added", bits, near)
		}
		for _, f := range []fingerprint{{}, {1, 0}, {math.MaxUint64, math.MaxUint64}, {math.MaxUint64, 0}} {
			_, ok := v.get(f)
			assert.False(t, ok, "%d bits: %x", bits, f)
		}
		if bits == 128 {
			// 600 fingerprints that share their first word, over three
			// blocks of the file: the second word orders them.
			const word = 0x5555_5555_5555_5555
			for i := range 600 {
				_, seen := v.add(fingerprint{word, uint64(i*7919%600)*2 + 1}, 0)
				require.False(t, seen, "%d", i)
			}
			v.empty()
			for i := range 600 {
				_, ok := v.get(fingerprint{word, uint64(i)*2 + 1})
				require.True(t, ok, "%d", i)
				_, ok = v.get(fingerprint{word, uint64(i) * 2})
				require.False(t, ok, "%d", i)
			}
			n += 600
		}
		assert.Equal(t, n, v.len())
		assert.Equal(t, int64(v.mask+1)*int64(size)+int64(cap(v.spill.index))*16+spillBlock, v.bytes())
		assert.Zero(t, v.growBytes(1<<20), "a full table does not grow")

		name := v.spill.f.Name()
		v.release()
		_, err = os.Stat(name)
		assert.ErrorIs(t, err, os.ErrNotExist, "release removes the file")
	}
}

// TestSpillSearchAgrees: a safety-only search whose table spills to a
// file again and again visits the same states, makes the same
// transitions and gives the same verdicts and counterexample as the
// search in memory, and leaves nothing in the directory.
func TestSpillSearchAgrees(t *testing.T) {
	t.Parallel()
	type spillCase struct {
		cc    CheckConfig
		slots uint64 // the table's most: a merge every 3/4 of that
	}
	cases := []spillCase{
		{CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 1, Network: NetworkUnordered}, 1 << 8},
		{CheckConfig{Variant: "lamport-unordered"}, 8}, // refuted after 16 states
		{CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 2, PartialOrder: true, Fingerprint: 64}, 1 << 11},
	}
	if !raceLight() {
		cases = append(cases,
			spillCase{CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 2, Network: NetworkUnordered}, 1 << 11},
			spillCase{CheckConfig{Algorithm: Lamport, N: 3, Requests: 1, Fingerprint: 64}, 1 << 15})
	}
	for _, sc := range cases {
		cc := sc.cc
		cc.SafetyOnly = true
		cc.MaxStates = -1
		want, err := Check(context.Background(), cc)
		require.NoError(t, err)

		dir := t.TempDir()
		cc.SpillDir, cc.spillSlots = dir, sc.slots
		got, err := Check(context.Background(), cc)
		require.NoError(t, err)
		name := want.Algorithm + "/" + want.Variant
		t.Logf("%s: %d states, %.2f s in memory, %.2f s spilled (%d merges)", name, got.States, want.Seconds, got.Seconds, got.SpillMerges)
		assert.Positive(t, got.SpillMerges, name)
		assert.Positive(t, got.Spilled, name)
		assert.Less(t, got.Spilled, got.States, name)
		got.Spilled, got.SpillMerges, got.Seconds, want.Seconds = 0, 0, 0, 0
		assert.Equal(t, want, got, name)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Empty(t, entries, "%s: the spill's file outlived Check", name)
	}
}

// TestSpillLeavesNothingBehind: a search that stops early, at its state
// limit, removes its file too (a refuted one: TestSpillSearchAgrees).
func TestSpillLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cc := CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 2, SafetyOnly: true, MaxStates: 20_000, SpillDir: dir, spillSlots: 1 << 11}
	r, err := Check(context.Background(), cc)
	require.NoError(t, err)
	assert.Equal(t, StoppedAtStateLimit, r.Stopped)
	assert.Positive(t, r.SpillMerges)

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
}

// TestSpillErrors: a file system that fails under the spill stops the
// search with an error that names the directory or the file, rather
// than a result that reads as checked.
func TestSpillErrors(t *testing.T) {
	t.Parallel()
	t.Run("merge", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "spill")
		require.NoError(t, os.Mkdir(dir, 0o755))
		c, err := newChecker(CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 2, SafetyOnly: true, SpillDir: dir, spillSlots: 1 << 11})
		require.NoError(t, err)
		t.Cleanup(c.release)
		require.NoError(t, os.Remove(dir)) // after the check of the configuration
		err = c.explore(context.Background())
		require.Error(t, err)
		assert.Contains(t, err.Error(), "spilling visited states to "+dir)
		assert.ErrorIs(t, err, os.ErrNotExist)
	})
	t.Run("takes nothing more", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "spill")
		v := newVisitedSize(false, 64, 1<<10)
		v.spill = newSpill(dir, 64, 1<<10) // no such directory: the first merge fails
		t.Cleanup(v.release)
		i := 0
		for ; v.failed() == nil; i++ {
			v.add(fingerprint{uint64(i+1) * 0x9e3779b97f4a7c15}, 0)
		}
		assert.Equal(t, 769, i, "the add past 3/4 of 2^10 slots merges, and the merge fails")
		_, seen := v.add(fingerprint{0x1234}, 0)
		assert.True(t, seen, "after an error the set takes nothing more")
		_, ok := v.get(fingerprint{0x1234})
		assert.True(t, ok)
	})
	t.Run("merge leaves no file", func(t *testing.T) {
		dir := t.TempDir()
		v := newVisitedSize(false, 64, 1<<10)
		v.spill = newSpill(dir, 64, 1<<10)
		t.Cleanup(v.release)
		for i := range 1000 {
			v.add(fingerprint{uint64(i+1) * 0x9e3779b97f4a7c15}, 0)
		}
		require.Equal(t, 1, v.merges())
		// The file, open for writing only: the next merge cannot read
		// it back, and must remove the file it began.
		old := v.spill.f
		wo, err := os.OpenFile(old.Name(), os.O_WRONLY, 0)
		require.NoError(t, err)
		v.spill.f = wo
		t.Cleanup(func() { old.Close() })
		v.keys64[0], v.keys64[1], v.n = 3, 5, 2
		v.empty()
		err = v.failed()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "spilling visited states to "+dir)
		assert.ErrorIs(t, err, syscall.EBADF, "the read of the old file failed, at its first fingerprint")
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, 1, "the file the failed merge began is removed")
		assert.Equal(t, filepath.Base(old.Name()), entries[0].Name())
	})
	// The old file cut inside a fingerprint: the merge fails with the
	// read's error, whether it meets the cut before the new
	// fingerprints or after them; cut between two, it fails at the count.
	for _, tt := range []struct {
		name string
		fp   uint64
		cut  int64
	}{{"cut before the new", 1 << 40, 4004}, {"cut after the new", 1, 4004}, {"cut between two", 1, 4000}} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newSpill(dir, 64, 1<<10)
			t.Cleanup(s.close)
			s.merge(func(yield func(fingerprint) bool) {
				for i := range 1000 {
					if !yield(fingerprint{uint64(2*i + 3)}) {
						return
					}
				}
			}, 1000)
			require.NoError(t, s.err)
			require.NoError(t, os.Truncate(s.f.Name(), tt.cut))
			s.merge(slices.Values([]fingerprint{{tt.fp}}), 1)
			require.Error(t, s.err)
			if tt.cut%8 != 0 {
				require.ErrorIs(t, s.err, io.ErrUnexpectedEOF)
			} else {
				// The file ends where a fingerprint would start: read as
				// its end, and found short by the count.
				require.ErrorContains(t, s.err, "wrote 501 fingerprints, want 1001")
			}
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Len(t, entries, 1, "the file the failed merge began is removed")
		})
	}
	t.Run("lookup", func(t *testing.T) {
		v := newVisitedSize(false, 64, 1<<10)
		v.spill = newSpill(t.TempDir(), 64, 1<<10)
		t.Cleanup(v.release)
		for i := range 1000 {
			v.add(fingerprint{uint64(i+1) * 0x9e3779b97f4a7c15}, 0)
		}
		require.Positive(t, v.merges())
		name := v.spill.f.Name()
		require.NoError(t, v.spill.f.Close())
		_, seen := v.add(fingerprint{0x9e3779b97f4a7c15}, 0)
		assert.True(t, seen, "after an error the set takes nothing more")
		err := v.failed()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "reading the visited states spilled to "+name)
		assert.ErrorIs(t, err, os.ErrClosed)
	})
}

// TestSpillConfig: SpillDir is refused, naming it, where the search
// would not spill (the graph, workers, no memory limit) or cannot
// (no such directory, a file).
func TestSpillConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	base := CheckConfig{Algorithm: RicartAgrawala, N: 3, SafetyOnly: true, SpillDir: dir}
	for _, tt := range []struct {
		name string
		edit func(*CheckConfig)
		want string
	}{
		{"graph", func(cc *CheckConfig) { cc.SafetyOnly = false }, "without SafetyOnly"},
		{"workers", func(cc *CheckConfig) { cc.Workers = 2 }, "with 2 workers"},
		{"no memory limit", func(cc *CheckConfig) { cc.MaxMemory = -1 }, "without a memory limit (MaxMemory -1)"},
		{"missing", func(cc *CheckConfig) { cc.SpillDir = filepath.Join(dir, "nope") }, filepath.Join(dir, "nope")},
		{"file", func(cc *CheckConfig) { cc.SpillDir = file }, `SpillDir "` + file + `" is not a directory`},
	} {
		cc := base
		tt.edit(&cc)
		_, err := Check(context.Background(), cc)
		require.ErrorIs(t, err, ErrInvalidConfig, tt.name)
		assert.Contains(t, err.Error(), tt.want, tt.name)
		if tt.name != "missing" && tt.name != "file" {
			assert.Contains(t, err.Error(), dir, tt.name)
		}
	}
}

// TestSpillSlots: the table beside a spill takes at most half the
// memory limit, so that the doubling that made it took at most three
// quarters, and never less than 2^10 slots.
func TestSpillSlots(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		budget int64
		bits   int
		want   uint64
	}{
		{0, 64, 1 << 10},
		{1 << 20, 64, 1 << 16},
		{1 << 20, 128, 1 << 15},
		{1<<20 - 1, 128, 1 << 14},
		{1 << 24, 64, 1 << 20},
		{1<<24 - 1, 64, 1 << 19},
		{1 << 24, 128, 1 << 19},
		{DefaultMaxMemory, 64, 1 << 26},
		{16 << 30, 64, 1 << 30},
	} {
		assert.Equal(t, tt.want, spillSlots(tt.budget, tt.bits), "%d bytes, %d bits", tt.budget, tt.bits)
	}
}

// TestSpillIndex: a merge indexes the first fingerprint of each block of
// the file, in an index of exactly that many (the memory the search
// counts), for files that end inside a block, at its end, and one past.
func TestSpillIndex(t *testing.T) {
	t.Parallel()
	for _, count := range []int{1, 511, 512, 513, 1024, 1025} {
		s := newSpill(t.TempDir(), 64, 1<<10)
		s.merge(func(yield func(fingerprint) bool) {
			for i := range count {
				if !yield(fingerprint{uint64(2*i + 1)}) {
					return
				}
			}
		}, count)
		require.NoError(t, s.err)
		blocks := (count + 511) / 512
		require.Len(t, s.index, blocks, "%d fingerprints", count)
		assert.Equal(t, blocks, cap(s.index), "%d fingerprints", count)
		for b, first := range s.index {
			assert.Equal(t, fingerprint{uint64(2*512*b + 1)}, first)
		}
		assert.True(t, s.has(fingerprint{uint64(2*count - 1)}))
		assert.False(t, s.has(fingerprint{uint64(2 * count)}))
		assert.Equal(t, int64(blocks*16+spillBlock), s.bytes())
		s.close()
	}
}

// TestBrokenAtTheStart: a world broken before any step (no token
// anywhere) is refuted at 0 states, with and without a spill, before
// the search has a visited set: the result reads nothing from it.
func TestBrokenAtTheStart(t *testing.T) {
	t.Parallel()
	for _, cc := range []CheckConfig{{}, {SafetyOnly: true, SpillDir: t.TempDir()}} {
		cc.Algorithm, cc.N, cc.Requests = Centralized, 2, 1
		cc.build = func(int, int) machine { return &dropper{} }
		res, err := Check(context.Background(), cc)
		require.NoError(t, err)
		require.NotNil(t, res.Violation)
		assert.Equal(t, "safety", res.Violation.Property)
		assert.Equal(t, Refuted, res.Safe)
		assert.Zero(t, res.States)
		assert.Zero(t, res.Spilled)
		assert.Zero(t, res.SpillMerges)
	}
}

// TestGrowBytes: what the table's next doubling adds is counted once the
// next margin additions may set it off, and never for a table as big as
// its spill lets it be, which empties instead.
func TestGrowBytes(t *testing.T) {
	t.Parallel()
	for _, spill := range []bool{false, true} {
		v := newVisitedSize(false, 64, 1<<10)
		if spill {
			v.spill = newSpill(t.TempDir(), 64, 1<<11)
			t.Cleanup(v.release)
		}
		for i := range 700 {
			v.add(fingerprint{uint64(i+1) * 0x9e3779b97f4a7c15}, 0)
		}
		assert.Equal(t, 2*v.bytes(), v.growBytes(100), "spill %v: 800 of 1024 slots pass 3/4", spill)
		assert.Zero(t, v.growBytes(10), "spill %v: 710 of 1024 slots do not", spill)
		if spill {
			for i := range 700 { // the table doubles to 2^11 slots, its most
				v.add(fingerprint{uint64(i+1) * 0x51_7cc1_b727_220a}, 0)
			}
			require.Equal(t, uint64(1<<11), v.mask+1)
			assert.Zero(t, v.growBytes(1000), "a full table empties, it does not double")
		}
	}
}

// TestSpillUnderMaxMemory: without a test's table size, MaxMemory sets
// it: under 1 MiB, a table of 2^15 128-bit hashes (half the limit),
// merged each time it passes 3/4 full, three times over the 95,401
// states of Ricart-Agrawala n = 3, r = 2 over an unordered network.
func TestSpillUnderMaxMemory(t *testing.T) {
	t.Parallel()
	skipRaceLight(t, "95,401 states, seconds under -race")
	r, err := Check(context.Background(), CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 2, Network: NetworkUnordered,
		SafetyOnly: true, MaxMemory: 1 << 20, SpillDir: t.TempDir()})
	require.NoError(t, err)
	assert.True(t, r.Complete)
	assert.Equal(t, 95401, r.States)
	assert.Equal(t, 3, r.SpillMerges)
	assert.Equal(t, 3*24577, r.Spilled)
}
