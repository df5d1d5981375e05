package dmutex

import (
	"bytes"
	"context"
	"fmt"
	"slices"
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
func (b *bouncer) hasToken() bool              { return b.token }
func (b *bouncer) carriesToken(m Message) bool { return m.Kind == KindToken }

var _ tokenHolder = (*bouncer)(nil)

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
			res := checkBoth(t, CheckConfig{Algorithm: TokenRing, N: 3, Requests: 1, Network: net,
				build: func(id, _ int) machine { return &bouncer{id: id, token: id == 0} }})
			require.True(t, res.Complete)
			assert.Equal(t, Holds, res.Safe)
			assert.Equal(t, Holds, res.DeadlockFree, "the token never stops: no state is quiet")
			assert.True(t, res.Liveness)
			assert.Equal(t, Refuted, res.StarvationFree)
			v := res.Violation
			require.NotNil(t, v)
			assert.Equal(t, "starvation", v.Property)
			assert.Contains(t, v.Message, "P2 waits for ever")
			require.Greater(t, len(v.Trace), v.CycleStart)
			assert.Positive(t, v.CycleStart)
			assert.Contains(t, v.Mermaid, "repeats for ever")
			t.Logf("%s (cycle from step %d):\n    %s", v.Message, v.CycleStart+1, joinLines(v.Trace))
			requireFairLasso(t, CheckConfig{Algorithm: TokenRing, N: 3, Requests: 1, Network: net,
				build: func(id, _ int) machine { return &bouncer{id: id, token: id == 0} }}, v, 2)

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
			res := checkBoth(t, CheckConfig{Algorithm: Centralized, N: 3, RequestsPerPeer: []int{0, 0, 1}, Network: net,
				build: func(id, _ int) machine { return &pinger{id: id} }})
			require.True(t, res.Complete)
			require.Nil(t, res.Violation)
			assert.True(t, res.Liveness)
			assert.Equal(t, Holds, res.StarvationFree, "the only cycle while P2 waits starves the delivery of its grant")
			assert.Equal(t, 0, res.MaxOvertakes)
		})
	}
}

// TestCheckUnboundedOvertakes: with unlimited requests, peers 0 and 1
// take the bouncing token in turn for ever while P2 waits: a cycle with
// entries, so no bound, reported as -1 (JSON null).
func TestCheckUnboundedOvertakes(t *testing.T) {
	res := checkBoth(t, CheckConfig{Algorithm: TokenRing, N: 3, Requests: Unlimited,
		build: func(id, _ int) machine { return &bouncer{id: id, token: id == 0} }})
	require.True(t, res.Complete)
	require.True(t, res.Liveness)
	assert.Equal(t, -1, res.MaxOvertakes)
	assert.Equal(t, Refuted, res.StarvationFree)
	assert.Equal(t, Holds, res.DeadlockFree)
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
				res := checkBoth(t, cfg)
				require.True(t, res.Complete)
				require.Equal(t, Holds, res.Safe)
				require.True(t, res.Liveness)
				if v := res.Violation; v != nil {
					t.Logf("%s:\n    %s", v.Message, joinLines(v.Trace))
				}
				assert.Equal(t, Holds, res.DeadlockFree)
				assert.Equal(t, Holds, res.StarvationFree, "every cycle in which P2 waits leaves a step owed")
				assert.Nil(t, res.Violation)
			})
		}
	}
}

// fenceTwins, under the fenced store and over a bag, starves nobody in a
// fair run. P2 enters after two grants from P0: P0 sends the first when
// P2's request reaches it (and starts a ping with P1 that never ends), the
// second once it is not inside (at its leave, or when the ping comes
// back), and keeps out until P2's release. When P0 enters between the two,
// the second grant carries a higher fence than the first, and while the
// ping goes on P2 waits with two grants in flight that differ only in
// their fence: each is owed in every state, so a run that delivers
// neither is not fair.
type fenceTwins struct {
	id                                   int
	priv, inside, owe, wantSelf, pinging bool
	grants                               int
}

func newFenceTwins(id, _ int) machine { return &fenceTwins{id: id, priv: id == 0} }

