package dmutex

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newRATMachine(t testing.TB, id, n int) *ricartToken {
	t.Helper()
	cfg, err := newConfig(RicartAgrawalaToken, n, forSimulation, nil)
	require.NoError(t, err)
	m, err := cfg.newMachine(RicartAgrawalaToken, id, n)
	require.NoError(t, err)
	return m.(*ricartToken)
}

func ratMsg(kind MessageKind, from int, num uint64) event {
	return event{kind: evMessage, msg: Message{Kind: kind, From: from, TS: num}}
}

func ratToken(from int, ln ...uint64) event {
	return event{kind: evMessage, msg: Message{Kind: KindToken, From: from, Token: &Token{LN: ln}}}
}

func TestRicartAgrawalaTokenStep(t *testing.T) {
	tok := func(ln ...uint64) *Token { return &Token{LN: ln} }
	// Peer 1 of 4 throughout.
	tests := []struct {
		name                  string
		setup                 func(*ricartToken)
		ev                    event
		wantMsgs              []Message
		wantEnter, wantRefuse bool
		wantReq               []uint64
		wantTries             []bool
		wantToken             *Token
		wantWanting, wantTry  bool
		wantInside            bool
	}{
		{
			name: "a request goes to every other peer",
			ev:   event{kind: evRequest},
			wantMsgs: []Message{
				{Kind: KindRequest, From: 1, To: 0, TS: 1},
				{Kind: KindRequest, From: 1, To: 2, TS: 1},
				{Kind: KindRequest, From: 1, To: 3, TS: 1},
			},
			wantReq: []uint64{0, 1, 0, 0}, wantWanting: true,
		},
		{
			name: "a try goes to every other peer as a try",
			ev:   event{kind: evTry},
			wantMsgs: []Message{
				{Kind: KindTry, From: 1, To: 0, TS: 1},
				{Kind: KindTry, From: 1, To: 2, TS: 1},
				{Kind: KindTry, From: 1, To: 3, TS: 1},
			},
			wantReq: []uint64{0, 1, 0, 0}, wantWanting: true, wantTry: true,
		},
		{
			name:      "the holder of the idle token enters with no message",
			setup:     func(r *ricartToken) { r.token = tok(0, 0, 0, 0) },
			ev:        event{kind: evRequest},
			wantEnter: true, wantReq: []uint64{0, 0, 0, 0}, wantToken: tok(0, 0, 0, 0), wantInside: true,
		},
		{
			name:      "the holder of the idle token enters on a try with no message",
			setup:     func(r *ricartToken) { r.token = tok(0, 0, 0, 0) },
			ev:        event{kind: evTry},
			wantEnter: true, wantReq: []uint64{0, 0, 0, 0}, wantToken: tok(0, 0, 0, 0), wantInside: true,
		},
		{
			name:    "a peer without the token records a request",
			ev:      ratMsg(KindRequest, 3, 2),
			wantReq: []uint64{0, 0, 0, 2},
		},
		{
			name:    "a second message with the same number does not change its kind",
			setup:   func(r *ricartToken) { r.req[3] = 2 },
			ev:      ratMsg(KindTry, 3, 2),
			wantReq: []uint64{0, 0, 0, 2},
		},
		{
			name:    "an older request number does not lower what is recorded",
			setup:   func(r *ricartToken) { r.req[3] = 2 },
			ev:      ratMsg(KindRequest, 3, 1),
			wantReq: []uint64{0, 0, 0, 2},
		},
		{
			name:     "the holder of the idle token sends it to a request above the one served",
			setup:    func(r *ricartToken) { r.token = tok(0, 0, 0, 1) },
			ev:       ratMsg(KindRequest, 3, 2),
			wantMsgs: []Message{{Kind: KindToken, From: 1, To: 3, Token: tok(0, 0, 0, 1)}},
			wantReq:  []uint64{0, 0, 0, 2},
		},
		{
			name:      "an outdated request never moves the token",
			setup:     func(r *ricartToken) { r.token = tok(0, 0, 0, 2) },
			ev:        ratMsg(KindRequest, 3, 2),
			wantReq:   []uint64{0, 0, 0, 2},
			wantToken: tok(0, 0, 0, 2),
		},
		{
			name:      "the holder inside only records a request",
			setup:     func(r *ricartToken) { r.token, r.inside = tok(0, 0, 0, 0), true },
			ev:        ratMsg(KindRequest, 3, 1),
			wantReq:   []uint64{0, 0, 0, 1},
			wantToken: tok(0, 0, 0, 0), wantInside: true,
		},
		{
			name:      "the holder inside refuses a try and marks it served",
			setup:     func(r *ricartToken) { r.token, r.inside = tok(0, 0, 0, 0), true },
			ev:        ratMsg(KindTry, 3, 1),
			wantMsgs:  []Message{{Kind: KindBusy, From: 1, To: 3, TS: 1}},
			wantReq:   []uint64{0, 0, 0, 1},
			wantTries: []bool{false, false, false, true},
			wantToken: tok(0, 0, 0, 1), wantInside: true,
		},
		{
			name:      "the holder of the idle token sends it to a try",
			setup:     func(r *ricartToken) { r.token = tok(0, 0, 0, 0) },
			ev:        ratMsg(KindTry, 3, 1),
			wantMsgs:  []Message{{Kind: KindToken, From: 1, To: 3, Token: tok(0, 0, 0, 0)}},
			wantReq:   []uint64{0, 0, 0, 1},
			wantTries: []bool{false, false, false, true},
		},
		{
			name:  "release searches the peers after this one, round the ring",
			setup: func(r *ricartToken) { r.token, r.inside, r.req = tok(0, 0, 0, 0), true, []uint64{1, 0, 0, 1} },
			ev:    event{kind: evRelease},
			// Peer 3 comes before peer 0 after peer 1.
			wantMsgs: []Message{{Kind: KindToken, From: 1, To: 3, Token: tok(0, 0, 0, 0)}},
			wantReq:  []uint64{1, 0, 0, 1},
		},
		{
			name:     "release records our request served, and skips a served one",
			setup:    func(r *ricartToken) { r.token, r.inside, r.req = tok(0, 0, 0, 1), true, []uint64{1, 2, 0, 1} },
			ev:       event{kind: evRelease},
			wantMsgs: []Message{{Kind: KindToken, From: 1, To: 0, Token: tok(0, 2, 0, 1)}},
			wantReq:  []uint64{1, 2, 0, 1},
		},
		{
			name:      "release with nobody waiting keeps the token",
			setup:     func(r *ricartToken) { r.token, r.inside, r.req = tok(0, 0, 0, 0), true, []uint64{0, 1, 0, 0} },
			ev:        event{kind: evRelease},
			wantReq:   []uint64{0, 1, 0, 0},
			wantToken: tok(0, 1, 0, 0),
		},
		{
			name: "the token enters a waiting peer, which refuses the tries no holder answered",
			setup: func(r *ricartToken) {
				r.wanting, r.req, r.tries = true, []uint64{0, 1, 1, 1}, []bool{false, false, true, true}
			},
			ev:        ratToken(0, 0, 0, 0, 1),
			wantEnter: true,
			wantMsgs:  []Message{{Kind: KindBusy, From: 1, To: 2, TS: 1}},
			wantReq:   []uint64{0, 1, 1, 1},
			wantTries: []bool{false, false, true, true},
			wantToken: tok(0, 0, 1, 1), wantInside: true,
		},
		{
			name:      "a token nobody here asked for stays idle",
			ev:        ratToken(0, 0, 0, 0, 0),
			wantReq:   []uint64{0, 0, 0, 0},
			wantToken: tok(0, 0, 0, 0),
		},
		{
			name:    "a token of the wrong size is refused",
			setup:   func(r *ricartToken) { r.wanting = true },
			ev:      ratToken(0, 0, 0),
			wantReq: []uint64{0, 0, 0, 0}, wantWanting: true,
		},
		{
			name:    "a token with a queue is refused",
			setup:   func(r *ricartToken) { r.wanting = true },
			ev:      event{kind: evMessage, msg: Message{Kind: KindToken, From: 0, Token: &Token{LN: make([]uint64, 4), Queue: []int{2}}}},
			wantReq: []uint64{0, 0, 0, 0}, wantWanting: true,
		},
		{
			name:    "a token message without a token is refused",
			setup:   func(r *ricartToken) { r.wanting = true },
			ev:      event{kind: evMessage, msg: Message{Kind: KindToken, From: 0}},
			wantReq: []uint64{0, 0, 0, 0}, wantWanting: true,
		},
		{
			name:       "busy refuses the try out",
			setup:      func(r *ricartToken) { r.wanting, r.trying, r.req[1] = true, true, 2 },
			ev:         ratMsg(KindBusy, 0, 2),
			wantRefuse: true,
			wantReq:    []uint64{0, 2, 0, 0},
		},
		{
			name:        "a busy for an older try changes nothing",
			setup:       func(r *ricartToken) { r.wanting, r.trying, r.req[1] = true, true, 2 },
			ev:          ratMsg(KindBusy, 0, 1),
			wantReq:     []uint64{0, 2, 0, 0},
			wantWanting: true, wantTry: true,
		},
		{
			name:        "a busy while no try is out changes nothing",
			setup:       func(r *ricartToken) { r.wanting, r.req[1] = true, 1 },
			ev:          ratMsg(KindBusy, 0, 1),
			wantReq:     []uint64{0, 1, 0, 0},
			wantWanting: true,
		},
		{
			name:    "a request from no other peer of the cluster is refused",
			setup:   func(r *ricartToken) { r.token = tok(0, 0, 0, 0) },
			ev:      ratMsg(KindRequest, 4, 1),
			wantReq: []uint64{0, 0, 0, 0}, wantToken: tok(0, 0, 0, 0),
		},
		{
			name:    "a request naming this peer is refused",
			setup:   func(r *ricartToken) { r.token = tok(0, 0, 0, 0) },
			ev:      ratMsg(KindRequest, 1, 1),
			wantReq: []uint64{0, 0, 0, 0}, wantToken: tok(0, 0, 0, 0),
		},
		{
			name:    "a request from a negative id is refused",
			ev:      ratMsg(KindRequest, -1, 1),
			wantReq: []uint64{0, 0, 0, 0},
		},
		{
			name:    "a kind it does not use is ignored",
			ev:      ratMsg(KindReply, 0, 1),
			wantReq: []uint64{0, 0, 0, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRATMachine(t, 1, 4)
			if tt.setup != nil {
				tt.setup(r)
			}
			var out output
			r.step(tt.ev, &out)
			assert.Equal(t, tt.wantMsgs, out.msgs)
			assert.Equal(t, tt.wantEnter, out.entered, "entered")
			assert.Equal(t, tt.wantRefuse, out.refused, "refused")
			assert.Equal(t, tt.wantReq, r.req, "req")
			wantTries := tt.wantTries
			if wantTries == nil {
				wantTries = make([]bool, 4)
			}
			assert.Equal(t, wantTries, r.tries, "tries")
			assert.Equal(t, tt.wantToken, r.token, "token")
			assert.Equal(t, tt.wantWanting, r.wanting, "wanting")
			assert.Equal(t, tt.wantTry, r.trying, "trying")
			assert.Equal(t, tt.wantInside, r.inside, "inside")
		})
	}
	t.Run("a second token panics", func(t *testing.T) {
		r := newRATMachine(t, 0, 3)
		assert.PanicsWithValue(t, "dmutex: ricart-agrawala-token peer 0 received a second token from peer 2",
			func() { r.step(ratToken(2, 0, 0, 0), &output{}) })
	})
}

