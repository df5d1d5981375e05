package dmutex

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireQuorums checks the two properties Maekawa's safety rests on: every
// peer is in its own set, and every two sets share a peer. It also checks
// that each set is sorted, without duplicates, and names only peers.
func requireQuorums(t *testing.T, sets [][]int, n int) {
	t.Helper()
	require.Len(t, sets, n)
	for i, s := range sets {
		require.True(t, slices.IsSorted(s), "set of %d is not sorted: %v", i, s)
		require.Equal(t, len(s), len(slices.Compact(slices.Clone(s))), "set of %d has duplicates: %v", i, s)
		for _, v := range s {
			require.True(t, v >= 0 && v < n, "set of %d names %d", i, v)
		}
		require.Contains(t, s, i, "peer %d is not in its own set", i)
	}
	for i := range sets {
		for j := i + 1; j < n; j++ {
			if meet(sets[i], sets[j]) == 0 { // plain if: testify per pair is slow
				t.Fatalf("n = %d: sets of %d and %d do not meet: %v, %v", n, i, j, sets[i], sets[j])
			}
		}
	}
}

// meet returns how many peers two sorted sets share.
func meet(a, b []int) int {
	c := 0
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] < b[j]:
			i++
		case a[i] > b[j]:
			j++
		default:
			c++
			i++
			j++
		}
	}
	return c
}

func TestGridQuorums(t *testing.T) {
	for n := 1; n <= 200; n++ {
		sets := GridQuorums(n)
		requireQuorums(t, sets, n)
		c := gridColumns(n)
		require.True(t, (c-1)*(c-1) < n && n <= c*c, "n = %d: c = %d is not ceil(sqrt n)", n, c)
		for i, s := range sets {
			require.LessOrEqual(t, len(s), 2*c-1, "n = %d: set of %d", n, i)
		}
		if c*c == n { // a full square: every set is exactly a row and a column
			for i, s := range sets {
				require.Len(t, s, 2*c-1, "n = %d: set of %d", n, i)
			}
		}
	}
	assert.Nil(t, GridQuorums(0))
	// n = 7 on a 3-wide grid: rows {0 1 2} {3 4 5} {6}.
	assert.Equal(t, [][]int{
		{0, 1, 2, 3, 6}, {0, 1, 2, 4}, {0, 1, 2, 5},
		{0, 3, 4, 5, 6}, {1, 3, 4, 5}, {2, 3, 4, 5},
		{0, 3, 6},
	}, GridQuorums(7))
}

func TestProjectiveQuorums(t *testing.T) {
	orders := map[int]int{7: 2, 13: 3, 21: 4, 31: 5, 57: 7}
	for n := 1; n <= 200; n++ {
		sets, err := ProjectiveQuorums(n)
		q, ok := orders[n]
		if !ok {
			require.ErrorIs(t, err, ErrInvalidConfig, "n = %d", n)
			require.Contains(t, err.Error(), "n = "+strconv.Itoa(n))
			continue
		}
		require.NoError(t, err)
		require.Equal(t, n, q*q+q+1)
		requireQuorums(t, sets, n)
		for i, s := range sets {
			require.Len(t, s, q+1, "n = %d: set of %d", n, i)
			for j := i + 1; j < n; j++ {
				if meet(s, sets[j]) != 1 {
					t.Fatalf("n = %d: lines %d and %d meet in %d points, want 1", n, i, j, meet(s, sets[j]))
				}
			}
		}
	}
	assert.Len(t, differenceSets, len(orders), "a difference set this test does not know")
}

