package dmutex

import (
	"context"
	"sync"
	"sync/atomic"
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

func (p *pushEndpoint) SetDeliver(self Transport, f func(Message)) bool {
	if s, ok := self.(*pushEndpoint); !ok || s != p || !p.accept {
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

// recvWrapper is middleware of the common Go kind: it embeds a
// Deliverer, so SetDeliver is promoted into its method set, and declares
// its own Recv, which counts every message on its way to the peer. It
// reads src, the embedded transport's own channel, in a goroutine of its
// own that ends when src is closed; a nil src closes Recv at once.
type recvWrapper struct {
	Deliverer
	out  chan Message
	done chan struct{} // closed by Close
	seen atomic.Int64
	wg   sync.WaitGroup
}

func newRecvWrapper(d Deliverer, src <-chan Message) *recvWrapper {
	w := &recvWrapper{Deliverer: d, out: make(chan Message), done: make(chan struct{})}
	if src == nil {
		close(w.out)
		return w
	}
	w.wg.Go(func() {
		defer close(w.out)
		for m := range src {
			w.seen.Add(1)
			select {
			case w.out <- m:
			case <-w.done:
				return
			}
		}
	})
	return w
}

func (w *recvWrapper) Recv() <-chan Message { return w.out }

func (w *recvWrapper) Close() error {
	close(w.done)
	err := w.Deliverer.Close()
	w.wg.Wait()
	return err
}

// pushWrapper is a recvWrapper that chooses push delivery: it declares
// SetDeliver, passes on its embedded transport as self and counts the
// messages in a function around the peer's.
type pushWrapper struct{ *recvWrapper }

func (w pushWrapper) SetDeliver(self Transport, f func(Message)) bool {
	if s, ok := self.(pushWrapper); !ok || s != w {
		return false
	}
	return w.Deliverer.SetDeliver(w.Deliverer, func(m Message) {
		w.seen.Add(1)
		f(m)
	})
}

// TestEmbeddingWrapperKeepsItsRecv runs Ricart-Agrawala peers over
// wrappers that embed a Deliverer (pushEndpoint, which would accept):
// a wrapper's own Recv must see every message, since the SetDeliver it
// gets by promotion must not switch the embedded transport behind its
// back; a wrapper that declares SetDeliver and forwards itself gets push
// delivery, through its own function.
func TestEmbeddingWrapperKeepsItsRecv(t *testing.T) {
	for _, push := range []bool{false, true} {
		t.Run(map[bool]string{false: "promoted", true: "declared"}[push], func(t *testing.T) {
			const n, rounds = 3, 10
			nw := NewChanNetwork(n)
			ws := make([]*recvWrapper, n)
			peers := make([]*Peer, n)
			for i := range n {
				e := newPushEndpoint(nw.Endpoint(i), true)
				var tr Transport
				if push {
					ws[i] = newRecvWrapper(e, nil)
					tr = pushWrapper{ws[i]}
				} else {
					ws[i] = newRecvWrapper(e, e.ChanEndpoint.Recv())
					tr = ws[i]
				}
				p, err := NewPeer(RicartAgrawala, i, n, tr)
				require.NoError(t, err)
				peers[i] = p
			}
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
			var sent, seen int64
			for i, p := range peers {
				sent += int64(p.Stats().Messages)
				require.NoError(t, p.Close())
				seen += ws[i].seen.Load()
			}
			assert.Equal(t, int64(2*(n-1)*n*rounds), sent, "2(n-1) messages per entry")
			assert.Equal(t, sent, seen, "messages that went past the wrappers")
		})
	}
}
