package dmutex

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/stretchr/testify/require"
)

var updateDocs = flag.Bool("update", false, "rewrite the generated tables of docs/failures.md, docs/checking.md and docs/benchmarks.md (with -dmutex.big for every row)")

// docUpdateCommand regenerates every generated table.
const docUpdateCommand = "go test -run TestDocTables -update -dmutex.big ."

// The pages under docs/ that hold the generated tables the README links
// to.
const (
	failuresPage   = "docs/failures.md"   // the failure and partition tables
	checkingPage   = "docs/checking.md"   // state counts, overtakes, the Maekawa trace, crash recovery
	benchmarksPage = "docs/benchmarks.md" // the cost notes
)

// A docAlg is one row group of the generated tables: an algorithm and its
// options.
type docAlg struct {
	name  string // as in the tables
	alg   Algorithm
	opts  []Option
	kinds []MessageKind // the kinds of message it sends, each lost in a row

	// recovery: the algorithm with WithRecovery and a perfect failure
	// detector, in the crash rows of the failure table only (a recovery
	// does nothing for a lost message or a partition).
	recovery bool
}

// recoveryDocAlgs are the failure table's rows with recovery on, each
// shown after its algorithm's rows.
func recoveryDocAlgs() map[Algorithm]docAlg {
	m := map[Algorithm]docAlg{}
	for _, a := range []docAlg{
		{name: "centralized + recovery", alg: Centralized},
		{name: "Ricart-Agrawala + recovery", alg: RicartAgrawala},
		{name: "Suzuki-Kasami + recovery", alg: SuzukiKasami},
		{name: "Agrawal-El Abbadi + recovery", alg: AgrawalElAbbadi},
	} {
		a.opts, a.recovery = []Option{WithRecovery()}, true
		m[a.alg] = a
	}
	return m
}

func docAlgs() []docAlg {
	return []docAlg{
		{"centralized", Centralized, nil, []MessageKind{KindRequest, KindGrant, KindRelease}, false},
		{"Lamport", Lamport, nil, []MessageKind{KindRequest, KindReply, KindRelease}, false},
		{"Ricart-Agrawala", RicartAgrawala, nil, []MessageKind{KindRequest, KindReply}, false},
		{"… implicit replies", RicartAgrawala, []Option{WithImplicitReplies()}, []MessageKind{KindRequest, KindReply}, false},
		{"Maekawa", Maekawa, nil, []MessageKind{KindRequest, KindLocked, KindInquire, KindFailed, KindRelinquish, KindRelease}, false},
		{"Suzuki-Kasami", SuzukiKasami, nil, []MessageKind{KindRequest, KindToken}, false},
		{"token ring", TokenRing, nil, []MessageKind{KindToken, KindRequest}, false}, // a request is the wake of a resting token
		{"Raymond", Raymond, nil, []MessageKind{KindRequest, KindPrivilege}, false},
		{"Roucairol-Carvalho", RoucairolCarvalho, nil, []MessageKind{KindRequest, KindReply}, false},
		{"Naimi-Trehel", NaimiTrehel, nil, []MessageKind{KindRequest, KindToken}, false},
		{"Lodha-Kshemkalyani", LodhaKshemkalyani, nil, []MessageKind{KindRequest, KindReply, KindRelease}, false},
		{"Ricart-Agrawala token", RicartAgrawalaToken, nil, []MessageKind{KindRequest, KindToken}, false},
		{"Singhal dynamic", SinghalDynamic, nil, []MessageKind{KindRequest, KindReply}, false},
		{"Singhal heuristic", SinghalHeuristic, nil, []MessageKind{KindRequest, KindToken}, false},
		{"Agrawal-El Abbadi", AgrawalElAbbadi, nil, []MessageKind{KindRequest, KindLocked, KindInquire, KindFailed, KindRelinquish, KindRelease}, false},
	}
}