func (f *fenceTwins) step(ev event, out *output) {
	grant := Message{Kind: KindGrant, From: 0, To: 2}
	switch {
	case f.id == 0 && ev.kind == evRequest:
		if f.priv {
			f.inside = true
			out.enter()
			return
		}
		f.wantSelf = true
	case f.id == 0 && ev.kind == evRelease:
		f.inside = false
		if f.owe {
			f.owe, f.priv = false, false
			out.send(grant)
		}
	case f.id == 0 && ev.kind == evMessage && ev.msg.Kind == KindRequest:
		out.send(grant)
		f.owe = true
		if !f.pinging {
			f.pinging = true
			out.send(Message{Kind: KindInquire, From: 0, To: 1})
		}
	case f.id == 0 && ev.kind == evMessage && ev.msg.Kind == KindInquire:
		if f.owe && !f.inside {
			f.owe, f.priv = false, false
			out.send(grant)
		}
		out.send(Message{Kind: KindInquire, From: 0, To: 1})
	case f.id == 0 && ev.kind == evMessage && ev.msg.Kind == KindRelease:
		f.priv = true
		if f.wantSelf {
			f.wantSelf, f.inside = false, true
			out.enter()
		}
	case f.id == 1 && ev.kind == evMessage && ev.msg.Kind == KindInquire:
		out.send(Message{Kind: KindInquire, From: 1, To: 0})
	case f.id == 2 && ev.kind == evRequest:
		out.send(Message{Kind: KindRequest, From: 2, To: 0})
	case f.id == 2 && ev.kind == evMessage && ev.msg.Kind == KindGrant:
		if f.grants++; f.grants == 2 {
			f.grants = 0
			out.enter()
		}
	case f.id == 2 && ev.kind == evRelease:
		out.send(Message{Kind: KindRelease, From: 2, To: 0})
	}
}
func (f *fenceTwins) clone() machine { c := *f; return &c }
func (f *fenceTwins) appendState(b []byte) []byte {
	for _, x := range []bool{f.priv, f.inside, f.owe, f.wantSelf, f.pinging} {
		b = appendBool(b, x)
	}
	return appendInt(b, f.grants)
}

// TestWeakFairnessPerState: a class of transitions is continuously
// enabled on a cycle when it is enabled in every state of it, however many
// of its transitions a state offers. The checker once counted the edges
// of a class against the states of a component, so that a state offering
// two deliveries of one class stood for two states: with fenceTwins, two
// grants that differ only in their fence (one class then) made the grants
// look not always enabled, and the ping cycle that never delivers them
// passed as a fair run starving P2.
func TestWeakFairnessPerState(t *testing.T) {
	cfg := CheckConfig{Algorithm: Centralized, N: 3, RequestsPerPeer: []int{1, 0, 1}, Network: NetworkUnordered,
		Fenced: true, build: newFenceTwins}
	res := checkBoth(t, cfg)
	require.True(t, res.Complete)
	require.Equal(t, Holds, res.Safe)
	require.True(t, res.Liveness)
	if v := res.Violation; v != nil {
		t.Logf("%s:\n    %s", v.Message, joinLines(v.Trace))
	}
	assert.Equal(t, Holds, res.DeadlockFree)
	assert.Equal(t, Holds, res.StarvationFree, "every cycle in which P2 waits leaves a grant undelivered")
	assert.Nil(t, res.Violation)
}

// graphChecker is a checker over a hand-made graph, for peerLiveness of
// peer 0: states 0 to n-1 (0 the start), peer 0 waiting in each but those
// in out, and the edges {from, to, class}, given in order of from. The
// search tree (parent) is a breadth-first one from state 0.
func graphChecker(n int, out []int32, edges [][3]int32) *checker {
	c := &checker{cc: CheckConfig{N: 1}}
	for s := range int32(n) {
		info := stateInfo{wait: 1}
		if slices.Contains(out, s) {
			info.wait = 0
		}
		c.info = append(c.info, info)
		c.off = append(c.off, int32(len(c.to)))
		for _, e := range edges {
			if e[0] == s {
				c.to = append(c.to, e[1])
				c.cls = append(c.cls, e[2])
				c.ent = append(c.ent, -1)
			}
		}
	}
	c.off = append(c.off, int32(len(c.to)))
	c.parent = make([]int32, n)
	for i := range c.parent {
		c.parent[i] = -2
	}
	c.parent[0] = -1
	for queue := []int32{0}; len(queue) > 0; queue = queue[1:] {
		s := queue[0]
		for e := c.off[s]; e < c.off[s+1]; e++ {
			if t := c.to[e]; c.parent[t] == -2 {
				c.parent[t] = s
				queue = append(queue, t)
			}
		}
	}
	return c
}

