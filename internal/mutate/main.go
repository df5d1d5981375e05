// Command mutate runs a mutation pass over files of one Go package: it
// changes one comparison, one condition, one constant or drops one
// statement at a time, builds the package's tests with the mutant through
// go test -overlay (the tree is never copied or touched), runs them, and
// reports which mutants no test notices.
//
// Usage, from the module root:
//
//	go run ./internal/mutate -files centralized.go,raymond.go \
//		-run 'TestModelCheck$|TestSequentialCounts' -run . -short
//
// Each -run is a stage: a mutant is run against the first stage's tests,
// and only if they all pass against the next, so fast strong tests kill
// most mutants cheaply and the full suite sees only the hard ones. A
// stage may add options after semicolons: "REGEXP;skip=REGEXP" also skips
// tests (go test -skip), "REGEXP;noshort" runs them without -short, and
// "REGEXP;timeout=20s" gives the stage its own timeout (a runaway model
// check in a fast first stage is then cut short). A
// mutant that does not compile is skipped and not counted; one whose
// tests outlive -timeout counts as killed (TIMEOUT). Mutants are listed in
// source order, the same on every run; -only file:line (or file:line:col)
// re-checks a few, and -list prints them without running anything.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

type stages []string

func (s *stages) String() string     { return strings.Join(*s, " then ") }
func (s *stages) Set(v string) error { *s = append(*s, v); return nil }

// A result is what became of one mutant.
type result struct {
	Mutant  string  `json:"mutant"`
	File    string  `json:"file"`
	Line    int     `json:"line"`
	Col     int     `json:"col"`
	Kind    string  `json:"kind"`
	Orig    string  `json:"orig"`
	Repl    string  `json:"repl"`
	Status  string  `json:"status"` // KILLED, SURVIVED, TIMEOUT, NOCOMPILE
	Test    string  `json:"test,omitempty"`
	Seconds float64 `json:"seconds"`
}

func main() {
	var (
		files   = flag.String("files", "", "comma-separated files of the package to mutate (required)")
		pkg     = flag.String("pkg", ".", "directory of the package whose tests judge the mutants")
		short   = flag.Bool("short", false, "run the tests with -test.short")
		race    = flag.Bool("race", false, "build the tests with -race")
		timeout = flag.Duration("timeout", 3*time.Minute, "per mutant and stage: a test run longer than this counts as killed (TIMEOUT)")
		kindsF  = flag.String("kinds", strings.Join(allKinds, ","), "comma-separated mutation kinds")
		only    = flag.String("only", "", "comma-separated file:line or file:line:col: run only these mutants")
		skip    = flag.String("skipfunc", "", "regexp: leave functions whose name matches alone")
		list    = flag.Bool("list", false, "print the mutants and exit")
		jsonOut = flag.Bool("json", false, "print the results as one JSON array instead of lines")
		args    = flag.String("args", "", "extra arguments for the test binary, space-separated (e.g. -dmutex.maxstates=100000)")
		schem   = flag.Bool("schemata", false, "build each file once with all its mutants behind a runtime switch (mutants that cannot be wrapped are built alone)")
	)
	var run stages
	flag.Var(&run, "run", "test regexp of one stage, optionally followed by ;skip=REGEXP, ;noshort and ;timeout=DURATION; repeat for later stages (default: every test)")
	flag.Parse()
	if *files == "" {
		fmt.Fprintln(os.Stderr, "mutate: -files is required")
		os.Exit(2)
	}
	if len(run) == 0 {
		run = stages{"."}
	}
	kinds := map[string]bool{}
	for _, k := range strings.Split(*kindsF, ",") {
		if !isKind(k) {
			fmt.Fprintf(os.Stderr, "mutate: unknown kind %q (kinds: %s)\n", k, strings.Join(allKinds, ","))
			os.Exit(2)
		}
		kinds[k] = true
	}
	var skipRE *regexp.Regexp
	if *skip != "" {
		skipRE = regexp.MustCompile(*skip)
	}

	var ms []mutant
	srcs := map[string][]byte{}
	for _, f := range strings.Split(*files, ",") {
		path := filepath.Join(*pkg, f)
		src, err := os.ReadFile(path)
		if err != nil {
			fatal(err)
		}
		srcs[f] = src
		fm, err := generate(f, src, kinds, skipRE)
		if err != nil {
			fatal(err)
		}
		ms = append(ms, fm...)
	}
	if *only != "" {
		ms = selectOnly(ms, strings.Split(*only, ","))
	}
	if *list {
		for _, m := range ms {
			fmt.Println(m)
		}
		fmt.Printf("%d mutants\n", len(ms))
		return
	}

	dir, err := os.MkdirTemp("", "mutate")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(dir)
	r := &runner{
		dir: dir, pkg: *pkg, short: *short, race: *race, timeout: *timeout,
		stages: run, extra: strings.Fields(*args),
	}
	var results []result
	emit := func(m mutant, res result) {
		results = append(results, res)
		if !*jsonOut {
			line := fmt.Sprintf("%-60s %s", m, res.Status)
			if res.Test != "" {
				line += "(" + res.Test + ")"
			}
			fmt.Printf("%s %.1fs\n", line, res.Seconds)
		}
	}
	if *schem {
		// Each file's schema checks its own unmutated run (ID 0).
		r.log = os.Stdout
		if *jsonOut {
			r.log = os.Stderr
		}
		for _, f := range strings.Split(*files, ",") {
			var fm []mutant
			for _, m := range ms {
				if m.file == f {
					fm = append(fm, m)
				}
			}
			if len(fm) > 0 {
				r.schemata(f, srcs[f], fm, emit)
			}
		}
	} else {
		// The unmutated package must build and pass every stage, or every
		// mutant would look killed (or uncompilable).
		if res := r.try(mutant{file: ms0file(ms)}, nil); res.Status != "SURVIVED" {
			fatal(fmt.Errorf("the unmutated tests do not pass: %s(%s)", res.Status, res.Test))
		}
		for _, m := range ms {
			emit(m, r.try(m, srcs[m.file]))
		}
	}
	if *jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			fatal(err)
		}
		return
	}
	summarize(os.Stdout, results)
}

