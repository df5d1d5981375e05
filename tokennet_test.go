package dmutex

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tokNet drives a World of one token algorithm by hand: the test decides
// which message is delivered next, from every message in flight (the
// world's bag, in order of sending). The World counts every message as a
// machine hands it over and checks after every step that exactly one
// token exists and at most one peer is inside; tokNet adds that only the
// token's holder is inside, and that Suzuki-Kasami sends the token only to
// a peer that still wants it.
type tokNet struct {
	alg Algorithm
	w   *World
}

func newTokNet(t testing.TB, alg Algorithm, n int, variant string, opts ...Option) *tokNet {
	t.Helper()
	cfg, err := newWorldConfig(alg, n, WorldConfig{Variant: variant, NoTrace: true, Network: NetworkUnordered}, opts)
	require.NoError(t, err)
	w, err := newWorld(cfg, nil)
	require.NoError(t, err)
	nw := &tokNet{alg: alg, w: w}
	require.NoError(t, nw.check())
	return nw
}

// inflight returns the messages in flight, in order of sending.
func (nw *tokNet) inflight() []Message {
	var ms []Message
	for _, m := range nw.w.Messages() {
		ms = append(ms, m.Msg)
	}
	return ms
}

func (nw *tokNet) wanting(id int) bool { return nw.w.peers[id].d.requested }
func (nw *tokNet) inside(id int) bool  { return nw.w.peers[id].d.inside }
func (nw *tokNet) entries() int        { return int(nw.w.entries) }

// sent returns the messages sent so far, by kind.
func (nw *tokNet) sent() [numKinds]int {
	var s [numKinds]int
	for k, v := range nw.w.sent {
		s[k] = int(v)
	}
	return s
}

// apply takes t and checks what tokNet adds to the world's checks.
func (nw *tokNet) apply(t Transition) error {
	if _, err := nw.w.Apply(t); err != nil {
		return err
	}
	return nw.check()
}

// request asks for the critical section at peer id.
func (nw *tokNet) request(id int) error {
	if nw.wanting(id) || nw.inside(id) {
		return nil // the driver never asks twice
	}
	if err := nw.w.Request(id); err != nil {
		return err
	}
	return nw.check()
}

// release leaves the critical section at peer id.
func (nw *tokNet) release(id int) error {
	return nw.apply(Transition{Kind: TransLeave, Peer: id})
}

// deliver hands in-flight message i to its receiver.
func (nw *tokNet) deliver(i int) error {
	f := nw.w.Messages()[i]
	m := f.Msg
	if nw.alg == SuzukiKasami && m.Kind == KindToken && !nw.wanting(m.To) {
		// Suzuki-Kasami sends the token only to serve a request that is
		// still outstanding, so its receiver always waits for it.
		return fmt.Errorf("token sent from peer %d to peer %d, which does not want it", m.From, m.To)
	}
	return nw.apply(Transition{Kind: TransDeliver, Peer: m.To, Seq: f.Seq, Msg: m})
}

// next picks the message to deliver: the oldest one, or with rng a random
// one (the newest one half the time), which in fifo mode is the oldest of
// its sender-receiver pair.
func (nw *tokNet) next(rng *rand.Rand, fifo bool) int {
	if rng == nil {
		return 0
	}
	inflight := nw.inflight()
	i := rng.IntN(len(inflight))
	if rng.IntN(2) == 0 {
		// Favour the newest message half the time, so that old ones
		// linger and arrive late, long after their moment.
		i = len(inflight) - 1
	}
	if fifo {
		for j := range i {
			if inflight[j].From == inflight[i].From && inflight[j].To == inflight[i].To {
				return j
			}
		}
	}
	return i
}

// drain delivers messages until none is left, releasing every peer that
// enters as soon as it does. It fails after limit deliveries, so a token
// that never rests is caught.
func (nw *tokNet) drain(rng *rand.Rand, fifo bool, limit int) error {
	for steps := 0; len(nw.w.bag) > 0; steps++ {
		if steps == limit {
			return fmt.Errorf("still %d messages in flight after %d deliveries", len(nw.w.bag), limit)
		}
		if err := nw.deliver(nw.next(rng, fifo)); err != nil {
			return err
		}
		if err := nw.releaseAll(); err != nil {
			return err
		}
	}
	return nil
}

func (nw *tokNet) releaseAll() error {
	for id := range nw.w.n {
		if nw.inside(id) {
			if err := nw.release(id); err != nil {
				return err
			}
		}
	}
	return nil
}

// total returns the number of messages sent so far.
func (nw *tokNet) total() int { return int(nw.w.Stats().Messages) }

// check adds to the world's checks that only a peer that holds the token
// is inside.
func (nw *tokNet) check() error {
	for id, m := range nw.w.ms {
		if nw.inside(id) && !m.(tokenHolder).hasToken() {
			return fmt.Errorf("peer %d is inside without the token", id)
		}
	}
	return nil
}

