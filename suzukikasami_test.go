package dmutex

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newSKMachine(t *testing.T, id, n int, opts ...Option) *suzukiKasami {
	t.Helper()
	cfg, err := newConfig(SuzukiKasami, n, forSimulation, opts)
	require.NoError(t, err)
	m, err := cfg.newMachine(SuzukiKasami, id, n)
	require.NoError(t, err)
	return m.(*suzukiKasami)
}

func skRequest(from int, num uint64) event {
	return event{kind: evMessage, msg: Message{Kind: KindRequest, From: from, TS: num}}
}

func TestSuzukiKasamiStep(t *testing.T) {
	type check func(t *testing.T, s *suzukiKasami, out *output)
	tests := []struct {
		name   string
		id, n  int
		opts   []Option
		setup  func(s *suzukiKasami) // state before the event
		ev     event
		expect check
	}{
		{
			name: "idle holder enters with no message",
			id:   0, n: 4,
			ev: event{kind: evRequest},
			expect: func(t *testing.T, s *suzukiKasami, out *output) {
				assert.True(t, out.entered)
				assert.Empty(t, out.msgs)
				assert.True(t, s.hasToken())
			},
		},
		{
			name: "non-holder broadcasts its next request number",
			id:   2, n: 4,
			setup: func(s *suzukiKasami) { s.rn[2] = 6 },
			ev:    event{kind: evRequest},
			expect: func(t *testing.T, s *suzukiKasami, out *output) {
				assert.False(t, out.entered)
				require.Len(t, out.msgs, 3)
				for i, to := range []int{0, 1, 3} {
					assert.Equal(t, Message{Kind: KindRequest, From: 2, To: to, TS: 7}, out.msgs[i])
				}
			},
		},
		{
			name: "idle holder sends the token for a current request",
			id:   0, n: 3,
			setup: func(s *suzukiKasami) { s.token.LN[1] = 4 },
			ev:    skRequest(1, 5),
			expect: func(t *testing.T, s *suzukiKasami, out *output) {
				require.Len(t, out.msgs, 1)
				m := out.msgs[0]
				assert.Equal(t, KindToken, m.Kind)
				assert.Equal(t, 1, m.To)
				assert.Equal(t, []uint64{0, 4, 0}, m.Token.LN)
				assert.False(t, s.hasToken(), "the sender keeps no token")
			},
		},
		{
			name: "outdated request never moves the token",
			id:   0, n: 3,
			setup: func(s *suzukiKasami) { s.token.LN[1] = 4; s.rn[1] = 4 },
			ev:    skRequest(1, 3),
			expect: func(t *testing.T, s *suzukiKasami, out *output) {
				assert.Empty(t, out.msgs)
				assert.True(t, s.hasToken())
				assert.Equal(t, uint64(4), s.rn[1], "an old number does not lower RN")
			},
		},
		{
			name: "outdated request equal to LN never moves the token",
			id:   0, n: 3,
			setup: func(s *suzukiKasami) { s.token.LN[1] = 4; s.rn[1] = 4 },
			ev:    skRequest(1, 4),
			expect: func(t *testing.T, s *suzukiKasami, out *output) {
				assert.Empty(t, out.msgs)
				assert.True(t, s.hasToken())
			},
		},
		{
			name: "holder inside keeps the token and records the request",
			id:   0, n: 3,
			setup: func(s *suzukiKasami) { s.inside = true },
			ev:    skRequest(2, 1),
			expect: func(t *testing.T, s *suzukiKasami, out *output) {
				assert.Empty(t, out.msgs)
				assert.True(t, s.hasToken())
				assert.Equal(t, uint64(1), s.rn[2])
			},
		},
		{
			name: "release queues waiters from the successor on and serves the head",
			id:   1, n: 4,
			setup: func(s *suzukiKasami) {
				s.token = &Token{LN: []uint64{2, 0, 5, 1}}
				s.inside = true
				s.rn = []uint64{3, 1, 6, 2} // 0, 2 and 3 wait; 1 is inside
			},
			ev: event{kind: evRelease},
			expect: func(t *testing.T, s *suzukiKasami, out *output) {
				require.Len(t, out.msgs, 1)
				m := out.msgs[0]
				assert.Equal(t, 2, m.To)
				assert.Equal(t, []uint64{2, 1, 5, 1}, m.Token.LN, "LN[1] = RN[1]")
				assert.Equal(t, []int{3, 0}, m.Token.Queue)
				assert.False(t, s.hasToken())
			},
		},
		{
			name: "release keeps a queued peer once and keeps the queue order",
			id:   1, n: 4,
			setup: func(s *suzukiKasami) {
				s.token = &Token{LN: []uint64{0, 0, 0, 0}, Queue: []int{0, 3}}
				s.inside = true
				s.rn = []uint64{1, 1, 1, 1}
			},
			ev: event{kind: evRelease},
			expect: func(t *testing.T, s *suzukiKasami, out *output) {
				require.Len(t, out.msgs, 1)
				assert.Equal(t, 0, out.msgs[0].To)
				assert.Equal(t, []int{3, 2}, out.msgs[0].Token.Queue)
			},
		},
		{
			name: "release with nobody waiting keeps the token",
			id:   0, n: 3,
			setup: func(s *suzukiKasami) { s.inside = true; s.rn[0] = 1 },
			ev:    event{kind: evRelease},
			expect: func(t *testing.T, s *suzukiKasami, out *output) {
				assert.Empty(t, out.msgs)
				require.True(t, s.hasToken())
				assert.Equal(t, uint64(1), s.token.LN[0])
			},
		},
		{
			name: "the token enters a waiting peer",
			id:   2, n: 3,
			setup: func(s *suzukiKasami) { s.wanting = true; s.rn[2] = 1 },
			ev:    event{kind: evMessage, msg: Message{Kind: KindToken, From: 0, To: 2, Token: &Token{LN: make([]uint64, 3)}}},
			expect: func(t *testing.T, s *suzukiKasami, out *output) {
				assert.True(t, out.entered)
				assert.Empty(t, out.msgs)
				assert.True(t, s.hasToken())
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSKMachine(t, tt.id, tt.n, tt.opts...)
			if tt.setup != nil {
				tt.setup(s)
			}
			var out output
			s.step(tt.ev, &out)
			tt.expect(t, s, &out)
		})
	}
}

