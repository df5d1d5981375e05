package dmutex

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rogue is Ricart-Agrawala with a step that breaks the machine contract
// on events of one kind: it also enters, refuses a try, or sends a
// message to itself. The driver and the World must catch each.
type rogue struct {
	*ricart
	on                  eventKind
	enter, refuse, self bool
}

func (r *rogue) step(ev event, out *output) {
	r.ricart.step(ev, out)
	if ev.kind != r.on {
		return
	}
	out.entered = out.entered || r.enter
	out.refused = out.refused || r.refuse
	if r.self {
		out.send(Message{Kind: KindRequest, From: r.id, To: r.id})
	}
}

func (r *rogue) clone() machine {
	c := *r
	c.ricart = r.ricart.clone().(*ricart)
	return &c
}

// install puts m in place of peer p's machine.
func install(w *World, p int, m machine) {
	w.ms[p], w.own[p] = m, true
}

// rogueWorld is Ricart-Agrawala with two peers, peer 0's machine the rogue
// r (its ricart filled in).
func rogueWorld(t *testing.T, r *rogue) *World {
	t.Helper()
	w, err := NewWorld(RicartAgrawala, 2, WorldConfig{})
	require.NoError(t, err)
	r.ricart = w.ms[0].(*ricart)
	install(w, 0, r)
	return w
}

// deliverFirst delivers the first message in flight, which there must
// be, and returns Apply's error.
func deliverFirst(t *testing.T, w *World) error {
	t.Helper()
	for _, tr := range w.Transitions() {
		if tr.Kind == TransDeliver {
			_, err := w.Apply(tr)
			return err
		}
	}
	t.Fatalf("nothing in flight:\n%v", w)
	return nil
}

// TestDriverCatchesBrokenContracts: a machine that enters on leaving,
// enters while inside, enters without a request, refuses a try it never
// made, or sends a malformed message is a violation of the World, named,
// and Request and Try report one that their own step causes.
func TestDriverCatchesBrokenContracts(t *testing.T) {
	t.Run("entered on leaving", func(t *testing.T) {
		r := &rogue{}
		w := rogueWorld(t, r)
		require.NoError(t, w.Request(0))
		deliverAll(t, w, 10)
		require.True(t, w.Peer(0).Inside)
		r.on, r.enter = evRelease, true
		st, err := w.Apply(Transition{Kind: TransLeave, Peer: 0})
		require.ErrorIs(t, err, ErrViolation)
		assert.ErrorContains(t, err, "peer 0 entered on leaving")
		assert.Equal(t, 0, st.Entered, "the step says who entered")
	})
	t.Run("entered while inside", func(t *testing.T) {
		r := &rogue{}
		w := rogueWorld(t, r)
		require.NoError(t, w.Request(0))
		deliverAll(t, w, 10)
		r.on, r.enter = evMessage, true
		require.NoError(t, w.Request(1))
		require.ErrorIs(t, deliverFirst(t, w), ErrViolation)
		assert.ErrorContains(t, w.Err(), "peer 0 entered while already inside")
	})
	t.Run("entered without a request", func(t *testing.T) {
		w := rogueWorld(t, &rogue{on: evMessage, enter: true})
		require.NoError(t, w.Request(1))
		require.ErrorIs(t, deliverFirst(t, w), ErrViolation)
		assert.ErrorContains(t, w.Err(), "peer 0 entered without a request")
	})
	t.Run("refused a try it did not make", func(t *testing.T) {
		w := rogueWorld(t, &rogue{on: evMessage, refuse: true})
		require.NoError(t, w.Request(1))
		i := slices.IndexFunc(w.Transitions(), func(t Transition) bool { return t.Kind == TransDeliver })
		st, err := w.Apply(w.Transitions()[i])
		require.ErrorIs(t, err, ErrViolation)
		assert.Equal(t, -1, st.Entered, "nobody entered")
		assert.ErrorContains(t, w.Err(), "peer 0 refused a try it did not make")
	})
	t.Run("Request reports its step's violation", func(t *testing.T) {
		w := rogueWorld(t, &rogue{on: evRequest, self: true})
		err := w.Request(0)
		require.ErrorIs(t, err, ErrViolation)
		assert.ErrorContains(t, err, "peer 0 sent a malformed message")
		assert.ErrorIs(t, w.Request(1), ErrViolation, "and every later call")
	})
	t.Run("Try reports its step's violation", func(t *testing.T) {
		w := rogueWorld(t, &rogue{on: evTry, self: true})
		err := w.Try(0)
		require.ErrorIs(t, err, ErrViolation)
		assert.ErrorContains(t, err, "peer 0 sent a malformed message")
	})
}

