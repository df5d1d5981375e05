package dmutex

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var maxStates = flag.Int("dmutex.maxstates", 0, "stop each exhaustive check after this many states (0: the default limit)")

var checkWorkers = flag.Int("dmutex.workers", 0, "search the big cases with this many goroutines (CheckConfig.Workers): the same states, verdicts and bounds, sooner on more cores")

var checkOnTheFly = flag.Bool("dmutex.onthefly", false, "search the big cases with the graph on the fly instead (CheckConfig.OnTheFly, one goroutine): the same states, verdicts and bounds, in about a quarter of the memory")

var bigCases = flag.String("dmutex.bigcases", "", "also model-check the big cases whose names (as TestModelCheck's subtests) match this regular expression, and let TestDocTables -update recompute their cells: one big cell without all the others")

// bigCase reports whether the big case cc is to run: with -dmutex.big,
// or when -dmutex.bigcases matches its name.
func bigCase(cc checkCase) bool {
	if *bigChecks {
		return true
	}
	if *bigCases == "" {
		return false
	}
	return regexp.MustCompile(*bigCases).MatchString(cc.name())
}

var bigChecks = flag.Bool("dmutex.big", false, "also model-check the big configurations (Lamport with two requests per peer, implicit replies with two requests over an unordered network, Ricart-Agrawala and Maekawa at n = 4 with the graph): minutes and gigabytes")

// checkExpectation is what the model checker expects of one algorithm.
type checkExpectation struct {
	order  orderRule
	tokens bool // the machines must implement tokenHolder
	nets   []Network
}

// expectations lists, per algorithm, the order it promises, whether it is
// a token algorithm, and the network models to check it over: FIFO only
// for the algorithms that need it, both models otherwise.
var expectations = [numAlgorithms]checkExpectation{
	Centralized:         {order: orderCoordinator, nets: []Network{NetworkFIFO, NetworkUnordered}},
	TokenRing:           {tokens: true, nets: []Network{NetworkFIFO, NetworkUnordered}},
	Lamport:             {order: orderTimestamp, nets: []Network{NetworkFIFO}},
	RicartAgrawala:      {order: orderTimestamp, nets: []Network{NetworkFIFO, NetworkUnordered}},
	Maekawa:             {nets: []Network{NetworkFIFO}},
	SuzukiKasami:        {tokens: true, nets: []Network{NetworkFIFO, NetworkUnordered}},
	Raymond:             {tokens: true, nets: []Network{NetworkFIFO, NetworkUnordered}},
	RoucairolCarvalho:   {nets: []Network{NetworkFIFO, NetworkUnordered}},
	NaimiTrehel:         {tokens: true, nets: []Network{NetworkFIFO, NetworkUnordered}},
	LodhaKshemkalyani:   {order: orderTimestamp, nets: []Network{NetworkFIFO}},
	RicartAgrawalaToken: {tokens: true, nets: []Network{NetworkFIFO, NetworkUnordered}},
	AgrawalElAbbadi:     {nets: []Network{NetworkFIFO}},
	SinghalDynamic:      {nets: []Network{NetworkFIFO, NetworkUnordered}},
	SinghalHeuristic:    {tokens: true, nets: []Network{NetworkFIFO, NetworkUnordered}},
}

// checkCase is one configuration for the exhaustive check.
type checkCase struct {
	v           variant
	n, requests int
	net         Network
	big         bool // only with -dmutex.big
	live        bool // big, but with the graph: liveness and bounded waiting are computed
}

func (cc checkCase) name() string {
	return fmt.Sprintf("%s/n=%d/r=%d/%v", cc.v.name, cc.n, cc.requests, cc.net)
}

