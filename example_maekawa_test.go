package dmutex_test

import (
	"fmt"

	"github.com/dmutex/dmutex"
)

// One entry by one Maekawa peer asks only its voting set: with 13 peers,
// the sets are the lines of the projective plane of order 3, four peers
// each, so the entry costs 3(4-1) = 9 messages.
func ExampleNewMaekawa() {
	c, err := dmutex.NewMaekawa(13)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	fmt.Println("voting set of peer 5:", dmutex.VotingSets(13)[5])
	p := c.Peer(5)
	before := c.Stats()
	p.Lock()
	p.Unlock()
	fmt.Println(c.Stats().Sub(before))
	// Output:
	// voting set of peer 5: [1 5 6 8]
	// entries=1 messages=9 (locked=3 release=3 request=3)
}

// Voting sets of your own are checked when the cluster is built: here the
// sets of peers 0 and 2 share no peer, so both could be granted at once.
func ExampleWithVotingSets() {
	_, err := dmutex.NewMaekawa(3, dmutex.WithVotingSets([][]int{{0, 1}, {1, 2}, {2}}))
	fmt.Println(err)

	c, err := dmutex.NewMaekawa(3, dmutex.WithVotingSets([][]int{{0, 1}, {1, 2}, {0, 2}}))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	c.Peer(2).Lock()
	c.Peer(2).Unlock()
	fmt.Println(c.Stats())
	// Output:
	// dmutex: invalid configuration: WithVotingSets: the sets of peers 0 and 2 do not intersect ([0 1] and [2])
	// entries=1 messages=3 (locked=1 release=1 request=1)
}

// The grid construction lays 7 peers out three to a row; a set is the own
// row and the own column, and the short last row still meets every set.
func ExampleGridQuorums() {
	for i, s := range dmutex.GridQuorums(7) {
		fmt.Println(i, s)
	}
	// Output:
	// 0 [0 1 2 3 6]
	// 1 [0 1 2 4]
	// 2 [0 1 2 5]
	// 3 [0 3 4 5 6]
	// 4 [1 3 4 5]
	// 5 [2 3 4 5]
	// 6 [0 3 6]
}
