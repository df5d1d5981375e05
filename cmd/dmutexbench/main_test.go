package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image/color"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dmutex/dmutex"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg/draw"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// quick keeps every run of the command short.
var quick = []string{"-duration", "40ms"}

func runCmd(t *testing.T, progress bool, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(append(append([]string(nil), quick...), args...), &out, &errb, progress)
	return code, out.String(), errb.String()
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"unknown flag", []string{"-bogus"}, "flag provided but not defined: -bogus"},
		{"unknown algorithm", []string{"-alg", "paxos"}, `unknown algorithm "paxos"`},
		{"size zero", []string{"-n", "0"}, `-n: "0" is not a cluster size`},
		{"size not a number", []string{"-n", "8,x"}, `-n: "x" is not a cluster size`},
		{"bad load", []string{"-load", "heavy"}, `-load: "heavy" is not light, full or a number`},
		{"zero contenders", []string{"-load", "0"}, `-load: "0" is not light, full or a number`},
		{"bad format", []string{"-format", "xml"}, `-format: "xml" is not one of report, table, markdown, csv, json`},
		{"bad duration", []string{"-duration", "-1s"}, "-duration: -1s is not positive"},
		{"bad chart extension", []string{"-chart", "out.gif"}, `-chart: "out.gif" does not end in .png or .svg`},
		{"stray argument", []string{"extra"}, `unexpected argument "extra"`},
		{"more contenders than peers", []string{"-n", "4,8", "-load", "light,9"}, "-load: 9 contenders is more than the n = 8 peers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(t, false, tt.args...)
			assert.Equal(t, 2, code)
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, tt.wantErr)
			assert.Contains(t, stderr, "Usage: dmutexbench [flags]")
		})
	}
}

func TestHelpExitsZero(t *testing.T) {
	code, stdout, stderr := runCmd(t, false, "-h")
	assert.Equal(t, 0, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "-chart file")
}

// TestWideTable runs the wide table of earlier versions' default, only
// shorter: every algorithm gets a row with exact one-at-a-time counts.
func TestWideTable(t *testing.T) {
	code, stdout, stderr := runCmd(t, false, "-format", "table")
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr, "no progress line when stderr is not a terminal")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 1+len(allVariants()))
	for _, h := range []string{"algorithm", "msgs/entry theory", "p50 light", "p99 full", "entries/s", "share min-max", "weakness"} {
		assert.Contains(t, lines[0], h)
	}
	for i, v := range allVariants() {
		f := strings.Fields(lines[1+i])
		require.GreaterOrEqual(t, len(f), 2)
		assert.Equal(t, v.name, f[0])
		assert.Equal(t, "8", f[1])
	}
	assert.Regexp(t, `(?m)^ricart-agrawala +8 +2\(N-1\) = 14 +14\.00 `, stdout)
	assert.Regexp(t, `(?m)^lamport +8 +3\(N-1\) = 21 +21\.00 `, stdout)
}

func TestFormats(t *testing.T) {
	args := []string{"-alg", "ricart-agrawala,centralized", "-n", "2,5", "-load", "light,3,full"}
	t.Run("json", func(t *testing.T) {
		code, stdout, stderr := runCmd(t, false, append(args, "-format", "json")...)
		require.Equal(t, 0, code, stderr)
		var rows []row
		require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
		require.Len(t, rows, 4)
		want := []struct {
			alg  string
			n    int
			msgs float64
		}{{"ricart-agrawala", 2, 2}, {"ricart-agrawala", 5, 8}, {"centralized", 2, 1.5}, {"centralized", 5, 2.4}}
		for i, w := range want {
			r := rows[i]
			assert.Equal(t, w.alg, r.Algorithm)
			assert.Equal(t, w.n, r.N)
			assert.InDelta(t, w.msgs, r.MsgsOne, 1e-9, "%s n=%d", w.alg, w.n)
			require.NotNil(t, r.TheoryAtN)
			assert.InDelta(t, w.msgs, *r.TheoryAtN, 1e-9)
			assert.Equal(t, w.n, r.K)
			require.Len(t, r.Loads, 3)
			assert.Equal(t, []int{1, min(3, w.n), w.n},
				[]int{r.Loads[0].Contenders, r.Loads[1].Contenders, r.Loads[2].Contenders})
			for _, l := range r.Loads {
				assert.Positive(t, l.Entries, "%s n=%d %s", w.alg, w.n, l.Load)
				assert.LessOrEqual(t, l.P50, l.P99)
			}
			assert.Positive(t, r.PerSecond)
			// Full load: every peer's caller made some entries, and the
			// shares bracket the fair 1/n.
			assert.Positive(t, r.Loads[2].ShareMin, "%s n=%d", w.alg, w.n)
			assert.LessOrEqual(t, r.Loads[2].ShareMin, 1/float64(w.n)+1e-9)
			assert.GreaterOrEqual(t, r.Loads[2].ShareMax, 1/float64(w.n)-1e-9)
			assert.Zero(t, r.Loads[0].ShareMax, "one caller at a time has no share")
		}
	})
	t.Run("csv", func(t *testing.T) {
		code, stdout, stderr := runCmd(t, false, append(args, "-format", "csv")...)
		require.Equal(t, 0, code, stderr)
		recs, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
		require.NoError(t, err)
		require.Len(t, recs, 5)
		assert.Equal(t, []string{"algorithm", "n", "theory"}, recs[0][:3])
		assert.Contains(t, recs[0], "p99_us full")
		assert.Equal(t, []string{"ricart-agrawala", "5", "2(N-1)", "8.00"}, recs[2][:4])
	})
	t.Run("markdown", func(t *testing.T) {
		code, stdout, stderr := runCmd(t, false, append(args, "-format", "markdown")...)
		require.Equal(t, 0, code, stderr)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		require.Len(t, lines, 6)
		assert.True(t, strings.HasPrefix(lines[0], "| algorithm | n |"), lines[0])
		assert.True(t, strings.HasPrefix(lines[1], "| --- | --- |"), lines[1])
		assert.True(t, strings.HasPrefix(lines[4], "| centralized | 2 |"), lines[4])
	})
}

