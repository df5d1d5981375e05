package dmutex

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var deepExplore = flag.Bool("maekawa.deep", false,
	"explore Maekawa state spaces that take minutes under -race")

// mkDisplaced are voting sets in which peers 0, 1 and 2 can deadlock if a
// voter answers FAILED only to arriving requests: 2 holds voter 3, 1's
// request arrives there and beats 2's (INQUIRE, no FAILED), then 0's beats
// 1's. 2 yields, since voter 0 failed it, and voter 3 votes for 0; voter 4
// voted for 1, which keeps 4's INQUIRE pending as it never heard FAILED.
// 0 waits for 4, 1 waits for 3.
var mkDisplaced = [][]int{{0, 3, 4}, {1, 3, 4}, {0, 2, 3}, {3}, {3, 4}}

// TestMaekawaExhaustive checks Maekawa over voting sets of its own, every
// interleaving: no two peers inside, no deadlock, no starvation, and every
// vote home once the cluster is at rest (maekawa.idleViolation).
func TestMaekawaExhaustive(t *testing.T) {
	cycle := [][]int{{0, 1}, {1, 2}, {0, 2}}
	all3 := [][]int{{0, 1, 2}, {0, 1, 2}, {0, 1, 2}}
	tests := []struct {
		name     string
		sets     [][]int
		requests []int
		net      Network
		size     int // 0: small; 1: skipped by -short; 2: only with -maekawa.deep
	}{
		{"all-in-one n=3, one request each", all3, []int{1, 1, 1}, NetworkFIFO, 0},
		{"cycle n=3, one request each", cycle, []int{1, 1, 1}, NetworkFIFO, 0},
		{"cycle n=3, two requests each", cycle, []int{2, 2, 2}, NetworkFIFO, 1},
		{"displaced n=5, peers 0 to 2 one request each", mkDisplaced, []int{1, 1, 1, 0, 0}, NetworkFIFO, 0},
		// Beyond the contract: over reordering channels, the machine
		// holds an INQUIRE that overtook its LOCKED, and small clusters
		// show no failure (Maekawa still requires FIFO; see NewMaekawa).
		{"reordering grid n=3, one request each", GridQuorums(3), []int{1, 1, 1}, NetworkUnordered, 0},
		{"reordering cycle n=3, two requests each", cycle, []int{2, 2, 2}, NetworkUnordered, 2},
		{"all-in-one n=3, two requests each", all3, []int{2, 2, 2}, NetworkFIFO, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			switch {
			case tt.size >= 1 && (testing.Short() || raceEnabled):
				t.Skip("large state space; run without -short or -race")
			case tt.size >= 2 && !*deepExplore:
				t.Skip("large state space; run with -maekawa.deep")
			}
			n := len(tt.sets)
			res := mustCheck(t, CheckConfig{Algorithm: Maekawa, N: n, RequestsPerPeer: tt.requests, Network: tt.net,
				Options: []Option{WithVotingSets(tt.sets)}, MaxStates: -1, MaxMemory: -1})
			if res.Violation != nil {
				require.Nil(t, res.Violation, "%s\n%s", res.Violation.Message, strings.Join(res.Violation.Trace, "\n"))
			}
			require.True(t, res.Complete)
			assert.True(t, res.Safe == Holds && res.DeadlockFree == Holds && res.StarvationFree == Holds)
			t.Logf("%s: %d states, max overtakes %d", tt.name, res.States, res.MaxOvertakes)
		})
	}
}

// mkStamped holds Maekawa to (timestamp, id) order, which it does not
// promise: Check must find a younger request let in before an older one.
type mkStamped struct{ *maekawa }

func (m *mkStamped) requestTS() uint64 { return m.ts }
func (m *mkStamped) clone() machine    { return &mkStamped{m.maekawa.clone().(*maekawa)} }

func TestMaekawaNotInTimestampOrder(t *testing.T) {
	res := mustCheck(t, CheckConfig{Algorithm: Maekawa, N: 3, Requests: 1, build: func(id, n int) machine {
		m, _ := newMaekawa(id, n, &config{})
		return &mkStamped{m.(*maekawa)}
	}})
	require.NotNil(t, res.Violation)
	assert.Contains(t, res.Violation.Message, "after the younger")
}

// mkLeaky forgets to send its RELEASE to voter 1, so that vote never comes
// home: the check at rest must say so.
type mkLeaky struct{ *maekawa }

func (m *mkLeaky) step(ev event, out *output) {
	m.maekawa.step(ev, out)
	if ev.kind == evRelease {
		out.msgs = removeFunc(out.msgs, func(x Message) bool { return x.Kind == KindRelease && x.To == 1 })
	}
}
func (m *mkLeaky) clone() machine { return &mkLeaky{m.maekawa.clone().(*maekawa)} }

func removeFunc(ms []Message, drop func(Message) bool) []Message {
	kept := ms[:0]
	for _, m := range ms {
		if !drop(m) {
			kept = append(kept, m)
		}
	}
	return kept
}

func TestMaekawaVotesComeHome(t *testing.T) {
	res := mustCheck(t, CheckConfig{Algorithm: Maekawa, N: 3, RequestsPerPeer: []int{1, 0, 0}, build: func(id, n int) machine {
		m, _ := newMaekawa(id, n, &config{})
		return &mkLeaky{m.(*maekawa)}
	}})
	require.NotNil(t, res.Violation)
	assert.Equal(t, "safety", res.Violation.Property)
	assert.Contains(t, res.Violation.Message, "at rest, peer 1 still votes for peer 0 with 0 waiting")
}

