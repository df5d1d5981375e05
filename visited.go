package dmutex

import (
	"math"
	"sync"
	"sync/atomic"
)

// visited is the checker's set of explored states: an open-addressing
// hash table of fingerprints with linear probing, and, when the checker
// keeps a graph, each state's id beside its fingerprint. A fingerprint
// has 128 bits (keys) or 64 (keys64; CheckConfig.Fingerprint). The table
// holds no pointers, so the garbage collector never scans it, and a state
// costs 16 bytes (8 with 64-bit fingerprints; 4 more with ids) over a
// load between 3/8 and 3/4, instead of the 50 or so of a Go map.
type visited struct {
	keys   []fingerprint // 128 bits; the zero fingerprint marks an empty slot
	keys64 []uint64      // 64 bits, instead of keys; zero marks an empty slot
	ids    []int32       // nil without ids
	n      int
	mask   uint64
	// spill, if not nil, holds the fingerprints the table held when it
	// was full at spill.maxSlots slots (spill.go); the table has no ids.
	spill *spill
	// parts, if not nil, are the tables of a sharedVisited, each holding
	// the fingerprints whose top six bits are its index, and this table
	// holds none itself: the table of the parallel search with the graph,
	// in which states are only looked up and renumbered (pargraph.go).
	parts []*visited
}

// A fingerprint is a hash of a state's encoding: 128 bits, or 64 in its
// first word (the second is then zero). Never zero in a visited table.
type fingerprint [2]uint64

func newVisited(withIDs bool, bits int) *visited {
	return newVisitedSize(withIDs, bits, 1<<16)
}

// newVisitedSize is newVisited with a table of size slots to start with
// (a power of two).
func newVisitedSize(withIDs bool, bits int, size uint64) *visited {
	v := &visited{mask: size - 1}
	if bits == 64 {
		v.keys64 = make([]uint64, size)
	} else {
		v.keys = make([]fingerprint, size)
	}
	if withIDs {
		v.ids = make([]int32, size)
	}
	return v
}

// nonzero maps the one fingerprint that marks an empty slot to another.
func nonzero(fp fingerprint) fingerprint {
	if fp == (fingerprint{}) {
		fp[1] = 1
	}
	return fp
}

// nonzero64 maps the one 64-bit fingerprint that marks an empty slot to
// another.
func nonzero64(fp uint64) uint64 {
	if fp == 0 {
		return 1
	}
	return fp
}

// slot returns the slot that holds fp, or the empty slot where it would
// go, and whether fp is there.
func (v *visited) slot(fp fingerprint) (uint64, bool) {
	if v.keys64 != nil {
		k := nonzero64(fp[0])
		for i := k & v.mask; ; i = (i + 1) & v.mask {
			switch v.keys64[i] {
			case k:
				return i, true
			case 0:
				return i, false
			}
		}
	}
	fp = nonzero(fp)
	for i := fp[0] & v.mask; ; i = (i + 1) & v.mask {
		switch v.keys[i] {
		case fp:
			return i, true
		case fingerprint{}:
			return i, false
		}
	}
}

// stored returns fp as the table stores it: not zero, and with 64-bit
// fingerprints its first word alone.
func (v *visited) stored(fp fingerprint) fingerprint {
	if v.keys64 != nil {
		return fingerprint{nonzero64(fp[0])}
	}
	return nonzero(fp)
}

// get returns fp's id (0 without ids) and whether fp is in the set.
func (v *visited) get(fp fingerprint) (int32, bool) {
	if v.parts != nil {
		return v.parts[fp[0]>>58].get(fp)
	}
	i, ok := v.slot(fp)
	if !ok && v.spill != nil {
		return 0, v.spill.has(v.stored(fp))
	}
	if !ok || v.ids == nil {
		return 0, ok
	}
	return v.ids[i], true
}

