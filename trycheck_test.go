package dmutex

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tryMix is one mix of requests and tries for the model checker: peer i
// makes requests[i] requests and tries[i] tries, in any order.
type tryMix struct {
	name            string
	requests, tries []int
}

// tryMixes are small enough for every algorithm but Lamport: a try
// against two requests; a request against two tries; two tries against a
// request elsewhere; and two peers that each request and try twice.
var tryMixes = []tryMix{
	{"r110-t001", []int{1, 1, 0}, []int{0, 0, 1}},
	{"r100-t011", []int{1, 0, 0}, []int{0, 1, 1}},
	{"r001-t110", []int{0, 0, 1}, []int{1, 1, 0}},
	{"r22-t22", []int{2, 2}, []int{2, 2}},
}

// lamportTryMixes replace tryMixes for Lamport, whose clocks make every
// delivery order a state of its own: the mixes above take 1.5 to 3.7
// million states each (-dmutex.big runs them).
var lamportTryMixes = []tryMix{
	{"r10-t01", []int{1, 0}, []int{0, 1}},
	{"r11-t11", []int{1, 1}, []int{1, 1}},
	{"r100-t010", []int{1, 0, 0}, []int{0, 1, 0}},
	{"r000-t011", []int{0, 0, 0}, []int{0, 1, 1}},
}

func (mx tryMix) config(alg Algorithm, opts []Option, net Network) CheckConfig {
	return CheckConfig{
		Algorithm: alg, Options: opts, N: len(mx.requests), Network: net,
		RequestsPerPeer: mx.requests, TriesPerPeer: mx.tries, MaxStates: *maxStates,
	}
}

// TestModelCheckTry has Check explore small clusters of every algorithm
// with TryLock in the mix: peers make requests and tries, in every
// interleaving. Every property must hold: mutual exclusion, the promised
// order, exactly one token, no deadlock (a try never answered is a peer
// that waits for ever), no starvation, and at rest no peer may keep
// anything for a request or try that is over (idleViolation), so a
// refused try strands nothing.
func TestModelCheckTry(t *testing.T) {
	for _, v := range variants() {
		nets := []Network{NetworkFIFO}
		if !v.alg.NeedsFIFO() {
			nets = append(nets, NetworkUnordered)
		}
		mixes := tryMixes
		switch {
		case v.alg == Lamport && !*bigChecks:
			mixes = lamportTryMixes
		case v.alg == TokenRing || v.alg == Raymond || v.alg == NaimiTrehel:
			// A longer ring, a tree with a node two hops from the
			// root, and paths of three hops, that a try crosses.
			mixes = append(slices.Clip(mixes), tryMix{"r1000-t0111", []int{1, 0, 0, 0}, []int{0, 1, 1, 1}})
		}
		for _, net := range nets {
			for _, mx := range mixes {
				name := fmt.Sprintf("%s/%s/%v", v.name, mx.name, net)
				t.Run(name, func(t *testing.T) {
					if v.opts != nil && net == NetworkUnordered && mx.name == "r22-t22" && !*bigChecks {
						t.Skip("0.7M states, 12 s; run with -dmutex.big")
					}
					if mx.name == "r22-t22" {
						// The mixes of three and four peers, one or two
						// tries each, stay under -race.
						skipRaceLight(t, "two requests and two tries a peer: a third of this test's CPU under -race")
					}
					if !*bigChecks { // Lamport's big mixes take a gigabyte or more each
						t.Parallel() // one search each, tens of megabytes: two at once on two cores
					}
					res := mustCheck(t, mx.config(v.alg, v.opts, net))
					require.Nil(t, res.Violation, "%v", res.Violation)
					require.True(t, res.Complete, "stopped after %d states", res.States)
					assert.Equal(t, Holds, res.Safe)
					assert.Equal(t, Holds, res.DeadlockFree)
					assert.Equal(t, Holds, res.StarvationFree)
					t.Logf("%s: %d states, %d transitions, %.2fs", name, res.States, res.Transitions, res.Seconds)
				})
			}
		}
	}
}

// raTryDrops is Ricart-Agrawala whose refused try forgets the replies it
// deferred while trying, instead of sending them.
type raTryDrops struct{ *ricart }

func (r *raTryDrops) step(ev event, out *output) {
	n := len(out.msgs)
	r.ricart.step(ev, out)
	if out.refused {
		out.msgs = slices.DeleteFunc(out.msgs[:n:n], func(m Message) bool { return m.Kind == KindReply })
	}
}

func (r *raTryDrops) clone() machine { return &raTryDrops{r.ricart.clone().(*ricart)} }

// mkTryKeeps is Maekawa whose refused try releases none of the votes it
// got from other peers.
type mkTryKeeps struct{ *maekawa }

func (m *mkTryKeeps) step(ev event, out *output) {
	n := len(out.msgs)
	m.maekawa.step(ev, out)
	if out.refused {
		out.msgs = slices.DeleteFunc(out.msgs[n:], func(m Message) bool { return m.Kind == KindRelease })
	}
}

func (m *mkTryKeeps) clone() machine { return &mkTryKeeps{m.maekawa.clone().(*maekawa)} }

