package dmutex

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recoveryMachine is peer id's centralized machine with WithRecovery.
func recoveryMachine(t *testing.T, id, n int) *centralized {
	t.Helper()
	cfg, err := newConfig(Centralized, n, forWorld, []Option{WithRecovery()})
	require.NoError(t, err)
	m, err := cfg.newMachine(Centralized, id, n)
	require.NoError(t, err)
	return m.(*centralized)
}

// fstep steps c with ev and returns what it sent and whether it entered.
func fstep(c *centralized, ev event) ([]Message, bool) {
	var out output
	c.step(ev, &out)
	return append([]Message(nil), out.msgs...), out.entered
}

func fmsg(k MessageKind, from, to int, term, ref uint64) event {
	return event{kind: evMessage, msg: Message{Kind: k, From: from, To: to, TS: term, Ref: ref}}
}

// heldByZero is peer 1's machine as coordinator of term 1 with peer 0,
// falsely suspected and trusted again, holding the lock: the way a
// coordinator other than peer 0 comes to have peer 0 as its holder.
func heldByZero(t *testing.T) *centralized {
	t.Helper()
	c := recoveryMachine(t, 1, 3)
	fstep(c, suspect(0)) // peer 1 takes term 1
	fstep(c, trust(0))   // peer 0 was alive after all
	fstep(c, fmsg(KindStatus, 2, 1, 1, 0))
	msgs, _ := fstep(c, fmsg(KindRequest, 0, 1, 1, 1))
	require.Equal(t, []Message{{Kind: KindGrant, From: 1, To: 0, TS: 1, Ref: 1}}, msgs)
	return c
}

func suspect(j int) event { return event{kind: evSuspect, msg: Message{From: j}} }
func trust(j int) event   { return event{kind: evTrust, msg: Message{From: j}} }

// TestFailoverTakeOver pins the new coordinator's rebuild at n = 4: peer
// 1 suspects peer 0 and takes term 1, announces it to every other peer,
// grants nothing, not even to itself, until peers 2 and 3 have reported,
// and then rebuilds the holder and the queue from the reports.
func TestFailoverTakeOver(t *testing.T) {
	c := recoveryMachine(t, 1, 4)
	msgs, _ := fstep(c, event{kind: evRequest})
	require.Equal(t, []Message{{Kind: KindRequest, From: 1, To: 0, TS: 0, Ref: 1}}, msgs, "a request names its term and number")

	msgs, entered := fstep(c, suspect(0))
	require.False(t, entered, "no grant before the reports are in")
	require.Equal(t, []Message{
		{Kind: KindCoordinator, From: 1, To: 0, TS: 1},
		{Kind: KindCoordinator, From: 1, To: 2, TS: 1},
		{Kind: KindCoordinator, From: 1, To: 3, TS: 1},
	}, msgs)
	assert.True(t, c.collecting)

	// Peer 3 waits with its second request; peer 2 holds its first.
	msgs, entered = fstep(c, fmsg(KindRequest, 3, 1, 1, 2))
	require.Empty(t, msgs)
	require.False(t, entered, "peer 2 has not reported")
	msgs, entered = fstep(c, fmsg(KindStatus, 2, 1, 1, 1))
	require.Empty(t, msgs, "peer 2 holds: nothing to grant")
	require.False(t, entered)
	assert.False(t, c.collecting)
	assert.Equal(t, 2, c.holder)
	assert.Equal(t, []int{1, 3}, c.queue, "request numbers order the rebuilt queue: P1's first before P3's second")

	// A stale release (another hold) frees nothing; the real one does.
	msgs, _ = fstep(c, fmsg(KindRelease, 2, 1, 1, 7))
	require.Empty(t, msgs)
	msgs, entered = fstep(c, fmsg(KindRelease, 2, 1, 1, 1))
	require.Empty(t, msgs)
	require.True(t, entered, "the coordinator's own request heads the queue")
	msgs, _ = fstep(c, event{kind: evRelease})
	require.Equal(t, []Message{{Kind: KindGrant, From: 1, To: 3, TS: 1, Ref: 2}}, msgs, "a grant names the request it grants")
}

