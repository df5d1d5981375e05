package dmutex

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runBoth runs cfg's check twice, with the graph searched depth first
// (the default) and breadth first (as before deepgraph.go), and returns
// both checkers and results.
func runBoth(t *testing.T, cfg CheckConfig) (deep, wide *checker, dr, wr CheckResult) {
	t.Helper()
	run := func(breadthFirst bool) (*checker, CheckResult) {
		cc := cfg
		cc.breadthFirst = breadthFirst
		c, err := newChecker(cc)
		require.NoError(t, err)
		require.NoError(t, c.explore(context.Background()))
		c.liveness()
		res := c.result()
		res.Seconds = 0
		return c, res
	}
	deep, dr = run(false)
	wide, wr = run(true)
	return deep, wide, dr, wr
}

// requireSameCheck requires that both searches found the same thing:
// the same result (states, transitions, every verdict, MaxOvertakes), a
// counterexample of the same property that replays, and over FIFO
// queues (or with a build of the test's) the same graph under the same
// numbers and so the same counterexample step for step. Over an
// unordered network the order in which a state lists its deliveries is
// the order its world got the messages, which the state's encoding
// leaves out, so the two searches may see a state's edges in different
// orders (see deepgraph.go): there the counterexample of a deadlock or
// of a safety violation has the same length, a shortest one, and a
// starvation's lasso is a fair run of its own.
func requireSameCheck(t *testing.T, cfg CheckConfig) CheckResult {
	t.Helper()
	deep, wide, dr, wr := runBoth(t, cfg)
	exact := deep.classes == nil
	require.Equal(t, wr.Violation == nil, dr.Violation == nil, "violation: breadth first %v, depth first %v", wr.Violation, dr.Violation)
	if wr.Violation != nil {
		w, d := *wr.Violation, *dr.Violation
		w.origin, d.origin = nil, nil
		switch {
		case exact:
			assert.Equal(t, w, d, "the counterexample")
		case w.Property == "starvation":
			require.Equal(t, w.Message, d.Message)
			var p int
			_, err := fmt.Sscanf(d.Message, "starvation: a fair run in which P%d", &p)
			require.NoError(t, err)
			requireFairLasso(t, cfg, dr.Violation, p)
		default:
			require.Equal(t, w.Property, d.Property)
			require.Len(t, d.Transitions, len(w.Transitions), "a shortest counterexample")
		}
		_, err := dr.Violation.Replay()
		require.NoError(t, err, "the counterexample replays")
	}
	v := dr.Violation
	wr.Violation, dr.Violation = nil, nil
	require.Equal(t, wr, dr)
	dr.Violation = v
	if deep.deep && exact {
		sameSlice(t, "parents", wide.parent, deep.parent)
		sameSlice(t, "edge offsets", wide.off, deep.off)
		sameSlice(t, "edge targets", wide.to, deep.to)
		wcls, went := edgeKinds(wide)
		dcls, dent := edgeKinds(deep)
		sameSlice(t, "edge classes", wcls, dcls)
		sameSlice(t, "entries", went, dent)
		sameSlice(t, "states", wide.info, deep.info)
	}
	return dr
}

// edgeKinds returns every edge's class and entry, as c reads them
// (in bytes, or in cls and ent).
func edgeKinds(c *checker) ([]int32, []int8) {
	cls, ent := make([]int32, len(c.to)), make([]int8, len(c.to))
	for e := range int32(len(c.to)) {
		cls[e], ent[e] = c.edgeClass(e), c.edgeEntry(e)
	}
	return cls, ent
}

// sameSlice reports the first place where two slices differ.
func sameSlice[T comparable](t *testing.T, what string, want, got []T) {
	t.Helper()
	if len(want) != len(got) {
		t.Errorf("%s: %d, want %d", what, len(got), len(want))
		return
	}
	for i := range want {
		if want[i] != got[i] {
			t.Errorf("%s differ first at %d: %v, want %v", what, i, got[i], want[i])
			return
		}
	}
}

