package dmutex

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
)

var fourChecks = flag.Bool("dmutex.four", false, "model-check crash exclusion, token regeneration and centralized failover at n = 4 with a perfect detector, safety, deadlock, starvation and maxOvertakes (TestRecoveryAtFour: tens of millions of states, about fifteen minutes and 7 GB)")

// TestRecoveryAtFour checks Ricart-Agrawala's crash exclusion,
// Suzuki-Kasami's token regeneration and centralized failover at n = 4
// (issue 16 item 4: "n = 4 where it fits"; issue 25: starvation and
// maxOvertakes with recovery at n = 4), one request per peer, one crash
// of any peer at any point, a perfect detector: safety, deadlock,
// starvation and the most overtakes, with the graph searched depth first
// (deepgraph.go), which holds the 27M states of Ricart-Agrawala in about
// 6.5 GB. It compares docs/checking.md's table with what it finds, or
// rewrites it with -dmutex.readme. Centralized failover at n = 4 is small
// and is also a row of TestCheckRecovery's table.
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
		{Centralized, "centralized"},
	}
	var b strings.Builder
	b.WriteString("| algorithm | configuration | n | states | transitions | safe | deadlock free | starvation free | max overtakes |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, row := range rows {
		res, err := Check(context.Background(), CheckConfig{
			Algorithm: row.alg, N: 4, Requests: 1, Options: []Option{WithRecovery()},
			Faults:   CheckFaults{Crash: true},
			Detector: Detector{Kind: DetectorPerfect}, MaxStates: 80_000_000, MaxMemory: -1,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d states, %d transitions, max overtakes %d, %.0f s", row.name, res.States, res.Transitions, res.MaxOvertakes, res.Seconds)
		if !res.Complete || res.Safe != Holds || res.DeadlockFree != Holds || res.StarvationFree != Holds || !res.Liveness || res.Violation != nil {
			t.Errorf("%s, n = 4: want a complete search, safe, deadlock free and starvation free: %+v", row.name, res)
			continue
		}
		fmt.Fprintf(&b, "| %s | `WithRecovery()`, perfect detector | 4 | %s | %s | yes | yes | yes | %d |\n",
			row.name, thousands(res.States), thousands(res.Transitions), res.MaxOvertakes)
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
