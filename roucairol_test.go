package dmutex

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newRoucairolMachine(t *testing.T, id, n int) *roucairol {
	t.Helper()
	cfg, err := newConfig(RoucairolCarvalho, n, forSimulation, nil)
	require.NoError(t, err)
	m, err := cfg.newMachine(RoucairolCarvalho, id, n)
	require.NoError(t, err)
	return m.(*roucairol)
}

// rcStep steps r with ev and returns a copy of what it sent, and whether
// it entered and whether it refused a try.
func rcStep(r *roucairol, ev event) (msgs []Message, entered, refused bool) {
	var out output
	r.step(ev, &out)
	return append([]Message(nil), out.msgs...), out.entered, out.refused
}

func rcMsg(k MessageKind, from, to int, ts, ref uint64) event {
	return event{kind: evMessage, msg: Message{Kind: k, From: from, To: to, TS: ts, Ref: ref}}
}

// TestRoucairolStartingPermissions pins who holds each pair's permission
// at the start: the lower id, so that peer 0 holds them all and the last
// peer none.
func TestRoucairolStartingPermissions(t *testing.T) {
	for id, want := range [][]bool{
		{false, true, true, true},
		{false, false, true, true},
		{false, false, false, true},
		{false, false, false, false},
	} {
		r := newRoucairolMachine(t, id, 4)
		assert.Equal(t, want, r.perm, "peer %d", id)
		assert.Equal(t, 3-id, r.nperm, "peer %d", id)
		var lack []int
		for j := range id {
			lack = append(lack, j)
		}
		assert.Equal(t, lack, r.needs(nil), "peer %d needs those whose permission it lacks", id)
	}
}

