package dmutex

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newRicartMachine(t *testing.T, id, n int, opts ...Option) *ricart {
	t.Helper()
	cfg, err := newConfig(RicartAgrawala, n, forSimulation, opts)
	require.NoError(t, err)
	m, err := cfg.newMachine(RicartAgrawala, id, n)
	require.NoError(t, err)
	return m.(*ricart)
}

// raStep steps r with ev and returns a copy of what it sent and whether it
// entered.
func raStep(r *ricart, ev event) ([]Message, bool) {
	var out output
	r.step(ev, &out)
	return append([]Message(nil), out.msgs...), out.entered
}

func raMsg(k MessageKind, from, to int, ts, ref uint64) event {
	return event{kind: evMessage, msg: Message{Kind: k, From: from, To: to, TS: ts, Ref: ref}}
}

func raReply(to int, clock, ref uint64) Message {
	return Message{Kind: KindReply, From: 0, To: to, TS: clock, Ref: ref}
}

// TestRicartStepSendsDeferredReplyOnce defers a request, answers it on the
// release, and then goes round again without a new request from that
// peer: the second release must send nothing, or every contended round
// costs more than 2(n-1) messages. TestRicartDeferredReplySentOnce checks
// the same through a cluster.
func TestRicartStepSendsDeferredReplyOnce(t *testing.T) {
	r := newRicartMachine(t, 0, 2)
	msgs, _ := raStep(r, event{kind: evRequest}) // ts 1
	require.Equal(t, []Message{{Kind: KindRequest, From: 0, To: 1, TS: 1}}, msgs)
	msgs, _ = raStep(r, raMsg(KindRequest, 1, 0, 2, 0)) // younger: deferred
	require.Empty(t, msgs)
	_, entered := raStep(r, raMsg(KindReply, 1, 0, 2, 1))
	require.True(t, entered)
	msgs, _ = raStep(r, event{kind: evRelease})
	require.Equal(t, []Message{raReply(1, 2, 2)}, msgs, "the deferred reply, on release")

	msgs, _ = raStep(r, event{kind: evRequest}) // ts 3
	require.Equal(t, []Message{{Kind: KindRequest, From: 0, To: 1, TS: 3}}, msgs)
	_, entered = raStep(r, raMsg(KindReply, 1, 0, 3, 3))
	require.True(t, entered)
	msgs, _ = raStep(r, event{kind: evRelease})
	assert.Empty(t, msgs, "the reply already went out on the previous release")
}

// TestRicartStep pins how a peer answers a request, and which replies
// count towards its entry.
func TestRicartStep(t *testing.T) {
	t.Run("idle peer replies at once, with its clock raised", func(t *testing.T) {
		r := newRicartMachine(t, 0, 3)
		msgs, _ := raStep(r, raMsg(KindRequest, 1, 0, 5, 0))
		assert.Equal(t, []Message{raReply(1, 5, 5)}, msgs)
		msgs, _ = raStep(r, event{kind: evRequest})
		assert.Equal(t, uint64(6), msgs[0].TS, "a request is younger than any request seen")
	})
	t.Run("older request wins", func(t *testing.T) {
		r := newRicartMachine(t, 0, 3)
		raStep(r, event{kind: evRequest}) // ts 1
		raStep(r, raMsg(KindRequest, 2, 0, 3, 0))
		msgs, _ := raStep(r, raMsg(KindRequest, 1, 0, 1, 0)) // a tie on ts 1: peer 0 wins
		assert.Empty(t, msgs, "peer 0 has priority on a tie with peer 1")
		r2 := newRicartMachine(t, 2, 3)
		raStep(r2, event{kind: evRequest}) // ts 1
		msgs, _ = raStep(r2, raMsg(KindRequest, 1, 2, 1, 0))
		assert.Equal(t, []Message{{Kind: KindReply, From: 2, To: 1, TS: 1, Ref: 1}}, msgs,
			"peer 1 has priority on a tie with peer 2")
		msgs, _ = raStep(r2, raMsg(KindRequest, 0, 2, 0, 0))
		assert.Equal(t, []Message{{Kind: KindReply, From: 2, To: 0, TS: 1, Ref: 0}}, msgs,
			"an older timestamp has priority")
	})
	t.Run("holder defers", func(t *testing.T) {
		r := newRicartMachine(t, 0, 2)
		raStep(r, event{kind: evRequest})
		_, entered := raStep(r, raMsg(KindReply, 1, 0, 1, 1))
		require.True(t, entered)
		msgs, _ := raStep(r, raMsg(KindRequest, 1, 0, 1, 0)) // older, but we hold
		assert.Empty(t, msgs)
		msgs, _ = raStep(r, event{kind: evRelease})
		assert.Equal(t, []Message{raReply(1, 1, 1)}, msgs)
	})
	t.Run("stale, stray and duplicate replies do not count", func(t *testing.T) {
		r := newRicartMachine(t, 0, 3)
		_, entered := raStep(r, raMsg(KindReply, 1, 0, 1, 0))
		assert.False(t, entered, "a reply while idle")
		raStep(r, event{kind: evRequest}) // ts 1
		for _, ev := range []event{
			raMsg(KindReply, 1, 0, 1, 0), // answers an older request
			raMsg(KindReply, 1, 0, 1, 1),
			raMsg(KindReply, 1, 0, 1, 1), // again
			raMsg(KindRelease, 2, 0, 1, 1),
			raMsg(KindToken, 2, 0, 1, 1),
		} {
			_, entered := raStep(r, ev)
			require.False(t, entered, "%+v", ev.msg)
		}
		_, entered = raStep(r, raMsg(KindReply, 2, 0, 1, 1))
		assert.True(t, entered, "both replies are in")
	})
	t.Run("a lone peer enters on its request", func(t *testing.T) {
		r := newRicartMachine(t, 0, 1)
		msgs, entered := raStep(r, event{kind: evRequest})
		assert.Empty(t, msgs)
		assert.True(t, entered)
	})
}

