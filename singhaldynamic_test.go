package dmutex

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newSinghalDynamicMachine(t *testing.T, id, n int) *singhalDynamic {
	t.Helper()
	cfg, err := newConfig(SinghalDynamic, n, forSimulation, nil)
	require.NoError(t, err)
	m, err := cfg.newMachine(SinghalDynamic, id, n)
	require.NoError(t, err)
	return m.(*singhalDynamic)
}

// sdStep steps s with ev and returns a copy of what it sent, and whether
// it entered and whether it refused a try.
func sdStep(s *singhalDynamic, ev event) (msgs []Message, entered, refused bool) {
	var out output
	s.step(ev, &out)
	return append([]Message(nil), out.msgs...), out.entered, out.refused
}

func sdMsg(k MessageKind, from, to int, ts, ref uint64) event {
	return event{kind: evMessage, msg: Message{Kind: k, From: from, To: to, TS: ts, Ref: ref}}
}

// TestSinghalDynamicStaircase pins the starting request sets: R_i holds
// the peers below i, so that peer 0 asks nobody and the last peer asks
// all; every inform set is empty.
func TestSinghalDynamicStaircase(t *testing.T) {
	for id, want := range [][]bool{
		{false, false, false, false},
		{true, false, false, false},
		{true, true, false, false},
		{true, true, true, false},
	} {
		s := newSinghalDynamicMachine(t, id, 4)
		assert.Equal(t, want, s.rset, "peer %d", id)
		assert.Equal(t, id, s.nr, "peer %d", id)
		assert.Equal(t, []uint64{0, 0, 0, 0}, s.iset, "peer %d", id)
		var r []int
		for j := range id {
			r = append(r, j)
		}
		assert.Equal(t, r, s.needs(nil), "peer %d needs its request set", id)
	}
}

