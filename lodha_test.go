package dmutex

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newLodhaMachine(t *testing.T, id, n int) *lodha {
	t.Helper()
	cfg, err := newConfig(LodhaKshemkalyani, n, forSimulation, nil)
	require.NoError(t, err)
	m, err := cfg.newMachine(LodhaKshemkalyani, id, n)
	require.NoError(t, err)
	return m.(*lodha)
}

// lkStep steps l with ev and returns a copy of what it sent, and whether
// it entered and whether it refused a try.
func lkStep(l *lodha, ev event) (msgs []Message, entered, refused bool) {
	var out output
	l.step(ev, &out)
	return append([]Message(nil), out.msgs...), out.entered, out.refused
}

func lkMsg(k MessageKind, from, to int, ts, ref uint64) event {
	return event{kind: evMessage, msg: Message{Kind: k, From: from, To: to, TS: ts, Ref: ref}}
}

// TestLodhaStep pins the rules of one peer: concurrent requests stand in
// for replies and are queued, younger ones are answered on leaving, and
// the release goes to the next request in the queue.
func TestLodhaStep(t *testing.T) {
	t.Run("an entry alone: requests, a reply from each, nothing on leaving", func(t *testing.T) {
		l := newLodhaMachine(t, 0, 3)
		msgs, _, _ := lkStep(l, event{kind: evRequest})
		assert.Equal(t, []Message{
			{Kind: KindRequest, From: 0, To: 1, TS: 1},
			{Kind: KindRequest, From: 0, To: 2, TS: 1},
		}, msgs)
		_, entered, _ := lkStep(l, lkMsg(KindReply, 1, 0, 0, 1))
		assert.False(t, entered)
		_, entered, _ = lkStep(l, lkMsg(KindReply, 2, 0, 0, 1))
		assert.True(t, entered)
		msgs, _, _ = lkStep(l, event{kind: evRelease})
		assert.Empty(t, msgs)
		msgs, _, _ = lkStep(l, event{kind: evRequest})
		assert.Equal(t, Message{Kind: KindRequest, From: 0, To: 1, TS: 2, Ref: 1}, msgs[0],
			"numbered above the highest seen, and naming the previous request, served")
	})
	t.Run("an idle peer replies at once with its latest request's number", func(t *testing.T) {
		l := newLodhaMachine(t, 1, 3)
		l.seq = 4
		msgs, _, _ := lkStep(l, lkMsg(KindRequest, 0, 1, 7, 0))
		assert.Equal(t, []Message{{Kind: KindReply, From: 1, To: 0, TS: 4, Ref: 7}}, msgs)
		assert.Equal(t, uint64(7), l.highest)
	})
	t.Run("a concurrent request is queued and stands in for a reply; the release goes to it", func(t *testing.T) {
		l := newLodhaMachine(t, 0, 2)
		lkStep(l, event{kind: evRequest}) // (1, 0)
		_, entered, _ := lkStep(l, lkMsg(KindRequest, 1, 0, 1, 0))
		require.True(t, entered, "(1, 0) heads the queue, and peer 1 is heard from")
		assert.Equal(t, []lkEntry{{1, 0}, {1, 1}}, l.queue)
		msgs, _, _ := lkStep(l, event{kind: evRelease})
		assert.Equal(t, []Message{{Kind: KindRelease, From: 0, To: 1, TS: 1, Ref: 1}}, msgs)

		w := newLodhaMachine(t, 1, 2)
		lkStep(w, event{kind: evRequest}) // (1, 1)
		_, entered, _ = lkStep(w, lkMsg(KindRequest, 0, 1, 1, 0))
		assert.False(t, entered, "(1, 0) goes first")
		_, entered, _ = lkStep(w, lkMsg(KindRelease, 0, 1, 1, 1))
		assert.True(t, entered, "its release drops it from the queue")
		assert.Equal(t, []lkEntry{{1, 1}}, w.queue)
	})
	t.Run("a request from a peer already heard from is answered on leaving", func(t *testing.T) {
		l := newLodhaMachine(t, 0, 2)
		lkStep(l, event{kind: evRequest})
		_, entered, _ := lkStep(l, lkMsg(KindReply, 1, 0, 0, 1))
		require.True(t, entered)
		msgs, _, _ := lkStep(l, lkMsg(KindRequest, 1, 0, 2, 0))
		assert.Empty(t, msgs)
		msgs, _, _ = lkStep(l, event{kind: evRelease})
		assert.Equal(t, []Message{{Kind: KindReply, From: 0, To: 1, TS: 1, Ref: 2}}, msgs)
	})
	t.Run("a request names its sender's served request, which leaves the queue", func(t *testing.T) {
		l := newLodhaMachine(t, 2, 3)
		lkStep(l, event{kind: evRequest})         // (1, 2)
		lkStep(l, lkMsg(KindRequest, 0, 2, 1, 0)) // (1, 0): concurrent
		require.Equal(t, []lkEntry{{1, 0}, {1, 2}}, l.queue)
		assert.Equal(t, lkEntry{}, l.served)
		// Peer 1's request, concurrent, names its previous one, (1, 1),
		// served: so was (1, 0), older.
		_, entered, _ := lkStep(l, lkMsg(KindRequest, 1, 2, 4, 1))
		assert.True(t, entered, "(1, 0) is gone, and (1, 2) goes before (4, 1)")
		assert.Equal(t, []lkEntry{{1, 2}, {4, 1}}, l.queue)
		assert.Equal(t, lkEntry{1, 1}, l.served)
	})
	t.Run("a request older than one known served is not queued", func(t *testing.T) {
		l := newLodhaMachine(t, 2, 3)
		lkStep(l, event{kind: evRequest}) // (1, 2)
		lkStep(l, lkMsg(KindRequest, 1, 2, 1, 0))
		lkStep(l, lkMsg(KindRelease, 1, 2, 1, 1)) // (1, 1) served
		_, entered, _ := lkStep(l, lkMsg(KindRequest, 0, 2, 1, 0))
		assert.True(t, entered, "(1, 0) was served before (1, 1)")
		assert.Equal(t, []lkEntry{{1, 2}}, l.queue)
	})
	t.Run("stale replies count for nothing", func(t *testing.T) {
		l := newLodhaMachine(t, 0, 2)
		_, entered, _ := lkStep(l, lkMsg(KindReply, 1, 0, 0, 1))
		assert.False(t, entered, "idle")
		lkStep(l, event{kind: evRequest}) // (1, 0)
		_, entered, _ = lkStep(l, lkMsg(KindReply, 1, 0, 0, 7))
		assert.False(t, entered, "it answers another request")
		_, entered, _ = lkStep(l, lkMsg(KindToken, 1, 0, 0, 1))
		assert.False(t, entered)
	})
	t.Run("a lone peer enters on its request", func(t *testing.T) {
		l := newLodhaMachine(t, 0, 1)
		msgs, entered, _ := lkStep(l, event{kind: evRequest})
		assert.Empty(t, msgs)
		assert.True(t, entered)
	})
}