// phantom is a Suzuki-Kasami machine that claims a token it does not
// hold: a second token, which the World's token check must find after
// the local call that made it.
type phantom struct{ *suzukiKasami }

func (p *phantom) hasToken() bool { return true }

func (p *phantom) clone() machine { return &phantom{p.suzukiKasami.clone().(*suzukiKasami)} }

// TestWorldLocalCallsCheckTokens: Request and Try check the one-token
// promise after the machine's step, as a transition does.
func TestWorldLocalCallsCheckTokens(t *testing.T) {
	for _, try := range []bool{false, true} {
		w, err := NewWorld(SuzukiKasami, 3, WorldConfig{})
		require.NoError(t, err)
		install(w, 1, &phantom{w.ms[1].(*suzukiKasami)})
		call := w.Request
		if try {
			call = w.Try
		}
		err = call(1)
		require.ErrorIs(t, err, ErrViolation, "try %v", try)
		assert.ErrorContains(t, err, "2 tokens held")
	}
}

// TestWorldLocalCallsRefuseBadPeers: Request, Try and Cancel name a peer
// out of range, a crashed peer and a peer where nobody waits, change
// nothing, and after a violation return it.
func TestWorldLocalCallsRefuseBadPeers(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 2, WorldConfig{})
	require.NoError(t, err)
	for _, call := range []func(int) error{w.Request, w.Try, w.Cancel} {
		for _, p := range []int{-1, 2} {
			err := call(p)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.ErrorContains(t, err, "out of range")
		}
	}
	err = w.Cancel(0)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.ErrorContains(t, err, "cancel at peer 0, where nobody waits")
	assert.Equal(t, PeerStatus{}, w.Peer(0))

	require.NoError(t, w.Crash(1))
	for _, call := range []func(int) error{w.Request, w.Try, w.Cancel} {
		err := call(1)
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.ErrorContains(t, err, "peer 1, which has crashed")
	}
	assert.Empty(t, w.Messages())

	w = rogueWorld(t, &rogue{on: evRequest, self: true})
	require.Error(t, w.Request(0))
	for _, call := range []func(int) error{w.Request, w.Try, w.Cancel} {
		assert.ErrorIs(t, call(1), ErrViolation, "a world that broke stays broken")
	}
}

// TestWorldTraceNamesLocalCalls: the trace tells a request from a try,
// and records a caller that gave up.
func TestWorldTraceNamesLocalCalls(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 2, WorldConfig{})
	require.NoError(t, err)
	require.NoError(t, w.Try(0))
	require.NoError(t, w.Request(1))
	require.NoError(t, w.Cancel(1))
	var kinds []EventKind
	for _, e := range w.Events() {
		if e.Kind != EventSend {
			kinds = append(kinds, e.Kind)
		}
	}
	assert.Equal(t, []EventKind{EventTry, EventRequest, EventCancel}, kinds)
}