// add puts fp, with id, into the set unless it is there already, and
// returns the id it has and whether it was there.
func (v *visited) add(fp fingerprint, id int32) (int32, bool) {
	i, ok := v.slot(fp)
	if ok {
		if v.ids != nil {
			return v.ids[i], true
		}
		return 0, true
	}
	if v.spill != nil && v.spill.has(v.stored(fp)) {
		return 0, true
	}
	if v.keys64 != nil {
		v.keys64[i] = nonzero64(fp[0])
	} else {
		v.keys[i] = nonzero(fp)
	}
	if v.ids != nil {
		v.ids[i] = id
	}
	v.n++
	if uint64(v.n)*4 > (v.mask+1)*3 {
		if v.full() {
			v.empty()
		} else {
			v.grow()
		}
	}
	return id, false
}

// failed returns the error of the spill's file system, if any: the set
// has taken nothing since, and the search returns the error.
func (v *visited) failed() error {
	if v.spill != nil {
		return v.spill.err
	}
	return nil
}

// spilled returns the fingerprints in the spill's file (0 without a
// spill, or before the search made its set).
func (v *visited) spilled() int {
	if v == nil || v.spill == nil {
		return 0
	}
	return int(v.spill.n)
}

// merges returns how often the table was merged into the spill's file.
func (v *visited) merges() int {
	if v == nil || v.spill == nil {
		return 0
	}
	return v.spill.merges
}

// full reports whether the table is as big as its spill lets it grow.
func (v *visited) full() bool { return v.spill != nil && v.mask+1 >= v.spill.maxSlots }

// len returns the number of fingerprints in the set.
func (v *visited) len() int {
	if v.spill != nil {
		return v.n + int(v.spill.n)
	}
	return v.n
}

// bytes returns the memory the set holds.
func (v *visited) bytes() int64 {
	b := int64(len(v.keys))*16 + int64(len(v.keys64))*8 + int64(len(v.ids))*4
	for _, p := range v.parts {
		b += p.bytes()
	}
	if v.spill != nil {
		b += v.spill.bytes()
	}
	return b
}

// growBytes returns what the table's next doubling adds at its peak
// (the new table, twice this one, beside this one) if the next margin
// additions may set it off, else 0: so a search that counts it stops at
// its memory limit before a doubling that would pass it, not after.
func (v *visited) growBytes(margin int) int64 {
	if !v.full() && uint64(v.n+margin)*4 > (v.mask+1)*3 {
		return 2 * v.bytes()
	}
	return 0
}

// grow doubles the table. A big table's arrays are mapped (bigarray.go)
// and the old ones returned to the system as soon as they are copied,
// so the peak is the old table and the new, not that and the garbage of
// the ones before.
func (v *visited) grow() {
	old, old64, oldIDs := v.keys, v.keys64, v.ids
	size := 2 * (v.mask + 1)
	v.mask = size - 1
	if old64 != nil {
		v.keys64 = makeArray[uint64](int(size))
	} else {
		v.keys = makeArray[fingerprint](int(size))
	}
	if oldIDs != nil {
		v.ids = makeArray[int32](int(size))
	}
	for k := range v.mask/2 + 1 {
		var i uint64
		if old64 != nil {
			fp := old64[k]
			if fp == 0 {
				continue
			}
			for i = fp & v.mask; v.keys64[i] != 0; i = (i + 1) & v.mask {
			}
			v.keys64[i] = fp
		} else {
			fp := old[k]
			if fp == (fingerprint{}) {
				continue
			}
			for i = fp[0] & v.mask; v.keys[i] != (fingerprint{}); i = (i + 1) & v.mask {
			}
			v.keys[i] = fp
		}
		if oldIDs != nil {
			v.ids[i] = oldIDs[k]
		}
	}
	unmapArray(old)
	unmapArray(old64)
	unmapArray(oldIDs)
}

// release returns the table's memory to the system if it was mapped
// (bigarray.go), and removes its spill's file; the set is unusable
// afterwards.
func (v *visited) release() {
	if v.spill != nil {
		v.spill.close()
	}
	for _, p := range v.parts {
		p.release()
	}
	unmapArray(v.keys)
	unmapArray(v.keys64)
	unmapArray(v.ids)
	v.keys, v.keys64, v.ids = nil, nil, nil
}