// requireLasso requires that l is a path of c's graph from the start
// whose loop (the steps into l.path[l.cycle:]) takes at least one step,
// ends where it began, and stays where peer 0 waits.
func requireLasso(t *testing.T, c *checker, l *lasso) {
	t.Helper()
	require.NotNil(t, l)
	require.Equal(t, int32(0), l.path[0])
	require.Less(t, l.cycle, len(l.path), "the loop takes at least one step")
	require.Positive(t, l.cycle)
	for i := 1; i < len(l.path); i++ {
		u, v := l.path[i-1], l.path[i]
		require.Contains(t, c.to[c.off[u]:c.off[u+1]], v, "no edge %d->%d", u, v)
		if i >= l.cycle {
			require.NotZero(t, c.info[v].wait, "the loop leaves the waiting states at %d", v)
		}
	}
	require.Equal(t, l.path[l.cycle-1], l.path[len(l.path)-1], "the loop ends where it began")
}

// TestFairCycleEnabledPerState: whether a class is owed on a component
// is decided state by state: it is owed when every state of the
// component offers it, and a state offering it twice still counts once.
// The checker once counted its edges against the component's states.
func TestFairCycleEnabledPerState(t *testing.T) {
	for _, tt := range []struct {
		name  string
		edges [][3]int32
		fair  bool
	}{
		{
			// Class 7 leaves state 1 twice and state 2 not at all: not
			// owed, so the cycle 1 <-> 2 is fair.
			name:  "offered twice in one state only",
			edges: [][3]int32{{0, 1, -1}, {1, 2, -1}, {1, 3, 7}, {1, 3, 7}, {2, 1, -1}},
			fair:  true,
		},
		{
			// Class 7 leaves both states, twice from state 1, and is
			// never taken inside: owed all along, so no fair run stays.
			name:  "offered everywhere, twice in one state",
			edges: [][3]int32{{0, 1, -1}, {1, 2, -1}, {1, 3, 7}, {1, 3, 7}, {2, 1, -1}, {2, 3, 7}},
			fair:  false,
		},
		{
			name:  "offered everywhere and taken inside",
			edges: [][3]int32{{0, 1, -1}, {1, 2, 7}, {1, 3, 7}, {2, 1, -1}, {2, 3, 7}},
			fair:  true,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := graphChecker(4, []int32{3}, tt.edges)
			_, l := c.peerLiveness(newSCCs(len(c.info)), 0)
			if !tt.fair {
				require.Nil(t, l)
				return
			}
			requireLasso(t, c, l)
		})
	}
}

// TestFairnessClasses: one class per obligation. A holder's write and
// its leave are one (it owes whichever is enabled), two holders' are
// two; over a bag, two messages that differ only in their fence are two
// deliveries owed, and two copies of one message are one; the
// environment's choices carry no class.
func TestFairnessClasses(t *testing.T) {
	c, err := newChecker(CheckConfig{Algorithm: Centralized, N: 3, Network: NetworkUnordered, Fenced: true})
	require.NoError(t, err)
	grant := func(fence uint64, seq uint64) Transition {
		return Transition{Kind: TransDeliver, Peer: 2, Seq: seq, Msg: Message{Kind: KindGrant, From: 0, To: 2, Fence: fence}}
	}
	for _, tt := range []struct {
		name string
		a, b Transition
		same bool
	}{
		{"a holder's write and leave", Transition{Kind: TransWrite, Peer: 1}, Transition{Kind: TransLeave, Peer: 1}, true},
		{"two holders' leaves", Transition{Kind: TransLeave, Peer: 1}, Transition{Kind: TransLeave, Peer: 2}, false},
		{"two holders' writes", Transition{Kind: TransWrite, Peer: 1}, Transition{Kind: TransWrite, Peer: 2}, false},
		{"messages that differ in their fence", grant(1, 4), grant(2, 5), false},
		{"copies of one message", grant(1, 4), grant(1, 9), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, b := c.classOf(nil, tt.a), c.classOf(nil, tt.b)
			require.GreaterOrEqual(t, a, int32(0))
			require.GreaterOrEqual(t, b, int32(0))
			assert.Equal(t, tt.same, a == b)
		})
	}
	for _, tr := range []Transition{
		{Kind: TransRequest, Peer: 1},
		{Kind: TransTry, Peer: 1},
		{Kind: TransCrash, Peer: 1},
		{Kind: TransLose, Peer: 2, Seq: 4, Msg: Message{Kind: KindGrant, From: 0, To: 2}},
		{Kind: TransPartition, Peer: -1},
		{Kind: TransHeal, Peer: -1},
	} {
		assert.Equal(t, int32(-1), c.classOf(nil, tr), "%v is the environment's choice", tr)
	}
}

