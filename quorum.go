package dmutex

import (
	"fmt"
	"math/bits"
	"slices"
)

// Maekawa voting sets ("quorums"). A set of voting sets is valid when every
// peer is a member of its own set and every two sets share a peer: the
// shared peer votes for one request at a time, so two peers can never both
// hold all the votes they need.

// differenceSets are perfect difference sets modulo q*q+q+1, one per known
// projective plane of order q: every nonzero residue is the difference of
// exactly one ordered pair of members. Their translates are the lines of
// the plane, so any two translates meet in exactly one point.
var differenceSets = map[int][]int{
	7:  {0, 1, 3},                     // q = 2
	13: {0, 1, 3, 9},                  // q = 3
	21: {0, 1, 4, 14, 16},             // q = 4
	31: {0, 1, 3, 8, 12, 18},          // q = 5
	57: {0, 1, 3, 13, 32, 36, 43, 52}, // q = 7
}

// GridQuorums returns the grid voting sets for n peers: the peers are laid
// out row by row on a grid c = ceil(sqrt(n)) columns wide, and peer i's set
// is its row together with its column, in increasing order. Each set has at
// most 2c-1 members. A short last row is harmless: a set from it meets the
// set of any peer in a full row at the cell in that full row and the own
// column. GridQuorums returns nil if n < 1.
func GridQuorums(n int) [][]int {
	if n < 1 {
		return nil
	}
	sets := make([][]int, n)
	for i := range sets {
		sets[i] = gridSet(i, n)
	}
	return sets
}

// gridColumns returns ceil(sqrt(n)) for n >= 1.
func gridColumns(n int) int {
	c := 1
	for c*c < n {
		c++
	}
	return c
}

// gridSet returns peer i's grid voting set for n peers, in increasing
// order.
func gridSet(i, n int) []int {
	c := gridColumns(n)
	row, col := i/c, i%c
	set := make([]int, 0, 2*c-1)
	for j := col; j < row*c; j += c { // column cells above the row
		set = append(set, j)
	}
	for j := row * c; j < min(row*c+c, n); j++ { // the row itself
		set = append(set, j)
	}
	for j := (row+1)*c + col; j < n; j += c { // column cells below the row
		set = append(set, j)
	}
	return set
}

// ProjectiveQuorums returns voting sets of size q+1 for n = q*q+q+1 peers,
// the lines of the projective plane of order q: peer i's set is {(i + d)
// mod n : d in D} for a perfect difference set D, in increasing order.
// Every two sets meet in exactly one peer, the fewest votes any voting sets
// can ask for. Difference sets are built in for n = 7, 13, 21, 31 and 57
// (q = 2, 3, 4, 5 and 7); for any other n the error wraps
// ErrInvalidConfig. Larger planes exist for every prime power q and can be
// passed to WithVotingSets.
func ProjectiveQuorums(n int) ([][]int, error) {
	if _, ok := differenceSets[n]; !ok {
		return nil, fmt.Errorf("%w: no projective plane built in for n = %d peers (have 7, 13, 21, 31, 57)",
			ErrInvalidConfig, n)
	}
	sets := make([][]int, n)
	for i := range sets {
		sets[i] = projectiveSet(i, n)
	}
	return sets, nil
}

// projectiveSet returns peer i's projective voting set for n peers, in
// increasing order; n must have a built-in difference set.
func projectiveSet(i, n int) []int {
	d := differenceSets[n]
	set := make([]int, len(d))
	for k, x := range d {
		set[k] = (i + x) % n
	}
	slices.Sort(set)
	return set
}

// VotingSets returns the voting sets NewMaekawa uses for n peers when
// WithVotingSets is not given: ProjectiveQuorums when a projective plane is
// built in for n (7, 13, 21, 31 or 57 peers; sets of size about sqrt(n)),
// GridQuorums otherwise (sets of size at most 2*ceil(sqrt(n))-1). It
// returns nil if n < 1.
func VotingSets(n int) [][]int {
	if n < 1 {
		return nil
	}
	sets := make([][]int, n)
	for i := range sets {
		sets[i] = defaultVotingSet(i, n)
	}
	return sets
}

