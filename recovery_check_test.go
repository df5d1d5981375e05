package dmutex

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var writeReadme = flag.Bool("dmutex.readme", false, "rewrite the generated crash-recovery tables of docs/checking.md from the checker's runs")

// recoveryRow is one configuration of the crash-recovery table.
type recoveryRow struct {
	alg     string // the algorithm's column
	name    string
	cfg     CheckConfig
	holds   func(CheckResult) bool // what the row must show
	explain bool                   // print the counterexample under the table
	big     bool                   // only with -dmutex.big
}

// recoveryRows are the rows of docs/checking.md's crash-recovery table: each
// recovery with one request per peer and one crash of any peer at any
// point, without recovery, with it under both detectors (with the fenced
// store where it is checked: issue 16 item 4), and its naive variant. The
// imperfect detector with the store runs at n = 2 in CI; n = 3 is behind
// -dmutex.big where it fits.
func recoveryRows() []recoveryRow {
	crash := CheckFaults{Crash: true}
	perfect := Detector{Kind: DetectorPerfect}
	imperfect := Detector{Kind: DetectorImperfect, FalseSuspicions: 1}
	noRecovery := func(r CheckResult) bool {
		return r.Complete && r.Safe == Holds && r.DeadlockFree == Refuted && r.Violation != nil && r.Violation.Property == "deadlock"
	}
	careful := func(r CheckResult) bool {
		return r.Complete && r.Safe == Holds && r.DeadlockFree == Holds && r.StarvationFree == Holds && r.Liveness &&
			(!r.Fenced || r.FencedSafe == Holds)
	}
	// A survivor of two is in a minority: it waits, blocked by the
	// crash, and nobody is let in beside anyone.
	minority := func(r CheckResult) bool {
		return r.Complete && r.Safe == Holds && r.DeadlockFree == Holds && r.Blocked > 0
	}
	unsafe := func(r CheckResult) bool {
		return r.Safe == Refuted && r.Violation != nil && r.Violation.Property == "safety"
	}
	// Imperfect, fenced: two peers may be inside at once, but the store
	// stays safe and the survivors go on entering.
	fenced := func(r CheckResult) bool {
		return r.Complete && r.Safe == Refuted && r.DeadlockFree == Holds && r.StarvationFree == Holds && r.Liveness && r.FencedSafe == Holds &&
			r.Violation != nil && r.Violation.Property == "safety"
	}
	var rows []recoveryRow
	for _, a := range []struct {
		alg      Algorithm
		name     string
		variant  string
		naive    func(CheckResult) bool
		explain  bool // the naive variant's run goes under the table
		store    bool // the recovery is checked with the fenced store
		bigFence bool // the imperfect detector with the store at n = 3, behind -dmutex.big
	}{
		{RicartAgrawala, "Ricart-Agrawala", "ricart-agrawala-naive-exclusion", func(r CheckResult) bool {
			return r.Safe != Refuted && r.DeadlockFree == Refuted && r.Violation != nil && r.Violation.Property == "deadlock"
		}, false, true, true},
		{SuzukiKasami, "Suzuki-Kasami", "suzuki-kasami-naive-regeneration", unsafe, true, true, true},
		{Centralized, "centralized", "centralized-naive-failover", unsafe, true, true, true},
		{AgrawalElAbbadi, "Agrawal-El Abbadi", "agrawal-el-abbadi-keep-votes", func(r CheckResult) bool {
			return r.Safe != Refuted && r.DeadlockFree == Refuted && r.Violation != nil && r.Violation.Property == "deadlock"
		}, true, true, true},
	} {
		base := func(n int, opts []Option, d Detector, store bool) CheckConfig {
			return CheckConfig{Algorithm: a.alg, N: n, Requests: 1, Options: opts, Faults: crash, Detector: d, Fenced: store}
		}
		rec := []Option{WithRecovery()}
		perfectName := "`WithRecovery()`, perfect detector"
		if a.store {
			perfectName += ", fenced store"
		}
		// Under -race the rows of three peers are left to the run without
		// it (raceLight), but the coordinator's: a second or more each.
		heavy := raceLight() && a.alg != Centralized
		rows = append(rows,
			recoveryRow{a.name, "no recovery, perfect detector", base(3, nil, perfect, false), noRecovery, false, heavy},
			recoveryRow{a.name, perfectName, base(3, rec, perfect, a.store), careful, false, heavy},
			recoveryRow{a.name, "`WithRecovery()`, imperfect detector, 1 false suspicion", base(3, rec, imperfect, false), unsafe, true, heavy},
		)
		if a.store {
			// Two peers: one that suspects the other suspects half the
			// cluster, a minority that may not enter without it, so a
			// false suspicion lets nobody in beside a holder, whatever
			// the requests; and after a crash the survivor waits.
			for _, k := range []int{1, 2} {
				two := CheckConfig{Algorithm: a.alg, N: 2, Requests: k, Options: rec, Detector: imperfect, Fenced: true}
				name := "`WithRecovery()`, imperfect detector, 1 false suspicion, fenced store"
				if k > 1 {
					name += ", 2 requests per peer"
				}
				rows = append(rows, recoveryRow{a.name, name, two, careful, false, false})
			}
			rows = append(rows, recoveryRow{a.name, "`WithRecovery()`, perfect detector, one crash: the survivor of two waits", base(2, rec, perfect, false), minority, false, false})
			// A partition that heals, before or after the detector
			// suspects anyone: what it cut is lost, and the peers ask
			// again when the link is back.
			for _, k := range []int{1, 2} {
				healed := CheckConfig{Algorithm: a.alg, N: 2, Requests: k, Options: rec, Faults: CheckFaults{Partition: 1 << 1, Heal: true}, Detector: perfect, Fenced: true}
				name := "`WithRecovery()`, perfect detector, a partition that heals, fenced store"
				if k > 1 {
					name += ", 2 requests per peer"
				}
				rows = append(rows, recoveryRow{a.name, name, healed, careful, false, false})
			}
		}
		if a.bigFence {
			big := base(3, rec, imperfect, true)
			big.MaxStates = 12_000_000 // Suzuki-Kasami's takes 7.3M states
			big.MaxMemory = -1
			rows = append(rows, recoveryRow{a.name, "`WithRecovery()`, imperfect detector, 1 false suspicion, fenced store", big, fenced, false, true})
		}
		// As dmutexcheck -variant runs it: to the first deadlock.
		rows = append(rows, recoveryRow{a.name, "variant `" + a.variant + "`, perfect detector", CheckConfig{Variant: a.variant, StopAtDeadlock: true}, a.naive, a.explain, false})
	}
	// Beyond the smallest configuration: coordinator failover's fit in CI
	// (a second or two); two requests per peer for the others take
	// hundreds of thousands of states, behind -dmutex.big.
	recovered := func(alg Algorithm, n, requests int, nw Network) CheckConfig {
		return CheckConfig{Algorithm: alg, N: n, Requests: requests, Network: nw, Options: []Option{WithRecovery()}, Faults: crash, Detector: perfect}
	}
	return append(rows,
		recoveryRow{"Ricart-Agrawala", "`WithRecovery()`, perfect detector, 2 requests per peer", recovered(RicartAgrawala, 3, 2, NetworkFIFO), careful, false, true},
		recoveryRow{"Suzuki-Kasami", "`WithRecovery()`, perfect detector, 2 requests per peer", recovered(SuzukiKasami, 3, 2, NetworkFIFO), careful, false, true},
		// Under -race this one (79,661 states, a minute of a loaded
		// machine) is left to the runs without it, as the big rows are;
		// the n = 3 rows check the failover in CI.
		recoveryRow{"centralized", "`WithRecovery()`, perfect detector", recovered(Centralized, 4, 1, NetworkFIFO), careful, false, raceLight()},
		recoveryRow{"centralized", "`WithRecovery()`, perfect detector, 2 requests per peer", recovered(Centralized, 3, 2, NetworkFIFO), careful, false, false},
		recoveryRow{"centralized", "`WithRecovery()`, perfect detector, unordered network", recovered(Centralized, 3, 1, NetworkUnordered), careful, false, false},
		recoveryRow{"Agrawal-El Abbadi", "`WithRecovery()`, perfect detector, 2 requests per peer", recovered(AgrawalElAbbadi, 3, 2, NetworkFIFO), careful, false, true},
		// A partition that heals under the detector, with messages lost
		// meanwhile: the waiting peer asks again, and both enter.
		recoveryRow{"Agrawal-El Abbadi", "`WithRecovery()`, imperfect detector, 1 false suspicion, fenced store, partition {1} then heal", CheckConfig{
			Algorithm: AgrawalElAbbadi, N: 2, Requests: 1, Options: []Option{WithRecovery()},
			Faults: CheckFaults{Partition: 1 << 1, Heal: true}, Detector: imperfect, Fenced: true,
		}, careful, false, false},
	)
}