// sideNote starves P2: its request reaches P0, which never grants it but
// starts a ping with P1 that never ends, and sends P2 a note (KindFailed)
// that P2 answers (KindRelinquish), which makes P0 send the note again.
// Every message is delivered in the run that starves P2; a shorter loop
// that only pings, with the note waiting all along, is not fair.
type sideNote struct{ id int }

func (s *sideNote) step(ev event, out *output) {
	switch {
	case s.id == 2 && ev.kind == evRequest:
		out.send(Message{Kind: KindRequest, From: 2, To: 0})
	case ev.kind != evMessage:
	case ev.msg.Kind == KindRequest:
		out.send(Message{Kind: KindInquire, From: 0, To: 1})
		out.send(Message{Kind: KindFailed, From: 0, To: 2})
	case ev.msg.Kind == KindInquire:
		out.send(Message{Kind: KindInquire, From: s.id, To: 1 - s.id})
	case ev.msg.Kind == KindFailed:
		out.send(Message{Kind: KindRelinquish, From: 2, To: 0})
	case ev.msg.Kind == KindRelinquish:
		out.send(Message{Kind: KindFailed, From: 0, To: 2})
	}
}
func (s *sideNote) clone() machine              { c := *s; return &c }
func (s *sideNote) appendState(b []byte) []byte { return b }

// TestStarvationLoopIsFair: the loop of a starvation counterexample is a
// fair run, not merely a cycle of a fair component. The checker once
// built it to take only the classes enabled in every state of the
// component, and so reported, for sideNote, the two-step ping from the
// component's first state, in which the note to P2 waits for ever.
func TestStarvationLoopIsFair(t *testing.T) {
	for _, net := range []Network{NetworkFIFO, NetworkUnordered} {
		t.Run(net.String(), func(t *testing.T) {
			cfg := CheckConfig{Algorithm: Centralized, N: 3, RequestsPerPeer: []int{0, 0, 1}, Network: net,
				build: func(id, _ int) machine { return &sideNote{id: id} }}
			res := checkBoth(t, cfg)
			require.True(t, res.Complete)
			require.True(t, res.Liveness)
			assert.Equal(t, Holds, res.DeadlockFree)
			assert.Equal(t, Refuted, res.StarvationFree)
			requireFairLasso(t, cfg, res.Violation, 2)
			t.Logf("%s (loop from step %d):\n    %s", res.Violation.Message, res.Violation.CycleStart+1, joinLines(res.Violation.Trace))
		})
	}
}

// Liveness regression tests, one class per test, after the liveness bugs
// that explicit-state model checkers have shipped. Each machine is small,
// and each test failed when the checker was broken in the way its
// comment names.

// ignorer never serves P2: P0 drops its request. P1, with tries, is
// refused at once, which leaves every state as it was.
type ignorer struct{ id int }

func (g *ignorer) step(ev event, out *output) {
	switch {
	case ev.kind == evRequest && g.id == 2:
		out.send(Message{Kind: KindRequest, From: 2, To: 0})
	case ev.kind == evTry:
		out.refuse()
	}
}
func (g *ignorer) clone() machine              { c := *g; return &c }
func (g *ignorer) appendState(b []byte) []byte { return b }

