package grpctransport

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dmutex/dmutex"
)

// BenchmarkGRPC measures one Lock+Unlock, taken by the peers in turn, over
// gRPC on loopback, one transport per peer in this process.
func BenchmarkGRPC(b *testing.B) {
	benchLockUnlock(b, func(b *testing.B, alg dmutex.Algorithm, n int) ([]*dmutex.Peer, func() uint64) {
		peers, trs := startPeers(b, alg, n)
		return peers, func() uint64 { return sentTotal(trs) }
	})
}

// BenchmarkChan is BenchmarkGRPC over the in-memory transport, for
// comparison.
func BenchmarkChan(b *testing.B) {
	benchLockUnlock(b, func(b *testing.B, alg dmutex.Algorithm, n int) ([]*dmutex.Peer, func() uint64) {
		nw := dmutex.NewChanNetwork(n)
		sent := new(atomic.Uint64)
		peers := make([]*dmutex.Peer, n)
		for i := range n {
			p, err := dmutex.NewPeer(alg, i, n, countingTransport{nw.Endpoint(i), sent})
			require.NoError(b, err)
			peers[i] = p
			b.Cleanup(func() { require.NoError(b, p.Close()) })
		}
		return peers, sent.Load
	})
}

// countingTransport counts the messages a transport accepted.
type countingTransport struct {
	dmutex.Transport
	sent *atomic.Uint64
}

func (c countingTransport) Send(to int, m dmutex.Message) error {
	err := c.Transport.Send(to, m)
	if err == nil {
		c.sent.Add(1)
	}
	return err
}

func benchLockUnlock(b *testing.B, start func(*testing.B, dmutex.Algorithm, int) ([]*dmutex.Peer, func() uint64)) {
	for _, alg := range dmutex.Algorithms() {
		for _, n := range []int{3, 8} {
			b.Run(fmt.Sprintf("alg=%v/n=%d", alg, n), func(b *testing.B) {
				peers, sent := start(b, alg, n)
				for _, p := range peers { // connect everything first
					p.Lock()
					p.Unlock()
				}
				before := sent()
				b.ReportAllocs()
				m := startMeter()
				b.ResetTimer()
				for i := range b.N {
					p := peers[i%n]
					p.Lock()
					p.Unlock()
				}
				b.StopTimer()
				m.report(b)
				b.ReportMetric(float64(sent()-before)/float64(b.N), "msgs/op")
			})
		}
	}
}