// TestSinghalDynamicStep pins the paper's rules one by one: the request
// to R_i, the three answers to a request, the entry when R_i is empty and
// the replies to I_i on leaving.
func TestSinghalDynamicStep(t *testing.T) {
	t.Run("a peer with an empty request set enters with no message and no tick", func(t *testing.T) {
		s := newSinghalDynamicMachine(t, 0, 3)
		before := s.appendState(nil)
		msgs, entered, _ := sdStep(s, event{kind: evRequest})
		assert.Empty(t, msgs)
		assert.True(t, entered)
		msgs, _, _ = sdStep(s, event{kind: evRelease})
		assert.Empty(t, msgs)
		assert.Equal(t, before, s.appendState(nil), "the same state again, for the fast path")
	})
	t.Run("a peer asks its request set, and each reply takes its sender out", func(t *testing.T) {
		s := newSinghalDynamicMachine(t, 2, 3) // R_2 = {0, 1}
		msgs, entered, _ := sdStep(s, event{kind: evRequest})
		assert.Equal(t, []Message{
			{Kind: KindRequest, From: 2, To: 0, TS: 1},
			{Kind: KindRequest, From: 2, To: 1, TS: 1},
		}, msgs)
		assert.False(t, entered)
		_, entered, _ = sdStep(s, sdMsg(KindReply, 1, 2, 1, 1))
		assert.False(t, entered)
		assert.Equal(t, []bool{true, false, false}, s.rset)
		_, entered, _ = sdStep(s, sdMsg(KindReply, 0, 2, 1, 1))
		assert.True(t, entered, "R_2 is empty")
		msgs, _, _ = sdStep(s, event{kind: evRelease})
		assert.Empty(t, msgs, "nobody is in I_2")
		msgs, entered, _ = sdStep(s, event{kind: evRequest})
		assert.Empty(t, msgs, "nobody entered since: R_2 stays empty")
		assert.True(t, entered)
	})
	t.Run("an idle peer replies and puts the requester in its request set", func(t *testing.T) {
		s := newSinghalDynamicMachine(t, 0, 3)
		msgs, _, _ := sdStep(s, sdMsg(KindRequest, 2, 0, 5, 0))
		assert.Equal(t, []Message{{Kind: KindReply, From: 0, To: 2, TS: 5, Ref: 5}}, msgs)
		assert.Equal(t, []bool{false, false, true}, s.rset)
		msgs, _, _ = sdStep(s, event{kind: evRequest})
		assert.Equal(t, []Message{{Kind: KindRequest, From: 0, To: 2, TS: 6}}, msgs,
			"the requester is asked next time, with a request younger than any seen")
	})
	t.Run("an executing peer puts the requester in its inform set and replies on leaving", func(t *testing.T) {
		s := newSinghalDynamicMachine(t, 0, 2)
		_, entered, _ := sdStep(s, event{kind: evRequest})
		require.True(t, entered)
		msgs, _, _ := sdStep(s, sdMsg(KindRequest, 1, 0, 1, 0))
		assert.Empty(t, msgs)
		assert.Equal(t, []uint64{0, 1}, s.iset)
		msgs, _, _ = sdStep(s, event{kind: evRelease})
		assert.Equal(t, []Message{{Kind: KindReply, From: 0, To: 1, TS: 1, Ref: 1}}, msgs)
		assert.Equal(t, []uint64{0, 0}, s.iset)
		assert.Equal(t, []bool{false, true}, s.rset, "I_0 moved to R_0")
	})
	t.Run("a requesting peer keeps a younger request and yields to an older one, asking it back", func(t *testing.T) {
		s := newSinghalDynamicMachine(t, 1, 3) // R_1 = {0}
		sdStep(s, event{kind: evRequest})      // ts 1
		msgs, _, _ := sdStep(s, sdMsg(KindRequest, 2, 1, 1, 0))
		assert.Empty(t, msgs, "(1, 1) goes before (1, 2)")
		assert.Equal(t, uint64(1), s.iset[2])

		y := newSinghalDynamicMachine(t, 1, 3)
		y.clock = 3
		msgs, _, _ = sdStep(y, event{kind: evRequest})
		require.Equal(t, []Message{{Kind: KindRequest, From: 1, To: 0, TS: 4}}, msgs)
		msgs, _, _ = sdStep(y, sdMsg(KindRequest, 2, 1, 2, 0))
		assert.Equal(t, []Message{
			{Kind: KindReply, From: 1, To: 2, TS: 4, Ref: 2},
			{Kind: KindRequest, From: 1, To: 2, TS: 4},
		}, msgs, "(2, 2) goes first: a reply, and the request with its own stamp")
		assert.Zero(t, y.iset[2])
		assert.Equal(t, []bool{true, false, true}, y.rset)

		// The requester already in R_i (asked already, and answered by
		// a busy for an earlier try) gets the reply and no second request.
		z := newSinghalDynamicMachine(t, 2, 3) // R_2 = {0, 1}
		z.clock = 3
		z.state, z.ts = raWanted, 4
		msgs, _, _ = sdStep(z, sdMsg(KindRequest, 0, 2, 2, 0))
		assert.Equal(t, []Message{
			{Kind: KindReply, From: 2, To: 0, TS: 3, Ref: 2},
			{Kind: KindRequest, From: 2, To: 0, TS: 4},
		}, msgs, "asked again only because no question to 0 is out")
		msgs, _, _ = sdStep(z, sdMsg(KindRequest, 1, 2, 3, 0))
		assert.Len(t, msgs, 2)
		assert.Equal(t, []bool{true, true, false}, z.asked)
		assert.Equal(t, 2, z.nr, "R_2 unchanged")
	})
	t.Run("a request from a peer whose reply is on its way waits for it", func(t *testing.T) {
		s := newSinghalDynamicMachine(t, 2, 3) // R_2 = {0, 1}
		sdStep(s, event{kind: evRequest})      // ts 1, to 0 and 1
		// Peer 0 replied, put 2 in R_0 and, on its next request, asks 2:
		// the request overtakes the reply.
		msgs, _, _ := sdStep(s, sdMsg(KindRequest, 0, 2, 2, 0))
		assert.Empty(t, msgs, "0's reply is not here yet")
		msgs, _, _ = sdStep(s, sdMsg(KindReply, 0, 2, 1, 1))
		assert.Empty(t, msgs, "(1, 2) goes before (2, 0): kept in I_2")
		_, entered, _ := sdStep(s, sdMsg(KindReply, 1, 2, 1, 1))
		require.True(t, entered)
		msgs, _, _ = sdStep(s, event{kind: evRelease})
		assert.Equal(t, []Message{{Kind: KindReply, From: 2, To: 0, TS: 2, Ref: 2}}, msgs)

		idle := newSinghalDynamicMachine(t, 2, 3)
		idle.asked[0] = true // a refused try's question to 0 is out
		msgs, _, _ = sdStep(idle, sdMsg(KindRequest, 0, 2, 2, 0))
		assert.Empty(t, msgs)
		msgs, _, _ = sdStep(idle, sdMsg(KindReply, 0, 2, 1, 1))
		assert.Equal(t, []Message{{Kind: KindReply, From: 2, To: 0, TS: 2, Ref: 2}}, msgs,
			"an idle peer answers once the reply it waited for is in")
		assert.Equal(t, []bool{true, true, false}, idle.rset, "and 0 is back in R_2")
	})
	t.Run("stray and duplicate replies count once", func(t *testing.T) {
		s := newSinghalDynamicMachine(t, 2, 3)
		sdStep(s, event{kind: evRequest})
		for _, ev := range []event{
			sdMsg(KindReply, 0, 2, 1, 1),
			sdMsg(KindReply, 0, 2, 1, 1),
			sdMsg(KindRelease, 1, 2, 1, 1),
			sdMsg(KindToken, 1, 2, 1, 1),
		} {
			_, entered, _ := sdStep(s, ev)
			require.False(t, entered, "%+v", ev.msg)
		}
		assert.Equal(t, 1, s.nr)
		_, entered, _ := sdStep(s, sdMsg(KindReply, 1, 2, 1, 1))
		assert.True(t, entered)
	})
	t.Run("a lone peer enters on its request", func(t *testing.T) {
		s := newSinghalDynamicMachine(t, 0, 1)
		msgs, entered, _ := sdStep(s, event{kind: evRequest})
		assert.Empty(t, msgs)
		assert.True(t, entered)
	})
}