// TestSuzukiKasamiTokenOwnership checks that a token, once sent, is
// never written again: the receiver works on a copy, and the sender
// drops its reference.
func TestSuzukiKasamiTokenOwnership(t *testing.T) {
	holder, waiter := newSKMachine(t, 0, 3), newSKMachine(t, 1, 3)
	var out output
	waiter.step(event{kind: evRequest}, &out)
	req := out.msgs[0]
	out.reset()
	holder.step(event{kind: evMessage, msg: req}, &out)
	require.Len(t, out.msgs, 1)
	msg := out.msgs[0]
	sent := msg.Token.clone()

	out.reset()
	waiter.step(event{kind: evMessage, msg: msg}, &out)
	require.True(t, out.entered)
	out.reset()
	waiter.step(event{kind: evRelease}, &out)
	assert.Equal(t, sent, msg.Token, "the receiver wrote to the token in the message")
	assert.Equal(t, uint64(1), waiter.token.LN[1])

	assert.PanicsWithValue(t, "dmutex: suzuki-kasami peer 1 received a second token from peer 0",
		func() { waiter.step(event{kind: evMessage, msg: msg}, &out) })
}

func TestSuzukiKasamiCloneAndState(t *testing.T) {
	s := newSKMachine(t, 0, 3)
	c := s.clone().(*suzukiKasami)
	require.Equal(t, s.appendState(nil), c.appendState(nil))

	var out output
	c.step(skRequest(1, 1), &out) // c sends its token away
	assert.True(t, s.hasToken(), "a clone shares no token with its original")
	assert.NotEqual(t, s.appendState(nil), c.appendState(nil))

	d := s.clone().(*suzukiKasami)
	d.token.LN[2] = 9
	assert.Zero(t, s.token.LN[2], "a clone shares no LN with its original")
	assert.NotEqual(t, s.appendState(nil), d.appendState(nil), "LN is part of the state")
}

// TestSuzukiKasamiMutantIsCaught shows that the random network catches the
// outdated-token mutant: a token sent for an outdated request lands at a
// peer that does not want it, and a request already seen by that peer is
// stranded.
func TestSuzukiKasamiMutantIsCaught(t *testing.T) {
	caught := 0
	for seed := range uint64(300) {
		nw := newTokNet(t, SuzukiKasami, 3, "suzuki-kasami-outdated-token")
		if nw.runRandom(rand.New(rand.NewPCG(seed, 1)), false, 4) != nil {
			caught++
		}
	}
	t.Logf("outdated-token mutant caught by %d of 300 seeds", caught)
	assert.Positive(t, caught)
}

// TestSuzukiKasamiSequentialCounts takes the lock on one peer at a time:
// an entry costs nothing when the peer holds the idle token and N
// messages (N-1 requests and the token) otherwise.
func TestSuzukiKasamiSequentialCounts(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		t.Run("n="+strconv.Itoa(n), func(t *testing.T) {
			c := variant{alg: SuzukiKasami}.cluster(t, n)
			holder := 0
			// Each peer twice in a row: the second entry finds the token hot.
			for _, id := range []int{0, 0, 1 % n, 1 % n, n - 1, n - 1, 0, n / 2, n / 2} {
				before := c.Stats()
				p := c.Peer(id)
				lockWithin(t, p, 10*time.Second)
				p.Unlock()
				got := c.Stats().Sub(before)
				want := map[string]uint64{}
				if id != holder {
					want = map[string]uint64{"request": uint64(n - 1), "token": 1}
				}
				holder = id
				assert.Equal(t, uint64(1), got.Entries, "peer %d", id)
				assert.Equal(t, want, nonNil(got.ByKind), "peer %d", id)
			}
		})
	}
}