// checkCases lists every configuration, for every algorithm.
func checkCases() []checkCase {
	var cs []checkCase
	for _, a := range Algorithms() {
		vs := []variant{{name: a.String(), alg: a}}
		if a == RicartAgrawala {
			vs = append(vs, variant{name: "ricart-agrawala-implicit", alg: a, opts: []Option{WithImplicitReplies()}})
		}
		for _, v := range vs {
			for _, net := range expectations[a].nets {
				// Two requests per peer are big for Lamport (its clocks
				// differ between delivery orders: hundreds of millions of
				// states), and for implicit replies over an unordered
				// network, where stale requests and replies linger (6.4M
				// states). Maekawa's grid sets at n = 3 stay small.
				big2 := a == Lamport || (v.opts != nil && net == NetworkUnordered)
				cs = append(cs,
					checkCase{v: v, n: 3, requests: 1, net: net},
					checkCase{v: v, n: 3, requests: 2, net: net, big: big2})
				if a == RicartAgrawala && net == NetworkUnordered {
					// Regression for stale requests with implicit replies,
					// which overtook newer ones and lost a reply.
					cs = append(cs, checkCase{v: v, n: 2, requests: 3, net: net})
				}
				if a == Maekawa || a == AgrawalElAbbadi {
					// Agrawal-El Abbadi: 210,515 states with the graph, 15 s.
					cs = append(cs, checkCase{v: v, n: 4, requests: 1, net: net, big: true, live: true})
				}
				if a == RicartAgrawala && net == NetworkFIFO {
					// Bounded waiting at n = 4 (docs: the overtakes-n4
					// table): millions of states with the graph.
					cs = append(cs, checkCase{v: v, n: 4, requests: 1, net: net, big: true, live: true})
				}
				if a == Centralized && net == NetworkFIFO {
					cs = append(cs, checkCase{v: v, n: 4, requests: 1, net: net})
				}
				if a == LodhaKshemkalyani {
					// The bound on overtaking at n = 4: 1.4M states with
					// the graph, a minute.
					cs = append(cs, checkCase{v: v, n: 4, requests: 1, net: net, big: true, live: true})
				}
				if (a == RoucairolCarvalho || a == SinghalDynamic) && net == NetworkFIFO {
					// The bound on overtaking at n = 4 that their docs
					// state: 65,825 states with the graph, 3 s.
					cs = append(cs, checkCase{v: v, n: 4, requests: 1, net: net, big: true, live: true})
				}
				if a == SinghalHeuristic {
					// The bound on overtaking at n = 4: 28,732 states
					// with the graph over FIFO channels, 54,603 over
					// reordering ones.
					cs = append(cs, checkCase{v: v, n: 4, requests: 1, net: net, big: net == NetworkUnordered, live: true})
				}
				if a == TokenRing || a == Raymond || a == NaimiTrehel {
					// Cheap enough with four peers: a longer ring, a
					// tree with a node two hops from the root, and
					// paths of three hops.
					cs = append(cs, checkCase{v: v, n: 4, requests: 1, net: net})
				}
				if net == NetworkFIFO && (a == TokenRing || a == RoucairolCarvalho || a == RicartAgrawalaToken || a == SinghalDynamic || a == SuzukiKasami || a == AgrawalElAbbadi || a == SinghalHeuristic) {
					// Bounded waiting at n = 4 with two requests per
					// peer, with the graph found depth first: 4.7M
					// states (the token ring), 6.5M (Roucairol-Carvalho,
					// Singhal dynamic) and 12.2M (Ricart-Agrawala
					// token), a minute or two each and up to 3.2 GB;
					// 20.2M (Singhal's heuristic), 3 minutes and 3 GB
					// with two workers (-dmutex.workers 2); 29.8M
					// (Suzuki-Kasami) and 44.8M (Agrawal-El Abbadi), 11
					// to 14 minutes and up to 4.2 GB on one goroutine.
					cs = append(cs, checkCase{v: v, n: 4, requests: 2, net: net, big: true, live: true})
				}
				if net == NetworkFIFO {
					// The bounds on overtaking, at the sizes the doc
					// comments name.
					cs = append(cs, checkCase{v: v, n: 2, requests: 4, net: net})
					switch a {
					case Centralized, Raymond:
						cs = append(cs, checkCase{v: v, n: 4, requests: 2, net: net},
							checkCase{v: v, n: 3, requests: 3, net: net})
					case NaimiTrehel:
						// 43,346 states with the graph at n = 4, r = 2:
						// seconds under -race.
						cs = append(cs, checkCase{v: v, n: 4, requests: 2, net: net, big: true, live: true},
							checkCase{v: v, n: 3, requests: 3, net: net})
					case SuzukiKasami:
						cs = append(cs, checkCase{v: v, n: 4, requests: 1, net: net},
							checkCase{v: v, n: 3, requests: 3, net: net, big: true})
					case SinghalHeuristic:
						// 169,695 states with the graph at n = 3, r = 3.
						cs = append(cs, checkCase{v: v, n: 3, requests: 3, net: net, big: true, live: true})
					case RicartAgrawalaToken:
						// 56,547 states with the graph at n = 4: about
						// ten seconds under -race on a loaded machine.
						cs = append(cs, checkCase{v: v, n: 4, requests: 1, net: net, big: true, live: true},
							checkCase{v: v, n: 3, requests: 3, net: net, big: true})
					case TokenRing, Maekawa:
						cs = append(cs, checkCase{v: v, n: 3, requests: 3, net: net, big: true})
					}
				}
			}
		}
	}
	return cs
}

// mustCheck runs Check and fails the test on an error.
func mustCheck(t testing.TB, cfg CheckConfig) CheckResult {
	t.Helper()
	res, err := Check(context.Background(), cfg)
	require.NoError(t, err)
	return res
}

// TestModelCheck explores every reachable state of small clusters of
// every algorithm through Check and requires every property: mutual
// exclusion, the promised entry order, exactly one token for token
// algorithms, no deadlock, and no fair cycle that starves a request.
func TestModelCheck(t *testing.T) {
	for _, cc := range checkCases() {
		t.Run(cc.name(), func(t *testing.T) {
			if cc.big && !bigCase(cc) {
				t.Skip("big; run with -dmutex.big or -dmutex.bigcases")
			}
			if testing.Short() && cc.v.alg == Lamport {
				t.Skip("75k states and their graph, seconds under -race; skipped with -short")
			}
			if raceHeavy(cc) {
				skipRaceLight(t, "thousands to hundreds of thousands of states")
			}
			// Each small search runs on its own goroutine and holds at
			// most tens of megabytes: two at once use both cores. The
			// big ones, gigabytes each, run one at a time.
			if !cc.big {
				t.Parallel()
			}
			exp := expectations[cc.v.alg]
			cfg := modelCheckConfig(cc)
			safetyOnly := cfg.SafetyOnly
			res := sharedCheck(t, cfg) // TestPartialOrderKeepsVerdicts compares its reduced search with this one
			if res.Violation != nil {
				require.Nil(t, res.Violation, "%s: %s\n%s", res.Violation.Property, res.Violation.Message, strings.Join(res.Violation.Trace, "\n"))
			}
			if !res.Complete {
				t.Logf("%s: stopped after %d states, %d transitions, %.1fs; no violation so far",
					cc.name(), res.States, res.Transitions, res.Seconds)
				return
			}
			assert.Equal(t, Holds, res.Safe)
			assert.Equal(t, Holds, res.DeadlockFree)
			if !safetyOnly {
				assert.True(t, res.Liveness)
				assert.Equal(t, Holds, res.StarvationFree)
				assert.Equal(t, promisedOvertakes(cc.v.alg, cc.n, cc.requests), res.MaxOvertakes,
					"the bound on overtaking that the doc comment states")
			}
			m, err := algorithms[cc.v.alg].build(0, cc.n, &config{alg: cc.v.alg, n: cc.n})
			require.NoError(t, err)
			if exp.tokens {
				assert.Implements(t, (*tokenHolder)(nil), m, "a token algorithm must report its token")
			}
			w, err := NewWorld(cc.v.alg, cc.n, WorldConfig{}, cc.v.opts...)
			require.NoError(t, err)
			assert.Equal(t, exp.order, w.order, "the order the world holds the machines to")
			checkStateCell(t, cc, res)
			checkOvertakeCell(t, cc, res)
			t.Logf("%s: %d states, %d transitions, max overtakes %d, %.2fs (%.0f states/s)", cc.name(), res.States, res.Transitions,
				res.MaxOvertakes, res.Seconds, float64(res.States)/res.Seconds)
		})
	}
}