// TestRicartImplicitStep pins the implicit-reply variant: a waiting peer
// that defers a request takes it as that peer's permission, does not
// answer a request of higher priority, and ignores a request older than
// one it has seen from the same peer.
func TestRicartImplicitStep(t *testing.T) {
	r := newRicartMachine(t, 0, 2, WithImplicitReplies())
	raStep(r, event{kind: evRequest}) // ts 1
	msgs, entered := raStep(r, raMsg(KindRequest, 1, 0, 2, 0))
	assert.Empty(t, msgs, "deferred")
	assert.True(t, entered, "the younger request says peer 1 waits for us")
	msgs, _ = raStep(r, event{kind: evRelease})
	require.Equal(t, []Message{raReply(1, 2, 2)}, msgs)

	w := newRicartMachine(t, 1, 2, WithImplicitReplies())
	raStep(w, event{kind: evRequest}) // ts 1
	msgs, entered = raStep(w, raMsg(KindRequest, 0, 1, 1, 0))
	assert.Empty(t, msgs, "our own request tells peer 0 we wait")
	assert.False(t, entered)

	s := newRicartMachine(t, 0, 2, WithImplicitReplies())
	msgs, _ = raStep(s, raMsg(KindRequest, 1, 0, 4, 0))
	require.Len(t, msgs, 1)
	msgs, _ = raStep(s, raMsg(KindRequest, 1, 0, 3, 0))
	assert.Empty(t, msgs, "a request older than one already seen is stale")
	msgs, _ = raStep(s, raMsg(KindRequest, 1, 0, 4, 0))
	assert.Len(t, msgs, 1, "the same request again is not stale")
}

