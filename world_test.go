package dmutex

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWorldDescribe: every machine describes its state for people.
func TestWorldDescribe(t *testing.T) {
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			w, err := NewWorld(a, 3, WorldConfig{Requests: 1})
			require.NoError(t, err)
			for p := range 3 {
				require.Implements(t, (*describer)(nil), w.ms[p])
				fs := w.Describe(p)
				require.NotEmpty(t, fs)
				for _, f := range fs {
					assert.NotEmpty(t, f.Name)
					assert.NotEmpty(t, f.Value)
				}
			}
			// The description follows the state.
			before := w.String()
			_, err = w.Apply(w.Transitions()[0])
			require.NoError(t, err)
			assert.NotEqual(t, before, w.String())
		})
	}
}

// TestWorldTransitionsApplyClone drives a world by hand: the transitions
// on offer, their IDs and strings, a clone that goes its own way, and a
// refused transition.
func TestWorldTransitionsApplyClone(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 2, WorldConfig{Requests: 1})
	require.NoError(t, err)
	trs := w.Transitions()
	require.Len(t, trs, 2)
	assert.Equal(t, "r0", trs[0].ID())
	assert.Equal(t, "P0 requests", trs[0].String())

	st, err := w.Apply(trs[0])
	require.NoError(t, err)
	assert.Equal(t, -1, st.Entered)
	require.Len(t, st.Events, 2) // request, send
	assert.Equal(t, EventSend, st.Events[1].Kind)

	c := w.Clone()
	d, ok := w.Find("d1")
	require.True(t, ok)
	assert.Equal(t, "P1 receives request P0->P1 ts=1", d.String())
	st, err = w.Apply(d) // P1 replies
	require.NoError(t, err)
	assert.Equal(t, "P1 receives request P0->P1 ts=1", st.String())
	assert.Len(t, w.Messages(), 1)
	assert.Equal(t, KindReply, w.Messages()[0].Msg.Kind)

	// The clone still has the request in flight, and can take another way.
	require.Len(t, c.Messages(), 1)
	assert.Equal(t, KindRequest, c.Messages()[0].Msg.Kind)
	_, err = c.Apply(Transition{Kind: TransRequest, Peer: 1})
	require.NoError(t, err)
	assert.Len(t, c.Messages(), 2)
	assert.Len(t, w.Messages(), 1, "the original is untouched")
	assert.True(t, c.Peer(1).Waiting)
	assert.False(t, w.Peer(1).Waiting)

	_, err = w.Apply(Transition{Kind: TransLeave, Peer: 0})
	require.ErrorIs(t, err, ErrInvalidConfig, "P0 is not inside")
	_, err = w.Apply(Transition{Kind: TransDeliver, Peer: 1, Seq: 99, Msg: Message{From: 0, To: 1}})
	require.ErrorIs(t, err, ErrInvalidConfig)

	st, err = w.Apply(w.Transitions()[len(w.Transitions())-1]) // the reply
	require.NoError(t, err)
	assert.Equal(t, 0, st.Entered)
	assert.Contains(t, st.String(), ", enters")
	assert.True(t, w.Peer(0).Inside)
	var b bytes.Buffer
	require.NoError(t, w.WriteLog(&b))
	assert.Contains(t, b.String(), "P0 enter")
}

// TestWorldReplayByIDs: the same IDs from the same start give the same
// world, so an explorer can keep a run as a list of IDs.
func TestWorldReplayByIDs(t *testing.T) {
	w, err := NewWorld(SuzukiKasami, 3, WorldConfig{Requests: 2, Network: NetworkUnordered})
	require.NoError(t, err)
	var ids []string
	for i := 0; i < 40; i++ {
		trs := w.Transitions()
		if len(trs) == 0 {
			break
		}
		tr := trs[(i*7)%len(trs)]
		ids = append(ids, tr.ID())
		_, err := w.Apply(tr)
		require.NoError(t, err)
	}
	r, err := NewWorld(SuzukiKasami, 3, WorldConfig{Requests: 2, Network: NetworkUnordered})
	require.NoError(t, err)
	for _, id := range ids {
		tr, ok := r.Find(id)
		require.True(t, ok, id)
		_, err := r.Apply(tr)
		require.NoError(t, err)
	}
	assert.Equal(t, w.String(), r.String())
	assert.Equal(t, w.Events(), r.Events())
}