// TestRoucairolStep pins how a peer asks for the permissions it lacks,
// keeps those it holds, and gives them up.
func TestRoucairolStep(t *testing.T) {
	t.Run("a peer holding every permission enters with no message and no tick", func(t *testing.T) {
		r := newRoucairolMachine(t, 0, 3)
		before := r.appendState(nil)
		msgs, entered, _ := rcStep(r, event{kind: evRequest})
		assert.Empty(t, msgs)
		assert.True(t, entered)
		msgs, _, _ = rcStep(r, event{kind: evRelease})
		assert.Empty(t, msgs)
		assert.Equal(t, before, r.appendState(nil), "the same state again, for the fast path")
	})
	t.Run("a peer asks only the peers whose permission it lacks, and keeps what it gets", func(t *testing.T) {
		r := newRoucairolMachine(t, 1, 3) // holds 2's, lacks 0's
		msgs, entered, _ := rcStep(r, event{kind: evRequest})
		assert.Equal(t, []Message{{Kind: KindRequest, From: 1, To: 0, TS: 1}}, msgs)
		assert.False(t, entered)
		_, entered, _ = rcStep(r, rcMsg(KindReply, 0, 1, 1, 1))
		assert.True(t, entered)
		msgs, _, _ = rcStep(r, event{kind: evRelease})
		assert.Empty(t, msgs, "nobody asked")
		msgs, entered, _ = rcStep(r, event{kind: evRequest})
		assert.Empty(t, msgs, "both permissions are kept")
		assert.True(t, entered)
	})
	t.Run("an idle peer gives a permission at once, with its clock raised", func(t *testing.T) {
		r := newRoucairolMachine(t, 0, 3)
		msgs, _, _ := rcStep(r, rcMsg(KindRequest, 2, 0, 5, 0))
		assert.Equal(t, []Message{{Kind: KindReply, From: 0, To: 2, TS: 5, Ref: 5}}, msgs)
		assert.False(t, r.perm[2])
		msgs, _, _ = rcStep(r, event{kind: evRequest})
		assert.Equal(t, []Message{{Kind: KindRequest, From: 0, To: 2, TS: 6}}, msgs,
			"the permission given is asked for again, and the request is younger than any seen")
	})
	t.Run("a holder keeps the request until it leaves", func(t *testing.T) {
		r := newRoucairolMachine(t, 0, 2)
		_, entered, _ := rcStep(r, event{kind: evRequest})
		require.True(t, entered)
		msgs, _, _ := rcStep(r, rcMsg(KindRequest, 1, 0, 1, 0))
		assert.Empty(t, msgs)
		msgs, _, _ = rcStep(r, event{kind: evRelease})
		assert.Equal(t, []Message{{Kind: KindReply, From: 0, To: 1, TS: 1, Ref: 1}}, msgs)
	})
	t.Run("an older waiting request keeps the permission; a younger one gives it and asks back", func(t *testing.T) {
		r := newRoucairolMachine(t, 1, 3) // holds 2's, lacks 0's
		rcStep(r, event{kind: evRequest}) // ts 1
		msgs, _, _ := rcStep(r, rcMsg(KindRequest, 2, 1, 1, 0))
		assert.Empty(t, msgs, "(1, 1) goes before (1, 2)")
		assert.Equal(t, uint64(1), r.deferred[2])

		y := newRoucairolMachine(t, 1, 3)
		y.clock = 3
		msgs, _, _ = rcStep(y, event{kind: evRequest})
		require.Equal(t, []Message{{Kind: KindRequest, From: 1, To: 0, TS: 4}}, msgs)
		msgs, _, _ = rcStep(y, rcMsg(KindRequest, 2, 1, 2, 0))
		assert.Equal(t, []Message{
			{Kind: KindReply, From: 1, To: 2, TS: 4, Ref: 2},
			{Kind: KindRequest, From: 1, To: 2, TS: 4},
		}, msgs, "(2, 2) goes first: the permission goes, and is asked back")
		assert.Zero(t, y.deferred[2])
	})
	t.Run("a request that comes before the permission it asks for waits for it", func(t *testing.T) {
		r := newRoucairolMachine(t, 2, 3) // holds nothing
		rcStep(r, event{kind: evRequest}) // ts 1, to 0 and 1
		// Peer 0 gave its permission to 2 and, on its next request, asks
		// back: the request overtakes the reply.
		msgs, _, _ := rcStep(r, rcMsg(KindRequest, 0, 2, 2, 0))
		assert.Empty(t, msgs, "the permission is not here yet")
		msgs, _, _ = rcStep(r, rcMsg(KindReply, 0, 2, 1, 1))
		assert.Empty(t, msgs, "(1, 2) goes before (2, 0): kept")
		_, entered, _ := rcStep(r, rcMsg(KindReply, 1, 2, 1, 1))
		require.True(t, entered)
		msgs, _, _ = rcStep(r, event{kind: evRelease})
		assert.Equal(t, []Message{{Kind: KindReply, From: 2, To: 0, TS: 2, Ref: 2}}, msgs)

		idle := newRoucairolMachine(t, 2, 3)
		idle.asked[0] = true // a refused try's question to 0 is out
		msgs, _, _ = rcStep(idle, rcMsg(KindRequest, 0, 2, 2, 0))
		assert.Empty(t, msgs)
		msgs, _, _ = rcStep(idle, rcMsg(KindReply, 0, 2, 1, 1))
		assert.Equal(t, []Message{{Kind: KindReply, From: 2, To: 0, TS: 2, Ref: 2}}, msgs,
			"an idle peer passes the permission on as it arrives")
	})
	t.Run("stray and duplicate replies count once", func(t *testing.T) {
		r := newRoucairolMachine(t, 2, 3)
		rcStep(r, event{kind: evRequest})
		for _, ev := range []event{
			rcMsg(KindReply, 0, 2, 1, 1),
			rcMsg(KindReply, 0, 2, 1, 1),
			rcMsg(KindRelease, 1, 2, 1, 1),
			rcMsg(KindToken, 1, 2, 1, 1),
		} {
			_, entered, _ := rcStep(r, ev)
			require.False(t, entered, "%+v", ev.msg)
		}
		assert.Equal(t, 1, r.nperm)
		_, entered, _ := rcStep(r, rcMsg(KindReply, 1, 2, 1, 1))
		assert.True(t, entered)
	})
	t.Run("a lone peer enters on its request", func(t *testing.T) {
		r := newRoucairolMachine(t, 0, 1)
		msgs, entered, _ := rcStep(r, event{kind: evRequest})
		assert.Empty(t, msgs)
		assert.True(t, entered)
	})
}

