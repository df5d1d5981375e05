package dmutex

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newNTMachine(t testing.TB, id, n int) *naimiTrehel {
	t.Helper()
	cfg, err := newConfig(NaimiTrehel, n, forSimulation, nil)
	require.NoError(t, err)
	m, err := cfg.newMachine(NaimiTrehel, id, n)
	require.NoError(t, err)
	return m.(*naimiTrehel)
}

func ntMsg(kind MessageKind, from, origin int) event {
	return event{kind: evMessage, msg: Message{Kind: kind, From: from, Ref: uint64(origin)}}
}

func TestNaimiTrehelStep(t *testing.T) {
	// Peer 1 of 4 throughout; it starts pointing at peer 0, the root.
	tests := []struct {
		name                   string
		setup                  func(*naimiTrehel)
		ev                     event
		wantMsgs               []Message
		wantEnter, wantRefuse  bool
		wantLast, wantNext     int
		wantToken, wantRequest bool
		wantTrying             bool
		wantHeld               []int
	}{
		{
			name:     "a request goes to LAST, and the requester becomes the root",
			ev:       event{kind: evRequest},
			wantMsgs: []Message{{Kind: KindRequest, From: 1, To: 0, Ref: 1}},
			wantLast: -1, wantNext: -1, wantRequest: true,
		},
		{
			name:      "the idle root enters with no message",
			setup:     func(nt *naimiTrehel) { nt.last, nt.token = -1, true },
			ev:        event{kind: evRequest},
			wantEnter: true, wantLast: -1, wantNext: -1, wantToken: true, wantRequest: true,
		},
		{
			name:     "a peer that is not the root forwards a request and points at its requester",
			ev:       ntMsg(KindRequest, 2, 3),
			wantMsgs: []Message{{Kind: KindRequest, From: 1, To: 0, Ref: 3}},
			wantLast: 3, wantNext: -1,
		},
		{
			name:     "the idle root sends the token to the requester",
			setup:    func(nt *naimiTrehel) { nt.last, nt.token = -1, true },
			ev:       ntMsg(KindRequest, 2, 3),
			wantMsgs: []Message{{Kind: KindToken, From: 1, To: 3}},
			wantLast: 3, wantNext: -1,
		},
		{
			name:     "the root inside queues the requester in NEXT",
			setup:    func(nt *naimiTrehel) { nt.last, nt.token, nt.requesting = -1, true, true },
			ev:       ntMsg(KindRequest, 2, 3),
			wantLast: 3, wantNext: 3, wantToken: true, wantRequest: true,
		},
		{
			name:     "the root waiting for the token queues the requester in NEXT",
			setup:    func(nt *naimiTrehel) { nt.last, nt.requesting = -1, true },
			ev:       ntMsg(KindRequest, 0, 2),
			wantLast: 2, wantNext: 2, wantRequest: true,
		},
		{
			name:      "the token enters a waiting peer",
			setup:     func(nt *naimiTrehel) { nt.last, nt.requesting = -1, true },
			ev:        ntMsg(KindToken, 0, 0),
			wantEnter: true, wantLast: -1, wantNext: -1, wantToken: true, wantRequest: true,
		},
		{
			name:     "release hands the token to NEXT",
			setup:    func(nt *naimiTrehel) { nt.last, nt.next, nt.token, nt.requesting = 2, 2, true, true },
			ev:       event{kind: evRelease},
			wantMsgs: []Message{{Kind: KindToken, From: 1, To: 2}},
			wantLast: 2, wantNext: -1,
		},
		{
			name:     "release with no NEXT keeps the token",
			setup:    func(nt *naimiTrehel) { nt.last, nt.token, nt.requesting = -1, true, true },
			ev:       event{kind: evRelease},
			wantLast: -1, wantNext: -1, wantToken: true,
		},
		{
			name:     "a try goes to LAST and reverses nothing",
			ev:       event{kind: evTry},
			wantMsgs: []Message{{Kind: KindTry, From: 1, To: 0, Ref: 1}},
			wantLast: 0, wantNext: -1, wantTrying: true,
		},
		{
			name:      "the idle root enters on a try with no message",
			setup:     func(nt *naimiTrehel) { nt.last, nt.token = -1, true },
			ev:        event{kind: evTry},
			wantEnter: true, wantLast: -1, wantNext: -1, wantToken: true, wantRequest: true,
		},
		{
			name:     "a peer that is not the root forwards a try and keeps LAST",
			ev:       ntMsg(KindTry, 2, 3),
			wantMsgs: []Message{{Kind: KindTry, From: 1, To: 0, Ref: 3}},
			wantLast: 0, wantNext: -1,
		},
		{
			name:     "the idle root sends the token to a try and points at it",
			setup:    func(nt *naimiTrehel) { nt.last, nt.token = -1, true },
			ev:       ntMsg(KindTry, 2, 3),
			wantMsgs: []Message{{Kind: KindToken, From: 1, To: 3}},
			wantLast: 3, wantNext: -1,
		},
		{
			name:     "the root inside answers a try busy",
			setup:    func(nt *naimiTrehel) { nt.last, nt.token, nt.requesting = -1, true, true },
			ev:       ntMsg(KindTry, 2, 3),
			wantMsgs: []Message{{Kind: KindBusy, From: 1, To: 3}},
			wantLast: -1, wantNext: -1, wantToken: true, wantRequest: true,
		},
		{
			name:     "the root waiting answers a try busy",
			setup:    func(nt *naimiTrehel) { nt.last, nt.requesting = -1, true },
			ev:       ntMsg(KindTry, 2, 3),
			wantMsgs: []Message{{Kind: KindBusy, From: 1, To: 3}},
			wantLast: -1, wantNext: -1, wantRequest: true,
		},
		{
			name:     "a trier holds a request back",
			setup:    func(nt *naimiTrehel) { nt.trying = true },
			ev:       ntMsg(KindRequest, 2, 3),
			wantLast: 0, wantNext: -1, wantTrying: true, wantHeld: []int{3},
		},
		{
			name:     "a trier holds a try back, apart from requests",
			setup:    func(nt *naimiTrehel) { nt.trying = true },
			ev:       ntMsg(KindTry, 2, 3),
			wantLast: 0, wantNext: -1, wantTrying: true, wantHeld: []int{3 + 4},
		},
		{
			name:  "the token enters a try, which becomes the root and then takes what it held back",
			setup: func(nt *naimiTrehel) { nt.trying, nt.held = true, []int{2, 3, 0 + 4} },
			ev:    ntMsg(KindToken, 0, 0),
			wantMsgs: []Message{
				{Kind: KindRequest, From: 1, To: 2, Ref: 3},
				{Kind: KindTry, From: 1, To: 3, Ref: 0},
			},
			wantEnter: true, wantLast: 3, wantNext: 2, wantToken: true, wantRequest: true,
		},
		{
			name:  "busy refuses the try, which then forwards what it held back",
			setup: func(nt *naimiTrehel) { nt.trying, nt.held = true, []int{2, 3 + 4} },
			ev:    ntMsg(KindBusy, 0, 0),
			wantMsgs: []Message{
				{Kind: KindRequest, From: 1, To: 0, Ref: 2},
				{Kind: KindTry, From: 1, To: 2, Ref: 3},
			},
			wantRefuse: true, wantLast: 2, wantNext: -1,
		},
		{
			name:     "a stray busy changes nothing",
			ev:       ntMsg(KindBusy, 0, 0),
			wantLast: 0, wantNext: -1,
		},
		{
			name:     "a request naming this peer is refused",
			ev:       ntMsg(KindRequest, 2, 1),
			wantLast: 0, wantNext: -1,
		},
		{
			name:     "a request naming no peer of the cluster is refused",
			ev:       ntMsg(KindRequest, 2, 4),
			wantLast: 0, wantNext: -1,
		},
		{
			name:     "a try naming no peer of the cluster is refused",
			ev:       ntMsg(KindTry, 2, 4),
			wantLast: 0, wantNext: -1,
		},
		{
			name:     "a kind it does not use is ignored",
			ev:       ntMsg(KindReply, 2, 3),
			wantLast: 0, wantNext: -1,
		},
		{
			name:     "a suspicion is ignored",
			ev:       event{kind: evSuspect, msg: Message{From: 0}},
			wantLast: 0, wantNext: -1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nt := newNTMachine(t, 1, 4)
			if tt.setup != nil {
				tt.setup(nt)
			}
			var out output
			nt.step(tt.ev, &out)
			assert.Equal(t, tt.wantMsgs, out.msgs)
			assert.Equal(t, tt.wantEnter, out.entered, "entered")
			assert.Equal(t, tt.wantRefuse, out.refused, "refused")
			assert.Equal(t, tt.wantLast, nt.last, "LAST")
			assert.Equal(t, tt.wantNext, nt.next, "NEXT")
			assert.Equal(t, tt.wantToken, nt.token, "token")
			assert.Equal(t, tt.wantRequest, nt.requesting, "requesting")
			assert.Equal(t, tt.wantTrying, nt.trying, "trying")
			assert.Equal(t, tokNonNilInts(tt.wantHeld), tokNonNilInts(nt.held), "held")
		})
	}
	t.Run("a second token panics", func(t *testing.T) {
		nt := newNTMachine(t, 0, 3)
		assert.PanicsWithValue(t, "dmutex: naimi-trehel peer 0 received a second token from peer 2",
			func() { nt.step(ntMsg(KindToken, 2, 2), &output{}) })
	})
}

