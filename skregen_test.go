package dmutex

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newSKRecovery returns peer id of n with token regeneration on.
func newSKRecovery(t *testing.T, id, n int) *suzukiKasami {
	t.Helper()
	cfg, err := newConfig(SuzukiKasami, n, forWorld, []Option{WithRecovery()})
	require.NoError(t, err)
	m, err := cfg.newMachine(SuzukiKasami, id, n)
	require.NoError(t, err)
	return m.(*suzukiKasami)
}

func skStep(s machine, ev event) *output {
	out := &output{}
	s.step(ev, out)
	return out
}

func skSuspect(j int) event { return event{kind: evSuspect, msg: Message{From: j}} }

func skMsg(m Message) event { return event{kind: evMessage, msg: m} }

// TestSKRecoveryRound: the lowest unsuspected peer starts an epoch whose
// remainder is its id, tells every other peer, and regenerates once every
// unsuspected peer has reported, with LN from the statuses.
func TestSKRecoveryRound(t *testing.T) {
	s := newSKRecovery(t, 1, 3) // no token: peer 0 has it
	out := skStep(s, skSuspect(2))
	assert.Empty(t, out.msgs, "peer 1 is not the coordinator while it trusts peer 0")
	s = newSKRecovery(t, 1, 3)
	out = skStep(s, skSuspect(0))
	require.Len(t, out.msgs, 2, "a coordinator message to every other peer, suspected or not")
	for i, to := range []int{0, 2} {
		assert.Equal(t, Message{Kind: KindCoordinator, From: 1, To: to, Ref: 4}, out.msgs[i])
	}
	assert.True(t, s.collecting, "waiting for peer 2's status")
	// Every other peer is suspected: the token is made at once, and peer
	// 1, which waits for nothing, keeps it idle.
	s = newSKRecovery(t, 1, 3)
	skStep(s, skSuspect(2))
	s.rn = []uint64{3, 0, 2}
	out = skStep(s, skSuspect(0))
	assert.False(t, s.collecting)
	require.True(t, s.hasToken())
	assert.Equal(t, []uint64{3, 0, 2}, s.token.LN, "peers that did not report: every known request counts as served")
	assert.Len(t, out.msgs, 2)

	// Peer 0 coordinates, peer 2 is suspected, peer 1 reports that its
	// request 2 waits: the new token goes to it.
	s = newSKRecovery(t, 0, 3)
	require.True(t, s.hasToken())
	s.rn = []uint64{0, 1, 0}
	out = skStep(s, skSuspect(2))
	assert.False(t, s.hasToken(), "the coordinator drops its claim to the old token")
	assert.Equal(t, uint64(3), s.epoch)
	require.Len(t, out.msgs, 2)
	out = skStep(s, skMsg(Message{Kind: KindStatus, From: 1, To: 0, TS: 1, Ref: 3, Token: &Token{LN: []uint64{0, 2, 5}}}))
	require.Len(t, out.msgs, 1)
	m := out.msgs[0]
	assert.Equal(t, KindToken, m.Kind)
	assert.Equal(t, 1, m.To)
	assert.Equal(t, uint64(3), m.Ref, "the token carries its epoch")
	assert.Equal(t, []uint64{0, 1, 5}, m.Token.LN, "LN: the reporter's count, the highest known request of the unreported")
}

// TestSKRecoveryRefused: coordinator messages and statuses that no
// correct peer sends are refused before they change anything.
func TestSKRecoveryRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		m    Message
	}{
		{"epoch of another coordinator", Message{Kind: KindCoordinator, From: 1, To: 0, Ref: 5}},
		{"epoch zero", Message{Kind: KindCoordinator, From: 1, To: 0}},
		{"status without RN", Message{Kind: KindStatus, From: 1, To: 0, Ref: 3}},
		{"status with a short RN", Message{Kind: KindStatus, From: 1, To: 0, Ref: 3, Token: &Token{LN: []uint64{0, 0}}}},
		{"status with a queue", Message{Kind: KindStatus, From: 1, To: 0, Ref: 3, Token: &Token{LN: []uint64{0, 0, 0}, Queue: []int{2}}}},
		{"status counting more than it asked", Message{Kind: KindStatus, From: 1, To: 0, TS: 2, Ref: 3, Token: &Token{LN: []uint64{0, 1, 0}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newSKRecovery(t, 0, 3)
			skStep(s, skSuspect(2)) // collecting epoch 3, waiting for peer 1
			before := s.appendState(nil)
			out := skStep(s, skMsg(tt.m))
			assert.Empty(t, out.msgs)
			assert.Equal(t, before, s.appendState(nil))
		})
	}
}

