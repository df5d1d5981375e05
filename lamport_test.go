package dmutex

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newLamportMachine(t *testing.T, id, n int) *lamport {
	t.Helper()
	m, err := newLamport(id, n, nil)
	require.NoError(t, err)
	return m.(*lamport)
}

func lpStep(l *lamport, ev event) ([]Message, bool) {
	var out output
	l.step(ev, &out)
	return append([]Message(nil), out.msgs...), out.entered
}

func lpMsg(k MessageKind, from, to int, ts uint64) event {
	return event{kind: evMessage, msg: Message{Kind: k, From: from, To: to, TS: ts}}
}

// TestLamportStep pins Lamport's entry rule: a peer enters when its
// request heads its queue, in (timestamp, id) order, and it has heard
// something later than its request from every other peer.
func TestLamportStep(t *testing.T) {
	t.Run("request, replies, release", func(t *testing.T) {
		l := newLamportMachine(t, 0, 3)
		msgs, entered := lpStep(l, event{kind: evRequest})
		require.False(t, entered)
		assert.Equal(t, []Message{
			{Kind: KindRequest, From: 0, To: 1, TS: 1},
			{Kind: KindRequest, From: 0, To: 2, TS: 1},
		}, msgs)
		_, entered = lpStep(l, lpMsg(KindReply, 1, 0, 2))
		require.False(t, entered, "peer 2 not heard from yet")
		_, entered = lpStep(l, lpMsg(KindReply, 2, 0, 1))
		require.False(t, entered, "peer 2's message is not later than our request")
		_, entered = lpStep(l, lpMsg(KindReply, 2, 0, 2))
		require.True(t, entered)
		assert.Equal(t, uint64(5), l.clock, "max(clock, TS) + 1 on each message")
		msgs, _ = lpStep(l, event{kind: evRelease})
		assert.Equal(t, []Message{
			{Kind: KindRelease, From: 0, To: 1, TS: 6},
			{Kind: KindRelease, From: 0, To: 2, TS: 6},
		}, msgs)
		assert.Equal(t, []uint64{0, 0, 0}, l.queue)
	})
	t.Run("an older request goes first until its release", func(t *testing.T) {
		l := newLamportMachine(t, 0, 3)
		msgs, _ := lpStep(l, lpMsg(KindRequest, 1, 0, 1))
		assert.Equal(t, []Message{{Kind: KindReply, From: 0, To: 1, TS: 2}}, msgs)
		lpStep(l, event{kind: evRequest}) // ts 3
		lpStep(l, lpMsg(KindReply, 2, 0, 4))
		_, entered := lpStep(l, lpMsg(KindReply, 1, 0, 4))
		require.False(t, entered, "peer 1's request (1, 1) is older than ours (3, 0)")
		_, entered = lpStep(l, lpMsg(KindRelease, 1, 0, 5))
		assert.True(t, entered)
	})
	t.Run("a tie goes to the smaller id", func(t *testing.T) {
		l := newLamportMachine(t, 1, 2)
		lpStep(l, event{kind: evRequest}) // ts 1
		_, entered := lpStep(l, lpMsg(KindRequest, 0, 1, 1))
		require.False(t, entered, "peer 0's request (1, 0) wins the tie")
		_, entered = lpStep(l, lpMsg(KindRelease, 0, 1, 3))
		assert.True(t, entered)

		w := newLamportMachine(t, 0, 2)
		lpStep(w, event{kind: evRequest}) // ts 1
		_, entered = lpStep(w, lpMsg(KindRequest, 1, 0, 1))
		require.False(t, entered, "a request with our timestamp is not later news")
		_, entered = lpStep(w, lpMsg(KindReply, 1, 0, 2))
		assert.True(t, entered, "our request (1, 0) wins the tie")
	})
	t.Run("messages while idle", func(t *testing.T) {
		l := newLamportMachine(t, 0, 2)
		_, entered := lpStep(l, lpMsg(KindReply, 1, 0, 5))
		assert.False(t, entered)
		_, entered = lpStep(l, lpMsg(KindRelease, 1, 0, 6))
		assert.False(t, entered)
		assert.Equal(t, uint64(6), l.last[1])
	})
	t.Run("a lone peer enters on its request", func(t *testing.T) {
		_, entered := lpStep(newLamportMachine(t, 0, 1), event{kind: evRequest})
		assert.True(t, entered)
	})
}

