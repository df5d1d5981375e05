package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/dmutex/dmutex"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestRicartAgrawalaJSON is the command of issue 11's "done means".
func TestRicartAgrawalaJSON(t *testing.T) {
	code, stdout, stderr := runCmd(t, "-alg", "ricart-agrawala", "-n", "3", "-requests", "2", "-json")
	require.Equal(t, 0, code, stderr)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &m))
	for _, k := range []string{"safe", "deadlockFree", "starvationFree", "complete"} {
		assert.Equal(t, true, m[k], k)
	}
	assert.Equal(t, "ricart-agrawala", m["algorithm"])
	assert.Equal(t, float64(3), m["n"])
	assert.Equal(t, float64(2), m["requests"])
	assert.Equal(t, "fifo", m["network"])
	assert.Nil(t, m["violation"])
	assert.Contains(t, m, "maxOvertakes")
}

// TestTriesJSON: -tries puts TryLock in the mix, and the JSON says so.
func TestTriesJSON(t *testing.T) {
	n := "3"
	if raceEnabled {
		n = "2" // 19 s under -race at n = 3
	}
	code, stdout, stderr := runCmd(t, "-alg", "suzuki-kasami", "-n", n, "-tries", "1", "-json")
	require.Equal(t, 0, code, stderr)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &m))
	for _, k := range []string{"safe", "deadlockFree", "starvationFree", "complete"} {
		assert.Equal(t, true, m[k], k)
	}
	assert.Equal(t, float64(1), m["tries"])
}

// TestEveryVariantRefuted: -variant NAME alone exits 1 with a trace.
func TestEveryVariantRefuted(t *testing.T) {
	for _, v := range dmutex.Variants() {
		t.Run(v.Name, func(t *testing.T) {
			if raceEnabled && v.N > 3 {
				t.Skip("hundreds of thousands of states, minutes under -race; the root package's TestCheckVariants checks it")
			}
			code, stdout, stderr := runCmd(t, "-variant", v.Name, "-json")
			require.Equal(t, 1, code, stderr)
			var r struct {
				Algorithm string `json:"algorithm"`
				Violation *struct {
					Property string   `json:"property"`
					Trace    []string `json:"trace"`
					Mermaid  string   `json:"mermaid"`
				} `json:"violation"`
			}
			require.NoError(t, json.Unmarshal([]byte(stdout), &r))
			assert.Equal(t, v.Algorithm.String(), r.Algorithm)
			require.NotNil(t, r.Violation)
			assert.NotEmpty(t, r.Violation.Trace)
			assert.Contains(t, r.Violation.Mermaid, "sequenceDiagram")
		})
	}
}

func TestList(t *testing.T) {
	code, stdout, _ := runCmd(t, "-list")
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, len(dmutex.Variants()))
	for i, v := range dmutex.Variants() {
		assert.Equal(t, v.Name+" "+v.Teaches, lines[i])
	}
}

func TestText(t *testing.T) {
	code, stdout, _ := runCmd(t, "-variant", "ricart-agrawala-tie-reply", "-mermaid")
	require.Equal(t, 1, code)
	assert.Contains(t, stdout, "violation (safety)")
	assert.Contains(t, stdout, "  1 P0 requests")
	assert.Contains(t, stdout, "sequenceDiagram")

	code, stdout, _ = runCmd(t, "-alg", "raymond", "-tree", "-1,0,1", "-crash", "any")
	require.Equal(t, 0, code, stdout)
	assert.Contains(t, stdout, `faults="crash any"`)
	assert.Contains(t, stdout, "safe: yes")
	assert.Contains(t, stdout, "blocked after a fault")

	code, stdout, _ = runCmd(t, "-alg", "maekawa", "-sets", "0,1/1,2/0,2", "-lose", "locked")
	require.Equal(t, 0, code, stdout)
	assert.Contains(t, stdout, "max overtakes: 2")

	code, stdout, stderr := runCmd(t, "-alg", "ra", "-requests", "2", "-max-states", "50")
	assert.Equal(t, 3, code)
	assert.Contains(t, stdout, "stopped at the state limit")
	assert.Contains(t, stdout, "deadlock free: undecided")
	assert.Contains(t, stderr, "stopped at 50 states")

	code, stdout, _ = runCmd(t, "-alg", "ricart-agrawala", "-implicit", "-net", "unordered")
	require.Equal(t, 0, code, stdout)
}