// TestWorldEntryWithNobodyWaiting: a machine that lets its peer in after
// every caller gave up makes an entry all the same: the World records it
// and checks it as any other (it could overlap another), and the peer
// leaves at once; no caller counts it.
func TestWorldEntryWithNobodyWaiting(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 2, WorldConfig{})
	require.NoError(t, err)
	require.NoError(t, w.Request(0))
	require.NoError(t, w.Cancel(0))
	deliverAll(t, w, 10)
	var kinds []EventKind
	for _, e := range w.Events() {
		if e.Kind == EventEnter || e.Kind == EventLeave {
			kinds = append(kinds, e.Kind)
		}
	}
	assert.Equal(t, []EventKind{EventEnter, EventLeave}, kinds)
	assert.Equal(t, PeerStatus{}, w.Peer(0))
	assert.Zero(t, w.Stats().Entries, "an entry nobody waited for is not counted")
}

// TestWorldDropsBigOutputs: after a broadcast to many peers the World
// keeps no buffer of that size between steps; a small one it keeps, so
// small clusters step without allocating.
func TestWorldDropsBigOutputs(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 100, WorldConfig{})
	require.NoError(t, err)
	require.NoError(t, w.Request(0))
	assert.Len(t, w.Messages(), 99)
	assert.Nil(t, w.out.msgs, "a buffer of %d messages is dropped", cap(w.out.msgs))

	w, err = NewWorld(RicartAgrawala, 10, WorldConfig{})
	require.NoError(t, err)
	require.NoError(t, w.Request(0))
	assert.GreaterOrEqual(t, cap(w.out.msgs), 9, "a buffer for 9 messages is kept")
}

// restless is Ricart-Agrawala that breaks a promise for a cluster at rest
// once it has stepped: the World must check the rest again after steps.
type restless struct {
	*ricart
	stepped bool
}

func (r *restless) step(ev event, out *output) {
	r.stepped = true
	r.ricart.step(ev, out)
}

func (r *restless) clone() machine { c := *r; c.ricart = r.ricart.clone().(*ricart); return &c }

func (r *restless) idleViolation() string {
	if r.stepped {
		return "is restless"
	}
	return ""
}

// TestWorldChecksEachRest: CheckAtRest checks a world at rest once, and
// again once a machine has stepped since.
func TestWorldChecksEachRest(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 2, WorldConfig{})
	require.NoError(t, err)
	install(w, 0, &restless{ricart: w.ms[0].(*ricart)})
	require.NoError(t, w.CheckAtRest())
	require.NoError(t, w.Request(1))
	deliverAll(t, w, 10)
	_, err = w.Apply(Transition{Kind: TransLeave, Peer: 1})
	require.NoError(t, err)
	deliverAll(t, w, 10)
	err = w.CheckAtRest()
	require.ErrorIs(t, err, ErrViolation)
	assert.ErrorContains(t, err, "at rest, peer 0 is restless")
}

// TestWorldFencesEndAtMaxFence: fences never pass MaxFence. With
// WithRecovery each peer takes fences of its own class (id mod n): from
// MaxFence-1, peer 1 (whose class MaxFence is in) takes MaxFence, the
// last; peer 0's next is past the end, so its hold has none, its fence
// stops at MaxFence, and no later hold of anyone's has one.
func TestWorldFencesEndAtMaxFence(t *testing.T) {
	world := func() *World {
		w, err := NewWorld(RicartAgrawala, 2, WorldConfig{}, WithRecovery())
		require.NoError(t, err)
		for i := range w.peers {
			w.peers[i].d.fenced = true
			w.peers[i].d.fence = MaxFence - 1
		}
		return w
	}
	holdOf := func(w *World, p int) uint64 {
		t.Helper()
		require.NoError(t, w.Request(p))
		deliverAll(t, w, 10)
		require.True(t, w.Peer(p).Inside, "%v", w)
		f := w.peers[p].d.holdFence
		_, err := w.Apply(Transition{Kind: TransLeave, Peer: p})
		require.NoError(t, err)
		deliverAll(t, w, 10)
		return f
	}
	w := world()
	assert.Equal(t, uint64(MaxFence), holdOf(w, 1), "the last fence, in peer 1's class")
	assert.Zero(t, holdOf(w, 0), "after it, none")

	w = world()
	assert.Zero(t, holdOf(w, 0), "peer 0's class has no fence left")
	assert.Equal(t, uint64(MaxFence), w.peers[0].d.fence, "and its fence stops at the end")
	assert.Zero(t, holdOf(w, 1), "so no later hold of anyone's has one")
}

