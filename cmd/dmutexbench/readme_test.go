package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// benchTable reads the rows of the Markdown table between the
// bench-table markers of path, by algorithm.
func benchTable(t *testing.T, text string) map[string][]string {
	const begin, end = "<!-- BEGIN bench-table -->\n", "<!-- END bench-table -->"
	i, j := strings.Index(text, begin), strings.Index(text, end)
	require.True(t, i >= 0 && j > i, "no bench-table markers")
	rows := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(text[i+len(begin):j]), "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) > 1 && cells[0] != "algorithm" && !strings.HasPrefix(cells[0], "---") {
			rows[cells[0]] = cells
		}
	}
	return rows
}

// exactColumns are the columns of the report that do not depend on
// timing: the algorithm, n, the theory, the simulated "msgs k ask" and
// k, and the weakness. "msgs 1 at a time" runs on goroutines: exact for
// the algorithms whose count does not depend on when the next request
// comes (not the token ring, whose idle lap may still be going, nor
// Maekawa and Agrawal-El Abbadi, whose voters may still hold the last
// RELEASE).
var exactColumns = []int{0, 1, 2, 4, 5, 12}

var timedOne = map[string]bool{"token-ring": true, "maekawa": true, "agrawal-el-abbadi": true}

// TestREADMEMessageColumns runs the wide table (n = 8) with short
// latency runs and compares its exact columns with docs/benchmarks.md's
// table; the latency columns there are a dated sample and are not
// compared. (The README shows the default report: TestREADMEReport.)
func TestREADMEMessageColumns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the report")
	}
	code, stdout, stderr := runCmd(t, false, "-format", "markdown")
	require.Equal(t, 0, code, stderr)
	got := benchTable(t, "<!-- BEGIN bench-table -->\n"+stdout+"<!-- END bench-table -->")
	for _, path := range []string{"../../docs/benchmarks.md"} {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		have := benchTable(t, string(b))
		require.Len(t, have, len(got), path)
		for alg, want := range got {
			row := have[alg]
			require.NotNil(t, row, "%s: no row for %s", path, alg)
			cols := exactColumns
			if !timedOne[alg] {
				cols = append([]int{3}, cols...)
			}
			for _, c := range cols {
				require.Equal(t, want[c], row[c], "%s: %s, column %d; regenerate with go run ./cmd/dmutexbench -format markdown", path, alg, c)
			}
		}
	}
}