// TestRicartAgrawalaTokenStart: peer 0 holds the token, with nothing
// served, and every message that carries it is a token message.
func TestRicartAgrawalaTokenStart(t *testing.T) {
	for id := range 3 {
		r := newRATMachine(t, id, 3)
		assert.Equal(t, id == 0, r.hasToken(), "peer %d", id)
		if id == 0 {
			assert.Equal(t, []uint64{0, 0, 0}, r.token.LN)
		}
		assert.Empty(t, r.idleViolation())
	}
	r := newRATMachine(t, 0, 3)
	assert.True(t, r.carriesToken(Message{Kind: KindToken}))
	for _, k := range []MessageKind{KindRequest, KindTry, KindBusy} {
		assert.False(t, r.carriesToken(Message{Kind: k}), "%v", k)
	}
}

// TestRicartAgrawalaTokenCloneAndState: a clone and an assigned copy
// share no memory with their source, and the encoding tells every field
// apart.
func TestRicartAgrawalaTokenCloneAndState(t *testing.T) {
	r := newRATMachine(t, 0, 3)
	r.step(event{kind: evMessage, msg: Message{Kind: KindTry, From: 1, TS: 1}}, &output{})
	r.req[2] = 1
	c := r.clone().(*ricartToken)
	require.Equal(t, r.appendState(nil), c.appendState(nil))
	c.req[2], c.tries[2] = 5, true
	assert.Equal(t, uint64(1), r.req[2], "a clone shares no req")
	assert.False(t, r.tries[2], "a clone shares no tries")

	h := newRATMachine(t, 0, 3)
	c = h.clone().(*ricartToken)
	c.token.LN[1] = 7
	assert.Zero(t, h.token.LN[1], "a clone shares no token")

	a := newRATMachine(t, 2, 3)
	require.True(t, a.assign(h))
	assert.Equal(t, h.appendState(nil), a.appendState(nil))
	a.token.LN[1], a.req[1], a.tries[1] = 7, 7, true
	assert.Zero(t, h.token.LN[1], "an assigned copy shares no token")
	assert.Zero(t, h.req[1], "an assigned copy shares no req")
	assert.False(t, h.tries[1], "an assigned copy shares no tries")
	require.True(t, a.assign(newRATMachine(t, 1, 3)))
	assert.Nil(t, a.token, "assigned a machine without the token")
	assert.False(t, a.assign(newNTMachine(t, 1, 3)), "another type")

	base := newRATMachine(t, 1, 3)
	for name, change := range map[string]func(*ricartToken){
		"req":     func(x *ricartToken) { x.req[2] = 1 },
		"tries":   func(x *ricartToken) { x.tries[2] = true },
		"token":   func(x *ricartToken) { x.token = &Token{LN: make([]uint64, 3)} },
		"wanting": func(x *ricartToken) { x.wanting = true },
		"trying":  func(x *ricartToken) { x.trying = true },
		"inside":  func(x *ricartToken) { x.inside = true },
	} {
		x := newRATMachine(t, 1, 3)
		change(x)
		assert.NotEqual(t, base.appendState(nil), x.appendState(nil), name)
	}
	x, y := newRATMachine(t, 0, 3), newRATMachine(t, 0, 3)
	y.token.LN[2] = 1
	assert.NotEqual(t, x.appendState(nil), y.appendState(nil), "the token's LN")
}

