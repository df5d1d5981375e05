package dmutex_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dmutex/dmutex"
)

// New takes the algorithm as a value, so a program can choose it at run
// time, here by name as a command-line flag would give it.
func ExampleNew() {
	alg, err := dmutex.ParseAlgorithm("suzuki-kasami")
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := dmutex.New(alg, 4)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	for _, id := range []int{2, 2, 3} {
		p := c.Peer(id)
		before := c.Stats()
		p.Lock()
		p.Unlock()
		fmt.Printf("peer %d: %v\n", id, c.Stats().Sub(before))
	}
	_, err = dmutex.ParseAlgorithm("paxos")
	fmt.Println(err != nil)
	// Output:
	// peer 2: entries=1 messages=4 (request=3 token=1)
	// peer 2: entries=1 messages=0
	// peer 3: entries=1 messages=4 (request=3 token=1)
	// true
}

// Lamport's algorithm costs 3(n-1) messages per entry, whoever enters: a
// request, a reply and a release for each other peer.
func ExampleNewLamport() {
	c, err := dmutex.NewLamport(4)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	p := c.Peer(1)
	p.Lock()
	p.Unlock()
	fmt.Println(c.Stats())
	// Output:
	// entries=1 messages=9 (release=3 reply=3 request=3)
}

// The coordinator, peer 0, enters with no message; any other peer pays a
// request, a grant and a release.
func ExampleNewCentralized() {
	c, err := dmutex.NewCentralized(5)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	for _, id := range []int{0, 4} {
		before := c.Stats()
		c.Peer(id).Lock()
		c.Peer(id).Unlock()
		fmt.Printf("peer %d: %v\n", id, c.Stats().Sub(before))
	}
	// Output:
	// peer 0: entries=1 messages=0
	// peer 4: entries=1 messages=3 (grant=1 release=1 request=1)
}

// The lines of the projective plane of order 2 are voting sets of three
// for seven peers, every two meeting in exactly one peer: an entry asks
// the two other members, 3(3-1) = 6 messages.
func ExampleProjectiveQuorums() {
	sets, err := dmutex.ProjectiveQuorums(7)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("peer 0:", sets[0], "peer 4:", sets[4])
	c, err := dmutex.NewMaekawa(7, dmutex.WithVotingSets(sets))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	c.Peer(4).Lock()
	c.Peer(4).Unlock()
	fmt.Println(c.Stats())
	// Output:
	// peer 0: [0 1 3] peer 4: [0 4 5]
	// entries=1 messages=6 (locked=2 release=2 request=2)
}

// Peers built on a ChanNetwork of your own share it, and its faults: here
// the network loses the next reply, so Ricart-Agrawala's requester waits
// for it until its deadline, and nobody else can enter either.
func ExampleNewChanNetwork() {
	nw := dmutex.NewChanNetwork(3)
	defer nw.Close() // after the peers, which close their endpoints
	peers := make([]*dmutex.Peer, 3)
	for id := range peers {
		p, err := dmutex.NewPeer(dmutex.RicartAgrawala, id, 3, nw.Endpoint(id))
		if err != nil {
			fmt.Println(err)
			return
		}
		defer p.Close()
		peers[id] = p
	}
	nw.DropNext(1, func(m dmutex.Message) bool { return m.Kind == dmutex.KindReply })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	fmt.Println("peer 1:", peers[1].LockContext(ctx))
	fmt.Println("lost:", nw.Dropped())
	// Output:
	// peer 1: context deadline exceeded
	// lost: 1
}