// TestLamportCloneAndState checks that a clone shares no queue and no
// last with its original, and that the encoding shows every field.
func TestLamportCloneAndState(t *testing.T) {
	l := newLamportMachine(t, 0, 3)
	c := l.clone().(*lamport)
	lpStep(c, lpMsg(KindRequest, 1, 0, 4))
	assert.Equal(t, []uint64{0, 0, 0}, l.queue, "a clone shares no queue with its original")
	assert.Equal(t, []uint64{0, 0, 0}, l.last, "nor last")

	// A peer whose request, stamped 5, waits.
	waiting := func() *lamport {
		d := newLamportMachine(t, 0, 3)
		d.clock, d.ts, d.wanting, d.queue[0] = 5, 5, true, 5
		return d
	}
	changes := map[string]func(l *lamport){
		"clock":   func(l *lamport) { l.clock = 7 },
		"queue":   func(l *lamport) { l.queue[1] = 7 },
		"last":    func(l *lamport) { l.last[1] = 7 }, // later than the request
		"wanting": func(l *lamport) { l.wanting = false },
		"held":    func(l *lamport) { l.held = true },
		"ts":      func(l *lamport) { l.ts = 4 },
		"trying":  func(l *lamport) { l.trying = true },
	}
	for name, change := range changes {
		d := waiting()
		change(d)
		assert.NotEqual(t, waiting().appendState(nil), d.appendState(nil), name)
	}
	// What nothing reads any more is left out: the stamp of a request
	// that is over, and the stamps heard while no request waits, or
	// earlier than the one that waits.
	stale := map[string]func(l *lamport){
		"ts when idle":        func(l *lamport) { l.ts = 7 },
		"last when idle":      func(l *lamport) { l.last[1] = 7 },
		"answers when idle":   func(l *lamport) { l.answers = 2 },
		"last before request": func(l *lamport) { l.wanting, l.ts, l.last[1], l.last[2] = true, 5, 3, 2 },
	}
	for name, change := range stale {
		d, e := newLamportMachine(t, 0, 3), newLamportMachine(t, 0, 3)
		change(d)
		if name == "last before request" {
			e.wanting, e.ts = true, 5
		}
		assert.Equal(t, e.appendState(nil), d.appendState(nil), name)
	}
}

// TestLamportDescribeAfterRelease checks that a peer that has left shows
// no request any more: held is cleared on release.
func TestLamportDescribeAfterRelease(t *testing.T) {
	l := newLamportMachine(t, 0, 1)
	_, entered := lpStep(l, event{kind: evRequest})
	require.True(t, entered)
	assert.Contains(t, l.describe(), StateField{"request", "ts=1"})
	lpStep(l, event{kind: evRelease})
	assert.Contains(t, l.describe(), StateField{"request", "none"})
}

func lpStepOut(l *lamport, ev event) output {
	var out output
	l.step(ev, &out)
	out.msgs = append([]Message(nil), out.msgs...)
	return out
}

func lpAnswer(k MessageKind, from int, ts, ref uint64) event {
	return event{kind: evMessage, msg: Message{Kind: k, From: from, To: 0, TS: ts, Ref: ref}}
}

// TestLamportTryStep pins the try path at one peer: a try counts the
// replies to itself only, from zero at each try, and only a busy that
// answers the try outstanding refuses it.
func TestLamportTryStep(t *testing.T) {
	t.Run("a new try counts its replies from zero", func(t *testing.T) {
		l := newLamportMachine(t, 0, 3)
		lpStep(l, event{kind: evTry})
		first := l.ts
		lpStep(l, lpAnswer(KindReply, 1, 2, first))
		_, entered := lpStep(l, lpAnswer(KindReply, 2, 2, first))
		require.True(t, entered, "n-1 replies")
		lpStep(l, event{kind: evRelease})
		lpStep(l, event{kind: evTry})
		_, entered = lpStep(l, lpAnswer(KindReply, 1, l.clock+1, l.ts))
		assert.False(t, entered, "one reply of two to the second try")
		_, entered = lpStep(l, lpAnswer(KindReply, 2, l.clock+1, l.ts))
		assert.True(t, entered)
	})
	t.Run("a busy for an earlier try does not refuse a later one", func(t *testing.T) {
		l := newLamportMachine(t, 0, 3)
		lpStep(l, event{kind: evTry})
		first := l.ts
		require.True(t, lpStepOut(l, lpAnswer(KindBusy, 1, 2, first)).refused)
		lpStep(l, event{kind: evTry})
		// Peer 2's busy for the first try, sent before the second reached it.
		out := lpStepOut(l, lpAnswer(KindBusy, 2, 2, first))
		assert.False(t, out.refused, "a stale busy")
		assert.Empty(t, out.msgs, "a stale busy sends nothing")
		lpStep(l, lpAnswer(KindReply, 1, l.clock+1, l.ts))
		_, entered := lpStep(l, lpAnswer(KindReply, 2, l.clock+1, l.ts))
		assert.True(t, entered, "the second try has both its replies")
	})
	t.Run("a peer inside through a try shows its request", func(t *testing.T) {
		l := newLamportMachine(t, 0, 2)
		lpStep(l, event{kind: evTry})
		_, entered := lpStep(l, lpAnswer(KindReply, 1, 2, l.ts))
		require.True(t, entered)
		assert.Contains(t, l.describe(), StateField{"request", "ts=1"})
	})
}

