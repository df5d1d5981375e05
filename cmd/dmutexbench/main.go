// Command dmutexbench measures what each distributed mutual exclusion
// algorithm of package dmutex costs, beside what the theory says: messages
// per critical-section entry, one entry at a time and with k contenders;
// the p50 and p99 latency of Lock under each load; entries per second at
// the heaviest load; and the failure each algorithm is weakest against.
//
// With no flags it runs every algorithm at n = 8 peers, under
// light load (one entry at a time) and full load (every peer contends), for
// a few seconds in all, and prints a report that fits 120 columns: a
// table, a legend, and conclusions computed from the numbers (which
// algorithm sends the fewest and the most messages per entry, alone and
// with every peer asking, and which made the most entries per second).
//
// Usage:
//
//	dmutexbench [flags]
//
// The flags are:
//
//	-alg list       algorithms to run (default: all), such as
//	                ricart-agrawala,ricart-agrawala-implicit,centralized
//	-n list         cluster sizes (default 8)
//	-load list      loads: light (one entry at a time), full (every peer
//	                contends) or a number of contenders, at most the
//	                largest n; a smaller cluster contends with all its
//	                peers (default light,full)
//	-duration d     total measuring time, shared by all runs (default 3s)
//	-format f       report, table (the wide table, with the formulas, the
//	                fairness and each algorithm's weakness), markdown,
//	                csv or json (default report)
//	-seed s         seed for the choice of peers (default 1)
//	-chart file     also draw messages per entry against n and latency
//	                against load, as PNG or SVG by the file's extension
//	-timed          print the timed table instead: synchronization delay,
//	                response time (request to exit, E included) and
//	                throughput in units of T, the message delay, at light
//	                and heavy load, beside the textbook's values, from the
//	                deterministic virtual-time simulation dmutex.RunTimed
//	                (every delay T, every critical section E = T); -load,
//	                -duration and -chart do not apply
//	-recovery       print the cost of crash recovery instead, for the
//	                algorithms with one (dmutex.WithRecovery): the time
//	                and the messages from a crash (of the holder, or of
//	                a waiting peer) to the next entry by a survivor, in
//	                virtual time (dmutex.MeasureRecovery: saturation,
//	                every delay T, E = T, the detector suspecting the
//	                crashed peer -detect T after the crash, default 2)
//	                and at run time (an in-memory cluster, one request
//	                at a time, -unreachable-after as the detector's
//	                bound, default 20ms); n from 2 to 8
//
// Latency comes from real goroutine clusters over the in-memory transport.
// Messages are counted at the transport; one entry at a time the count is
// exact. While it runs, it says on standard error what it measures and
// shows its progress: on one line rewritten in place on a terminal, else
// a line per step when -duration is longer than a second.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, isTerminal(os.Stderr)))
}

// isTerminal reports whether f is a character device, such as a terminal.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// options are the parsed command line.
type options struct {
	variants []variant
	ns       []int
	loads    []load
	duration time.Duration
	format   string
	seed     uint64
	chart    string
	timed    bool

	explicitAlgs     bool          // -alg was given
	recovery         bool          // -recovery
	detect           float64       // -detect, in T
	unreachableAfter time.Duration // -unreachable-after
}

var formats = []string{"report", "table", "markdown", "csv", "json"}

// errUsage marks a bad command line; run answers it with exit status 2.
var errUsage = errors.New("usage")

// parseFlags parses args. A bad flag or value returns an error wrapping
// errUsage, after the usage message has been written to stderr.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("dmutexbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	algs := fs.String("alg", "", "comma-separated `algorithms` to run (default: every one)")
	ns := fs.String("n", "8", "comma-separated cluster `sizes`")
	loads := fs.String("load", "light,full", "comma-separated `loads`: light, full, or a number of contenders, at most the largest n (smaller clusters contend with all their peers)")
	duration := fs.Duration("duration", 3*time.Second, "total measuring `time`, shared by all runs")
	format := fs.String("format", "report", "output `format`: "+strings.Join(formats, ", ")+
		" (report: a table that fits 120 columns, a legend and conclusions; table: the wide table, with formulas, fairness and weaknesses)")
	seed := fs.Uint64("seed", 1, "`seed` for the choice of peers")
	chart := fs.String("chart", "", "also draw a chart to `file` (.png or .svg)")
	recovery := fs.Bool("recovery", false, "print the cost of crash recovery instead: time and messages from a crash to the next entry by a survivor, in virtual time and at run time, for the algorithms with a recovery")
	detect := fs.Float64("detect", 2, "with -recovery, how long the simulated failure detector takes to suspect a crashed peer, in `T`")
	unreachableAfter := fs.Duration("unreachable-after", 20*time.Millisecond, "with -recovery, WithUnreachableAfter of the run-time clusters")
	timed := fs.Bool("timed", false, "print the timed table instead: sync delay, response time and throughput in units of T, from the deterministic virtual-time simulation")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: dmutexbench [flags]\n\n"+
			"Measures messages per entry and Lock latency for each dmutex algorithm.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	bad := func(format string, a ...any) (*options, error) {
		fmt.Fprintf(stderr, "dmutexbench: "+format+"\n", a...)
		fs.Usage()
		return nil, fmt.Errorf("%w: "+format, append([]any{errUsage}, a...)...)
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q", fs.Arg(0))
	}
	o := &options{duration: *duration, format: *format, seed: *seed, chart: *chart, timed: *timed,
		explicitAlgs: *algs != "", recovery: *recovery, detect: *detect, unreachableAfter: *unreachableAfter}
	if o.timed && o.recovery {
		return bad("-timed and -recovery are exclusive")
	}
	if !(o.detect >= 0 && o.detect < 1e9) || o.unreachableAfter <= 0 {
		return bad("-detect %v must be a duration in T from 0, and -unreachable-after %v positive", o.detect, o.unreachableAfter)
	}
	if *algs == "" {
		o.variants = allVariants()
	} else {
		for _, s := range strings.Split(*algs, ",") {
			v, err := parseVariant(strings.TrimSpace(s))
			if err != nil {
				return bad("-alg: %v", err)
			}
			o.variants = append(o.variants, v)
		}
	}
	for _, s := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 4096 {
			return bad("-n: %q is not a cluster size from 1 to 4096", s)
		}
		o.ns = append(o.ns, n)
	}
	for _, s := range strings.Split(*loads, ",") {
		switch s = strings.TrimSpace(s); s {
		case "light":
			o.loads = append(o.loads, 1)
		case "full":
			o.loads = append(o.loads, fullLoad)
		default:
			k, err := strconv.Atoi(s)
			if err != nil || k < 1 {
				return bad("-load: %q is not light, full or a number of contenders", s)
			}
			o.loads = append(o.loads, load(k))
		}
	}
	if o.duration <= 0 {
		return bad("-duration: %v is not positive", o.duration)
	}
	if !slices.Contains(formats, o.format) {
		return bad("-format: %q is not one of %s", o.format, strings.Join(formats, ", "))
	}
	if o.chart != "" {
		if ext := strings.ToLower(filepath.Ext(o.chart)); ext != ".png" && ext != ".svg" {
			return bad("-chart: %q does not end in .png or .svg", o.chart)
		}
	}
	// A load above a smaller size runs there with every peer; above the
	// largest it would never be measured as asked.
	largest := slices.Max(o.ns)
	for _, l := range o.loads {
		if l != fullLoad && int(l) > largest {
			return bad("-load: %d contenders is more than the n = %d peers of the largest cluster", int(l), largest)
		}
	}
	return o, nil
}