func TestBadUsage(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{}, "-alg or -variant is required"},
		{[]string{"-alg", "paxos"}, `unknown algorithm "paxos"`},
		{[]string{"-variant", "nope"}, `unknown variant "nope"`},
		{[]string{"-variant", "lamport-unordered", "-alg", "maekawa"}, "variant lamport-unordered is of lamport"},
		{[]string{"-alg", "lamport", "-n", "-2"}, "-n: -2 is not a number of peers"},
		{[]string{"-alg", "lamport", "-requests", "0"}, `-requests: "0" is not a positive number`},
		{[]string{"-alg", "lamport", "-net", "tcp"}, `-net: "tcp" is not fifo or unordered`},
		{[]string{"-alg", "lamport", "-tries", "-1"}, `-tries: "-1" is not a number or unlimited`},
		{[]string{"-alg", "lamport", "-crash", "me"}, `-crash: "me" is not any or a peer id`},
		{[]string{"-alg", "lamport", "-crash", "7"}, "crash of peer 7 out of range"},
		{[]string{"-alg", "lamport", "-lose", "letter"}, `-lose: "letter" is not any or a message kind`},
		{[]string{"-alg", "lamport", "-implicit"}, "WithImplicitReplies does not apply to lamport"},
		{[]string{"-alg", "maekawa", "-sets", "0,x"}, `-sets: "0,x" is not a list of numbers`},
		{[]string{"-alg", "lamport", "-max-states", "0"}, "-max-states: 0 is not a limit"},
		{[]string{"-alg", "lamport", "-max-memory", "0"}, "-max-memory: 0 is not a limit in MiB"},
		{[]string{"-alg", "lamport", "-fingerprint", "32"}, "32-bit fingerprints, want 64 or 128"},
		{[]string{"-alg", "lamport", "-safety-only", "-spill-dir", "/no/such/dmutex"}, "/no/such/dmutex"},
		{[]string{"-alg", "lamport", "-spill-dir", "/tmp"}, `SpillDir "/tmp" without SafetyOnly`},
		// Issue 23 item 9: -false means nothing without an imperfect
		// detector, so it is refused rather than ignored.
		{[]string{"-alg", "lamport", "-false", "3"}, "-false 3 needs -detector imperfect"},
		{[]string{"-alg", "lamport", "-detector", "perfect", "-false", "1"}, "-false 1 needs -detector imperfect"},
		{[]string{"-alg", "lamport", "extra"}, `unexpected argument "extra"`},
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCmd(t, tt.args...)
			assert.Equal(t, 2, code)
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, tt.want)
			assert.Contains(t, stderr, "Usage: dmutexcheck [flags]")
		})
	}
}

// TestFingerprintFlag: -fingerprint 64 finds the states 128-bit hashes
// find, and the text and the JSON give the bits and the chance that two
// states shared a hash, which is higher with 64 bits.
func TestFingerprintFlag(t *testing.T) {
	chance := map[string]float64{}
	for _, bits := range []string{"64", "128"} {
		code, stdout, stderr := runCmd(t, "-alg", "ricart-agrawala", "-fingerprint", bits, "-json")
		require.Equal(t, 0, code, stderr)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &m))
		assert.Equal(t, bits, strconv.Itoa(int(m["fingerprintBits"].(float64))))
		assert.Equal(t, float64(2347), m["states"], "the state table's count for n = 3, r = 1")
		chance[bits] = m["collisionChance"].(float64)
		assert.Greater(t, chance[bits], 0.0)

		code, stdout, stderr = runCmd(t, "-alg", "ricart-agrawala", "-fingerprint", bits)
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, stdout, bits+"-bit fingerprints: chance of a collision below ")
	}
	assert.Greater(t, chance["64"], chance["128"]*1e18)
}