// TestSinghalDynamicTryStep pins the try path: it is answered at once,
// never kept, and refused on the busy for the try outstanding only.
func TestSinghalDynamicTryStep(t *testing.T) {
	t.Run("a try with an empty request set enters at once", func(t *testing.T) {
		s := newSinghalDynamicMachine(t, 0, 3)
		msgs, entered, _ := sdStep(s, event{kind: evTry})
		assert.Empty(t, msgs)
		assert.True(t, entered)
		assert.False(t, s.trying)
	})
	t.Run("a try is answered at once: busy by a holder, by an older request, and while a question to it is out", func(t *testing.T) {
		s := newSinghalDynamicMachine(t, 0, 3)
		sdStep(s, event{kind: evRequest}) // enters
		msgs, _, _ := sdStep(s, sdMsg(KindTry, 1, 0, 4, 0))
		assert.Equal(t, []Message{{Kind: KindBusy, From: 0, To: 1, TS: 4, Ref: 4}}, msgs)
		assert.Zero(t, s.iset[1], "a try is never kept")

		w := newSinghalDynamicMachine(t, 1, 3)
		sdStep(w, event{kind: evRequest}) // ts 1
		msgs, _, _ = sdStep(w, sdMsg(KindTry, 2, 1, 1, 0))
		assert.Equal(t, []Message{{Kind: KindBusy, From: 1, To: 2, TS: 1, Ref: 1}}, msgs)

		a := newSinghalDynamicMachine(t, 2, 3)
		a.asked[0] = true
		msgs, _, _ = sdStep(a, sdMsg(KindTry, 0, 2, 3, 0))
		assert.Equal(t, []Message{{Kind: KindBusy, From: 2, To: 0, TS: 3, Ref: 3}}, msgs,
			"peer 2 waits for 0's reply")

		i := newSinghalDynamicMachine(t, 2, 3)
		msgs, _, _ = sdStep(i, sdMsg(KindTry, 0, 2, 3, 0))
		assert.Equal(t, []Message{{Kind: KindReply, From: 2, To: 0, TS: 3, Ref: 3}}, msgs,
			"an idle peer replies to a try as to a request")
	})
	t.Run("a try that goes first gets a reply and the request back", func(t *testing.T) {
		w := newSinghalDynamicMachine(t, 1, 3)
		w.clock = 5
		msgs, _, _ := sdStep(w, event{kind: evRequest})
		require.Equal(t, []Message{{Kind: KindRequest, From: 1, To: 0, TS: 6}}, msgs)
		msgs, _, _ = sdStep(w, sdMsg(KindTry, 2, 1, 2, 0))
		assert.Equal(t, []Message{
			{Kind: KindReply, From: 1, To: 2, TS: 6, Ref: 2},
			{Kind: KindRequest, From: 1, To: 2, TS: 6},
		}, msgs)
	})
	t.Run("only the busy for the try outstanding refuses it", func(t *testing.T) {
		s := newSinghalDynamicMachine(t, 2, 3)
		msgs, _, _ := sdStep(s, event{kind: evTry}) // ts 1
		require.Len(t, msgs, 2)
		_, _, refused := sdStep(s, sdMsg(KindBusy, 0, 2, 1, 1))
		require.True(t, refused)
		assert.Equal(t, []bool{false, true, false}, s.asked, "1 has not answered")
		assert.Contains(t, s.describe(), StateField{"request", "none"}, "the refused try is over")
		msgs, _, _ = sdStep(s, event{kind: evTry}) // ts 2
		assert.Equal(t, []Message{{Kind: KindTry, From: 2, To: 0, TS: 2}}, msgs, "1's answer to the first try will do")
		msgs, _, refused = sdStep(s, sdMsg(KindBusy, 1, 2, 1, 1))
		assert.False(t, refused, "a busy for the first try")
		assert.Equal(t, []Message{{Kind: KindTry, From: 2, To: 1, TS: 2}}, msgs, "so the second asks 1 now")
		sdStep(s, sdMsg(KindReply, 0, 2, 2, 2))
		_, entered, _ := sdStep(s, sdMsg(KindReply, 1, 2, 2, 2))
		assert.True(t, entered)
		assert.False(t, s.trying)
	})
	t.Run("a busy for a refused try makes the request outstanding ask", func(t *testing.T) {
		s := newSinghalDynamicMachine(t, 2, 3)
		sdStep(s, event{kind: evTry}) // ts 1
		_, _, refused := sdStep(s, sdMsg(KindBusy, 0, 2, 1, 1))
		require.True(t, refused)
		msgs, _, _ := sdStep(s, event{kind: evRequest}) // ts 2
		assert.Equal(t, []Message{{Kind: KindRequest, From: 2, To: 0, TS: 2}}, msgs)
		msgs, _, _ = sdStep(s, sdMsg(KindBusy, 1, 2, 1, 1))
		assert.Equal(t, []Message{{Kind: KindRequest, From: 2, To: 1, TS: 2}}, msgs)
	})
	t.Run("a reply to a refused try takes its sender out of the request set", func(t *testing.T) {
		s := newSinghalDynamicMachine(t, 2, 3)
		sdStep(s, event{kind: evTry})
		sdStep(s, sdMsg(KindBusy, 0, 2, 1, 1))
		msgs, entered, _ := sdStep(s, sdMsg(KindReply, 1, 2, 1, 1))
		assert.Empty(t, msgs)
		assert.False(t, entered)
		assert.Equal(t, []bool{true, false, false}, s.rset)
		assert.Empty(t, s.idleViolation())
	})
	t.Run("a try that must reply to an older request is refused, and answers what it kept", func(t *testing.T) {
		s := newSinghalDynamicMachine(t, 1, 3) // R_1 = {0}
		s.clock = 3
		msgs, _, _ := sdStep(s, event{kind: evTry}) // ts 4
		require.Equal(t, []Message{{Kind: KindTry, From: 1, To: 0, TS: 4}}, msgs)
		msgs, _, refused := sdStep(s, sdMsg(KindRequest, 2, 1, 2, 0))
		assert.True(t, refused)
		assert.Equal(t, []Message{{Kind: KindReply, From: 1, To: 2, TS: 4, Ref: 2}}, msgs)
		assert.Equal(t, raReleased, s.state)
		assert.Equal(t, []bool{true, false, true}, s.rset)
	})
	t.Run("a refused try answers the younger requests it kept", func(t *testing.T) {
		s := newSinghalDynamicMachine(t, 1, 3)
		sdStep(s, event{kind: evTry}) // ts 1 to 0
		msgs, _, _ := sdStep(s, sdMsg(KindRequest, 2, 1, 2, 0))
		assert.Empty(t, msgs, "the try goes first")
		msgs, _, refused := sdStep(s, sdMsg(KindBusy, 0, 1, 1, 1))
		assert.True(t, refused)
		assert.Equal(t, []Message{{Kind: KindReply, From: 1, To: 2, TS: 2, Ref: 2}}, msgs)
	})
}