// raceHeavy reports whether TestModelCheck's case cc is left out under
// raceLight, with the other tests over the same corpus: the cases of four
// peers, of three with two requests each, and Lamport's at n = 3 (324,459
// states). Those of n = 3 with one request (but Lamport's), and of the
// small algorithms with three or four requests, still run under -race.
func raceHeavy(cc checkCase) bool {
	return cc.n >= 4 || cc.n == 3 && (cc.requests == 2 || cc.v.alg == Lamport)
}

// modelCheckConfig is what TestModelCheck explores for cc: with the graph,
// except for the big cases without it and, under the race detector with
// -dmutex.big, Lamport's at n = 3 (0.3M states), checked for safety and
// deadlock only (depth first, a third of the CPU of the search with the
// graph; its state count is still compared with docs/checking.md's
// table). Under -race without -dmutex.big the heavy cases do not run at
// all (raceHeavy).
func modelCheckConfig(cc checkCase) CheckConfig {
	limit := bigLimit(cc)
	return CheckConfig{
		Algorithm: cc.v.alg, Options: cc.v.opts, N: cc.n, Requests: cc.requests,
		Network: cc.net, MaxStates: limit, MaxMemory: bigMemory(cc),
		SafetyOnly: (cc.big && !cc.live) || (raceEnabled && cc.v.alg == Lamport && cc.n == 3),
		Workers:    bigWorkers(cc),
		OnTheFly:   bigOnTheFly(cc),
	}
}

// bigOnTheFly reports whether cc's search decides liveness on the fly:
// with -dmutex.onthefly for the big cases with the graph.
func bigOnTheFly(cc checkCase) bool {
	return *checkOnTheFly && cc.big && cc.live
}

// bigWorkers is the number of goroutines that search cc:
// -dmutex.workers for the big cases (but those on the fly), else 0.
func bigWorkers(cc checkCase) int {
	if cc.big && !bigOnTheFly(cc) {
		return *checkWorkers
	}
	return 0
}

// bigMemory is the memory limit of cc's search: none, but 6 GiB as the
// search counts it for the big cases with the graph, which keeps the
// process under about 10 GB.
func bigMemory(cc checkCase) int64 {
	if cc.big && cc.live {
		return 6 << 30
	}
	return -1
}

// bigLimit is the state limit of cc's search: -dmutex.maxstates if set,
// else the default for the small cases, and for the big ones a bound
// past their sizes.
func bigLimit(cc checkCase) int {
	limit := *maxStates
	if cc.big && cc.live && limit == 0 {
		// With the graph (100 to 200 bytes a state, depth first,
		// with the garbage): stop well short of the machine's memory.
		// The biggest case, Agrawal-El Abbadi at n = 4 with two
		// requests per peer, has 44.8M states.
		limit = 60_000_000
	}
	if cc.big && !cc.live && limit == 0 {
		// 16 bytes a state without the graph, in a table of 2^28
		// slots (4.3 GB) up to 201M states: stop just before it
		// doubles. Lamport with two requests per peer has more
		// than 200M states (docs/benchmarks.md, the checker's
		// record).
		limit = 200_000_000
	}
	return limit
}

// promisedOvertakes is the most entries by others between a request and
// its entry that each algorithm's doc comment states, for n peers and r
// requests per peer.
func promisedOvertakes(a Algorithm, n, r int) int {
	switch {
	case a == TokenRing:
		return n - 1 // the token passes each other peer once
	case a == Maekawa && n == 3 && r == 3:
		return 5 // more than twice per other peer
	case a == Lamport || a == RicartAgrawala || a == Maekawa || a == LodhaKshemkalyani || a == AgrawalElAbbadi:
		return (n - 1) * min(r, 2) // timestamps: at most twice per other peer
	}
	return (n - 1) * r // every other request: one in flight holds nobody back
}

// forger is a broken token machine for tests of the token checks: peer 0
// starts with the token, and a peer without it forges one when asked.
type forger struct{ token bool }

var _, _ tokenHolder = (*forger)(nil), (*dropper)(nil)

func (f *forger) step(ev event, out *output) {
	if ev.kind == evRequest {
		f.token = true
		out.enter()
	}
}
func (f *forger) hasToken() bool              { return f.token }
func (f *forger) carriesToken(Message) bool   { return false }
func (f *forger) clone() machine              { c := *f; return &c }
func (f *forger) appendState(b []byte) []byte { return appendBool(b, f.token) }

// dropper is a broken token machine that loses the token, with no fault
// at all, when its holder leaves.
type dropper struct{ token, inside bool }

func (d *dropper) step(ev event, out *output) {
	switch {
	case ev.kind == evRequest && d.token:
		d.inside = true
		out.enter()
	case ev.kind == evRelease:
		d.inside = false
		d.token = false // vanished
	}
}
func (d *dropper) hasToken() bool            { return d.token }
func (d *dropper) carriesToken(Message) bool { return false }
func (d *dropper) clone() machine            { c := *d; return &c }
func (d *dropper) appendState(b []byte) []byte {
	return appendBool(appendBool(b, d.token), d.inside)
}

// stamped gives a machine a fixed request timestamp, which the order
// checks then hold it to.
type stamped struct {
	machine
	ts uint64
}

func (s *stamped) requestTS() uint64 { return s.ts }
func (s *stamped) clone() machine    { return &stamped{s.machine.clone(), s.ts} }