func TestWorldBadInput(t *testing.T) {
	_, err := NewWorld(Lamport, 3, WorldConfig{Requests: -2})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "WorldConfig.Requests -2")
	_, err = NewWorld(Lamport, 3, WorldConfig{Tries: -2})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "WorldConfig.Tries -2")
	bw, err := NewWorld(Lamport, 3, WorldConfig{Requests: 2, Tries: Unlimited})
	require.NoError(t, err)
	assert.Equal(t, 2, bw.Peer(1).Budget, "Requests sets the request budget")
	assert.Equal(t, Unlimited, bw.Peer(1).Tries, "Tries sets the try budget")
	_, err = NewWorld(Lamport, 3, WorldConfig{Network: NetworkUnordered + 1})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewWorld(Lamport, 3, WorldConfig{Loss: 2})
	require.ErrorIs(t, err, ErrInvalidConfig)
	uw, err := NewWorld(Lamport, 3, WorldConfig{Network: NetworkUnordered})
	require.NoError(t, err, "an unordered network for any algorithm, as in Check")
	assert.False(t, uw.FIFO())
	w, err := NewWorld(Lamport, 3, WorldConfig{})
	require.NoError(t, err)
	require.ErrorIs(t, w.Request(3), ErrInvalidConfig)
	assert.Empty(t, w.Transitions(), "no requests to make, nothing in flight")
}

// TestStateEncodingIsFaithful checks the promise the checker rests on:
// two worlds with equal encodings behave the same. It walks small spaces
// of every algorithm, keeps the first world seen per encoding, and when
// another world encodes the same, requires the same transitions (serial
// numbers aside) and, for each, the same entry and equal encodings after.
func TestStateEncodingIsFaithful(t *testing.T) {
	t.Parallel() // computation on the test's goroutine only: beside the other parallel tests at the end
	type config struct {
		name string
		alg  Algorithm
		cfg  WorldConfig
		opts []Option
	}
	var cs []config
	for _, a := range Algorithms() {
		cs = append(cs, config{a.String(), a, WorldConfig{}, nil})
		if !a.NeedsFIFO() {
			cs = append(cs, config{a.String() + "/unordered", a, WorldConfig{Network: NetworkUnordered}, nil})
		}
	}
	cs = append(cs,
		config{"ricart-agrawala-implicit/unordered", RicartAgrawala, WorldConfig{Network: NetworkUnordered}, []Option{WithImplicitReplies()}},
		config{"maekawa/cycle", Maekawa, WorldConfig{}, []Option{WithVotingSets([][]int{{0, 1}, {1, 2}, {0, 2}})}},
		// Lamport's encoding keeps only a bit of each last stamp heard,
		// and none while a try waits.
		config{"lamport/tries", Lamport, WorldConfig{Tries: 1}, nil})
	var scratch [][]byte
	var sbuf []byte
	enc := func(w *World) string { return string(w.appendState(nil, &scratch, &sbuf, new(stampMap))) }
	same := func(a, b Transition) bool {
		return a.Kind == b.Kind && a.Peer == b.Peer && sameMessage(a.Msg, b.Msg)
	}
	for _, c := range cs {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Requests, cfg.NoTrace = 2, true
			start, err := NewWorld(c.alg, 3, cfg, c.opts...)
			require.NoError(t, err)
			seen := map[string]*World{enc(start): start}
			queue := []*World{start}
			compared := 0
			limit := 3000
			if raceLight() {
				limit = 500
			}
			for len(queue) > 0 && len(seen) < limit {
				w := queue[0]
				queue = queue[1:]
				for _, tr := range w.Transitions() {
					next := w.Clone()
					_, err := next.Apply(tr)
					require.NoError(t, err)
					k := enc(next)
					old, ok := seen[k]
					if !ok {
						seen[k] = next
						queue = append(queue, next)
						continue
					}
					compared++
					a, b := old.Transitions(), next.Transitions()
					require.Equal(t, len(a), len(b), "equal encodings, different transitions:\n%v\n%v", old, next)
					for _, ta := range a {
						var tb Transition
						found := false
						for _, x := range b {
							if same(x, ta) {
								tb, found = x, true
							}
						}
						require.True(t, found, "equal encodings, %v only in one:\n%v\n%v", ta, old, next)
						ca, cb := old.Clone(), next.Clone()
						sa, ea := ca.Apply(ta)
						sb, eb := cb.Apply(tb)
						require.Equal(t, ea == nil, eb == nil)
						require.Equal(t, sa.Entered, sb.Entered)
						require.Equal(t, enc(ca), enc(cb), "equal encodings, %v leads apart:\n%v\n%v", ta, old, next)
					}
				}
			}
			assert.Positive(t, compared, "no state was reached twice")
			t.Logf("%d states, %d revisits compared", len(seen), compared)
		})
	}
}

func TestPeerStatusState(t *testing.T) {
	for want, ps := range map[string]PeerStatus{
		"idle":    {},
		"waiting": {Waiting: true},
		"inside":  {Inside: true, Waiting: true},
		"crashed": {Crashed: true, Inside: true},
	} {
		if got := ps.State(); got != want {
			t.Errorf("%+v.State() = %q, want %q", ps, got, want)
		}
	}
}

