package dmutex

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// simCost runs a simulation of alg over n peers in which first enters
// alone (uncounted, when first >= 0), then req enters alone; it returns
// the messages of req's entry, counted once the cluster is quiet.
func simCost(t testing.TB, alg Algorithm, n, first, req int, opts ...Option) uint64 {
	s, err := NewSimulation(alg, n, SimConfig{}, opts...)
	require.NoError(t, err)
	if first >= 0 {
		require.NoError(t, s.Request(first))
		require.NoError(t, s.Run())
	}
	before := s.Stats()
	require.NoError(t, s.Request(req))
	require.NoError(t, s.Run())
	after := s.Stats()
	require.Equal(t, before.Entries+1, after.Entries)
	return after.Messages - before.Messages
}

// heapDist is the distance between a and b in the heap-ordered tree
// (the parent of i is (i-1)/2), Raymond's default.
func heapDist(a, b int) int {
	d := 0
	for a != b {
		if a > b {
			a = (a - 1) / 2
		} else {
			b = (b - 1) / 2
		}
		d++
	}
	return d
}

// docNumbers are the figures the prose of README.md and the doc
// comments states, each computed here.
type docNumbers struct {
	raymondN, raymondMost, raymondDepth, raymondDiameter int
	maekawaFrom, maekawaUpTo                             int   // Maekawa's default sets are cheaper than Ricart-Agrawala from maekawaFrom to maekawaUpTo
	maekawaEqual, maekawaMore                            []int // sizes where Maekawa costs the same, or more
	ringN, ringWakeLo, ringWakeHi                        int   // a wake from rest at ringN: ringWakeLo to ringWakeHi messages
}

func computeDocNumbers(t testing.TB) docNumbers {
	var d docNumbers
	// Raymond: every entry costs twice the distance between the holder
	// and the requester.
	d.raymondN = 15
	for a := range d.raymondN {
		d.raymondDepth = max(d.raymondDepth, heapDist(0, a))
		for b := range d.raymondN {
			d.raymondDiameter = max(d.raymondDiameter, heapDist(a, b))
			if a == b {
				continue
			}
			m := int(simCost(t, Raymond, d.raymondN, a, b))
			require.Equal(t, 2*heapDist(a, b), m, "Raymond n=%d, from %d to %d", d.raymondN, a, b)
			d.raymondMost = max(d.raymondMost, m)
		}
	}
	// Maekawa against Ricart-Agrawala, one entry at a time: the mean of
	// 3(K_i-1) over the peers against 2(N-1).
	d.maekawaUpTo = 128
	for n := 2; n <= d.maekawaUpTo; n++ {
		sum, most := 0, 0
		sets := VotingSets(n)
		for _, s := range sets {
			sum += 3 * (len(s) - 1)
			most = max(most, len(s))
		}
		if _, err := ProjectiveQuorums(n); err != nil {
			require.LessOrEqual(t, most, 2*int(math.Ceil(math.Sqrt(float64(n))))-1, "grid sets at n=%d", n)
		}
		switch ra := 2 * (n - 1) * n; {
		case sum == ra:
			d.maekawaEqual = append(d.maekawaEqual, n)
			d.maekawaFrom = 0
		case sum > ra:
			d.maekawaMore = append(d.maekawaMore, n)
			d.maekawaFrom = 0
		case d.maekawaFrom == 0:
			d.maekawaFrom = n
		}
	}
	require.NotZero(t, d.maekawaFrom)
	// The token ring: from rest at peer 0, an entry by the peer d hops
	// on costs a wake, d hops and the idle lap of n hops.
	for n := 2; n <= 8; n++ {
		for dist := range n {
			want := n + 1 + dist
			if dist == 0 {
				want = n
			}
			require.Equal(t, want, int(simCost(t, TokenRing, n, -1, dist)), "token ring n=%d, d=%d", n, dist)
		}
	}
	d.ringN, d.ringWakeLo, d.ringWakeHi = 8, 8+2, 2*8
	return d
}

// costNotes is the generated paragraph of README.md on costs.
func (d docNumbers) costNotes() string {
	list := func(ns []int) string {
		s := make([]string, len(ns))
		for i, n := range ns {
			s[i] = fmt.Sprint(n)
		}
		return strings.Join(s, " and ")
	}
	return fmt.Sprintf(`One entry at a time, Maekawa costs 3(K−1) messages for a voting set of
K peers: K is at most 2⌈√N⌉−1 on the grid sets, and q+1 on the
projective-plane sets for N = q²+q+1 (7, 13, 21, 31, 57). Its default
sets cost fewer messages than Ricart-Agrawala's 2(N−1) for every N from
%d to %d, the same at N = %s, and more at N = %s. Raymond's entry costs twice the tree
distance between the requester and the holder, at most twice the
diameter: %d messages at N = %d on the default tree, whose depth is %d
and diameter %d. A token ring entry from rest costs one wake, the d hops
from the resting peer to the requester and the idle lap of N hops after
the release, N+1+d in all (%d to %d at N = %d); an entry that finds the
lap still going costs less, so the ring's *alone* count of the report is a
measured mean that depends on timing, not a closed form.
`, d.maekawaFrom, d.maekawaUpTo, list(d.maekawaEqual), list(d.maekawaMore), d.raymondMost, d.raymondN,
		d.raymondDepth, d.raymondDiameter, d.ringWakeLo, d.ringWakeHi, d.ringN)
}

// TestDocNumbers checks the formulas the doc comments state against the
// simulator; the generated paragraph itself is compared by TestDocTables.
func TestDocNumbers(t *testing.T) {
	d := computeDocNumbers(t)
	for file, phrases := range map[string][]string{
		"tokenring.go": {"n+1+d messages", "textbooks"},
		"raymond.go":   {"2d messages for distance d, at most twice the tree's diameter (at most 4⌊log2 n⌋ on the default tree)"},
		"maekawa.go":   {"four peers", "at most 2⌈√n⌉-1 on the grid", "Sanders"},
		"doc.go":       {"2 × tree distance", "3(K-1), K ≤ 2⌈√n⌉-1"},
	} {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		prose := strings.Join(strings.Fields(strings.ReplaceAll(string(b), "//", " ")), " ")
		for _, p := range phrases {
			require.Contains(t, prose, p, "%s must state it", file)
		}
	}
	require.Equal(t, 12, d.raymondMost, "the figure issue 11 quotes")
	// Twice the default tree's diameter is at most 4⌊log2 n⌋, as
	// raymond.go says, and reaches it.
	reached := false
	for n := 2; n <= 64; n++ {
		diam := 0
		for a := range n {
			for b := range n {
				diam = max(diam, heapDist(a, b))
			}
		}
		bound := 4 * int(math.Floor(math.Log2(float64(n))))
		require.LessOrEqual(t, 2*diam, bound, "n=%d", n)
		reached = reached || 2*diam == bound
	}
	require.True(t, reached)
}