// backwards is a centralized machine whose timestamps run against the
// ids, so that some arrival order at the coordinator breaks
// (timestamp, id) order.
func backwards(id, n int) machine {
	m, _ := newCentralized(id, n, nil)
	return &stamped{m, uint64(n - id)}
}

// plain hides every optional interface of the centralized machine: no
// order is promised.
type plain struct{ machine }

func (p *plain) clone() machine { return &plain{p.machine.clone()} }

// TestCheckFindsBrokenMachines checks the checker against machines broken
// on purpose, in ways the real ones are not.
func TestCheckFindsBrokenMachines(t *testing.T) {
	tests := []struct {
		name  string
		build func(id, n int) machine
		prop  string
		want  string
	}{
		{"overlap", func(int, int) machine { return &fakeMachine{} }, "safety", "peer 1 entered while peer 0 was inside"},
		{"deadlock", func(int, int) machine { return &fakeMachine{never: true} }, "deadlock", "peers [0 1] wait and no message is in flight"},
		{"forged token", func(id, _ int) machine { return &forger{token: id == 0} }, "safety", "2 tokens held and 0 in flight"},
		{"vanished token", func(id, _ int) machine { return &dropper{token: id == 0} }, "safety", "0 tokens held and 0 in flight"},
		{"timestamp order", backwards, "safety", "peer 1 entered with request (1, 1) after the younger (2, 0)"},
		{"no order promised", func(id, n int) machine { m := backwards(id, n); return &plain{m} }, "", ""}, // control
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := mustCheck(t, CheckConfig{Algorithm: Centralized, N: 2, Requests: 1, build: tt.build})
			if tt.want == "" {
				require.Nil(t, res.Violation)
				assert.True(t, res.Complete && res.Safe == Holds && res.DeadlockFree == Holds && res.StarvationFree == Holds)
				return
			}
			require.NotNil(t, res.Violation)
			assert.Equal(t, tt.prop, res.Violation.Property)
			assert.Contains(t, res.Violation.Message, tt.want)
			assert.NotEmpty(t, res.Violation.Trace)
			assert.Contains(t, res.Violation.Mermaid, "sequenceDiagram")
			t.Logf("%s:\n    %s", res.Violation.Message, strings.Join(res.Violation.Trace, "\n    "))
		})
	}
}

// TestCheckCoordinatorOrder breaks the coordinator's FIFO promise: a
// coordinator that grants its newest waiter first.
func TestCheckCoordinatorOrder(t *testing.T) {
	res := mustCheck(t, CheckConfig{Algorithm: Centralized, N: 3, Requests: 1, build: func(id, n int) machine {
		m, _ := newCentralized(id, n, nil)
		return &lifo{m.(*centralized)}
	}})
	require.NotNil(t, res.Violation)
	assert.Contains(t, res.Violation.Message, "but the coordinator had the requests of")
}

// lifo is a centralized machine that serves its newest waiter first.
type lifo struct{ *centralized }

func (l *lifo) step(ev event, out *output) {
	if q := l.queue; len(q) > 1 {
		q[0], q[len(q)-1] = q[len(q)-1], q[0]
	}
	l.centralized.step(ev, out)
}
func (l *lifo) clone() machine { return &lifo{l.centralized.clone().(*centralized)} }

// TestSimulationFindsVanishedToken: the simulator reports a token that
// vanished without a fault.
func TestSimulationFindsVanishedToken(t *testing.T) {
	for _, d := range []Delivery{DeliverFIFO, DeliverLockStep} {
		s := simulation(t, variant{alg: Centralized}, 2, SimConfig{Delivery: d})
		s.w.replaceMachines(func(id, _ int) machine { return &dropper{token: id == 0} })
		require.NoError(t, s.Request(0))
		err := s.Run()
		require.ErrorIs(t, err, ErrViolation, "delivery %v", d)
		assert.Contains(t, err.Error(), "0 tokens held and 0 in flight, want exactly one in all", "delivery %v", d)
	}
}

func TestSimulationFindsEntryOutOfOrder(t *testing.T) {
	s := simulation(t, variant{alg: Centralized}, 2, SimConfig{Delivery: DeliverLockStep})
	s.w.replaceMachines(backwards)
	require.NoError(t, s.Request(0)) // the coordinator enters at once
	require.NoError(t, s.Request(1))
	err := s.Run()
	require.ErrorIs(t, err, ErrViolation)
	assert.Contains(t, err.Error(), "peer 1 entered with request (1, 1) after the younger (2, 0)")
}

func TestSimulationFindsForgedToken(t *testing.T) {
	s := simulation(t, variant{alg: Centralized}, 2, SimConfig{})
	s.w.replaceMachines(func(id, _ int) machine { return &forger{token: id == 0} })
	require.NoError(t, s.Request(0))
	require.NoError(t, s.Run())
	err := s.Request(1)
	require.ErrorIs(t, err, ErrViolation)
	assert.Contains(t, err.Error(), "2 tokens held and 0 in flight, want exactly one in all")
}

// TestCheckVariants runs every variant through Check with its defaults
// alone, and requires a violation with a trace that replays. The search
// is shared with TestSafetyOnlyCounterexamples (sharedCheck).
//
// Under -race without -dmutex.big, a variant of more than three peers
// (maekawa-textbook-failed: 283k states with the graph, 0.9 GB and 25 s
// of CPU under -race; depth first, 204k states and still 15 s) is not
// searched: TestDocTables replays in every run, step by step, the
// shortest trace to its deadlock that docs/checking.md shows. A run
// without -race, or with -dmutex.big, searches it.
func TestCheckVariants(t *testing.T) {
	for _, v := range Variants() {
		t.Run(v.Name, func(t *testing.T) {
			if raceEnabled && v.N > 3 && !*bigChecks {
				t.Skip("hundreds of thousands of states, 15 s of CPU under -race; TestDocTables replays its trace; run without -race or with -dmutex.big")
			}
			t.Parallel() // one search each: two at once on two cores
			res := sharedCheck(t, CheckConfig{Variant: v.Name, StopAtDeadlock: true})
			require.NotNil(t, res.Violation, "no counterexample in %d states", res.States)
			assert.Equal(t, v.Algorithm.String(), res.Algorithm)
			assert.NotEmpty(t, res.Violation.Trace)
			requireReplays(t, res.Violation)
			t.Logf("%s, %d states: %s: %s\n    %s", v.Name, res.States, res.Violation.Property, res.Violation.Message,
				strings.Join(res.Violation.Trace, "\n    "))
		})
	}
}