// TestFailoverWaitsForTrusted: a peer the new coordinator suspects is not
// waited for, but one trusted again before its report is.
func TestFailoverWaitsForTrusted(t *testing.T) {
	c := recoveryMachine(t, 1, 3)
	fstep(c, suspect(2))
	msgs, _ := fstep(c, suspect(0))
	require.Len(t, msgs, 2, "COORDINATOR to peers 0 and 2")
	assert.False(t, c.collecting, "every other peer is suspected: nothing to wait for")
	_, entered := fstep(c, event{kind: evRequest})
	require.True(t, entered)
	fstep(c, event{kind: evRelease})

	c = recoveryMachine(t, 1, 3)
	fstep(c, suspect(2))
	fstep(c, suspect(0))
	fstep(c, trust(2))
	_, entered = fstep(c, event{kind: evRequest})
	assert.True(t, entered, "trusting after the rebuild does not stop the grants")

	c = recoveryMachine(t, 1, 3)
	fstep(c, event{kind: evRequest})
	fstep(c, suspect(0))
	require.True(t, c.collecting)
	_, entered = fstep(c, trust(0))
	require.False(t, entered, "peer 0, trusted again, must report: it may be inside")
	_, entered = fstep(c, fmsg(KindStatus, 2, 1, 1, 0))
	require.False(t, entered)
	_, entered = fstep(c, fmsg(KindStatus, 0, 1, 1, 1))
	require.False(t, entered, "peer 0 holds")
	assert.Equal(t, 0, c.holder)
	_, entered = fstep(c, fmsg(KindRelease, 0, 1, 1, 1))
	assert.True(t, entered)
}

// TestFailoverAdopt pins a client's and an old coordinator's part: a
// higher term is adopted and answered with one report, an old term's
// grant is ignored, and a try outstanding at the old coordinator is
// refused.
func TestFailoverAdopt(t *testing.T) {
	w := recoveryMachine(t, 2, 3) // waits
	fstep(w, event{kind: evRequest})
	msgs, _ := fstep(w, fmsg(KindCoordinator, 1, 2, 1, 0))
	require.Equal(t, []Message{{Kind: KindRequest, From: 2, To: 1, TS: 1, Ref: 1}}, msgs, "a waiting peer reports by its request")
	msgs, entered := fstep(w, fmsg(KindGrant, 0, 2, 0, 1))
	require.Empty(t, msgs)
	require.False(t, entered, "a grant of term 0 comes from a coordinator that stepped down")
	_, entered = fstep(w, fmsg(KindGrant, 1, 2, 1, 1))
	require.True(t, entered)
	msgs, _ = fstep(w, event{kind: evRelease})
	require.Equal(t, []Message{{Kind: KindRelease, From: 2, To: 1, TS: 1, Ref: 1}}, msgs, "the release goes to the new coordinator")

	h := recoveryMachine(t, 2, 3) // holds
	fstep(h, event{kind: evRequest})
	_, entered = fstep(h, fmsg(KindGrant, 0, 2, 0, 1))
	require.True(t, entered)
	msgs, _ = fstep(h, fmsg(KindCoordinator, 1, 2, 1, 0))
	require.Equal(t, []Message{{Kind: KindStatus, From: 2, To: 1, TS: 1, Ref: 1}}, msgs, "a holder reports the request it holds")

	tr := recoveryMachine(t, 2, 3) // tries
	fstep(tr, event{kind: evTry})
	var out output
	tr.step(fmsg(KindCoordinator, 1, 2, 1, 0), &out)
	require.True(t, out.refused, "the try at the old coordinator is refused")
	require.Equal(t, []Message{{Kind: KindStatus, From: 2, To: 1, TS: 1}}, out.msgs)
	assert.Empty(t, tr.idleViolation(), "and kept no more")
	_, entered = fstep(tr, fmsg(KindGrant, 0, 2, 0, 1))
	require.False(t, entered)

	old := recoveryMachine(t, 0, 3) // the old coordinator, alive, inside, with P2 queued
	_, entered = fstep(old, event{kind: evRequest})
	require.True(t, entered)
	fstep(old, fmsg(KindRequest, 2, 0, 0, 1))
	msgs, _ = fstep(old, fmsg(KindCoordinator, 1, 0, 1, 0))
	require.Equal(t, []Message{{Kind: KindStatus, From: 0, To: 1, TS: 1, Ref: 1}}, msgs, "it steps down and reports its hold")
	assert.Equal(t, -1, old.holder, "it forgets its holder")
	assert.Empty(t, old.queue, "and its queue")
	msgs, _ = fstep(old, fmsg(KindRelease, 2, 0, 0, 1))
	require.Empty(t, msgs, "a release to the old coordinator is ignored")
	msgs, _ = fstep(old, event{kind: evRelease})
	require.Equal(t, []Message{{Kind: KindRelease, From: 0, To: 1, TS: 1, Ref: 1}}, msgs)

	rb := recoveryMachine(t, 1, 3) // a coordinator still rebuilding
	fstep(rb, suspect(0))
	require.True(t, rb.collecting)
	fstep(rb, fmsg(KindCoordinator, 2, 1, 2, 0))
	assert.False(t, rb.collecting, "it steps down and rebuilds no more")
}

