package dmutex

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newCentralizedMachine(t *testing.T, id, n int) *centralized {
	t.Helper()
	m, err := newCentralized(id, n, nil)
	require.NoError(t, err)
	return m.(*centralized)
}

// TestCentralizedIgnoresStrayMessages steps the machines with messages the
// protocol never sends them: each must change nothing, neither let a peer
// in or refuse its try, nor free or grant at the coordinator. A guard that
// is dropped lets one of them through.
func TestCentralizedIgnoresStrayMessages(t *testing.T) {
	msg := func(k MessageKind, from int) event {
		return event{kind: evMessage, msg: Message{Kind: k, From: from}}
	}
	tests := []struct {
		name  string
		id    int
		setup func(c *centralized, out *output)
		ev    event
	}{
		// Peer 1, waiting for its grant.
		{"request from the coordinator", 1, wantGrant, msg(KindRequest, 0)},
		{"release from the coordinator", 1, wantGrant, msg(KindRelease, 0)},
		{"token from the coordinator", 1, wantGrant, msg(KindToken, 0)},
		{"grant from a peer", 1, wantGrant, msg(KindGrant, 2)},
		// Peer 1, not waiting.
		{"grant while idle", 1, nil, msg(KindGrant, 0)},
		{"second grant while inside", 1, func(c *centralized, out *output) {
			c.step(event{kind: evRequest}, out)
			c.step(msg(KindGrant, 0), out)
		}, msg(KindGrant, 0)},
		// The coordinator, waiting behind peer 1.
		{"grant at the coordinator", 0, func(c *centralized, out *output) {
			c.step(msg(KindRequest, 1), out)
			c.step(event{kind: evRequest}, out)
		}, msg(KindGrant, 0)},
		{"release from a waiting peer", 0, func(c *centralized, out *output) {
			c.step(msg(KindRequest, 1), out)
			c.step(msg(KindRequest, 2), out)
		}, msg(KindRelease, 2)},
		{"release with no holder", 0, nil, msg(KindRelease, 1)},
		{"grant from the holder", 0, func(c *centralized, out *output) {
			c.step(msg(KindRequest, 1), out)
			c.step(msg(KindRequest, 2), out)
		}, msg(KindGrant, 1)},
		{"grant to an idle coordinator", 0, nil, msg(KindGrant, 0)},
		// Busy answers only the try that is out, and only from the
		// coordinator.
		{"busy while idle", 1, nil, msg(KindBusy, 0)},
		{"busy while waiting for a grant", 1, wantGrant, msg(KindBusy, 0)},
		{"busy from a peer", 1, wantTry, msg(KindBusy, 2)},
		{"request from the coordinator while trying", 1, wantTry, msg(KindRequest, 0)},
		{"try at a peer", 1, nil, msg(KindTry, 2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCentralizedMachine(t, tt.id, 3)
			var out output
			if tt.setup != nil {
				tt.setup(c, &out)
			}
			before := c.appendState(nil)
			out.reset()
			c.step(tt.ev, &out)
			assert.False(t, out.entered, "entered")
			assert.False(t, out.refused, "refused")
			assert.Empty(t, out.msgs)
			assert.Equal(t, before, c.appendState(nil), "state changed")
		})
	}
}

func wantGrant(c *centralized, out *output) { c.step(event{kind: evRequest}, out) }

func wantTry(c *centralized, out *output) { c.step(event{kind: evTry}, out) }

// TestCentralizedQueue pins the coordinator's queue: requests wait in
// arrival order behind the holder, and each release grants the oldest.
func TestCentralizedQueue(t *testing.T) {
	c := newCentralizedMachine(t, 0, 4)
	var out output
	step := func(k MessageKind, from int) []Message {
		out.reset()
		c.step(event{kind: evMessage, msg: Message{Kind: k, From: from}}, &out)
		return append([]Message(nil), out.msgs...)
	}
	grant := func(to int) []Message { return []Message{{Kind: KindGrant, From: 0, To: to}} }
	require.Equal(t, grant(2), step(KindRequest, 2))
	require.Empty(t, step(KindRequest, 3))
	require.Empty(t, step(KindRequest, 1))
	require.Equal(t, grant(3), step(KindRelease, 2))
	require.Equal(t, grant(1), step(KindRelease, 3))
	require.Empty(t, step(KindRelease, 1))
	assert.Equal(t, -1, c.holder)
	assert.Empty(t, c.queue)
}