// collisionChance bounds the chance that two of s states got one
// fingerprint of the given bits, were fingerprints independent and
// uniform (maphash under a seed drawn for each Check): each of the s(s-1)/2
// pairs collides with chance 2^-bits, so by the union bound the chance is
// at most s(s-1)/2^(bits+1) (TLC's s²/2^(bits+1), less the pairs of a
// state with itself), capped at 1. It is also the chance worth knowing:
// a collision hides a state only when a new state is looked up and
// matches one of the states stored before it, and the i-th new state
// meets i-1 of them, which sums to the same bound. While it is small the
// bound is close to exact: the chance itself is at least 1-e^-x for the
// bound x, which differs from x by less than x²/2.
func collisionChance(s, bits int) float64 {
	if s < 2 {
		return 0
	}
	x := float64(s) * float64(s-1) / math.Pow(2, float64(bits+1))
	return min(x, 1)
}

// renumber replaces each id in the table by perm[id].
func (v *visited) renumber(perm []int32) {
	for _, p := range v.parts {
		p.renumber(perm)
	}
	if v.ids == nil {
		return
	}
	for i, id := range v.ids {
		if v.keys64 != nil && v.keys64[i] == 0 || v.keys != nil && v.keys[i] == (fingerprint{}) {
			continue
		}
		v.ids[i] = perm[id]
	}
}

// sharedVisited is a visited set that goroutines share: 64 tables, each
// behind its own lock, chosen by a fingerprint's top bits, so that two
// workers rarely want the same lock (and then for the few nanoseconds of
// a probe), and a table that grows stalls only the workers that want it.
type sharedVisited struct {
	shards [64]struct {
		mu sync.Mutex
		v  *visited
		_  [48]byte // a cache line each
	}
	bytes atomic.Int64
}

// newSharedVisited returns an empty set of fingerprints of the given
// bits, with each one's state number if withIDs.
func newSharedVisited(bits int, withIDs bool) *sharedVisited {
	s := new(sharedVisited)
	for i := range s.shards {
		s.shards[i].v = newVisitedSize(withIDs, bits, 1<<10)
		s.bytes.Add(s.shards[i].v.bytes())
	}
	return s
}

// addID puts fp into a set with ids unless it is there already, with
// the number next.Add(1)-1 taken under the shard's lock, and returns
// fp's number and whether it was there. A goroutine that finds fp
// finds its number with it: both are written under that lock.
func (s *sharedVisited) addID(fp fingerprint, next *atomic.Int64) (int32, bool) {
	sh := &s.shards[fp[0]>>58]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if id, seen := sh.v.get(fp); seen {
		return id, true
	}
	before := sh.v.bytes()
	id := int32(next.Add(1) - 1)
	sh.v.add(fp, id)
	if after := sh.v.bytes(); after != before {
		s.bytes.Add(after - before)
	}
	return id, false
}

// table returns the set as one visited table for lookups (get,
// renumber, len, bytes, release): a table made of the shards, each
// fingerprint in the same shard as here. Nobody may use the set
// afterwards.
func (s *sharedVisited) table() *visited {
	v := &visited{parts: make([]*visited, len(s.shards))}
	for i := range s.shards {
		v.parts[i] = s.shards[i].v
		v.n += v.parts[i].n
	}
	return v
}

// release returns the shards' mapped tables to the system; the set is
// unusable afterwards.
func (s *sharedVisited) release() {
	for i := range s.shards {
		s.shards[i].v.release()
	}
}

// add puts fp into the set and reports whether it was there already.
func (s *sharedVisited) add(fp fingerprint) bool {
	sh := &s.shards[fp[0]>>58]
	sh.mu.Lock()
	before := sh.v.bytes()
	_, seen := sh.v.add(fp, 0)
	if after := sh.v.bytes(); after != before {
		s.bytes.Add(after - before)
	}
	sh.mu.Unlock()
	return seen
}

// len returns the number of fingerprints in the set; the caller makes
// sure nobody adds any meanwhile.
func (s *sharedVisited) len() int {
	n := 0
	for i := range s.shards {
		n += s.shards[i].v.len()
	}
	return n
}
