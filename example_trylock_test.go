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