// TestModelCheckTryFindsBrokenWithdrawals checks that Check catches a
// refused try that leaves something behind: replies it deferred and then
// forgot, which leave a peer waiting for ever, or votes never released,
// which a voter keeps at rest.
func TestModelCheckTryFindsBrokenWithdrawals(t *testing.T) {
	tests := []struct {
		name  string
		alg   Algorithm
		build func(m machine) machine
		want  string
	}{
		{"ricart-agrawala/try-drops-deferred", RicartAgrawala, func(m machine) machine { return &raTryDrops{m.(*ricart)} }, "deadlock"},
		{"maekawa/try-keeps-votes", Maekawa, func(m machine) machine { return &mkTryKeeps{m.(*maekawa)} }, "still votes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc := tryMixes[0].config(tt.alg, nil, NetworkFIFO)
			cc.build = func(id, n int) machine {
				m, err := algorithms[tt.alg].build(id, n, &config{alg: tt.alg, n: n})
				require.NoError(t, err)
				return tt.build(m)
			}
			res := mustCheck(t, cc)
			require.NotNil(t, res.Violation, "no counterexample in %d states", res.States)
			assert.Contains(t, res.Violation.Message, tt.want)
			t.Logf("%s:\n    %s", res.Violation.Message, strings.Join(res.Violation.Trace, "\n    "))
		})
	}
}

// TestTryNeverWaitsForALeave checks the promise of TryLock that the
// model checker's other properties do not cover: a try never waits for a
// holder to leave. In every reachable state of the small mixes where a
// peer's try is out, the try must be answered, entered or refused, on
// every path that only delivers messages, with no peer ever leaving the
// critical section and no new request or try.
func TestTryNeverWaitsForALeave(t *testing.T) {
	for _, v := range variants() {
		mx := tryMixes[0]
		if v.alg == Lamport {
			mx = lamportTryMixes[2]
		}
		t.Run(v.name, func(t *testing.T) {
			cc := mx.config(v.alg, v.opts, NetworkFIFO)
			c, err := newChecker(cc)
			require.NoError(t, err)
			start, err := c.startWorld(false)
			require.NoError(t, err)
			if v := tryWaitsForLeave(start); v != "" {
				t.Fatal(v)
			}
		})
	}
}

// tryWaitsForLeave explores every state reachable from start and returns
// a description of the first in which a try can stay unanswered without
// a leave, or "".
func tryWaitsForLeave(start *World) string {
	var buf, sbuf []byte
	var scratch [][]byte
	key := func(w *World) string {
		buf = w.appendState(buf[:0], &scratch, &sbuf, new(stampMap))
		return string(buf)
	}
	seen := map[string]bool{key(start): true}
	answered := map[string]bool{} // states whose tries all resolve by deliveries alone
	work := []*World{start}
	for len(work) > 0 {
		w := work[len(work)-1]
		work = work[:len(work)-1]
		for j := range w.n {
			if w.peers[j].d.trying {
				if stuck := deliveriesStrand(w, j, key, answered); stuck != "" {
					return fmt.Sprintf("peer %d's try waits for a leave: %s", j, stuck)
				}
			}
		}
		for _, tr := range w.Transitions() {
			next := w.Clone()
			if _, err := next.Apply(tr); err != nil {
				return err.Error()
			}
			if k := key(next); !seen[k] {
				seen[k] = true
				work = append(work, next)
			}
		}
	}
	return ""
}

// deliveriesStrand explores the states reachable from w by deliveries
// only and returns a description of one where nothing is left to deliver
// and peer j still tries, or "".
func deliveriesStrand(w *World, j int, key func(*World) string, answered map[string]bool) string {
	k0 := fmt.Sprint(j) + key(w)
	if answered[k0] {
		return ""
	}
	seen := map[string]bool{k0: true}
	work := []*World{w}
	for len(work) > 0 {
		x := work[len(work)-1]
		work = work[:len(work)-1]
		if !x.peers[j].d.trying {
			continue
		}
		delivered := false
		for _, tr := range x.Transitions() {
			if tr.Kind != TransDeliver {
				continue
			}
			delivered = true
			next := x.Clone()
			if _, err := next.Apply(tr); err != nil {
				return err.Error()
			}
			if k := fmt.Sprint(j) + key(next); !seen[k] {
				seen[k] = true
				work = append(work, next)
			}
		}
		if !delivered {
			var inside []int
			for p := range x.n {
				if x.peers[p].d.inside {
					inside = append(inside, p)
				}
			}
			return fmt.Sprintf("nothing in flight, peers %v inside", inside)
		}
	}
	for k := range seen {
		answered[k] = true
	}
	return ""
}

// TestMaekawaTryIsNotInquired pins that a voter whose vote is with a try
// asks nothing back when a better request arrives: the try never waits,
// so its release comes soon, and an INQUIRE would only cost a message the
// trier ignores. The better request waits in the queue for the try's
// release.
func TestMaekawaTryIsNotInquired(t *testing.T) {
	sets := [][]int{{0, 1, 2}, {0, 1, 2}, {0, 1, 2}}
	m, err := newMaekawa(0, 3, &config{alg: Maekawa, n: 3, votingSets: sets})
	require.NoError(t, err)
	var out output
	m.step(event{kind: evMessage, msg: Message{Kind: KindTry, From: 1, To: 0, TS: 5, Ref: 5}}, &out)
	require.Len(t, out.msgs, 1)
	assert.Equal(t, KindLocked, out.msgs[0].Kind)
	out.reset()
	m.step(event{kind: evMessage, msg: Message{Kind: KindRequest, From: 2, To: 0, TS: 1, Ref: 1}}, &out)
	var kinds []MessageKind
	for _, msg := range out.msgs {
		kinds = append(kinds, msg.Kind)
	}
	assert.NotContains(t, kinds, KindInquire)
	out.reset()
	m.step(event{kind: evMessage, msg: Message{Kind: KindTry, From: 2, To: 0, TS: 6, Ref: 6}}, &out)
	require.Len(t, out.msgs, 1)
	assert.Equal(t, KindBusy, out.msgs[0].Kind, "a second try, while the vote is out, is refused")
}