// TestCentralizedCloneAndState checks that a clone shares no queue with
// its original, and that the encoding tells apart the states that behave
// differently: a peer waiting for its grant or not, a coordinator with a
// holder or none.
func TestCentralizedCloneAndState(t *testing.T) {
	c := newCentralizedMachine(t, 0, 7)
	c.holder = 1
	c.queue = make([]int, 3, 8) // spare capacity, which a shared array would expose
	copy(c.queue, []int{2, 3, 4})
	d := c.clone().(*centralized)
	require.Equal(t, c.appendState(nil), d.appendState(nil))
	var out output
	d.step(event{kind: evMessage, msg: Message{Kind: KindRequest, From: 5}}, &out)
	c.step(event{kind: evMessage, msg: Message{Kind: KindRequest, From: 6}}, &out)
	assert.Equal(t, []int{2, 3, 4, 5}, d.queue, "a clone shares no queue with its original")
	assert.Equal(t, []int{2, 3, 4, 6}, c.queue)

	idle, free := newCentralizedMachine(t, 1, 3), newCentralizedMachine(t, 0, 3)
	waiting := newCentralizedMachine(t, 1, 3)
	waiting.step(event{kind: evRequest}, &out)
	assert.NotEqual(t, idle.appendState(nil), waiting.appendState(nil), "waiting for a grant")
	held := newCentralizedMachine(t, 0, 3)
	held.step(event{kind: evMessage, msg: Message{Kind: KindRequest, From: 1}}, &out)
	assert.NotEqual(t, free.appendState(nil), held.appendState(nil), "a holder")
}

// TestCentralizedIdleViolation pins what a machine at rest must not keep:
// a request or a try that is out, or at the coordinator a holder or a
// queue. The model checker asks each machine at every rest, so a check
// that says nothing would hide a leak.
func TestCentralizedIdleViolation(t *testing.T) {
	var out output
	peer := newCentralizedMachine(t, 1, 3)
	assert.Empty(t, peer.idleViolation())
	peer.step(event{kind: evRequest}, &out)
	assert.Equal(t, "keeps a request", peer.idleViolation(), "waiting")

	peer = newCentralizedMachine(t, 1, 3)
	peer.step(event{kind: evTry}, &out)
	assert.Equal(t, "keeps a request", peer.idleViolation(), "trying")

	coord := newCentralizedMachine(t, 0, 3)
	coord.step(event{kind: evMessage, msg: Message{Kind: KindRequest, From: 1}}, &out)
	assert.Equal(t, "keeps holder 1 and queue []", coord.idleViolation())
	coord.step(event{kind: evMessage, msg: Message{Kind: KindRequest, From: 2}}, &out)
	assert.Equal(t, "keeps holder 1 and queue [2]", coord.idleViolation())

	coord = newCentralizedMachine(t, 0, 3)
	coord.step(event{kind: evRequest}, &out)
	assert.Equal(t, "keeps holder 0 and queue []", coord.idleViolation(), "the coordinator inside")
}

// TestCentralizedNeeds pins whom a request waits for (WithUnreachableAfter
// gives up when one of them is unreachable): a peer needs the coordinator,
// the coordinator needs the holder, and nobody when it holds or nobody
// does.
func TestCentralizedNeeds(t *testing.T) {
	var out output
	assert.Equal(t, []int{0}, newCentralizedMachine(t, 1, 3).needs(nil), "a peer")
	coord := newCentralizedMachine(t, 0, 3)
	assert.Empty(t, coord.needs(nil), "the idle coordinator")
	coord.step(event{kind: evMessage, msg: Message{Kind: KindRequest, From: 2}}, &out)
	assert.Equal(t, []int{2}, coord.needs(nil), "the coordinator behind peer 2")

	coord = newCentralizedMachine(t, 0, 3)
	coord.step(event{kind: evRequest}, &out)
	assert.Empty(t, coord.needs(nil), "the coordinator inside")

	assert.Equal(t, []int{0}, heldByZero(t).needs(nil), "with recovery: coordinator 1 behind peer 0")
}

// TestCentralizedStateShowsEveryField holds the encoding to the machine
// interface's promise, with recovery on: changing any one field of a
// machine changes its encoding, so two machines that encode alike behave
// alike.
func TestCentralizedStateShowsEveryField(t *testing.T) {
	base := func() *centralized {
		c := recoveryMachine(t, 1, 3)
		c.holder = 2
		c.queue = []int{0}
		c.term, c.req, c.held = 4, 5, 6
		c.nums[0] = 7
		return c
	}
	fields := []struct {
		name string
		set  func(c *centralized)
	}{
		{"wanting", func(c *centralized) { c.wanting = true }},
		{"trying", func(c *centralized) { c.trying = true }},
		{"holder", func(c *centralized) { c.holder = 0 }},
		{"queue", func(c *centralized) { c.queue = []int{0, 2} }},
		{"inside", func(c *centralized) { c.inside = true }},
		{"term", func(c *centralized) { c.term = 7 }},
		{"req", func(c *centralized) { c.req = 8 }},
		{"suspected", func(c *centralized) { c.suspected[0] = true }},
		{"collecting", func(c *centralized) { c.collecting = true }},
		{"reported", func(c *centralized) { c.reported[2] = true }},
		{"nums", func(c *centralized) { c.nums[2] = 1 }},
		{"held", func(c *centralized) { c.held = 9 }},
	}
	want := base().appendState(nil)
	for _, f := range fields {
		c := base()
		f.set(c)
		assert.NotEqual(t, want, c.appendState(nil), f.name)
	}
}