// TestLodhaTryStep pins the try: answered at once, never queued.
func TestLodhaTryStep(t *testing.T) {
	t.Run("busy from a holder and from an older request, a reply from a younger one", func(t *testing.T) {
		h := newLodhaMachine(t, 0, 2)
		lkStep(h, event{kind: evRequest})
		lkStep(h, lkMsg(KindReply, 1, 0, 0, 1))
		msgs, _, _ := lkStep(h, lkMsg(KindTry, 1, 0, 5, 0))
		assert.Equal(t, []Message{{Kind: KindBusy, From: 0, To: 1, TS: 5, Ref: 5}}, msgs)

		w := newLodhaMachine(t, 1, 3)
		lkStep(w, event{kind: evRequest}) // (1, 1)
		msgs, _, _ = lkStep(w, lkMsg(KindTry, 2, 1, 1, 0))
		assert.Equal(t, KindBusy, msgs[0].Kind, "(1, 1) goes before (1, 2)")
		msgs, _, _ = lkStep(w, lkMsg(KindTry, 0, 1, 1, 0))
		assert.Equal(t, []Message{{Kind: KindReply, From: 1, To: 0, TS: 1, Ref: 1}}, msgs, "(1, 0) goes first")
		assert.Equal(t, []lkEntry{{1, 1}}, w.queue, "a try is never queued")
	})
	t.Run("a trier answers an older request at once and a younger one when refused", func(t *testing.T) {
		l := newLodhaMachine(t, 1, 3)
		msgs, _, _ := lkStep(l, event{kind: evTry}) // (1, 1)
		assert.Equal(t, KindTry, msgs[0].Kind)
		assert.Empty(t, l.queue)
		msgs, _, _ = lkStep(l, lkMsg(KindRequest, 0, 1, 1, 0))
		assert.Equal(t, []Message{{Kind: KindReply, From: 1, To: 0, TS: 0, Ref: 1}}, msgs)
		msgs, _, _ = lkStep(l, lkMsg(KindRequest, 2, 1, 1, 0))
		assert.Empty(t, msgs)
		_, _, refused := lkStep(l, lkMsg(KindBusy, 0, 1, 1, 7))
		assert.False(t, refused, "a busy for another try")
		msgs, _, refused = lkStep(l, lkMsg(KindBusy, 0, 1, 1, 1))
		assert.True(t, refused)
		assert.Equal(t, []Message{{Kind: KindReply, From: 1, To: 2, TS: 0, Ref: 1}}, msgs)
		assert.Empty(t, l.idleViolation())
	})
	t.Run("a late reply to a refused try changes nothing", func(t *testing.T) {
		l := newLodhaMachine(t, 0, 3)
		lkStep(l, event{kind: evTry}) // ts 1
		_, _, refused := lkStep(l, lkMsg(KindBusy, 1, 0, 1, 1))
		require.True(t, refused)
		before := l.appendState(nil)
		msgs, entered, _ := lkStep(l, lkMsg(KindReply, 2, 0, 3, 1))
		assert.Empty(t, msgs)
		assert.False(t, entered)
		assert.Equal(t, before, l.appendState(nil))
	})
	t.Run("a try enters on every reply, and its release sends no release", func(t *testing.T) {
		l := newLodhaMachine(t, 0, 2)
		lkStep(l, event{kind: evTry})
		_, entered, _ := lkStep(l, lkMsg(KindReply, 1, 0, 0, 1))
		require.True(t, entered)
		assert.NotContains(t, l.describe(), StateField{"trying", "true"}, "inside, no longer trying")
		lkStep(l, lkMsg(KindRequest, 1, 0, 2, 0))
		msgs, _, _ := lkStep(l, event{kind: evRelease})
		assert.Equal(t, []Message{{Kind: KindReply, From: 0, To: 1, TS: 0, Ref: 2}}, msgs)
		assert.Equal(t, lkEntry{}, l.served, "a try is no request")
	})
}