// TestProgress checks the three ways progress is shown, after a line
// saying what is measured: rewritten on one line on a terminal; a line
// per step elsewhere when the run measures for longer than a second;
// nothing at all for a shorter run.
func TestProgress(t *testing.T) {
	code, _, stderr := runCmd(t, true, "-alg", "centralized", "-n", "3")
	require.Equal(t, 0, code)
	assert.Contains(t, stderr, "dmutexbench: measuring 1 algorithm at n = 3 under light and full load, for about 40ms (-duration)\n",
		"what it measures, on a line of its own")
	assert.Contains(t, stderr, "[1/2] centralized n=3")
	assert.True(t, strings.HasSuffix(stderr, "\r\033[K"), "the progress line is cleared at the end")

	code, _, stderr = runCmd(t, false, "-alg", "centralized", "-n", "3", "-duration", "1100ms")
	require.Equal(t, 0, code)
	assert.Equal(t, "dmutexbench: measuring 1 algorithm at n = 3 under light and full load, for about 1.1s (-duration)\n"+
		"dmutexbench: [1/2] centralized n=3: message counts\n"+
		"dmutexbench: [1/2] centralized n=3: light load\n"+
		"dmutexbench: [2/2] centralized n=3: full load\n", stderr, "a line per step, no terminal codes")

	code, _, stderr = runCmd(t, false, "-alg", "centralized", "-n", "3")
	require.Equal(t, 0, code)
	assert.Empty(t, stderr)
}

// TestChartPathCheckedFirst gives a chart path that cannot be written:
// the command must say so before it measures anything.
func TestChartPathCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	isDir := filepath.Join(dir, "d.png")
	require.NoError(t, os.Mkdir(isDir, 0o755))
	for _, path := range []string{filepath.Join(dir, "missing", "c.png"), isDir} {
		code, stdout, stderr := runCmd(t, false, "-alg", "centralized", "-n", "2", "-chart", path)
		assert.Equal(t, 1, code, stderr)
		assert.Empty(t, stdout, "nothing was measured")
		assert.Contains(t, stderr, "dmutexbench: chart: ")
		assert.Contains(t, stderr, path)
	}
	// A writable path is left as it was found: absent.
	ok := filepath.Join(dir, "ok.png")
	require.NoError(t, checkWritable(ok))
	_, err := os.Stat(ok)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestChartStyles checks that the first ten series get ten colours and
// ten markers, and that a name keeps its series, so its style, across
// panels.
func TestChartStyles(t *testing.T) {
	colours, markers := map[color.Color]int{}, map[draw.GlyphDrawer]int{}
	for i := range 10 {
		s := styleAt(i)
		if j, dup := colours[s.color]; dup {
			t.Errorf("series %d has the colour of series %d", i, j)
		}
		if j, dup := markers[s.shape]; dup {
			t.Errorf("series %d has the marker of series %d", i, j)
		}
		colours[s.color], markers[s.shape] = i, i
	}
	st := newStyles()
	p := plot.New()
	for _, name := range []string{"ricart-agrawala", "ricart-agrawala-implicit", "maekawa"} {
		require.NoError(t, st.add(p, name, plotter.XYs{{X: 1, Y: 1}, {X: 2, Y: 2}}))
	}
	require.NoError(t, st.add(p, "ricart-agrawala-implicit", plotter.XYs{{X: 1, Y: 3}}))
	i, isNew := st.indexOf("ricart-agrawala-implicit")
	assert.Equal(t, 1, i)
	assert.False(t, isNew)
	assert.NotEqual(t, styleAt(0).dashes, styleAt(1).dashes, "plain and implicit Ricart-Agrawala, on one line, are told apart by dash too")
}