// mkRun runs a seeded simulation of Maekawa with every peer contending,
// requests at a time each, and returns it with the most entries by
// others while one request, arrived at all its voters, waited.
func mkRun(t testing.TB, n, requests int, seed int64) (*Simulation, int) {
	t.Helper()
	s, err := NewSimulation(Maekawa, n, SimConfig{Seed: uint64(seed)})
	require.NoError(t, err)
	for p := range n {
		for range requests {
			require.NoError(t, s.Request(p))
		}
	}
	require.NoError(t, s.Run(), "seed %d", seed)
	require.Equal(t, uint64(n*requests), s.Stats().Entries, "seed %d", seed)
	// Replay the trace: unsent[p] counts p's REQUESTs in flight, since[p]
	// the entries by others once they all arrived.
	unsent, since, waiting := make([]int, n), make([]int, n), make([]bool, n)
	worst := 0
	for _, e := range s.Events() {
		switch e.Kind {
		case EventRequest:
			waiting[e.Peer], since[e.Peer] = true, 0
		case EventSend:
			if e.Msg.Kind == KindRequest {
				unsent[e.Peer]++
			}
		case EventReceive:
			if e.Msg.Kind == KindRequest {
				unsent[e.Msg.From]--
			}
		case EventEnter:
			waiting[e.Peer] = false
			for q := range n {
				if q != e.Peer && waiting[q] && unsent[q] == 0 {
					since[q]++
					worst = max(worst, since[q])
				}
			}
		}
	}
	return s, worst
}

// TestMaekawaRandomRuns runs seeded random schedules of larger clusters
// with every peer contending: the simulator's checks after each step, no
// deadlock, every vote home at the end, and no request overtaken without
// bound once it reached its voters. A failing seed replays exactly.
//
// Under -race, 10 seeds per size instead of 40, as with -short: the
// simulator runs on the test's goroutine, so the race detector only slows
// it; a run without -race, or with -dmutex.long, takes all 40.
func TestMaekawaRandomRuns(t *testing.T) {
	seeds, requests := 40, 8
	if testing.Short() || (raceEnabled && !*longRuns) {
		seeds = 10
	}
	for _, n := range []int{2, 3, 4, 7, 9, 13, 16, 31} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			t.Parallel() // simulations on the test's goroutine: two sizes at once on two cores
			for seed := range int64(seeds) {
				s, worst := mkRun(t, n, requests, seed)
				// Once a request has reached all its voters, every other
				// peer enters at most twice before it (its request then
				// outstanding, and one more stamped before it learnt the
				// older timestamp).
				require.LessOrEqual(t, worst, 2*(n-1), "seed %d: a request waited that long", seed)
				for p, m := range s.w.ms {
					require.Empty(t, m.(idleChecker).idleViolation(), "seed %d, voter %d", seed, p)
				}
			}
		})
	}
}

// TestMaekawaContentionCost measures, over seeded random schedules with
// every peer contending, what an entry costs, and checks the identities
// that hold whatever the contention: per entry of peer p, K_p-1 REQUESTs
// and RELEASEs; every LOCKED beyond the K_p-1 an entry keeps was given back
// by a RELINQUISH, which answers an INQUIRE.
//
// Under -race, 4 seeds per size instead of 20, as with -short: the
// simulator has no goroutines for the race detector to watch; a run
// without -race, or with -dmutex.long, takes all 20.
func TestMaekawaContentionCost(t *testing.T) {
	seeds, requests := 20, 20
	if testing.Short() || (raceEnabled && !*longRuns) {
		seeds = 4
	}
	for _, n := range []int{4, 7, 13, 16, 31} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			t.Parallel() // simulations on the test's goroutine: two sizes at once on two cores
			sets := VotingSets(n)
			sent := map[string]uint64{}
			var entries, votes uint64 // votes: sum over entries of K_p-1
			for seed := range int64(seeds) {
				s, _ := mkRun(t, n, requests, seed+1000)
				for k, v := range s.Stats().ByKind {
					sent[k] += v
				}
				for _, e := range s.Events() {
					if e.Kind == EventEnter {
						entries++
						votes += uint64(len(sets[e.Peer]) - 1)
					}
				}
			}
			assert.Equal(t, votes, sent["request"], "requests")
			assert.Equal(t, votes, sent["release"], "releases")
			assert.Equal(t, votes+sent["relinquish"], sent["locked"], "locked = kept + given back")
			assert.LessOrEqual(t, sent["relinquish"], sent["inquire"], "a RELINQUISH answers an INQUIRE")
			assert.Zero(t, sent["reply"]+sent["grant"]+sent["token"]+sent["privilege"], "kinds Maekawa does not use")
			var total uint64
			for _, v := range sent {
				total += v
			}
			per := float64(votes) / float64(entries) // mean K-1
			t.Logf("n=%d mean K-1=%.2f: %.2f msgs/entry = %.2f(K-1); per entry: request %.2f locked %.2f release %.2f failed %.2f inquire %.2f relinquish %.2f",
				n, per, float64(total)/float64(entries), float64(total)/float64(votes),
				ratio(sent["request"], entries), ratio(sent["locked"], entries), ratio(sent["release"], entries),
				ratio(sent["failed"], entries), ratio(sent["inquire"], entries), ratio(sent["relinquish"], entries))
		})
	}
}

func ratio(a, b uint64) float64 { return float64(a) / float64(b) }