// TestNaimiTrehelStart: peer 0 is the root with the token, and every
// other peer points at it.
func TestNaimiTrehelStart(t *testing.T) {
	for id := range 3 {
		nt := newNTMachine(t, id, 3)
		assert.Equal(t, id == 0, nt.token, "peer %d", id)
		assert.Equal(t, id == 0, nt.hasToken(), "peer %d", id)
		want := 0
		if id == 0 {
			want = -1
		}
		assert.Equal(t, want, nt.last, "peer %d", id)
		assert.Equal(t, -1, nt.next, "peer %d", id)
		assert.Empty(t, nt.idleViolation(), "peer %d", id)
	}
	nt := newNTMachine(t, 0, 3)
	assert.True(t, nt.carriesToken(Message{Kind: KindToken}))
	for _, k := range []MessageKind{KindRequest, KindTry, KindBusy} {
		assert.False(t, nt.carriesToken(Message{Kind: k}), "%v", k)
	}
}

// TestNaimiTrehelCloneAndState: a clone and an assigned copy share no
// memory with their source, and the encoding tells every field apart.
func TestNaimiTrehelCloneAndState(t *testing.T) {
	nt := newNTMachine(t, 1, 4)
	nt.trying, nt.held = true, []int{2}
	c := nt.clone().(*naimiTrehel)
	require.Equal(t, nt.appendState(nil), c.appendState(nil))
	c.held[0] = 0
	assert.Equal(t, []int{2}, nt.held, "a clone shares no held requests with its original")

	a := newNTMachine(t, 2, 4)
	require.True(t, a.assign(nt))
	assert.Equal(t, nt.appendState(nil), a.appendState(nil))
	a.step(ntMsg(KindRequest, 0, 3), &output{})
	assert.Equal(t, []int{2}, nt.held, "an assigned copy shares no held requests with its source")
	assert.False(t, a.assign(newRaymondMachine(t, 1, 4)), "another type")

	base := newNTMachine(t, 1, 4)
	for name, change := range map[string]func(*naimiTrehel){
		"last":       func(x *naimiTrehel) { x.last = 2 },
		"next":       func(x *naimiTrehel) { x.next = 2 },
		"token":      func(x *naimiTrehel) { x.token = true },
		"requesting": func(x *naimiTrehel) { x.requesting = true },
		"trying":     func(x *naimiTrehel) { x.trying = true },
		"held":       func(x *naimiTrehel) { x.held = []int{2} },
	} {
		x := newNTMachine(t, 1, 4)
		change(x)
		assert.NotEqual(t, base.appendState(nil), x.appendState(nil), name)
	}
}

