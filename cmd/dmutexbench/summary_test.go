package main

import (
	"bytes"
	"flag"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateReadme = flag.Bool("update", false, "rewrite the README's sample of the default report with a fresh full-length run")

// TestReportFitsATerminal runs the default report, and reports with many
// sizes and loads, and checks that no line is wider than 120 bytes (so
// 120 columns in any locale).
func TestReportFitsATerminal(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"default", nil},
		{"sizes and loads", []string{"-n", "1,2,16", "-load", "light,2,4,full", "-alg", "ricart-agrawala-implicit,centralized"}},
		{"one algorithm", []string{"-alg", "maekawa", "-load", "3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(t, false, tt.args...)
			require.Equal(t, 0, code, stderr)
			for _, line := range strings.Split(stdout, "\n") {
				assert.LessOrEqual(t, len(line), maxWidth, "%q", line)
			}
			assert.Contains(t, stdout, legend[0])
			assert.Contains(t, stdout, "\nAt n = ")
		})
	}
}

// TestReportWidestCells writes a report whose every cell is as wide as
// it gets (the longest algorithm name, n = 4096, four loads, latencies
// in the hundreds of milliseconds, ties in every conclusion): no line may
// pass 120 bytes.
func TestReportWidestCells(t *testing.T) {
	var rows []row
	for _, v := range allVariants() {
		r := row{Algorithm: v.name, N: 4096, MsgsOne: 12345.67, MsgsK: 12345.67, K: 4096, PerSecond: 12345678}
		for _, l := range []load{1, 2, 4, fullLoad} {
			r.Loads = append(r.Loads, latency{Load: l.String(), Contenders: l.contenders(4096), P50: 999999, P99: 999999})
		}
		rows = append(rows, r)
	}
	var b bytes.Buffer
	require.NoError(t, writeReport(&b, &options{}, rows))
	for _, line := range strings.Split(b.String(), "\n") {
		assert.LessOrEqual(t, len(line), maxWidth, "%q", line)
	}
}

// sampleRows are two sizes of three made-up algorithms.
func sampleRows() []row {
	mk := func(alg string, n int, one, all, perSecond, p50 float64) row {
		return row{Algorithm: alg, N: n, MsgsOne: one, MsgsK: all, K: n, PerSecond: perSecond,
			Loads: []latency{{Load: "light", Contenders: 1, P50: 1}, {Load: "full", Contenders: n, P50: p50}}}
	}
	return []row{
		mk("a", 2, 1, 1, 10, 5),
		mk("a", 8, 7, 6, 100, 20),
		mk("b", 2, 0.5, 0.5, 1, 5),
		mk("b", 8, 5, 9, 300, 12.5),
		mk("c", 8, 5.004, 2, 200, 3),
	}
}

// TestConclusionsComputed checks that the conclusions come from the
// numbers: they are about the largest n, values that print alike tie,
// and changing a number changes what they say.
func TestConclusionsComputed(t *testing.T) {
	rows := sampleRows()
	assert.Equal(t, []string{
		"At n = 8:",
		"  alone, the fewest messages per entry: b and c 5.00 (next: a 7.00); the most: a 7.00.",
		"  with all 8 asking, the fewest: c 2.00 (next: a 6.00); the most: b 9.00.",
		"  the most entries per second under full load (this run; timings vary): b, 300/s, p50 12.5µs.",
	}, conclusions(rows))

	rows[4].MsgsOne, rows[4].MsgsK, rows[4].PerSecond = 4, 7, 301
	assert.Equal(t, []string{
		"At n = 8:",
		"  alone, the fewest messages per entry: c 4.00 (next: b 5.00); the most: a 7.00.",
		"  with all 8 asking, the fewest: a 6.00 (next: c 7.00); the most: b 9.00.",
		"  the most entries per second under full load (this run; timings vary): c, 301/s, p50 3.0µs.",
	}, conclusions(rows))

	assert.Equal(t, []string{
		"At n = 2:",
		"  a sends 1.00 messages per entry alone and 1.00 with all 2 asking.",
		"  the most entries per second under full load (this run; timings vary): a, 10/s, p50 5.0µs.",
	}, conclusions(rows[:1]))
}

func TestWrap(t *testing.T) {
	assert.Equal(t, []string{"short"}, wrap("short", 10))
	assert.Equal(t, []string{"one two", "  three", "  four"}, wrap("one two three four", 8))
	assert.Equal(t, []string{"unbreakable-word"}, wrap("unbreakable-word", 5))
	for _, l := range wrap(strings.Repeat("word ", 100), maxWidth) {
		assert.LessOrEqual(t, len(l), maxWidth)
	}
}