// A failureRow is one fault injected into one algorithm's cluster, and
// what each peer's requests after it come to.
type failureRow struct {
	alg   docAlg
	fault string // for people
	cfg   CheckConfig
	// in selects the states after the fault: after the heal for a
	// partition that heals.
	healed bool
	big    bool  // computed only with -dmutex.big
	show   []int // the peers shown; nil for all
}

func (r failureRow) key() string { return r.alg.name + " | " + r.fault }

// failureRows lists the crash and loss scenarios (n = 3, one request
// per peer) and the partition ones (n = 4).
func failureRows() (small, part []failureRow) {
	recovering := recoveryDocAlgs()
	algs := docAlgs()
	for i, a := range algs {
		small = append(small, crashRows(a)...)
		base := CheckConfig{Algorithm: a.alg, N: 3, Requests: 1, Options: a.opts, Network: NetworkFIFO, MaxMemory: -1}
		for _, k := range a.kinds {
			cfg := base
			cfg.Faults = CheckFaults{Lose: true, LoseKind: k}
			label := "lost " + k.String()
			small = append(small, failureRow{alg: a, fault: label, cfg: cfg,
				big: a.alg == Lamport && k != KindRequest})
		}
		// One peer of each side asks; with four requests the spaces of
		// the permission algorithms run into millions of states.
		cfg := base
		cfg.N = 4
		cfg.RequestsPerPeer = []int{1, 0, 1, 0}
		cfg.Faults = CheckFaults{Partition: 1<<0 | 1<<1} // {0,1} | {2,3}
		part = append(part, failureRow{alg: a, fault: "for good", cfg: cfg, show: []int{0, 2}, big: a.alg == Lamport})
		cfg.Faults.Heal = true
		part = append(part, failureRow{alg: a, fault: "healed later", cfg: cfg, show: []int{0, 2}, healed: true, big: a.alg == Lamport})
		if r, ok := recovering[a.alg]; ok && (i+1 == len(algs) || algs[i+1].alg != a.alg) {
			small = append(small, crashRows(r)...) // after the algorithm's last group
		}
	}
	return small, part
}

// crashRows are a's crash rows of the failure table: an idle peer 0 (the
// coordinator, the first token holder), an idle peer 2, and the holder.
func crashRows(a docAlg) []failureRow {
	base := CheckConfig{Algorithm: a.alg, N: 3, Requests: 1, Options: a.opts, Network: NetworkFIFO, MaxMemory: -1}
	if a.recovery {
		base.Detector = Detector{Kind: DetectorPerfect}
	}
	idle := func(p int) failureRow {
		cfg := base
		cfg.RequestsPerPeer = []int{1, 1, 1}
		cfg.RequestsPerPeer[p] = 0
		cfg.Faults = CheckFaults{Crash: true, CrashOnly: 1 << p}
		return failureRow{alg: a, fault: fmt.Sprintf("P%d crashes, idle", p), cfg: cfg}
	}
	cfg := base
	cfg.Faults = CheckFaults{Crash: true, CrashInside: true}
	rows := []failureRow{idle(0), idle(2), {alg: a, fault: "the holder crashes", cfg: cfg, big: a.alg == Lamport}}
	if queuesWaiters[a.alg] && !a.recovery {
		cfg := base
		cfg.Faults = CheckFaults{Crash: true, CrashWaiting: true}
		rows = append(rows, failureRow{alg: a, fault: "a waiting peer crashes", cfg: cfg})
	}
	return rows
}

// queuesWaiters are the token algorithms that keep waiting peers in a
// queue that the token follows (Suzuki-Kasami's token queue, Raymond's
// REQUEST_Qs, Naimi-Trehel's NEXT chain, the ring order of Ricart and
// Agrawala's search): their failure rows add a crash of a waiting peer,
// which the token may be sent to, or which the queue leads through.
var queuesWaiters = map[Algorithm]bool{SuzukiKasami: true, Raymond: true, NaimiTrehel: true, RicartAgrawalaToken: true}

