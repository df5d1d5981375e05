package dmutex

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var maxStates = flag.Int("dmutex.maxstates", 0, "stop each exhaustive check after this many states (0: no limit)")

var bigChecks = flag.Bool("dmutex.big", false, "also model-check the big configurations (Lamport with two requests per peer, implicit replies with two requests over an unordered network, Maekawa at n = 4): minutes and gigabytes")

// checkExpectation is what the model checker expects of one algorithm.
type checkExpectation struct {
	order  orderRule
	tokens bool // the machines must implement tokenHolder
	nets   []netKind
}

// expectations lists, per algorithm, the order it promises, whether it is
// a token algorithm, and the network models to check it over: FIFO only
// for the algorithms that need it, both models otherwise.
var expectations = [numAlgorithms]checkExpectation{
	Centralized:    {order: orderCoordinator, nets: []netKind{netFIFO, netBag}},
	TokenRing:      {tokens: true, nets: []netKind{netFIFO, netBag}},
	Lamport:        {order: orderTimestamp, nets: []netKind{netFIFO}},
	RicartAgrawala: {order: orderTimestamp, nets: []netKind{netFIFO, netBag}},
	Maekawa:        {nets: []netKind{netFIFO}},
	SuzukiKasami:   {tokens: true, nets: []netKind{netFIFO, netBag}},
	Raymond:        {tokens: true, nets: []netKind{netFIFO, netBag}},
}

// checkCase is one configuration for the exhaustive check.
type checkCase struct {
	v           variant
	n, requests int
	net         netKind
	big         bool // only with -dmutex.big
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
				// differ between delivery orders: tens of millions of
				// states), and for implicit replies over an unordered
				// network, where stale requests and replies linger (6.4M
				// states). Maekawa's grid sets at n = 3 stay small.
				big2 := a == Lamport || (v.opts != nil && net == netBag)
				cs = append(cs,
					checkCase{v: v, n: 3, requests: 1, net: net},
					checkCase{v: v, n: 3, requests: 2, net: net, big: big2})
				if a == RicartAgrawala && net == netBag {
					// Regression for stale requests with implicit replies,
					// which overtook newer ones and lost a reply.
					cs = append(cs, checkCase{v: v, n: 2, requests: 3, net: net})
				}
				if a == Maekawa {
					cs = append(cs, checkCase{v: v, n: 4, requests: 1, net: net, big: true})
				}
				if a == TokenRing || a == Raymond {
					// Cheap enough with four peers: a longer ring, and a
					// tree with a node two hops from the root.
					cs = append(cs, checkCase{v: v, n: 4, requests: 1, net: net})
				}
			}
		}
	}
	return cs
}

// TestModelCheck explores every reachable state of small clusters of
// every algorithm and checks mutual exclusion, liveness (no
// final state with a request unserved), the promised entry order and,
// for token algorithms, that exactly one token exists.
func TestModelCheck(t *testing.T) {
	for _, cc := range checkCases() {
		t.Run(cc.name(), func(t *testing.T) {
			if cc.big && !*bigChecks {
				t.Skip("big; run with -dmutex.big")
			}
			if testing.Short() && cc.v.alg == Lamport {
				t.Skip("0.7M states, about 20 s under -race; skipped with -short")
			}
			exp := expectations[cc.v.alg]
			res := check(t, checkSpec{
				alg: cc.v.alg, opts: cc.v.opts, n: cc.n, requests: cc.requests,
				net: cc.net, order: exp.order, compact: cc.big, maxStates: *maxStates,
			})
			if res.incomplete {
				t.Logf("%s: stopped after %d states, %d transitions, %v (-dmutex.maxstates); no violation so far",
					cc.name(), res.states, res.transitions, res.elapsed.Round(1e6))
				require.Empty(t, res.violation)
				return
			}
			require.Empty(t, res.violation, "counterexample:\n%s", strings.Join(res.trace, "\n"))
			assert.Positive(t, res.finals)
			assert.Zero(t, res.cut)
			if exp.tokens {
				m, err := algorithms[cc.v.alg].build(0, cc.n, &config{alg: cc.v.alg, n: cc.n})
				require.NoError(t, err)
				assert.Implements(t, (*tokenHolder)(nil), m, "a token algorithm must report its token")
			}
			if exp.order == orderTimestamp {
				m, err := algorithms[cc.v.alg].build(0, cc.n, &config{alg: cc.v.alg, n: cc.n})
				require.NoError(t, err)
				assert.Implements(t, (*timestamped)(nil), m)
			}
			t.Logf("%s: %d states, %d transitions, %d final, %v", cc.name(), res.states, res.transitions, res.finals, res.elapsed.Round(1e6))
		})
	}
}