// Class: stuttering taken as progress. A run that stops with P2 waiting
// stutters for ever, and a step that changes nothing (another peer's
// refused try) is no progress for P2: both starve it. Broken checker that
// failed it: a deadlock not counted against StarvationFree (in both places
// that count it, explore's reset and the result's "deadlock ||"); a
// self-loop not counted as a cycle (fairComponent's cyclic
// requiring an edge to another state).
func TestLivenessStutteringIsNoProgress(t *testing.T) {
	cfg := CheckConfig{Algorithm: Centralized, N: 3, RequestsPerPeer: []int{0, 0, 1},
		build: func(id, _ int) machine { return &ignorer{id: id} }}
	res := checkBoth(t, cfg)
	require.True(t, res.Complete)
	assert.Equal(t, Refuted, res.DeadlockFree)
	assert.Equal(t, Refuted, res.StarvationFree, "a run that stops with P2 waiting starves it")

	// With P1's tries, the state where P2 waits for ever has a step: P1
	// tries and is refused, back where it was. The fair-cycle search
	// alone must find that loop of one step.
	cfg.TriesPerPeer = []int{0, Unlimited, 0}
	c, err := newChecker(cfg)
	require.NoError(t, err)
	require.NoError(t, c.explore(context.Background()))
	require.True(t, c.res.Complete)
	_, l := c.peerLiveness(newSCCs(len(c.info)), 2)
	require.NotNil(t, l, "a loop of stutter steps starves P2")
	require.Equal(t, len(l.path)-1, l.cycle, "the loop is one step")
	s := l.path[l.cycle]
	assert.Equal(t, l.path[l.cycle-1], s, "from the state to itself")
	assert.NotZero(t, c.info[s].flags&stQuiet, "in the state where P0 has dropped the request, not while it is in flight")
}

// twoRooms starves P2 in one way only. P2's request reaches P0, which
// starts a ping with P1 that never ends, and grants the request only once
// P1 has tried: P1 is refused at once, and its try lets P0 grant
// (KindRelinquish). A try is a free choice, so in a fair run P1 may never
// try. P2 thus waits in several cyclic components: those with the grant
// in flight, which no fair run stays in and which the search meets first
// (P1's try is the first step it takes), and the one where P1 never
// tries.
type twoRooms struct {
	id                      int
	blocked, asked, pinging bool
}

func (r *twoRooms) step(ev event, out *output) {
	switch {
	case r.id == 1 && ev.kind == evTry:
		out.send(Message{Kind: KindRelinquish, From: 1, To: 0})
		out.refuse()
	case r.id == 2 && ev.kind == evRequest:
		out.send(Message{Kind: KindRequest, From: 2, To: 0})
	case r.id == 2 && ev.kind == evMessage && ev.msg.Kind == KindGrant:
		out.enter()
	case ev.kind != evMessage:
	case ev.msg.Kind == KindRelinquish:
		r.blocked = false
		if r.asked {
			r.asked = false
			out.send(Message{Kind: KindGrant, From: 0, To: 2})
		}
	case ev.msg.Kind == KindRequest:
		if r.blocked {
			r.asked = true
		} else {
			out.send(Message{Kind: KindGrant, From: 0, To: 2})
		}
		if !r.pinging {
			r.pinging = true
			out.send(Message{Kind: KindInquire, From: 0, To: 1})
		}
	case ev.msg.Kind == KindInquire:
		out.send(Message{Kind: KindInquire, From: r.id, To: 1 - r.id})
	}
}
func (r *twoRooms) clone() machine { c := *r; return &c }
func (r *twoRooms) appendState(b []byte) []byte {
	return appendBool(appendBool(appendBool(b, r.blocked), r.asked), r.pinging)
}