// TestLodhaCloneAndState checks that a clone and an assigned copy share
// nothing with their source, and that the encoding tells apart states
// that behave differently.
func TestLodhaCloneAndState(t *testing.T) {
	l := newLodhaMachine(t, 0, 3)
	lkStep(l, event{kind: evRequest})
	c := l.clone().(*lodha)
	require.Equal(t, l.appendState(nil), c.appendState(nil))
	lkStep(c, lkMsg(KindRequest, 1, 0, 1, 0))
	lkStep(c, lkMsg(KindReply, 2, 0, 0, 1))
	assert.Equal(t, []bool{false, false, false}, l.heard)
	assert.Equal(t, []lkEntry{{1, 0}}, l.queue)

	a := newLodhaMachine(t, 0, 3)
	require.True(t, a.assign(c))
	assert.Equal(t, c.appendState(nil), a.appendState(nil))
	lkStep(a, event{kind: evRelease})
	assert.Equal(t, []lkEntry{{1, 0}, {1, 1}}, c.queue, "assign shares nothing")
	assert.False(t, a.assign(newRicartMachine(t, 0, 3)))

	base := func() *lodha { return newLodhaMachine(t, 0, 3) }
	changes := map[string]func(l *lodha){
		"highest": func(l *lodha) { l.highest = 7 },
		"state":   func(l *lodha) { l.state = raWanted },
		"trying":  func(l *lodha) { l.trying = true },
		"ts":      func(l *lodha) { l.ts = 7 },
		"seq":     func(l *lodha) { l.seq = 7 },
		"heard":   func(l *lodha) { l.heard[1] = true },
		"queue":   func(l *lodha) { l.queue = []lkEntry{{7, 1}} },
		"queue id": func(l *lodha) {
			l.queue = []lkEntry{{7, 2}}
		},
		"late":      func(l *lodha) { l.late[1] = 7 },
		"served":    func(l *lodha) { l.served = lkEntry{7, 0} },
		"served id": func(l *lodha) { l.served = lkEntry{0, 1} },
	}
	ref := base()
	ref.queue = []lkEntry{{7, 1}}
	for name, change := range changes {
		d := base()
		change(d)
		want := base().appendState(nil)
		if name == "queue id" {
			want = ref.appendState(nil)
		}
		assert.NotEqual(t, want, d.appendState(nil), name)
	}
}