// TestNaimiTrehelIdleViolation pins what a peer at rest must not keep.
func TestNaimiTrehelIdleViolation(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*naimiTrehel)
		want  string
	}{
		{"requesting", func(x *naimiTrehel) { x.requesting = true }, "keeps a request"},
		{"trying", func(x *naimiTrehel) { x.trying = true }, "keeps a request"},
		{"held", func(x *naimiTrehel) { x.held = []int{2} }, "holds requests [2] back"},
		{"next", func(x *naimiTrehel) { x.next = 2 }, "keeps NEXT = P2"},
		{"next is peer 0", func(x *naimiTrehel) { x.next = 0 }, "keeps NEXT = P0"},
		{"root without the token", func(x *naimiTrehel) { x.last = -1 }, "is the root true but holds the token false"},
		{"token off the root", func(x *naimiTrehel) { x.token = true }, "is the root false but holds the token true"},
	}
	for _, tt := range tests {
		x := newNTMachine(t, 1, 4)
		tt.setup(x)
		assert.Equal(t, tt.want, x.idleViolation(), tt.name)
	}
}

// TestNaimiTrehelDescribe shows every field a person needs.
func TestNaimiTrehelDescribe(t *testing.T) {
	x := newNTMachine(t, 1, 4)
	assert.Equal(t, []StateField{{"LAST", "P0"}, {"NEXT", "none"}, {"token", "false"}, {"requesting", "false"}}, x.describe())
	x.last, x.next, x.token, x.requesting, x.trying, x.held = -1, 2, true, true, true, []int{3}
	assert.Equal(t, []StateField{{"LAST", "none"}, {"NEXT", "P2"}, {"token", "true"}, {"requesting", "true"},
		{"try", "out"}, {"held back", "[P3]"}}, x.describe())
}