// TestLamportRefusalReleaseIsLater checks that the release a refused try
// broadcasts is an event of its own, stamped above the clock the busy
// raised: a peer that requested at that clock, and has not been heard
// by the refused peer yet, enters on the release.
func TestLamportRefusalReleaseIsLater(t *testing.T) {
	p := []*lamport{newLamportMachine(t, 0, 3), newLamportMachine(t, 1, 3), newLamportMachine(t, 2, 3)}
	to := func(msgs []Message, j int) event {
		t.Helper()
		for _, m := range msgs {
			if m.To == j {
				return event{kind: evMessage, msg: m}
			}
		}
		require.FailNow(t, "no message", "to %d in %v", j, msgs)
		return event{}
	}
	req2, _ := lpStep(p[2], event{kind: evRequest})
	r0, _ := lpStep(p[0], to(req2, 0))
	r1, _ := lpStep(p[1], to(req2, 1))
	lpStep(p[2], to(r0, 2))
	_, entered := lpStep(p[2], to(r1, 2))
	require.True(t, entered, "peer 2 inside")

	try0, _ := lpStep(p[0], event{kind: evTry})
	busy1, _ := lpStep(p[1], to(try0, 1))
	require.Equal(t, KindBusy, busy1[0].Kind, "peer 1 has peer 2's older request queued")
	lpStep(p[2], to(try0, 2)) // busy too; it stays on its way
	out := lpStepOut(p[0], to(busy1, 0))
	require.True(t, out.refused)
	rel0 := out.msgs

	// Peer 1 requests at the clock peer 0's busy receipt reached, and
	// peer 0 has not seen that request.
	lpStep(p[1], event{kind: evRequest})
	require.Equal(t, max(try0[0].TS, busy1[0].TS)+1, p[1].ts, "the scenario needs a request stamped at the clock the busy raised")
	rel2, _ := lpStep(p[2], event{kind: evRelease})
	_, entered = lpStep(p[1], to(rel2, 1))
	require.False(t, entered, "nothing later than the request from peer 0 yet")
	_, entered = lpStep(p[1], to(rel0, 1))
	assert.True(t, entered, "the refusal's release is later than the request")
}

// TestLamportIdleViolation pins what a peer at rest must not keep: a
// request, waiting or inside, or another's queued request.
func TestLamportIdleViolation(t *testing.T) {
	l := newLamportMachine(t, 0, 3)
	assert.Empty(t, l.idleViolation())
	lpStep(l, event{kind: evRequest})
	assert.Equal(t, "keeps a request", l.idleViolation(), "waiting")

	l = newLamportMachine(t, 0, 2)
	lpStep(l, event{kind: evRequest})
	_, entered := lpStep(l, lpMsg(KindReply, 1, 0, 2))
	require.True(t, entered)
	assert.Equal(t, "keeps a request", l.idleViolation(), "inside")
	lpStep(l, event{kind: evRelease})
	assert.Empty(t, l.idleViolation(), "left")
	lpStep(l, lpMsg(KindRequest, 1, 0, 9))
	assert.Equal(t, "keeps queued requests [0 9]", l.idleViolation())
}