// graphCorpus is the corpus of TestDepthFirstGraphAgrees and
// TestOnTheFlyAgrees: see the former.
func graphCorpus(t *testing.T) []named {
	var corpus []named
	for _, cc := range checkCases() {
		if cc.big || cc.n != 3 || cc.requests > 2 {
			continue
		}
		if cc.requests == 2 && (raceEnabled || testing.Short() || (cc.v.alg != Centralized && cc.v.alg != RicartAgrawala && cc.v.alg != SuzukiKasami)) {
			continue
		}
		if raceEnabled && cc.v.alg == Lamport {
			continue // 324k states, twice
		}
		corpus = append(corpus, named{cc.name(), CheckConfig{Algorithm: cc.v.alg, N: cc.n, Requests: cc.requests, Network: cc.net, Options: cc.v.opts, MaxMemory: -1}})
	}
	machines := []struct {
		name  string
		build func(id, n int) machine
		reqs  []int
		tries []int
		nets  []Network
		fence bool
	}{
		{"bouncer", func(id, _ int) machine { return &bouncer{id: id, token: id == 0} }, []int{1, 1, 1}, nil, []Network{NetworkFIFO, NetworkUnordered}, false},
		{"pinger", func(id, _ int) machine { return &pinger{id: id} }, []int{0, 0, 1}, nil, []Network{NetworkFIFO, NetworkUnordered}, false},
		{"lazyHolder", newLazyHolder, []int{1, 0, 1}, nil, []Network{NetworkFIFO, NetworkUnordered}, true},
		{"fenceTwins", newFenceTwins, []int{1, 0, 1}, nil, []Network{NetworkUnordered}, true},
		{"sideNote", func(id, _ int) machine { return &sideNote{id: id} }, []int{0, 0, 1}, nil, []Network{NetworkFIFO, NetworkUnordered}, false},
		{"ignorer", func(id, _ int) machine { return &ignorer{id: id} }, []int{0, 0, 1}, []int{0, 1, 0}, []Network{NetworkFIFO}, false},
		{"twoRooms", func(id, _ int) machine { return &twoRooms{id: id, blocked: id == 0} }, []int{0, 0, 1}, []int{0, 1, 0}, []Network{NetworkFIFO, NetworkUnordered}, false},
		{"afterYou", func(id, _ int) machine { return &afterYou{id: id} }, []int{0, 1, 1}, nil, []Network{NetworkFIFO, NetworkUnordered}, false},
		{"slowStarver", func(id, _ int) machine { return &slowStarver{id: id} }, []int{0, 0, 1}, nil, []Network{NetworkFIFO}, false},
	}
	for _, m := range machines {
		for _, net := range m.nets {
			for _, fenced := range []bool{false, m.fence} {
				corpus = append(corpus, named{fmt.Sprintf("%s/%v/fenced=%v", m.name, net, fenced), CheckConfig{Algorithm: Centralized, N: 3,
					RequestsPerPeer: m.reqs, TriesPerPeer: m.tries, Network: net, Fenced: fenced, build: m.build}})
				if !m.fence {
					break
				}
			}
		}
	}
	corpus = append(corpus,
		named{"clockPing", CheckConfig{Algorithm: Lamport, N: 3, RequestsPerPeer: []int{0, 0, 1}, StampGaps: true, MaxStates: 10_000,
			build: func(id, _ int) machine { return &clockPing{id: id} }}},
		named{"bouncer/unlimited", CheckConfig{Algorithm: TokenRing, N: 3, Requests: Unlimited,
			build: func(id, _ int) machine { return &bouncer{id: id, token: id == 0} }}},
		named{"singhal-heuristic-textbook", CheckConfig{Variant: "singhal-heuristic-textbook"}},
	)
	// Two inside at once under a false suspicion; the fenced store keeps
	// the writes apart, and the search goes on. Under -race, with the
	// last peer idle: 3,632 states, not 44,159 (7 s).
	overlap := CheckConfig{Algorithm: Centralized, N: 3, Requests: 1, Options: []Option{WithRecovery()},
		Detector: Detector{Kind: DetectorImperfect, FalseSuspicions: 1}, Fenced: true}
	if raceLight() {
		overlap.RequestsPerPeer = []int{1, 1, 0}
	}
	corpus = append(corpus, named{"centralized/recovery/imperfect/fenced", overlap})
	for _, v := range Variants() {
		if v.N <= 3 && v.Requests <= 1 && v.Faults.zero() {
			corpus = append(corpus, named{"variant/" + v.Name, CheckConfig{Variant: v.Name}})
		}
	}
	return corpus
}

