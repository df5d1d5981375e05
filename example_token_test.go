package dmutex_test

import (
	"fmt"

	"github.com/dmutex/dmutex"
)

// A peer that holds the idle Suzuki-Kasami token enters with no messages
// at all; fetching the token costs N: N-1 requests and the token itself.
func ExampleNewSuzukiKasami() {
	c, err := dmutex.NewSuzukiKasami(3)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	hot := c.Peer(0) // starts with the token
	for range 3 {
		hot.Lock()
		hot.Unlock()
	}
	fmt.Println("peer 0, three entries:", c.Stats())

	p := c.Peer(2)
	before := c.Stats()
	p.Lock() // fetches the token
	p.Unlock()
	fmt.Println("peer 2, first entry:  ", c.Stats().Sub(before))

	before = c.Stats()
	p.Lock() // the token stayed here
	p.Unlock()
	fmt.Println("peer 2, second entry: ", c.Stats().Sub(before))
	// Output:
	// peer 0, three entries: entries=3 messages=0
	// peer 2, first entry:   entries=1 messages=3 (request=2 token=1)
	// peer 2, second entry:  entries=1 messages=0
}

// In Raymond's tree an entry costs a request and a privilege on every
// edge between the requester and the holder. With 7 peers the tree is
// 0 at the root, 1 and 2 below it, and 3, 4 | 5, 6 below those.
func ExampleNewRaymond() {
	c, err := dmutex.NewRaymond(7)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	for _, id := range []int{5, 6, 6, 3} { // 2 edges, 2 edges, none, 4 edges
		before := c.Stats()
		c.Peer(id).Lock()
		c.Peer(id).Unlock()
		fmt.Printf("peer %d: %v\n", id, c.Stats().Sub(before))
	}
	// Output:
	// peer 5: entries=1 messages=4 (privilege=2 request=2)
	// peer 6: entries=1 messages=4 (privilege=2 request=2)
	// peer 6: entries=1 messages=0
	// peer 3: entries=1 messages=8 (privilege=4 request=4)
}

// The token ring's token starts at rest at peer 0, which enters for free.
// After a release the token makes one lap, serving whoever wants it, and
// comes to rest again when a full lap went unused.
func ExampleNewTokenRing() {
	c, err := dmutex.NewTokenRing(4)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	p := c.Peer(0)
	p.Lock()
	fmt.Println(c.Stats())
	p.Unlock()

	for _, p := range c.Peers() {
		p.Lock()
		p.Unlock()
	}
	fmt.Println("entries:", c.Stats().Entries)
	// Output:
	// entries=1 messages=0
	// entries: 5
}

// In Naimi and Trehel's algorithm every peer starts pointing at peer 0,
// which holds the token. A request follows those pointers to the root,
// reversing them, so that the requester is the next root: peer 3's
// request goes to 0; peer 2's goes to 0 and on to 3, the root by then,
// and both point at 2 afterwards; peer 1's goes to 0 and on to 2. The
// token is then at peer 1, which enters again for free.
func ExampleNewNaimiTrehel() {
	c, err := dmutex.NewNaimiTrehel(4)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	for _, id := range []int{3, 2, 1, 1} {
		before := c.Stats()
		c.Peer(id).Lock()
		c.Peer(id).Unlock()
		fmt.Printf("peer %d: %v\n", id, c.Stats().Sub(before))
	}
	// Output:
	// peer 3: entries=1 messages=2 (request=1 token=1)
	// peer 2: entries=1 messages=3 (request=2 token=1)
	// peer 1: entries=1 messages=3 (request=2 token=1)
	// peer 1: entries=1 messages=0
}

// Ricart and Agrawala's token carries, for each peer, the number of its
// last request served. A request goes to every other peer; the holder,
// when it leaves, sends the token to the first peer after it, round the
// ring, that has asked for more than it was served.
func ExampleNewRicartAgrawalaToken() {
	c, err := dmutex.NewRicartAgrawalaToken(4)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	for _, id := range []int{0, 2, 2, 1} {
		before := c.Stats()
		c.Peer(id).Lock()
		c.Peer(id).Unlock()
		fmt.Printf("peer %d: %v\n", id, c.Stats().Sub(before))
	}
	// Output:
	// peer 0: entries=1 messages=0
	// peer 2: entries=1 messages=4 (request=3 token=1)
	// peer 2: entries=1 messages=0
	// peer 1: entries=1 messages=4 (request=3 token=1)
}

// Singhal's heuristic sends a request only to the peers the requester
// believes may hold the token: at the start, peer i asks the peers
// before it (the staircase), and a peer that hears a request adds the
// requester. Here peer 1 asks only peer 0, which held the token first,
// and peer 3, whose request it heard.
func ExampleNewSinghalHeuristic() {
	c, err := dmutex.NewSinghalHeuristic(4)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	for _, id := range []int{0, 3, 3, 1} {
		before := c.Stats()
		c.Peer(id).Lock()
		c.Peer(id).Unlock()
		fmt.Printf("peer %d: %v\n", id, c.Stats().Sub(before))
	}
	// Output:
	// peer 0: entries=1 messages=0
	// peer 3: entries=1 messages=4 (request=3 token=1)
	// peer 3: entries=1 messages=0
	// peer 1: entries=1 messages=3 (request=2 token=1)
}