// TestLamportStateKeepsWhatIsRead extends TestLamportCloneAndState to the
// states it does not start from: a try that waits (its replies so far are
// read, its last stamps are not), a peer inside (its stamp is read by the
// world's order check), and the stamps of queued requests, exact while a
// try may still arrive and compare with them, at their place in the
// queue, and distinct from "none" at the world's offset.
func TestLamportStateKeepsWhatIsRead(t *testing.T) {
	trying := func() *lamport {
		d := newLamportMachine(t, 0, 3)
		d.clock, d.ts, d.wanting, d.trying, d.queue[0] = 5, 5, true, true, 5
		return d
	}
	inside := func() *lamport {
		d := newLamportMachine(t, 0, 3)
		d.clock, d.ts, d.held, d.queue[0] = 5, 5, true, 5
		return d
	}
	d := trying()
	d.answers = 1
	assert.NotEqual(t, trying().appendState(nil), d.appendState(nil), "answers of a try that waits")
	d = trying()
	d.last[1] = 7
	assert.Equal(t, trying().appendState(nil), d.appendState(nil), "last while a try waits")
	d = inside()
	d.ts = 4
	assert.NotEqual(t, inside().appendState(nil), d.appendState(nil), "ts inside")

	a, b := inside(), inside()
	a.queue[1], b.queue[2] = 7, 7
	assert.NotEqual(t, a.appendState(nil), b.appendState(nil), "which peer's request is queued")
	a, b = inside(), inside()
	a.queue[1], b.queue[1] = 7, 8
	assert.NotEqual(t, a.appendState(nil), b.appendState(nil), "a queued stamp, while tries may come")

	// Renamed as the world renames stamps, the least one to 0: peer 1's
	// request stamped like ours is not "no request".
	a, b = inside(), inside()
	a.queue[1] = 5
	assert.NotEqual(t, a.appendStateIn(nil, false, lpStampMap(false, a)), b.appendStateIn(nil, false, lpStampMap(false, b)),
		"a request at the least stamp")

	// Once no try can come, a queued request is encoded as queued or not
	// and, while our request waits, whether it goes before ours.
	waiting := func(q1, q2 uint64) []byte {
		d := newLamportMachine(t, 0, 3)
		d.clock, d.ts, d.wanting, d.queue[0], d.queue[1], d.queue[2] = 5, 5, true, 5, q1, q2
		return d.appendStateIn(nil, true, nil)
	}
	assert.NotEqual(t, waiting(4, 0), waiting(6, 0), "a request before ours or after it, while ours waits")
	assert.NotEqual(t, waiting(4, 0), waiting(0, 4), "which peer's request goes before ours")
	assert.NotEqual(t, waiting(6, 0), waiting(0, 6), "which peer's request goes after ours")
	a, b = newLamportMachine(t, 0, 3), newLamportMachine(t, 0, 3)
	a.clock, b.clock = 7, 7
	a.ts, b.ts = 5, 5 // a request that is over
	a.queue[1], b.queue[1] = 4, 6
	assert.Equal(t, a.appendStateIn(nil, true, nil), b.appendStateIn(nil, true, nil),
		"an idle peer's queue: its next request comes after both")
}

// lpStampMap renames the stamps of ls as the world does without
// StampGaps: each less the least.
func lpStampMap(noTries bool, ls ...*lamport) *stampMap {
	var vals []uint64
	for _, l := range ls {
		vals = l.appendStamps(vals, noTries)
	}
	slices.Sort(vals)
	vals = slices.Compact(vals)
	sm := &stampMap{vals: vals}
	for _, v := range vals {
		sm.to = append(sm.to, v-vals[0])
	}
	return sm
}

// TestLamportAppendStamps pins appendStamps to its contract, the stamps
// appendStateIn encodes: the clock, the stamp of a request that waits or
// is inside, and the queued stamps while tries may come (after that they
// are encoded as queued or not, without their stamps).
func TestLamportAppendStamps(t *testing.T) {
	l := newLamportMachine(t, 0, 3)
	l.clock, l.queue[1] = 9, 8
	assert.ElementsMatch(t, []uint64{9, 8}, l.appendStamps(nil, false), "a queued stamp")
	assert.ElementsMatch(t, []uint64{9}, l.appendStamps(nil, true), "queued stamps are not encoded once tries are over")
	// Just below the clock, the queued request is not "none".
	e := newLamportMachine(t, 0, 3)
	e.clock = 9
	assert.NotEqual(t, e.appendStateIn(nil, false, lpStampMap(false, e)), l.appendStateIn(nil, false, lpStampMap(false, l)))

	l = newLamportMachine(t, 0, 3)
	l.clock, l.ts, l.wanting, l.queue[0] = 9, 5, true, 5
	assert.ElementsMatch(t, []uint64{9, 5}, l.appendStamps(nil, true), "the stamp of a request that waits")
	l.wanting, l.held = false, true
	assert.ElementsMatch(t, []uint64{9, 5}, l.appendStamps(nil, true), "the stamp of a request inside")
	l.held = false
	assert.ElementsMatch(t, []uint64{9}, l.appendStamps(nil, true), "no stamp of a request that is over")
}