// TestSKRecoveryEpochs: a token of an older epoch is discarded where it
// arrives; a holder inside that hears of a newer epoch loses its claim
// and sends its status, not the token, when it leaves.
func TestSKRecoveryEpochs(t *testing.T) {
	s := newSKRecovery(t, 2, 3)
	skStep(s, event{kind: evRequest})
	out := skStep(s, skMsg(Message{Kind: KindCoordinator, From: 1, To: 2, Ref: 4}))
	require.Len(t, out.msgs, 1)
	assert.Equal(t, Message{Kind: KindStatus, From: 2, To: 1, TS: 0, Ref: 4, Token: &Token{LN: []uint64{0, 0, 1}}}, out.msgs[0],
		"a waiting peer reports its request as not served yet")
	out = skStep(s, skMsg(Message{Kind: KindToken, From: 0, To: 2, Token: &Token{LN: make([]uint64, 3)}}))
	assert.False(t, out.entered, "a token of epoch 0 after epoch 4 is discarded")
	assert.False(t, s.hasToken())
	assert.Empty(t, out.msgs)
	out = skStep(s, skMsg(Message{Kind: KindToken, From: 1, To: 2, Ref: 4, Token: &Token{LN: make([]uint64, 3)}}))
	assert.True(t, out.entered, "the token of the current epoch is taken")

	// Inside with the current token, then a newer epoch: the claim goes,
	// the status waits for the release, and the release passes nothing.
	out = skStep(s, skMsg(Message{Kind: KindCoordinator, From: 0, To: 2, Ref: 6}))
	assert.Empty(t, out.msgs)
	assert.False(t, s.hasToken())
	assert.True(t, s.owe)
	skStep(s, skRequest(1, 1))
	out = skStep(s, event{kind: evRelease})
	require.Len(t, out.msgs, 1)
	assert.Equal(t, KindStatus, out.msgs[0].Kind)
	assert.Equal(t, 0, out.msgs[0].To, "to epoch 6's coordinator")
	assert.Equal(t, uint64(1), out.msgs[0].TS)

	// A coordinator message of an older epoch gets a status of the newer
	// one, which makes that coordinator give up its round.
	out = skStep(s, skMsg(Message{Kind: KindCoordinator, From: 1, To: 2, Ref: 4}))
	require.Len(t, out.msgs, 1)
	assert.Equal(t, uint64(6), out.msgs[0].Ref)
	c := newSKRecovery(t, 1, 3)
	skStep(c, skSuspect(0))
	require.True(t, c.collecting)
	skStep(c, skMsg(Message{Kind: KindStatus, From: 2, To: 1, Ref: 8, Token: &Token{LN: make([]uint64, 3)}}))
	assert.False(t, c.collecting, "epoch 8's coordinator, peer 2, is not suspected: it completes the round")
	assert.Equal(t, uint64(8), c.epoch)

	// The newer epoch's coordinator is one this peer suspects, and this
	// peer is the lowest it does not: it takes over with an epoch above,
	// since a crashed coordinator never completes its round.
	c = newSKRecovery(t, 1, 3)
	skStep(c, skSuspect(0))
	out = skStep(c, skMsg(out.msgs[0]))
	assert.True(t, c.collecting)
	assert.Equal(t, uint64(10), c.epoch, "the next epoch of peer 1 above 6")
	assert.Len(t, out.msgs, 2, "a coordinator message to each other peer")

	// The same when the newer epoch comes in its coordinator's own
	// message, from a peer this one suspects: it reports, then takes over.
	c = newSKRecovery(t, 1, 3)
	skStep(c, skSuspect(0))
	out = skStep(c, skMsg(Message{Kind: KindCoordinator, From: 0, To: 1, Ref: 6}))
	assert.True(t, c.collecting)
	assert.Equal(t, uint64(10), c.epoch)
	require.Len(t, out.msgs, 3, "the status for epoch 6, then a coordinator message to each other peer")
	assert.Equal(t, KindStatus, out.msgs[0].Kind)
	assert.Equal(t, KindCoordinator, out.msgs[1].Kind)
}