// TestWorldNoFenceAfterTheLast: once a peer's fence is MaxFence its holds
// have none, even where the machine names MaxFence again (Suzuki-Kasami's
// token in its last epoch does).
func TestWorldNoFenceAfterTheLast(t *testing.T) {
	w, err := NewWorld(SuzukiKasami, 2, WorldConfig{}, WithRecovery())
	require.NoError(t, err)
	for i := range w.peers {
		w.peers[i].d.fenced = true
		w.peers[i].d.fence = MaxFence
		w.ms[i].(*suzukiKasami).epoch = MaxFence / FenceEpoch
	}
	for _, p := range []int{1, 0, 1} {
		require.NoError(t, w.Request(p))
		deliverAll(t, w, 10)
		require.True(t, w.Peer(p).Inside, "%v", w)
		assert.Zero(t, w.peers[p].d.holdFence, "peer %d", p)
		_, err := w.Apply(Transition{Kind: TransLeave, Peer: p})
		require.NoError(t, err)
		deliverAll(t, w, 10)
	}
}

// TestWorldRefusalIsAStep: the delivery that refuses a try says so in its
// StepResult, is recorded in the trace, and counts as progress (as an
// entry does) for the livelock count that Idle returns.
func TestWorldRefusalIsAStep(t *testing.T) {
	w, err := NewWorld(Centralized, 2, WorldConfig{})
	require.NoError(t, err)
	require.NoError(t, w.Request(0))
	deliverAll(t, w, 10)
	require.True(t, w.Peer(0).Inside)
	require.NoError(t, w.Try(1))
	var last StepResult
	for len(w.Messages()) > 0 {
		require.False(t, last.Refused, "only the last delivery refuses")
		tr := w.Transitions()
		i := slices.IndexFunc(tr, func(t Transition) bool { return t.Kind == TransDeliver })
		require.GreaterOrEqual(t, i, 0)
		last, err = w.Apply(tr[i])
		require.NoError(t, err)
	}
	assert.True(t, last.Refused, "%v", last)
	assert.Zero(t, w.Idle(), "a refusal is progress")
	var refused int
	for _, e := range w.Events() {
		if e.Kind == EventRefused {
			refused++
			assert.Equal(t, 1, e.Peer)
		}
	}
	assert.Equal(t, 1, refused)
}

// TestDriverEncodingSeesEveryField fails when a field of the driver is
// neither in its state encoding (appendState) nor in the list of what the
// encoding leaves out on purpose: a field left out by mistake would let
// the checker merge states that behave differently.
func TestDriverEncodingSeesEveryField(t *testing.T) {
	leftOut := map[string]string{
		"id":       "the same in every state of a peer",
		"n":        "the same in every state of a World",
		"recovery": "a World's configuration, the same in every state",
		"suspects": "the World's detector encodes whom each peer suspects",
		"entries":  "a count for Stats: no step reads it",
	}
	fencesOnly := map[string]bool{"fence": true, "holdFence": true, "epochDue": true}
	base := driver{id: 1, n: 3, waiting: 1, fenced: true, fence: 7, holdFence: 5}
	typ := reflect.TypeFor[driver]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		changed := base
		f := reflect.ValueOf(&changed).Elem().Field(i)
		f = reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem() // unexported: set it all the same
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Int:
			f.SetInt(f.Int() + 1)
		case reflect.Uint64:
			f.SetUint(f.Uint() + 1)
		default:
			t.Fatalf("driver.%s: a field of kind %s; teach this test to change it", name, f.Kind())
		}
		seen := !bytes.Equal(base.appendState(nil), changed.appendState(nil))
		if why, ok := leftOut[name]; ok {
			assert.False(t, seen, "driver.%s is left out of the encoding (%s), but it is in it", name, why)
			continue
		}
		assert.True(t, seen, "driver.%s is not in the driver's state encoding", name)
		if fencesOnly[name] {
			unfenced, changedUnfenced := base, changed
			unfenced.fenced, changedUnfenced.fenced = false, false
			assert.Equal(t, unfenced.appendState(nil), changedUnfenced.appendState(nil),
				"driver.%s: a World without the fenced store leaves the fences out", name)
		}
	}
}

