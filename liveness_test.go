package dmutex

import (
	"bytes"
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
