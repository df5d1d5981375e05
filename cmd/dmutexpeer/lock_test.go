package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dmutex/dmutex"
)

// TestLockWaitsAsAMinority: with -recovery, an entry refused because the
// peer is cut off from a majority is asked again until the cut heals,
// and it gives up, naming both reasons, only when its context ends;
// without -recovery, and for any other error, the first answer is the
// answer.
func TestLockWaitsAsAMinority(t *testing.T) {
	c, err := dmutex.New(dmutex.RicartAgrawala, 3, dmutex.WithRecovery(), dmutex.WithUnreachableAfter(20*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	p := c.Peer(0)
	require.NoError(t, c.Network().Partition([]int{0}))
	refused := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		return p.LockContext(ctx)
	}
	require.Eventually(t, func() bool { return errors.Is(refused(), dmutex.ErrPeerUnreachable) }, 10*time.Second, 10*time.Millisecond)

	// Without -recovery the refusal is returned as it is.
	err = (&config{}).lock(context.Background(), p)
	require.ErrorIs(t, err, dmutex.ErrPeerUnreachable)

	// With it, the call waits; the context's end stops it, with both
	// reasons.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err = (&config{recovery: true}).lock(ctx, p)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, dmutex.ErrPeerUnreachable)

	// And once the cut heals, it enters.
	done := make(chan error, 1)
	go func() { done <- (&config{recovery: true}).lock(context.Background(), p) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("entered, or gave up, in a minority: %v", err)
	default:
	}
	c.Network().Heal()
	select {
	case err := <-done:
		require.NoError(t, err)
		p.Unlock()
	case <-time.After(30 * time.Second):
		t.Fatal("no entry after the heal")
	}

	// Another error is returned at once: a context already ended, a
	// closed peer.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, (&config{recovery: true}).lock(ctx, p), context.Canceled)
	closed, err := dmutex.New(dmutex.RicartAgrawala, 3, dmutex.WithRecovery(), dmutex.WithUnreachableAfter(time.Second))
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = (&config{recovery: true}).lock(ctx, closed.Peer(0))
	require.ErrorIs(t, err, dmutex.ErrClosed)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "asked again until the context ended")
}