// named is a configuration of Check with a name for its subtest.
type named struct {
	name string
	cfg  CheckConfig
}

// TestDepthFirstGraphAgrees: the graph searched depth first and
// renumbered, on one goroutine or (over FIFO queues) with two workers
// (pargraph.go), gives exactly what the breadth-first search gives (see
// deepgraph.go), over every algorithm at n = 3 with one request per peer
// on each network it supports, a few with two, the liveness regression
// machines of liveness_test.go, recovery rows (with their fates after the
// crash), a starvation, a deadlock, safety violations (searched again
// breadth first) and a Fenced search that goes on past two holders.
func TestDepthFirstGraphAgrees(t *testing.T) {
	corpus := graphCorpus(t)
	// The parallel search with the graph (pargraph.go) over FIFO queues,
	// each case again with two workers: the same arrays after renumber.
	for _, tt := range corpus {
		net := tt.cfg.Network
		if tt.cfg.Variant != "" {
			v, err := LookupVariant(tt.cfg.Variant)
			require.NoError(t, err)
			net = v.Network
		}
		if net == NetworkFIFO {
			tt.name += "/workers=2"
			tt.cfg.Workers = 2
			corpus = append(corpus, tt)
		}
	}
	sawOverlap, sawDeadlock, sawStarvation, sawUnsafe := false, false, false, false
	for _, tt := range corpus {
		t.Run(tt.name, func(t *testing.T) {
			res := requireSameCheck(t, tt.cfg)
			if v := res.Violation; v != nil {
				switch {
				case v.Property == "starvation":
					sawStarvation = true
				case v.Property == "deadlock":
					sawDeadlock = true
				case res.Complete && v.Property == "safety":
					sawOverlap = true
				case !res.Complete:
					sawUnsafe = true
				}
			}
			t.Logf("%d states, %d transitions, safe %v, deadlock free %v, starvation free %v, max overtakes %d",
				res.States, res.Transitions, res.Safe, res.DeadlockFree, res.StarvationFree, res.MaxOvertakes)
		})
	}
	assert.True(t, sawOverlap, "no case went on past two holders")
	assert.True(t, sawDeadlock, "no case deadlocked")
	assert.True(t, sawStarvation, "no case starved")
	assert.True(t, sawUnsafe, "no case was unsafe")

	// Fates after a crash, read from the graph, as the recovery table
	// reads them.
	fated := []Algorithm{RicartAgrawala, SuzukiKasami, Centralized}
	if raceLight() {
		fated = fated[2:] // 11 s under -race for the other two
	}
	for _, alg := range fated {
		t.Run("fates/"+alg.String(), func(t *testing.T) {
			cfg := CheckConfig{Algorithm: alg, N: 3, Requests: 1, Options: []Option{WithRecovery()},
				Faults: CheckFaults{Crash: true}, Detector: Detector{Kind: DetectorPerfect}}
			requireSameCheck(t, cfg)
			deep, wide, _, _ := runBoth(t, cfg)
			cfg.Workers = 2
			requireSameCheck(t, cfg)
			two, _, _, _ := runBoth(t, cfg)
			require.True(t, two.deep, "the parallel search with the graph")
			in := func(c *checker) func(s int32) bool {
				return func(s int32) bool { return c.info[s].flags&stFaulted != 0 }
			}
			df, da := deep.afterFault(in(deep))
			wf, wa := wide.afterFault(in(wide))
			assert.Equal(t, wf, df)
			assert.Equal(t, wa, da)
			tf, ta := two.afterFault(in(two))
			assert.Equal(t, wf, tf, "two workers")
			assert.Equal(t, wa, ta, "two workers")
		})
	}
}