// TestWorldIdleCountsDeliveriesSinceProgress: Idle counts the deliveries
// since the last entry, leave or refusal, and a world built with NoTrace
// records no events.
func TestWorldIdleCountsDeliveriesSinceProgress(t *testing.T) {
	for _, noTrace := range []bool{false, true} {
		w, err := NewWorld(RicartAgrawala, 2, WorldConfig{NoTrace: noTrace})
		require.NoError(t, err)
		require.NoError(t, w.Request(0))
		require.NoError(t, deliverFirst(t, w))
		assert.Equal(t, 1, w.Idle(), "P1 replied: a delivery without progress")
		require.NoError(t, deliverFirst(t, w))
		require.True(t, w.Peer(0).Inside)
		assert.Zero(t, w.Idle(), "an entry is progress")
		require.NoError(t, w.Request(1))
		require.NoError(t, deliverFirst(t, w)) // P0 defers P1's request
		assert.Equal(t, 1, w.Idle())
		_, err = w.Apply(Transition{Kind: TransLeave, Peer: 0})
		require.NoError(t, err)
		assert.Zero(t, w.Idle(), "a leave is progress")
		if noTrace {
			assert.Empty(t, w.Events(), "NoTrace records nothing")
		} else {
			assert.NotEmpty(t, w.Events())
		}
	}
}

// ahead is the centralized coordinator that, as its own hold ends, grants
// peer 1 whether or not peer 1's request has reached it.
type ahead struct{ *centralized }

func (a *ahead) step(ev event, out *output) {
	a.centralized.step(ev, out)
	if ev.kind == evRelease {
		out.send(Message{Kind: KindGrant, From: a.id, To: 1})
	}
}

func (a *ahead) clone() machine { return &ahead{a.centralized.clone().(*centralized)} }

// TestWorldCoordinatorGrantsAhead: a grant that overtakes the request it
// answers lets in a peer the coordinator has not heard from. The World
// names the broken order, with no request arrived, rather than reading
// past the end of its list of arrivals.
func TestWorldCoordinatorGrantsAhead(t *testing.T) {
	w, err := NewWorld(Centralized, 2, WorldConfig{})
	require.NoError(t, err)
	install(w, 0, &ahead{w.ms[0].(*centralized)})
	require.NoError(t, w.Request(1)) // its request stays in flight
	require.NoError(t, w.Request(0))
	require.True(t, w.Peer(0).Inside)
	apply := func(match func(Transition) bool) error {
		t.Helper()
		trs := w.Transitions()
		i := slices.IndexFunc(trs, match)
		require.GreaterOrEqual(t, i, 0, "no such transition in %v", trs)
		_, err := w.Apply(trs[i])
		return err
	}
	require.NoError(t, apply(func(tr Transition) bool { return tr.Kind == TransLeave && tr.Peer == 0 }))
	err = apply(func(tr Transition) bool { return tr.Kind == TransDeliver && tr.Msg.Kind == KindGrant })
	require.ErrorIs(t, err, ErrViolation)
	assert.Contains(t, err.Error(), "peer 1 entered, but the coordinator had the requests of []")
}