// defaultVotingSet returns peer i's set of VotingSets(n) without building
// the other n-1, so that each of n peers can build its own in O(sqrt n).
func defaultVotingSet(i, n int) []int {
	if _, ok := differenceSets[n]; ok {
		return projectiveSet(i, n)
	}
	return gridSet(i, n)
}

// WithVotingSets gives Maekawa's algorithm the voting sets to use instead
// of VotingSets(n): sets[i] is the set of peers whose votes peer i asks
// for. The constructor checks that there is one set per peer, that every
// member is a peer id, listed once, that every peer is in its own set, and
// that every two sets share a peer; otherwise its error wraps
// ErrInvalidConfig and names the offending peers. The sets are copied. It
// applies to Maekawa only.
func WithVotingSets(sets [][]int) Option {
	if sets != nil {
		cp := make([][]int, len(sets))
		for i, s := range sets {
			cp[i] = slices.Clone(s)
		}
		sets = cp
	}
	return Option{
		name:  "WithVotingSets",
		algs:  []Algorithm{Maekawa},
		where: forAll,
		apply: func(c *config) error {
			checked, err := checkVotingSets(sets, c.n)
			if err != nil {
				return err
			}
			c.votingSets = checked
			return nil
		},
	}
}

// checkVotingSets validates sets for n peers and returns a sorted copy.
func checkVotingSets(sets [][]int, n int) ([][]int, error) {
	if len(sets) != n {
		return nil, fmt.Errorf("%w: WithVotingSets: %d sets for n = %d peers", ErrInvalidConfig, len(sets), n)
	}
	words := (n + 63) / 64
	// electorate[v] is the bitset of the peers whose sets contain v.
	electorate := make([]uint64, n*words)
	out := make([][]int, n)
	for i, s := range sets {
		if len(s) == 0 {
			return nil, fmt.Errorf("%w: WithVotingSets: the set of peer %d is empty", ErrInvalidConfig, i)
		}
		cp := slices.Clone(s)
		slices.Sort(cp)
		for k, v := range cp {
			if v < 0 || v >= n {
				return nil, fmt.Errorf("%w: WithVotingSets: the set of peer %d contains %d, not a peer id in [0, %d)",
					ErrInvalidConfig, i, v, n)
			}
			if k > 0 && cp[k-1] == v {
				return nil, fmt.Errorf("%w: WithVotingSets: the set of peer %d lists peer %d twice",
					ErrInvalidConfig, i, v)
			}
			electorate[v*words+i/64] |= 1 << (i % 64)
		}
		if _, ok := slices.BinarySearch(cp, i); !ok {
			return nil, fmt.Errorf("%w: WithVotingSets: peer %d is not in its own set %v", ErrInvalidConfig, i, s)
		}
		out[i] = cp
	}
	// Peer i's set meets peer j's exactly when some member of i's set is
	// in j's set, that is when j is in the union of the electorates of
	// i's members.
	reach := make([]uint64, words)
	for i, s := range out {
		clear(reach)
		for _, v := range s {
			for w, x := range electorate[v*words : (v+1)*words] {
				reach[w] |= x
			}
		}
		if j := firstZero(reach, n); j >= 0 {
			return nil, fmt.Errorf("%w: WithVotingSets: the sets of peers %d and %d do not intersect (%v and %v)",
				ErrInvalidConfig, min(i, j), max(i, j), out[min(i, j)], out[max(i, j)])
		}
	}
	return out, nil
}

// firstZero returns the smallest index below n whose bit is clear in set,
// or -1.
func firstZero(set []uint64, n int) int {
	for w, x := range set {
		if x != ^uint64(0) {
			if j := w*64 + bits.TrailingZeros64(^x); j < n {
				return j
			}
			return -1
		}
	}
	return -1
}