// TestSinghalDynamicCloneAndState checks that a clone shares nothing with
// its original, that assign copies, and that the encoding tells apart
// states that behave differently.
func TestSinghalDynamicCloneAndState(t *testing.T) {
	s := newSinghalDynamicMachine(t, 1, 3)
	sdStep(s, event{kind: evRequest})
	c := s.clone().(*singhalDynamic)
	require.Equal(t, s.appendState(nil), c.appendState(nil))
	sdStep(c, sdMsg(KindReply, 0, 1, 1, 1))
	sdStep(c, sdMsg(KindRequest, 2, 1, 4, 0))
	assert.Equal(t, []bool{true, false, false}, s.rset, "a clone shares no request set with its original")
	assert.Equal(t, []bool{true, false, false}, s.asked, "nor asked")
	assert.Equal(t, []uint64{0, 0, 0}, s.iset, "nor inform set")
	assert.Equal(t, 1, s.nr)

	a := newSinghalDynamicMachine(t, 1, 3)
	require.True(t, a.assign(c))
	assert.Equal(t, c.appendState(nil), a.appendState(nil))
	sdStep(a, event{kind: evRelease})
	assert.Equal(t, raHeld, c.state, "assign shares nothing either")
	assert.NotEqual(t, c.appendState(nil), a.appendState(nil))
	assert.False(t, a.assign(newRoucairolMachine(t, 0, 3)), "another algorithm's machine")

	base := func() *singhalDynamic { return newSinghalDynamicMachine(t, 1, 3) }
	changes := map[string]func(s *singhalDynamic){
		"clock":  func(s *singhalDynamic) { s.clock = 7 },
		"state":  func(s *singhalDynamic) { s.state = raWanted },
		"trying": func(s *singhalDynamic) { s.trying = true },
		"ts":     func(s *singhalDynamic) { s.ts = 7 },
		"rset":   func(s *singhalDynamic) { s.rset[2] = true },
		"asked":  func(s *singhalDynamic) { s.asked[0] = true },
		"iset":   func(s *singhalDynamic) { s.iset[2] = 7 },
	}
	for name, change := range changes {
		d := base()
		change(d)
		assert.NotEqual(t, base().appendState(nil), d.appendState(nil), name)
	}
}

