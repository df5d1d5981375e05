package dmutex

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFailoverGuards pins what each peer must ignore with recovery on
// (the survivors of a mutation pass): a client takes a grant only from
// its coordinator, for its outstanding request, while it waits, and a
// busy only for its outstanding try; a coordinator that trusts its holder
// again, or suspects a holder of an older term while it rebuilds, starts
// no term; and a peer that trusts a peer again sends nothing.
func TestFailoverGuards(t *testing.T) {
	quiet := func(t *testing.T, c *centralized, ev event, what string) {
		t.Helper()
		before := c.appendState(nil)
		var out output
		c.step(ev, &out)
		assert.Empty(t, out.msgs, what)
		assert.False(t, out.entered, what)
		assert.False(t, out.refused, what)
		assert.Equal(t, before, c.appendState(nil), what)
	}
	cl := recoveryMachine(t, 2, 3)
	quiet(t, cl, fmsg(KindGrant, 0, 2, 0, 0), "a grant while idle")
	fstep(cl, event{kind: evRequest})
	quiet(t, cl, fmsg(KindGrant, 1, 2, 0, 1), "a grant from a peer not the coordinator")
	quiet(t, cl, fmsg(KindGrant, 0, 2, 0, 2), "a grant for another request")
	quiet(t, cl, fmsg(KindBusy, 0, 2, 0, 1), "a busy while waiting, not trying")
	tr := recoveryMachine(t, 2, 3)
	fstep(tr, event{kind: evTry})
	quiet(t, tr, fmsg(KindBusy, 0, 2, 0, 2), "a busy for another try")
	quiet(t, tr, fmsg(KindRelease, 0, 2, 0, 1), "a release from the coordinator")

	co := recoveryMachine(t, 0, 3)
	fstep(co, fmsg(KindRequest, 1, 0, 0, 1))
	require.Equal(t, 1, co.holder)
	quiet(t, co, trust(1), "the holder trusted again")

	nc := recoveryMachine(t, 1, 4)
	fstep(nc, suspect(0))
	fstep(nc, fmsg(KindStatus, 2, 1, 1, 1))
	require.Equal(t, 2, nc.holder, "peer 2 holds a grant of term 0")
	require.True(t, nc.collecting, "peer 3 has not reported")
	msgs, _ := fstep(nc, suspect(2))
	assert.Empty(t, msgs, "a holder of term 0 suspected while peer 1 rebuilds: its fences are below term 1's")
	assert.Equal(t, uint64(1), nc.term)
	assert.Equal(t, -1, nc.holder)

	// A request that comes twice (a duplicating transport, a forgery) is
	// queued once, and served once.
	dq := recoveryMachine(t, 0, 3)
	fstep(dq, fmsg(KindRequest, 1, 0, 0, 1))
	fstep(dq, fmsg(KindRequest, 2, 0, 0, 1))
	quiet(t, dq, fmsg(KindRequest, 2, 0, 0, 1), "a request again while queued")
	msgs, _ = fstep(dq, fmsg(KindRelease, 1, 0, 0, 1))
	require.Equal(t, []Message{{Kind: KindGrant, From: 0, To: 2, TS: 0, Ref: 1}}, msgs)
	msgs, _ = fstep(dq, fmsg(KindRelease, 2, 0, 0, 1))
	assert.Empty(t, msgs, "peer 2 is served once")

	// A hint naming peer 1's own term (forged: only peer 1 can have
	// started it) is ignored; adopting it would make peer 1 coordinator
	// while inside by a grant of term 0, with nobody as its holder, and
	// it would then grant peer 2 beside itself.
	fc := recoveryMachine(t, 1, 3)
	fstep(fc, event{kind: evRequest})
	_, entered := fstep(fc, fmsg(KindGrant, 0, 1, 0, 1))
	require.True(t, entered)
	quiet(t, fc, fmsg(KindStatus, 2, 1, 4, 0), "a hint naming a term of the receiver's own")
	quiet(t, fc, fmsg(KindRequest, 2, 1, 4, 1), "a request of that term")

	p3 := recoveryMachine(t, 3, 4)
	fstep(p3, fmsg(KindCoordinator, 1, 3, 1, 0))
	msgs, _ = fstep(p3, suspect(1))
	require.Equal(t, []Message{{Kind: KindStatus, From: 3, To: 0, TS: 1}}, msgs, "the hint to peer 0")
	fstep(p3, suspect(2))
	msgs, _ = fstep(p3, trust(2))
	assert.Empty(t, msgs, "a trust, the coordinator still suspected")
}