// TestWorldPendingCountsQueuedCallers: PeerStatus.Pending counts the
// local callers queued behind the one whose request is out, and, while
// the peer is inside, those behind the holder.
func TestWorldPendingCountsQueuedCallers(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 2, WorldConfig{})
	require.NoError(t, err)
	for want := range 3 {
		require.NoError(t, w.Request(0))
		assert.Equal(t, want, w.Peer(0).Pending, "after %d calls", want+1)
		assert.True(t, w.Peer(0).Waiting)
	}
	for len(w.Messages()) > 0 {
		_, err := w.Apply(w.Transitions()[0])
		require.NoError(t, err)
	}
	require.True(t, w.Peer(0).Inside)
	assert.Equal(t, 2, w.Peer(0).Pending, "two callers behind the holder")
	tr, ok := w.Find("l0")
	require.True(t, ok, "P0 may leave in\n%v", w)
	_, err = w.Apply(tr)
	require.NoError(t, err)
	assert.Equal(t, 1, w.Peer(0).Pending, "the next caller's request is out, one behind it")

	// A caller that gives up leaves its request out, with nobody behind it.
	w, err = NewWorld(RicartAgrawala, 2, WorldConfig{})
	require.NoError(t, err)
	require.NoError(t, w.Request(0))
	require.NoError(t, w.Cancel(0))
	assert.Equal(t, 0, w.Peer(0).Pending, "a request out for nobody")
}

// TestWorldTryInAMinorityRefused: with recovery, a peer that suspects
// more than (n-1)/2 others makes no try: Try answers ErrLocked and the
// machine sends nothing, as a Lock caller's request waits (driver.try).
func TestWorldTryInAMinorityRefused(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 3, WorldConfig{}, WithRecovery())
	require.NoError(t, err)
	w.f.detector, w.f.falseLeft = DetectorImperfect, 2
	for _, j := range []int{1, 2} {
		_, err := w.Suspect(0, j)
		require.NoError(t, err)
	}
	sent := w.Stats().Messages
	require.ErrorIs(t, w.Try(0), ErrLocked)
	assert.Equal(t, sent, w.Stats().Messages)
	assert.False(t, w.Peer(0).Trying)
}

// TestWorldCancelBehindATry: the caller queued behind an outstanding try
// gives up; the try's caller still gets the critical section.
func TestWorldCancelBehindATry(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 2, WorldConfig{})
	require.NoError(t, err)
	require.NoError(t, w.Try(0))
	require.NoError(t, w.Request(0))
	require.NoError(t, w.Cancel(0))
	for len(w.Messages()) > 0 {
		_, err := w.Apply(w.Transitions()[0])
		require.NoError(t, err)
	}
	assert.True(t, w.Peer(0).Inside, "the try's caller is inside:\n%v", w)
	assert.Zero(t, w.Peer(0).Pending)
}

// TestWorldNoRecoveryNoMinority: without WithRecovery a peer that
// suspects every other still sends its request: the majority rule holds
// back only peers whose machines act on suspicions.
func TestWorldNoRecoveryNoMinority(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 3, WorldConfig{})
	require.NoError(t, err)
	w.f.detector, w.f.falseLeft = DetectorImperfect, 2
	for _, j := range []int{1, 2} {
		_, err := w.Suspect(0, j)
		require.NoError(t, err)
	}
	sent := w.Stats().Messages
	require.NoError(t, w.Request(0))
	assert.Equal(t, sent+2, w.Stats().Messages, "the request goes to both others")
}

// deliverAll delivers every message in flight, first come first, until
// none is left, and fails the test if that takes more than limit
// deliveries.
func deliverAll(t *testing.T, w *World, limit int) {
	t.Helper()
	for range limit {
		var next *Transition
		for _, tr := range w.Transitions() {
			if tr.Kind == TransDeliver {
				next = &tr
				break
			}
		}
		if next == nil {
			return
		}
		_, err := w.Apply(*next)
		require.NoError(t, err)
	}
	t.Fatalf("still delivering after %d messages:\n%v", limit, w)
}