// ntTree is a cluster at rest: each peer's LAST, -1 for the root, which
// holds the idle token.
type ntTree []int

// ntEntry runs one entry of peer j from the tree at rest, delivering one
// message at a time, and returns its messages and the tree after it.
func ntEntry(t testing.TB, tree ntTree, j int) (int, ntTree) {
	n := len(tree)
	ms := make([]*naimiTrehel, n)
	for i := range ms {
		ms[i] = newNTMachine(t, i, n)
		ms[i].last, ms[i].token = tree[i], tree[i] < 0
	}
	var out output
	ms[j].step(event{kind: evRequest}, &out)
	queue := append([]Message(nil), out.msgs...)
	sent, entered := len(queue), out.entered
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		out.reset()
		ms[m.To].step(event{kind: evMessage, msg: m}, &out)
		require.False(t, out.entered && m.To != j, "only the requester enters")
		entered = entered || out.entered
		queue = append(queue, out.msgs...)
		sent += len(out.msgs)
	}
	require.True(t, entered, "peer %d entered", j)
	out.reset()
	ms[j].step(event{kind: evRelease}, &out)
	require.Empty(t, out.msgs)
	next := make(ntTree, n)
	for i, m := range ms {
		require.Empty(t, m.idleViolation())
		next[i] = m.last
	}
	return sent, next
}