// Class: a cycle reported in the wrong strongly connected component. The
// starvation must be found, and its loop must lie in the fair component
// (no grant in flight), wholly inside it, returning to its start. Broken
// checker that failed it: the component's fairness not judged (any
// cyclic one taken); the loop not walked back to its start. Tarjan's
// algorithm taking a cross edge to a finished component as a back edge
// (the onStack test dropped), which merges components, failed the
// livelock and fairness tests; a walk that may leave the component failed
// TestLivenessLoopStaysInItsComponent.
func TestLivenessCycleInItsComponent(t *testing.T) {
	for _, net := range []Network{NetworkFIFO, NetworkUnordered} {
		t.Run(net.String(), func(t *testing.T) {
			cfg := CheckConfig{Algorithm: Centralized, N: 3, RequestsPerPeer: []int{0, 0, 1}, TriesPerPeer: []int{0, 1, 0},
				Network: net, build: func(id, _ int) machine { return &twoRooms{id: id, blocked: id == 0} }}
			res := checkBoth(t, cfg)
			require.True(t, res.Complete)
			assert.Equal(t, Holds, res.DeadlockFree)
			assert.Equal(t, Refuted, res.StarvationFree)
			requireFairLasso(t, cfg, res.Violation, 2)
		})
	}
}

// TestLivenessLoopStaysInItsComponent: the loop is walked inside the
// component found fair, never through the one below it, however near an
// edge the walk looks for lies there. Hand-made graph: the fair component
// {1, 2} takes class 5 on 2->1; from 1 an edge leads first to the
// component {4, 5}, unfair (class 9 owed all along), whose 4->5 also has
// class 5, as near as 2->1.
func TestLivenessLoopStaysInItsComponent(t *testing.T) {
	c := graphChecker(6, []int32{3}, [][3]int32{
		{0, 1, -1},
		{1, 4, -1}, {1, 2, -1},
		{2, 1, 5},
		{4, 5, 5}, {4, 3, 9},
		{5, 4, -1}, {5, 3, 9},
	})
	_, l := c.peerLiveness(newSCCs(len(c.info)), 0)
	requireLasso(t, c, l)
	for _, s := range l.path[l.cycle:] {
		assert.Contains(t, []int32{1, 2}, s, "the loop leaves the fair component")
	}
}

// afterYou serves P2 once P1 has been in: P0 keeps P2's request until
// P1's leave reaches it (KindRelease), and P1 enters at once when it
// asks. While P1 has not asked, P2 waits in states from which the only
// step is P1's request, a free choice that no fair run owes but that the
// checker takes as certain while it is the only thing left to do; none of
// those states is on a cycle.
type afterYou struct {
	id              int
	asked, released bool
}

func (a *afterYou) step(ev event, out *output) {
	switch {
	case a.id == 1 && ev.kind == evRequest:
		out.enter()
	case a.id == 1 && ev.kind == evRelease:
		out.send(Message{Kind: KindRelease, From: 1, To: 0})
	case a.id == 2 && ev.kind == evRequest:
		out.send(Message{Kind: KindRequest, From: 2, To: 0})
	case a.id == 2 && ev.kind == evMessage:
		out.enter()
	case ev.kind != evMessage:
	case ev.msg.Kind == KindRequest:
		a.asked = true
	case ev.msg.Kind == KindRelease:
		a.released = true
	}
	if a.id == 0 && a.asked && a.released {
		a.asked = false
		out.send(Message{Kind: KindGrant, From: 0, To: 2})
	}
}
func (a *afterYou) clone() machine { c := *a; return &c }
func (a *afterYou) appendState(b []byte) []byte {
	return appendBool(appendBool(b, a.asked), a.released)
}