// TestLodhaDescribe checks what a person sees of a peer.
func TestLodhaDescribe(t *testing.T) {
	l := newLodhaMachine(t, 1, 3)
	lkStep(l, event{kind: evRequest})
	lkStep(l, lkMsg(KindRequest, 0, 1, 1, 0))
	lkStep(l, lkMsg(KindRelease, 2, 1, 0, 9))
	assert.Equal(t, []StateField{
		{"highest", "1"},
		{"state", "wanted"},
		{"request", "ts=1"},
		{"heard from", "1 of 2"},
		{"queue", "[P0:1 P1:1]"},
		{"late", "[]"},
		{"served up to", "P0:0"},
	}, l.describe())
	lkStep(l, event{kind: evTry})
	assert.Contains(t, l.describe(), StateField{"trying", "true"})
}

// TestLodhaIdleViolation pins what a peer at rest must not keep.
func TestLodhaIdleViolation(t *testing.T) {
	l := newLodhaMachine(t, 0, 2)
	assert.Empty(t, l.idleViolation())
	lkStep(l, event{kind: evRequest})
	assert.Equal(t, "keeps state 1 (trying false)", l.idleViolation())
	l.state = raReleased
	assert.Equal(t, "keeps queue [{1 0}]", l.idleViolation())
	l.queue = l.queue[:0]
	l.late[1] = 3
	assert.Equal(t, "keeps late requests [0 3]", l.idleViolation())
	l.late[1] = 0
	l.trying = true
	assert.Equal(t, "keeps state 0 (trying true)", l.idleViolation())
}

// TestLodhaTimedCosts reproduces the doc's costs in virtual time at n = 8:
// a synchronization delay of one message, a light-load response of two
// message delays and the critical section, and 2(n-1) messages per entry
// at light load and, within the first entries' savings, at saturation.
func TestLodhaTimedCosts(t *testing.T) {
	const n = 8
	heavy, err := RunTimed(LodhaKshemkalyani, n, timedHeavy)
	require.NoError(t, err)
	light, err := RunTimed(LodhaKshemkalyani, n, timedLight)
	require.NoError(t, err)
	assert.Equal(t, 1.0, heavy.SyncDelay)
	assert.InDelta(t, 2*(n-1), heavy.Messages, 0.05)
	assert.InDelta(t, 2*(n-1), light.Messages, 0.2)
	assert.InDelta(t, 3, light.Response, 0.05)
}
