package dmutex

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"slices"
	"sort"
)

// A spill is the part of a visited set that did not fit in memory: the
// fingerprints its table of hashes held when it was full, sorted, in one
// file (CheckConfig.SpillDir). It is the design of TLC's disk
// fingerprint set:
//
//   - A new fingerprint goes into the table in memory, as without a
//     spill. When the table is as big as it may grow and 3/4 full, its
//     fingerprints are sorted in place and merged with the file into a
//     new file, and the table starts again empty.
//   - A fingerprint not in the table is looked up in the file: memory
//     keeps the first fingerprint of each 4 KiB block of the file (2 bytes
//     a state with 64-bit fingerprints, 1 with 128), so a lookup reads
//     one block and searches it. The file is read as the system caches
//     it: while it fits in free memory, a lookup is a copy from the page
//     cache, not a disk read.
//
// The set is exact: a fingerprint is in the table or in the file, never
// both (it goes to the table only if the file does not have it, and the
// table empties into the file), and a lookup asks both. So a search with
// a spill visits the same states in the same order as one without.
//
// Each merge reads and writes the whole file, so a search of s states
// over a table of m slots writes about s²/(2·(3/4)m) fingerprints in all;
// with a table of hundreds of millions of slots that is a few times the
// file. After an error of the file system (err) the set takes nothing
// more, and the search returns the error; the file is removed by close,
// and never outlives the Check that made it.
type spill struct {
	dir      string
	f        *os.File      // nil until the first merge
	size     int           // bytes a fingerprint takes in the file: 8 or 16
	n        int64         // fingerprints in the file
	index    []fingerprint // index[i] is the first fingerprint of block i
	block    []byte        // one block, read back
	maxSlots uint64        // the most slots the table may have
	merges   int
	err      error // the first error of the file system
}

// spillBlock is the bytes of a block of the file: what a lookup reads.
const spillBlock = 4096

func newSpill(dir string, bits int, maxSlots uint64) *spill {
	return &spill{dir: dir, size: bits / 8, maxSlots: maxSlots, block: make([]byte, spillBlock)}
}

// perBlock is the fingerprints in a full block.
func (s *spill) perBlock() int64 { return spillBlock / int64(s.size) }

// compareFP orders fingerprints as the file does: by their first word,
// then by their second.
func compareFP(a, b fingerprint) int {
	if c := cmp.Compare(a[0], b[0]); c != 0 {
		return c
	}
	return cmp.Compare(a[1], b[1])
}

// decode reads the fingerprint at the start of b.
func (s *spill) decode(b []byte) fingerprint {
	var fp fingerprint
	fp[0] = binary.LittleEndian.Uint64(b)
	if s.size == 16 {
		fp[1] = binary.LittleEndian.Uint64(b[8:])
	}
	return fp
}

// encode appends fp to b.
func (s *spill) encode(b []byte, fp fingerprint) []byte {
	b = binary.LittleEndian.AppendUint64(b, fp[0])
	if s.size == 16 {
		b = binary.LittleEndian.AppendUint64(b, fp[1])
	}
	return b
}

// has reports whether the file holds fp (as the table stores it: see
// visited.stored). After an error it reports true, so that the search
// adds nothing more, runs out of states and returns the error.
func (s *spill) has(fp fingerprint) bool {
	if s.err != nil {
		return true
	}
	// The block to read is the last whose first fingerprint is at most fp.
	b := sort.Search(len(s.index), func(i int) bool { return compareFP(s.index[i], fp) > 0 }) - 1
	if b < 0 {
		return false
	}
	first := int64(b) * s.perBlock()
	k := min(s.perBlock(), s.n-first)
	buf := s.block[:k*int64(s.size)]
	if _, err := s.f.ReadAt(buf, first*int64(s.size)); err != nil {
		s.err = fmt.Errorf("dmutex: checker: reading the visited states spilled to %s: %w", s.f.Name(), err)
		return true
	}
	i := sort.Search(int(k), func(i int) bool { return compareFP(s.decode(buf[i*s.size:]), fp) >= 0 })
	return i < int(k) && s.decode(buf[i*s.size:]) == fp
}