// TestModelCheckFindsMutants runs the checker on deliberately broken
// variants and expects a counterexample of the named kind, printed as a
// trace. Each case is a regression test of the checker itself.
func TestModelCheckFindsMutants(t *testing.T) {
	tests := []struct {
		name        string
		alg         Algorithm
		opts        []Option
		net         netKind
		n, requests int
		want        string
	}{
		// Replying on a timestamp tie lets both tied peers in.
		{"ricart-agrawala/tie-reply", RicartAgrawala, []Option{withMutant("tie-reply")}, netBag, 3, 1, "is inside"},
		// A later reply overtakes an earlier request: two peers enter.
		{"lamport/unordered", Lamport, nil, netBag, 3, 1, "is inside"},
		// Without INQUIRE/RELINQUISH a cycle of votes deadlocks.
		{"maekawa/no-inquire", Maekawa, []Option{withMutant("no-inquire")}, netFIFO, 3, 1, "deadlock"},
		// The token sent for an outdated request leaves a request unserved
		// or duplicates the token; any violation counts.
		{"suzuki-kasami/outdated-token", SuzukiKasami, []Option{withMutant("outdated-token")}, netBag, 3, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := check(t, checkSpec{
				alg: tt.alg, opts: tt.opts, n: tt.n, requests: tt.requests,
				net: tt.net, order: expectations[tt.alg].order, bfs: true, want: tt.want,
			})
			require.NotEmpty(t, res.violation, "no counterexample in %d states", res.states)
			require.NotEmpty(t, res.trace)
			t.Logf("%s: after %d states, %s:\n    %s", tt.name, res.states, res.violation, strings.Join(res.trace, "\n    "))
		})
	}
}

// forger is a broken token machine for tests of the token checks: peer 0
// starts with the token, and a peer without it forges one when asked.
type forger struct{ token bool }

func (f *forger) step(ev event, out *output) {
	if ev.kind == evRequest {
		f.token = true
		out.enter()
	}
}
func (f *forger) hasToken() bool              { return f.token }
func (f *forger) clone() machine              { c := *f; return &c }
func (f *forger) appendState(b []byte) []byte { return appendBool(b, f.token) }

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

// TestModelCheckFindsBrokenMachines checks the checker against machines
// broken on purpose, in ways the real ones are not yet.
func TestModelCheckFindsBrokenMachines(t *testing.T) {
	tests := []struct {
		name  string
		build func(id, n int) machine
		order orderRule
		want  string
	}{
		{"overlap", func(int, int) machine { return &fakeMachine{} }, orderNone, "is inside"},
		{"deadlock", func(int, int) machine { return &fakeMachine{never: true} }, orderNone, "deadlock: [0 1] wait for ever"},
		{"forged token", func(id, _ int) machine { return &forger{token: id == 0} }, orderNone, "2 tokens held and 0 in flight"},
		{"timestamp order", backwards, orderTimestamp, "P1 entered with request (1, 1) after the younger (2, 0)"},
		{"no order promised", backwards, orderNone, ""}, // control: nothing to find
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := check(t, checkSpec{alg: Centralized, n: 2, requests: 1, bfs: true, build: tt.build, order: tt.order, want: tt.want})
			if tt.want == "" {
				require.Empty(t, res.violation)
				return
			}
			require.Contains(t, res.violation, tt.want)
			t.Logf("%s:\n    %s", res.violation, strings.Join(res.trace, "\n    "))
		})
	}
}

func TestSimulationFindsEntryOutOfOrder(t *testing.T) {
	s := simulation(t, variant{alg: Centralized}, 2, WithDelivery(DeliverLockStep))
	for i := range s.ms {
		s.ms[i] = backwards(i, 2)
	}
	s.ordered = true
	require.NoError(t, s.Request(0)) // the coordinator enters at once
	require.NoError(t, s.Request(1))
	err := s.Run()
	require.ErrorIs(t, err, ErrViolation)
	assert.Contains(t, err.Error(), "peer 1 entered with request (1, 1) after the younger (2, 0)")
}

func TestSimulationFindsForgedToken(t *testing.T) {
	s := simulation(t, variant{alg: Centralized}, 2)
	for i := range s.ms {
		s.ms[i] = &forger{token: i == 0}
	}
	s.tokens = true
	require.NoError(t, s.Request(0))
	require.NoError(t, s.Run())
	err := s.Request(1)
	require.ErrorIs(t, err, ErrViolation)
	assert.Contains(t, err.Error(), "2 tokens held and 0 in flight, want exactly one in all")
}