// TestRoucairolTryStep pins the try path: it is answered at once, never
// held, and refused on the busy for the try outstanding only.
func TestRoucairolTryStep(t *testing.T) {
	t.Run("a try with every permission enters at once", func(t *testing.T) {
		r := newRoucairolMachine(t, 0, 3)
		msgs, entered, _ := rcStep(r, event{kind: evTry})
		assert.Empty(t, msgs)
		assert.True(t, entered)
		assert.False(t, r.trying)
	})
	t.Run("a try is answered at once: busy by a holder, by an older request, and when the permission is away", func(t *testing.T) {
		r := newRoucairolMachine(t, 0, 3)
		rcStep(r, event{kind: evRequest}) // enters
		msgs, _, _ := rcStep(r, rcMsg(KindTry, 1, 0, 4, 0))
		assert.Equal(t, []Message{{Kind: KindBusy, From: 0, To: 1, TS: 4, Ref: 4}}, msgs)
		assert.Zero(t, r.deferred[1], "a try is never held")

		w := newRoucairolMachine(t, 1, 3)
		rcStep(w, event{kind: evRequest}) // ts 1, holds 2's
		msgs, _, _ = rcStep(w, rcMsg(KindTry, 2, 1, 1, 0))
		assert.Equal(t, []Message{{Kind: KindBusy, From: 1, To: 2, TS: 1, Ref: 1}}, msgs)

		a := newRoucairolMachine(t, 2, 3)
		msgs, _, _ = rcStep(a, rcMsg(KindTry, 0, 2, 3, 0))
		assert.Equal(t, []Message{{Kind: KindBusy, From: 2, To: 0, TS: 3, Ref: 3}}, msgs,
			"peer 2 holds no permission: 0's is on its way to it")
	})
	t.Run("a try that goes first takes the permission", func(t *testing.T) {
		w := newRoucairolMachine(t, 1, 3)
		w.clock = 5
		msgs, _, _ := rcStep(w, event{kind: evRequest})
		require.Equal(t, []Message{{Kind: KindRequest, From: 1, To: 0, TS: 6}}, msgs)
		msgs, _, _ = rcStep(w, rcMsg(KindTry, 2, 1, 2, 0))
		assert.Equal(t, []Message{
			{Kind: KindReply, From: 1, To: 2, TS: 6, Ref: 2},
			{Kind: KindRequest, From: 1, To: 2, TS: 6},
		}, msgs)
	})
	t.Run("only the busy for the try outstanding refuses it", func(t *testing.T) {
		r := newRoucairolMachine(t, 2, 3)
		msgs, _, _ := rcStep(r, event{kind: evTry}) // ts 1
		require.Len(t, msgs, 2)
		_, _, refused := rcStep(r, rcMsg(KindBusy, 0, 2, 1, 1))
		require.True(t, refused)
		assert.Equal(t, []bool{false, true, false}, r.asked, "1 has not answered")
		assert.Contains(t, r.describe(), StateField{"request", "none"}, "the refused try is over")
		msgs, _, _ = rcStep(r, event{kind: evTry}) // ts 2
		assert.Equal(t, []Message{{Kind: KindTry, From: 2, To: 0, TS: 2}}, msgs, "1's answer to the first try will do")
		msgs, _, refused = rcStep(r, rcMsg(KindBusy, 1, 2, 1, 1))
		assert.False(t, refused, "a busy for the first try")
		assert.Equal(t, []Message{{Kind: KindTry, From: 2, To: 1, TS: 2}}, msgs, "so the second asks 1 now")
		rcStep(r, rcMsg(KindReply, 0, 2, 2, 2))
		_, entered, _ := rcStep(r, rcMsg(KindReply, 1, 2, 2, 2))
		assert.True(t, entered)
	})
	t.Run("a busy for a refused try makes the request outstanding ask", func(t *testing.T) {
		r := newRoucairolMachine(t, 2, 3)
		rcStep(r, event{kind: evTry}) // ts 1
		_, _, refused := rcStep(r, rcMsg(KindBusy, 0, 2, 1, 1))
		require.True(t, refused)
		msgs, _, _ := rcStep(r, event{kind: evRequest}) // ts 2
		assert.Equal(t, []Message{{Kind: KindRequest, From: 2, To: 0, TS: 2}}, msgs)
		msgs, _, _ = rcStep(r, rcMsg(KindBusy, 1, 2, 1, 1))
		assert.Equal(t, []Message{{Kind: KindRequest, From: 2, To: 1, TS: 2}}, msgs)
	})
	t.Run("a reply to a refused try is kept", func(t *testing.T) {
		r := newRoucairolMachine(t, 2, 3)
		rcStep(r, event{kind: evTry})
		rcStep(r, rcMsg(KindBusy, 0, 2, 1, 1))
		msgs, entered, _ := rcStep(r, rcMsg(KindReply, 1, 2, 1, 1))
		assert.Empty(t, msgs)
		assert.False(t, entered)
		assert.True(t, r.perm[1])
		assert.Empty(t, r.idleViolation())
	})
	t.Run("a try that must give a permission to an older request is refused, and answers what it held", func(t *testing.T) {
		r := newRoucairolMachine(t, 1, 3) // holds 2's, lacks 0's
		r.clock = 3
		msgs, _, _ := rcStep(r, event{kind: evTry}) // ts 4
		require.Equal(t, []Message{{Kind: KindTry, From: 1, To: 0, TS: 4}}, msgs)
		msgs, _, refused := rcStep(r, rcMsg(KindRequest, 2, 1, 2, 0))
		assert.True(t, refused)
		assert.Equal(t, []Message{{Kind: KindReply, From: 1, To: 2, TS: 4, Ref: 2}}, msgs)
		assert.Equal(t, raReleased, r.state)
	})
	t.Run("a refused try answers the younger requests it held", func(t *testing.T) {
		r := newRoucairolMachine(t, 1, 3)
		rcStep(r, event{kind: evTry}) // ts 1 to 0
		msgs, _, _ := rcStep(r, rcMsg(KindRequest, 2, 1, 2, 0))
		assert.Empty(t, msgs, "the try goes first")
		msgs, _, refused := rcStep(r, rcMsg(KindBusy, 0, 1, 1, 1))
		assert.True(t, refused)
		assert.Equal(t, []Message{{Kind: KindReply, From: 1, To: 2, TS: 2, Ref: 2}}, msgs)
	})
}

