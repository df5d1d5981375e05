package grpctransport

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/dmutex/dmutex"
)

// startPeers starts n peers of alg, each on its own gRPC transport on
// loopback. The peers own and close the transports.
func startPeers(t testing.TB, alg dmutex.Algorithm, n int) ([]*dmutex.Peer, []*Transport) {
	t.Helper()
	ls, addrs := listeners(t, n)
	peers := make([]*dmutex.Peer, n)
	trs := make([]*Transport, n)
	for i := range n {
		tr, err := New(i, addrs, WithListener(ls[i]), Insecure(), fastRetry, quiet)
		require.NoError(t, err)
		p, err := dmutex.NewPeer(alg, i, n, tr)
		if err != nil {
			_ = tr.Close()
		}
		require.NoError(t, err)
		peers[i], trs[i] = p, tr
		t.Cleanup(func() { require.NoError(t, p.Close()) })
	}
	return peers, trs
}

// TestAlgorithmsOverGRPC runs every algorithm over gRPC with
// several workers per peer, checking that no two are ever inside at once
// and that the messages the peers counted are the messages the transports
// carried.
func TestAlgorithmsOverGRPC(t *testing.T) {
	rounds := 15
	if testing.Short() {
		rounds = 3
	}
	for _, alg := range dmutex.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			const n, workers = 3, 2
			peers, trs := startPeers(t, alg, n)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var inside, entries atomic.Int32
			eg, ctx := errgroup.WithContext(ctx)
			for _, p := range peers {
				for range workers {
					eg.Go(func() error {
						for range rounds {
							if err := p.LockContext(ctx); err != nil {
								return fmt.Errorf("peer %d: %w", p.ID(), err)
							}
							if !inside.CompareAndSwap(0, 1) {
								p.Unlock()
								return fmt.Errorf("peer %d entered while another peer was inside", p.ID())
							}
							entries.Add(1)
							runtime.Gosched()
							inside.Store(0)
							p.Unlock()
						}
						return nil
					})
				}
			}
			require.NoError(t, eg.Wait())
			require.Equal(t, int32(n*workers*rounds), entries.Load())
			var counted, carried uint64
			for i := range n {
				counted += peers[i].Stats().Messages
				carried += trs[i].Stats().Sent
			}
			assert.Equal(t, counted, carried)
			assert.NotZero(t, carried)
		})
	}
}

// TestSequentialCountsOverGRPC takes the lock on one peer at a time: the
// transports carry exactly what the algorithm's closed form says, as over
// the in-memory transport.
func TestSequentialCountsOverGRPC(t *testing.T) {
	tests := []struct {
		alg  dmutex.Algorithm
		want func(n, id int) uint64
	}{
		{dmutex.RicartAgrawala, func(n, _ int) uint64 { return uint64(2 * (n - 1)) }},
		{dmutex.Lamport, func(n, _ int) uint64 { return uint64(3 * (n - 1)) }},
		{dmutex.Centralized, func(_, id int) uint64 {
			if id == 0 {
				return 0
			}
			return 3
		}},
	}
	for _, tt := range tests {
		for _, n := range []int{2, 3, 5} {
			t.Run(tt.alg.String()+"/n="+strconv.Itoa(n), func(t *testing.T) {
				peers, trs := startPeers(t, tt.alg, n)
				for id, p := range peers {
					before := sentTotal(trs)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					require.NoError(t, p.LockContext(ctx))
					cancel()
					p.Unlock()
					// The last message of an entry (a release) may still be in
					// flight after Unlock; the next entry would wait for it.
					require.Eventually(t, func() bool { return sentTotal(trs)-before >= tt.want(n, id) }, 10*time.Second, time.Millisecond)
					assert.Equal(t, tt.want(n, id), sentTotal(trs)-before, "peer %d", id)
				}
			})
		}
	}
}

func sentTotal(trs []*Transport) uint64 {
	var s uint64
	for _, tr := range trs {
		s += tr.Stats().Sent
	}
	return s
}

// filterWrapper is middleware of the common Go kind around a Transport:
// it embeds it, so SetDeliver is promoted into its method set, and
// declares its own Recv, which counts every message on its way to the
// peer, from a goroutine that reads the embedded Recv.
type filterWrapper struct {
	*Transport
	out  chan dmutex.Message
	done chan struct{} // closed by Close
	seen atomic.Int64
	wg   sync.WaitGroup
}

func newFilterWrapper(tr *Transport) *filterWrapper {
	w := &filterWrapper{Transport: tr, out: make(chan dmutex.Message), done: make(chan struct{})}
	w.wg.Go(func() {
		defer close(w.out)
		for m := range tr.Recv() {
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

func (w *filterWrapper) Recv() <-chan dmutex.Message { return w.out }

func (w *filterWrapper) Close() error {
	close(w.done)
	err := w.Transport.Close()
	w.wg.Wait()
	return err
}

// TestEmbeddingWrapperKeepsItsRecv runs Ricart-Agrawala peers over gRPC
// transports wrapped by filterWrapper: every message must pass the
// wrapper's Recv, since the SetDeliver promoted from the embedded
// Transport must not switch it to push delivery behind the wrapper's back.
func TestEmbeddingWrapperKeepsItsRecv(t *testing.T) {
	const n, rounds = 3, 5
	ls, addrs := listeners(t, n)
	peers := make([]*dmutex.Peer, n)
	ws := make([]*filterWrapper, n)
	for i := range n {
		tr, err := New(i, addrs, WithListener(ls[i]), Insecure(), fastRetry, quiet)
		require.NoError(t, err)
		ws[i] = newFilterWrapper(tr)
		p, err := dmutex.NewPeer(dmutex.RicartAgrawala, i, n, ws[i])
		require.NoError(t, err)
		peers[i] = p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eg, ctx := errgroup.WithContext(ctx)
	for _, p := range peers {
		eg.Go(func() error {
			for range rounds {
				if err := p.LockContext(ctx); err != nil {
					return err
				}
				p.Unlock()
			}
			return nil
		})
	}
	require.NoError(t, eg.Wait())
	var sent, seen int64
	for i, p := range peers {
		sent += int64(p.Stats().Messages)
		require.NoError(t, p.Close())
		seen += ws[i].seen.Load()
	}
	assert.Equal(t, int64(2*(n-1)*n*rounds), sent, "2(n-1) messages per entry")
	assert.Equal(t, sent, seen, "messages that went past the wrappers")
}
