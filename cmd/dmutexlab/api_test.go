package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dmutex/dmutex"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func get(t *testing.T, srv *httptest.Server, path string) (int, []byte) {
	t.Helper()
	res, err := srv.Client().Get(srv.URL + path)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, body
}

// TestAPIBadInput: every bad value is a 400 whose message names it, and
// the server goes on serving.
func TestAPIBadInput(t *testing.T) {
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	tests := []struct {
		name, path, want string
	}{
		{"unknown algorithm", "/api/run?alg=paxos", `unknown algorithm \"paxos\"`},
		{"n too large", "/api/run?alg=ricart-agrawala&n=99", "n = 99 peers, want 1 to 8"},
		{"n zero", "/api/run?n=0", "n = 0 peers"},
		{"n not a number", "/api/run?n=three", `n: \"three\" is not a number`},
		{"message not in flight", "/api/run?alg=ricart-agrawala&n=3&c=r0.d9", `choice 1 \"d9\": message 9 is not in flight`},
		{"message behind another", "/api/run?alg=lamport&n=2&c=r0.d1.r1.d3", `\"d3\": message 3 is in flight behind an older one`},
		{"leave by a peer outside", "/api/run?n=3&c=l2", "P2 is not inside"},
		{"peer out of range", "/api/run?n=3&c=r7", "peer 7 out of range"},
		{"unknown choice", "/api/run?n=3&c=r0.z1", `choice 1 \"z1\": unknown choice`},
		{"malformed escape", "/api/run?n=3&c=r0%zz", `malformed state: invalid URL escape \"%zz\"`},
		{"pair without value", "/api/run?n=3&c", `malformed state: \"c\" has no value`},
		{"unknown key", "/api/run?peers=3", `malformed state: unknown key \"peers\"`},
		{"bad step count", "/api/run?n=3&c=r0.a0", `\"a0\": want a`},
		{"unknown variant", "/api/run?variant=nope", `unknown variant \"nope\"`},
		{"variant of another algorithm", "/api/run?variant=maekawa-no-inquire&alg=lamport", "variant maekawa-no-inquire is of maekawa"},
		{"fifo algorithm over reorder", "/api/run?alg=lamport&net=reorder", "lamport needs FIFO channels"},
		{"bad network", "/api/run?net=carrier-pigeon", `net: \"carrier-pigeon\" is not fifo`},
		{"bad voting sets", "/api/run?alg=maekawa&n=3&sets=0,1/2", "dmutex: invalid configuration"},
		{"bad loss", "/api/run?loss=2", `loss: \"2\" is not a probability`},
		{"loss NaN", "/api/run?loss=NaN", `loss: \"NaN\" is not a probability`},
		{"loss negative infinity", "/api/run?loss=-Inf", `loss: \"-Inf\" is not a probability`},
		{"seed beyond int64", "/api/run?seed=99999999999999999999", `seed: \"99999999999999999999\" is not a number`},
		{"bad tree", "/api/run?alg=raymond&n=3&tree=-1,0,x", `tree: \"-1,0,x\" is not a list of numbers`},
		{"query too long", "/api/run?n=3&sets=" + strings.Repeat("0", maxQuery), "more than 16384"},
		{"too many choices", "/api/run?n=3&c=" + strings.Repeat("a.", maxTicks) + "a", "c: 2001 choices, more than 2000"},
		{"cx beyond the choices", "/api/run?c=r0&cx=5", `cx: \"5\"`},
		{"check of a bad configuration", "/api/check?alg=paxos", `unknown algorithm \"paxos\"`},
		{"bad recovery", "/api/run?recovery=yes", `recovery: \"yes\" is not 0 or 1`},
		{"recovery of an algorithm without", "/api/run?alg=lamport&recovery=1", "option WithRecovery does not apply to lamport"},
		{"recovery off for a variant with", "/api/run?variant=centralized-naive-failover&recovery=0", "recovery=0: variant centralized-naive-failover runs with WithRecovery"},
		{"unknown detector", "/api/run?detector=oracle", `detector: \"oracle\" is not none, perfect or imperfect`},
		{"no detector for a variant with one", "/api/run?variant=ricart-agrawala-naive-exclusion&detector=none", "detector=none: variant ricart-agrawala-naive-exclusion needs its perfect detector"},
		{"false suspicions of a perfect detector", "/api/run?detector=perfect&false=2", "false=2: false suspicions need detector=imperfect, not perfect"},
		{"false not a number", "/api/run?detector=imperfect&false=many", `false: \"many\" is not a number of false suspicions from 0 to 9`},
		{"false too many", "/api/run?detector=imperfect&false=10", `false: \"10\"`},
		{"suspicion without a detector", "/api/run?n=3&c=c0.s1-0", `choice 1 \"s1-0\": there is no failure detector`},
		{"suspicion of a live peer by a perfect detector", "/api/run?n=3&detector=perfect&c=s1-0", "P0 has not crashed, and a perfect detector suspects only crashed peers"},
		{"false suspicions used up", "/api/run?n=3&recovery=1&detector=imperfect&false=1&c=s1-0.s2-0", `choice 1 \"s2-0\": P0 has not crashed, and the imperfect detector's 1 false suspicions are used up`},
		{"suspicion twice", "/api/run?n=3&detector=imperfect&false=2&c=s1-0.s1-0", "P1 already suspects P0"},
		{"suspicion of itself", "/api/run?n=3&detector=perfect&c=s1-1", "P1 cannot suspect or trust itself"},
		{"suspicion by a crashed peer", "/api/run?n=3&detector=perfect&c=c1.c0.s1-0", "P1 has crashed"},
		{"trust without a suspicion", "/api/run?n=3&detector=perfect&c=u1-0", "P1 does not suspect P0"},
		{"trust of a crashed peer", "/api/run?n=3&detector=perfect&c=c0.s1-0.u1-0", "P0 has crashed, and a detector never trusts a crashed peer again"},
		{"suspicion malformed", "/api/run?n=3&detector=perfect&c=s1", `choice 0 \"s1\": want s and two peers, such as s1-0`},
		{"suspicion out of range", "/api/run?n=3&detector=perfect&c=s1-5", "peer 5 out of range [0, 3)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, srv, tt.path)
			assert.Equal(t, http.StatusBadRequest, code, "%s", body)
			assert.Contains(t, string(body), tt.want)
			assert.True(t, json.Valid(body), "%s", body)
			code, body = get(t, srv, "/api/run?alg=ricart-agrawala&n=3&c=r0")
			assert.Equal(t, http.StatusOK, code, "the server stopped serving: %s", body)
		})
	}
}