// TestStoreForgetsAHoldThatEnded: a write made after a peer's hold has
// ended does not close the peer's next hold. P0 writes in one hold and
// leaves; in its next hold P1, beside it, writes with fence 2 before P0
// writes with fence 3. The store accepts each write in fence order, and
// no write of a hold that another hold wrote after: fenced safety holds.
func TestStoreForgetsAHoldThatEnded(t *testing.T) {
	w, enter, storeWrite := storeWorld(t)
	write := func(p int, fence uint64) {
		require.True(t, storeWrite(p, fence).Accepted, "P%d's write with fence %d", p, fence)
	}
	enter(0)
	write(0, 1)
	_, h := w.drive(0)
	h.left()
	enter(0)
	enter(1) // beside P0: with the store, recorded and the run goes on
	write(1, 2)
	write(0, 3)
	assert.NoError(t, w.err)
	assert.False(t, w.store.broken)
}

// checkerWorld is the first world of a check of cfg, as the checker
// builds it (with cfg's budgets, faults and machines), to step by hand.
func checkerWorld(t *testing.T, cfg CheckConfig) *World {
	t.Helper()
	c, err := newChecker(cfg)
	require.NoError(t, err)
	w, err := c.startWorld(false)
	require.NoError(t, err)
	return w
}

// storeWorld is a fenced World of two fake machines and a way to enter
// and write in it by hand, for the store's own rules.
func storeWorld(t *testing.T) (w *World, enter func(p int), write func(p int, fence uint64) StepResult) {
	t.Helper()
	w = checkerWorld(t, CheckConfig{Algorithm: Centralized, N: 2, Requests: 2, Fenced: true,
		build: func(int, int) machine { return &fakeMachine{} }})
	enter = func(p int) {
		_, h := w.drive(p)
		h.entered(true)
	}
	write = func(p int, fence uint64) StepResult {
		w.peers[p].d.holdFence = fence
		return w.write(p)
	}
	return w, enter, write
}

// TestStoreRefusesAHoldWithoutAFence: a hold past the last fence has none
// (fence 0), and the store refuses its write even before it has accepted
// any (the fences may all have gone to calls that gave up).
func TestStoreRefusesAHoldWithoutAFence(t *testing.T) {
	_, enter, write := storeWorld(t)
	enter(0)
	st := write(0, 0)
	assert.False(t, st.Accepted)
	assert.Zero(t, st.Fence)
}

// TestStoreClosesEveryEarlierHold: once another hold has written, a
// write of the earlier hold that the store accepts (the fences of a
// broken algorithm, shared by two holds) breaks fenced safety, whichever
// peer the earlier holder is, peer 0 included; and a holder's own later
// writes, however many, never close its own hold.
func TestStoreClosesEveryEarlierHold(t *testing.T) {
	for _, first := range []int{0, 1} {
		w, enter, write := storeWorld(t)
		second := 1 - first
		enter(first)
		require.True(t, write(first, 1).Accepted)
		enter(second)
		require.True(t, write(second, 1).Accepted, "the same fence: accepted")
		st := write(first, 1)
		assert.True(t, st.Accepted)
		assert.True(t, w.store.broken, "P%d wrote after P%d's hold had written", first, second)
		assert.ErrorContains(t, w.err, fmt.Sprintf("accepted peer %d's write", first))
	}

	w, enter, write := storeWorld(t)
	enter(0)
	for i := range 3 * writesPerHold {
		require.True(t, write(0, 1).Accepted, "write %d", i)
	}
	assert.False(t, w.store.broken)
	assert.NoError(t, w.err)
}

// TestFormatFence: a fence of the first epoch is a plain number, and
// from FenceEpoch on it is epoch:count.
func TestFormatFence(t *testing.T) {
	assert.Equal(t, "7", formatFence(7))
	assert.Equal(t, strconv.FormatUint(FenceEpoch-1, 10), formatFence(FenceEpoch-1))
	assert.Equal(t, "1:0", formatFence(FenceEpoch))
	assert.Equal(t, "2:3", formatFence(2*FenceEpoch+3))
}

