package dmutex_test

import (
	"fmt"

	"github.com/dmutex/dmutex"
)

// A peer asks only the peers in its request set, which starts as a
// staircase: peer 3 of 5 asks peers 0, 1 and 2 once; each of them then
// puts peer 3 in its own request set, so peer 3 enters again for nothing,
// and peer 0 must now ask peer 3.
func ExampleNewSinghalDynamic() {
	c, err := dmutex.NewSinghalDynamic(5)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	enter := func(id int) {
		before := c.Stats()
		p := c.Peer(id)
		p.Lock()
		p.Unlock()
		fmt.Printf("peer %d: %v\n", id, c.Stats().Sub(before))
	}
	enter(3)
	enter(3)
	enter(0)
	// Output:
	// peer 3: entries=1 messages=6 (reply=3 request=3)
	// peer 3: entries=1 messages=0
	// peer 0: entries=1 messages=2 (reply=1 request=1)
}
