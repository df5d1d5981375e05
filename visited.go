package dmutex

// visited is the checker's set of explored states: an open-addressing
// hash table of 128-bit fingerprints with linear probing, and, when the
// checker keeps a graph, each state's id beside its fingerprint. It holds
// no pointers, so the garbage collector never scans it, and a state costs
// 16 bytes (20 with ids) over a load between 3/8 and 3/4, instead of the
// 50 or so of a Go map.
type visited struct {
	keys []fingerprint // the zero fingerprint marks an empty slot
	ids  []int32       // nil without ids
	n    int
	mask uint64
}

// A fingerprint is a 128-bit hash of a state's encoding; never zero in a
// visited table.
type fingerprint [2]uint64

func newVisited(withIDs bool) *visited {
	const size = 1 << 16
	v := &visited{keys: make([]fingerprint, size), mask: size - 1}
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

// get returns fp's id (0 without ids) and whether fp is in the table.
func (v *visited) get(fp fingerprint) (int32, bool) {
	fp = nonzero(fp)
	for i := fp[0] & v.mask; ; i = (i + 1) & v.mask {
		switch v.keys[i] {
		case fp:
			if v.ids != nil {
				return v.ids[i], true
			}
			return 0, true
		case fingerprint{}:
			return 0, false
		}
	}
}

// add puts fp, with id, into the table unless it is there already, and
// returns the id it has and whether it was there.
func (v *visited) add(fp fingerprint, id int32) (int32, bool) {
	fp = nonzero(fp)
	i := fp[0] & v.mask
	for ; ; i = (i + 1) & v.mask {
		switch v.keys[i] {
		case fp:
			if v.ids != nil {
				return v.ids[i], true
			}
			return 0, true
		case fingerprint{}:
		default:
			continue
		}
		break
	}
	v.keys[i] = fp
	if v.ids != nil {
		v.ids[i] = id
	}
	v.n++
	if uint64(v.n)*4 > (v.mask+1)*3 {
		v.grow()
	}
	return id, false
}

// len returns the number of fingerprints in the table.
func (v *visited) len() int { return v.n }

// grow doubles the table.
func (v *visited) grow() {
	old, oldIDs := v.keys, v.ids
	size := 2 * len(old)
	v.keys = make([]fingerprint, size)
	v.mask = uint64(size - 1)
	if oldIDs != nil {
		v.ids = make([]int32, size)
	}
	for k, fp := range old {
		if fp == (fingerprint{}) {
			continue
		}
		i := fp[0] & v.mask
		for v.keys[i] != (fingerprint{}) {
			i = (i + 1) & v.mask
		}
		v.keys[i] = fp
		if oldIDs != nil {
			v.ids[i] = oldIDs[k]
		}
	}
}