// failureCells computes one row: a cell per peer.
func failureCells(t testing.TB, r failureRow) []string {
	c, err := newChecker(r.cfg)
	require.NoError(t, err, r.key())
	require.NoError(t, c.explore(context.Background()), r.key())
	cells := make([]string, r.cfg.N)
	if !c.res.Safe {
		for i := range cells {
			cells[i] = "unsafe"
		}
		return cells
	}
	require.True(t, c.res.Complete, "%s: incomplete after %d states", r.key(), c.res.States)
	flag := stFaulted
	if r.healed {
		flag = stHealed
	}
	in := func(s int32) bool { return c.info[s].flags&flag != 0 }
	struck := false
	for s := range int32(len(c.info)) {
		struck = struck || in(s)
	}
	if !struck {
		for i := range cells {
			cells[i] = "not sent"
		}
		return cells
	}
	fresh, all := c.afterFault(in)
	for p := range cells {
		switch {
		case r.cfg.Faults.Crash && r.cfg.Faults.CrashOnly == 1<<p:
			cells[p] = "crashed"
		case fresh[p] == all[p]:
			cells[p] = fresh[p].String()
		default:
			cells[p] = fresh[p].String() + " / " + all[p].String()
		}
	}
	return cells
}

// failureTable renders rows as a Markdown table (md) or as text for
// doc.go. old holds the rows of the current table by key, used for the
// big rows when they are not computed.
func failureTable(t testing.TB, rows []failureRow, md bool, old map[string]string, big bool) string {
	show := rows[0].show
	if show == nil {
		for p := range rows[0].cfg.N {
			show = append(show, p)
		}
	}
	n := len(show)
	head := []string{"algorithm", "fault"}
	for _, p := range show {
		head = append(head, fmt.Sprintf("P%d", p))
	}
	var lines [][]string
	for _, r := range rows {
		var cells []string
		if r.big && !big {
			if line, ok := old[r.key()]; ok {
				lines = append(lines, strings.Split(line, "\x00"))
				continue
			}
			cells = make([]string, n)
			for i := range cells {
				cells[i] = "(not computed)"
			}
		} else {
			all := failureCells(t, r)
			for _, p := range show {
				cells = append(cells, all[p])
			}
		}
		lines = append(lines, append([]string{r.alg.name, r.fault}, cells...))
	}
	var b bytes.Buffer
	if md {
		b.WriteString("| " + strings.Join(head, " | ") + " |\n")
		b.WriteString(strings.Repeat("| --- ", len(head)) + "|\n")
		for _, l := range lines {
			b.WriteString("| " + strings.Join(l, " | ") + " |\n")
		}
		return b.String()
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, l := range lines {
		fmt.Fprintln(tw, strings.Join(l, "\t"))
	}
	require.NoError(t, tw.Flush())
	return b.String()
}

// oldRows reads the rows of a generated table back, by key.
func oldRows(section string, md bool) map[string]string {
	rows := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		var cells []string
		if md {
			if !strings.HasPrefix(line, "| ") {
				continue
			}
			cells = strings.Split(strings.Trim(line, "| "), " | ")
		} else {
			cells = strings.Fields(line) // not used for doc.go: see docText
		}
		if len(cells) > 2 {
			rows[cells[0]+" | "+cells[1]] = strings.Join(cells, "\x00")
		}
	}
	return rows
}

// section returns the text of file between the markers of name.
func section(t testing.TB, text, begin, end string) (before, body, after string) {
	i := strings.Index(text, begin)
	j := strings.Index(text, end)
	require.True(t, i >= 0 && j > i, "markers %q and %q not found", begin, end)
	i += len(begin)
	return text[:i], text[i:j], text[j:]
}

// docFile is one file with generated sections.
type docFile struct {
	path string
	text string
	orig string
}

