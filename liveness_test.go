package dmutex

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bouncer is a token machine that livelocks without deadlocking: peers 0
// and 1 pass the token back and forth for ever, and serve only
// themselves, so peer 2 waits in a fair run that never ends.
type bouncer struct {
	id            int
	token, wanted bool
}

func (b *bouncer) step(ev event, out *output) {
	switch ev.kind {
	case evRequest:
		if b.token {
			out.enter()
			return
		}
		b.wanted = true
	case evRelease:
		b.pass(out)
	case evMessage:
		b.token = true
		if b.wanted {
			b.wanted = false
			out.enter()
			return
		}
		b.pass(out)
	}
}

func (b *bouncer) pass(out *output) {
	if b.id < 2 {
		b.token = false
		out.send(Message{Kind: KindToken, From: b.id, To: 1 - b.id})
	}
}
func (b *bouncer) hasToken() bool { return b.token }
func (b *bouncer) clone() machine { c := *b; return &c }
func (b *bouncer) appendState(s []byte) []byte {
	return appendBool(appendBool(s, b.token), b.wanted)
}

// pinger has a cycle that is only unfair: peer 2's grant is in flight
// while peers 0 and 1 ping each other for ever. A fair run delivers the
// grant, so no starvation may be reported.
type pinger struct{ id int }

func (p *pinger) step(ev event, out *output) {
	switch {
	case ev.kind == evRequest && p.id == 2:
		out.send(Message{Kind: KindRequest, From: 2, To: 0})
	case ev.kind == evMessage && ev.msg.Kind == KindRequest:
		out.send(Message{Kind: KindGrant, From: 0, To: 2})
		out.send(Message{Kind: KindInquire, From: 0, To: 1})
	case ev.kind == evMessage && ev.msg.Kind == KindInquire:
		out.send(Message{Kind: KindInquire, From: p.id, To: ev.msg.From})
	case ev.kind == evMessage && ev.msg.Kind == KindGrant:
		out.enter()
	}
}
func (p *pinger) clone() machine              { c := *p; return &c }
func (p *pinger) appendState(b []byte) []byte { return b }

func TestCheckFindsLivelock(t *testing.T) {
	for _, net := range []Network{NetworkFIFO, NetworkUnordered} {
		t.Run(net.String(), func(t *testing.T) {
			res := mustCheck(t, CheckConfig{Algorithm: TokenRing, N: 3, Requests: 1, Network: net,
				build: func(id, _ int) machine { return &bouncer{id: id, token: id == 0} }})
			require.True(t, res.Complete)
			assert.True(t, res.Safe)
			assert.True(t, res.DeadlockFree, "the token never stops: no state is quiet")
			assert.True(t, res.Liveness)
			assert.False(t, res.StarvationFree)
			v := res.Violation
			require.NotNil(t, v)
			assert.Equal(t, "starvation", v.Property)
			assert.Contains(t, v.Message, "P2 waits for ever")
			require.Greater(t, len(v.Trace), v.CycleStart)
			assert.Positive(t, v.CycleStart)
			assert.Contains(t, v.Mermaid, "repeats for ever")
			t.Logf("%s (cycle from step %d):\n    %s", v.Message, v.CycleStart+1, joinLines(v.Trace))

			// The lasso replays, and its cycle comes back to where it began.
			w, err := v.Replay()
			require.NoError(t, err)
			require.True(t, w.Peer(2).Waiting)
			r, err := newChecker(CheckConfig{Algorithm: TokenRing, N: 3, Requests: 1, Network: net,
				build: func(id, _ int) machine { return &bouncer{id: id, token: id == 0} }})
			require.NoError(t, err)
			x, err := r.startWorld(false)
			require.NoError(t, err)
			var at []byte
			for i, id := range v.Transitions {
				if i == v.CycleStart {
					at = x.appendState(nil, new([][]byte), new([]byte), new(stampMap))
				}
				tr, ok := x.Find(id)
				require.True(t, ok, id)
				_, err := x.Apply(tr)
				require.NoError(t, err)
			}
			assert.True(t, bytes.Equal(at, x.appendState(nil, new([][]byte), new([]byte), new(stampMap))), "the cycle closes")
		})
	}
}