// merge writes the file again with the fingerprints of sorted (in
// order, none of them in the file) merged in, and indexes it. It is not
// called after an error: has then takes nothing more into the table.
func (s *spill) merge(sorted iter.Seq[fingerprint], count int) {
	if err := s.mergeFile(sorted, count); err != nil {
		s.err = fmt.Errorf("dmutex: checker: spilling visited states to %s: %w", s.dir, err)
	}
}

func (s *spill) mergeFile(sorted iter.Seq[fingerprint], count int) (err error) {
	nf, err := os.CreateTemp(s.dir, "dmutexcheck-visited-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			nf.Close()
			os.Remove(nf.Name())
		}
	}()
	var old *bufio.Reader
	if s.f != nil {
		old = bufio.NewReaderSize(io.NewSectionReader(s.f, 0, s.n*int64(s.size)), 1<<20)
	}
	out := bufio.NewWriterSize(nf, 1<<20)
	total := s.n + int64(count)
	index := make([]fingerprint, 0, (total+s.perBlock()-1)/s.perBlock())
	var written int64
	buf := make([]byte, 0, 16)
	// A failed write is reported by every later one and by Flush
	// (bufio.Writer), so put leaves it to Flush.
	put := func(fp fingerprint) {
		if written%s.perBlock() == 0 {
			index = append(index, fp)
		}
		written++
		out.Write(s.encode(buf[:0], fp))
	}
	rec := make([]byte, s.size)
	next := func() (fingerprint, bool, error) {
		if old == nil {
			return fingerprint{}, false, nil
		}
		if _, err := io.ReadFull(old, rec); err != nil {
			if errors.Is(err, io.EOF) {
				return fingerprint{}, false, nil
			}
			return fingerprint{}, false, err
		}
		return s.decode(rec), true, nil
	}
	have, ok, err := next()
	if err != nil {
		return err
	}
	for fp := range sorted {
		for ok && compareFP(have, fp) < 0 {
			put(have)
			if have, ok, err = next(); err != nil {
				return err
			}
		}
		put(fp)
	}
	for ok {
		put(have)
		if have, ok, err = next(); err != nil {
			return err
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if written != total {
		return fmt.Errorf("wrote %d fingerprints, want %d", written, total)
	}
	s.close()
	s.f, s.n, s.index = nf, total, index
	s.merges++
	return nil
}

// bytes returns the memory the spill holds: its index and its block.
func (s *spill) bytes() int64 { return int64(cap(s.index))*16 + int64(cap(s.block)) }

// close removes the file.
func (s *spill) close() {
	if s.f != nil {
		s.f.Close()
		os.Remove(s.f.Name())
		s.f = nil
	}
}

// empty moves every fingerprint of the table into the file and leaves
// the table empty, at the size it has: they are gathered at the front
// of its array, sorted there, merged, and the array is cleared.
func (v *visited) empty() {
	if v.keys64 != nil {
		k := 0
		for _, fp := range v.keys64 {
			if fp != 0 {
				v.keys64[k] = fp
				k++
			}
		}
		front := v.keys64[:k]
		slices.Sort(front)
		v.spill.merge(func(yield func(fingerprint) bool) {
			for _, fp := range front {
				if !yield(fingerprint{fp}) {
					return
				}
			}
		}, k)
		clear(v.keys64)
	} else {
		k := 0
		for _, fp := range v.keys {
			if fp != (fingerprint{}) {
				v.keys[k] = fp
				k++
			}
		}
		slices.SortFunc(v.keys[:k], compareFP)
		v.spill.merge(slices.Values(v.keys[:k]), k)
		clear(v.keys)
	}
	v.n = 0
}

// spillSlots returns the most slots a table of bits-bit fingerprints may
// have beside a spill under a memory limit of budget bytes: the largest
// power of two whose table takes at most half the budget, so that the
// doubling that made it (the old table beside the new) took at most
// three quarters; at least 2^10.
func spillSlots(budget int64, bits int) uint64 {
	slots := uint64(1 << 10)
	for int64(2*slots)*int64(bits/8) <= budget/2 {
		slots *= 2
	}
	return slots
}