// Class: a "cycle" that is not one. A component of one state with no
// edge back to itself is no loop, and a lasso's loop must come back to
// where it began. Broken checker that failed it: every component taken
// as cyclic (the cyclic tests of peerLiveness and fairComponent both made
// true), for afterYou and the hand-made graphs; the loop not walked back to its first state
// (fairCycle's last walk dropped), for sideNote and bouncer.
func TestLivenessCycleIsOne(t *testing.T) {
	for _, net := range []Network{NetworkFIFO, NetworkUnordered} {
		t.Run(net.String(), func(t *testing.T) {
			res := checkBoth(t, CheckConfig{Algorithm: Centralized, N: 3, RequestsPerPeer: []int{0, 1, 1}, Network: net,
				build: func(id, _ int) machine { return &afterYou{id: id} }})
			require.True(t, res.Complete)
			assert.Equal(t, Holds, res.DeadlockFree)
			assert.Equal(t, Holds, res.StarvationFree, "no state where P2 waits is on a cycle")
			assert.Nil(t, res.Violation)

			cfg := CheckConfig{Algorithm: Centralized, N: 3, RequestsPerPeer: []int{0, 0, 1}, Network: net,
				build: func(id, _ int) machine { return &sideNote{id: id} }}
			res = checkBoth(t, cfg)
			requireFairLasso(t, cfg, res.Violation, 2)
		})
	}
	for _, tt := range []struct {
		name  string
		edges [][3]int32
		loop  bool
	}{
		{"a chain", [][3]int32{{0, 1, -1}, {1, 2, -1}, {2, 3, -1}}, false},
		{"a state with no edge back", [][3]int32{{0, 1, -1}, {1, 3, -1}, {1, 2, -1}, {2, 3, -1}}, false},
		{"a self-loop", [][3]int32{{0, 1, -1}, {1, 1, -1}, {1, 3, -1}}, true},
		{"a loop of two", [][3]int32{{0, 1, -1}, {1, 2, -1}, {2, 1, -1}, {2, 3, -1}}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := graphChecker(4, []int32{3}, tt.edges)
			_, l := c.peerLiveness(newSCCs(len(c.info)), 0)
			if !tt.loop {
				require.Nil(t, l)
				return
			}
			requireLasso(t, c, l)
		})
	}
}

// slowStarver starves P2 after a warm-up: P0 and P1 pass a counter up to
// slowStarverHops before their ping settles into a loop, and P2's request
// is never granted. A search stopped before the loop has seen no cycle.
type slowStarver struct{ id int }

const slowStarverHops = 40

func (s *slowStarver) step(ev event, out *output) {
	switch {
	case s.id == 2 && ev.kind == evRequest:
		out.send(Message{Kind: KindRequest, From: 2, To: 0})
	case ev.kind != evMessage:
	case ev.msg.Kind == KindRequest:
		out.send(Message{Kind: KindInquire, From: 0, To: 1, TS: 1})
	case ev.msg.Kind == KindInquire:
		out.send(Message{Kind: KindInquire, From: s.id, To: 1 - s.id, TS: min(ev.msg.TS+1, slowStarverHops)})
	}
}
func (s *slowStarver) clone() machine              { c := *s; return &c }
func (s *slowStarver) appendState(b []byte) []byte { return b }

// Class: a state bound making liveness vacuously true. A search stopped
// by MaxStates has not seen every cycle, so it must not say that no fair
// cycle starves anyone. Broken checker that failed it: liveness computed
// over an incomplete graph (liveness's Complete test dropped).
func TestLivenessNotDecidedByABound(t *testing.T) {
	cfg := CheckConfig{Algorithm: Centralized, N: 3, RequestsPerPeer: []int{0, 0, 1},
		build: func(id, _ int) machine { return &slowStarver{id: id} }}
	res := checkBoth(t, cfg)
	require.True(t, res.Complete)
	require.Equal(t, Refuted, res.StarvationFree, "the full search finds the loop")
	full := res.States

	cfg.MaxStates = full / 2
	res = checkBoth(t, cfg)
	require.False(t, res.Complete)
	assert.False(t, res.Liveness)
	assert.Equal(t, Undecided, res.StarvationFree, "stopped at %d of %d states", res.States, full)
	assert.Equal(t, -1, res.MaxOvertakes, "no bound on overtaking either")
}

// Class: symmetry hiding a violation. Check has no symmetry reduction:
// it never merges states that differ by a permutation of peers. What it
// has is a partial-order reduction (PartialOrder, -por), which keeps
// safety and deadlocks but not the cycles of fair runs (persistent sets
// can defer a delivery round a loop for ever), so liveness must not be
// computed from it; and state merging for clock machines (stamps written
// less the least, and StampGaps), which TestStampGapsKeepsLiveness and
// TestLivenessClockShiftKeepsStarvation cover. Broken checker that failed
// this test: StarvationFree left true when the search kept no graph
// (liveness's graph test dropped).
func TestLivenessNotHiddenByPartialOrder(t *testing.T) {
	cfg := CheckConfig{Algorithm: Centralized, N: 3, RequestsPerPeer: []int{0, 0, 1},
		build: func(id, _ int) machine { return &sideNote{id: id} }}
	require.Equal(t, Refuted, checkBoth(t, cfg).StarvationFree)

	cfg.PartialOrder = true
	res, err := Check(context.Background(), cfg)
	if err == nil {
		// Should PartialOrder ever run with the graph, it must still
		// find the starvation.
		assert.Equal(t, Refuted, res.StarvationFree)
	} else {
		require.ErrorIs(t, err, ErrInvalidConfig)
	}

	cfg.SafetyOnly = true
	res = checkBoth(t, cfg)
	require.True(t, res.Complete && res.PartialOrder)
	assert.False(t, res.Liveness)
	assert.Equal(t, Undecided, res.StarvationFree, "a reduced search does not decide liveness")
}

