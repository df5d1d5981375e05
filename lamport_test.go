package dmutex

import (
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

func lpMsg(k Kind, from, to int, ts uint64) event {
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
	assert.Contains(t, l.describe(), Field{"request", "ts=1"})
	lpStep(l, event{kind: evRelease})
	assert.Contains(t, l.describe(), Field{"request", "none"})
}
