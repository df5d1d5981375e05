package dmutex

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var writeReadme = flag.Bool("dmutex.readme", false, "rewrite README.md's generated crash-recovery table from the checker's runs")

// recoveryRow is one configuration of the crash-recovery table.
type recoveryRow struct {
	alg     string // the algorithm's column
	name    string
	cfg     CheckConfig
	holds   func(CheckResult) bool // what the row must show
	explain bool                   // print the counterexample under the table
}

// recoveryRows are the rows of the README's crash-recovery table: each
// recovery at n = 3, one request per peer, one crash of any peer at any
// point, without recovery, with it under both detectors, and its naive
// variant.
func recoveryRows() []recoveryRow {
	crash := CheckFaults{Crash: true, CrashPeer: AnyPeer}
	perfect := Detector{Kind: DetectorPerfect}
	imperfect := Detector{Kind: DetectorImperfect, FalseSuspicions: 1}
	noRecovery := func(r CheckResult) bool {
		return r.Complete && r.Safe && !r.DeadlockFree && r.Violation != nil && r.Violation.Property == "deadlock"
	}
	careful := func(r CheckResult) bool {
		return r.Complete && r.Safe && r.DeadlockFree && r.StarvationFree && r.Liveness
	}
	unsafe := func(r CheckResult) bool {
		return !r.Safe && r.Violation != nil && r.Violation.Property == "safety"
	}
	var rows []recoveryRow
	for _, a := range []struct {
		alg     Algorithm
		name    string
		variant string
		naive   func(CheckResult) bool
		explain bool // the naive variant's run goes under the table
	}{
		{RicartAgrawala, "Ricart-Agrawala", "ricart-agrawala-naive-exclusion", func(r CheckResult) bool {
			return r.Safe && !r.DeadlockFree && r.Violation != nil && r.Violation.Property == "deadlock"
		}, false},
		{SuzukiKasami, "Suzuki-Kasami", "suzuki-kasami-naive-regeneration", unsafe, true},
		{Centralized, "centralized", "centralized-naive-failover", unsafe, true},
	} {
		base := func(opts []Option, d Detector) CheckConfig {
			return CheckConfig{Algorithm: a.alg, N: 3, Requests: 1, Options: opts, Faults: crash, Detector: d}
		}
		rows = append(rows,
			recoveryRow{a.name, "no recovery, perfect detector", base(nil, perfect), noRecovery, false},
			recoveryRow{a.name, "`WithRecovery()`, perfect detector", base([]Option{WithRecovery()}, perfect), careful, false},
			recoveryRow{a.name, "`WithRecovery()`, imperfect detector, 1 false suspicion", base([]Option{WithRecovery()}, imperfect), unsafe, true},
			recoveryRow{a.name, "variant `" + a.variant + "`, perfect detector", CheckConfig{Variant: a.variant}, a.naive, a.explain},
		)
	}
	// Coordinator failover beyond the smallest configuration: each fits
	// in CI (a second or two).
	failover := func(n, requests int, nw Network) CheckConfig {
		return CheckConfig{Algorithm: Centralized, N: n, Requests: requests, Network: nw, Options: []Option{WithRecovery()}, Faults: crash, Detector: perfect}
	}
	return append(rows,
		recoveryRow{"centralized", "`WithRecovery()`, perfect detector, n = 4", failover(4, 1, NetworkFIFO), careful, false},
		recoveryRow{"centralized", "`WithRecovery()`, perfect detector, 2 requests per peer", failover(3, 2, NetworkFIFO), careful, false},
		recoveryRow{"centralized", "`WithRecovery()`, perfect detector, unordered network", failover(3, 1, NetworkUnordered), careful, false},
	)
}

// TestCheckRecoveryRicart checks each recovery (WithRecovery:
// Ricart-Agrawala's crash exclusion, Suzuki-Kasami's token regeneration,
// centralized coordinator failover)
// with both detectors, its absence and its naive variant, and that
// README.md shows what the checker found (rewrite it with
// -dmutex.readme).
func TestCheckRecoveryRicart(t *testing.T) {
	var b strings.Builder
	b.WriteString("| algorithm | configuration | states | safe | deadlock free | starvation free | first violation |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	var notes strings.Builder
	yes := func(ok bool, computed bool) string {
		switch {
		case !computed:
			return "not computed"
		case ok:
			return "yes"
		}
		return "no"
	}
	for _, row := range recoveryRows() {
		res, err := Check(context.Background(), row.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !row.holds(res) {
			t.Errorf("%s: unexpected result %+v", row.name, res)
			if res.Violation != nil {
				t.Errorf("%s: %s", res.Violation.Message, strings.Join(res.Violation.Trace, "; "))
			}
			continue
		}
		first := "none"
		if v := res.Violation; v != nil {
			first = fmt.Sprintf("%s after %d steps: `%s`", v.Property, len(v.Transitions), strings.Join(v.Transitions, " "))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", row.alg, row.name, thousands(res.States),
			yes(res.Safe, true), yes(res.DeadlockFree, res.Safe), yes(res.StarvationFree, res.Liveness), first)
		if row.explain && res.Violation != nil {
			fmt.Fprintf(&notes, "\nThe run the checker found for %s, %s (%s):\n\n", row.alg, row.name, strings.TrimPrefix(res.Violation.Message, "dmutex: protocol violation: "))
			for i, l := range res.Violation.Trace {
				fmt.Fprintf(&notes, "%d. %s\n", i+1, l)
			}
		}
	}
	if t.Failed() {
		return
	}
	want := b.String() + notes.String()
	const begin = "<!-- recovery table: go test -run TestCheckRecoveryRicart -dmutex.readme . -->\n"
	const end = "<!-- end recovery table -->\n"
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("README.md lacks the recovery table markers")
	}
	got := s[i+len(begin) : j]
	if got == want {
		return
	}
	if *writeReadme {
		if err := os.WriteFile("README.md", []byte(s[:i+len(begin)]+want+s[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("README.md's recovery table is stale; rerun with -dmutex.readme. Want:\n%s", want)
}

// thousands formats n with commas, as the README's tables do.
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
	w, err := NewWorld(RicartAgrawala, 3, WithRecovery())
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
