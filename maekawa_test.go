package dmutex

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Machine-level tests of Maekawa: no goroutines, no transport, no sleeps.

// newMK builds peer id's machine for the given voting sets.
func newMK(t *testing.T, id int, sets [][]int) *maekawa {
	t.Helper()
	cfg, err := newConfig(Maekawa, len(sets), forSimulation, []Option{WithVotingSets(sets)})
	require.NoError(t, err)
	m, err := cfg.newMachine(Maekawa, id, len(sets))
	require.NoError(t, err)
	return m.(*maekawa)
}

// An mkStep is one event fed to a machine and what it must cause. Sent
// messages are compared on Kind, From, To and TS (Ref is the sender's
// clock, checked separately).
type mkStep struct {
	ev    event
	want  []Message
	enter bool
}

func request() event { return event{kind: evRequest} }
func release() event { return event{kind: evRelease} }

// recv is the message kind from peer from to peer to about the request
// stamped ts.
func recv(kind MessageKind, from, to int, ts uint64) event {
	return event{kind: evMessage, msg: Message{Kind: kind, From: from, To: to, TS: ts}}
}

func msg(kind MessageKind, from, to int, ts uint64) Message {
	return Message{Kind: kind, From: from, To: to, TS: ts}
}

func TestMaekawaSteps(t *testing.T) {
	all3 := [][]int{{0, 1, 2}, {0, 1, 2}, {0, 1, 2}}
	all4 := [][]int{{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}}
	tests := []struct {
		name  string
		sets  [][]int
		id    int
		steps []mkStep
	}{
		{
			name: "uncontended entry asks only the others, votes for itself locally",
			sets: all3, id: 0,
			steps: []mkStep{
				{ev: request(), want: []Message{msg(KindRequest, 0, 1, 1), msg(KindRequest, 0, 2, 1)}},
				{ev: recv(KindLocked, 1, 0, 1)},
				{ev: recv(KindLocked, 2, 0, 1), enter: true},
				{ev: release(), want: []Message{msg(KindRelease, 0, 1, 1), msg(KindRelease, 0, 2, 1)}},
			},
		},
		{
			name: "a lone peer enters without messages",
			sets: [][]int{{0}}, id: 0,
			steps: []mkStep{
				{ev: request(), enter: true},
				{ev: release()},
				{ev: request(), enter: true},
			},
		},
		{
			name: "INQUIRE is kept while not losing, and answered on FAILED",
			sets: all3, id: 0,
			steps: []mkStep{
				{ev: request(), want: []Message{msg(KindRequest, 0, 1, 1), msg(KindRequest, 0, 2, 1)}},
				{ev: recv(KindLocked, 1, 0, 1)},
				{ev: recv(KindInquire, 1, 0, 1)},
				{ev: recv(KindFailed, 2, 0, 1), want: []Message{msg(KindRelinquish, 0, 1, 1)}},
				{ev: recv(KindLocked, 1, 0, 1)},              // voter 1 votes for us again
				{ev: recv(KindLocked, 2, 0, 1), enter: true}, // FAILED is forgotten once 2 votes
			},
		},
		{
			name: "INQUIRE after FAILED is answered at once",
			sets: all3, id: 0,
			steps: []mkStep{
				{ev: request(), want: []Message{msg(KindRequest, 0, 1, 1), msg(KindRequest, 0, 2, 1)}},
				{ev: recv(KindFailed, 2, 0, 1)},
				{ev: recv(KindLocked, 1, 0, 1)},
				{ev: recv(KindInquire, 1, 0, 1), want: []Message{msg(KindRelinquish, 0, 1, 1)}},
				{ev: recv(KindInquire, 1, 0, 1)}, // not ours any more: nothing to give back
			},
		},
		{
			name: "INQUIRE before its LOCKED, losing: yield as soon as the vote arrives",
			sets: all3, id: 0,
			steps: []mkStep{
				{ev: request(), want: []Message{msg(KindRequest, 0, 1, 1), msg(KindRequest, 0, 2, 1)}},
				{ev: recv(KindFailed, 2, 0, 1)},
				{ev: recv(KindInquire, 1, 0, 1)}, // overtook its LOCKED: no vote to give back yet
				{ev: recv(KindLocked, 1, 0, 1), want: []Message{msg(KindRelinquish, 0, 1, 1)}},
			},
		},
		{
			name: "INQUIRE before its LOCKED, winning: enter and answer with RELEASE",
			sets: all3, id: 0,
			steps: []mkStep{
				{ev: request(), want: []Message{msg(KindRequest, 0, 1, 1), msg(KindRequest, 0, 2, 1)}},
				{ev: recv(KindInquire, 1, 0, 1)},
				{ev: recv(KindLocked, 2, 0, 1)},
				{ev: recv(KindLocked, 1, 0, 1), enter: true},
				{ev: recv(KindFailed, 2, 0, 1)}, // inside: nothing to yield
				{ev: release(), want: []Message{msg(KindRelease, 0, 1, 1), msg(KindRelease, 0, 2, 1)}},
			},
		},
		{
			name: "INQUIRE inside the critical section is answered by RELEASE only",
			sets: all3, id: 0,
			steps: []mkStep{
				{ev: request(), want: []Message{msg(KindRequest, 0, 1, 1), msg(KindRequest, 0, 2, 1)}},
				{ev: recv(KindLocked, 1, 0, 1)},
				{ev: recv(KindLocked, 2, 0, 1), enter: true},
				{ev: recv(KindInquire, 2, 0, 1)},
				{ev: release(), want: []Message{msg(KindRelease, 0, 1, 1), msg(KindRelease, 0, 2, 1)}},
				{ev: recv(KindInquire, 1, 0, 1)}, // after the release: stale
			},
		},
		{
			name: "stale answers are ignored",
			sets: all3, id: 0,
			steps: []mkStep{
				{ev: recv(KindLocked, 1, 0, 0)}, // no request out
				{ev: recv(KindFailed, 1, 0, 0)},
				{ev: request(), want: []Message{msg(KindRequest, 0, 1, 1), msg(KindRequest, 0, 2, 1)}},
				{ev: recv(KindLocked, 1, 0, 7)}, // another request's vote
				{ev: recv(KindLocked, 2, 0, 1)},
				{ev: recv(KindInquire, 2, 0, 7)},
				{ev: recv(KindFailed, 1, 0, 0)},
				{ev: recv(KindLocked, 1, 0, 1), enter: true},
			},
		},
		{
			name: "yielding the own vote goes through the local voter",
			sets: all3, id: 2,
			steps: []mkStep{
				// Our own vote is local: only 0 and 1 are asked.
				{ev: request(), want: []Message{msg(KindRequest, 2, 0, 1), msg(KindRequest, 2, 1, 1)}},
				// 0's request (1, 0) beats ours (1, 2): our voter inquires
				// our requester, which does not know yet that it loses.
				{ev: recv(KindRequest, 0, 2, 1)},
				// Now it knows: it yields to its own voter, which votes for 0.
				{ev: recv(KindFailed, 1, 2, 1), want: []Message{msg(KindLocked, 2, 0, 1)}},
				{ev: recv(KindLocked, 0, 2, 1)},
				{ev: recv(KindRelease, 0, 2, 1)}, // our vote comes back to us
				{ev: recv(KindLocked, 1, 2, 1), enter: true},
			},
		},
		{
			name: "voter: free votes, locked answers FAILED to a worse request",
			sets: all3, id: 0,
			steps: []mkStep{
				{ev: recv(KindRequest, 1, 0, 5), want: []Message{msg(KindLocked, 0, 1, 5)}},
				{ev: recv(KindRequest, 2, 0, 7), want: []Message{msg(KindFailed, 0, 2, 7)}},
				{ev: recv(KindRelease, 1, 0, 5), want: []Message{msg(KindLocked, 0, 2, 7)}},
				{ev: recv(KindRelease, 2, 0, 7)},
				{ev: recv(KindRequest, 1, 0, 8), want: []Message{msg(KindLocked, 0, 1, 8)}},
			},
		},
		{
			name: "voter: a better request gets INQUIRE sent once, and displaces a waiting one with FAILED",
			sets: all4, id: 0,
			steps: []mkStep{
				{ev: recv(KindRequest, 1, 0, 5), want: []Message{msg(KindLocked, 0, 1, 5)}},
				{ev: recv(KindRequest, 2, 0, 3), want: []Message{msg(KindInquire, 0, 1, 5)}},
				{ev: recv(KindRequest, 3, 0, 2), want: []Message{msg(KindFailed, 0, 2, 3)}},
				{ev: recv(KindRelinquish, 1, 0, 5), want: []Message{msg(KindLocked, 0, 3, 2)}},
				{ev: recv(KindRelease, 3, 0, 2), want: []Message{msg(KindLocked, 0, 2, 3)}},
				{ev: recv(KindRelease, 2, 0, 3), want: []Message{msg(KindLocked, 0, 1, 5)}},
				{ev: recv(KindRelease, 1, 0, 5)},
			},
		},
		{
			name: "voter: a tie on the timestamp goes to the smaller id",
			sets: all3, id: 0,
			steps: []mkStep{
				{ev: recv(KindRequest, 2, 0, 4), want: []Message{msg(KindLocked, 0, 2, 4)}},
				{ev: recv(KindRequest, 1, 0, 4), want: []Message{msg(KindInquire, 0, 2, 4)}},
			},
		},
		{
			// A refused try sends RELEASE also to the voters that said
			// busy, and its timestamp may equal the grantee's; no correct
			// peer sends such a RELINQUISH, but it must not move the vote
			// either.
			name: "voter: RELINQUISH and RELEASE from another peer with the grantee's timestamp are ignored",
			sets: all3, id: 0,
			steps: []mkStep{
				{ev: recv(KindRequest, 1, 0, 5), want: []Message{msg(KindLocked, 0, 1, 5)}},
				{ev: recv(KindTry, 2, 0, 5), want: []Message{msg(KindBusy, 0, 2, 5)}},
				{ev: recv(KindRelinquish, 2, 0, 5)},
				{ev: recv(KindRelease, 2, 0, 5)},
				{ev: recv(KindRequest, 2, 0, 6), want: []Message{msg(KindFailed, 0, 2, 6)}}, // the vote is still with 1
			},
		},
		{
			// No correct voter sends these, and the transport contract
			// rules out duplicates; the try must still count each
			// voter's first answer only.
			name: "a try counts one answer per voter, and no INQUIRE or FAILED",
			sets: all3, id: 0,
			steps: []mkStep{
				{ev: event{kind: evTry}, want: []Message{msg(KindTry, 0, 1, 1), msg(KindTry, 0, 2, 1)}},
				{ev: recv(KindBusy, 1, 0, 1)},
				{ev: recv(KindLocked, 1, 0, 1)}, // a second answer from 1: still busy
				{ev: recv(KindInquire, 2, 0, 1)},
				{ev: recv(KindFailed, 2, 0, 1)},
				{ev: recv(KindLocked, 2, 0, 1), want: []Message{msg(KindRelease, 0, 1, 1), msg(KindRelease, 0, 2, 1)}},
			},
		},
		{
			name: "voter: stale RELINQUISH and RELEASE are ignored",
			sets: all3, id: 0,
			steps: []mkStep{
				{ev: recv(KindRequest, 1, 0, 5), want: []Message{msg(KindLocked, 0, 1, 5)}},
				{ev: recv(KindRequest, 2, 0, 7), want: []Message{msg(KindFailed, 0, 2, 7)}},
				{ev: recv(KindRelinquish, 2, 0, 7)}, // not the grantee
				{ev: recv(KindRelease, 1, 0, 4)},    // an older request of 1
				{ev: recv(KindRelinquish, 1, 0, 6)}, // a later one
				{ev: recv(KindRelease, 1, 0, 5), want: []Message{msg(KindLocked, 0, 2, 7)}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMK(t, tt.id, tt.sets)
			var out output
			for i, s := range tt.steps {
				out.reset()
				m.step(s.ev, &out)
				got := make([]Message, len(out.msgs))
				for k, g := range out.msgs {
					require.GreaterOrEqual(t, m.clock, g.Ref, "step %d: Ref must be the sender's clock", i)
					g.Ref = 0
					got[k] = g
				}
				if len(s.want) == 0 {
					s.want = []Message{}
				}
				require.Equal(t, s.want, got, "step %d: %v", i, s.ev)
				require.Equal(t, s.enter, out.entered, "step %d: entered", i)
				require.Empty(t, m.local, "step %d: local messages left over", i)
			}
		})
	}
}

// TestMaekawaClockPropagates checks that a requester learns a voter's
// clock from the voter's answers, so that its next request is stamped
// after the older request it lost to.
func TestMaekawaClockPropagates(t *testing.T) {
	sets := [][]int{{0, 1}, {0, 1}}
	voter, req := newMK(t, 0, sets), newMK(t, 1, sets)
	var out output
	voter.step(recv(KindRequest, 1, 0, 40), &out) // some old request raised 0's clock
	voter.step(recv(KindRelease, 1, 0, 40), &out)
	out.reset()
	req.step(request(), &out)
	require.Len(t, out.msgs, 1)
	out2 := output{}
	voter.step(event{kind: evMessage, msg: out.msgs[0]}, &out2) // 1's REQUEST, stamped 1
	require.Len(t, out2.msgs, 1)
	assert.Equal(t, uint64(40), out2.msgs[0].Ref, "LOCKED carries the voter's clock")
	out.reset()
	req.step(event{kind: evMessage, msg: out2.msgs[0]}, &out)
	require.True(t, out.entered)
	req.step(release(), &out)
	out.reset()
	req.step(request(), &out)
	assert.Equal(t, uint64(41), out.msgs[0].TS, "the next request is stamped after the voter's clock")
}

func TestMaekawaCloneIsDeep(t *testing.T) {
	sets := [][]int{{0, 1, 2}, {0, 1, 2}, {0, 1, 2}}
	m := newMK(t, 0, sets)
	var out output
	m.step(request(), &out)
	m.step(recv(KindLocked, 1, 0, 1), &out)
	m.step(recv(KindRequest, 2, 0, 9), &out)
	before := m.appendState(nil)
	c := m.clone()
	assert.Equal(t, before, c.appendState(nil), "a clone encodes like the original")

	out.reset()
	c.step(recv(KindInquire, 1, 0, 1), &out)
	c.step(recv(KindFailed, 2, 0, 1), &out)
	c.step(recv(KindRequest, 1, 0, 0), &out)
	assert.Equal(t, before, m.appendState(nil), "stepping the clone must not change the original")
	assert.NotEqual(t, before, c.appendState(nil))
}

// TestMaekawaDescribeFollowsState checks the state the explorer shows
// through a request, a try that enters and a try that is refused: each
// ends idle with no request, a try that got every vote is held, and an
// INQUIRE kept while waiting is forgotten on entry.
func TestMaekawaDescribeFollowsState(t *testing.T) {
	m := newMK(t, 0, [][]int{{0, 1}, {0, 1}})
	var out output
	step := func(ev event) {
		t.Helper()
		out.reset()
		m.step(ev, &out)
	}
	shows := func(state, request string) {
		t.Helper()
		assert.Contains(t, m.describe(), StateField{"state", state})
		assert.Contains(t, m.describe(), StateField{"request", request})
	}
	step(request())
	shows("wanting", "ts=1")
	step(recv(KindInquire, 1, 0, 1)) // overtook its LOCKED: kept
	assert.Contains(t, m.describe(), StateField{"votes", "[P0:locked P1:-(inquired)]"})
	step(recv(KindLocked, 1, 0, 1))
	require.True(t, out.entered)
	shows("held", "ts=1")
	assert.Contains(t, m.describe(), StateField{"votes", "[P0:locked P1:locked]"}, "inside, the RELEASE answers the INQUIRE")
	step(release())
	shows("idle", "none")

	step(event{kind: evTry})
	shows("trying", "ts=2")
	step(recv(KindLocked, 1, 0, 2))
	require.True(t, out.entered)
	shows("held", "ts=2")
	step(release())
	shows("idle", "none")

	step(event{kind: evTry})
	step(recv(KindBusy, 1, 0, 3))
	require.True(t, out.refused)
	shows("idle", "none")
}

// TestMaekawaNeeds checks that a request needs the other members of the
// voting set, and only them (WithUnreachableAfter).
func TestMaekawaNeeds(t *testing.T) {
	sets := [][]int{{0, 1, 2}, {0, 1, 3}, {0, 2, 3}, {1, 2, 3}}
	assert.Equal(t, []int{0, 3}, newMK(t, 1, sets).needs(nil))
	assert.Empty(t, newMK(t, 0, [][]int{{0}}).needs(nil), "a lone peer needs nobody")
}

// TestMaekawaStateShowsEveryField checks that the encoding tells apart
// two machines that differ in one field, each of which changes what the
// machine does next. The model checker's counts do not show a missing
// field: in a reachable world the other machines and the messages in
// flight repeat most of them, but the encoding is the machine's own
// promise.
func TestMaekawaStateShowsEveryField(t *testing.T) {
	// Peer 0 wants (ts 6) and holds its own vote; as a voter it has
	// voted for peer 1's request (5, 1) and queued peer 2's (7, 2).
	build := func() *maekawa {
		m := newMK(t, 0, [][]int{{0, 1, 2}, {0, 1, 2}, {0, 1, 2}})
		var out output
		m.step(recv(KindRequest, 1, 0, 5), &out)
		m.step(request(), &out)
		m.step(recv(KindRequest, 2, 0, 7), &out)
		return m
	}
	base := build()
	require.Equal(t, mkWanting, base.state)
	require.Equal(t, 1, base.grantTo)
	require.Len(t, base.queue, 2)
	enc := base.appendState(nil)
	for name, change := range map[string]func(m *maekawa){
		"state":        func(m *maekawa) { m.state = mkTrying },
		"request ts":   func(m *maekawa) { m.ts++ },
		"vote":         func(m *maekawa) { m.votes[1] = voteFailed },
		"inquiry":      func(m *maekawa) { m.inquiry[1] = true },
		"grantee":      func(m *maekawa) { m.grantTo = 2 },
		"grant ts":     func(m *maekawa) { m.grantTS++ },
		"grant is try": func(m *maekawa) { m.grantTry = true },
		"inquired":     func(m *maekawa) { m.inquired = true },
		"queue length": func(m *maekawa) { m.queue = m.queue[:1] },
		"entry ts":     func(m *maekawa) { m.queue[1].ts++ },
		"entry id":     func(m *maekawa) { m.queue[1].id = 1 },
		"entry failed": func(m *maekawa) { m.queue[0].failed = !m.queue[0].failed },
	} {
		m := build()
		change(m)
		assert.NotEqual(t, enc, m.appendState(nil), name)
	}
}