// ntCosts explores every tree that one entry at a time reaches from the
// start, and returns the mean and the most messages of an entry over
// every reachable tree and every requester other than its root.
func ntCosts(t testing.TB, n int) (trees int, mean float64, most int) {
	start := make(ntTree, n)
	start[0] = -1
	seen := map[string]bool{fmt.Sprint(start): true}
	todo := []ntTree{start}
	sum, pairs := 0, 0
	for len(todo) > 0 {
		tree := todo[0]
		todo = todo[1:]
		for j := range n {
			msgs, next := ntEntry(t, tree, j)
			if tree[j] < 0 {
				require.Zero(t, msgs, "the root enters with no message")
				continue
			}
			sum += msgs
			pairs++
			most = max(most, msgs)
			if k := fmt.Sprint(next); !seen[k] {
				seen[k] = true
				todo = append(todo, next)
			}
		}
	}
	return len(seen), float64(sum) / float64(pairs), most
}

// TestNaimiTrehelMeanCost computes the cost of one entry at a time over
// every reachable tree and every requester other than the root: at most
// n, which some tree reaches, and a mean between log2 n and log2 n + 1,
// as NewNaimiTrehel states. Every rooted tree, n^(n-1) of them, is
// reachable. n = 7 (117,649 trees, half a minute) runs with -dmutex.big.
func TestNaimiTrehelMeanCost(t *testing.T) {
	// Searches on the test's goroutine, no timing or memory measured:
	// it runs beside the other parallel tests once the sequential ones
	// are done.
	t.Parallel()
	for n := 2; n <= 7; n++ {
		t.Run("n="+strconv.Itoa(n), func(t *testing.T) {
			if n == 7 && !*bigChecks {
				t.Skip("117,649 trees, half a minute; run with -dmutex.big")
			}
			trees, mean, most := ntCosts(t, n)
			t.Logf("n=%d: %d trees, mean %.3f messages per entry, log2 n %.3f, most %d", n, trees, mean, math.Log2(float64(n)), most)
			assert.Equal(t, int(math.Pow(float64(n), float64(n-1))), trees, "every rooted tree")
			assert.Equal(t, n, most, "the worst case is n")
			assert.GreaterOrEqual(t, mean, math.Log2(float64(n)))
			assert.LessOrEqual(t, mean, math.Log2(float64(n))+1)
		})
	}
}

// ntTryUnheld is Naimi-Trehel whose trier handles the requests and tries
// that reach it while its try is out at once, instead of holding them
// back until the answer.
type ntTryUnheld struct{ *naimiTrehel }

func (n *ntTryUnheld) step(ev event, out *output) {
	if m := ev.msg; ev.kind == evMessage && n.trying && (m.Kind == KindRequest || m.Kind == KindTry) && m.Ref < uint64(n.n) {
		j := int(m.Ref)
		if m.Kind == KindTry {
			j += n.n
		}
		n.receive(j, out)
		return
	}
	n.naimiTrehel.step(ev, out)
}

func (n *ntTryUnheld) clone() machine { return &ntTryUnheld{n.naimiTrehel.clone().(*naimiTrehel)} }

// TestNaimiTrehelTryMustHold: a trier that forwards what reaches it before
// its answer loses a request over a reordering network, as NewNaimiTrehel
// says: the root that gave the trier the token sends a request on to it,
// the request overtakes the token, and the trier, not the root yet,
// forwards it back to the root.
func TestNaimiTrehelTryMustHold(t *testing.T) {
	cfg := CheckConfig{Algorithm: NaimiTrehel, N: 3, Network: NetworkUnordered,
		RequestsPerPeer: []int{1, 1, 1}, TriesPerPeer: []int{1, 1, 1}, StopAtDeadlock: true}
	res := mustCheck(t, cfg)
	require.Nil(t, res.Violation, "the real machine holds")
	cfg.build = func(id, n int) machine { return &ntTryUnheld{newNTMachine(t, id, n)} }
	res = mustCheck(t, cfg)
	require.NotNil(t, res.Violation, "no counterexample in %d states", res.States)
	assert.Equal(t, "deadlock", res.Violation.Property)
	t.Logf("%s\n    %s", res.Violation.Message, strings.Join(res.Violation.Trace, "\n    "))
}