// TestFailoverSuspectedHolder: a coordinator that suspects the holder
// takes it as gone, and starts a term of its own above it, so that the
// next holder's fence is above every fence of the suspected hold; it
// rebuilds from the reports of the peers it does not suspect, grants the
// next of them, and serves a suspected waiter once it is trusted again.
func TestFailoverSuspectedHolder(t *testing.T) {
	c := recoveryMachine(t, 0, 4)
	fstep(c, fmsg(KindRequest, 1, 0, 0, 1))
	fstep(c, fmsg(KindRequest, 2, 0, 0, 1))
	fstep(c, fmsg(KindRequest, 3, 0, 0, 1))
	fstep(c, suspect(2))
	msgs, _ := fstep(c, suspect(1))
	require.Equal(t, []Message{
		{Kind: KindCoordinator, From: 0, To: 1, TS: 4},
		{Kind: KindCoordinator, From: 0, To: 2, TS: 4},
		{Kind: KindCoordinator, From: 0, To: 3, TS: 4},
	}, msgs, "term 4 is peer 0's next")
	assert.Equal(t, uint64(4*FenceEpoch+1), c.nextFence(3), "its holds fence above 4·FenceEpoch")
	msgs, _ = fstep(c, fmsg(KindRequest, 3, 0, 4, 1))
	require.Equal(t, []Message{{Kind: KindGrant, From: 0, To: 3, TS: 4, Ref: 1}}, msgs, "P2 is suspected too: P3 next")
	msgs, _ = fstep(c, fmsg(KindRequest, 2, 0, 4, 1))
	require.Empty(t, msgs, "P2's report, late: it waits behind P3")
	fstep(c, fmsg(KindRelease, 3, 0, 4, 1))
	assert.Equal(t, -1, c.holder)
	msgs, _ = fstep(c, trust(2))
	require.Equal(t, []Message{{Kind: KindGrant, From: 0, To: 2, TS: 4, Ref: 1}}, msgs)
}

// TestFailoverTermHints: a peer that missed a term hears of it. One that
// suspects its coordinator of a term past 0 names that term to the
// lowest peer it does not suspect, and a peer answers an announcement of
// a term below its own with its term; either way the receiver adopts the
// term, and takes over above it if it is to.
func TestFailoverTermHints(t *testing.T) {
	p2 := recoveryMachine(t, 2, 3)
	fstep(p2, fmsg(KindCoordinator, 1, 2, 1, 0))
	msgs, _ := fstep(p2, suspect(1))
	require.Equal(t, []Message{{Kind: KindStatus, From: 2, To: 0, TS: 1}}, msgs)
	msgs, _ = fstep(p2, fmsg(KindStatus, 0, 2, 1, 0))
	require.Empty(t, msgs, "a status of its own term from a client: nothing to adopt")

	p3 := recoveryMachine(t, 2, 3)
	fstep(p3, fmsg(KindCoordinator, 0, 2, 3, 0))
	msgs, _ = fstep(p3, fmsg(KindCoordinator, 1, 2, 1, 0))
	require.Equal(t, []Message{{Kind: KindStatus, From: 2, To: 1, TS: 3}}, msgs, "peer 1 took over below term 3")

	p1 := recoveryMachine(t, 1, 3)
	fstep(p1, suspect(0))
	require.Equal(t, uint64(1), p1.term)
	msgs, _ = fstep(p1, fmsg(KindStatus, 2, 1, 3, 0))
	require.Equal(t, []Message{
		{Kind: KindStatus, From: 1, To: 0, TS: 3},
		{Kind: KindCoordinator, From: 1, To: 0, TS: 4},
		{Kind: KindCoordinator, From: 1, To: 2, TS: 4},
	}, msgs, "it adopts term 3, reports to its coordinator, suspected, and takes term 4")
}

