package dmutex_test

import (
	"context"
	"fmt"

	"github.com/dmutex/dmutex"
)

// Check explores every interleaving of three Ricart-Agrawala peers that
// each ask once, and finds every promise kept; over a reordering network
// Lamport's algorithm, which needs FIFO channels, lets two peers in, and
// the counterexample is a shortest run to it.
func ExampleCheck() {
	res, err := dmutex.Check(context.Background(), dmutex.CheckConfig{Algorithm: dmutex.RicartAgrawala, N: 3})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.States, "states; safe:", res.Safe, "deadlock free:", res.DeadlockFree, "starvation free:", res.StarvationFree)

	res, err = dmutex.Check(context.Background(), dmutex.CheckConfig{Variant: "lamport-unordered"})
	if err != nil {
		panic(err)
	}
	fmt.Println("safe:", res.Safe)
	fmt.Println(res.Violation.Message)
	fmt.Println(res.Violation.Transitions)
	// Output:
	// 2347 states; safe: yes deadlock free: yes starvation free: yes
	// safe: no
	// dmutex: protocol violation: step 10: peer 0 entered with request (1, 0) after the younger (1, 1)
	// [r0 r1 d2 r2 d3 d7 d8 l1 d5 d10]
}

// A World is the checker's model of a cluster, taken one transition at
// a time: here peer 0 of two Ricart-Agrawala peers asks for the critical
// section, and the first enabled transition is taken until none is left.
// Each transition has an ID (d1: deliver message 1; l0: peer 0 leaves),
// the words of Check's counterexamples and of the lab.
func ExampleNewWorld() {
	w, err := dmutex.NewWorld(dmutex.RicartAgrawala, 2, dmutex.WorldConfig{})
	if err != nil {
		panic(err)
	}
	if err := w.Request(0); err != nil {
		panic(err)
	}
	for len(w.Transitions()) > 0 {
		t := w.Transitions()[0]
		fmt.Println(t.ID(), t)
		if _, err := w.Apply(t); err != nil {
			panic(err)
		}
		fmt.Println("    P0", w.Peer(0).State()+", P1", w.Peer(1).State())
	}
	fmt.Println(w.Stats())
	// Output:
	// d1 P1 receives request P0->P1 ts=1
	//     P0 waiting, P1 idle
	// d2 P0 receives reply P1->P0 ts=1 ref=1
	//     P0 inside, P1 idle
	// l0 P0 leaves
	//     P0 idle, P1 idle
	// entries=1 messages=2 (reply=1 request=1)
}