// runRandom makes every peer request rounds times at random moments while
// messages are delivered in a random (seeded, replayable) order, then
// drains the network and checks that every request was served.
func (nw *tokNet) runRandom(rng *rand.Rand, fifo bool, rounds int) error {
	n := nw.w.n
	left := make([]int, n)
	for i := range left {
		left[i] = rounds
	}
	pending := n * rounds
	for steps := 0; pending > 0 || len(nw.w.bag) > 0; steps++ {
		if steps > 100000 {
			return fmt.Errorf("no progress after %d steps", steps)
		}
		var err error
		switch c := rng.IntN(3); {
		case c == 0 && pending > 0:
			id := rng.IntN(n)
			if left[id] > 0 && !nw.wanting(id) && !nw.inside(id) {
				left[id]--
				pending--
				err = nw.request(id)
			}
		case c == 1:
			err = nw.releaseAll()
		case len(nw.w.bag) > 0:
			err = nw.deliver(nw.next(rng, fifo))
		}
		if err != nil {
			return err
		}
		if len(nw.w.bag) == 0 && pending == 0 {
			if err := nw.releaseAll(); err != nil {
				return err
			}
		}
	}
	for id := range n {
		if nw.wanting(id) {
			return fmt.Errorf("peer %d still waits with no message in flight (a stranded request)", id)
		}
	}
	if nw.entries() != n*rounds {
		return fmt.Errorf("%d entries, want %d", nw.entries(), n*rounds)
	}
	return nil
}