// requireReplays replays v through the simulator's world: a safety
// violation's last step breaks the promise again (on the step, or at the
// rest it reaches), and a deadlock's trace ends where nothing is left to
// do with a peer waiting.
func requireReplays(t *testing.T, v *Violation) {
	t.Helper()
	assert.Len(t, v.Transitions, len(v.Trace))
	w, err := v.Replay()
	require.NotNil(t, w)
	switch v.Property {
	case "safety":
		require.NoError(t, err)
		last, ok := w.Find(v.Transitions[len(v.Transitions)-1])
		require.True(t, ok)
		var st StepResult
		st, err = w.Apply(last)
		if err == nil {
			err = st.overlap // with the fenced store, two inside does not stop the run
		}
		if err == nil && w.quiet() {
			err = w.finalCheck() // a promise for a cluster at rest
		}
		require.ErrorIs(t, err, ErrViolation, "the last step breaks the promise again")
	case "fenced safety":
		require.NoError(t, err)
		last, ok := w.Find(v.Transitions[len(v.Transitions)-1])
		require.True(t, ok)
		_, err = w.Apply(last)
		require.ErrorIs(t, err, ErrViolation, "the last write is accepted out of turn again")
		assert.Contains(t, err.Error(), "fenced safety")
	case "deadlock":
		require.NoError(t, err)
		assert.True(t, w.quiet(), "the trace ends where nothing is left to do")
		assert.NotEmpty(t, w.Waiting())
	case "starvation":
		require.NoError(t, err)
		assert.NotEmpty(t, w.Waiting(), "a peer still waits after a turn of the cycle")
	default:
		t.Fatalf("unknown property %q", v.Property)
	}
}

// TestReplayEveryProperty replays one counterexample of each property
// Check reports (issue 22: Replay failed for every fenced-safety one).
func TestReplayEveryProperty(t *testing.T) {
	t.Parallel() // computation on the test's goroutine only: beside the other parallel tests at the end
	for _, tt := range []struct {
		prop string
		cfg  CheckConfig
	}{
		{"safety", CheckConfig{Variant: "ricart-agrawala-tie-reply"}},
		{"safety", CheckConfig{Algorithm: Centralized, N: 2, Requests: 1, build: func(id, _ int) machine { return &dropper{token: id == 0} }}}, // broken at rest
		{"safety", CheckConfig{Algorithm: Centralized, N: 3, Requests: 1, Options: []Option{WithRecovery()}, Fenced: true, // two inside, past which the search goes on
			Detector: Detector{Kind: DetectorImperfect, FalseSuspicions: 1}, SafetyOnly: raceLight()}}, // its graph: 5 s under -race
		{"fenced safety", CheckConfig{Variant: "ricart-agrawala-tie-reply", Fenced: true}},
		{"fenced safety", CheckConfig{Algorithm: RicartAgrawala, N: 2, Fenced: true, build: newEager}},
		{"deadlock", CheckConfig{Variant: "maekawa-no-inquire"}},
		{"deadlock", CheckConfig{Variant: "maekawa-no-inquire", SafetyOnly: true}},
		{"starvation", CheckConfig{Algorithm: TokenRing, N: 3, Requests: 1, build: func(id, _ int) machine { return &bouncer{id: id, token: id == 0} }}},
	} {
		t.Run(tt.prop, func(t *testing.T) {
			res, err := Check(context.Background(), tt.cfg)
			require.NoError(t, err)
			require.NotNil(t, res.Violation)
			require.Equal(t, tt.prop, res.Violation.Property)
			requireReplays(t, res.Violation)
		})
	}
}

// TestViolationKeepsOnlyTheConfiguration: a Violation holds what replay
// needs, not the search. Issue 22: holding only the Violation of
// maekawa-textbook-failed kept 57 MB alive.
func TestViolationKeepsOnlyTheConfiguration(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	// A deadlock found after 33,524 states, a few megabytes of graph.
	res, err := Check(context.Background(), CheckConfig{Variant: "suzuki-kasami-outdated-token", StopAtDeadlock: true})
	require.NoError(t, err)
	v := res.Violation
	require.NotNil(t, v)
	states := res.States
	res = CheckResult{}
	held := int64(heap()) - int64(before)
	t.Logf("after %d states, the violation holds %d bytes", states, held)
	assert.Less(t, held, int64(1<<20), "a Violation holds the search's graph")
	_, err = v.Replay()
	require.NoError(t, err)
	runtime.KeepAlive(v)
}

// TestCheckVariantsRefusedByClusters: a variant is for the simulator, the
// world and the checker only, which take it in their configurations; New
// and NewPeer have no way to take one.
func TestCheckVariantsRefusedByClusters(t *testing.T) {
	for _, v := range Variants() {
		_, err := NewSimulation(v.Algorithm, 3, SimConfig{Variant: v.Name})
		require.NoError(t, err)
		_, err = NewWorld(v.Algorithm, 3, WorldConfig{Variant: v.Name})
		require.NoError(t, err)
	}
	_, err := NewSimulation(Lamport, 3, SimConfig{Variant: "maekawa-no-inquire"})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewWorld(Lamport, 3, WorldConfig{Variant: "maekawa-no-inquire"})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewSimulation(Lamport, 3, SimConfig{Variant: "nope"})
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), `unknown variant "nope"`)
}

