package dmutex_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dmutex/dmutex"
)

// Five peers, each used by its own goroutine, add to a shared counter that
// only the distributed lock protects.
func ExampleNewRicartAgrawala() {
	c, err := dmutex.NewRicartAgrawala(5)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	counter := 0
	var wg sync.WaitGroup
	for _, p := range c.Peers() {
		wg.Go(func() {
			for range 10 {
				p.Lock()
				counter++ // safe: only one peer is ever here
				p.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Println("counter:", counter)
	fmt.Println("entries:", c.Stats().Entries)
	// Output:
	// counter: 50
	// entries: 50
}

// With one entry at a time, the counts are the closed forms: 2(n-1)
// messages for Ricart-Agrawala, 3(n-1) for Lamport, and 3 for the
// centralized algorithm when a peer other than the coordinator enters.
func ExampleCluster_Stats() {
	for _, alg := range []dmutex.Algorithm{dmutex.RicartAgrawala, dmutex.Lamport, dmutex.Centralized} {
		c, err := dmutex.New(alg, 5)
		if err != nil {
			fmt.Println(err)
			return
		}
		p := c.Peer(3)
		p.Lock()
		p.Unlock()
		fmt.Printf("%-16s %v\n", alg, c.Stats())
		c.Close()
	}
	// Output:
	// ricart-agrawala  entries=1 messages=8 (reply=4 request=4)
	// lamport          entries=1 messages=12 (release=4 reply=4 request=4)
	// centralized      entries=1 messages=3 (grant=1 release=1 request=1)
}

// LockContext gives up when its context ends. The request it sent is
// completed behind the scenes, so the other peers are not left waiting.
func ExampleLocker_LockContext() {
	c, err := dmutex.NewLamport(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	c.Peer(0).Lock() // peer 0 holds the lock for a while

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err = c.Peer(1).LockContext(ctx)
	fmt.Println("peer 1:", err, errors.Is(err, context.DeadlineExceeded))

	c.Peer(0).Unlock()
	c.Peer(1).Lock() // works: nothing was lost when peer 1 gave up
	fmt.Println("peer 1 got the lock later")
	c.Peer(1).Unlock()
	// Output:
	// peer 1: context deadline exceeded true
	// peer 1 got the lock later
}

// Options are checked when the cluster is built; one that does not fit
// gives an error that errors.Is can match.
func ExampleWithImplicitReplies() {
	_, err := dmutex.NewLamport(4, dmutex.WithImplicitReplies())
	fmt.Println(errors.Is(err, dmutex.ErrInvalidConfig), err)

	c, err := dmutex.NewRicartAgrawala(4, dmutex.WithImplicitReplies())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	c.Peer(1).Lock()
	c.Peer(1).Unlock()
	fmt.Println(c.Stats())
	// Output:
	// true dmutex: invalid configuration: option WithImplicitReplies does not apply to lamport
	// entries=1 messages=6 (reply=3 request=3)
}

// Fence numbers grow with every entry across the cluster, so a store can
// refuse a write from a holder whose turn has passed.
func ExampleLocker_Fence() {
	c, err := dmutex.NewCentralized(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	for _, id := range []int{2, 0, 1} {
		p := c.Peer(id)
		p.Lock()
		fmt.Printf("peer %d fence %d\n", id, p.Fence())
		p.Unlock()
	}
	// Output:
	// peer 2 fence 1
	// peer 0 fence 2
	// peer 1 fence 3
}

// Peers in separate processes are built one at a time with NewPeer, each
// with its own Transport. Here the transport is in memory; the
// grpctransport package carries the same messages over a network.
func ExampleNewPeer() {
	nw := dmutex.NewChanNetwork(3)
	var peers []*dmutex.Peer
	for id := range 3 {
		p, err := dmutex.NewPeer(dmutex.RicartAgrawala, id, 3, nw.Endpoint(id))
		if err != nil {
			fmt.Println(err)
			return
		}
		peers = append(peers, p)
	}
	peers[2].Lock()
	fmt.Println("peer 2 inside, fence", peers[2].Fence())
	peers[2].Unlock()
	for _, p := range peers {
		p.Close()
	}
	fmt.Println(peers[2].Stats())
	// Output:
	// peer 2 inside, fence 1
	// entries=1 messages=2 (request=2)
}

// A partition cuts the cluster in two. The centralized algorithm goes on
// where the coordinator is, and blocks elsewhere; none lets two peers in.
func ExampleChanNetwork_Partition() {
	c, err := dmutex.NewCentralized(4)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	if err := c.Network().Partition([]int{0, 1}, []int{2, 3}); err != nil {
		fmt.Println(err)
		return
	}
	for _, id := range []int{1, 3} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := c.Peer(id).LockContext(ctx)
		cancel()
		if err == nil {
			fmt.Printf("peer %d entered\n", id)
			c.Peer(id).Unlock()
		} else {
			fmt.Printf("peer %d: %v\n", id, err)
		}
	}
	// Output:
	// peer 1 entered
	// peer 3: context deadline exceeded
}