// TestSpillDirFlag: -spill-dir reaches Check: under a memory limit of
// 1 MiB the table of 128-bit hashes (2^15 slots, half the limit) empties
// into the directory three times and the search finds every state, the text and
// the JSON say so, and nothing is left in the directory.
func TestSpillDirFlag(t *testing.T) {
	dir := t.TempDir()
	args := []string{"-alg", "ricart-agrawala", "-requests", "2", "-net", "unordered", "-safety-only", "-max-memory", "1", "-spill-dir", dir}
	code, stdout, stderr := runCmd(t, append(args, "-json")...)
	require.Equal(t, 0, code, stderr)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &m))
	assert.Equal(t, float64(95401), m["states"], "the state table's count for n = 3, r = 2, unordered")
	assert.Equal(t, float64(3), m["spillMerges"])
	assert.Equal(t, float64(3*24577), m["spilled"], "each time 3/4 of 2^15 slots, and the state that passed that")

	code, stdout, stderr = runCmd(t, args...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "73731 states' fingerprints on disk at the end, after 3 merges of the table into the file\n")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
}

// TestDetectorFlags: -detector and -recovery reach Check: crash exclusion
// holds with a perfect detector, breaks safety with an imperfect one, and
// a bad detector name is a usage error.
func TestDetectorFlags(t *testing.T) {
	code, stdout, stderr := runCmd(t, "-alg", "ricart-agrawala", "-crash", "any", "-detector", "perfect", "-recovery")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, `detector="perfect"`)
	code, stdout, stderr = runCmd(t, "-alg", "ricart-agrawala", "-crash", "any", "-detector", "imperfect", "-false", "1", "-recovery")
	require.Equal(t, 1, code, stderr)
	assert.Contains(t, stdout, "violation (safety)")
	assert.Contains(t, stdout, "P1 suspects P0")
	code, _, _ = runCmd(t, "-alg", "ricart-agrawala", "-detector", "oracle")
	assert.Equal(t, 2, code)
}

// TestFencedFlag: -fenced adds the store and reports fenced safety, in
// text and as "fencedSafe" in JSON (null without it); with a false
// suspicion two holders overlap at n = 3 (at n = 2 a suspecter is in a
// minority and acts on nothing), which the exit code reports, while the
// store stays safe.
func TestFencedFlag(t *testing.T) {
	code, stdout, stderr := runCmd(t, "-alg", "centralized", "-n", "3", "-detector", "imperfect", "-recovery", "-fenced")
	require.Equal(t, 1, code, stderr)
	assert.Contains(t, stdout, "safe: no\n")
	assert.Contains(t, stdout, "fenced safe: yes\n")
	code, stdout, stderr = runCmd(t, "-alg", "ricart-agrawala", "-n", "2", "-crash", "any", "-detector", "perfect", "-recovery", "-fenced", "-json")
	require.Equal(t, 0, code, stderr)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &m))
	assert.Equal(t, true, m["fencedSafe"])
	code, stdout, stderr = runCmd(t, "-alg", "ricart-agrawala", "-n", "2", "-json")
	require.Equal(t, 0, code, stderr)
	m = nil
	require.NoError(t, json.Unmarshal([]byte(stdout), &m))
	assert.Contains(t, m, "fencedSafe")
	assert.Nil(t, m["fencedSafe"], "null when not checked")
}

// checkJSON runs the command with -json and returns its exit code and
// result.
func checkJSON(t *testing.T, args ...string) (int, dmutex.CheckResult) {
	t.Helper()
	code, stdout, stderr := runCmd(t, append(args, "-json")...)
	var r dmutex.CheckResult
	require.NoError(t, json.Unmarshal([]byte(stdout), &r), stderr)
	return code, r
}