func readDoc(t testing.TB, path string) *docFile {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return &docFile{path: path, text: string(b), orig: string(b)}
}

// replace sets the section between the markers of name to body, and
// returns the old body.
func (f *docFile) replace(t testing.TB, begin, end, body string) string {
	before, old, after := section(t, f.text, begin, end)
	f.text = before + body + after
	return old
}

func (f *docFile) finish(t *testing.T) {
	if f.text == f.orig {
		return
	}
	if *updateDocs {
		require.NoError(t, os.WriteFile(f.path, []byte(f.text), 0o644))
		return
	}
	t.Errorf("%s: the generated tables differ from what the code computes now; run\n\t%s\n%s",
		f.path, docUpdateCommand, firstDiff(f.orig, f.text))
}

// firstDiff shows the first line that differs.
func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return fmt.Sprintf("line %d:\n\thave %s\n\twant %s", i+1, al[i], bl[i])
		}
	}
	return fmt.Sprintf("lengths differ: %d and %d lines", len(al), len(bl))
}

// TestDocTables computes the generated tables of the pages under docs/
// and fails when the files differ; -update rewrites them. Without
// -dmutex.big, the rows marked big (Lamport's, and the partitions of the
// algorithms whose n = 4 spaces are large) are kept as they are.
func TestDocTables(t *testing.T) {
	if testing.Short() {
		t.Skip("model checks; not in -short")
	}
	skipRaceLight(t, "the failure tables' searches, on one goroutine (10 s under -race)")
	if !*writeReadme && !*updateDocs { // a rewrite of docs/checking.md runs alone
		t.Parallel() // searches on the test's goroutine: beside the other parallel tests
	}
	failures := readDoc(t, failuresPage)
	checking := readDoc(t, checkingPage)
	benchmarks := readDoc(t, benchmarksPage)
	small, part := failureRows()
	for _, tb := range []struct {
		name string
		rows []failureRow
	}{
		{"failure-table", small},
		{"partition-table", part},
	} {
		begin, end := "<!-- BEGIN "+tb.name+" -->\n", "<!-- END "+tb.name+" -->"
		_, oldMD, _ := section(t, failures.text, begin, end)
		old := oldRows(oldMD, true)
		failures.replace(t, begin, end, failureTable(t, tb.rows, true, old, *bigChecks))
	}
	if *updateDocs {
		old := readStateTable(t, checking.text)
		checking.replace(t, "<!-- BEGIN state-table -->\n", "<!-- END state-table -->", stateTable(t, old))
		oldOver := readOvertakeTable(t, checking.text)
		checking.replace(t, "<!-- BEGIN overtakes-n4 -->\n", "<!-- END overtakes-n4 -->", overtakeTable(t, oldOver, *bigChecks))
	}
	benchmarks.replace(t, "<!-- BEGIN cost-notes -->\n", "<!-- END cost-notes -->", computeDocNumbers(t).costNotes())
	_, oldTrace, _ := section(t, checking.text, "<!-- BEGIN maekawa-trace -->\n", "<!-- END maekawa-trace -->")
	checking.replace(t, "<!-- BEGIN maekawa-trace -->\n", "<!-- END maekawa-trace -->", maekawaTrace(t, oldTrace, *bigChecks))
	failures.finish(t)
	checking.finish(t)
	benchmarks.finish(t)
}