// TestCheckRecovery checks each recovery (WithRecovery:
// Ricart-Agrawala's crash exclusion, Suzuki-Kasami's token regeneration,
// centralized coordinator failover) with both detectors, with and without
// the fenced store, its absence and its naive variant, and that docs/checking.md
// shows what the checker found (rewrite it with -dmutex.readme
// -dmutex.big). Without -dmutex.big the big rows are left out, and every
// other line must be on that page; -dmutex.readme alone rewrites the
// other rows and keeps the big rows' lines as they are.
func TestCheckRecovery(t *testing.T) {
	skipRaceLight(t, "the recovery table's searches, on one goroutine (10 s under -race)")
	if !*writeReadme && !*updateDocs { // a rewrite of docs/checking.md runs alone
		t.Parallel() // searches on the test's goroutine: beside the other parallel tests
	}
	const begin = "<!-- recovery table: go test -run TestCheckRecovery -dmutex.readme -dmutex.big . -->\n"
	const end = "<!-- end recovery table -->\n"
	got, rewrite := readmeSection(t, begin, end)
	var lines []string // the table's computed lines
	var notes strings.Builder
	for _, row := range recoveryRows() {
		if row.big && !*bigChecks {
			if *writeReadme {
				key := fmt.Sprintf("| %s | %s | %d | ", row.alg, row.name, row.cfg.N)
				i := strings.Index(got, key)
				if i < 0 {
					t.Fatalf("%s has no line for the big row %q to keep; rewrite with -dmutex.big", checkingPage, key)
				}
				line := got[i:]
				line = line[:strings.Index(line, "\n")+1]
				lines = append(lines, line)
			}
			continue
		}
		// A subtest per row, so that -run 'TestCheckRecovery$/Agrawal'
		// checks one algorithm's rows (a mutation stage does); the rows
		// left out are then not compared.
		var res CheckResult
		n, held := row.cfg.N, false
		t.Run(fmt.Sprintf("%s: %s, n = %d", row.alg, row.name, row.cfg.N), func(t *testing.T) {
			var err error
			res, err = Check(context.Background(), row.cfg)
			require.NoError(t, err)
			if n == 0 {
				n = res.N
			}
			if !row.holds(res) {
				t.Errorf("%s, %s, n = %d: unexpected result %+v", row.alg, row.name, n, res)
				if res.Violation != nil {
					t.Errorf("%s: %s", res.Violation.Message, strings.Join(res.Violation.Trace, "; "))
				}
				return
			}
			held = true
		})
		if !held {
			continue
		}
		first := "none"
		if v := res.Violation; v != nil {
			first = fmt.Sprintf("%s after %d steps: `%s`", v.Property, len(v.Transitions), strings.Join(v.Transitions, " "))
		}
		fenced := "not checked"
		if res.Fenced {
			fenced = res.FencedSafe.String()
		}
		// Each cell as dmutexcheck writes it: yes, no or undecided.
		lines = append(lines, fmt.Sprintf("| %s | %s | %d | %s | %s | %s | %s | %s | %s |\n", row.alg, row.name, n, thousands(res.States),
			res.Safe, res.DeadlockFree, res.StarvationFree, fenced, first))
		if row.explain && res.Violation != nil {
			fmt.Fprintf(&notes, "\nThe run the checker found for %s, %s, n = %d (%s):\n\n", row.alg, row.name, n, strings.TrimPrefix(res.Violation.Message, "dmutex: protocol violation: "))
			for i, l := range res.Violation.Trace {
				fmt.Fprintf(&notes, "%d. %s\n", i+1, l)
			}
		}
	}
	if t.Failed() {
		return
	}
	want := "| algorithm | configuration | n | states | safe | deadlock free | starvation free | fenced safe | first violation |\n" +
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n" + strings.Join(lines, "") + notes.String()
	if *writeReadme {
		if got != want {
			rewrite(want)
		}
		return
	}
	if *bigChecks {
		if got != want {
			t.Errorf("%s's recovery table is stale; rerun with -dmutex.readme -dmutex.big. Want:\n%s", checkingPage, want)
		}
		return
	}
	for _, l := range append(lines, strings.SplitAfter(notes.String(), "\n")...) {
		if !strings.Contains(got, l) {
			t.Errorf("%s's recovery table lacks %q; rerun with -dmutex.readme -dmutex.big", checkingPage, l)
		}
	}
}