// Class: parallel search missing a violation. Check's search runs in one
// goroutine, and the fair-cycle search after it too; there is no parallel
// search to miss one. Should one come, every test above must pass with it.

// clockPing is sideNote's starvation with Lamport clocks: P2's request
// (stamp 0, P2 keeps no clock) starts a ping between P0 and P1 whose
// stamps grow for ever, and is never granted. Only the world's encoding
// of stamps less the least one (clockMachine, over FIFO queues) makes the
// ping a cycle of states; without it the states never repeat.
type clockPing struct {
	id      int
	clock   uint64
	pinging bool
}

func (c *clockPing) step(ev event, out *output) {
	switch {
	case c.id == 2 && ev.kind == evRequest:
		out.send(Message{Kind: KindRequest, From: 2, To: 0})
	case c.id == 2 || ev.kind != evMessage:
	case ev.msg.Kind == KindRequest:
		if !c.pinging {
			c.pinging = true
			c.clock++
			out.send(Message{Kind: KindInquire, From: 0, To: 1, TS: c.clock})
		}
	case ev.msg.Kind == KindInquire:
		c.clock = max(c.clock, ev.msg.TS) + 1
		out.send(Message{Kind: KindInquire, From: c.id, To: 1 - c.id, TS: c.clock})
	}
}
func (c *clockPing) clone() machine              { d := *c; return &d }
func (c *clockPing) appendState(b []byte) []byte { return c.appendStateIn(b, false, nil) }
func (c *clockPing) appendStateIn(b []byte, _ bool, sm *stampMap) []byte {
	b = appendBool(b, c.pinging)
	if c.id == 2 {
		return b
	}
	return appendUint(b, sm.of(c.clock))
}
func (c *clockPing) appendStamps(s []uint64, _ bool) []uint64 {
	if c.id == 2 {
		return s
	}
	return append(s, c.clock)
}
func (c *clockPing) entryEvents(n int) int     { return 2 }
func (c *clockPing) carriesTry(m Message) bool { return false }

// clockPing is a clockMachine: the test is empty without it.
var _ clockMachine = (*clockPing)(nil)

// TestLivenessClockShiftKeepsStarvation: the one merging of states Check
// does besides hashing, stamps written less the least (and StampGaps),
// must keep a starvation that only it makes finite, and its loop must be
// a fair run of the merged states; over a bag, where stamps are kept as
// they are, the states never repeat and a bounded search decides nothing.
// Broken checker that failed it: the shift never applied (World.classify
// setting clocks false), which leaves the FIFO search without end.
func TestLivenessClockShiftKeepsStarvation(t *testing.T) {
	build := func(id, _ int) machine { return &clockPing{id: id} }
	for _, gaps := range []bool{false, true} {
		t.Run(fmt.Sprintf("fifo/stampGaps=%v", gaps), func(t *testing.T) {
			cfg := CheckConfig{Algorithm: Lamport, N: 3, RequestsPerPeer: []int{0, 0, 1}, StampGaps: gaps,
				MaxStates: 10_000, build: build}
			res := checkBoth(t, cfg)
			require.True(t, res.Complete, "the shift makes the ping a cycle")
			assert.Equal(t, Refuted, res.StarvationFree)
			requireFairLasso(t, cfg, res.Violation, 2)
		})
	}
	t.Run("unordered", func(t *testing.T) {
		res := checkBoth(t, CheckConfig{Algorithm: Lamport, N: 3, RequestsPerPeer: []int{0, 0, 1}, Network: NetworkUnordered,
			MaxStates: 2_000, build: build})
		assert.False(t, res.Complete)
		assert.NotEqual(t, Holds, res.StarvationFree)
	})
}