// TestLocalEntriesApart checks the split of local entries: one caller at
// a time on a different peer each time does not re-enter locally with a
// token, and the only peer of a cluster of one always does.
func TestLocalEntriesApart(t *testing.T) {
	code, stdout, stderr := runCmd(t, false, "-alg", "suzuki-kasami", "-n", "1,4", "-load", "light", "-format", "json")
	require.Equal(t, 0, code, stderr)
	var rows []row
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 2)
	lone, four := rows[0].Loads[0], rows[1].Loads[0]
	assert.Equal(t, 1.0, lone.Local, "n=1: every entry is local")
	assert.Zero(t, lone.P50Sent)
	// n=4, light: every entry fetches the token, but the first may be
	// peer 0's, which starts with it.
	assert.LessOrEqual(t, four.Local*float64(four.Entries), 1+1e-9, "local entries at n=4, light")
	assert.Positive(t, four.P50Sent)
}

func TestChart(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		file  string
		magic string
	}{
		{"c.png", "\x89PNG\r\n\x1a\n"},
		{"c.svg", "<?xml"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join(dir, tt.file)
			code, _, stderr := runCmd(t, false, "-alg", "ra,centralized", "-n", "2,4", "-load", "light,2,full", "-chart", path)
			require.Equal(t, 0, code, stderr)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(string(b), tt.magic), "%q", b[:min(len(b), 16)])
			assert.Greater(t, len(b), 5000, "a chart with two panels, not an empty canvas")
		})
	}
	code, _, stderr := runCmd(t, false, "-alg", "centralized", "-n", "2", "-chart", filepath.Join(dir, "missing", "c.png"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "no such file or directory")
}

func TestParseVariant(t *testing.T) {
	tests := []struct {
		in       string
		want     string
		implicit bool
	}{
		{"ra", "ricart-agrawala", false},
		{"Ricart-Agrawala", "ricart-agrawala", false},
		{"ricart-agrawala-implicit", implicitName, true},
		{"ra-implicit", implicitName, true},
		{"centralized", "centralized", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			v, err := parseVariant(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, v.name)
			assert.Equal(t, tt.implicit, len(v.opts) == 1)
		})
	}
}

// TestContendedMessagesImplicit checks the k-contender count against the
// closed forms: with all n peers asking at once, Ricart-Agrawala with
// implicit replies costs exactly 1.5(n-1) per entry (n(n-1) requests and
// n(n-1)/2 replies), plain Ricart-Agrawala exactly 2(n-1).
func TestContendedMessagesImplicit(t *testing.T) {
	const n = 6
	rng := rand.New(rand.NewPCG(1, 2))
	plain, err := contendedMessages(variant{name: "ricart-agrawala", alg: dmutex.RicartAgrawala}, n, n, rng)
	require.NoError(t, err)
	assert.InDelta(t, 2*(n-1), plain, 1e-9)
	v, err := parseVariant(implicitName)
	require.NoError(t, err)
	implicit, err := contendedMessages(v, n, n, rng)
	require.NoError(t, err)
	assert.InDelta(t, 1.5*(n-1), implicit, 1e-9)
}

// TestSequentialMessagesExact checks the one-at-a-time count against the
// closed form the table prints beside it: it must be exact, not close.
func TestSequentialMessagesExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, name := range []string{"centralized", "lamport", "ricart-agrawala", implicitName} {
		v, err := parseVariant(name)
		require.NoError(t, err)
		for _, n := range []int{1, 2, 3, 5, 8} {
			t.Run(fmt.Sprintf("%s/n=%d", name, n), func(t *testing.T) {
				got, err := sequentialMessages(v, n, rng)
				require.NoError(t, err)
				assert.InDelta(t, theories[name].at(float64(n)), got, 1e-9)
			})
		}
	}
}

func TestFmtMicros(t *testing.T) {
	tests := []struct {
		us   float64
		want string
	}{
		{0.012, "12ns"},
		{0.999, "999ns"},
		{1, "1.0µs"},
		{9.74, "9.7µs"},
		{999.9, "999.9µs"},
		{1000, "1.00ms"},
		{12345, "12.35ms"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, fmtMicros(tt.us), "%v µs", tt.us)
	}
}

func TestIsTerminal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, isTerminal(f), "a regular file is no terminal: no progress line")
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		assert.True(t, isTerminal(tty))
	}
}

// TestTimedTableInDocs checks that the timed table in
// docs/benchmarks.md is what dmutexbench -timed prints: the simulation
// is deterministic, so the comparison is exact.
func TestTimedTableInDocs(t *testing.T) {
	code, out, errOut := runCmd(t, false, "-timed", "-format", "markdown")
	require.Equal(t, 0, code, errOut)
	const open, end = "<!-- go run ./cmd/dmutexbench -timed -format markdown -->\n", "<!-- end of the timed table -->"
	for _, file := range []string{"../../docs/benchmarks.md"} {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		_, rest, ok := strings.Cut(string(b), open)
		require.True(t, ok, "%s has no timed table", file)
		table, _, ok := strings.Cut(rest, end)
		require.True(t, ok, "%s: the timed table has no end marker", file)
		assert.Equal(t, out, table, "%s: timed table differs from dmutexbench -timed; regenerate it", file)
	}
	assert.Contains(t, out, "| ricart-agrawala | 8 | 1.00T | T | 3.02T | 2T+E |")
}