func ms0file(ms []mutant) string {
	if len(ms) == 0 {
		fatal(errors.New("no mutants"))
	}
	return ms[0].file
}

func isKind(k string) bool {
	for _, a := range allKinds {
		if a == k {
			return true
		}
	}
	return false
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "mutate:", err)
	os.Exit(1)
}

// selectOnly keeps the mutants at the given file:line or file:line:col.
func selectOnly(ms []mutant, sel []string) []mutant {
	var out []mutant
	for _, m := range ms {
		for _, s := range sel {
			if s == fmt.Sprintf("%s:%d", m.file, m.line) || s == fmt.Sprintf("%s:%d:%d", m.file, m.line, m.col) {
				out = append(out, m)
				break
			}
		}
	}
	return out
}

// summarize prints the totals per file and overall.
func summarize(w *os.File, results []result) {
	type tally struct{ total, killed, timeout, survived, nocompile int }
	per := map[string]*tally{}
	var order []string
	var all tally
	for _, r := range results {
		t := per[r.File]
		if t == nil {
			t = &tally{}
			per[r.File] = t
			order = append(order, r.File)
		}
		for _, t := range []*tally{t, &all} {
			switch r.Status {
			case "NOCOMPILE":
				t.nocompile++
				continue
			case "KILLED":
				t.killed++
			case "TIMEOUT":
				t.timeout++
			case "SURVIVED":
				t.survived++
			}
			t.total++
		}
	}
	line := func(name string, t *tally) {
		score := 100.0
		if t.total > 0 {
			score = 100 * float64(t.killed+t.timeout) / float64(t.total)
		}
		fmt.Fprintf(w, "%-20s total %4d  killed %4d  timeout %3d  survived %3d  (nocompile %3d)  score %.1f%%\n",
			name, t.total, t.killed, t.timeout, t.survived, t.nocompile, score)
	}
	for _, f := range order {
		line(f, per[f])
	}
	line("all", &all)
}

type runner struct {
	dir, pkg string
	short    bool
	race     bool
	timeout  time.Duration
	stages   []string
	extra    []string
	log      io.Writer // schemata mode: what became of each file's schema
}

