package dmutex

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newSHMachine(t testing.TB, id, n int) *singhal {
	t.Helper()
	cfg, err := newConfig(SinghalHeuristic, n, forSimulation, nil)
	require.NoError(t, err)
	m, err := cfg.newMachine(SinghalHeuristic, id, n)
	require.NoError(t, err)
	return m.(*singhal)
}

// shVector is a state vector as the paper writes it, such as "RRNN".
func shVector(s *singhal) string {
	var b strings.Builder
	for _, st := range s.sv {
		b.WriteString(shNames[st])
	}
	return b.String()
}

// setSHVector sets a state vector written as shVector writes it.
func setSHVector(s *singhal, v string) {
	for j, c := range v {
		s.sv[j] = shState(strings.IndexRune("NREH", c))
	}
}

func shMsg(kind MessageKind, from int, num uint64) event {
	return event{kind: evMessage, msg: Message{Kind: kind, From: from, TS: num}}
}

func shToken(from int, queue []int, ln ...uint64) event {
	return event{kind: evMessage, msg: Message{Kind: KindToken, From: from, Token: &Token{LN: ln, Queue: queue}}}
}

func TestSinghalHeuristicStep(t *testing.T) {
	tok := func(queue []int, ln ...uint64) *Token { return &Token{LN: ln, Queue: queue} }
	holder := func(sv string, tk *Token) func(*singhal) {
		return func(s *singhal) { setSHVector(s, sv); s.token = tk }
	}
	// Peer 2 of 4 throughout, which starts with peers 0 and 1 in state R.
	tests := []struct {
		name                  string
		setup                 func(*singhal)
		ev                    event
		wantMsgs              []Message
		wantEnter, wantRefuse bool
		wantSV                string
		wantSN, wantTries     []uint64
		wantToken             *Token
		wantTrying            bool
	}{
		{
			name: "a request goes to the peers in state R",
			ev:   event{kind: evRequest},
			wantMsgs: []Message{
				{Kind: KindRequest, From: 2, To: 0, TS: 1},
				{Kind: KindRequest, From: 2, To: 1, TS: 1},
			},
			wantSV: "RRRN", wantSN: []uint64{0, 0, 1, 0},
		},
		{
			name: "a try goes to every other peer and leaves the state vector",
			ev:   event{kind: evTry},
			wantMsgs: []Message{
				{Kind: KindTry, From: 2, To: 0, TS: 1},
				{Kind: KindTry, From: 2, To: 1, TS: 1},
				{Kind: KindTry, From: 2, To: 3, TS: 1},
			},
			wantSV: "RRNN", wantSN: []uint64{0, 0, 1, 0}, wantTrying: true,
		},
		{
			name:      "the holder of the idle token enters with no message",
			setup:     holder("NNHN", tok(nil, 0, 0, 0, 0)),
			ev:        event{kind: evRequest},
			wantEnter: true, wantSV: "NNEN", wantToken: tok(nil, 0, 0, 0, 0),
		},
		{
			name:      "the holder of the idle token enters on a try with no message",
			setup:     holder("NNHN", tok(nil, 0, 0, 0, 0)),
			ev:        event{kind: evTry},
			wantEnter: true, wantSV: "NNEN", wantToken: tok(nil, 0, 0, 0, 0),
		},
		{
			name:   "a peer in state N records a request and puts the requester in state R",
			ev:     shMsg(KindRequest, 3, 1),
			wantSV: "RRNR", wantSN: []uint64{0, 0, 0, 1},
		},
		{
			name:   "an outdated request changes nothing",
			setup:  func(s *singhal) { s.sn[3] = 2 },
			ev:     shMsg(KindRequest, 3, 2),
			wantSV: "RRNN", wantSN: []uint64{0, 0, 0, 2},
		},
		{
			name:     "a requesting peer sends its own request to a requester it had in state N",
			setup:    func(s *singhal) { setSHVector(s, "RRRN"); s.sn[2] = 4 },
			ev:       shMsg(KindRequest, 3, 1),
			wantMsgs: []Message{{Kind: KindRequest, From: 2, To: 3, TS: 4}},
			wantSV:   "RRRR", wantSN: []uint64{0, 0, 4, 1},
		},
		{
			name:   "a requesting peer sends nothing to a requester it had in state R",
			setup:  func(s *singhal) { setSHVector(s, "RRRN"); s.sn[2] = 4 },
			ev:     shMsg(KindRequest, 1, 3),
			wantSV: "RRRN", wantSN: []uint64{0, 3, 4, 0},
		},
		{
			name:   "a peer inside records a request",
			setup:  holder("NNEN", tok(nil, 0, 0, 0, 0)),
			ev:     shMsg(KindRequest, 3, 1),
			wantSV: "NNER", wantSN: []uint64{0, 0, 0, 1},
			wantToken: tok(nil, 0, 0, 0, 0),
		},
		{
			name:     "the holder of the idle token sends it, recording the request",
			setup:    holder("NNHN", tok(nil, 0, 0, 0, 0)),
			ev:       shMsg(KindRequest, 3, 1),
			wantMsgs: []Message{{Kind: KindToken, From: 2, To: 3, Token: tok([]int{3}, 0, 0, 0, 1)}},
			wantSV:   "NNNR", wantSN: []uint64{0, 0, 0, 1},
		},
		{
			name:     "the holder of the idle token sends it to a try",
			setup:    holder("NNHN", tok([]int{1}, 0, 0, 0, 0)),
			ev:       shMsg(KindTry, 0, 2),
			wantMsgs: []Message{{Kind: KindToken, From: 2, To: 0, Token: tok([]int{0, 1}, 2, 0, 0, 0)}},
			wantSV:   "RNNN", wantSN: []uint64{0, 0, 0, 0}, wantTries: []uint64{2, 0, 0, 0},
		},
		{
			name:     "a holder inside refuses a try and records it answered",
			setup:    holder("NNEN", tok([]int{3}, 0, 0, 0, 5)),
			ev:       shMsg(KindTry, 1, 1),
			wantMsgs: []Message{{Kind: KindBusy, From: 2, To: 1, TS: 1}},
			wantSV:   "NREN", wantTries: []uint64{0, 1, 0, 0},
			wantToken: tok([]int{3}, 0, 1, 0, 5),
		},
		{
			name:      "a peer without the token records a try and puts the trier in state R",
			ev:        shMsg(KindTry, 3, 1),
			wantSV:    "RRNR",
			wantTries: []uint64{0, 0, 0, 1},
		},
		{
			name:     "a requesting peer sends its own request to a trier it had in state N",
			setup:    func(s *singhal) { setSHVector(s, "RRRN"); s.sn[2] = 4 },
			ev:       shMsg(KindTry, 3, 1),
			wantMsgs: []Message{{Kind: KindRequest, From: 2, To: 3, TS: 4}},
			wantSV:   "RRRR", wantSN: []uint64{0, 0, 4, 0},
			wantTries: []uint64{0, 0, 0, 1},
		},
		{
			name:   "a requesting peer sends nothing to a trier it had in state R",
			setup:  func(s *singhal) { setSHVector(s, "RRRN"); s.sn[2] = 4 },
			ev:     shMsg(KindTry, 1, 1),
			wantSV: "RRRN", wantSN: []uint64{0, 0, 4, 0},
			wantTries: []uint64{0, 1, 0, 0},
		},
		{
			name:   "the holder of the idle token keeps it from a try answered before",
			setup:  holder("NNHN", tok(nil, 0, 0, 0, 2)),
			ev:     shMsg(KindTry, 3, 2),
			wantSV: "NNHR", wantTries: []uint64{0, 0, 0, 2},
			wantToken: tok(nil, 0, 0, 0, 2),
		},
		{
			name:   "an old try changes nothing",
			setup:  func(s *singhal) { holder("NNEN", tok(nil, 0, 0, 0, 0))(s); s.tries[3] = 2 },
			ev:     shMsg(KindTry, 3, 2),
			wantSV: "NNEN", wantTries: []uint64{0, 0, 0, 2},
			wantToken: tok(nil, 0, 0, 0, 0),
		},
		{
			name: "the token enters a request, forgets its sender and refuses the tries heard",
			setup: func(s *singhal) {
				setSHVector(s, "RRRN")
				s.sn[2], s.tries[3] = 1, 1
			},
			ev:        shToken(1, []int{2}, 0, 0, 1, 0),
			wantMsgs:  []Message{{Kind: KindBusy, From: 2, To: 3, TS: 1}},
			wantEnter: true, wantSV: "RNEN", wantSN: []uint64{0, 0, 1, 0}, wantTries: []uint64{0, 0, 0, 1},
			wantToken: tok([]int{2}, 0, 0, 1, 1),
		},
		{
			name:      "the token's sender stays in state R while its later request is not in the token",
			setup:     func(s *singhal) { setSHVector(s, "RRRN"); s.sn[1], s.sn[2] = 2, 1 },
			ev:        shToken(1, []int{2}, 0, 1, 1, 0),
			wantEnter: true, wantSV: "RREN", wantSN: []uint64{0, 2, 1, 0},
			wantToken: tok([]int{2}, 0, 1, 1, 0),
		},
		{
			name:      "the token enters a try",
			setup:     func(s *singhal) { s.trying, s.sn[2] = true, 1 },
			ev:        shToken(0, []int{2}, 0, 0, 1, 0),
			wantEnter: true, wantSV: "NREN", wantSN: []uint64{0, 0, 1, 0},
			wantToken: tok([]int{2}, 0, 0, 1, 0),
		},
		{
			name:      "a token nobody here asked for is kept idle",
			ev:        shToken(3, nil, 0, 0, 0, 0),
			wantSV:    "RRHN",
			wantToken: tok(nil, 0, 0, 0, 0),
		},
		{
			name:       "busy refuses our try",
			setup:      func(s *singhal) { s.trying, s.sn[2] = true, 3 },
			ev:         shMsg(KindBusy, 0, 3),
			wantRefuse: true, wantSV: "RRNN", wantSN: []uint64{0, 0, 3, 0},
		},
		{
			name:   "busy for another try changes nothing",
			setup:  func(s *singhal) { s.trying, s.sn[2] = true, 3 },
			ev:     shMsg(KindBusy, 0, 2),
			wantSV: "RRNN", wantSN: []uint64{0, 0, 3, 0}, wantTrying: true,
		},
		{
			name: "the leaving holder merges and sends the token to the next request the token has",
			setup: func(s *singhal) {
				// Peer 1's request 2 is news to the token; the token
				// knows that peer 0's request 3 is pending and peer 3's
				// request 1 was served.
				holder("RRER", tok([]int{0, 2}, 3, 1, 1, 1))(s)
				s.sn = []uint64{1, 2, 1, 0}
			},
			ev:       event{kind: evRelease},
			wantMsgs: []Message{{Kind: KindToken, From: 2, To: 0, Token: tok([]int{0, 1}, 3, 2, 1, 1)}},
			wantSV:   "RRNR", wantSN: []uint64{3, 2, 1, 1},
		},
		{
			name: "the leaving holder keeps the token when the token knows no request",
			// Its vector keeps peers 0, 1 and 3 in state R, which the
			// paper's merge would turn into N.
			setup:     holder("RRER", tok([]int{2}, 0, 0, 1, 0)),
			ev:        event{kind: evRelease},
			wantSV:    "RRHR",
			wantSN:    []uint64{0, 0, 1, 0},
			wantToken: tok([]int{}, 0, 0, 1, 0),
		},
		{
			name:   "a request from outside the cluster is ignored",
			ev:     shMsg(KindRequest, 4, 1),
			wantSV: "RRNN",
		},
		{
			name:   "a request from a negative id is ignored",
			ev:     shMsg(KindRequest, -1, 1),
			wantSV: "RRNN",
		},
		{
			name:   "a request from itself is ignored",
			ev:     shMsg(KindRequest, 2, 1),
			wantSV: "RRNN",
		},
		{
			name:   "a try from a negative id is ignored",
			ev:     shMsg(KindTry, -1, 1),
			wantSV: "RRNN",
		},
		{
			name:   "a try from outside the cluster is ignored",
			ev:     shMsg(KindTry, 4, 1),
			wantSV: "RRNN",
		},
		{
			name:   "a try from itself is ignored",
			ev:     shMsg(KindTry, 2, 1),
			wantSV: "RRNN",
		},
		{
			name:   "busy when no try is out changes nothing",
			setup:  func(s *singhal) { s.sn[2] = 3 },
			ev:     shMsg(KindBusy, 0, 3),
			wantSV: "RRNN", wantSN: []uint64{0, 0, 3, 0},
		},
		{
			name:   "a token message without a token is ignored",
			setup:  func(s *singhal) { setSHVector(s, "RRRN") },
			ev:     event{kind: evMessage, msg: Message{Kind: KindToken, From: 0}},
			wantSV: "RRRN",
		},
		{
			name:   "a token with more entries in TSV than peers is ignored",
			setup:  func(s *singhal) { setSHVector(s, "RRRN") },
			ev:     shToken(0, []int{0, 1, 2, 3, 3}, 0, 0, 0, 0),
			wantSV: "RRRN",
		},
		{
			name:      "a token with every peer in TSV is taken",
			setup:     func(s *singhal) { setSHVector(s, "RRRN"); s.sn[2] = 1 },
			ev:        shToken(3, []int{0, 1, 2, 3}, 0, 0, 1, 0),
			wantEnter: true, wantSV: "RREN", wantSN: []uint64{0, 0, 1, 0},
			wantToken: tok([]int{0, 1, 2, 3}, 0, 0, 1, 0),
		},
		{
			name:      "a token from a negative id forgets nobody",
			setup:     func(s *singhal) { setSHVector(s, "RRRN"); s.sn[2] = 1 },
			ev:        shToken(-1, []int{2}, 0, 0, 1, 0),
			wantEnter: true, wantSV: "RREN", wantSN: []uint64{0, 0, 1, 0},
			wantToken: tok([]int{2}, 0, 0, 1, 0),
		},
		{
			name:      "a token that names this peer as its sender forgets nobody",
			setup:     func(s *singhal) { setSHVector(s, "RRRN"); s.sn[2] = 1 },
			ev:        shToken(2, []int{2}, 0, 0, 1, 0),
			wantEnter: true, wantSV: "RREN", wantSN: []uint64{0, 0, 1, 0},
			wantToken: tok([]int{2}, 0, 0, 1, 0),
		},
		{
			name:      "a token from outside the cluster forgets nobody",
			setup:     func(s *singhal) { setSHVector(s, "RRRN"); s.sn[2] = 1 },
			ev:        shToken(4, []int{2}, 0, 0, 1, 0),
			wantEnter: true, wantSV: "RREN", wantSN: []uint64{0, 0, 1, 0},
			wantToken: tok([]int{2}, 0, 0, 1, 0),
		},
		{
			name:   "a token of another size is ignored",
			setup:  func(s *singhal) { setSHVector(s, "RRRN") },
			ev:     shToken(0, nil, 0, 0, 0),
			wantSV: "RRRN",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSHMachine(t, 2, 4)
			if tt.setup != nil {
				tt.setup(s)
			}
			var out output
			s.step(tt.ev, &out)
			assert.Equal(t, tt.wantMsgs, out.msgs)
			assert.Equal(t, tt.wantEnter, out.entered, "entered")
			assert.Equal(t, tt.wantRefuse, out.refused, "refused")
			assert.Equal(t, tt.wantSV, shVector(s), "SV")
			wantSN, wantTries := tt.wantSN, tt.wantTries
			if wantSN == nil {
				wantSN = make([]uint64, 4)
			}
			if wantTries == nil {
				wantTries = make([]uint64, 4)
			}
			assert.Equal(t, wantSN, s.sn, "SN")
			assert.Equal(t, wantTries, s.tries, "tries")
			assert.Equal(t, tt.wantToken, s.token, "token")
			assert.Equal(t, tt.wantTrying, s.trying, "trying")
		})
	}
	t.Run("a second token panics", func(t *testing.T) {
		s := newSHMachine(t, 0, 3)
		assert.PanicsWithValue(t, "dmutex: singhal-heuristic peer 0 received a second token from peer 2",
			func() { s.step(shToken(2, nil, 0, 0, 0), &output{}) })
	})
}