// TestRicartCloneAndState checks that a clone shares nothing with its
// original and that the encoding tells apart states that behave
// differently.
func TestRicartCloneAndState(t *testing.T) {
	r := newRicartMachine(t, 0, 3, WithImplicitReplies())
	raStep(r, event{kind: evRequest})
	c := r.clone().(*ricart)
	require.Equal(t, r.appendState(nil), c.appendState(nil))
	raStep(c, raMsg(KindReply, 1, 0, 1, 1))
	raStep(c, raMsg(KindRequest, 2, 0, 4, 0))
	assert.Equal(t, []bool{false, false, false}, r.granted, "a clone shares no granted with its original")
	assert.Equal(t, []uint64{0, 0, 0}, r.deferred, "nor deferred")
	assert.Equal(t, []uint64{0, 0, 0}, r.seen, "nor seen")
	assert.Equal(t, 0, r.ngranted)

	base := func() *ricart { return newRicartMachine(t, 0, 3, WithImplicitReplies()) }
	changes := map[string]func(r *ricart){
		"clock":    func(r *ricart) { r.clock = 7 },
		"state":    func(r *ricart) { r.state = raWanted },
		"ts":       func(r *ricart) { r.ts = 7 },
		"granted":  func(r *ricart) { r.granted[1] = true },
		"deferred": func(r *ricart) { r.deferred[1] = 7 },
		"seen":     func(r *ricart) { r.seen[1] = 7 },
		"trying":   func(r *ricart) { r.trying = true },
	}
	for name, change := range changes {
		d := base()
		change(d)
		assert.NotEqual(t, base().appendState(nil), d.appendState(nil), name)
	}
	// With WithRecovery, whom the detector suspects: it excuses their
	// replies.
	recovering := func() *ricart {
		m, err := newRicart(0, 3, &config{recovery: true})
		require.NoError(t, err)
		return m.(*ricart)
	}
	d := recovering()
	d.suspected[1] = true
	assert.NotEqual(t, recovering().appendState(nil), d.appendState(nil), "suspected")
}

// TestRicartDescribeHeld checks that a peer inside shows as held, not as
// still waiting: check moves the state on when it enters.
func TestRicartDescribeHeld(t *testing.T) {
	r := newRicartMachine(t, 0, 2)
	raStep(r, event{kind: evRequest})
	assert.Contains(t, r.describe(), StateField{"state", "wanted"})
	_, entered := raStep(r, raMsg(KindReply, 1, 0, 1, 1))
	require.True(t, entered)
	assert.Contains(t, r.describe(), StateField{"state", "held"})
}

// TestRicartTryStep pins the try path at one peer: only the busy that
// answers the try outstanding refuses it, and a try is answered
// explicitly, even by a peer whose own request would otherwise be its
// implicit reply.
func TestRicartTryStep(t *testing.T) {
	t.Run("a busy for an earlier try does not refuse a later one", func(t *testing.T) {
		r := newRicartMachine(t, 0, 3)
		raStep(r, event{kind: evTry})
		first := r.ts
		var out output
		r.step(raMsg(KindBusy, 1, 0, 2, first), &out)
		require.True(t, out.refused)
		raStep(r, event{kind: evTry})
		// Peer 2's busy for the first try, sent before the second reached it.
		out = output{}
		r.step(raMsg(KindBusy, 2, 0, 2, first), &out)
		assert.False(t, out.refused, "a stale busy")
		raStep(r, raMsg(KindReply, 1, 0, 4, r.ts))
		_, entered := raStep(r, raMsg(KindReply, 2, 0, 4, r.ts))
		assert.True(t, entered, "the second try has both its replies")
	})
	t.Run("a try is answered explicitly with implicit replies", func(t *testing.T) {
		r := newRicartMachine(t, 1, 2, WithImplicitReplies())
		raStep(r, event{kind: evRequest}) // ts 1
		msgs, _ := raStep(r, raMsg(KindTry, 0, 1, 1, 0))
		assert.Equal(t, []Message{{Kind: KindReply, From: 1, To: 0, TS: 1, Ref: 1}}, msgs,
			"peer 0's try goes first, and our request is no permission for a try")
	})
}

// TestRicartIdleViolation pins what a peer at rest must not keep: a
// request, waiting or inside, or a deferred reply.
func TestRicartIdleViolation(t *testing.T) {
	r := newRicartMachine(t, 0, 2)
	assert.Empty(t, r.idleViolation())
	raStep(r, event{kind: evRequest})
	assert.Equal(t, "keeps state 1 (trying false)", r.idleViolation(), "waiting")
	raStep(r, raMsg(KindReply, 1, 0, 2, r.ts))
	assert.Equal(t, "keeps state 2 (trying false)", r.idleViolation(), "inside")
	raStep(r, raMsg(KindRequest, 1, 0, 3, 0))
	raStep(r, event{kind: evRelease})
	assert.Empty(t, r.idleViolation(), "left, the deferred reply sent")

	r = newRicartMachine(t, 0, 2)
	raStep(r, event{kind: evTry})
	assert.Equal(t, "keeps state 1 (trying true)", r.idleViolation(), "trying")
	r.deferred[1], r.state, r.trying = 4, raReleased, false
	assert.Equal(t, "keeps deferred replies [0 4]", r.idleViolation())
}