// TestSuzukiKasamiBusyAnswersOnlyTheTryOut steps a peer with busy answers
// that do not answer its outstanding try: one for an earlier try, one
// while its request (not a try) is out, one while idle. Each must change
// nothing and refuse nothing; only the busy for the try that is out
// refuses it.
func TestSuzukiKasamiBusyAnswersOnlyTheTryOut(t *testing.T) {
	busy := func(ts uint64) event {
		return event{kind: evMessage, msg: Message{Kind: KindBusy, From: 0, To: 1, TS: ts}}
	}
	for _, tt := range []struct {
		name  string
		setup event // the peer's own event before the busy, if any
		ts    uint64
	}{
		{"busy for an earlier try", event{kind: evTry}, 0},
		{"busy while requesting", event{kind: evRequest}, 1},
		{"busy while idle", event{}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newSKMachine(t, 1, 3)
			var out output
			if tt.setup.kind != 0 {
				s.step(tt.setup, &out)
			}
			before := s.appendState(nil)
			out.reset()
			s.step(busy(tt.ts), &out)
			assert.False(t, out.refused, "refused")
			assert.Empty(t, out.msgs)
			assert.Equal(t, before, s.appendState(nil), "state changed")
		})
	}

	s := newSKMachine(t, 1, 3)
	var out output
	s.step(event{kind: evTry}, &out)
	out.reset()
	s.step(busy(1), &out)
	assert.True(t, out.refused, "the try that is out")
}

// TestSuzukiKasamiUnaskedTokenStaysIdle gives a peer that asked for nothing
// a token (only a variant sends one): it must keep it idle, not enter.
func TestSuzukiKasamiUnaskedTokenStaysIdle(t *testing.T) {
	s := newSKMachine(t, 1, 3)
	var out output
	s.step(event{kind: evMessage, msg: Message{Kind: KindToken, From: 0, To: 1, Token: &Token{LN: make([]uint64, 3)}}}, &out)
	assert.False(t, out.entered)
	assert.Empty(t, out.msgs)
	assert.True(t, s.hasToken())
	assert.False(t, s.inside)
}

// TestSuzukiKasamiIdleViolation pins what a machine at rest must not keep:
// a request, a try or an entry, or a token whose queue still names peers.
func TestSuzukiKasamiIdleViolation(t *testing.T) {
	var out output
	for _, ev := range []eventKind{evRequest, evTry} {
		s := newSKMachine(t, 1, 3)
		assert.Empty(t, s.idleViolation())
		s.step(event{kind: ev}, &out)
		assert.Equal(t, "keeps a request", s.idleViolation(), "event %d", ev)
	}
	holder := newSKMachine(t, 0, 3)
	holder.step(event{kind: evRequest}, &out)
	assert.Equal(t, "keeps a request", holder.idleViolation(), "inside")

	idle := newSKMachine(t, 0, 3)
	assert.Empty(t, idle.idleViolation(), "an idle token")
	idle.token.Queue = []int{2}
	assert.Equal(t, "keeps token queue [2]", idle.idleViolation())
}

// TestSuzukiKasamiStateTellsTries requires the state encoding to tell a
// try from a request with the same number: the checker would otherwise
// merge two states that answer differently (busy or the token).
func TestSuzukiKasamiStateTellsTries(t *testing.T) {
	var out output
	req, try := newSKMachine(t, 1, 3), newSKMachine(t, 1, 3)
	req.step(event{kind: evMessage, msg: Message{Kind: KindRequest, From: 2, To: 1, TS: 1}}, &out)
	try.step(event{kind: evMessage, msg: Message{Kind: KindTry, From: 2, To: 1, TS: 1}}, &out)
	assert.NotEqual(t, req.appendState(nil), try.appendState(nil))
}

// TestSuzukiKasamiStateShowsFlags requires each of wanting, trying and
// inside to change the state encoding on its own.
func TestSuzukiKasamiStateShowsFlags(t *testing.T) {
	base := newSKMachine(t, 1, 3).appendState(nil)
	for name, set := range map[string]func(s *suzukiKasami){
		"wanting": func(s *suzukiKasami) { s.wanting = true },
		"trying":  func(s *suzukiKasami) { s.trying = true },
		"inside":  func(s *suzukiKasami) { s.inside = true },
	} {
		s := newSKMachine(t, 1, 3)
		set(s)
		assert.NotEqual(t, base, s.appendState(nil), name)
	}
}