// TestDepthFirstGraphStopped: a search stopped by its state limit
// decides nothing it has not seen, depth first as breadth first.
func TestDepthFirstGraphStopped(t *testing.T) {
	cfg := CheckConfig{Algorithm: RicartAgrawala, N: 3, MaxStates: 500}
	_, _, dr, wr := runBoth(t, cfg)
	for _, r := range []CheckResult{dr, wr} {
		assert.False(t, r.Complete)
		assert.Equal(t, StoppedAtStateLimit, r.Stopped)
		assert.Equal(t, 500, r.States)
		assert.Equal(t, Undecided, r.Safe)
		assert.Equal(t, Undecided, r.StarvationFree)
		assert.False(t, r.Liveness)
	}
}

// TestDepthFirstGraphCompact: the graph kept in mapped arrays
// (bigarray.go) and with its edges' kinds in bytes, widened to cls and
// ent midway when a graph has more kinds than a byte names, is the same
// graph, searched to the same results. Small arrays are mapped here, and
// the byte names only three kinds, so that the small corpus takes every
// path the big searches take.
func TestDepthFirstGraphCompact(t *testing.T) {
	defer func(m, k int) { bigArrayMin, maxEdgeKinds = m, k }(bigArrayMin, maxEdgeKinds)
	corpus := []CheckConfig{
		{Algorithm: RicartAgrawala, N: 3, Requests: 1},
		{Algorithm: RicartAgrawala, N: 3, Requests: 1, Network: NetworkUnordered},
		{Algorithm: SuzukiKasami, N: 3, Requests: 1, Options: []Option{WithRecovery()},
			Faults: CheckFaults{Crash: true}, Detector: Detector{Kind: DetectorPerfect}},
		{Algorithm: Centralized, N: 3, RequestsPerPeer: []int{1, 1, 1}, Network: NetworkUnordered,
			build: func(id, _ int) machine { return &bouncer{id: id, token: id == 0} }},
		{Variant: "singhal-heuristic-textbook"},
	}
	if raceLight() {
		corpus = append(corpus[:2], corpus[3:]...) // the recovery row: 5 s under -race
	}
	before := len(mapped.regions)
	for _, kinds := range []int{3, 256} {
		for i, cfg := range corpus {
			t.Run(fmt.Sprintf("kinds=%d/%d", kinds, i), func(t *testing.T) {
				bigArrayMin, maxEdgeKinds = 64, kinds
				res := requireSameCheck(t, cfg)
				t.Logf("%d states, %d transitions, starvation free %v, max overtakes %d", res.States, res.Transitions, res.StarvationFree, res.MaxOvertakes)
			})
		}
	}
	// runBoth keeps its checkers' arrays, so their mappings are still
	// there.
	assert.Greater(t, len(mapped.regions), before, "nothing was mapped")
}

// deepStart makes cfg's checker and its start world as explore does
// before the depth-first graph search (limits, the first sample, the
// table of hashes with the start in it), so that a test can run the
// search and look at the graph before renumber.
func deepStart(t *testing.T, cfg CheckConfig) (*checker, *World) {
	t.Helper()
	c, err := newChecker(cfg)
	require.NoError(t, err)
	require.True(t, c.deep, "the depth-first graph search")
	w, err := c.startWorld(false)
	require.NoError(t, err)
	c.start, c.lastReport = time.Now(), time.Now()
	c.done = make(chan struct{})
	c.limit, c.budget = cmp.Or(cfg.MaxStates, DefaultMaxStates), cmp.Or(cfg.MaxMemory, DefaultMaxMemory)
	c.sample(w)
	c.fps = newVisited(true, cfg.Fingerprint)
	c.fps.add(c.fingerprint(w), 0)
	c.res.States = 1
	t.Cleanup(c.release)
	return c, w
}