// readmeSection returns the text of docs/checking.md (once the README's
// section) between the markers begin and end, and a function that
// rewrites the page with another text there.
func readmeSection(t *testing.T, begin, end string) (got string, rewrite func(string)) {
	t.Helper()
	page, err := os.ReadFile(checkingPage)
	if err != nil {
		t.Fatal(err)
	}
	before, got, after := section(t, string(page), begin, end)
	return got, func(want string) {
		if err := os.WriteFile(checkingPage, []byte(before+want+after), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// thousands formats n with commas, as the docs' tables do.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestWorldDetectorTransitions: a perfect detector offers a suspicion
// only of a crashed peer, by every survivor, and the IDs replay.
func TestWorldDetectorTransitions(t *testing.T) {
	w, err := NewWorld(RicartAgrawala, 3, WorldConfig{}, WithRecovery())
	if err != nil {
		t.Fatal(err)
	}
	w.f.detector = DetectorPerfect
	ids := func() []string {
		var out []string
		for _, tr := range w.Transitions() {
			if tr.Kind == TransSuspect || tr.Kind == TransTrust {
				out = append(out, tr.ID())
			}
		}
		return out
	}
	if got := ids(); len(got) != 0 {
		t.Fatalf("suspicions before any crash: %v", got)
	}
	w.crash(2)
	if got := fmt.Sprint(ids()); got != "[s0-2 s1-2]" {
		t.Fatalf("after P2 crashed: %s, want [s0-2 s1-2]", got)
	}
	tr, ok := w.Find("s0-2")
	if !ok {
		t.Fatal("s0-2 not found")
	}
	st, err := w.Apply(tr)
	if err != nil || st.String() != "P0 suspects P2" {
		t.Fatalf("apply s0-2: %q, %v", st.String(), err)
	}
	if got := fmt.Sprint(ids()); got != "[s1-2]" {
		t.Fatalf("after s0-2: %s, want [s1-2]", got)
	}
	if w.quiet() {
		t.Fatal("quiet with a suspicion owed")
	}
}