// TestSinghalDynamicDescribe checks what a person sees of a peer.
func TestSinghalDynamicDescribe(t *testing.T) {
	s := newSinghalDynamicMachine(t, 1, 3)
	sdStep(s, event{kind: evTry})
	sdStep(s, sdMsg(KindRequest, 2, 1, 3, 0))
	assert.Equal(t, []StateField{
		{"clock", "3"},
		{"state", "requesting"},
		{"request", "ts=1"},
		{"request set", "[P0]"},
		{"inform set", "[P2]"},
		{"asked", "[P0]"},
		{"trying", "true"},
	}, s.describe())
	sdStep(s, sdMsg(KindReply, 0, 1, 3, 1))
	assert.Contains(t, s.describe(), StateField{"state", "executing"})
	assert.Contains(t, s.describe(), StateField{"request set", "[]"})
	assert.NotContains(t, s.describe(), StateField{"trying", "true"})
}

// TestSinghalDynamicIdleViolation pins what a peer at rest must not keep.
func TestSinghalDynamicIdleViolation(t *testing.T) {
	s := newSinghalDynamicMachine(t, 1, 2)
	assert.Empty(t, s.idleViolation())
	sdStep(s, event{kind: evRequest})
	assert.Equal(t, "keeps state 1 (trying false)", s.idleViolation())
	sdStep(s, sdMsg(KindReply, 0, 1, 1, 1))
	assert.Equal(t, "keeps state 2 (trying false)", s.idleViolation())
	sdStep(s, event{kind: evRelease})
	assert.Empty(t, s.idleViolation())

	s = newSinghalDynamicMachine(t, 1, 2)
	sdStep(s, event{kind: evTry})
	assert.Equal(t, "keeps state 1 (trying true)", s.idleViolation())
	s.state = raReleased
	assert.Equal(t, "keeps state 0 (trying true)", s.idleViolation())
	s.trying = false
	assert.Equal(t, "still asks [true false]", s.idleViolation())
	s.asked[0] = false
	s.iset[0] = 4
	assert.Equal(t, "keeps the inform set [4 0]", s.idleViolation())
}

// sdCluster is n machines of Singhal's algorithm and a FIFO network
// between them, for entries one at a time.
type sdCluster struct {
	ms []*singhalDynamic
}