// TestSinghalHeuristicTokenVector: setTSV keeps Token.Queue the increasing
// list of the peers the token has in state R.
func TestSinghalHeuristicTokenVector(t *testing.T) {
	s := newSHMachine(t, 0, 5)
	for _, step := range []struct {
		j    int
		r    bool
		want []int
	}{
		{2, true, []int{2}}, {0, true, []int{0, 2}}, {4, true, []int{0, 2, 4}}, {3, true, []int{0, 2, 3, 4}},
		{3, true, []int{0, 2, 3, 4}}, {1, false, []int{0, 2, 3, 4}}, {2, false, []int{0, 3, 4}},
		{4, false, []int{0, 3}}, {0, false, []int{3}}, {3, false, []int{}},
	} {
		s.setTSV(step.j, step.r)
		assert.Equal(t, step.want, s.token.Queue, "set %d to %v", step.j, step.r)
		for j := range 5 {
			assert.Equal(t, slicesContains(step.want, j), s.tsv(j), "TSV[%d]", j)
		}
	}
}

func slicesContains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestSinghalHeuristicStart: the staircase, and the token at peer 0.
func TestSinghalHeuristicStart(t *testing.T) {
	for id, want := range []string{"HNNN", "RNNN", "RRNN", "RRRN"} {
		s := newSHMachine(t, id, 4)
		assert.Equal(t, want, shVector(s), "peer %d", id)
		assert.Equal(t, id == 0, s.hasToken(), "peer %d", id)
		if id == 0 {
			assert.Equal(t, &Token{LN: make([]uint64, 4)}, s.token)
		}
		assert.Empty(t, s.idleViolation())
	}
	s := newSHMachine(t, 0, 3)
	assert.True(t, s.carriesToken(Message{Kind: KindToken}))
	for _, k := range []MessageKind{KindRequest, KindTry, KindBusy} {
		assert.False(t, s.carriesToken(Message{Kind: k}), "%v", k)
	}
}

