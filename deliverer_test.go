package dmutex

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pushEndpoint is a ChanEndpoint that is a Deliverer: after SetDeliver, a
// goroutine of its own hands the endpoint's messages to the peer. Its
// Recv holds one message that no peer sent, so a peer that read Recv
// would be seen (and refuse it).
type pushEndpoint struct {
	*ChanEndpoint
	accept bool         // what SetDeliver answers
	decoy  chan Message // returned by Recv
	wg     sync.WaitGroup
}

func newPushEndpoint(e *ChanEndpoint, accept bool) *pushEndpoint {
	p := &pushEndpoint{ChanEndpoint: e, accept: accept}
	if accept {
		p.decoy = make(chan Message, 1)
		p.decoy <- Message{Kind: KindRequest, From: -1, To: e.id}
	}
	return p
}

func (p *pushEndpoint) Recv() <-chan Message {
	if p.accept {
		return p.decoy
	}
	return p.ChanEndpoint.Recv()
}

func (p *pushEndpoint) SetDeliver(f func(Message)) bool {
	if !p.accept {
		return false
	}
	p.wg.Go(func() {
		for m := range p.ChanEndpoint.Recv() {
			f(m)
		}
	})
	return true
}

func (p *pushEndpoint) Close() error {
	err := p.ChanEndpoint.Close()
	p.wg.Wait()
	if p.accept {
		close(p.decoy) // Recv is closed at Close, as for any transport
	}
	return err
}

// deadline bounds a test's wait for peers that may never hear each other.
var deadline = time.Minute

// TestPeerUsesDeliverer runs Ricart-Agrawala peers over transports that
// are Deliverers: when SetDeliver accepts, the messages reach the peers
// through it and Recv is never read; when it refuses, through Recv.
func TestPeerUsesDeliverer(t *testing.T) {
	for _, accept := range []bool{true, false} {
		t.Run(map[bool]string{true: "accepted", false: "refused"}[accept], func(t *testing.T) {
			const n, rounds = 3, 20
			nw := NewChanNetwork(n)
			eps := make([]*pushEndpoint, n)
			peers := make([]*Peer, n)
			for i := range n {
				eps[i] = newPushEndpoint(nw.Endpoint(i), accept)
				p, err := NewPeer(RicartAgrawala, i, n, eps[i])
				require.NoError(t, err)
				peers[i] = p
			}
			// A generous deadline: a peer that heard nothing would wait for ever.
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			var wg sync.WaitGroup
			for _, p := range peers {
				wg.Go(func() {
					for range rounds {
						if !assert.NoError(t, p.LockContext(ctx)) {
							return
						}
						p.Unlock()
					}
				})
			}
			wg.Wait()
			var messages uint64
			for i, p := range peers {
				s := p.Stats()
				assert.Equal(t, uint64(rounds), s.Entries, "peer %d", i)
				assert.Zero(t, s.Refused, "peer %d read its decoy Recv", i)
				messages += s.Messages
				require.NoError(t, p.Close())
				if accept {
					assert.Len(t, eps[i].decoy, 1, "peer %d read Recv", i)
				}
			}
			assert.Equal(t, uint64(2*(n-1)*n*rounds), messages, "2(n-1) messages per entry")
		})
	}
}
