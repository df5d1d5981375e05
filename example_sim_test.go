package dmutex_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/dmutex/dmutex"
)

// Three of five Ricart-Agrawala peers ask at once. Each entry costs
// 2(N-1) messages; with implicit replies the three contenders save one
// reply per pair of them.
func ExampleSimulation_kContenders() {
	for _, opts := range [][]dmutex.Option{nil, {dmutex.WithImplicitReplies()}} {
		sim, err := dmutex.NewSimulation(dmutex.RicartAgrawala, 5, dmutex.SimConfig{}, opts...)
		if err != nil {
			panic(err)
		}
		for peer := range 3 {
			if err := sim.Request(peer); err != nil {
				panic(err)
			}
		}
		if err := sim.Run(); err != nil {
			panic(err)
		}
		fmt.Println(sim.Stats())
	}
	// Output:
	// entries=3 messages=24 (reply=12 request=12)
	// entries=3 messages=21 (reply=9 request=12)
}

// A peer of a centralized cluster asks the coordinator, peer 0. Lock-step
// delivery needs no seed: each round delivers what the last one sent.
func ExampleSimulation_WriteLog() {
	sim, err := dmutex.NewSimulation(dmutex.Centralized, 2, dmutex.SimConfig{Delivery: dmutex.DeliverLockStep})
	if err != nil {
		panic(err)
	}
	if err := sim.Request(1); err != nil {
		panic(err)
	}
	if err := sim.Run(); err != nil {
		panic(err)
	}
	if err := sim.WriteLog(os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	//    0 P1 request
	//    0 P1 send m1 request P1->P0
	//    1 P0 receive m1 request P1->P0
	//    1 P0 send m2 grant P0->P1
	//    2 P1 receive m2 grant P0->P1
	//    2 P1 enter
	//    3 P1 leave
	//    3 P1 send m3 release P1->P0
	//    4 P0 receive m3 release P1->P0
}

// The same run as a Mermaid sequence diagram, which renders on GitHub.
func ExampleSimulation_WriteMermaid() {
	sim, err := dmutex.NewSimulation(dmutex.Centralized, 2, dmutex.SimConfig{Delivery: dmutex.DeliverLockStep})
	if err != nil {
		panic(err)
	}
	if err := sim.Request(1); err != nil {
		panic(err)
	}
	if err := sim.Run(); err != nil {
		panic(err)
	}
	if err := sim.WriteMermaid(os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// sequenceDiagram
	//     participant P0
	//     participant P1
	//     Note over P1: wants in
	//     P1->>P0: request
	//     P0->>P1: grant
	//     Note over P1: enters
	//     Note over P1: leaves
	//     P1->>P0: release
}

// Lamport's algorithm needs FIFO channels, so a simulation refuses to
// reorder its messages unless told to insist.
func ExampleSimConfig_unsafeDelivery() {
	_, err := dmutex.NewSimulation(dmutex.Lamport, 3, dmutex.SimConfig{Delivery: dmutex.DeliverReorder})
	fmt.Println(err)
	_, err = dmutex.NewSimulation(dmutex.Lamport, 3, dmutex.SimConfig{Delivery: dmutex.DeliverReorder, UnsafeDelivery: true})
	fmt.Println(err)
	// Output:
	// dmutex: invalid configuration: lamport needs FIFO channels and delivery reorder would reorder them (set SimConfig.UnsafeDelivery to insist)
	// <nil>
}

// Peer 2 of three Ricart-Agrawala peers crashes, and peer 0 asks to enter.
// Its request to peer 2 is lost, the reply it needs never comes, and Run
// says so with ErrBlocked rather than a violation: the algorithm assumes
// no crashes. The log replays the run exactly, loss included.
func ExampleSimulation_Crash() {
	sim, err := dmutex.NewSimulation(dmutex.RicartAgrawala, 3, dmutex.SimConfig{Delivery: dmutex.DeliverLockStep})
	if err != nil {
		panic(err)
	}
	if err := sim.Crash(2); err != nil {
		panic(err)
	}
	if err := sim.Request(0); err != nil {
		panic(err)
	}
	err = sim.Run()
	fmt.Println(errors.Is(err, dmutex.ErrBlocked), errors.Is(err, dmutex.ErrViolation))
	fmt.Println(err)
	if err := sim.WriteLog(os.Stdout); err != nil {
		panic(err)
	}
	fmt.Println(sim.Stats(), "lost:", sim.Dropped())
	// Output:
	// true false
	// dmutex: blocked by a fault: after step 2: peers [0] wait forever (messages lost: 1, peers crashed: [2])
	//    0 P2 crash
	//    0 P0 request
	//    0 P0 send m1 request P0->P1 ts=1
	//    0 P0 send m2 request P0->P2 ts=1
	//    0 P2 lost m2 request P0->P2 ts=1
	//    1 P1 receive m1 request P0->P1 ts=1
	//    1 P1 send m3 reply P1->P0 ts=1 ref=1
	//    2 P0 receive m3 reply P1->P0 ts=1 ref=1
	// entries=0 messages=3 (reply=1 request=2) lost: 1
}