// TestDepthFirstGraphArrays pins where the depth-first search keeps its
// graph: the edges' kinds in bytes while a byte names them (no cls, no
// ent), each kind named by one byte, else, once widened, in cls and ent,
// the bytes returned to the system; the edges and their kinds mapped (bigarray.go) for the most
// edges an int32 numbers, the states' offsets and what holds in them
// mapped for the most states the limit allows; and renumber returning
// every array it replaces to the system, mapping the new ones (and the
// parents) instead; and no bits of overlaps without Fenced. Every array
// is mapped here, however small.
func TestDepthFirstGraphArrays(t *testing.T) {
	defer func(m, k int) { bigArrayMin, maxEdgeKinds = m, k }(bigArrayMin, maxEdgeKinds)
	bigArrayMin = 1
	added := map[int]int{}
	for _, kinds := range []int{256, 3} {
		t.Run(fmt.Sprintf("kinds=%d", kinds), func(t *testing.T) {
			maxEdgeKinds = kinds
			regions := len(mapped.regions)
			c, w := deepStart(t, CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 1, MaxStates: 5000})
			complete, err := c.depthFirstGraph(w)
			require.NoError(t, err)
			require.True(t, complete)
			added[kinds] = len(mapped.regions) - regions
			assert.Nil(t, c.overlaps, "no overlap bits without Fenced")
			if kinds == 256 {
				assert.Len(t, c.kindOf, len(c.kinds), "each kind named once")
				for code, k := range c.kinds {
					assert.Equal(t, uint8(code), c.kindOf[k], "kind %v", k)
				}
			}

			edges := [][]int32{c.to}
			if kinds == 256 {
				assert.True(t, c.compact, "the kinds in bytes")
				assert.Len(t, c.code, len(c.to))
				assert.Nil(t, c.cls)
				assert.Nil(t, c.ent)
				assert.True(t, isMapped(c.code), "kinds")
				assert.Equal(t, math.MaxInt32, cap(c.code))
			} else {
				assert.False(t, c.compact, "widened")
				assert.Nil(t, c.code)
				assert.Nil(t, c.kinds)
				assert.Nil(t, c.kindOf)
				assert.Len(t, c.ent, len(c.to))
				edges = append(edges, c.cls)
				assert.True(t, isMapped(c.ent), "entries")
				assert.Equal(t, math.MaxInt32, cap(c.ent))
			}
			for i, a := range edges {
				assert.True(t, isMapped(a), "edge array %d", i)
				assert.Equal(t, math.MaxInt32, cap(a), "edge array %d", i)
			}
			assert.True(t, isMapped(c.off), "offsets")
			assert.True(t, isMapped(c.info), "states")
			assert.Equal(t, 5001, cap(c.off), "the most states, and renumber's closing offset")
			assert.Equal(t, 5001, cap(c.info))

			old := append(edges, c.off)
			oldCode, oldEnt, oldInfo := c.code, c.ent, c.info
			regions = len(mapped.regions)
			c.renumber()
			for i, a := range old {
				assert.False(t, isMapped(a), "old array %d", i)
			}
			assert.False(t, isMapped(oldCode), "old kinds")
			assert.False(t, isMapped(oldEnt), "old entries")
			assert.False(t, isMapped(oldInfo), "old states")
			for i, a := range [][]int32{c.to, c.cls, c.off, c.parent} {
				assert.Equal(t, a != nil, isMapped(a), "new array %d", i)
			}
			assert.Equal(t, c.code != nil, isMapped(c.code))
			assert.Equal(t, c.ent != nil, isMapped(c.ent))
			assert.True(t, isMapped(c.info))
			assert.Equal(t, regions+1, len(mapped.regions), "renumber's own arrays returned, the parents added")
		})
	}
	assert.Equal(t, added[256]+1, added[3], "widened: cls and ent for the bytes, which are returned")
}