// reference replays choices on a Simulation of its own, through the
// library's public API only.
func reference(t *testing.T, alg dmutex.Algorithm, n int, seed int64, choices []string, cfg dmutex.SimConfig, opts ...dmutex.Option) *dmutex.Simulation {
	t.Helper()
	cfg.Seed = uint64(seed)
	sim, err := dmutex.NewSimulation(alg, n, cfg, opts...)
	require.NoError(t, err)
	w := sim.World()
	for _, c := range choices {
		switch c[0] {
		case 'r':
			var p int
			_, err := fmt.Sscanf(c, "r%d", &p)
			require.NoError(t, err)
			require.NoError(t, sim.Request(p))
		case 'a':
			_, err := sim.Step()
			if !errors.Is(err, dmutex.ErrBlocked) {
				require.NoError(t, err)
			}
		case 'c':
			var p int
			_, err := fmt.Sscanf(c, "c%d", &p)
			require.NoError(t, err)
			require.NoError(t, sim.Crash(p))
		case 'h':
			sim.Heal()
		case 'p': // two groups: the peers named, and the rest
			var groups [][]int
			for _, g := range strings.Split(c[1:], "_") {
				var ids []int
				for _, f := range strings.Split(g, "-") {
					var id int
					_, err := fmt.Sscanf(f, "%d", &id)
					require.NoError(t, err)
					ids = append(ids, id)
				}
				groups = append(groups, ids)
			}
			require.NoError(t, sim.Partition(groups...))
		default:
			tr, ok := w.Find(c)
			require.True(t, ok, "reference: %s not enabled", c)
			_, err := w.Apply(tr)
			require.NoError(t, err)
		}
	}
	return sim
}

