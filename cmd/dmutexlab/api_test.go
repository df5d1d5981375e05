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
		{"cx beyond the choices", "/api/run?c=r0&cx=5", `cx: \"5\"`},
		{"check of a bad configuration", "/api/check?alg=paxos", `unknown algorithm \"paxos\"`},
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
func reference(t *testing.T, alg dmutex.Algorithm, n int, seed int64, choices []string, opts ...dmutex.Option) *dmutex.Simulation {
	t.Helper()
	sim, err := dmutex.NewSimulation(alg, n, append([]dmutex.Option{dmutex.WithSeed(seed)}, opts...)...)
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
	sim := reference(t, dmutex.RicartAgrawala, 3, 5, choices)
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
		opts        []dmutex.Option
		choices     []string
		blocked     bool
	}{
		{"crash", "alg=ricart-agrawala&n=3&seed=2", dmutex.RicartAgrawala, nil,
			[]string{"r0", "r1", "c2", "a", "a", "a", "a", "a"}, true},
		{"partition and heal", "alg=suzuki-kasami&n=4&seed=3", dmutex.SuzukiKasami, nil,
			[]string{"r1", "r3", "p0-1_2-3", "a", "a", "h", "r2", "a", "a", "a"}, false},
		{"loss", "alg=centralized&n=3&seed=7&loss=0.3", dmutex.Centralized, []dmutex.Option{dmutex.WithLoss(0.3)},
			[]string{"r1", "r2", "a", "a"}, false},
		{"lock-step", "alg=lamport&n=3&seed=1&net=lock-step", dmutex.Lamport, []dmutex.Option{dmutex.WithDelivery(dmutex.DeliverLockStep)},
			[]string{"r0", "r1", "r2", "a", "a", "a"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, srv, "/api/run?"+tt.query+"&c="+strings.Join(tt.choices, "."))
			require.Equal(t, http.StatusOK, code, "%s", body)
			var v runView
			require.NoError(t, json.Unmarshal(body, &v))
			sim := reference(t, tt.alg, 3+boolInt(tt.alg == dmutex.SuzukiKasami), v.Config.Seed, tt.choices, tt.opts...)
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
			if v.Faults != (dmutex.CheckFaults{}) {
				t.Skip("the lab does not replay checker faults")
			}
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
			if cv.Result.Violation.Property == "safety" {
				assert.Equal(t, len(rv.Ticks)-1, rv.Violation.Tick)
			} else {
				assert.Equal(t, -1, rv.Violation.Tick)
				assert.Contains(t, rv.Violation.Message, "deadlock")
			}
		})
	}
	code, body := get(t, srv, "/api/check?alg=ricart-agrawala&n=2")
	require.Equal(t, http.StatusOK, code, "%s", body)
	var cv checkView
	require.NoError(t, json.Unmarshal(body, &cv))
	assert.Nil(t, cv.Result.Violation)
	assert.Empty(t, cv.Query)
	assert.True(t, cv.Result.Safe && cv.Result.DeadlockFree && cv.Result.StarvationFree)
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