// TestStateReserve pins how many states a mapped array of states holds:
// one more than the limit, and for no limit, or one an int32 cannot
// number, the most an int32 numbers.
func TestStateReserve(t *testing.T) {
	c := &checker{}
	for _, tt := range []struct{ limit, want int }{
		{500, 501},
		{1, 2},
		{math.MaxInt32 - 1, math.MaxInt32},
		{math.MaxInt32, math.MaxInt32},
		{math.MaxInt32 + 5, math.MaxInt32},
		{0, math.MaxInt32},
		{-1, math.MaxInt32},
	} {
		c.limit = tt.limit
		assert.Equal(t, tt.want, c.stateReserve(), "limit %d", tt.limit)
	}
}

// TestDepthFirstGraphBrokenFirstStep: the very first step breaks the
// machine contract (peer 0 sends itself a request), a safety violation
// met with only the start on the depth-first path; the search is made
// again breadth first and reports it after that one step.
func TestDepthFirstGraphBrokenFirstStep(t *testing.T) {
	res := mustCheck(t, CheckConfig{Algorithm: RicartAgrawala, N: 2, Requests: 1, build: func(id, n int) machine {
		m, err := newRicart(id, n, &config{})
		if err != nil {
			panic(err)
		}
		return &rogue{ricart: m.(*ricart), on: evRequest, self: id == 0}
	}})
	require.NotNil(t, res.Violation)
	assert.Equal(t, "safety", res.Violation.Property)
	assert.Contains(t, res.Violation.Message, "peer 0 sent a malformed message")
	assert.Len(t, res.Violation.Transitions, 1)
	assert.Equal(t, Refuted, res.Safe)
}

// TestDepthFirstGraphBackToTheStart: a graph with edges back to the
// start (the centralized algorithm, two peers, requests without end:
// 13 states) renumbers as the breadth-first search numbers it; the start
// keeps its number 0 and is met only once.
func TestDepthFirstGraphBackToTheStart(t *testing.T) {
	cfg := CheckConfig{Algorithm: Centralized, N: 2, Requests: Unlimited}
	res := requireSameCheck(t, cfg)
	assert.Equal(t, 13, res.States)
	deep, _, _, _ := runBoth(t, cfg)
	assert.Contains(t, deep.to, int32(0), "an edge back to the start")
}

// TestDepthFirstGraphRenamesClasses: over an unordered network, renumber
// renames the messages' fairness classes (n and up, below the
// detector's) in the order the new numbering meets them, as the
// breadth-first search names them: read edge by edge, each class not met
// before is the next number from n. The renaming is one to one (as many
// classes as the breadth-first search has), and leaves the peers'
// classes (below n) and the detector's (1<<30 and up) as they were;
// with the kinds in bytes and widened alike. The map from kinds to bytes,
// stale after the renaming, is dropped.
func TestDepthFirstGraphRenamesClasses(t *testing.T) {
	defer func(k int) { maxEdgeKinds = k }(maxEdgeKinds)
	const detector = 1 << 30
	classes := func(t *testing.T, c *checker) (msgs int, other map[int32]bool) {
		t.Helper()
		n := int32(c.cc.N)
		seen, other := map[int32]bool{}, map[int32]bool{}
		for e := range int32(len(c.to)) {
			k := c.edgeClass(e)
			switch {
			case k < n || k >= detector:
				other[k] = true
			case !seen[k]:
				require.Equal(t, n+int32(len(seen)), k, "edge %d: a class met first", e)
				seen[k] = true
			}
		}
		return len(seen), other
	}
	for _, kinds := range []int{256, 3} {
		for i, cfg := range []CheckConfig{
			{Algorithm: RicartAgrawala, N: 3, Requests: 1, Network: NetworkUnordered},
			{Algorithm: Centralized, N: 3, Requests: 1, Network: NetworkUnordered, Options: []Option{WithRecovery()},
				Faults: CheckFaults{Crash: true}, Detector: Detector{Kind: DetectorPerfect}},
		} {
			t.Run(fmt.Sprintf("kinds=%d/%d", kinds, i), func(t *testing.T) {
				maxEdgeKinds = kinds
				deep, wide, _, _ := runBoth(t, cfg)
				require.True(t, deep.deep)
				assert.Equal(t, kinds == 256, deep.compact)
				assert.Nil(t, deep.kindOf, "stale after the renaming, and dropped")
				dm, do := classes(t, deep)
				wm, wo := classes(t, wide)
				assert.Equal(t, wm, dm, "as many classes")
				assert.Greater(t, dm, 1)
				assert.Equal(t, wo, do, "the peers' and the detector's classes")
				if i == 1 {
					assert.Condition(t, func() bool {
						for k := range do {
							if k >= detector {
								return true
							}
						}
						return false
					}, "the detector's classes")
				}
			})
		}
	}
}

