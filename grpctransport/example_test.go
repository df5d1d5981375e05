package grpctransport_test

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/dmutex/dmutex"
	"github.com/dmutex/dmutex/grpctransport"
)

// Three Ricart-Agrawala peers in one process, each with its own gRPC
// transport on a loopback port, as three processes would run them. (Give
// every process WithTLS instead of Insecure; see LoadTLSConfig.)
func Example() {
	const n = 3
	lis := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0") // a free port, known before New
		if err != nil {
			fmt.Println(err)
			return
		}
		lis[i], addrs[i] = l, l.Addr().String()
	}
	peers := make([]*dmutex.Peer, n)
	for id := range peers {
		tr, err := grpctransport.New(id, addrs, grpctransport.WithListener(lis[id]), grpctransport.Insecure(),
			grpctransport.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			fmt.Println(err)
			return
		}
		p, err := dmutex.NewPeer(dmutex.RicartAgrawala, id, n, tr) // p owns tr from now on
		if err != nil {
			fmt.Println(err)
			return
		}
		defer p.Close()
		peers[id] = p
	}
	for _, p := range peers {
		p.Lock()
		fmt.Printf("peer %d inside, fence %d\n", p.ID(), p.Fence())
		p.Unlock()
	}
	fmt.Println(peers[0].Stats())
	// Output:
	// peer 0 inside, fence 1
	// peer 1 inside, fence 2
	// peer 2 inside, fence 3
	// entries=1 messages=4 (reply=2 request=2)
}