const reportBegin, reportEnd = "<!-- BEGIN bench-report: go test ./cmd/dmutexbench -run TestREADMEReport -update -->\n```text\n", "```\n<!-- END bench-report -->"

// report is the default output, parsed back.
type report struct {
	header      []string
	rows        []row
	cells       [][]string
	legend      []string
	conclusions []string
}

var columnGap = regexp.MustCompile(`\s{2,}`)

func parseReport(t *testing.T, text string) report {
	t.Helper()
	parts := strings.Split(strings.TrimRight(text, "\n"), "\n\n")
	require.Len(t, parts, 3, "table, legend, conclusions: %q", text)
	lines := strings.Split(parts[0], "\n")
	r := report{header: columnGap.Split(strings.TrimSpace(lines[0]), -1),
		legend: strings.Split(parts[1], "\n"), conclusions: strings.Split(parts[2], "\n")}
	require.Equal(t, []string{"algorithm", "n", "theory", "alone", "all ask"}, r.header[:5])
	for _, line := range lines[1:] {
		c := strings.Fields(line)
		require.Len(t, c, len(r.header), "%q", line)
		num := func(s string) float64 {
			x, err := strconv.ParseFloat(s, 64)
			require.NoError(t, err, "%q in %q", s, line)
			return x
		}
		n, err := strconv.Atoi(c[1])
		require.NoError(t, err)
		w := row{Algorithm: c[0], N: n, MsgsOne: num(c[3]), MsgsK: num(c[4]), K: n, PerSecond: num(c[len(c)-1])}
		for i := 5; i+1 < len(c); i += 2 {
			name := strings.TrimPrefix(r.header[i], "p50 ")
			l := latency{Load: name, Contenders: n, P50: parseMicros(t, c[i]), P99: parseMicros(t, c[i+1])}
			if name == "light" {
				l.Contenders = 1
			}
			w.Loads = append(w.Loads, l)
		}
		r.rows, r.cells = append(r.rows, w), append(r.cells, c)
	}
	return r
}

// parseMicros reads back a latency that fmtMicros wrote.
func parseMicros(t *testing.T, s string) float64 {
	t.Helper()
	for _, u := range []struct {
		suffix string
		scale  float64
	}{{"ms", 1000}, {"µs", 1}, {"ns", 0.001}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			x, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, s)
			return x * u.scale
		}
	}
	t.Fatalf("%q is not a latency", s)
	return 0
}

// TestREADMEReport checks the README's sample of what go run
// ./cmd/dmutexbench prints: the same header and legend as a fresh run,
// the same exact columns (those of TestREADMEMessageColumns), and the
// conclusions that the sample's own numbers give. With -update it
// rewrites the sample from a fresh run of the default length.
func TestREADMEReport(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the report")
	}
	const path = "../../README.md"
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	before, rest, ok := strings.Cut(string(b), reportBegin)
	require.True(t, ok, "%s has no bench-report block", path)
	sample, after, ok := strings.Cut(rest, reportEnd)
	require.True(t, ok, "%s: the bench-report block has no end", path)

	if *updateReadme {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run(nil, &out, &errb, false), errb.String())
		require.NoError(t, os.WriteFile(path, []byte(before+reportBegin+out.String()+reportEnd+after), 0o644))
		sample = out.String()
	}

	code, stdout, stderr := runCmd(t, false)
	require.Equal(t, 0, code, stderr)
	fresh, have := parseReport(t, stdout), parseReport(t, sample)
	assert.Equal(t, fresh.header, have.header)
	assert.Equal(t, fresh.legend, have.legend)
	require.Len(t, have.rows, len(fresh.rows))
	for i, want := range fresh.cells {
		got := have.cells[i]
		cols := []int{0, 1, 2, 4}
		if !timedOne[want[0]] {
			cols = append(cols, 3)
		}
		for _, c := range cols {
			assert.Equal(t, want[c], got[c], "%s: %s, column %s; regenerate with go test ./cmd/dmutexbench -run TestREADMEReport -update",
				path, want[0], fresh.header[c])
		}
	}
	var computed []string
	for _, l := range conclusions(have.rows) {
		computed = append(computed, wrap(l, maxWidth)...)
	}
	assert.Equal(t, computed, have.conclusions, "%s: the conclusions are not those of its numbers", path)
}