// TestDepthFirstGraphFirstOverlap pins how renumber finds, with Fenced,
// the first step that let two peers in: the first flagged edge in the
// new numbering, which is also the first of its state's, even edge 0,
// and it builds that step's counterexample. The flags are set by hand
// over a search that flags none (a step that does not replay as an
// overlap gives the checker's internal error as the counterexample):
// edges 1 and 2 of the start, which keeps its number and its edges'
// order (the first is edge 1); edges 0 and 1 (edge 0); and the first
// edge of the state the search found second, the first successor of the
// start's first successor, which breadth first comes after all the
// start's successors and so is not the state after the start's first
// successor in the new numbering. Its bits are dropped afterwards.
func TestDepthFirstGraphFirstOverlap(t *testing.T) {
	cfg := CheckConfig{Algorithm: Centralized, N: 3, Requests: 1, Fenced: true}
	for _, tt := range []struct {
		name  string
		edges func(c *checker) []int32
		want  func(c *checker) int32
	}{
		{"two of the start's", func(*checker) []int32 { return []int32{1, 2} }, func(*checker) int32 { return 1 }},
		{"edge 0", func(*checker) []int32 { return []int32{0, 1} }, func(*checker) int32 { return 0 }},
		{"the second state's first", func(c *checker) []int32 {
			require.Equal(t, int32(2), c.to[c.off[c.to[0]]], "the second state found is the first successor's first")
			return []int32{c.off[2]}
		}, func(c *checker) int32 { return c.off[c.to[c.off[c.to[0]]]] }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, w := deepStart(t, cfg)
			complete, err := c.depthFirstGraph(w)
			require.NoError(t, err)
			require.True(t, complete)
			require.Equal(t, make([]uint64, len(c.overlaps)), c.overlaps, "no overlap")
			require.GreaterOrEqual(t, len(c.off), 3)
			require.GreaterOrEqual(t, c.off[1], int32(3), "the start has three edges")
			for _, e := range tt.edges(c) {
				c.overlaps[e/64] |= 1 << uint(e%64)
			}
			c.renumber()
			assert.Equal(t, tt.want(c), c.firstOverlap)
			assert.Nil(t, c.overlaps, "the bits are dropped")
			require.NotNil(t, c.overlap, "the counterexample")
			assert.Equal(t, "dmutex: internal error: the overlap does not replay", c.overlap.Message)
		})
	}
}

// TestDepthFirstGraphDropsDeadlocks: the deadlocked states the search
// listed are dropped once renumber has found the first of them
// (naimi-trehel-no-next deadlocks).
func TestDepthFirstGraphDropsDeadlocks(t *testing.T) {
	deep, wide, dr, _ := runBoth(t, CheckConfig{Variant: "naimi-trehel-no-next"})
	require.NotNil(t, dr.Violation)
	assert.Equal(t, "deadlock", dr.Violation.Property)
	assert.Equal(t, wide.firstDeadlock, deep.firstDeadlock)
	assert.Nil(t, deep.deadlocks)
}