func TestCheckIgnoresUnfairCycles(t *testing.T) {
	for _, net := range []Network{NetworkFIFO, NetworkUnordered} {
		t.Run(net.String(), func(t *testing.T) {
			res := mustCheck(t, CheckConfig{Algorithm: Centralized, N: 3, RequestsPerPeer: []int{0, 0, 1}, Network: net,
				build: func(id, _ int) machine { return &pinger{id: id} }})
			require.True(t, res.Complete)
			require.Nil(t, res.Violation)
			assert.True(t, res.Liveness)
			assert.True(t, res.StarvationFree, "the only cycle while P2 waits starves the delivery of its grant")
			assert.Equal(t, 0, res.MaxOvertakes)
		})
	}
}

// TestCheckUnboundedOvertakes: with unlimited requests, peers 0 and 1
// take the bouncing token in turn for ever while P2 waits: a cycle with
// entries, so no bound, reported as -1 (JSON null).
func TestCheckUnboundedOvertakes(t *testing.T) {
	res := mustCheck(t, CheckConfig{Algorithm: TokenRing, N: 3, Requests: Unlimited,
		build: func(id, _ int) machine { return &bouncer{id: id, token: id == 0} }})
	require.True(t, res.Complete)
	require.True(t, res.Liveness)
	assert.Equal(t, -1, res.MaxOvertakes)
	assert.False(t, res.StarvationFree)
	assert.True(t, res.DeadlockFree)
}

func joinLines(ls []string) string {
	var b bytes.Buffer
	for i, l := range ls {
		if i > 0 {
			b.WriteString("\n    ")
		}
		b.WriteString(l)
	}
	return b.String()
}

// requireFairLasso replays v, a starvation of peer p found by Check with
// cfg, in a fresh world and requires what such a counterexample must be:
// its loop (the steps from CycleStart on) takes at least one step and
// ends in the state where it began, p waits in every state of the loop,
// and the loop is weakly fair: every obligation enabled in every state of
// the loop is taken by one of its steps. The obligations are named here
// from the transitions, apart from the checker's classes: a holder's step
// out (its write or its leave), a delivery (per pair over FIFO queues,
// per message and fence in a bag) and what the failure detector owes.
func requireFairLasso(t *testing.T, cfg CheckConfig, v *Violation, p int) {
	t.Helper()
	require.NotNil(t, v)
	require.Equal(t, "starvation", v.Property)
	require.Contains(t, v.Message, "P"+itoa(p)+" waits for ever")
	require.Less(t, v.CycleStart, len(v.Transitions), "the loop takes at least one step")
	c, err := newChecker(cfg)
	require.NoError(t, err)
	w, err := c.startWorld(false)
	require.NoError(t, err)
	fifo := w.FIFO()
	obligation := func(tr Transition) string {
		switch tr.Kind {
		case TransLeave, TransWrite:
			return fmt.Sprintf("P%d steps out", tr.Peer)
		case TransDeliver:
			if fifo {
				return fmt.Sprintf("deliver on P%d->P%d", tr.Msg.From, tr.Msg.To)
			}
			return fmt.Sprintf("deliver %s fence %d", formatMessage(tr.Msg, true), tr.Msg.Fence)
		case TransSuspect, TransTrust:
			return tr.ID()
		}
		return ""
	}
	state := func() string {
		return string(w.appendState(nil, new([][]byte), new([]byte), new(stampMap)))
	}
	var start string
	always := map[string]bool{} // enabled in every state of the loop so far
	taken := map[string]bool{}
	for i, id := range v.Transitions {
		if i >= v.CycleStart {
			require.True(t, w.Peer(p).Waiting, "P%d waits at step %d of the loop", p, i+1)
			now := map[string]bool{}
			for _, tr := range w.appendTransitions(nil, false) {
				if o := obligation(tr); o != "" {
					now[o] = true
				}
			}
			if i == v.CycleStart {
				start = state()
				always = now
			}
			for o := range always {
				if !now[o] {
					delete(always, o)
				}
			}
		}
		tr, ok := w.Find(id)
		require.True(t, ok, "step %d, %s, does not replay", i+1, id)
		if i >= v.CycleStart {
			taken[obligation(tr)] = true
		}
		_, err := w.Apply(tr)
		require.NoError(t, err)
	}
	require.Equal(t, start, state(), "the loop ends where it began")
	for o := range always {
		assert.True(t, taken[o], "%q is enabled in every state of the loop and never taken: the run is not fair", o)
	}
}