// enter has peer id request, delivers every message until it has entered,
// leaves, delivers every message again, and returns the messages sent in
// all.
func (c *sdCluster) enter(t *testing.T, id int) int {
	t.Helper()
	var queue []Message
	sent, entered := 0, false
	do := func(m *singhalDynamic, ev event) {
		var out output
		m.step(ev, &out)
		queue = append(queue, out.msgs...)
		sent += len(out.msgs)
		if out.entered {
			require.Equal(t, id, m.id, "only the requester enters")
			entered = true
		}
	}
	do(c.ms[id], event{kind: evRequest})
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		do(c.ms[m.To], event{kind: evMessage, msg: m})
	}
	require.True(t, entered, "peer %d entered", id)
	do(c.ms[id], event{kind: evRelease})
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		do(c.ms[m.To], event{kind: evMessage, msg: m})
	}
	return sent
}

// TestSinghalDynamicLightLoad reproduces the doc's costs one entry at a
// time, over random orders: an entry costs two messages for each peer in
// R_i, and R_i holds exactly the peers that have entered since peer i's
// last entry (before its first, the peers below it). At rest exactly one
// of each pair is in the other's request set, so the request sets hold
// n(n-1)/2 peers in all: summed over every peer that could ask next, the
// next entry costs n(n-1), and a requester drawn at random pays n-1 on
// average, the paper's figure for light load, at every step.
func TestSinghalDynamicLightLoad(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 1992))
	for n := 1; n <= 6; n++ {
		c := &sdCluster{}
		last := make([]int, n) // last[i]: the step of i's last entry; -1-i before any, for the staircase
		for i := range n {
			c.ms = append(c.ms, newSinghalDynamicMachine(t, i, n))
			last[i] = -1 - i
		}
		for step := range 40 {
			total := 0
			for i, m := range c.ms {
				total += m.nr
				for j := range n {
					if j == i {
						continue
					}
					inI, inJ := m.rset[j], c.ms[j].rset[i]
					require.True(t, inI != inJ, "n=%d step %d: exactly one of %d, %d asks the other", n, step, i, j)
					assert.Equal(t, last[j] > last[i], inI, "n=%d step %d: %d in R_%d iff it entered since %d's last entry", n, step, j, i, i)
				}
			}
			require.Equal(t, n*(n-1)/2, total, "n=%d step %d: the request sets hold n(n-1)/2 peers", n, step)
			id := rng.IntN(n)
			want := 2 * c.ms[id].nr
			assert.Equal(t, want, c.enter(t, id), "n=%d step %d: peer %d's entry", n, step, id)
			last[id] = step
		}
	}
}

// TestSinghalDynamicTimedCosts reproduces the doc's costs in virtual time
// at n = 8: at saturation every entry costs 2(n-1) messages, since every
// other peer has entered between two entries of one, and the
// synchronization delay is one message; at light load an entry costs
// about n-1, half of Ricart-Agrawala's 2(n-1), and some entries wait for
// no message.
func TestSinghalDynamicTimedCosts(t *testing.T) {
	const n = 8
	heavy, err := RunTimed(SinghalDynamic, n, timedHeavy)
	require.NoError(t, err)
	light, err := RunTimed(SinghalDynamic, n, timedLight)
	require.NoError(t, err)
	ra, err := RunTimed(RicartAgrawala, n, timedLight)
	require.NoError(t, err)
	// The first entries, from the staircase, cost less.
	assert.InDelta(t, 2*(n-1), heavy.Messages, 0.05, "messages per entry at saturation")
	assert.Equal(t, 1.0, heavy.SyncDelay, "one message from an exit to the next entry")
	assert.InDelta(t, n-1, light.Messages, 0.5, "light load: n-1 on average")
	assert.Less(t, light.Response, ra.Response, "and some entries wait for no message")
}

// TestSinghalDynamicFastPath checks that a peer with an empty request set
// takes the runtime's fast path: its entries send nothing and, after the
// probe, skip its machine; another peer's request disarms it and puts that
// peer in its request set, which it must then ask.
func TestSinghalDynamicFastPath(t *testing.T) {
	c := variant{alg: SinghalDynamic}.cluster(t, 3)
	p := c.Peer(0)
	for range 5 {
		lockWithin(t, p, 10*time.Second)
		p.Unlock()
	}
	assert.Zero(t, c.Stats().Messages, "R_0 starts empty")
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
		"peer 1 is in R_0 now")
}