// TestDepthFirstGraphClassOfTheSource: a suspicion's fairness class
// depends on whether its target has crashed in the step's source (owed
// by an imperfect detector only then), and the depth-first search, which
// examines other worlds between two steps of one state as it backs up,
// asks it of the source: the same graph as breadth first, classes
// included, with crashes and an imperfect detector.
func TestDepthFirstGraphClassOfTheSource(t *testing.T) {
	recovery := []Option{WithRecovery()}
	crash := CheckFaults{Crash: true}
	for _, cfg := range []CheckConfig{
		{Algorithm: Centralized, N: 2, Requests: 1, Options: recovery, Faults: crash, Detector: Detector{Kind: DetectorImperfect, FalseSuspicions: 1}},
		{Algorithm: Centralized, N: 3, RequestsPerPeer: []int{1, 1, 0}, Options: recovery, Faults: crash, Detector: Detector{Kind: DetectorImperfect}},
		{Algorithm: RicartAgrawala, N: 2, Requests: 1, Options: recovery, Faults: crash, Detector: Detector{Kind: DetectorImperfect, FalseSuspicions: 1}},
	} {
		res := requireSameCheck(t, cfg)
		t.Logf("%v: %d states", cfg.Algorithm, res.States)
	}
}

// TestDepthFirstGraphCounts pins what the depth-first search counts as
// it adds states: each added state is ticked once (the progress reports'
// count), and a world's size is sampled at the start and at every
// 1,024th state, no more, no less.
func TestDepthFirstGraphCounts(t *testing.T) {
	c, w := deepStart(t, CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 2, MaxStates: 3000})
	complete, err := c.depthFirstGraph(w)
	require.NoError(t, err)
	require.False(t, complete)
	require.Equal(t, 3000, c.res.States)
	assert.Equal(t, 2999, c.expanded, "ticks")
	assert.Equal(t, int64(3), c.samples, "the start's, and at states 1,024 and 2,048")
}

// TestDepthFirstGraphWidensPastMaxKinds: a byte names at most
// maxEdgeKinds kinds; a graph with exactly that many keeps its edges in
// bytes, one with one more is widened.
func TestDepthFirstGraphWidensPastMaxKinds(t *testing.T) {
	defer func(k int) { maxEdgeKinds = k }(maxEdgeKinds)
	cfg := CheckConfig{Algorithm: RicartAgrawala, N: 3, Requests: 1}
	c, w := deepStart(t, cfg)
	_, err := c.depthFirstGraph(w)
	require.NoError(t, err)
	require.True(t, c.compact)
	kinds := len(c.kinds)
	require.Greater(t, kinds, 2)
	for _, most := range []int{kinds, kinds - 1} {
		maxEdgeKinds = most
		c, w := deepStart(t, cfg)
		_, err := c.depthFirstGraph(w)
		require.NoError(t, err)
		assert.Equal(t, most == kinds, c.compact, "%d kinds, at most %d in a byte", kinds, most)
	}
}

// TestOverlapAtDoesNotReplay: a counterexample whose path does not
// replay (here a state given the start as its parent, which it does not
// follow) is reported as the checker's internal error, not a crash.
func TestOverlapAtDoesNotReplay(t *testing.T) {
	c, w := deepStart(t, CheckConfig{Algorithm: Centralized, N: 3, Requests: 1, Fenced: true})
	_, err := c.depthFirstGraph(w)
	require.NoError(t, err)
	c.renumber()
	s := c.to[c.off[c.to[0]]] // the first successor's first successor
	require.NotContains(t, c.to[c.off[0]:c.off[1]], s, "not a successor of the start")
	c.parent[s] = 0
	v := c.overlapAt(c.off[s])
	require.NotNil(t, v)
	assert.Equal(t, "dmutex: internal error: the counterexample does not replay", v.Message)
}