// TestSinghalHeuristicCloneAndState: a clone and an assigned copy share no
// memory with their source, and the encoding tells every field apart.
func TestSinghalHeuristicCloneAndState(t *testing.T) {
	h := newSHMachine(t, 0, 3)
	h.sn[1], h.tries[2] = 1, 1
	h.setTSV(1, true)
	c := h.clone().(*singhal)
	require.Equal(t, h.appendState(nil), c.appendState(nil))
	c.sv[1], c.sn[1], c.tries[2], c.token.LN[1], c.token.Queue[0] = shRequesting, 5, 5, 5, 2
	assert.Equal(t, shNone, h.sv[1], "a clone shares no SV")
	assert.Equal(t, uint64(1), h.sn[1], "a clone shares no SN")
	assert.Equal(t, uint64(1), h.tries[2], "a clone shares no tries")
	assert.Equal(t, &Token{LN: []uint64{0, 0, 0}, Queue: []int{1}}, h.token, "a clone shares no token")

	a := newSHMachine(t, 2, 3)
	require.True(t, a.assign(h))
	assert.Equal(t, h.appendState(nil), a.appendState(nil))
	a.sv[1], a.sn[1], a.tries[2], a.token.LN[1] = shRequesting, 7, 7, 7
	assert.Equal(t, shNone, h.sv[1], "an assigned copy shares no SV")
	assert.Equal(t, uint64(1), h.sn[1], "an assigned copy shares no SN")
	assert.Equal(t, uint64(1), h.tries[2], "an assigned copy shares no tries")
	assert.Zero(t, h.token.LN[1], "an assigned copy shares no token")
	require.True(t, a.assign(newSHMachine(t, 1, 3)))
	assert.Nil(t, a.token, "assigned a machine without the token")
	assert.False(t, a.assign(newRATMachine(t, 1, 3)), "another type")

	base := newSHMachine(t, 1, 3)
	for name, change := range map[string]func(*singhal){
		"sv":     func(x *singhal) { x.sv[2] = shRequesting },
		"sn":     func(x *singhal) { x.sn[2] = 1 },
		"tries":  func(x *singhal) { x.tries[2] = 1 },
		"token":  func(x *singhal) { x.token = &Token{LN: make([]uint64, 3)} },
		"trying": func(x *singhal) { x.trying = true },
	} {
		x := newSHMachine(t, 1, 3)
		change(x)
		assert.NotEqual(t, base.appendState(nil), x.appendState(nil), name)
	}
	x, y := newSHMachine(t, 0, 3), newSHMachine(t, 0, 3)
	y.token.LN[2] = 1
	assert.NotEqual(t, x.appendState(nil), y.appendState(nil), "the token's LN")
	y = newSHMachine(t, 0, 3)
	y.setTSV(2, true)
	assert.NotEqual(t, x.appendState(nil), y.appendState(nil), "the token's TSV")
}

