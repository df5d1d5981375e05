package dmutex

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// enteredOnceBytes returns how many heap bytes a fresh n-peer
// Ricart-Agrawala cluster holds more once its peer 0 has entered and left
// once (every other peer has received a request and replied):
// the heap after a GC, before and after its Lock and Unlock, with the
// cluster quiet again on both sides.
func enteredOnceBytes(tb testing.TB, n int) (float64, *Peer) {
	c, err := NewRicartAgrawala(n)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, c.Close()) })
	p := c.Peers()[0]
	quiesce := func() {
		// Wait until every reply has been received (liveness, no
		// deadline): the cluster sends nothing more after the Unlock.
		for c.Stats().Messages < 2*uint64(n-1) {
			runtime.Gosched()
		}
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	p.Lock()
	p.Unlock()
	quiesce()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	return float64(int64(m1.HeapAlloc) - int64(m0.HeapAlloc)), p
}

// TestPeerBroadcastBufferReleased checks that a peer does not keep its
// broadcast's messages alive between steps at large n (the reusable
// output would hold n-1 messages for good), while at small n it keeps the
// buffer so that the hot path allocates nothing.
func TestPeerBroadcastBufferReleased(t *testing.T) {
	grown, p := enteredOnceBytes(t, 512)
	p.mu.Lock()
	c := cap(p.out.msgs)
	p.mu.Unlock()
	assert.LessOrEqual(t, c, maxKeptOutput, "n=512: the output buffer kept a broadcast's capacity")
	t.Logf("n=512: the cluster holds %.1f KB more after peer 0 entered once (its output capacity %d)", grown/512, c)

	_, small := enteredOnceBytes(t, 8)
	small.mu.Lock()
	defer small.mu.Unlock()
	assert.GreaterOrEqual(t, cap(small.out.msgs), 7, "n=8: the output buffer is kept for the next step")
}