// TestRicartAgrawalaTokenIdleViolation pins what a peer at rest must not
// keep.
func TestRicartAgrawalaTokenIdleViolation(t *testing.T) {
	for name, set := range map[string]func(*ricartToken){
		"wanting": func(x *ricartToken) { x.wanting = true },
		"inside":  func(x *ricartToken) { x.inside = true },
	} {
		x := newRATMachine(t, 1, 3)
		set(x)
		assert.Equal(t, "keeps a request", x.idleViolation(), name)
	}
}

// TestRicartAgrawalaTokenDescribe shows every field a person needs.
func TestRicartAgrawalaTokenDescribe(t *testing.T) {
	x := newRATMachine(t, 1, 3)
	assert.Equal(t, []StateField{{"request", "[0 0 0]"}, {"wanting", "false"}, {"token", "false"}}, x.describe())
	x.token, x.trying, x.wanting = &Token{LN: []uint64{1, 0, 2}}, true, true
	assert.Equal(t, []StateField{{"request", "[0 0 0]"}, {"wanting", "true"}, {"token", "true"},
		{"trying", "true"}, {"token served", "[1 0 2]"}}, x.describe())
}

// TestRicartAgrawalaTokenCounts reproduces the cost NewRicartAgrawalaToken
// states: one entry at a time on a running cluster, 0 messages for the
// holder of the idle token and n (n-1 requests, one token) for any other;
// and at saturation in virtual time, n per entry but for the few the
// holder makes again before the others' requests arrive.
func TestRicartAgrawalaTokenCounts(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run("n="+strconv.Itoa(n), func(t *testing.T) {
			c := variant{alg: RicartAgrawalaToken}.cluster(t, n)
			rng := rand.New(rand.NewPCG(uint64(n), 5))
			holder := 0
			for range 3 * n {
				id := rng.IntN(n)
				before := c.Stats()
				p := c.Peer(id)
				lockWithin(t, p, 10*time.Second)
				p.Unlock()
				got := c.Stats().Sub(before)
				want := map[string]uint64{}
				if id != holder {
					want = map[string]uint64{"request": uint64(n - 1), "token": 1}
				}
				assert.Equal(t, uint64(1), got.Entries)
				assert.Equal(t, want, nonNil(got.ByKind), "peer %d after holder %d", id, holder)
				holder = id
			}
		})
	}
	for _, n := range []int{3, 8} {
		heavy, err := RunTimed(RicartAgrawalaToken, n, timedHeavy)
		require.NoError(t, err)
		assert.InDelta(t, float64(n), heavy.Messages, 0.05, "n=%d: n per entry at saturation", n)
		assert.LessOrEqual(t, heavy.Messages, float64(n))
	}
}