// TestFaultFlags: -crash-inside, -partition and -heal reach Check. Each
// changes what is explored (fewer states when a crash strikes only inside,
// blocked survivors when the token's side is cut off, more states when the
// partition may heal), and bad values are usage errors that name them.
func TestFaultFlags(t *testing.T) {
	codeAny, any := checkJSON(t, "-alg", "suzuki-kasami", "-crash", "any")
	codeIn, inside := checkJSON(t, "-alg", "suzuki-kasami", "-crash-inside")
	require.Equal(t, 0, codeAny)
	require.Equal(t, 0, codeIn)
	assert.Equal(t, "crash any", any.Faults)
	assert.Equal(t, "crash any inside", inside.Faults)
	assert.Less(t, inside.States, any.States, "a crash only inside explores fewer states")
	assert.Positive(t, inside.Blocked, "the holder's crash takes the token with it")

	_, one := checkJSON(t, "-alg", "suzuki-kasami", "-crash", "1", "-crash-inside")
	assert.Equal(t, "crash P1 inside", one.Faults)
	assert.Less(t, one.States, inside.States)

	code, cut := checkJSON(t, "-alg", "suzuki-kasami", "-partition", "0,2")
	require.Equal(t, 0, code)
	assert.Equal(t, "partition {0,2}|rest", cut.Faults)
	assert.Positive(t, cut.Blocked, "the side without the token waits for ever")
	code, healed := checkJSON(t, "-alg", "suzuki-kasami", "-partition", "0,2", "-heal")
	require.Equal(t, 0, code)
	assert.Equal(t, "partition {0,2}|rest then heal", healed.Faults)
	assert.Greater(t, healed.States, cut.States, "a heal adds the states after it")

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-alg", "lamport", "-partition", "0,x"}, `-partition: "0,x" is not a list of numbers`},
		{[]string{"-alg", "lamport", "-partition", "-1"}, "-partition: peer -1 is not a peer id"},
		{[]string{"-alg", "lamport", "-partition", "0,0"}, "-partition: peer 0 named twice"},
		{[]string{"-alg", "lamport", "-partition", "0,5"}, "names peer 5, out of range [0, 3)"},
		{[]string{"-alg", "lamport", "-heal"}, "-heal: no -partition to heal"},
		{[]string{"-alg", "lamport", "-crash", "4", "-crash-inside"}, "crash of peer 4 out of range"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCmd(t, tt.args...)
			assert.Equal(t, 2, code)
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, tt.want)
		})
	}
}

// TestReductionFlags: -por and -stamp-gaps reach Check, the JSON says the
// search was reduced, it visits fewer states with the same verdicts, and
// -por over a reordering network is a usage error.
func TestReductionFlags(t *testing.T) {
	states := func(args ...string) (float64, map[string]any) {
		code, stdout, stderr := runCmd(t, append([]string{"-alg", "lamport", "-n", "2", "-requests", "3", "-json"}, args...)...)
		require.Equal(t, 0, code, stderr)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &m))
		for _, k := range []string{"safe", "deadlockFree", "complete"} {
			assert.Equal(t, true, m[k], k)
		}
		return m["states"].(float64), m
	}
	full, m := states("-safety-only")
	assert.NotContains(t, m, "partialOrder")
	reduced, m := states("-por", "-stamp-gaps")
	assert.Equal(t, true, m["partialOrder"])
	assert.Equal(t, true, m["stampGaps"])
	assert.Less(t, reduced, full)

	code, stdout, stderr := runCmd(t, "-alg", "lamport", "-n", "2", "-por", "-stamp-gaps")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "network=fifo reduced=partial-order stamp-gaps\n", "the text says the count is of a reduced search")

	code, stdout, stderr = runCmd(t, "-alg", "lamport", "-por", "-net", "unordered")
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "PartialOrder with network unordered")
}

// TestOnTheFly: -on-the-fly decides liveness without the graph, as the
// search with the graph decides it, and says so; at a counterexample it
// hands over to the search with the graph, whose lasso it prints.
func TestOnTheFly(t *testing.T) {
	run := func(args ...string) map[string]any {
		code, stdout, stderr := runCmd(t, append([]string{"-json"}, args...)...)
		require.Contains(t, []int{0, 1}, code, stderr)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &m))
		delete(m, "seconds")
		return m
	}
	graph := run("-alg", "ricart-agrawala", "-n", "3", "-requests", "2")
	fly := run("-alg", "ricart-agrawala", "-n", "3", "-requests", "2", "-on-the-fly")
	assert.Equal(t, true, fly["onTheFly"])
	delete(fly, "onTheFly")
	assert.Equal(t, graph, fly)

	code, stdout, stderr := runCmd(t, "-variant", "singhal-heuristic-textbook", "-on-the-fly")
	assert.Equal(t, 1, code, stderr)
	assert.NotContains(t, stdout, "on-the-fly", "handed over to the graph")

	code, stdout, stderr = runCmd(t, "-alg", "centralized", "-on-the-fly", "-safety-only")
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "OnTheFly with SafetyOnly")
}