// TestFailoverTerms: the takeover picks the next term the peer
// coordinates, whatever term it knew, and a peer suspecting the
// coordinator waits while a peer of lower id is not suspected.
func TestFailoverTerms(t *testing.T) {
	for _, tt := range []struct {
		id, n int
		known uint64
		want  uint64
	}{
		{1, 3, 0, 1}, {2, 3, 0, 2}, {2, 3, 1, 2}, {1, 3, 2, 4}, {0, 3, 1, 3}, {1, 2, 0, 1}, {0, 2, 1, 2},
	} {
		c := recoveryMachine(t, tt.id, tt.n)
		c.term = tt.known
		for j := range tt.n {
			if j != tt.id {
				fstep(c, suspect(j))
			}
		}
		assert.Equal(t, tt.want, c.term, "peer %d of %d after term %d", tt.id, tt.n, tt.known)
		assert.Equal(t, tt.id, c.coord())
	}
	c := recoveryMachine(t, 2, 3)
	msgs, _ := fstep(c, suspect(0))
	assert.Empty(t, msgs, "peer 1 is not suspected: it takes over, not peer 2")
	assert.Equal(t, uint64(0), c.term)
}

// TestFailoverRefusesForged steps machines with messages no peer of the
// cluster sends: an announcement whose term is not the sender's, or is
// not above the known one, or is beyond maxTerm; messages of another
// term; suspicions of peers out of range. None may change the state.
func TestFailoverRefusesForged(t *testing.T) {
	for _, tt := range []struct {
		name string
		id   int
		ev   event
	}{
		{"term of another coordinator", 2, fmsg(KindCoordinator, 1, 2, 2, 0)},
		{"term not above the known", 2, fmsg(KindCoordinator, 0, 2, 0, 0)},
		{"term beyond maxTerm", 2, fmsg(KindCoordinator, 1, 2, maxTerm+2, 0)},
		{"term at the top", 2, fmsg(KindCoordinator, 0, 2, math.MaxUint64, 0)},
		{"request of another term", 0, fmsg(KindRequest, 1, 0, 3, 1)},
		{"grant of a future term", 2, fmsg(KindGrant, 0, 2, 3, 1)},
		{"status naming a term of the receiver's own", 2, fmsg(KindStatus, 0, 2, 5, 0)},
		{"sender out of range", 2, fmsg(KindCoordinator, 7, 2, 7, 0)},
		{"negative sender", 0, fmsg(KindRequest, -1, 0, 0, 1)},
		{"sender n", 0, fmsg(KindRequest, 3, 0, 0, 1)},
		{"sender the receiver", 0, fmsg(KindRequest, 0, 0, 0, 1)},
		{"suspicion out of range", 1, suspect(3)},
		{"suspicion of oneself", 1, suspect(1)},
		{"trust out of range", 1, trust(-1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := recoveryMachine(t, tt.id, 3)
			fstep(c, event{kind: evRequest})
			before := c.appendState(nil)
			msgs, entered := fstep(c, tt.ev)
			assert.Empty(t, msgs)
			assert.False(t, entered)
			assert.Equal(t, before, c.appendState(nil), "state changed")
		})
	}
}

