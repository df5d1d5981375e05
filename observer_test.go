package dmutex

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is an Observer that keeps everything it is told.
type recorder struct {
	mu       sync.Mutex
	acquired map[int][]time.Duration
	released map[int][]time.Duration
	failed   []error
	sent     map[MessageKind]uint64 // accepted by the transport
	sendErrs []error
	received map[MessageKind]uint64
}

func newRecorder() *recorder {
	return &recorder{
		acquired: map[int][]time.Duration{}, released: map[int][]time.Duration{},
		sent: map[MessageKind]uint64{}, received: map[MessageKind]uint64{},
	}
}

func (r *recorder) Acquired(peer int, wait time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acquired[peer] = append(r.acquired[peer], wait)
}

func (r *recorder) Released(peer int, hold time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.released[peer] = append(r.released[peer], hold)
}

func (r *recorder) Failed(peer int, wait time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, err)
}

func (r *recorder) Sent(peer, to int, kind MessageKind, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.sendErrs = append(r.sendErrs, err)
		return
	}
	r.sent[kind]++
}

func (r *recorder) Received(peer, from int, kind MessageKind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.received[kind]++
}

// byName returns counts keyed by kind name, as Stats.ByKind is.
func byName(m map[MessageKind]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range m {
		out[k.String()] = v
	}
	return out
}

// TestObserverCountsEntriesAndMessages checks, for every algorithm, that
// the observer hears of each entry and each leave, and of the same
// messages, kind by kind, that Stats counts at the transport and that the
// receivers took in.
func TestObserverCountsEntriesAndMessages(t *testing.T) {
	const n, rounds = 4, 5
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			rec := newRecorder()
			c, err := New(v.alg, n, append(v.opts, WithObserver(rec))...)
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close()) }()
			for range rounds {
				for _, p := range c.Peers() {
					p.Lock()
					p.Unlock()
				}
			}
			waitQuiet(t, c)
			s := c.Stats()
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for id := range n {
				assert.Len(t, rec.acquired[id], rounds, "Acquired calls of peer %d", id)
				assert.Len(t, rec.released[id], rounds, "Released calls of peer %d", id)
			}
			assert.Equal(t, s.ByKind, nilIfEmpty(byName(rec.sent)), "Sent against Stats")
			assert.Equal(t, s.ByKind, nilIfEmpty(byName(rec.received)), "Received against Stats, once the network is quiet")
			assert.Empty(t, rec.failed)
			assert.Empty(t, rec.sendErrs)
		})
	}
}

func nilIfEmpty(m map[string]uint64) map[string]uint64 {
	if len(m) == 0 {
		return nil
	}
	return m
}

// TestObserverTimesWaitAndHold checks that the durations cover what the
// caller saw: a hold lasts at least from Lock's return to Unlock's call,
// and a wait at least as long as the holder kept the waiter out.
func TestObserverTimesWaitAndHold(t *testing.T) {
	rec := newRecorder()
	c, err := New(SuzukiKasami, 3, WithObserver(rec))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()

	// Peer 0 holds the idle token, so this also covers the fast path.
	for range 100 {
		c.Peer(0).Lock()
		c.Peer(0).Unlock()
	}
	p0, p1 := c.Peer(0), c.Peer(1)
	p0.Lock()
	in := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p1.Lock()
		p1.Unlock()
	}()
	waitFor(t, func() bool { // p1's caller is blocked in Lock
		c.peers[1].mu.Lock()
		defer c.peers[1].mu.Unlock()
		return len(c.peers[1].waiters) == 1
	})
	waiting := time.Now()
	time.Sleep(10 * time.Millisecond) // a hold of some length; no bound is asserted on it
	out := time.Now()
	p0.Unlock()
	<-done
	waitQuiet(t, c)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.acquired[0], 101)
	require.Len(t, rec.released[0], 101)
	assert.GreaterOrEqual(t, rec.released[0][100], out.Sub(in), "the hold covers Lock's return to Unlock's call")
	require.Len(t, rec.acquired[1], 1)
	assert.GreaterOrEqual(t, rec.acquired[1][0], out.Sub(waiting), "the wait covers the time p1 was seen blocked")
	require.Len(t, rec.released[1], 1)
}

// waitFor polls cond until it holds, for at most a minute.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in a minute")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestObserverFailures checks that a timeout, a cancellation and a closed
// peer each reach Failed with the error the caller got, and no Acquired.
func TestObserverFailures(t *testing.T) {
	rec := newRecorder()
	c, err := New(RicartAgrawala, 3, WithObserver(rec))
	require.NoError(t, err)
	c.Peer(0).Lock()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.Peer(1).LockContext(ctx), context.DeadlineExceeded)
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	require.ErrorIs(t, c.Peer(2).LockContext(ctx2), context.Canceled)
	c.Peer(0).Unlock()
	require.NoError(t, c.Close())
	require.ErrorIs(t, c.Peer(1).LockContext(context.Background()), ErrClosed)
	require.PanicsWithError(t, ErrClosed.Error(), func() { c.Peer(2).Lock() })

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.failed, 4)
	assert.ErrorIs(t, rec.failed[0], context.DeadlineExceeded)
	assert.ErrorIs(t, rec.failed[1], context.Canceled)
	assert.ErrorIs(t, rec.failed[2], ErrClosed)
	assert.ErrorIs(t, rec.failed[3], ErrClosed)
	assert.Len(t, rec.acquired[0], 1)
	assert.Empty(t, rec.acquired[1])
	assert.Empty(t, rec.acquired[2])
}