// TestWorldRefusedTryAfterALockCallerGaveUp: a caller of Lock queues
// behind an outstanding try and gives up; the try is then refused. Its
// caller is told, and no request goes out for the caller that left.
func TestWorldRefusedTryAfterALockCallerGaveUp(t *testing.T) {
	w, err := NewWorld(Centralized, 2, WorldConfig{})
	require.NoError(t, err)
	require.NoError(t, w.Request(0))
	deliverAll(t, w, 10)
	require.True(t, w.Peer(0).Inside, "P0 holds the coordinator's grant:\n%v", w)
	require.NoError(t, w.Try(1))
	require.NoError(t, w.Request(1))
	require.NoError(t, w.Cancel(1))
	sent := w.Stats().Messages
	deliverAll(t, w, 10)
	p1 := w.Peer(1)
	assert.False(t, p1.Waiting, "the try was refused and nothing else is asked for:\n%v", w)
	assert.Zero(t, p1.Pending)
	assert.Equal(t, sent+1, w.Stats().Messages, "the coordinator's refusal is the only message:\n%v", w)
}

// TestWorldMinorityEntryKeepsItsEpoch: a peer whose request went out
// before it fell into a minority may still enter, with every other
// peer's permission; the suspicion it was told of before is taken back,
// so its fence is the next one of its epoch, not the first of a new one.
func TestWorldMinorityEntryKeepsItsEpoch(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 3, WorldConfig{}, WithRecovery())
	require.NoError(t, err)
	for i := range w.peers {
		w.peers[i].d.fenced = true
	}
	w.f.detector, w.f.falseLeft = DetectorImperfect, 2
	require.NoError(t, w.Request(0))
	for _, j := range []int{1, 2} {
		_, err := w.Suspect(0, j)
		require.NoError(t, err)
	}
	deliverAll(t, w, 20)
	require.True(t, w.Peer(0).Inside, "P0 enters with both replies:\n%v", w)
	f := w.peers[0].d.holdFence
	assert.Less(t, f, uint64(FenceEpoch), "fence %s: no new epoch for an entry with everyone's permission", formatFence(f))
	assert.NotZero(t, f)
}

// TestWorldNaiveVariantActsOnEverySuspicion: without WithRecovery there
// is no majority rule, and a textbook naive recovery acts on every
// suspicion it is told of: P0, suspecting both others, enters alone.
func TestWorldNaiveVariantActsOnEverySuspicion(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 3, WorldConfig{Variant: "ricart-agrawala-naive-exclusion"})
	require.NoError(t, err)
	w.f.detector, w.f.falseLeft = DetectorImperfect, 2
	require.NoError(t, w.Request(0))
	for _, j := range []int{1, 2} {
		_, err := w.Suspect(0, j)
		require.NoError(t, err)
	}
	assert.True(t, w.Peer(0).Inside, "the naive exclusion lets P0 in without the peers it suspects:\n%v", w)
}

// TestWorldWaitingAfterEveryCallerGaveUp: a peer whose every caller gave
// up still waits while its machine's request is out (the entry that
// answers it is left at once), and a caller held back in a minority
// waits with no request out; liveness asks that both be served.
func TestWorldWaitingAfterEveryCallerGaveUp(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 2, WorldConfig{})
	require.NoError(t, err)
	require.NoError(t, w.Request(0))
	require.NoError(t, w.Cancel(0))
	assert.True(t, w.Peer(0).Waiting, "the request is still out:\n%v", w)
	deliverAll(t, w, 10)
	assert.Equal(t, PeerStatus{}, w.Peer(0), "the entry was left at once:\n%v", w)

	// A holder with a caller queued behind it is inside, not waiting.
	require.NoError(t, w.Request(0))
	deliverAll(t, w, 10)
	require.NoError(t, w.Request(0))
	assert.Equal(t, PeerStatus{Inside: true, Pending: 1}, w.Peer(0), "%v", w)

	w, err = NewWorld(RicartAgrawala, 3, WorldConfig{}, WithRecovery())
	require.NoError(t, err)
	w.f.detector, w.f.falseLeft = DetectorImperfect, 2
	for _, j := range []int{1, 2} {
		_, err := w.Suspect(0, j)
		require.NoError(t, err)
	}
	require.NoError(t, w.Request(0))
	require.Empty(t, w.Messages(), "a minority sends no request")
	assert.True(t, w.Peer(0).Waiting, "its caller waits all the same:\n%v", w)
}

// TestWorldWithoutTheStoreStampsNoFence: a World keeps fences only with
// the fenced store; without it, a fence floor given to its peers is not
// stamped on their messages, which then differ only where the algorithm
// makes them differ.
func TestWorldWithoutTheStoreStampsNoFence(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 2, WorldConfig{}, WithFenceFloor(5))
	require.NoError(t, err)
	require.NoError(t, w.Request(0))
	require.NotEmpty(t, w.Messages())
	for _, m := range w.Messages() {
		assert.Zero(t, m.Msg.Fence, "%v", m.Msg)
	}
	deliverAll(t, w, 10)
	require.True(t, w.Peer(0).Inside)
	assert.Zero(t, w.peers[0].d.holdFence, "nor takes one")
}
