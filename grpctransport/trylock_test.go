package grpctransport

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dmutex/dmutex"
)

// TestTryLockOverGRPC checks TryLock for every algorithm over gRPC with
// three peers: while peer 0 holds the lock, peer 1's try is refused with
// ErrLocked; once it is free, peer 1's try enters; and afterwards every
// peer still locks. The try and busy kinds cross the wire.
func TestTryLockOverGRPC(t *testing.T) {
	for _, alg := range dmutex.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			peers, _ := startPeers(t, alg, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(t, peers[0].LockContext(ctx))
			err := peers[1].TryLockContext(ctx)
			require.True(t, errors.Is(err, dmutex.ErrLocked), "peer 1's try while peer 0 holds: %v", err)
			peers[0].Unlock()

			// The holder's release may still be on its way to the peer
			// that answers the next try: try until it gets there.
			for {
				err := peers[1].TryLockContext(ctx)
				if err == nil {
					break
				}
				require.ErrorIs(t, err, dmutex.ErrLocked)
				time.Sleep(time.Millisecond)
			}
			assert.Positive(t, peers[1].Fence())
			peers[1].Unlock()
			for _, p := range peers {
				require.NoError(t, p.LockContext(ctx), "peer %d", p.ID())
				p.Unlock()
			}
			var tries uint64
			for _, p := range peers {
				tries += p.Stats().ByKind["try"]
			}
			assert.Positive(t, tries, "tries sent over gRPC")
		})
	}
}