// TestSKWithoutRecovery: without WithRecovery the machine ignores the
// detector and the recovery's messages, and its state encodes as before.
func TestSKWithoutRecovery(t *testing.T) {
	s := newSKMachine(t, 0, 3)
	before := s.appendState(nil)
	for _, ev := range []event{
		skSuspect(1),
		{kind: evTrust, msg: Message{From: 1}},
		skMsg(Message{Kind: KindCoordinator, From: 1, To: 0, Ref: 4}),
		skMsg(Message{Kind: KindStatus, From: 1, To: 0, Ref: 3, Token: &Token{LN: make([]uint64, 3)}}),
	} {
		out := skStep(s, ev)
		assert.Empty(t, out.msgs)
	}
	assert.Equal(t, before, s.appendState(nil))
	assert.True(t, s.hasToken())
}

// TestSKRecoveryRuntime crashes the token's holder of a 3-peer
// Suzuki-Kasami cluster with regeneration on, idle or inside, and checks
// that the survivors go on entering, each in turn, with fences above the
// crashed holder's.
func TestSKRecoveryRuntime(t *testing.T) {
	const n, crashed, rounds = 3, 0, 3
	for _, inside := range []bool{false, true} {
		t.Run("inside="+strconv.FormatBool(inside), func(t *testing.T) {
			c, err := New(SuzukiKasami, n, WithRecovery(), WithUnreachableAfter(unreachableAfter))
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, c.Close()) })
			dead := c.Peer(crashed)
			lockWithin(t, dead, time.Minute) // peer 0 holds the token from the start
			deadFence := dead.Fence()
			if !inside {
				dead.Unlock()
			}
			waitQuiet(t, c)
			require.NoError(t, c.Network().Crash(crashed))
			last := deadFence
			for round := range rounds {
				for id := 1; id < n; id++ {
					p := c.Peer(id)
					lockWithin(t, p, time.Minute)
					f := p.Fence()
					assert.Greater(t, f, last, "round %d peer %d", round, id)
					last = f
					p.Unlock()
				}
			}
			assert.Equal(t, uint64(rounds*(n-1)), c.Stats().Entries-1)
			assert.NotZero(t, c.Stats().ByKind["coordinator"], "a regeneration round ran")
		})
	}
}

// TestSKReachedGuards: evReached starts a round only in a cluster with
// recovery, for another peer of the cluster. A coordinator without
// recovery keeps its token and sends nothing; with recovery, a peer id
// out of range or its own is ignored, and another peer's return starts a
// round, which the coordinator begins by telling every other peer.
func TestSKReachedGuards(t *testing.T) {
	reached := func(j int) event { return event{kind: evReached, msg: Message{From: j, To: 0}} }
	cfg, err := newConfig(SuzukiKasami, 3, forWorld, nil)
	require.NoError(t, err)
	m, err := cfg.newMachine(SuzukiKasami, 0, 3)
	require.NoError(t, err)
	plain := m.(*suzukiKasami)
	assert.Empty(t, skStep(plain, reached(1)).msgs, "without recovery")
	assert.True(t, plain.hasToken())
	for _, j := range []int{-1, 0, 3} {
		s := newSKRecovery(t, 0, 3)
		assert.Empty(t, skStep(s, reached(j)).msgs, "peer %d", j)
		assert.True(t, s.hasToken(), "peer %d", j)
	}
	s := newSKRecovery(t, 0, 3)
	assert.Len(t, skStep(s, reached(1)).msgs, 2, "a round: a coordinator message to each other peer")
}