// maekawaTrace is docs/checking.md's trace of the textbook FAILED rule's
// deadlock with four peers: found by Check with -dmutex.big (283k states,
// too slow under -race), otherwise the page's trace replayed step by
// step through the variant's world, which must end in that deadlock.
func maekawaTrace(t testing.TB, old string, big bool) string {
	const variant = "maekawa-textbook-failed"
	var lines []string
	if big || strings.TrimSpace(old) == "" {
		res, err := Check(context.Background(), CheckConfig{Variant: variant, StopAtDeadlock: true})
		require.NoError(t, err)
		require.NotNil(t, res.Violation)
		require.Equal(t, "deadlock", res.Violation.Property)
		lines = res.Violation.Trace
	} else {
		for _, l := range strings.Split(strings.TrimSpace(old), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "`") {
				_, step, _ := strings.Cut(l, " ")
				lines = append(lines, step)
			}
		}
	}
	c, err := newChecker(CheckConfig{Variant: variant})
	require.NoError(t, err)
	w, err := c.startWorld(true)
	require.NoError(t, err)
	require.Equal(t, 4, w.N(), "the textbook rule deadlocks with four peers")
	for i, line := range lines {
		found := false
		for _, tr := range w.Transitions() {
			next := w.Clone()
			if st, err := next.Apply(tr); err == nil && st.String() == line {
				w, found = next, true
				break
			}
		}
		require.True(t, found, "step %d, %q, does not replay", i+1, line)
	}
	require.True(t, w.quiet(), "the trace ends with nothing left to do")
	require.ErrorIs(t, w.finalCheck(), ErrViolation)
	require.Contains(t, w.Err().Error(), "deadlock")
	var b strings.Builder
	b.WriteString("```\n")
	for i, l := range lines {
		fmt.Fprintf(&b, "%3d %s\n", i+1, l)
	}
	b.WriteString("```\n")
	return b.String()
}

// TestCheckPartitionAndHoldFaults pins the faults the failure table
// needs: a partition that may heal, and a crash inside only.
func TestCheckPartitionAndHoldFaults(t *testing.T) {
	ctx := context.Background()
	for _, f := range []CheckFaults{
		{Heal: true},
		{Partition: 1 << 3},
		{Partition: 1 << 63},
	} {
		_, err := Check(ctx, CheckConfig{Algorithm: Centralized, N: 3, Faults: f})
		require.ErrorIs(t, err, ErrInvalidConfig, "%+v", f)
	}
	cfg := CheckConfig{Algorithm: Centralized, N: 3, Faults: CheckFaults{Partition: 1 << 0, Heal: true}}
	res, err := Check(ctx, cfg)
	require.NoError(t, err)
	require.Equal(t, Holds, res.Safe)
	require.NotZero(t, res.Blocked, "a partition that never heals leaves a request stuck")
	require.Equal(t, "partition {0}|rest then heal", res.Faults)

	c, err := newChecker(cfg)
	require.NoError(t, err)
	w, err := c.startWorld(true)
	require.NoError(t, err)
	_, ok := w.Find("h")
	require.False(t, ok, "no heal before the partition")
	p, ok := w.Find("p")
	require.True(t, ok)
	st, err := w.Apply(p)
	require.NoError(t, err)
	require.Equal(t, "the network splits", st.String())
	_, ok = w.Find("p")
	require.False(t, ok, "one partition only")
	h, ok := w.Find("h")
	require.True(t, ok)
	_, err = w.Apply(h)
	require.NoError(t, err)
	require.True(t, w.faulted())

	// A crash inside only: no crash is enabled while nobody is inside.
	c, err = newChecker(CheckConfig{Algorithm: Centralized, N: 2, Faults: CheckFaults{Crash: true, CrashInside: true}})
	require.NoError(t, err)
	w, err = c.startWorld(true)
	require.NoError(t, err)
	for _, tr := range w.Transitions() {
		require.NotEqual(t, TransCrash, tr.Kind)
	}
	inside := func() int {
		for p := range 2 {
			if w.Peer(p).Inside {
				return p
			}
		}
		return -1
	}
	for inside() < 0 {
		trs := w.Transitions()
		require.NotEmpty(t, trs)
		_, err = w.Apply(trs[len(trs)-1]) // deliveries come last
		require.NoError(t, err)
	}
	_, ok = w.Find(fmt.Sprintf("c%d", inside()))
	require.True(t, ok, "the holder may crash")
}
