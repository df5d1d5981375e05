package dmutex_test

import (
	"fmt"

	"github.com/dmutex/dmutex"
)

// Alone, an entry costs 2(n-1) messages, as Ricart-Agrawala's does: a
// request to each other peer, and a reply from each. When all five peers
// ask at once, each request stands in for a reply and each leaving peer
// tells only the next one: 20 requests and 4 releases for 5 entries.
func ExampleNewLodhaKshemkalyani() {
	c, err := dmutex.NewLodhaKshemkalyani(5)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	p := c.Peer(2)
	p.Lock()
	p.Unlock()
	fmt.Println("alone:", c.Stats())

	s, err := dmutex.NewSimulation(dmutex.LodhaKshemkalyani, 5, dmutex.SimConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for id := range 5 {
		if err := s.Request(id); err != nil {
			fmt.Println(err)
			return
		}
	}
	if err := s.Run(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("all ask:", s.Stats())
	// Output:
	// alone: entries=1 messages=8 (reply=4 request=4)
	// all ask: entries=5 messages=24 (release=4 request=20)
}