// failingTransport refuses every message to peer refuse.
type failingTransport struct {
	Transport
	refuse int
}

var errRefused = errors.New("test: refused")

func (f failingTransport) Send(to int, m Message) error {
	if to == f.refuse {
		return errRefused
	}
	return f.Transport.Send(to, m)
}

// TestObserverSendErrors checks that a message the transport refused is
// reported to Sent with its error, and not counted in Stats.
func TestObserverSendErrors(t *testing.T) {
	rec := newRecorder()
	nw := NewChanNetwork(3)
	defer func() { require.NoError(t, nw.Close()) }()
	p, err := NewPeer(RicartAgrawala, 0, 3, failingTransport{nw.Endpoint(0), 2}, WithObserver(rec))
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, p.LockContext(ctx), context.DeadlineExceeded) // nobody answers

	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.Equal(t, []error{errRefused}, rec.sendErrs, "the request to peer 2")
	assert.Equal(t, map[MessageKind]uint64{KindRequest: 1}, rec.sent, "the request to peer 1")
	assert.Equal(t, Stats{Messages: 1, ByKind: map[string]uint64{"request": 1}}, p.Stats())
}

// TestWithObserverBadUse checks that WithObserver refuses nil, a typed
// nil, and the simulator, which has no clock to time anything with.
func TestWithObserverBadUse(t *testing.T) {
	_, err := New(RicartAgrawala, 3, WithObserver(nil))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "WithObserver(nil)")
	_, err = New(RicartAgrawala, 3, WithObserver((*countingObserver)(nil)))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "WithObserver((*dmutex.countingObserver)(nil))")
	_, err = NewSimulation(RicartAgrawala, 3, SimConfig{}, WithObserver(newRecorder()))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "WithObserver")
}

// countingObserver counts calls with atomics, as a metrics adapter would.
type countingObserver struct{ calls atomic.Uint64 }

func (o *countingObserver) Acquired(int, time.Duration)       { o.calls.Add(1) }
func (o *countingObserver) Released(int, time.Duration)       { o.calls.Add(1) }
func (o *countingObserver) Failed(int, time.Duration, error)  { o.calls.Add(1) }
func (o *countingObserver) Sent(int, int, MessageKind, error) { o.calls.Add(1) }
func (o *countingObserver) Received(int, int, MessageKind)    { o.calls.Add(1) }

// BenchmarkObserver is BenchmarkEntry's load=one at n=8 with an observer
// that counts with atomics, beside none: what the hook costs when it is
// set (two clock reads per entry and a call per message).
func BenchmarkObserver(b *testing.B) {
	for _, alg := range []Algorithm{RicartAgrawala, SuzukiKasami} {
		for _, obs := range []string{"none", "counting"} {
			b.Run(fmt.Sprintf("alg=%v/n=8/observer=%s", alg, obs), func(b *testing.B) {
				v := variant{name: alg.String(), alg: alg}
				if obs != "none" {
					v.opts = []Option{WithObserver(&countingObserver{})}
				}
				benchEntry(b, v, 8, false)
			})
		}
	}
}

// TestObserverSeesFastTryLock checks that a TryLock that the armed fast
// path decides, without the machine, is observed as every other entry is.
func TestObserverSeesFastTryLock(t *testing.T) {
	rec := newRecorder()
	c, err := New(SuzukiKasami, 2, WithObserver(rec))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	p := c.Peer(0) // holds the idle token
	const rounds = 5
	for range rounds {
		p.Lock()
		p.Unlock()
	}
	require.NotZero(t, p.fast.word.Load()&fastArmed, "the idle token holder re-enters by the fast path")
	require.True(t, p.TryLock())
	p.Unlock()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.Len(t, rec.acquired[0], rounds+1, "Acquired calls")
	assert.Len(t, rec.released[0], rounds+1, "Released calls")
}

// TestUnlockAfterCloseSendsNothing closes a centralized peer while one of
// its callers holds the lock: that caller's Unlock only clears the hold,
// and no RELEASE goes to the closed transport.
func TestUnlockAfterCloseSendsNothing(t *testing.T) {
	rec := newRecorder()
	c, err := New(Centralized, 2, WithObserver(rec))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	p := c.Peer(1)
	p.Lock()
	require.NoError(t, p.Close())
	p.Unlock()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.Empty(t, rec.sendErrs, "nothing handed to the closed transport")
	assert.Equal(t, uint64(1), rec.sent[KindRequest])
	assert.Zero(t, rec.sent[KindRelease])
}