// TestSinghalHeuristicIdleViolation pins what a peer at rest must not
// keep.
func TestSinghalHeuristicIdleViolation(t *testing.T) {
	for name, set := range map[string]func(*singhal){
		"requesting": func(x *singhal) { x.sv[1] = shRequesting },
		"inside":     func(x *singhal) { x.sv[1] = shExecuting },
		"trying":     func(x *singhal) { x.trying = true },
	} {
		x := newSHMachine(t, 1, 3)
		set(x)
		assert.Equal(t, "keeps a request", x.idleViolation(), name)
	}
	x := newSHMachine(t, 1, 3)
	x.sv[1] = shHolding
	assert.Equal(t, "is in state H but holds the token false", x.idleViolation())
	x = newSHMachine(t, 0, 3)
	x.sv[0] = shNone
	assert.Equal(t, "is in state N but holds the token true", x.idleViolation())
}

// TestSinghalHeuristicDescribe shows every field a person needs.
func TestSinghalHeuristicDescribe(t *testing.T) {
	x := newSHMachine(t, 2, 3)
	assert.Equal(t, []StateField{{"SV", "RRN"}, {"SN", "[0 0 0]"}}, x.describe())
	x.trying = true
	x.token = &Token{LN: []uint64{1, 0, 2}, Queue: []int{0, 1}}
	assert.Equal(t, []StateField{{"SV", "RRN"}, {"SN", "[0 0 0]"}, {"try", "out"},
		{"TSV", "[P0 P1]"}, {"TSN", "[1 0 2]"}}, x.describe())
}