// TestRoucairolCloneAndState checks that a clone shares nothing with its
// original, that assign copies, and that the encoding tells apart states
// that behave differently.
func TestRoucairolCloneAndState(t *testing.T) {
	r := newRoucairolMachine(t, 1, 3)
	rcStep(r, event{kind: evRequest})
	c := r.clone().(*roucairol)
	require.Equal(t, r.appendState(nil), c.appendState(nil))
	rcStep(c, rcMsg(KindReply, 0, 1, 1, 1))
	rcStep(c, rcMsg(KindRequest, 2, 1, 4, 0))
	assert.Equal(t, []bool{false, false, true}, r.perm, "a clone shares no perm with its original")
	assert.Equal(t, []bool{true, false, false}, r.asked, "nor asked")
	assert.Equal(t, []uint64{0, 0, 0}, r.deferred, "nor deferred")
	assert.Equal(t, 1, r.nperm)

	a := newRoucairolMachine(t, 1, 3)
	require.True(t, a.assign(c))
	assert.Equal(t, c.appendState(nil), a.appendState(nil))
	rcStep(a, event{kind: evRelease})
	assert.Equal(t, raHeld, c.state, "assign shares nothing either")
	assert.NotEqual(t, c.appendState(nil), a.appendState(nil))
	assert.False(t, a.assign(newRicartMachine(t, 0, 3)), "another algorithm's machine")

	base := func() *roucairol { return newRoucairolMachine(t, 1, 3) }
	changes := map[string]func(r *roucairol){
		"clock":    func(r *roucairol) { r.clock = 7 },
		"state":    func(r *roucairol) { r.state = raWanted },
		"trying":   func(r *roucairol) { r.trying = true },
		"ts":       func(r *roucairol) { r.ts = 7 },
		"perm":     func(r *roucairol) { r.perm[0] = true },
		"asked":    func(r *roucairol) { r.asked[0] = true },
		"deferred": func(r *roucairol) { r.deferred[2] = 7 },
	}
	for name, change := range changes {
		d := base()
		change(d)
		assert.NotEqual(t, base().appendState(nil), d.appendState(nil), name)
	}
}

