package dmutex_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dmutex/dmutex"
)

// While one peer holds the lock, another peer's TryLock is refused at
// once instead of waiting; once the lock is free it succeeds. With the
// centralized algorithm a try costs a try message and its answer, busy or
// grant; the coordinator, peer 0, decides its own with no message.
func ExampleLocker_TryLock() {
	c, err := dmutex.NewCentralized(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	coord, other := c.Peer(0), c.Peer(2)

	fmt.Println("coordinator in:", coord.TryLock())
	err = other.TryLockContext(context.Background())
	fmt.Println("peer 2 refused:", errors.Is(err, dmutex.ErrLocked))
	coord.Unlock()

	if other.TryLock() {
		fmt.Println("peer 2 in, fence", other.Fence())
		other.Unlock()
	}
	fmt.Println(c.Stats())
	// Output:
	// coordinator in: true
	// peer 2 refused: true
	// peer 2 in, fence 2
	// entries=2 messages=5 (busy=1 grant=1 release=1 try=2)
}

// A cluster restarted after a crash counts its fences from 1 again. With
// the highest fence its store has accepted as the floor, the new
// cluster's fences go on above it, and the store accepts its writes.
func ExampleWithFenceFloor() {
	highest := uint64(1041) // the store's highest accepted fence, read at start
	c, err := dmutex.NewRicartAgrawala(3, dmutex.WithFenceFloor(highest))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	for _, p := range c.Peers() {
		p.Lock()
		fmt.Printf("peer %d writes with fence %d\n", p.ID(), p.Fence())
		p.Unlock()
	}
	_, err = dmutex.New(dmutex.Centralized, 3, dmutex.WithFenceFloor(1<<63))
	fmt.Println(err)
	// Output:
	// peer 0 writes with fence 1042
	// peer 1 writes with fence 1043
	// peer 2 writes with fence 1044
	// dmutex: invalid configuration: WithFenceFloor(9223372036854775808): want at most 4611404543450677247 (MaxFenceFloor), so that fences do not run out
}