// tokTransport wraps a Transport and keeps the books of token
// messages as the network sees them: a peer holds the token between
// receiving it and sending it on. Every Send and every receipt checks,
// under one lock, that each peer holds 0 or 1 tokens and that holders plus
// tokens in flight make exactly one. The first violation is kept.
type tokTransport struct {
	inner Transport
	books *tokenBooks
	id    int
	out   chan Message
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

type tokenBooks struct {
	mu       sync.Mutex
	held     []int // per peer: tokens received (or given at start) minus sent
	inflight int
	moves    int
	err      error
}

func newTokenBooks(n, start int) *tokenBooks {
	b := &tokenBooks{held: make([]int, n)}
	b.held[start] = 1
	return b
}

// sent books a token leaving peer id; received books one arriving there.
func (b *tokenBooks) sent(id int)     { b.book(id, -1) }
func (b *tokenBooks) received(id int) { b.book(id, +1) }

func (b *tokenBooks) book(id, delta int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held[id] += delta
	b.inflight -= delta
	if delta < 0 {
		b.moves++
	}
	holders := 0
	for j, h := range b.held {
		if h != 0 && h != 1 && b.err == nil {
			b.err = fmt.Errorf("peer %d holds %d tokens", j, h)
		}
		if h > 0 {
			holders++
		}
	}
	if holders+b.inflight != 1 && b.err == nil {
		b.err = fmt.Errorf("%d holders and %d tokens in flight", holders, b.inflight)
	}
}

func (b *tokenBooks) check() (moves int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.moves, b.err
}

func newTokTransport(inner Transport, books *tokenBooks, id int) *tokTransport {
	c := &tokTransport{inner: inner, books: books, id: id, out: make(chan Message), done: make(chan struct{})}
	c.wg.Add(1)
	go c.forward()
	return c
}

// isTokenKind reports whether messages of kind k carry the token of one
// of the token algorithms this test drives.
func isTokenKind(k MessageKind) bool { return k == KindToken || k == KindPrivilege }

func (c *tokTransport) Send(to int, m Message) error {
	if isTokenKind(m.Kind) {
		// Booked before the receiver can see it, so a receipt never
		// comes before its send in the books.
		c.books.sent(c.id)
	}
	return c.inner.Send(to, m)
}

func (c *tokTransport) forward() {
	defer c.wg.Done()
	defer close(c.out)
	for {
		select {
		case m, ok := <-c.inner.Recv():
			if !ok {
				return
			}
			if isTokenKind(m.Kind) {
				c.books.received(c.id)
			}
			select {
			case c.out <- m:
			case <-c.done:
				return
			}
		case <-c.done:
			return
		}
	}
}

func (c *tokTransport) Recv() <-chan Message { return c.out }

func (c *tokTransport) Close() error {
	var err error
	c.once.Do(func() {
		close(c.done)
		err = c.inner.Close()
		c.wg.Wait()
	})
	return err
}

// TestTokenUniquenessAtTransport runs each token algorithm over real peers
// whose transports keep the books of token messages, while callers lock,
// and give up at random short deadlines, on every peer. From the
// network's view, exactly one token exists at every moment, and no peer
// ever holds two; a token withdrawn on its way is neither lost nor
// duplicated, so every peer can still lock at the end.
func TestTokenUniquenessAtTransport(t *testing.T) {
	calls := 300
	if testing.Short() {
		calls = 60
	}
	for _, alg := range []Algorithm{SuzukiKasami, TokenRing, Raymond} {
		for _, n := range []int{2, 5, 8} {
			t.Run(alg.String()+"/n="+strconv.Itoa(n), func(t *testing.T) {
				books := newTokenBooks(n, 0)
				nw := NewChanNetwork(n)
				peers := make([]*Peer, n)
				for id := range n {
					p, err := NewPeer(alg, id, n, newTokTransport(nw.Endpoint(id), books, id))
					require.NoError(t, err)
					peers[id] = p
					t.Cleanup(func() { require.NoError(t, p.Close()) })
				}
				var g guard
				var wg sync.WaitGroup
				var gaveUp atomic.Int64
				errs := make(chan error, 2*n)
				for i := range 2 * n {
					wg.Go(func() {
						p := peers[i%n]
						rng := rand.New(rand.NewPCG(uint64(i), 9))
						for range calls / 2 {
							d := time.Duration(rng.IntN(300)) * time.Microsecond
							ctx, cancel := context.WithTimeout(context.Background(), d)
							err := p.LockContext(ctx)
							cancel()
							if err == nil {
								if err := g.enter(p.ID()); err != nil {
									errs <- err
								}
								g.leave()
								p.Unlock()
							} else if errors.Is(err, context.DeadlineExceeded) {
								gaveUp.Add(1)
							} else {
								errs <- err
							}
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					require.NoError(t, err)
				}
				for _, p := range peers {
					lockWithin(t, p, 10*time.Second)
					p.Unlock()
				}
				moves, err := books.check()
				require.NoError(t, err)
				t.Logf("%d token moves checked; %d of %d calls gave up", moves, gaveUp.Load(), n*calls)
				if n > 1 {
					assert.Positive(t, moves)
				}
			})
		}
	}
}

// TestTokenBooks shows the transport's books catch a duplicated or a
// conjured token.
func TestTokenBooks(t *testing.T) {
	tests := []struct {
		name    string
		moves   func(b *tokenBooks)
		wantErr string
	}{
		{"a token passed along", func(b *tokenBooks) { b.sent(0); b.received(1); b.sent(1); b.received(2) }, ""},
		{"a holder sends it twice", func(b *tokenBooks) { b.sent(0); b.sent(0) }, "peer 0 holds -1 tokens"},
		{"a peer sends one it never got", func(b *tokenBooks) { b.sent(1) }, "peer 1 holds -1 tokens"},
		{"a second arrives where one is held", func(b *tokenBooks) { b.sent(0); b.received(1); b.sent(2); b.received(1) }, "peer 2 holds -1 tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTokenBooks(3, 0)
			tt.moves(b)
			_, err := b.check()
			if tt.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.EqualError(t, err, tt.wantErr)
			}
		})
	}
}

// BenchmarkTokenAlgorithms times one lock and unlock, either always at
// peer 0 ("hot": the Suzuki-Kasami and Raymond token stays there) or at
// each peer in turn ("round-robin"), and reports the messages counted at
// the transport per entry.
func BenchmarkTokenAlgorithms(b *testing.B) {
	for _, alg := range []Algorithm{SuzukiKasami, TokenRing, Raymond} {
		for _, n := range []int{3, 8, 32} {
			for _, mode := range []string{"hot", "round-robin"} {
				b.Run(fmt.Sprintf("alg=%v/n=%d/mode=%s", alg, n, mode), func(b *testing.B) {
					c, err := New(alg, n)
					require.NoError(b, err)
					defer func() { require.NoError(b, c.Close()) }()
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						p := c.Peer(0)
						if mode != "hot" {
							p = c.Peer(i % n)
							i++
						}
						p.Lock()
						p.Unlock()
					}
					b.ReportMetric(float64(c.Stats().Messages)/float64(c.Stats().Entries), "msgs/op")
				})
			}
		}
	}
}

// TestTokenRandomDelivery runs each token algorithm's machines over a
// seeded network, FIFO or reordering (old messages arriving late),
// checking after every step that exactly one token exists and at most one
// peer is inside, and that every request is served in the end. A failing
// seed replays.
func TestTokenRandomDelivery(t *testing.T) {
	t.Parallel() // computation on the test's goroutine only: beside the other parallel tests at the end
	seeds := 300
	if testing.Short() || raceLight() { // 3 s under -race
		seeds = 50
	}
	for _, tt := range []struct {
		alg   Algorithm
		sizes []int
	}{
		{SuzukiKasami, []int{1, 2, 3, 5}},
		{TokenRing, []int{1, 2, 3, 5}},
		{Raymond, []int{1, 2, 3, 5, 7}},
	} {
		for _, n := range tt.sizes {
			for _, fifo := range []bool{true, false} {
				t.Run(fmt.Sprintf("%v/n=%d/fifo=%v", tt.alg, n, fifo), func(t *testing.T) {
					for seed := range uint64(seeds) {
						nw := newTokNet(t, tt.alg, n, "")
						err := nw.runRandom(rand.New(rand.NewPCG(seed, uint64(tt.alg))), fifo, 4)
						require.NoError(t, err, "seed %d", seed)
					}
				})
			}
		}
	}
}