// TestVotingSets checks the default: projective where a plane is built in,
// the grid elsewhere, and that each peer's own set, built alone, is the
// same as the whole construction's.
func TestVotingSets(t *testing.T) {
	for n := 1; n <= 200; n++ {
		sets := VotingSets(n)
		requireQuorums(t, sets, n)
		if p, err := ProjectiveQuorums(n); err == nil {
			require.Equal(t, p, sets, "n = %d", n)
		} else {
			require.Equal(t, GridQuorums(n), sets, "n = %d", n)
		}
		for i := range n {
			m, err := newMaekawa(i, n, &config{alg: Maekawa, n: n})
			require.NoError(t, err)
			require.Equal(t, sets[i], m.(*maekawa).set, "n = %d: machine %d", n, i)
		}
	}
	assert.Nil(t, VotingSets(0))
}

func TestWithVotingSets(t *testing.T) {
	grid := GridQuorums(4) // {0 1 2} {0 1 3} {0 2 3} {1 2 3}
	tests := []struct {
		name    string
		n       int
		sets    [][]int
		wantMsg string // "" for valid sets
	}{
		{"grid", 4, grid, ""},
		{"unsorted is fine", 3, [][]int{{1, 0}, {0, 1}, {2, 1}}, ""},
		{"all in one set", 3, [][]int{{0, 1, 2}, {0, 1, 2}, {2, 1, 0}}, ""},
		{"too few sets", 4, grid[:3], "3 sets for n = 4 peers"},
		{"nil", 2, nil, "0 sets for n = 2 peers"},
		{"empty set", 2, [][]int{{0, 1}, {}}, "the set of peer 1 is empty"},
		{"id too large", 3, [][]int{{0, 1}, {1, 3}, {1, 2}}, "the set of peer 1 contains 3, not a peer id in [0, 3)"},
		{"negative id", 3, [][]int{{0, -1}, {0, 1}, {0, 2}}, "the set of peer 0 contains -1"},
		{"duplicate", 3, [][]int{{0, 1}, {0, 1, 1}, {0, 2}}, "the set of peer 1 lists peer 1 twice"},
		{"not in own set", 3, [][]int{{0, 1}, {0, 2}, {0, 2}}, "peer 1 is not in its own set [0 2]"},
		{"disjoint pair", 4, [][]int{{0, 1}, {0, 1}, {2, 3}, {0, 2, 3}}, "the sets of peers 0 and 2 do not intersect ([0 1] and [2 3])"},
		{"last pair disjoint", 3, [][]int{{0, 1, 2}, {1}, {2}}, "the sets of peers 1 and 2 do not intersect"},
		{"disjoint beyond 64 peers", 70, append(GridQuorums(70)[:69:69], []int{69}), "the sets of peers 0 and 69 do not intersect"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := newConfig(Maekawa, tt.n, forCluster, []Option{WithVotingSets(tt.sets)})
			if tt.wantMsg == "" {
				require.NoError(t, err)
				for i, s := range cfg.votingSets {
					want := slices.Sorted(slices.Values(tt.sets[i]))
					assert.Equal(t, want, s, "set of %d", i)
				}
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), "WithVotingSets: "+tt.wantMsg)
			c, err := NewMaekawa(tt.n, WithVotingSets(tt.sets))
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Nil(t, c)
		})
	}
}

func TestWithVotingSetsOtherAlgorithm(t *testing.T) {
	_, err := NewRicartAgrawala(3, WithVotingSets(GridQuorums(3)))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "WithVotingSets does not apply to ricart-agrawala")
}

// TestWithVotingSetsCopies checks that changing the caller's slices after
// the constructor cannot change the cluster's sets.
func TestWithVotingSetsCopies(t *testing.T) {
	sets := [][]int{{0, 1}, {0, 1}}
	cfg, err := newConfig(Maekawa, 2, forCluster, []Option{WithVotingSets(sets)})
	require.NoError(t, err)
	sets[0][0] = 1
	assert.Equal(t, [][]int{{0, 1}, {0, 1}}, cfg.votingSets)
}

func BenchmarkCheckVotingSets(b *testing.B) {
	for _, n := range []int{57, 1024, MaxPeers} {
		sets := VotingSets(n)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := checkVotingSets(sets, n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