// TestFailoverSurvivesJunk steps recovery machines with random messages,
// suspicions and trusts, between requests, tries and releases: no field
// may make one panic, and none may enter twice.
func TestFailoverSurvivesJunk(t *testing.T) {
	nums := []uint64{0, 1, 2, 3, 4, 7, maxTerm - 1, maxTerm, maxTerm + 1, math.MaxUint64}
	for _, n := range []int{2, 3, 5} {
		t.Run("n="+strconv.Itoa(n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 16))
			for id := range n {
				c := recoveryMachine(t, id, n)
				busy, inside := false, false
				for step := range 3000 {
					var ev event
					switch r := rng.IntN(12); {
					case r == 0 && !busy && !inside:
						ev, busy = event{kind: evRequest}, true
					case r == 1 && !busy && !inside:
						ev, busy = event{kind: evTry}, true
					case r == 2 && inside:
						ev, inside = event{kind: evRelease}, false
					case r == 3:
						ev = event{kind: evSuspect + eventKind(rng.IntN(2)), msg: Message{From: rng.IntN(n+2) - 1}}
					default:
						ev = event{kind: evMessage, msg: Message{
							Kind: MessageKind(1 + rng.IntN(int(numKinds)-1)),
							From: (id + 1 + rng.IntN(n-1)) % n,
							To:   id,
							TS:   nums[rng.IntN(len(nums))],
							Ref:  nums[rng.IntN(len(nums))],
						}}
					}
					var out output
					require.NotPanics(t, func() { c.step(ev, &out) }, "peer %d step %d: %+v", id, step, ev)
					if out.entered {
						require.False(t, inside, "entered while inside")
						busy, inside = false, true
					}
					if out.refused {
						busy = false
					}
					require.LessOrEqual(t, c.term, uint64(maxTerm)+uint64(n))
				}
			}
		})
	}
}

// TestFailoverCost counts, at the World's transport, the messages of one
// failover, as the doc of NewCentralized states them: n-1 COORDINATOR,
// and one report from each peer the new coordinator waits for (n-2 when
// the coordinator crashed, n-1 when it was falsely suspected and trusted
// again, and then one COORDINATOR more: the new coordinator names its
// term again to the peer it trusts again, which may have missed it). The coordinator is inside with the last peer queued; that peer
// enters in the end, on the new coordinator's grant.
func TestFailoverCost(t *testing.T) {
	for _, n := range []int{2, 3, 4, 6} {
		for _, crash := range []bool{true, false} {
			if n == 2 {
				continue // peer 1 suspects its only other peer: in a minority, it takes nothing over (TestRecoveryLonePeer)
			}
			t.Run(fmt.Sprintf("n=%d/crash=%v", n, crash), func(t *testing.T) {
				w, err := NewWorld(Centralized, n, WorldConfig{}, WithRecovery())
				require.NoError(t, err)
				w.f.detector, w.f.falseLeft = DetectorImperfect, 1
				apply := func(id string) {
					t.Helper()
					tr, ok := w.Find(id)
					require.True(t, ok, "%s not enabled in\n%v", id, w)
					_, err := w.Apply(tr)
					require.NoError(t, err)
				}
				last := n - 1
				require.NoError(t, w.Request(0))
				require.True(t, w.Peer(0).Inside)
				require.NoError(t, w.Request(last))
				apply(w.Transitions()[1].ID()) // the request reaches peer 0
				require.Empty(t, w.Messages())
				if crash {
					w.crash(0)
				}
				before := w.Stats()
				apply("s1-0")
				if !crash {
					apply("u1-0")
				}
				for !w.Peer(last).Inside {
					next := ""
					for _, tr := range w.Transitions() {
						if tr.Kind == TransDeliver || (tr.Kind == TransLeave && next == "") {
							next = tr.ID() // a delivery first, else peer 0 leaves
						}
					}
					require.NotEmpty(t, next, "P%d waits and nothing is in flight:\n%v", last, w)
					apply(next)
				}
				d := w.Stats().Sub(before)
				reports := uint64(n - 1)
				if crash {
					reports = uint64(n - 2)
				}
				announced := uint64(n - 1)
				if !crash {
					announced++
				}
				assert.Equal(t, announced, d.ByKind["coordinator"])
				assert.Equal(t, reports, d.ByKind["status"]+d.ByKind["request"], "reports: %v", d.ByKind)
			})
		}
	}
}