// TestUndecidedReadsUndecided: the reproductions of issue 22 item 4. A
// property the search did not decide is null in JSON and "undecided" in
// text, whatever stopped the search: a state limit, a deadlock it stopped
// at, or a safety violation; and the text says why it stopped.
func TestUndecidedReadsUndecided(t *testing.T) {
	// The reproduction of a search stopped at a deadlock explores
	// 792,561 states before it stops (26 s and 1.2 GB; under -race, ten
	// times the time and 4.8 GB). Under -race a variant that stops at a
	// deadlock after 27 states stands in for it.
	deadlock := []string{"-variant", "lamport-unordered", "-fenced"}
	if raceEnabled {
		deadlock = []string{"-variant", "naimi-trehel-no-next", "-fenced"}
	}
	for _, tt := range []struct {
		name      string
		args      []string
		code      int
		stopped   dmutex.StopReason
		undecided []string // JSON keys that must be null
		decided   map[string]bool
	}{
		{
			name: "state limit", args: []string{"-variant", "maekawa-textbook-failed", "-max-states", "1000"},
			code: 3, stopped: dmutex.StoppedAtStateLimit,
			undecided: []string{"safe", "deadlockFree", "starvationFree", "maxOvertakes", "fencedSafe"},
		},
		{
			name: "stopped at a deadlock", args: deadlock,
			code: 1, stopped: dmutex.StoppedAtViolation,
			undecided: []string{"fencedSafe", "maxOvertakes"},
		},
		{
			name: "stopped at a safety violation", args: []string{"-alg", "ricart-agrawala", "-crash", "any", "-detector", "imperfect", "-false", "1", "-recovery"},
			code: 1, stopped: dmutex.StoppedAtViolation,
			undecided: []string{"deadlockFree", "starvationFree", "maxOvertakes", "fencedSafe"},
			decided:   map[string]bool{"safe": false},
		},
		{
			name: "safety only", args: []string{"-alg", "ricart-agrawala", "-safety-only"},
			code:      0,
			undecided: []string{"starvationFree", "maxOvertakes", "fencedSafe"},
			decided:   map[string]bool{"safe": true, "deadlockFree": true, "complete": true},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(t, append(tt.args, "-json")...)
			require.Equal(t, tt.code, code, stderr)
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(stdout), &m))
			for _, k := range tt.undecided {
				require.Contains(t, m, k)
				assert.Nil(t, m[k], "%s was not decided", k)
			}
			for k, v := range tt.decided {
				assert.Equal(t, v, m[k], k)
			}
			if tt.stopped != "" {
				assert.Equal(t, false, m["complete"])
				assert.Equal(t, string(tt.stopped), m["stopped"])
			}

			_, text, _ := runCmd(t, tt.args...)
			for _, k := range tt.undecided {
				label := map[string]string{"safe": "safe", "deadlockFree": "deadlock free",
					"starvationFree": "starvation free", "maxOvertakes": "max overtakes"}[k]
				if label != "" {
					assert.Contains(t, text, "\n"+label+": undecided\n")
				}
			}
			assert.NotContains(t, text, "incomplete", "the text says why the search stopped")
		})
	}
}

// TestInterrupted: a context that ends (Ctrl-C) prints the partial
// result, with complete false, and exits 3, the code for undecided. The
// root package's TestCheckCancel shows that the search ends at once.
func TestInterrupted(t *testing.T) {
	for _, n := range []string{"3", "65"} {
		t.Run("n="+n, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var out, errb bytes.Buffer
			code := run(ctx, []string{"-alg", "ricart-agrawala", "-n", n, "-max-states", "-1", "-json"}, &out, &errb)
			require.Equal(t, 3, code, errb.String())
			var m map[string]any
			require.NoError(t, json.Unmarshal(out.Bytes(), &m), errb.String())
			assert.Equal(t, false, m["complete"])
			assert.Equal(t, "canceled", m["stopped"])
			assert.Equal(t, float64(1), m["states"])
			assert.Nil(t, m["safe"])
			assert.Contains(t, errb.String(), "interrupted at 1 states")
		})
	}
}

// TestMaxMemory: -max-memory stops a search whose states are big before
// its state limit, as undecided (exit 3), and says which limit to raise.
func TestMaxMemory(t *testing.T) {
	limit := "16"
	if raceEnabled {
		limit = "4" // 16 MiB of this search took 20 s under -race
	}
	code, stdout, stderr := runCmd(t, "-alg", "ricart-agrawala", "-n", "8", "-detector", "imperfect", "-false", "9", "-recovery",
		"-net", "unordered", "-max-memory", limit)
	require.Equal(t, 3, code, stderr)
	assert.Contains(t, stdout, "stopped at the memory limit")
	assert.Contains(t, stderr, "raise -max-memory")
}
