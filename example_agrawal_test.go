package dmutex_test

import (
	"fmt"

	"github.com/dmutex/dmutex"
)

// One entry by one peer asks only its path of the tree: with 15 peers the
// tree has four levels, so peer 9 asks peers 0, 1 and 4 and the entry
// costs 3(4-1) = 9 messages. Were the root down, peer 9 would ask a path
// through each of the root's subtrees instead.
func ExampleNewAgrawalElAbbadi() {
	c, err := dmutex.NewAgrawalElAbbadi(15)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	q, _ := dmutex.TreeQuorum(9, 15, nil)
	fmt.Println("quorum of peer 9:", q)
	q, _ = dmutex.TreeQuorum(9, 15, []int{0})
	fmt.Println("without the root:", q)
	p := c.Peer(9)
	before := c.Stats()
	p.Lock()
	p.Unlock()
	fmt.Println(c.Stats().Sub(before))
	// Output:
	// quorum of peer 9: [0 1 4 9]
	// without the root: [1 2 4 5 9 11]
	// entries=1 messages=9 (locked=3 release=3 request=3)
}