// TestRunMatchesSimulation: the API's view of a run is the World's, for
// a run mixing hand choices and scheduler steps.
func TestRunMatchesSimulation(t *testing.T) {
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	choices := []string{"r0", "r1", "d1", "a", "a", "r2", "a", "a", "a"}
	code, body := get(t, srv, "/api/run?alg=ricart-agrawala&n=3&seed=5&c="+strings.Join(choices, "."))
	require.Equal(t, http.StatusOK, code, "%s", body)
	var v runView
	require.NoError(t, json.Unmarshal(body, &v))
	assert.Contains(t, v.Query, "c=r0.r1.d1.a2.r2.a3", "scheduler steps in a row are merged")
	sim := reference(t, dmutex.RicartAgrawala, 3, 5, choices, dmutex.SimConfig{})
	w := sim.World()
	require.Len(t, v.Peers, 3)
	for p := range 3 {
		assert.Equal(t, w.Describe(p), v.Peers[p].Fields, "P%d", p)
		assert.Equal(t, w.Peer(p).Inside, v.Peers[p].Status == "inside", "P%d", p)
		assert.Equal(t, w.Peer(p).Waiting, v.Peers[p].Status == "waiting", "P%d", p)
	}
	var seqs []uint64
	for _, m := range w.Messages() {
		seqs = append(seqs, m.Seq)
	}
	var got []uint64
	for _, m := range v.InFlight {
		got = append(got, m.Seq)
	}
	assert.Equal(t, seqs, got)
	st := sim.Stats()
	assert.Equal(t, st.Messages, v.Counts.Messages)
	assert.Equal(t, st.Entries, v.Counts.Entries)
	for _, k := range v.Counts.Kinds {
		assert.Equal(t, st.ByKind[k.Kind], k.Sent, k.Kind)
	}
	assert.Len(t, v.Events, len(w.Events()))
	assert.Len(t, v.Ticks, len(choices))
}