// TestNaimiTrehelTimed reproduces the times NewNaimiTrehel states, in
// virtual time at n = 8: a synchronization delay of exactly one message
// at saturation, since the token goes from the leaving peer straight to
// NEXT, with fewer messages per entry than the worst case n of a lone
// entry, and at light load a response of E plus one T for each message of
// the entry, every one of them on the way (the request's hops and the
// token; the rare overlaps of light load add a little), with fewer than
// log2 n + 1 messages per entry on average.
func TestNaimiTrehelTimed(t *testing.T) {
	const n = 8
	heavy, err := RunTimed(NaimiTrehel, n, timedHeavy)
	require.NoError(t, err)
	assert.Equal(t, 1.0, heavy.SyncDelay, "sync delay, in T")
	assert.Less(t, heavy.Messages, float64(n), "at saturation, below the worst case of one entry")
	light, err := RunTimed(NaimiTrehel, n, timedLight)
	require.NoError(t, err)
	assert.InDelta(t, timedLight.CS+light.Messages, light.Response, 0.05, "light response = E + T per message")
	assert.Less(t, light.Messages, math.Log2(n)+1)
	t.Logf("heavy: sync %.3f T, %.2f msgs per entry; light: response %.3f T, %.2f msgs per entry",
		heavy.SyncDelay, heavy.Messages, light.Response, light.Messages)
}

// TestNaimiTrehelWaitingCrashBreaksNext shows the fault of the failure
// table's row "a waiting peer crashes" on Naimi-Trehel's NEXT chain: peer
// 0 is inside, peer 1 waits in its NEXT and peer 2 in peer 1's; peer 1
// crashes, peer 0's release sends it the token, and peer 2 waits for
// ever. The checker's crash of a waiting peer is enabled only while some
// request waits, and a holder's crash is another fault.
func TestNaimiTrehelWaitingCrashBreaksNext(t *testing.T) {
	s, err := NewSimulation(NaimiTrehel, 3, SimConfig{})
	require.NoError(t, err)
	require.NoError(t, s.Request(0))
	require.NoError(t, s.Run())
	require.NoError(t, s.Request(1))
	require.NoError(t, s.Request(2))
	for range 3 { // 1's request to 0; 2's to 0, then on to 1
		_, err := s.Step()
		require.NoError(t, err)
	}
	require.NoError(t, s.Crash(1))
	err = s.Run()
	require.ErrorIs(t, err, ErrBlocked)
	assert.Contains(t, err.Error(), "2")

	res := mustCheck(t, CheckConfig{Algorithm: NaimiTrehel, N: 3, Requests: 1,
		Faults: CheckFaults{Crash: true, CrashWaiting: true}})
	assert.Equal(t, Holds, res.Safe)
	assert.Positive(t, res.Blocked, "a crash in the NEXT chain blocks a survivor")
	assert.Equal(t, "crash any waiting", res.Faults)

	c, err := newChecker(CheckConfig{Algorithm: NaimiTrehel, N: 2, Requests: 1,
		Faults: CheckFaults{Crash: true, CrashWaiting: true}})
	require.NoError(t, err)
	w, err := c.startWorld(true)
	require.NoError(t, err)
	for _, tr := range w.Transitions() {
		require.NotEqual(t, TransCrash, tr.Kind, "nobody waits yet")
	}
	require.NoError(t, w.Request(1))
	_, ok := w.Find("c1")
	assert.True(t, ok, "peer 1 waits: it may crash")
	_, ok = w.Find("c0")
	assert.False(t, ok, "peer 0 does not wait")

	for _, f := range []CheckFaults{{CrashWaiting: true}, {Crash: true, CrashInside: true, CrashWaiting: true}} {
		_, err := Check(context.Background(), CheckConfig{Algorithm: NaimiTrehel, N: 3, Faults: f})
		require.ErrorIs(t, err, ErrInvalidConfig, "%+v", f)
	}
}
