package dmutex

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/checking.md's table of model-checking state counts ("Checked in every
// delivery order"): one row per algorithm, a cell per configuration of
// checkCases with n = 3, each "states (max overtakes)". TestDocTables
// -update writes it from Check; TestModelCheck compares every case it
// runs against its cell, so that CI checks it without a second search.

// stateRowName is the row of v in the state table.
func stateRowName(v variant) string {
	for _, a := range docAlgs() {
		if a.alg == v.alg && (len(a.opts) > 0) == (len(v.opts) > 0) {
			return a.name
		}
	}
	return v.name
}

// stateCol is the column of a case: r = 1 or 2, FIFO or unordered.
func stateCol(cc checkCase) int {
	c := 2 * (cc.requests - 1)
	if cc.net == NetworkUnordered {
		c++
	}
	return c
}

var stateHead = []string{"algorithm", "r = 1, FIFO", "r = 1, unordered", "r = 2, FIFO", "r = 2, unordered"}

func stateCell(res CheckResult) string {
	cell := commas(res.States)
	if res.Liveness {
		cell += fmt.Sprintf(" (%d)", res.MaxOvertakes)
	}
	return cell
}

// commas writes n with thousands separators.
func commas(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// readStateTable parses docs/checking.md's state table: row name, column, cell.
func readStateTable(t testing.TB, text string) map[string][]string {
	_, body, _ := section(t, text, "<!-- BEGIN state-table -->\n", "<!-- END state-table -->")
	rows := map[string][]string{}
	for i, line := range strings.Split(strings.TrimSpace(body), "\n") {
		if i < 2 {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		rows[cells[0]] = cells[1:]
	}
	return rows
}

// stateTable computes the table; the big cases keep their old cells.
func stateTable(t testing.TB, old map[string][]string) string {
	var order []string
	rows := map[string][]string{}
	for _, cc := range checkCases() {
		if cc.n != 3 || cc.requests > 2 {
			continue
		}
		name := stateRowName(cc.v)
		if rows[name] == nil {
			order = append(order, name)
			rows[name] = []string{"— (needs FIFO)", "— (needs FIFO)", "— (needs FIFO)", "— (needs FIFO)"}
			for i := range rows[name] {
				if !cc.v.alg.NeedsFIFO() {
					rows[name][i] = "—"
				}
			}
		}
		col := stateCol(cc)
		// The big cases (Lamport with two requests: hundreds of millions of
		// states; implicit replies with two over an unordered network:
		// millions) are run by TestModelCheck -dmutex.big, not here.
		if cc.big {
			if o := old[name]; len(o) > col {
				rows[name][col] = o[col]
			} else {
				rows[name][col] = "(not computed)"
			}
			continue
		}
		res := mustCheck(t, CheckConfig{Algorithm: cc.v.alg, Options: cc.v.opts, N: cc.n, Requests: cc.requests,
			Network: cc.net, MaxStates: -1, MaxMemory: -1, SafetyOnly: cc.v.alg == Lamport && cc.requests == 2})
		require.True(t, res.Complete && res.Safe == Holds && res.DeadlockFree == Holds, cc.name())
		rows[name][col] = stateCell(res)
	}
	var b strings.Builder
	b.WriteString("| " + strings.Join(stateHead, " | ") + " |\n")
	b.WriteString(strings.Repeat("| --- ", len(stateHead)) + "|\n")
	for _, name := range order {
		b.WriteString("| " + name + " | " + strings.Join(rows[name], " | ") + " |\n")
	}
	return b.String()
}

// checkStateCell fails t when docs/checking.md's cell for cc differs from res.
func checkStateCell(t *testing.T, cc checkCase, res CheckResult) {
	if cc.n != 3 || cc.requests > 2 {
		return
	}
	b, err := os.ReadFile(checkingPage)
	require.NoError(t, err)
	row := readStateTable(t, string(b))[stateRowName(cc.v)]
	require.Greater(t, len(row), stateCol(cc), "%s's state table has no cell for %s; run\n\t%s", checkingPage, cc.name(), docUpdateCommand)
	want := row[stateCol(cc)]
	if strings.Contains(want, "`") {
		return // a case the table does not count
	}
	have := stateCell(res)
	if !res.Liveness { // only the state count was computed
		want, _, _ = strings.Cut(want, " (")
	}
	require.Equal(t, want, have, "%s's state table, %s; run\n\t%s", checkingPage, cc.name(), docUpdateCommand)
}

// docs/checking.md's table of bounded waiting with four peers
// ("overtakes-n4"): one row per algorithm, a cell per number of requests
// (1 or 2, FIFO), each "max overtakes (states)", from the checkCases with
// n = 4. TestDocTables -update writes it (the big cases only with
// -dmutex.big), and TestModelCheck compares every case it runs with the
// graph against its cell.

var overtakeHead = []string{"algorithm", "r = 1", "r = 2"}

// overtakeCases returns the cases of the table, by row and column.
func overtakeCases() map[string][2]*checkCase {
	cells := map[string][2]*checkCase{}
	for _, cc := range checkCases() {
		if cc.n != 4 || cc.net != NetworkFIFO || cc.requests > 2 || (cc.big && !cc.live) {
			continue
		}
		row := cells[stateRowName(cc.v)]
		row[cc.requests-1] = &cc
		cells[stateRowName(cc.v)] = row
	}
	return cells
}

func overtakeCell(res CheckResult) string {
	return fmt.Sprintf("%d (%s states)", res.MaxOvertakes, commas(res.States))
}

// readOvertakeTable parses docs/checking.md's table: row name to cells.
func readOvertakeTable(t testing.TB, text string) map[string][]string {
	_, body, _ := section(t, text, "<!-- BEGIN overtakes-n4 -->\n", "<!-- END overtakes-n4 -->")
	rows := map[string][]string{}
	for i, line := range strings.Split(strings.TrimSpace(body), "\n") {
		if i < 2 || line == "" {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		rows[cells[0]] = cells[1:]
	}
	return rows
}

// overtakeTable computes the table; without big, the big cases keep
// their old cells.
func overtakeTable(t testing.TB, old map[string][]string, big bool) string {
	cases := overtakeCases()
	var b strings.Builder
	b.WriteString("| " + strings.Join(overtakeHead, " | ") + " |\n")
	b.WriteString(strings.Repeat("| --- ", len(overtakeHead)) + "|\n")
	for _, a := range docAlgs() {
		cells := []string{"not checked", "not checked"}
		for col, cc := range cases[a.name] {
			switch {
			case cc == nil:
			case cc.big && !big && !bigCase(*cc):
				if o := old[a.name]; len(o) > col {
					cells[col] = o[col]
				} else {
					cells[col] = "(not computed)"
				}
			default:
				res := mustCheck(t, CheckConfig{Algorithm: cc.v.alg, Options: cc.v.opts, N: cc.n, Requests: cc.requests, Network: cc.net, MaxStates: bigLimit(*cc), MaxMemory: bigMemory(*cc), Workers: bigWorkers(*cc), OnTheFly: bigOnTheFly(*cc)})
				require.True(t, res.Complete && res.Liveness && res.StarvationFree == Holds, "%s: %+v", cc.name(), res)
				t.Logf("%s: %d states, %d transitions, max overtakes %d, %.0fs", cc.name(), res.States, res.Transitions, res.MaxOvertakes, res.Seconds)
				cells[col] = overtakeCell(res)
			}
		}
		b.WriteString("| " + a.name + " | " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

// checkOvertakeCell fails t when docs/checking.md's cell for cc differs from
// res.
func checkOvertakeCell(t *testing.T, cc checkCase, res CheckResult) {
	if cc.n != 4 || cc.net != NetworkFIFO || cc.requests > 2 || !res.Liveness {
		return
	}
	b, err := os.ReadFile(checkingPage)
	require.NoError(t, err)
	row := readOvertakeTable(t, string(b))[stateRowName(cc.v)]
	require.Greater(t, len(row), cc.requests-1, "%s's overtakes-n4 table has no cell for %s; run\n\t%s", checkingPage, cc.name(), docUpdateCommand)
	require.Equal(t, row[cc.requests-1], overtakeCell(res), "%s's overtakes-n4 table, %s; run\n\t%s", checkingPage, cc.name(), docUpdateCommand)
}