// lazyHolder, under the fenced store, starves nobody in a fair run: P0
// enters at once on its request, and a request of P2 that reaches it
// starts a ping between P0 and P1 that never ends, and is granted when P0
// leaves (or at once if P0 is not inside and has not begun to wait); P2
// gives the privilege back when it leaves. A run in which P0 stays inside
// for ever, never writing, while the ping goes on, is not fair: P0's
// write is enabled all along, and a holder must write before it leaves.
type lazyHolder struct {
	id                                   int
	priv, inside, owe, wantSelf, pinging bool
}

func newLazyHolder(id, _ int) machine { return &lazyHolder{id: id, priv: id == 0} }

func (h *lazyHolder) step(ev event, out *output) {
	switch {
	case h.id == 0 && ev.kind == evRequest:
		if h.priv {
			h.inside = true
			out.enter()
			return
		}
		h.wantSelf = true
	case h.id == 0 && ev.kind == evRelease:
		h.inside = false
		if h.owe {
			h.owe, h.priv = false, false
			out.send(Message{Kind: KindGrant, From: 0, To: 2})
		}
	case h.id == 0 && ev.kind == evMessage && ev.msg.Kind == KindRequest:
		if !h.pinging {
			h.pinging = true
			out.send(Message{Kind: KindInquire, From: 0, To: 1})
		}
		if h.priv && !h.inside {
			h.priv = false
			out.send(Message{Kind: KindGrant, From: 0, To: 2})
			return
		}
		h.owe = true
	case h.id == 0 && ev.kind == evMessage && ev.msg.Kind == KindRelease:
		h.priv = true
		if h.wantSelf {
			h.wantSelf, h.inside = false, true
			out.enter()
		}
	case h.id < 2 && ev.kind == evMessage && ev.msg.Kind == KindInquire:
		out.send(Message{Kind: KindInquire, From: h.id, To: 1 - h.id})
	case h.id == 2 && ev.kind == evRequest:
		out.send(Message{Kind: KindRequest, From: 2, To: 0})
	case h.id == 2 && ev.kind == evMessage && ev.msg.Kind == KindGrant:
		out.enter()
	case h.id == 2 && ev.kind == evRelease:
		out.send(Message{Kind: KindRelease, From: 2, To: 0})
	}
}
func (h *lazyHolder) clone() machine { c := *h; return &c }
func (h *lazyHolder) appendState(b []byte) []byte {
	for _, f := range []bool{h.priv, h.inside, h.owe, h.wantSelf, h.pinging} {
		b = appendBool(b, f)
	}
	return b
}

// TestWeakFairnessObligesWrites: with the fenced store a holder cannot
// leave before it writes, so its write is owed as its leave is. The
// checker once gave the write no fairness class, and took the run in
// which P0 never writes while P0 and P1 ping for ever as a fair one that
// starves P2.
func TestWeakFairnessObligesWrites(t *testing.T) {
	for _, net := range []Network{NetworkFIFO, NetworkUnordered} {
		for _, fenced := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/fenced=%v", net, fenced), func(t *testing.T) {
				cfg := CheckConfig{Algorithm: Centralized, N: 3, RequestsPerPeer: []int{1, 0, 1}, Network: net,
					Fenced: fenced, build: newLazyHolder}
				res := mustCheck(t, cfg)
				require.True(t, res.Complete)
				require.True(t, res.Safe)
				require.True(t, res.Liveness)
				if v := res.Violation; v != nil {
					t.Logf("%s:\n    %s", v.Message, joinLines(v.Trace))
				}
				assert.True(t, res.DeadlockFree)
				assert.True(t, res.StarvationFree, "every cycle in which P2 waits leaves a step owed")
				assert.Nil(t, res.Violation)
			})
		}
	}
}