// TestRunFaultsMatchSimulation: crashes, partitions, heals, losses and
// lock-step rounds replay as the Simulation's own methods do them.
func TestRunFaultsMatchSimulation(t *testing.T) {
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	tests := []struct {
		name, query string
		alg         dmutex.Algorithm
		cfg         dmutex.SimConfig
		choices     []string
		blocked     bool
	}{
		{"crash", "alg=ricart-agrawala&n=3&seed=2", dmutex.RicartAgrawala, dmutex.SimConfig{},
			[]string{"r0", "r1", "c2", "a", "a", "a", "a", "a"}, true},
		{"partition and heal", "alg=suzuki-kasami&n=4&seed=3", dmutex.SuzukiKasami, dmutex.SimConfig{},
			[]string{"r1", "r3", "p0-1_2-3", "a", "a", "h", "r2", "a", "a", "a"}, false},
		{"loss", "alg=centralized&n=3&seed=7&loss=0.3", dmutex.Centralized, dmutex.SimConfig{Loss: 0.3},
			[]string{"r1", "r2", "a", "a"}, false},
		{"lock-step", "alg=lamport&n=3&seed=1&net=lock-step", dmutex.Lamport, dmutex.SimConfig{Delivery: dmutex.DeliverLockStep},
			[]string{"r0", "r1", "r2", "a", "a", "a"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, srv, "/api/run?"+tt.query+"&c="+strings.Join(tt.choices, "."))
			require.Equal(t, http.StatusOK, code, "%s", body)
			var v runView
			require.NoError(t, json.Unmarshal(body, &v))
			sim := reference(t, tt.alg, 3+boolInt(tt.alg == dmutex.SuzukiKasami), v.Config.Seed, tt.choices, tt.cfg)
			w := sim.World()
			for p := range w.N() {
				assert.Equal(t, w.Describe(p), v.Peers[p].Fields, "P%d", p)
				assert.Equal(t, w.Peer(p).Crashed, v.Peers[p].Status == "crashed", "P%d", p)
			}
			st := sim.Stats()
			assert.Equal(t, st.Messages, v.Counts.Messages)
			assert.Equal(t, st.Entries, v.Counts.Entries)
			assert.Len(t, v.Events, len(w.Events()))
			lost := slices.ContainsFunc(v.Events, func(e eventView) bool { return e.Kind == "lost" })
			assert.Equal(t, sim.Dropped() > 0, lost)
			assert.Equal(t, tt.name == "loss" || tt.name == "partition and heal" || tt.name == "crash", lost, "this case loses messages")
			assert.Equal(t, tt.blocked, v.Blocked != "", "blocked: %q", v.Blocked)
			assert.Nil(t, v.Violation)
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSchedulerStopsAtViolation: scheduler steps asked for beyond a
// broken promise are not taken, and the canonical state says so; a hand
// choice after it is refused.
func TestSchedulerStopsAtViolation(t *testing.T) {
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	code, body := get(t, srv, "/api/run?variant=ricart-agrawala-tie-reply&seed=0&c=r0.r1.a50")
	require.Equal(t, http.StatusOK, code, "%s", body)
	var v runView
	require.NoError(t, json.Unmarshal(body, &v))
	require.NotNil(t, v.Violation)
	assert.Equal(t, len(v.Ticks)-1, v.Violation.Tick, "the last step taken broke the promise")
	assert.Contains(t, v.Query, fmt.Sprintf("c=r0.r1.a%d&", len(v.Ticks)-2))
	code, body = get(t, srv, "/api/run?variant=ricart-agrawala-tie-reply&seed=0&c=r0.r1.a50.r0")
	assert.Equal(t, http.StatusBadRequest, code, "%s", body)
	assert.Contains(t, string(body), "the run already broke a promise")
}

// TestCheckLoadsCounterexample: /api/check returns the checker's
// counterexample as a state whose replay breaks the promise at its last
// step.
func TestCheckLoadsCounterexample(t *testing.T) {
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	for _, v := range dmutex.Variants() {
		t.Run(v.Name, func(t *testing.T) {
			if v.N > 3 {
				t.Skip("a search of hundreds of thousands of states, minutes under -race; TestCheckVariants in the root package checks it")
			}
			code, body := get(t, srv, "/api/check?variant="+v.Name)
			require.Equal(t, http.StatusOK, code, "%s", body)
			var cv checkView
			require.NoError(t, json.Unmarshal(body, &cv))
			require.NotNil(t, cv.Result.Violation)
			require.NotEmpty(t, cv.Query)
			code, body = get(t, srv, "/api/run?"+cv.Query)
			require.Equal(t, http.StatusOK, code, "%s", body)
			var rv runView
			require.NoError(t, json.Unmarshal(body, &rv))
			require.NotNil(t, rv.Violation, "the replay must break the promise too")
			assert.Equal(t, len(cv.Result.Violation.Transitions), rv.CX)
			ids := cv.Result.Violation.Transitions
			if cv.Result.Violation.Property == "safety" {
				assert.Equal(t, len(rv.Ticks)-1, rv.Violation.Tick)
				ids = ids[:len(ids)-1]
			} else {
				assert.Equal(t, -1, rv.Violation.Tick)
				assert.Contains(t, rv.Violation.Message, "deadlock")
			}
			if v.Faults == (dmutex.CheckFaults{}) {
				return
			}
			// The lab's choices mean what the checker's transitions do,
			// its crash cI included: before the last step, the lab's world
			// is the checker's replay.
			res, err := dmutex.Check(context.Background(), dmutex.CheckConfig{Variant: v.Name, StopAtDeadlock: true})
			require.NoError(t, err)
			require.NotNil(t, res.Violation)
			require.Equal(t, cv.Result.Violation.Transitions, res.Violation.Transitions)
			want, err := res.Violation.Replay()
			require.NoError(t, err)
			st, err := parseState(mustQuery(t, cv.Query))
			require.NoError(t, err)
			st.Choices, st.CX = ids, 0
			r, err := replay(st)
			require.NoError(t, err)
			assertSameWorld(t, want, r.sim.World())
		})
	}
	code, body := get(t, srv, "/api/check?alg=ricart-agrawala&n=2")
	require.Equal(t, http.StatusOK, code, "%s", body)
	var cv checkView
	require.NoError(t, json.Unmarshal(body, &cv))
	assert.Nil(t, cv.Result.Violation)
	assert.Empty(t, cv.Query)
	assert.True(t, cv.Result.Safe == dmutex.Holds && cv.Result.DeadlockFree == dmutex.Holds && cv.Result.StarvationFree == dmutex.Holds)
}

func mustQuery(t *testing.T, q string) map[string][]string {
	t.Helper()
	v, err := urlParse(q)
	require.NoError(t, err)
	return v
}

// assertSameWorld checks that two worlds agree on every peer's state and
// on the messages in flight.
func assertSameWorld(t *testing.T, want, got *dmutex.World) {
	t.Helper()
	require.Equal(t, want.N(), got.N())
	for p := range want.N() {
		assert.Equal(t, want.Describe(p), got.Describe(p), "P%d", p)
		assert.Equal(t, want.Peer(p).State(), got.Peer(p).State(), "P%d", p)
	}
	assert.Equal(t, want.Messages(), got.Messages())
	var wantIDs, gotIDs []string
	for _, tr := range want.Transitions() {
		if tr.Kind != dmutex.TransCrash { // the checker's one crash is a fault to inject; the lab's are a person's
			wantIDs = append(wantIDs, tr.ID())
		}
	}
	for _, tr := range got.Transitions() {
		gotIDs = append(gotIDs, tr.ID())
	}
	assert.Equal(t, wantIDs, gotIDs, "the enabled transitions")
}

// readmeTrace returns the first violation's transitions in docs/checking.md's
// recovery table row that starts with prefix.
func readmeTrace(t *testing.T, prefix string) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/checking.md")
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		last := cells[len(cells)-1]
		_, trace, ok := strings.Cut(last, "`")
		require.True(t, ok, "no trace in %q", line)
		return strings.Fields(strings.TrimSuffix(trace, "`"))
	}
	t.Fatalf("docs/checking.md has no row %q", prefix)
	return nil
}

// TestCheckREADMEImperfectTrace: docs/checking.md's counterexample for
// Ricart-Agrawala's crash exclusion under an imperfect detector is what
// the lab's check button loads for that configuration, and, replayed as
// the page's choices, it breaks mutual exclusion at its last step, after
// a world that is the Simulation's for the same choices.
func TestCheckREADMEImperfectTrace(t *testing.T) {
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	trace := readmeTrace(t, "| Ricart-Agrawala | `WithRecovery()`, imperfect detector, 1 false suspicion | 3 |")
	require.Contains(t, trace, "s1-0", "a false suspicion: %v", trace)
	const config = "alg=ricart-agrawala&n=3&recovery=1&detector=imperfect&false=1"
	code, body := get(t, srv, "/api/check?"+config)
	require.Equal(t, http.StatusOK, code, "%s", body)
	var cv checkView
	require.NoError(t, json.Unmarshal(body, &cv))
	require.NotNil(t, cv.Result.Violation)
	assert.Equal(t, trace, cv.Result.Violation.Transitions)
	assert.Contains(t, cv.Query, "c="+strings.Join(trace, "."))

	code, body = get(t, srv, "/api/run?"+config+"&c="+strings.Join(trace, "."))
	require.Equal(t, http.StatusOK, code, "%s", body)
	var rv runView
	require.NoError(t, json.Unmarshal(body, &rv))
	require.NotNil(t, rv.Violation)
	assert.Equal(t, len(trace)-1, rv.Violation.Tick, "the last step breaks the promise")
	assert.Contains(t, cv.Result.Violation.Message, rv.Violation.Message, "the replay breaks the promise the check found")
	assert.Equal(t, 1, rv.FalseUsed)
	// The last step is a suspicion that lets its suspecter in ("sP-Q"):
	// that peer is shown inside, and its entry is drawn.
	var enterer, target int
	_, err := fmt.Sscanf(trace[len(trace)-1], "s%d-%d", &enterer, &target)
	require.NoError(t, err, "the last step %q", trace[len(trace)-1])
	assert.Equal(t, "inside", rv.Peers[enterer].Status, "the peer whose entry broke the promise is shown inside")
	enters := 0
	for _, e := range rv.Events {
		if e.Kind == "enter" && e.Tick == len(trace) {
			enters++
			assert.Equal(t, enterer, e.Peer)
		}
	}
	assert.Equal(t, 1, enters, "and its entry is drawn")
	last := rv.Ticks[len(rv.Ticks)-1]
	assert.Equal(t, fmt.Sprintf("P%d suspects P%d, P%d enters", enterer, target, enterer), last.Text)
	assert.True(t, strings.HasPrefix(rv.Ticks[slices.Index(trace, "s1-0")].Text, "P1 suspects P0"), "the false suspicion is drawn")

	sim := reference(t, dmutex.RicartAgrawala, 3, 0, trace[:len(trace)-1],
		dmutex.SimConfig{Detector: &dmutex.Detector{Kind: dmutex.DetectorImperfect, FalseSuspicions: 1}}, dmutex.WithRecovery())
	st := &state{Alg: dmutex.RicartAgrawala, N: 3, Recovery: true, Detector: dmutex.DetectorImperfect, False: 1,
		Choices: trace[:len(trace)-1]}
	r, err := replay(st)
	require.NoError(t, err)
	assertSameWorld(t, sim.World(), r.sim.World())
}

// TestCheckREADMERecoveryRows: every row of docs/checking.md's recovery table
// with one request per peer, no fenced store and a violation is what the
// lab's check loads for that configuration, and its replay breaks the
// same promise: at the last step for safety, at rest for a deadlock.
func TestCheckREADMERecoveryRows(t *testing.T) {
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	imperfect := "recovery=1&detector=imperfect&false=1"
	tests := []struct{ row, config string }{
		{"| Ricart-Agrawala | no recovery, perfect detector | 3 |", "alg=ricart-agrawala&n=3&detector=perfect"},
		{"| Ricart-Agrawala | `WithRecovery()`, imperfect detector, 1 false suspicion | 3 |", "alg=ricart-agrawala&n=3&" + imperfect},
		{"| Ricart-Agrawala | variant `ricart-agrawala-naive-exclusion`, perfect detector | 3 |", "variant=ricart-agrawala-naive-exclusion"},
		{"| Suzuki-Kasami | no recovery, perfect detector | 3 |", "alg=suzuki-kasami&n=3&detector=perfect"},
		{"| Suzuki-Kasami | `WithRecovery()`, imperfect detector, 1 false suspicion | 3 |", "alg=suzuki-kasami&n=3&" + imperfect},
		{"| Suzuki-Kasami | variant `suzuki-kasami-naive-regeneration`, perfect detector | 3 |", "variant=suzuki-kasami-naive-regeneration"},
		{"| centralized | no recovery, perfect detector | 3 |", "alg=centralized&n=3&detector=perfect"},
		{"| centralized | `WithRecovery()`, imperfect detector, 1 false suspicion | 3 |", "alg=centralized&n=3&" + imperfect},
		{"| centralized | variant `centralized-naive-failover`, perfect detector | 3 |", "variant=centralized-naive-failover"},
	}
	for _, tt := range tests {
		t.Run(tt.config, func(t *testing.T) {
			trace := readmeTrace(t, tt.row)
			code, body := get(t, srv, "/api/check?"+tt.config)
			require.Equal(t, http.StatusOK, code, "%s", body)
			var cv checkView
			require.NoError(t, json.Unmarshal(body, &cv))
			require.NotNil(t, cv.Result.Violation)
			assert.Equal(t, trace, cv.Result.Violation.Transitions)
			code, body = get(t, srv, "/api/run?"+cv.Query)
			require.Equal(t, http.StatusOK, code, "%s", body)
			var rv runView
			require.NoError(t, json.Unmarshal(body, &rv))
			require.NotNil(t, rv.Violation)
			if cv.Result.Violation.Property == "safety" {
				assert.Equal(t, len(trace)-1, rv.Violation.Tick)
			} else {
				assert.Equal(t, "deadlock", cv.Result.Violation.Property)
				assert.Equal(t, -1, rv.Violation.Tick)
				assert.Contains(t, rv.Violation.Message, "deadlock")
			}
		})
	}
}

// TestRunOwedSuspicions: a run whose detector still owes suspicions is
// not at rest, even with nothing in flight and nobody inside: they are
// the scheduler's next steps and the person's choices, each a tick.
func TestRunOwedSuspicions(t *testing.T) {
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	const config = "/api/run?alg=ricart-agrawala&n=3&recovery=1&detector=perfect&c="
	code, body := get(t, srv, config+"c2")
	require.Equal(t, http.StatusOK, code, "%s", body)
	var v runView
	require.NoError(t, json.Unmarshal(body, &v))
	assert.False(t, v.Done, "P0 and P1 are still to suspect P2")
	require.Len(t, v.Events, 1, "the crash, and no suspicion taken behind the page's back")
	assert.Equal(t, []int{2}, v.Peers[0].Suspect)
	assert.Equal(t, []int{2}, v.Peers[1].Suspect)
	assert.Empty(t, v.Peers[2].Suspect, "a crashed peer suspects no one")

	code, body = get(t, srv, config+"c2.s1-2.a")
	require.Equal(t, http.StatusOK, code, "%s", body)
	v = runView{}
	require.NoError(t, json.Unmarshal(body, &v))
	assert.True(t, v.Done)
	require.Len(t, v.Ticks, 3)
	assert.Equal(t, "P1 suspects P2", v.Ticks[1].Text)
	assert.Equal(t, "P0 suspects P2", v.Ticks[2].Text, "the one suspicion left is the scheduler's step")
	assert.Equal(t, "s0-2", v.Ticks[2].ID, "named by its transition")
	assert.Equal(t, []int{2}, v.Peers[1].Suspects)
}

// TestRunDetectorMatchesSimulation: with a failure detector the
// scheduler's steps take the suspicions and trusts the detector owes,
// hand suspicions and trusts replay as the World's transitions, and the
// run is the Simulation's for the same choices.
func TestRunDetectorMatchesSimulation(t *testing.T) {
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	tests := []struct {
		name, query string
		alg         dmutex.Algorithm
		detector    dmutex.Detector
		choices     []string
		texts       []string // what some tick says
		entries     uint64
	}{
		{"recovery after a crash", "alg=ricart-agrawala&n=3&seed=2&recovery=1&detector=perfect", dmutex.RicartAgrawala,
			dmutex.Detector{Kind: dmutex.DetectorPerfect},
			[]string{"r0", "r1", "c2", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a"}, []string{"P0 suspects P2", "P1 suspects P2"}, 2},
		{"failover by the scheduler", "alg=centralized&n=3&seed=5&recovery=1&detector=perfect", dmutex.Centralized,
			dmutex.Detector{Kind: dmutex.DetectorPerfect},
			[]string{"r1", "r2", "c0", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a"}, []string{"P1 suspects P0"}, 2},
		{"a false suspicion by hand", "alg=suzuki-kasami&n=3&seed=1&recovery=1&detector=imperfect&false=1", dmutex.SuzukiKasami,
			dmutex.Detector{Kind: dmutex.DetectorImperfect, FalseSuspicions: 1},
			[]string{"s2-0", "u2-0", "r1", "a", "a", "a", "a", "a", "a", "a", "a"}, []string{"P2 suspects P0", "P2 trusts P0 again"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, srv, "/api/run?"+tt.query+"&c="+strings.Join(tt.choices, "."))
			require.Equal(t, http.StatusOK, code, "%s", body)
			var v runView
			require.NoError(t, json.Unmarshal(body, &v))
			sim := reference(t, tt.alg, 3, v.Config.Seed, tt.choices, dmutex.SimConfig{Detector: &tt.detector}, dmutex.WithRecovery())
			w := sim.World()
			for p := range w.N() {
				assert.Equal(t, w.Describe(p), v.Peers[p].Fields, "P%d", p)
				assert.Equal(t, w.Peer(p).State(), v.Peers[p].Status, "P%d", p)
			}
			assert.Len(t, v.Events, len(w.Events()))
			assert.Equal(t, sim.Stats().Entries, v.Counts.Entries)
			assert.Equal(t, tt.entries, v.Counts.Entries, "the survivors enter")
			assert.True(t, v.Done, "at rest")
			assert.Nil(t, v.Violation)
			assert.Empty(t, v.Blocked)
			var texts []string
			for _, tk := range v.Ticks {
				texts = append(texts, tk.Text)
			}
			for _, want := range tt.texts {
				assert.True(t, slices.ContainsFunc(texts, func(s string) bool { return strings.HasPrefix(s, want) }), "no tick says %q: %q", want, texts)
			}
		})
	}
}

// TestServe: the command listens on a free port, prints its URL, serves
// the embedded page and stops when its context ends.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- serve(ctx, []string{"-addr", "127.0.0.1:0"}, out, io.Discard) }()
	var url string
	require.Eventually(t, func() bool {
		s := out.String()
		if i := strings.Index(s, "http://"); i >= 0 && strings.HasSuffix(s, "\n") {
			url = strings.TrimSpace(s[i:])
			return true
		}
		return false
	}, 30*time.Second, 10*time.Millisecond)
	res, err := http.Get(url)
	require.NoError(t, err)
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, string(page), `<script src="lab.js">`)
	for _, asset := range []string{"lab.js", "lab.css"} {
		res, err := http.Get(url + asset)
		require.NoError(t, err)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		assert.Equal(t, http.StatusOK, res.StatusCode, asset)
		text := strings.ReplaceAll(string(b), `"http://www.w3.org/2000/svg"`, "") // a namespace, not a load
		assert.NotContains(t, text, "http://", "%s loads nothing from the network", asset)
		assert.NotContains(t, text, "https://", "%s loads nothing from the network", asset)
	}
	cancel()
	require.NoError(t, <-done)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