// TestSinghalHeuristicCounts reproduces the costs NewSinghalHeuristic
// states: from the staircase, peer i's first entry costs i requests and
// the token; on a running cluster one entry at a time costs 0 at the
// holder of the idle token and never more than n, and fewer than n on
// average; at saturation, n per entry.
func TestSinghalHeuristicCounts(t *testing.T) {
	const n = 5
	for i := range n {
		c := variant{alg: SinghalHeuristic}.cluster(t, n)
		p := c.Peer(i)
		lockWithin(t, p, 10*time.Second)
		p.Unlock()
		want := map[string]uint64{}
		if i > 0 {
			want = map[string]uint64{"request": uint64(i), "token": 1}
		}
		assert.Equal(t, want, nonNil(c.Stats().ByKind), "peer %d's first entry", i)
	}
	for _, n := range []int{1, 2, 3, 5} {
		t.Run("n="+strconv.Itoa(n), func(t *testing.T) {
			c := variant{alg: SinghalHeuristic}.cluster(t, n)
			rng := rand.New(rand.NewPCG(uint64(n), 7))
			holder := 0
			for range 4 * n {
				id := rng.IntN(n)
				before := c.Stats()
				p := c.Peer(id)
				lockWithin(t, p, 10*time.Second)
				p.Unlock()
				got := c.Stats().Sub(before)
				assert.Equal(t, uint64(1), got.Entries)
				if id == holder {
					assert.Empty(t, nonNil(got.ByKind), "peer %d holds the idle token", id)
				} else {
					assert.Equal(t, uint64(1), got.ByKind["token"], "peer %d after holder %d", id, holder)
					assert.LessOrEqual(t, got.Messages, uint64(n), "peer %d after holder %d", id, holder)
				}
				holder = id
			}
		})
	}
	for _, n := range []int{8, 16} {
		light, err := RunTimed(SinghalHeuristic, n, timedLight)
		require.NoError(t, err)
		assert.Less(t, light.Messages, float64(n), "n=%d: fewer than n per entry at light load", n)
		assert.InDelta(t, 0.8*float64(n), light.Messages, 0.1*float64(n), "n=%d: about 0.8 n at light load", n)
		heavy, err := RunTimed(SinghalHeuristic, n, timedHeavy)
		require.NoError(t, err)
		assert.InDelta(t, float64(n), heavy.Messages, 0.05, "n=%d: n per entry at saturation", n)
		assert.LessOrEqual(t, heavy.Messages, float64(n))
	}
}

// TestSinghalHeuristicTimed reproduces the times NewSinghalHeuristic
// states, in virtual time at n = 8: a synchronization delay of one
// message at saturation, and at light load a response of E and two
// messages, but for the entries of the idle token's holder, which wait
// for none.
func TestSinghalHeuristicTimed(t *testing.T) {
	const n = 8
	heavy, err := RunTimed(SinghalHeuristic, n, timedHeavy)
	require.NoError(t, err)
	assert.Equal(t, 1.0, heavy.SyncDelay, "sync delay, in T")
	light, err := RunTimed(SinghalHeuristic, n, timedLight)
	require.NoError(t, err)
	assert.LessOrEqual(t, light.Response, timedLight.CS+2+0.05, "light response: E + 2T at most")
	assert.Greater(t, light.Response, timedLight.CS+1.5, "light response: mostly E + 2T")
	t.Logf("heavy: sync %.3f T, %.2f msgs per entry; light: response %.3f T, %.2f msgs per entry",
		heavy.SyncDelay, heavy.Messages, light.Response, light.Messages)
}