// TestCheckJSON pins the keys of the JSON object, fixed by issue 11.
func TestCheckJSON(t *testing.T) {
	res := mustCheck(t, CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 1})
	b, err := json.Marshal(res)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for _, k := range []string{"algorithm", "n", "requests", "network", "states", "transitions", "seconds",
		"complete", "safe", "deadlockFree", "starvationFree", "maxOvertakes", "violation", "fencedSafe"} {
		assert.Contains(t, m, k)
	}
	assert.Equal(t, "ricart-agrawala", m["algorithm"])
	assert.Equal(t, "fifo", m["network"])
	assert.Equal(t, true, m["complete"])
	assert.Equal(t, true, m["safe"])
	assert.Equal(t, true, m["deadlockFree"])
	assert.Equal(t, true, m["starvationFree"])
	assert.Nil(t, m["violation"])
	assert.Nil(t, m["fencedSafe"], "null when not checked")
	assert.Equal(t, float64(res.MaxOvertakes), m["maxOvertakes"])

	res.MaxOvertakes = -1
	b, err = json.Marshal(res)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"maxOvertakes":-1`, "unbounded")
	res.Liveness = false
	b, err = json.Marshal(res)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"maxOvertakes":null`, "not computed")

	var back CheckResult
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, Holds, back.Safe)
	assert.Equal(t, Undecided, back.FencedSafe)

	bad := mustCheck(t, CheckConfig{Variant: "ricart-agrawala-tie-reply"})
	b, err = json.Marshal(bad)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &m))
	viol, ok := m["violation"].(map[string]any)
	require.True(t, ok)
	assert.Equal(t, "safety", viol["property"])
	assert.NotEmpty(t, viol["trace"])
	assert.Contains(t, viol["mermaid"], "sequenceDiagram")
}

// TestCheckStateLimit: a limit stops the search with complete false,
// every property undecided and liveness not computed.
func TestCheckStateLimit(t *testing.T) {
	res := mustCheck(t, CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 2, MaxStates: 100})
	assert.False(t, res.Complete)
	assert.Equal(t, StoppedAtStateLimit, res.Stopped)
	assert.Equal(t, 100, res.States)
	assert.False(t, res.Liveness)
	assert.Equal(t, -1, res.MaxOvertakes)
	for _, v := range []Verdict{res.Safe, res.DeadlockFree, res.StarvationFree, res.FencedSafe} {
		assert.Equal(t, Undecided, v)
	}
}

func TestCheckBadConfig(t *testing.T) {
	for _, cfg := range []CheckConfig{
		{Algorithm: Algorithm(99)},
		{Algorithm: Lamport, N: -1},
		{Algorithm: Lamport, Requests: -2},
		{Algorithm: Lamport, N: 2, RequestsPerPeer: []int{1}},
		{Algorithm: Lamport, N: 2, RequestsPerPeer: []int{1, -3}},
		{Algorithm: Lamport, Network: Network(9)},
		{Algorithm: Lamport, Faults: CheckFaults{Crash: true, CrashOnly: 1 << 3}},
		{Algorithm: Lamport, Faults: CheckFaults{CrashOnly: 1}},
		{Algorithm: Lamport, Faults: CheckFaults{Lose: true, LoseKind: MessageKind(77)}},
		{Variant: "nope"},
		{Algorithm: Lamport, Options: []Option{WithImplicitReplies()}},
	} {
		_, err := Check(context.Background(), cfg)
		require.ErrorIs(t, err, ErrInvalidConfig, "%+v", cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Check(ctx, CheckConfig{Algorithm: Lamport, Requests: 2, N: 3})
	require.ErrorIs(t, err, context.Canceled)
}

// TestCheckFaultsCrashOnly: the zero CrashOnly lets any peer crash, a set
// only its peers, and String names the set as the tables write it.
func TestCheckFaultsCrashOnly(t *testing.T) {
	for _, tt := range []struct {
		f      CheckFaults
		want   string
		crashM []int // the peers whose crash the first state enables
	}{
		{CheckFaults{Crash: true}, "crash any", []int{0, 1, 2}},
		{CheckFaults{Crash: true, CrashOnly: 1 << 1}, "crash P1", []int{1}},
		{CheckFaults{Crash: true, CrashOnly: 1<<0 | 1<<2, CrashInside: true}, "crash {0,2} inside", nil},
		{CheckFaults{Crash: true, CrashOnly: 1<<0 | 1<<2}, "crash {0,2}", []int{0, 2}},
	} {
		assert.Equal(t, tt.want, tt.f.String())
		c, err := newChecker(CheckConfig{Algorithm: RicartAgrawala, Faults: tt.f})
		require.NoError(t, err)
		w, err := c.startWorld(false)
		require.NoError(t, err)
		var crashes []int
		for _, tr := range w.Transitions() {
			if tr.Kind == TransCrash {
				crashes = append(crashes, tr.Peer)
			}
		}
		assert.Equal(t, tt.crashM, crashes, "%v", tt.f)
	}
}

// TestCheckCancel: the search looks at its context at every transition,
// and returns what it found so far with ctx.Err(). The context is
// cancelled from Progress, on the search's own goroutine, so the test
// knows exactly how far the search had come; and a context cancelled
// before the start ends even a search of 65 peers (depth first) at its
// first step. Issue 22: it looked every 4,096 states, and returned a zero
// result.
func TestCheckCancel(t *testing.T) {
	for _, safetyOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("safetyOnly=%v", safetyOnly), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			at := -1
			res, err := Check(ctx, CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: Unlimited, MaxStates: -1, SafetyOnly: safetyOnly,
				Progress: func(p CheckProgress) {
					if at < 0 {
						at = p.Transitions
						cancel()
					}
				}})
			require.ErrorIs(t, err, context.Canceled)
			require.GreaterOrEqual(t, at, 0)
			assert.LessOrEqual(t, res.Transitions, at+1, "no transition taken after the one that saw the context end")
			assert.False(t, res.Complete)
			assert.Equal(t, StoppedByContext, res.Stopped)
			assert.Positive(t, res.States)
			assert.Equal(t, Undecided, res.Safe)
			assert.Equal(t, Undecided, res.DeadlockFree)
			assert.Equal(t, "ricart-agrawala", res.Algorithm)
		})
	}
	for _, n := range []int{3, 65} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res, err := Check(ctx, CheckConfig{Algorithm: RicartAgrawala, N: n, MaxStates: -1})
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 1, res.States, "n = %d", n)
		assert.LessOrEqual(t, res.Transitions, 1, "n = %d", n)
	}
}

