package grpctransport

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dmutex/dmutex"
)

// TestQueueBound sends to a peer that is down: past WithMaxQueue's bound
// Send and Barrier fail with ErrQueueFull, naming the peer, and warn;
// once the peer is up and has acknowledged, Send works again and every
// queued message arrives.
func TestQueueBound(t *testing.T) {
	const bound = 5
	ls, addrs := listeners(t, 2)
	require.NoError(t, ls[1].Close()) // peer 1 is down
	var logs logBuffer
	tr0, err := New(0, addrs, WithListener(ls[0]), Insecure(), fastRetry, WithLogger(logs.logger()), WithMaxQueue(bound))
	require.NoError(t, err)
	defer func() { require.NoError(t, tr0.Close()) }()

	for k := range bound {
		require.NoError(t, tr0.Send(1, msg(0, 1, uint64(k+1))), "message %d fits", k+1)
	}
	err = tr0.Send(1, msg(0, 1, bound+1))
	require.ErrorIs(t, err, ErrQueueFull)
	assert.Contains(t, err.Error(), "peer 1")
	assert.Contains(t, logs.String(), "level=WARN")
	assert.Contains(t, logs.String(), "refusing to queue more")
	assert.Equal(t, uint64(bound), tr0.Stats().Sent, "a refused message is not counted as sent")
	// A barrier's marker finds the queue full too, and Barrier says so
	// at once rather than wait for a marker it could not send.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.ErrorIs(t, tr0.Barrier(ctx), ErrQueueFull)

	l1, err := net.Listen("tcp", addrs[1]) // peer 1 comes up
	require.NoError(t, err)
	tr1, err := New(1, addrs, WithListener(l1), Insecure(), fastRetry, quiet)
	require.NoError(t, err)
	defer func() { require.NoError(t, tr1.Close()) }()
	requireInOrder(t, receive(t, tr1, bound, 30*time.Second), []int{0}, bound)
	require.Eventually(t, func() bool { return tr0.unacked(1) == 0 }, 30*time.Second, time.Millisecond)
	require.NoError(t, tr0.Send(1, msg(0, 1, bound+1)), "room again once acknowledged")
}

// errRecorder is a dmutex.Observer that keeps the send errors.
type errRecorder struct {
	mu   sync.Mutex
	errs []error
}

func (r *errRecorder) Acquired(int, time.Duration)           {}
func (r *errRecorder) Released(int, time.Duration)           {}
func (r *errRecorder) Failed(int, time.Duration, error)      {}
func (r *errRecorder) Received(int, int, dmutex.MessageKind) {}
func (r *errRecorder) Sent(_, _ int, _ dmutex.MessageKind, err error) {
	if err != nil {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
	}
}

// TestQueueBoundReportedByPeer runs a dmutex peer on a transport whose
// other peer is down: the peer's observer hears of the refused request.
func TestQueueBoundReportedByPeer(t *testing.T) {
	ls, addrs := listeners(t, 2)
	require.NoError(t, ls[1].Close())
	tr, err := New(0, addrs, WithListener(ls[0]), Insecure(), fastRetry, quiet, WithMaxQueue(1))
	require.NoError(t, err)
	rec := &errRecorder{}
	p, err := dmutex.NewPeer(dmutex.RicartAgrawala, 0, 2, tr, dmutex.WithObserver(rec))
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()
	// A barrier marker fills peer 1's queue, so the request finds it full.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, tr.Barrier(ctx), context.DeadlineExceeded)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	require.ErrorIs(t, p.LockContext(ctx2), context.DeadlineExceeded)
	require.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.errs) > 0
	}, 10*time.Second, time.Millisecond)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.True(t, errors.Is(rec.errs[0], ErrQueueFull), "%v", rec.errs[0])
	assert.Zero(t, p.Stats().Messages, "the refused request is not counted as sent")
}

func TestWithMaxQueueBad(t *testing.T) {
	_, err := New(0, []string{"127.0.0.1:1"}, Insecure(), WithMaxQueue(0))
	require.ErrorIs(t, err, dmutex.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "WithMaxQueue(0)")
}