// TestFailoverTry pins tries with recovery on: a client's try goes to the
// coordinator of its term with its number; the coordinator grants it when
// the lock is free and the rebuild over, answers busy otherwise, and
// decides its own try at once by the same rule.
func TestFailoverTry(t *testing.T) {
	cl := recoveryMachine(t, 2, 3)
	msgs, _ := fstep(cl, event{kind: evTry})
	require.Equal(t, []Message{{Kind: KindTry, From: 2, To: 0, TS: 0, Ref: 1}}, msgs)
	var out output
	cl.step(fmsg(KindBusy, 0, 2, 0, 1), &out)
	require.True(t, out.refused)
	assert.Empty(t, cl.idleViolation(), "a refused try keeps nothing")
	fstep(cl, event{kind: evTry})
	_, entered := fstep(cl, fmsg(KindGrant, 0, 2, 0, 2))
	require.True(t, entered)

	co := recoveryMachine(t, 0, 3)
	_, entered = fstep(co, event{kind: evTry})
	require.True(t, entered, "a free lock: the coordinator's own try enters")
	msgs, _ = fstep(co, fmsg(KindTry, 1, 0, 0, 1))
	require.Equal(t, []Message{{Kind: KindBusy, From: 0, To: 1, TS: 0, Ref: 1}}, msgs, "held: busy")
	msgs, _ = fstep(co, event{kind: evRelease})
	require.Empty(t, msgs)
	msgs, _ = fstep(co, fmsg(KindTry, 1, 0, 0, 2))
	require.Equal(t, []Message{{Kind: KindGrant, From: 0, To: 1, TS: 0, Ref: 2}}, msgs, "free: granted")
	out.reset()
	co.step(event{kind: evTry}, &out)
	require.True(t, out.refused, "held by peer 1: the coordinator's own try is refused")

	nc := recoveryMachine(t, 1, 3) // takes over and rebuilds
	fstep(nc, suspect(0))
	require.True(t, nc.collecting)
	out.reset()
	nc.step(event{kind: evTry}, &out)
	require.True(t, out.refused, "rebuilding: the lock's state is unknown")
	msgs, _ = fstep(nc, fmsg(KindTry, 2, 1, 1, 1))
	require.Equal(t, []Message{{Kind: KindBusy, From: 1, To: 2, TS: 1, Ref: 1}}, msgs, "a try counts as peer 2's report; the rebuild was not over")
	require.False(t, nc.collecting)
	msgs, _ = fstep(nc, fmsg(KindTry, 2, 1, 1, 2))
	require.Equal(t, []Message{{Kind: KindGrant, From: 1, To: 2, TS: 1, Ref: 2}}, msgs)

	hz := heldByZero(t)
	out.reset()
	hz.step(event{kind: evTry}, &out)
	require.True(t, out.refused, "held by peer 0: coordinator 1's own try is refused")
	msgs, _ = fstep(hz, fmsg(KindTry, 2, 1, 1, 2))
	require.Equal(t, []Message{{Kind: KindBusy, From: 1, To: 2, TS: 1, Ref: 2}}, msgs, "held by peer 0: busy")

	to := recoveryMachine(t, 1, 3) // its try is out at peer 0 when it takes over
	fstep(to, event{kind: evTry})
	out.reset()
	to.step(suspect(0), &out)
	require.True(t, out.refused, "the try at the old coordinator is refused")
	assert.Equal(t, uint64(1), to.term)
	assert.Empty(t, to.idleViolation(), "and kept no more")
}

// TestFailoverAdoptsUpToMaxTerm: an announcement or a hint of maxTerm
// itself is adopted (only terms beyond it are refused), and at maxTerm a
// peer takes over no more.
func TestFailoverAdoptsUpToMaxTerm(t *testing.T) {
	require.Equal(t, uint64(1), uint64(maxTerm)%3, "maxTerm is peer 1's term at n = 3")
	p2 := recoveryMachine(t, 2, 3)
	fstep(p2, fmsg(KindCoordinator, 1, 2, maxTerm, 0))
	require.Equal(t, uint64(maxTerm), p2.term, "the announcement of maxTerm")
	fstep(p2, suspect(0))
	msgs, _ := fstep(p2, suspect(1))
	assert.Empty(t, msgs, "no term above maxTerm")
	assert.Equal(t, uint64(maxTerm), p2.term)

	p0 := recoveryMachine(t, 0, 3)
	fstep(p0, fmsg(KindStatus, 2, 0, maxTerm, 0))
	assert.Equal(t, uint64(maxTerm), p0.term, "the hint of maxTerm")
}