// TestWorldCountsLostTokens: when a token was lost to a fault, a token
// count that is off says how many were lost, so that a second token
// beside a lost one is not reported as a plain duplicate.
func TestWorldCountsLostTokens(t *testing.T) {
	w, err := NewWorld(SuzukiKasami, 2, WorldConfig{})
	require.NoError(t, err)
	require.NoError(t, w.checkTokens())
	w.f.lostTokens = 1 // lost, while peer 0 still holds one
	err = w.checkTokens()
	require.ErrorIs(t, err, ErrViolation)
	assert.ErrorContains(t, err, "1 tokens held, 0 in flight and 1 lost")
}

// TestWorldChecksEpochsInFlight: with a regenerated token, a token in
// flight of the same epoch as one held is two tokens of that epoch, on
// either network (a FIFO world keeps its messages in queues, an unordered
// one in a bag), and a token of another epoch beside them does not hide it.
func TestWorldChecksEpochsInFlight(t *testing.T) {
	for _, net := range []Network{NetworkFIFO, NetworkUnordered} {
		w, err := NewWorld(SuzukiKasami, 2, WorldConfig{Network: net}, WithRecovery())
		require.NoError(t, err)
		require.True(t, w.regen)
		e, held := w.ms[0].(regenerator).heldEpoch()
		require.True(t, held)
		require.NoError(t, w.checkTokens())
		w.send(1, Message{Kind: KindToken, From: 1, To: 0, Ref: e})
		err = w.checkTokens()
		require.ErrorIs(t, err, ErrViolation, "%v", net)
		assert.ErrorContains(t, err, fmt.Sprintf("two tokens of epoch %d", e))
		w.send(1, Message{Kind: KindToken, From: 1, To: 0, Ref: e + 1})
		assert.ErrorContains(t, w.checkTokens(), fmt.Sprintf("two tokens of epoch %d", e), "%v", net)
	}
}

// TestWorldQuiet: a world is quiet when no peer can act. A peer waiting
// with requests still to make cannot make them while it waits, so a
// world whose one waiting peer has nothing in flight is quiet (and
// deadlocked); a crashed peer makes none of the requests it had left.
func TestWorldQuiet(t *testing.T) {
	w := checkerWorld(t, CheckConfig{Algorithm: Centralized, N: 2, RequestsPerPeer: []int{2, 0},
		build: func(int, int) machine { return &fakeMachine{never: true} }})
	require.False(t, w.quiet(), "peer 0 may ask")
	_, err := w.Apply(Transition{Kind: TransRequest, Peer: 0})
	require.NoError(t, err)
	assert.True(t, w.quiet(), "peer 0 waits, with one request left, and nothing is in flight")
	assert.ErrorContains(t, w.finalCheck(), "deadlock")

	w = checkerWorld(t, CheckConfig{Algorithm: Centralized, N: 2, Requests: 1, Faults: CheckFaults{Crash: true},
		build: func(int, int) machine { return &fakeMachine{} }})
	_, err = w.Apply(Transition{Kind: TransCrash, Peer: 1})
	require.NoError(t, err)
	require.False(t, w.quiet(), "peer 0 may ask")
	_, err = w.Apply(Transition{Kind: TransRequest, Peer: 0})
	require.NoError(t, err)
	_, err = w.Apply(Transition{Kind: TransLeave, Peer: 0})
	require.NoError(t, err)
	assert.True(t, w.quiet(), "peer 0 is done and peer 1 crashed before its request")
}