// TestRoucairolDescribe checks what a person sees of a peer.
func TestRoucairolDescribe(t *testing.T) {
	r := newRoucairolMachine(t, 1, 3)
	rcStep(r, event{kind: evTry})
	rcStep(r, rcMsg(KindRequest, 2, 1, 3, 0))
	assert.Equal(t, []StateField{
		{"clock", "3"},
		{"state", "wanted"},
		{"request", "ts=1"},
		{"permissions", "[P2]"},
		{"asked", "[P0]"},
		{"held requests", "[P2:3]"},
		{"trying", "true"},
	}, r.describe())
	rcStep(r, rcMsg(KindReply, 0, 1, 3, 1))
	assert.Contains(t, r.describe(), StateField{"state", "held"})
	assert.NotContains(t, r.describe(), StateField{"trying", "true"})
}

// TestRoucairolIdleViolation pins what a peer at rest must not keep.
func TestRoucairolIdleViolation(t *testing.T) {
	r := newRoucairolMachine(t, 1, 2)
	assert.Empty(t, r.idleViolation())
	rcStep(r, event{kind: evRequest})
	assert.Equal(t, "keeps state 1 (trying false)", r.idleViolation())
	rcStep(r, rcMsg(KindReply, 0, 1, 1, 1))
	assert.Equal(t, "keeps state 2 (trying false)", r.idleViolation())
	rcStep(r, event{kind: evRelease})
	assert.Empty(t, r.idleViolation())

	r = newRoucairolMachine(t, 1, 2)
	rcStep(r, event{kind: evTry})
	assert.Equal(t, "keeps state 1 (trying true)", r.idleViolation())
	r.state = raReleased
	assert.Equal(t, "keeps state 0 (trying true)", r.idleViolation())
	r.trying = false
	assert.Equal(t, "still asks [true false]", r.idleViolation())
	r.asked[0] = false
	r.deferred[0] = 4
	assert.Equal(t, "keeps requests [4 0]", r.idleViolation())
}

// TestRoucairolTimedCosts reproduces the doc's costs in virtual time at
// n = 8: at saturation every entry costs 2(n-1) messages, as each leaving
// peer gives away every permission, and the synchronization delay is one
// message; at light load an entry costs less than Ricart-Agrawala's
// 2(n-1), since a peer keeps the permissions of the peers that have not
// entered since its last entry.
func TestRoucairolTimedCosts(t *testing.T) {
	const n = 8
	heavy, err := RunTimed(RoucairolCarvalho, n, timedHeavy)
	require.NoError(t, err)
	light, err := RunTimed(RoucairolCarvalho, n, timedLight)
	require.NoError(t, err)
	ra, err := RunTimed(RicartAgrawala, n, timedLight)
	require.NoError(t, err)
	// The first entries, from the starting permissions, cost less.
	assert.InDelta(t, 2*(n-1), heavy.Messages, 0.05, "messages per entry at saturation")
	assert.Equal(t, 1.0, heavy.SyncDelay, "one message from an exit to the next entry")
	assert.Less(t, light.Messages, ra.Messages-5, "light load: permissions kept")
	assert.Less(t, light.Response, ra.Response, "and some entries wait for no message")
}

// TestRoucairolFastPath checks that a peer holding every permission takes
// the runtime's fast path: its entries send nothing and, after the probe,
// skip its machine; another peer's request disarms it and takes the
// permission, which the first peer must then ask back.
func TestRoucairolFastPath(t *testing.T) {
	c := variant{alg: RoucairolCarvalho}.cluster(t, 3)
	p := c.Peer(0)
	for range 5 {
		lockWithin(t, p, 10*time.Second)
		p.Unlock()
	}
	assert.Zero(t, c.Stats().Messages, "peer 0 starts with every permission")
	assert.NotZero(t, p.fast.word.Load()&fastArmed, "its rounds repeat its state")

	lockWithin(t, c.Peer(1), 10*time.Second)
	c.Peer(1).Unlock()
	waitQuiet(t, c)
	assert.Zero(t, p.fast.word.Load()&fastArmed, "a message disarms it")
	before := c.Stats()
	lockWithin(t, p, 10*time.Second)
	p.Unlock()
	waitQuiet(t, c)
	assert.Equal(t, map[string]uint64{"request": 1, "reply": 1}, c.Stats().Sub(before).ByKind,
		"peer 1 kept peer 0's permission")
}