// try builds the tests with m in place of its file and runs them, stage
// by stage, until one fails.
func (r *runner) try(m mutant, src []byte) (res result) {
	res = result{
		Mutant: m.String(), File: m.file, Line: m.line, Col: m.col,
		Kind: m.kind, Orig: m.orig, Repl: m.repl,
	}
	start := time.Now()
	defer func() { res.Seconds = time.Since(start).Seconds() }()

	bin := filepath.Join(r.dir, "mutant.test")
	files := map[string][]byte{}
	if src != nil {
		files[m.file] = m.apply(src)
	}
	if out, err := r.build(bin, files, false); err != nil {
		if bytes.Contains(out, []byte("go: ")) && !bytes.Contains(out, []byte(".go:")) {
			// Not a compile error of the mutant: the tool is broken.
			fatal(fmt.Errorf("go test -c: %v\n%s", err, out))
		}
		res.Status = "NOCOMPILE"
		return res
	}
	res.Status, res.Test = r.runStages(bin, nil)
	return res
}

// build builds the package's tests into bin with the files given (names
// relative to the package, contents) in place of theirs, or added to the
// package if it has no such file. allErrors asks the compiler for every
// error rather than the first ten.
func (r *runner) build(bin string, files map[string][]byte, allErrors bool) ([]byte, error) {
	os.Remove(bin)
	// No vet and no symbol tables: neither changes what the tests see,
	// and both cost time on every mutant.
	args := []string{"test", "-c", "-o", bin, "-vet=off", "-ldflags=-s -w"}
	if allErrors {
		args = append(args, "-gcflags=-e")
	}
	if len(files) > 0 {
		replace := map[string]string{}
		for name, b := range files {
			abs, err := filepath.Abs(filepath.Join(r.pkg, name))
			if err != nil {
				fatal(err)
			}
			tmp := filepath.Join(r.dir, "overlay_"+filepath.Base(name))
			if err := os.WriteFile(tmp, b, 0o644); err != nil {
				fatal(err)
			}
			replace[abs] = tmp
		}
		overlay, err := json.Marshal(map[string]map[string]string{"Replace": replace})
		if err != nil {
			fatal(err)
		}
		ofile := filepath.Join(r.dir, "overlay.json")
		if err := os.WriteFile(ofile, overlay, 0o644); err != nil {
			fatal(err)
		}
		args = append(args, "-overlay", ofile)
	}
	if r.race {
		args = append(args, "-race")
	}
	return exec.Command("go", append(args, r.pkg)...).CombinedOutput()
}

// runStages runs the stages with the test binary bin until one fails.
func (r *runner) runStages(bin string, env []string) (status, test string) {
	for _, run := range r.stages {
		if status, test := r.runStage(bin, run, env); status != "" {
			return status, test
		}
	}
	return "SURVIVED", ""
}

var failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// runStage runs the tests matching run; it returns "" if they all pass,
// else KILLED or TIMEOUT and the first failing test.
func (r *runner) runStage(bin, run string, env []string) (status, test string) {
	run, opts, _ := strings.Cut(run, ";")
	var skip string
	short, timeout := r.short, r.timeout
	for _, o := range strings.Split(opts, ";") {
		switch {
		case strings.HasPrefix(o, "skip="):
			skip = strings.TrimPrefix(o, "skip=")
		case o == "noshort":
			short = false
		case strings.HasPrefix(o, "timeout="):
			d, err := time.ParseDuration(strings.TrimPrefix(o, "timeout="))
			if err != nil {
				fatal(fmt.Errorf("stage option %q: %v", o, err))
			}
			timeout = d
		case o != "":
			fatal(fmt.Errorf("stage option %q: want skip=REGEXP, noshort or timeout=DURATION", o))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	args := []string{"-test.run", run, "-test.failfast", "-test.count=1",
		"-test.timeout", timeout.String()}
	if skip != "" {
		args = append(args, "-test.skip", skip)
	}
	if short {
		args = append(args, "-test.short")
	}
	args = append(args, r.extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = r.pkg
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.CombinedOutput()
	if err == nil {
		return "", ""
	}
	if ctx.Err() != nil || bytes.Contains(out, []byte("panic: test timed out")) {
		return "TIMEOUT", ""
	}
	if ms := failLine.FindAllSubmatch(out, -1); len(ms) > 0 {
		// The first FAIL line printed is the deepest subtest to fail.
		return "KILLED", string(ms[0][1])
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if bytes.Contains(out, []byte("panic:")) {
			return "KILLED", "panic"
		}
		if bytes.Contains(out, []byte("goleak")) || bytes.Contains(out, []byte("found unexpected goroutines")) {
			return "KILLED", "goleak"
		}
		return "KILLED", "exit " + fmt.Sprint(ee.ExitCode())
	}
	return "KILLED", err.Error()
}
