package dmutex

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
)

var fourChecks = flag.Bool("dmutex.four", false, "model-check crash exclusion and token regeneration at n = 4 with a perfect detector, safety and deadlock only (TestRecoveryAtFour: tens of millions of states, about ten minutes)")

// TestRecoveryAtFour checks Ricart-Agrawala's crash exclusion and
// Suzuki-Kasami's token regeneration at n = 4 (issue 16 item 4: "n = 4
// where it fits"), one request per peer, one crash of any peer at any
// point, a perfect detector: safety and deadlock only, depth first,
// since the graph starvation needs does not fit in memory there. It
// compares docs/checking.md's table with what it finds, or rewrites it with
// -dmutex.readme. Centralized failover at n = 4 fits with the graph and
// is a row of TestCheckRecovery's table.
func TestRecoveryAtFour(t *testing.T) {
	if !*fourChecks {
		t.Skip("tens of millions of states, about ten minutes: run with -dmutex.four")
	}
	rows := []struct {
		alg  Algorithm
		name string
	}{
		{RicartAgrawala, "Ricart-Agrawala"},
		{SuzukiKasami, "Suzuki-Kasami"},
	}
	var b strings.Builder
	b.WriteString("| algorithm | configuration | n | states | transitions | safe | deadlock free |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, row := range rows {
		res, err := Check(context.Background(), CheckConfig{
			Algorithm: row.alg, N: 4, Requests: 1, Options: []Option{WithRecovery()},
			Faults:   CheckFaults{Crash: true},
			Detector: Detector{Kind: DetectorPerfect}, SafetyOnly: true, MaxStates: 80_000_000, MaxMemory: -1,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d states, %d transitions, %.0f s", row.name, res.States, res.Transitions, res.Seconds)
		if !res.Complete || res.Safe != Holds || res.DeadlockFree != Holds || res.Violation != nil {
			t.Errorf("%s, n = 4: want a complete search, safe and deadlock free: %+v", row.name, res)
			continue
		}
		fmt.Fprintf(&b, "| %s | `WithRecovery()`, perfect detector, safety and deadlock only | 4 | %s | %s | yes | yes |\n",
			row.name, thousands(res.States), thousands(res.Transitions))
	}
	if t.Failed() {
		return
	}
	const begin = "<!-- recovery at n = 4: go test -run TestRecoveryAtFour -dmutex.four -dmutex.readme . -->\n"
	const end = "<!-- end recovery at n = 4 -->\n"
	got, rewrite := readmeSection(t, begin, end)
	if got != b.String() {
		if !*writeReadme {
			t.Fatalf("%s's n = 4 recovery table is stale; rerun with -dmutex.readme. Want:\n%s", checkingPage, b.String())
		}
		rewrite(b.String())
	}
}
