package dmutex_test

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dmutex/dmutex"
)

// A store that checks fences: it refuses a write whose fence is smaller
// than the largest it has accepted.
type checkedStore struct {
	mu     sync.Mutex
	hi     uint64
	values []string
}

func (s *checkedStore) write(fence uint64, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence == 0 || fence < s.hi {
		return fmt.Errorf("store: fence %d refused, %d seen", fence, s.hi)
	}
	s.hi = fence
	s.values = append(s.values, v)
	return nil
}

// Peer 1 writes to a store that checks fences, and stops when its hold
// may be lost: here it is cut off from the others while it holds. With
// recovery on, they go on without it once it has been unreachable for
// longer than WithUnreachableAfter, and its writes would be refused; it
// learns to stop by then, from the channel, without trying.
func ExampleLocker_HoldLost() {
	c, err := dmutex.NewRicartAgrawala(3, dmutex.WithRecovery(), dmutex.WithUnreachableAfter(50*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	store := &checkedStore{}

	holder := c.Peer(1)
	holder.Lock()
	lost := holder.HoldLost()
	write := func(v string) error {
		select {
		case <-lost:
			return holder.HoldErr() // stop: the hold may no longer be ours
		default:
			return store.write(holder.Fence(), v)
		}
	}
	fmt.Println("peer 1 writes a:", write("a"))
	_ = c.Network().Partition([]int{1}) // peer 1 alone, the others together
	<-lost                              // a writer sees it at its next write; here we wait for it
	err = write("b")
	fmt.Println("peer 1 writes b:", err)
	fmt.Println("hold lost:", errors.Is(err, dmutex.ErrHoldLost), errors.Is(err, dmutex.ErrPeerUnreachable))
	holder.Unlock()

	other := c.Peer(0)
	other.Lock() // the others go on without peer 1
	fmt.Println("peer 0 writes c:", store.write(other.Fence(), "c"))
	other.Unlock()
	fmt.Println("store:", store.values)
	// Output:
	// peer 1 writes a: <nil>
	// peer 1 writes b: dmutex: hold may be lost: peers [0 2] unreachable for more than 50ms
	// hold lost: true true
	// peer 0 writes c: <nil>
	// store: [a c]
}