// TestCheckStopsAtTheLimit: the search ends at the first new state past
// MaxStates, also depth first with 65 peers, where it used to try every
// transition left on its stack (issue 22: -n 65 -max-states 100 ran for
// more than 10 s, past 6,000 transitions).
func TestCheckStopsAtTheLimit(t *testing.T) {
	for _, n := range []int{3, 65} {
		res := mustCheck(t, CheckConfig{Algorithm: RicartAgrawala, N: n, Requests: 2, MaxStates: 100})
		assert.Equal(t, 100, res.States, "n = %d", n)
		assert.False(t, res.Complete)
		assert.Equal(t, StoppedAtStateLimit, res.Stopped)
		assert.Less(t, res.Transitions, 1000, "n = %d: the search went on past its limit", n)
		t.Logf("n = %d: %d transitions, %.3fs", n, res.Transitions, res.Seconds)
	}
}

// TestConcurrentChecksLeaveGCPercent: Check changes no process-wide
// setting, even when several run at once (issue 22: it set the GC
// percent, and two overlapping Checks left it at 400).
func TestConcurrentChecksLeaveGCPercent(t *testing.T) {
	old := debug.SetGCPercent(123)
	defer debug.SetGCPercent(old)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = Check(context.Background(), CheckConfig{Algorithm: RicartAgrawala, N: 3})
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, 123, debug.SetGCPercent(123))
}

// TestHashCollisionNote writes docs/checking.md's chance of a hash
// collision at the largest search the pages report: with s states and
// 128-bit hashes, at most s(s-1)/2 pairs each collide with chance 2^-128
// (the union bound), below s²/2^129. -update rewrites it.
func TestHashCollisionNote(t *testing.T) {
	largest := 0
	files, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	for _, f := range append(files, "README.md") {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range statesCount.FindAllStringSubmatch(string(b), -1) {
			k, err := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
			require.NoError(t, err)
			largest = max(largest, k)
		}
	}
	require.Greater(t, largest, DefaultMaxStates, "the pages report a search past the default limit")
	chance := func(s int) float64 { return float64(s) * float64(s-1) / 2 / math.Pow(2, 128) }
	chance64 := func(s int) float64 { return float64(s) * float64(s-1) / 2 / math.Pow(2, 64) }
	note := fmt.Sprintf("With 128-bit hashes, the default, a search of %s states (the largest\n"+
		"these pages report) has a chance below %s that two of its states share\n"+
		"a hash; one that stops at the default limit (`DefaultMaxStates`, %s\n"+
		"states), below %s. With 64-bit hashes (`-fingerprint 64`), the chance is\n"+
		"below %s at the default limit and %s at %s states.\n",
		thousands(largest), scientific(chance(largest)), thousands(DefaultMaxStates), scientific(chance(DefaultMaxStates)),
		scientific(chance64(DefaultMaxStates)), scientific(chance64(largest)), thousands(largest))
	page := readDoc(t, checkingPage)
	page.replace(t, "<!-- BEGIN hash-collisions -->\n", "<!-- END hash-collisions -->", note)
	page.finish(t)
}

// statesCount finds "27,253,788 states" in the pages.
var statesCount = regexp.MustCompile(`\b([0-9]{1,3}(?:,[0-9]{3})+) states\b`)

// scientific writes x, rounded up, as "6 × 10⁻²³".
func scientific(x float64) string {
	e := int(math.Floor(math.Log10(x)))
	m := math.Ceil(x / math.Pow(10, float64(e)))
	if m == 10 {
		m, e = 1, e+1
	}
	sup := strings.NewReplacer("-", "⁻", "0", "⁰", "1", "¹", "2", "²", "3", "³", "4", "⁴", "5", "⁵", "6", "⁶", "7", "⁷", "8", "⁸", "9", "⁹")
	return fmt.Sprintf("%g × 10%s", m, sup.Replace(strconv.Itoa(e)))
}

// BenchmarkCheck measures the checker: one op is one whole check, and
// states/s is its speed (the graph for liveness included).
func BenchmarkCheck(b *testing.B) {
	for _, cfg := range []CheckConfig{
		{Algorithm: RicartAgrawala, N: 3, Requests: 2},
		{Algorithm: RicartAgrawala, N: 3, Requests: 2, OnTheFly: true},
		{Algorithm: Lamport, N: 3, Requests: 1},
		{Algorithm: Lamport, N: 3, Requests: 1, OnTheFly: true},
		{Algorithm: Lamport, N: 3, Requests: 1, SafetyOnly: true},
	} {
		search := "graph"
		switch {
		case cfg.OnTheFly:
			search = "on-the-fly"
		case cfg.SafetyOnly:
			search = "safety"
		}
		b.Run(fmt.Sprintf("alg=%v/n=%d/r=%d/search=%s", cfg.Algorithm, cfg.N, cfg.Requests, search), func(b *testing.B) {
			b.ReportAllocs()
			states := 0
			for b.Loop() {
				res, err := Check(context.Background(), cfg)
				if err != nil || res.Violation != nil || !res.Complete {
					b.Fatalf("%v %+v", err, res.Violation)
				}
				states += res.States
			}
			b.ReportMetric(float64(states)/b.Elapsed().Seconds(), "states/s")
		})
	}
}