// TestWorldFinalCheckKeepsTheViolation: a world at rest that has already
// failed answers its first violation, not "nothing left to do".
func TestWorldFinalCheckKeepsTheViolation(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 2, WorldConfig{})
	require.NoError(t, err)
	require.NoError(t, w.finalCheck())
	w.fail("a violation found earlier")
	w.fail("a later one")
	err = w.finalCheck()
	require.ErrorIs(t, err, ErrViolation)
	assert.ErrorContains(t, err, "a violation found earlier", "the first violation is kept")
}

// restCounter is a fake machine with a promise at rest (idleChecker) that
// counts how often it is asked, and breaks it when told to.
type restCounter struct {
	fakeMachine
	calls  *int
	broken bool
}

func (r *restCounter) clone() machine { c := *r; return &c }
func (r *restCounter) idleViolation() string {
	*r.calls++
	if r.broken {
		return "broke its promise at rest"
	}
	return ""
}

// TestWorldAsksAtRestOncePerState: a world at rest checks the machines'
// promises at rest the first time it is asked, the very first state
// included, and not again until something has stepped.
func TestWorldAsksAtRestOncePerState(t *testing.T) {
	for _, broken := range []bool{false, true} {
		calls := 0
		w := checkerWorld(t, CheckConfig{Algorithm: Centralized, N: 2, Requests: 1,
			build: func(int, int) machine { return &restCounter{calls: &calls, broken: broken} }})
		err := w.finalCheck()
		if broken {
			require.ErrorIs(t, err, ErrViolation)
			assert.ErrorContains(t, err, "at rest, peer 0 broke its promise at rest")
			continue
		}
		require.NoError(t, err)
		require.Equal(t, 2, calls, "each machine asked once")
		require.NoError(t, w.finalCheck())
		assert.Equal(t, 2, calls, "nothing stepped: not asked again")
		_, err = w.Apply(Transition{Kind: TransRequest, Peer: 0})
		require.NoError(t, err)
		_, err = w.Apply(Transition{Kind: TransLeave, Peer: 0})
		require.NoError(t, err)
		require.NoError(t, w.finalCheck())
		assert.Equal(t, 4, calls, "asked again after a step")
		require.NoError(t, w.finalCheck())
		assert.Equal(t, 4, calls)
	}
}

// TestCheckPartitionInForceBlocks: a partition that never heals, with a
// detector but no recovery, leaves the peers that need the other side
// waiting for ever. That is the fault's doing, not a deadlock of the
// algorithm, even though a detector is configured.
func TestCheckPartitionInForceBlocks(t *testing.T) {
	res := mustCheck(t, CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 1,
		Faults: CheckFaults{Partition: 1 << 2}, Detector: Detector{Kind: DetectorPerfect}})
	require.True(t, res.Complete)
	assert.Nil(t, res.Violation)
	assert.Equal(t, Holds, res.DeadlockFree)
}

// TestWorldOutstandingCountsEveryCaller: Outstanding counts the request
// out, the callers queued behind it, and the holder until it leaves.
func TestWorldOutstandingCountsEveryCaller(t *testing.T) {
	w, err := NewWorld(Centralized, 2, WorldConfig{})
	require.NoError(t, err)
	require.NoError(t, w.Request(1))
	require.NoError(t, w.Request(1))
	assert.Equal(t, 2, w.Outstanding(), "one request out, one caller queued")
	deliverAll(t, w, 10)
	require.True(t, w.Peer(1).Inside)
	assert.Equal(t, 2, w.Outstanding(), "the holder and the caller queued")
	_, err = w.Apply(Transition{Kind: TransLeave, Peer: 1})
	require.NoError(t, err)
	deliverAll(t, w, 10)
	require.True(t, w.Peer(1).Inside)
	assert.Equal(t, 1, w.Outstanding(), "the second caller holds")
	_, err = w.Apply(Transition{Kind: TransLeave, Peer: 1})
	require.NoError(t, err)
	deliverAll(t, w, 10)
	assert.Zero(t, w.Outstanding())
}