// checkWritable reports whether file can be written, creating it and
// removing it again if it did not exist, so that a chart that cannot be
// saved is known before minutes of measuring, not after.
func checkWritable(file string) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("chart: %w", err)
	}
	f, err = os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return errors.Join(f.Close(), os.Remove(file))
}

// run is the whole command: it parses args, measures, and writes the
// result to stdout. It returns the exit status: 0, 1 when a measurement or
// the chart failed, 2 for a bad command line. Progress goes to stderr: on
// one line rewritten in place when it is a terminal, else, for runs
// longer than a second, a line per step.
func run(args []string, stdout, stderr io.Writer, terminal bool) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if o.recovery {
		if o.chart != "" {
			fmt.Fprintln(stderr, "dmutexbench: -chart does not apply to -recovery")
			return 2
		}
		rows, err := measureRecovery(o)
		if err == nil {
			err = writeRecovery(stdout, o, rows)
		}
		if err != nil {
			fmt.Fprintf(stderr, "dmutexbench: %v\n", err)
			return 1
		}
		return 0
	}
	if o.timed {
		if o.chart != "" {
			fmt.Fprintln(stderr, "dmutexbench: -chart does not apply to -timed")
			return 2
		}
		rows, err := measureTimed(o)
		if err == nil {
			err = writeTimed(stdout, o, rows)
		}
		if err != nil {
			fmt.Fprintf(stderr, "dmutexbench: %v\n", err)
			return 1
		}
		return 0
	}
	if o.chart != "" {
		if err := checkWritable(o.chart); err != nil {
			fmt.Fprintf(stderr, "dmutexbench: %v\n", err)
			return 1
		}
	}
	var p *progressLine
	switch {
	case terminal:
		p = &progressLine{w: stderr, rewrite: true}
	case o.duration > time.Second:
		p = &progressLine{w: stderr}
	}
	p.say("measuring %d %s at n = %s under %s load, for about %v (-duration)",
		len(o.variants), plural(len(o.variants), "algorithm"), joinInts(o.ns), joinLoads(o.loads), o.duration)
	rows, err := measure(o, p)
	if err != nil {
		fmt.Fprintf(stderr, "dmutexbench: %v\n", err)
		return 1
	}
	if err := write(stdout, o, rows); err != nil {
		fmt.Fprintf(stderr, "dmutexbench: %v\n", err)
		return 1
	}
	if o.chart != "" {
		if err := drawChart(o.chart, rows, o.loads); err != nil {
			fmt.Fprintf(stderr, "dmutexbench: %v\n", err)
			return 1
		}
	}
	return 0
}

// A progressLine shows which step the command is at: on a terminal it
// rewrites one line, elsewhere it writes a line per step. A nil
// progressLine shows nothing.
type progressLine struct {
	w       io.Writer
	rewrite bool
}

func (p *progressLine) show(format string, a ...any) {
	switch {
	case p == nil:
	case p.rewrite:
		fmt.Fprintf(p.w, "\r\033[K"+format, a...)
	default:
		fmt.Fprintf(p.w, "dmutexbench: "+format+"\n", a...)
	}
}

// say writes a line of its own, before any progress line.
func (p *progressLine) say(format string, a ...any) {
	if p != nil {
		fmt.Fprintf(p.w, "dmutexbench: "+format+"\n", a...)
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

func joinLoads(ls []load) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = l.String()
	}
	if len(s) > 1 {
		return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
	}
	return s[0]
}

func (p *progressLine) clear() {
	if p != nil && p.rewrite {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