// TestCheckMemoryLimit: MaxMemory stops the search, whatever the size of
// a state, and what the stopped search holds on the heap (its graph, its
// hashes and its frontier, measured) is within the limit. Issue 22: with
// eight peers, nine false suspicions and an unordered network, the
// default state limit let the breadth-first frontier pass 3 GiB in a
// minute.
func TestCheckMemoryLimit(t *testing.T) {
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	cfg := CheckConfig{Algorithm: RicartAgrawala, N: 8, Options: []Option{WithRecovery()}, Network: NetworkUnordered,
		Detector: Detector{Kind: DetectorImperfect, FalseSuspicions: 9}, MaxMemory: 8 << 20}
	if raceLight() {
		cfg.MaxMemory = 3 << 20 // 48,129 states at 8 MiB took 9 s under -race
	}
	before := heap()
	c, err := newChecker(cfg)
	require.NoError(t, err)
	require.NoError(t, c.explore(context.Background()))
	held := heap() - before
	res := c.result()
	assert.False(t, res.Complete)
	assert.Equal(t, StoppedAtMemoryLimit, res.Stopped)
	assert.Less(t, res.States, DefaultMaxStates)
	assert.Equal(t, Undecided, res.Safe)
	assert.Less(t, held, cfg.MaxMemory, "the stopped search holds more than its limit")
	t.Logf("stopped at %d states, holding %d bytes (%d counted)", res.States, held, c.memory(c.waiting))
	runtime.KeepAlive(c)

	res = mustCheck(t, CheckConfig{Algorithm: RicartAgrawala, N: 3, MaxMemory: -1})
	assert.True(t, res.Complete, "no limit")
}

// TestWorldSizeIsAnUpperBound: the size the search counts for a world is
// at least what keeping it costs, measured on the heap: the worlds of a
// breadth-first frontier, eight peers, recovery, faults in the mix.
func TestWorldSizeIsAnUpperBound(t *testing.T) {
	c, err := newChecker(CheckConfig{Algorithm: RicartAgrawala, N: 8, Options: []Option{WithRecovery()}, Network: NetworkUnordered,
		Detector: Detector{Kind: DetectorImperfect, FalseSuspicions: 9}})
	require.NoError(t, err)
	start, err := c.startWorld(false)
	require.NoError(t, err)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	frontier, size := []*World{start}, 20_000
	if raceLight() {
		size = 5_000 // 4 s under -race for 20,000
	}
	for i := 0; len(frontier) < size; i++ {
		for _, tr := range frontier[i].Transitions() {
			next := frontier[i].Clone()
			if _, err := next.apply(tr); err == nil {
				frontier = append(frontier, next)
			}
		}
	}
	real := int64(heap() - before)
	var counted int64
	for _, w := range frontier {
		counted += deepSize(reflect.ValueOf(w), map[uintptr]bool{})
	}
	t.Logf("%d worlds: %d bytes on the heap, %d counted", len(frontier), real, counted)
	assert.GreaterOrEqual(t, counted, real-real/10)
	runtime.KeepAlive(frontier)
}

// endedCtx is a context that ends just after the search: its Done
// channel never fires, but Err reports it cancelled.
type endedCtx struct{ context.Context }

func (endedCtx) Err() error { return context.Canceled }

// TestCheckCancelBeforeLiveness: a context that ends after the last state
// but before the fair cycles are searched leaves liveness undecided, and
// Check says why, with ctx.Err().
func TestCheckCancelBeforeLiveness(t *testing.T) {
	res, err := Check(endedCtx{context.Background()}, CheckConfig{Algorithm: RicartAgrawala, N: 3})
	require.ErrorIs(t, err, context.Canceled)
	assert.True(t, res.Complete)
	assert.Equal(t, StoppedByContext, res.Stopped)
	assert.Equal(t, Holds, res.Safe)
	assert.Equal(t, Holds, res.DeadlockFree)
	assert.Equal(t, Undecided, res.StarvationFree)
	assert.False(t, res.Liveness)
}

// TestCheckFindsBrokenOrderWithTheStore: with the fenced store the search
// goes on past two holders, and past an entry out of timestamp order; the
// first of them in a step is the one a step reports. The machines enter
// as soon as asked, with timestamps against their ids: the entry of P1
// (timestamp 1) after P0's (timestamp 2) breaks the order, and beside P0
// it overlaps too, which is what the step reports.
func TestCheckFindsBrokenOrderWithTheStore(t *testing.T) {
	t.Run("order", func(t *testing.T) {
		res := mustCheck(t, CheckConfig{Algorithm: Centralized, N: 2, Requests: 1, build: backwards, Fenced: true})
		require.NotNil(t, res.Violation)
		assert.Equal(t, "safety", res.Violation.Property)
		assert.Contains(t, res.Violation.Message, "peer 1 entered with request (1, 1) after the younger (2, 0)")
		assert.Equal(t, Refuted, res.Safe)
	})
	t.Run("overlap first", func(t *testing.T) {
		c, err := newChecker(CheckConfig{Algorithm: Centralized, N: 2, Requests: 1, Fenced: true, build: func(id, n int) machine {
			return &stamped{&fakeMachine{}, uint64(n - id)}
		}})
		require.NoError(t, err)
		w, err := c.startWorld(false)
		require.NoError(t, err)
		var st StepResult
		for _, p := range []int{0, 1} {
			trs := w.Transitions()
			i := slices.IndexFunc(trs, func(tr Transition) bool { return tr.Kind == TransRequest && tr.Peer == p })
			require.GreaterOrEqual(t, i, 0)
			st, err = w.Apply(trs[i])
			require.NoError(t, err, "the store keeps the run going")
		}
		require.Error(t, st.overlap)
		assert.Contains(t, st.overlap.Error(), "peer 1 entered while peer 0 was inside")
	})
}
