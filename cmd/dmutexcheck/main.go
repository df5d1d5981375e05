// Command dmutexcheck model-checks one configuration of a dmutex
// algorithm, or one of the textbooks' broken variants: it explores every
// reachable state and reports safety, deadlock freedom, starvation
// freedom under weak fairness and the largest number of overtakes, with
// a shortest counterexample when a promise breaks.
//
//	dmutexcheck -alg ricart-agrawala -n 3 -requests 2
//	dmutexcheck -alg suzuki-kasami -n 3 -tries 1
//	dmutexcheck -variant maekawa-textbook-failed
//	dmutexcheck -list
//	dmutexcheck -alg ricart-agrawala -crash any -detector perfect -recovery
//	dmutexcheck -alg suzuki-kasami -n 4 -partition 0,1 -heal
//	dmutexcheck -alg lamport -requests 2 -por -stamp-gaps -max-states -1
//
// The faults, each at most once at any point of a run: -crash any or
// -crash ID (a peer crashes for good; -crash-inside only while it is
// inside, -crash-waiting only while its request waits, and each alone
// means any peer), -lose any or -lose KIND (a message
// in flight is lost), -partition 0,1 (those peers are cut off from the
// others, and every message between the two sides is lost; -heal lets the
// partition end once, later).
//
// -tries puts TryLock calls in the mix, beside the requests. -detector
// perfect|imperfect models a failure detector whose suspicions are
// transitions (an imperfect one may suspect a live peer, -false times at
// most), and -recovery turns on the algorithm's crash recovery
// (dmutex.WithRecovery). -fenced adds a store that checks fences, which
// every holder writes to twice, and reports fenced safety (the writes of
// two holds never interleave in what the store accepts); two holders
// inside at once are then reported but do not end the search.
//
// For the biggest spaces, -safety-only checks safety and deadlock depth
// first, keeping 16 bytes per state instead of the graph; -por (which
// implies it) adds a partial-order reduction, exploring only one set of
// peers' steps where the others cannot interfere; -stamp-gaps merges the
// states of Lamport's algorithm that differ only in gaps between stamps
// too wide for the rest of the run to bridge (dmutex.CheckConfig has the
// details of each).
//
// -max-states and -max-memory bound a search: by default it stops after
// dmutex.DefaultMaxStates states or once it holds dmutex.DefaultMaxMemory
// bytes (its table of hashes, its graph and the worlds waiting to be
// explored, as it counts them; the process may reach about twice that).
//
// Each property reads yes, no or undecided (true, false or null in
// -json): undecided when the search stopped before it could decide it (at
// the state limit, at an earlier violation, or at Ctrl-C), or when the
// mode does not check it. A search stopped by Ctrl-C prints what it found
// so far; a second Ctrl-C ends the command at once.
//
// Exit codes:
//
//	0  every property checked holds: the search saw every reachable state
//	1  refuted: a violation was found (its counterexample is printed)
//	2  bad usage
//	3  undecided: the search stopped (-max-states, -max-memory, or Ctrl-C) before it
//	   saw every state, with no violation so far
//	4  the check could not run (an error other than bad usage)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/dmutex/dmutex"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C ends the command at once
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// The exit codes.
const (
	exitHolds     = 0
	exitRefuted   = 1
	exitUsage     = 2
	exitUndecided = 3
	exitError     = 4
)

const usage = `Usage: dmutexcheck [flags]

Explores every reachable state of a small cluster and checks its promises.
A variant (-variant, see -list) implies its algorithm and the smallest
configuration that refutes it; flags given explicitly override it. Each
property reads yes, no or undecided (the search stopped before deciding it).

Exit codes: 0 every property checked holds, 1 a violation was found,
2 bad usage, 3 undecided (a state or memory limit, or Ctrl-C, stopped the search
with no violation so far), 4 the check could not run.

Flags:
`

// run is the command, with its exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dmutexcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	alg := fs.String("alg", "", "algorithm: "+algNames())
	variant := fs.String("variant", "", "a broken variant from -list (implies -alg)")
	n := fs.Int("n", 0, "number of peers (default 3, or the variant's)")
	requests := fs.String("requests", "", "requests per peer (default 1, or the variant's); \"unlimited\" for no end")
	tries := fs.String("tries", "", "tries (TryLock) per peer beside the requests (default 0); \"unlimited\" for no end")
	netFlag := fs.String("net", "", "network: fifo or unordered (default fifo, or the variant's)")
	maxStates := fs.Int("max-states", dmutex.DefaultMaxStates, "stop after this many states; -1 for no limit")
	maxMemory := fs.Int64("max-memory", dmutex.DefaultMaxMemory>>20, "stop once the search holds this many MiB (its hashes, graph and waiting worlds; the heap may reach about twice that); -1 for no limit")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	list := fs.Bool("list", false, "list the variants, one per line: name, a space, what it teaches")
	implicit := fs.Bool("implicit", false, "Ricart-Agrawala with implicit replies")
	sets := fs.String("sets", "", "Maekawa voting sets, such as \"0,1/1,2/0,2\" (default: the grid)")
	tree := fs.String("tree", "", "Raymond's tree as each peer's parent, -1 for the root, such as \"-1,0,0\"")
	crash := fs.String("crash", "", "one crash at any point: \"any\" peer, or a peer id")
	crashInside := fs.Bool("crash-inside", false, "the crash strikes only a peer inside the critical section (with -crash; alone, it means -crash any)")
	crashWaiting := fs.Bool("crash-waiting", false, "the crash strikes only a peer whose request waits (with -crash; alone, it means -crash any)")
	partition := fs.String("partition", "", "one partition at any point, cutting off these peers from the rest, such as \"0,1\"")
	heal := fs.Bool("heal", false, "with -partition: the partition may heal once, at any later point")
	lose := fs.String("lose", "", "one lost message at any point: \"any\" kind, or a kind such as reply")
	detector := fs.String("detector", "", "failure detector: \"perfect\" (suspects crashed peers only) or \"imperfect\" (see -false)")
	falseSus := fs.Int("false", 1, "with -detector imperfect: suspicions of live peers allowed in a run")
	recovery := fs.Bool("recovery", false, "turn on the algorithm's crash recovery (WithRecovery)")
	fenced := fs.Bool("fenced", false, "add a store that checks fences, which every holder writes to twice, and check fenced safety (CheckConfig.Fenced)")
	safetyOnly := fs.Bool("safety-only", false, "check safety and deadlock only, depth first, without the graph liveness needs (for the biggest spaces)")
	por := fs.Bool("por", false, "partial-order reduction: explore one set of peers' steps where the others cannot interfere (implies -safety-only; FIFO, no faults)")
	stampGaps := fs.Bool("stamp-gaps", false, "merge Lamport states that differ only in gaps between stamps wider than the rest of the run can bridge")
	fpBits := fs.Int("fingerprint", 128, "bits of the hash kept for each state: 128, or 64 for half the memory at a higher chance of a collision (printed)")
	workers := fs.Int("workers", 0, "goroutines that search, with the same result for any number: with -safety-only depth first on one shared table, an idle worker handed a busy one's lowest frame (about the CPU time a state of one goroutine; docs/checking.md gives the speed measured); with the graph over FIFO queues the same, each worker also recording the edges it takes, and liveness's passes over the peers at once; over a bag breadth first, no faster than one; 0 for one goroutine (CheckConfig.Workers)")
	onTheFly := fs.Bool("on-the-fly", false, "decide starvation and the waiting bound during the search, by Tarjan's algorithm over the states as they are found, keeping per state its hash, a bit and a byte a peer instead of the graph (about 20 bytes a state counted instead of 85, half the peak memory, for the algorithms here); the same verdicts and bounds, on one goroutine; at a counterexample it searches again with the graph (CheckConfig.OnTheFly)")
	spillDir := fs.String("spill-dir", "", "with -safety-only: once the table of hashes fills half of -max-memory, merge it into a sorted file in this directory (8 bytes a state with -fingerprint 64, 16 with 128; removed at the end) and go on: the same states, past memory (CheckConfig.SpillDir)")
	mermaid := fs.Bool("mermaid", false, "also print the counterexample as a Mermaid diagram")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitHolds
		}
		return exitUsage
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "dmutexcheck: "+format+"\n", a...)
		fs.Usage()
		return exitUsage
	}
	set := map[string]bool{} // the flags given
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if fs.NArg() > 0 {
		return bad("unexpected argument %q", fs.Arg(0))
	}
	if *list {
		for _, v := range dmutex.Variants() {
			fmt.Fprintf(stdout, "%s %s\n", v.Name, v.Teaches)
		}
		return 0
	}
	cfg := dmutex.CheckConfig{Variant: *variant, N: *n, MaxStates: *maxStates, SafetyOnly: *safetyOnly || *por, PartialOrder: *por, StampGaps: *stampGaps, Fenced: *fenced, Fingerprint: *fpBits, Workers: *workers, SpillDir: *spillDir, OnTheFly: *onTheFly}
	if *maxStates == 0 {
		return bad("-max-states: 0 is not a limit (use -1 for none)")
	}
	switch {
	case *maxMemory == 0 || *maxMemory < -1:
		return bad("-max-memory: %d is not a limit in MiB (use -1 for none)", *maxMemory)
	case *maxMemory > 0:
		cfg.MaxMemory = *maxMemory << 20
	default:
		cfg.MaxMemory = -1
	}
	switch {
	case *variant != "":
		v, err := dmutex.LookupVariant(*variant)
		if err != nil {
			return bad("-variant: %v", err)
		}
		if *alg != "" {
			a, err := dmutex.ParseAlgorithm(*alg)
			if err != nil || a != v.Algorithm {
				return bad("-alg %s: variant %s is of %v", *alg, v.Name, v.Algorithm)
			}
		}
		cfg.Algorithm = v.Algorithm
		cfg.StopAtDeadlock = true
	case *alg == "":
		return bad("-alg or -variant is required")
	default:
		a, err := dmutex.ParseAlgorithm(*alg)
		if err != nil {
			return bad("-alg: %v", err)
		}
		cfg.Algorithm = a
	}
	if *n < 0 {
		return bad("-n: %d is not a number of peers", *n)
	}
	switch r := strings.ToLower(*requests); r {
	case "":
	case "unlimited":
		cfg.Requests = dmutex.Unlimited
	default:
		k, err := strconv.Atoi(r)
		if err != nil || k < 1 {
			return bad("-requests: %q is not a positive number or unlimited", *requests)
		}
		cfg.Requests = k
	}
	switch r := strings.ToLower(*tries); r {
	case "":
	case "unlimited":
		cfg.Tries = dmutex.Unlimited
	default:
		k, err := strconv.Atoi(r)
		if err != nil || k < 0 {
			return bad("-tries: %q is not a number or unlimited", *tries)
		}
		cfg.Tries = k
	}
	if *netFlag != "" {
		nw, err := dmutex.ParseNetwork(*netFlag)
		if err != nil {
			return bad("-net: %q is not fifo or unordered", *netFlag)
		}
		cfg.Network = nw
	}
	if *implicit {
		cfg.Options = append(cfg.Options, dmutex.WithImplicitReplies())
	}
	if *sets != "" {
		vs, err := parseSets(*sets)
		if err != nil {
			return bad("-sets: %v", err)
		}
		cfg.Options = append(cfg.Options, dmutex.WithVotingSets(vs))
	}
	if *tree != "" {
		parents, err := parseInts(*tree)
		if err != nil {
			return bad("-tree: %v", err)
		}
		cfg.Options = append(cfg.Options, dmutex.WithTree(parents))
	}
	switch c := strings.ToLower(*crash); c {
	case "":
	case "any":
		cfg.Faults.Crash = true
	default:
		p, err := strconv.Atoi(c)
		if err != nil || p < 0 || p >= 64 {
			return bad("-crash: %q is not any or a peer id", *crash)
		}
		cfg.Faults.Crash, cfg.Faults.CrashOnly = true, 1<<p
	}
	if *crashInside {
		cfg.Faults.Crash, cfg.Faults.CrashInside = true, true
	}
	if *crashWaiting {
		cfg.Faults.Crash, cfg.Faults.CrashWaiting = true, true
	}
	if *partition != "" {
		side, err := parseInts(*partition)
		if err != nil {
			return bad("-partition: %v", err)
		}
		for _, p := range side {
			if p < 0 || p >= 64 {
				return bad("-partition: peer %d is not a peer id", p)
			}
			if cfg.Faults.Partition&(1<<uint(p)) != 0 {
				return bad("-partition: peer %d named twice", p)
			}
			cfg.Faults.Partition |= 1 << uint(p)
		}
	}
	if *heal {
		if *partition == "" {
			return bad("-heal: no -partition to heal")
		}
		cfg.Faults.Heal = true
	}
	switch l := strings.ToLower(*lose); l {
	case "":
	case "any":
		cfg.Faults.Lose = true
	default:
		k, ok := parseKind(l)
		if !ok {
			return bad("-lose: %q is not any or a message kind", *lose)
		}
		cfg.Faults.Lose, cfg.Faults.LoseKind = true, k
	}
	switch d := strings.ToLower(*detector); d {
	case "":
	case "perfect":
		cfg.Detector.Kind = dmutex.DetectorPerfect
	case "imperfect":
		cfg.Detector = dmutex.Detector{Kind: dmutex.DetectorImperfect, FalseSuspicions: *falseSus}
	default:
		return bad("-detector: %q is not perfect or imperfect", *detector)
	}
	if set["false"] && cfg.Detector.Kind != dmutex.DetectorImperfect {
		return bad("-false %d needs -detector imperfect: only an imperfect detector suspects live peers", *falseSus)
	}
	if *recovery {
		cfg.Options = append(cfg.Options, dmutex.WithRecovery())
	}
	cfg.Progress = func(p dmutex.CheckProgress) {
		fmt.Fprintf(stderr, "dmutexcheck: %d states, %d transitions, %.0fs (%.0f states/s), %d MiB held\n",
			p.States, p.Transitions, p.Elapsed.Seconds(), float64(p.States)/p.Elapsed.Seconds(), p.Memory>>20)
	}
	res, err := dmutex.Check(ctx, cfg)
	switch {
	case errors.Is(err, dmutex.ErrInvalidConfig):
		return bad("%v", err)
	case err != nil && ctx.Err() == nil:
		fmt.Fprintf(stderr, "dmutexcheck: %v\n", err)
		return exitError
	}
	// Past here err, if any, is the context's: res is what the search
	// found before it ended.
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(stderr, "dmutexcheck: %v\n", err)
			return exitError
		}
	} else {
		writeText(stdout, res, *mermaid)
	}
	switch {
	case res.Violation != nil:
		return exitRefuted
	case res.Stopped == dmutex.StoppedByContext:
		fmt.Fprintf(stderr, "dmutexcheck: interrupted at %d states with no violation so far\n", res.States)
		return exitUndecided
	case res.Stopped == dmutex.StoppedAtMemoryLimit:
		fmt.Fprintf(stderr, "dmutexcheck: stopped at %d states (%s) with no violation so far; raise -max-memory, or try -safety-only\n", res.States, res.Stopped)
		return exitUndecided
	case !res.Complete:
		fmt.Fprintf(stderr, "dmutexcheck: stopped at %d states (%s) with no violation so far; raise -max-states\n", res.States, res.Stopped)
		return exitUndecided
	}
	return exitHolds
}

func algNames() string {
	var names []string
	for _, a := range dmutex.Algorithms() {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// parseSets reads voting sets written as "0,1/1,2/0,2".
func parseSets(s string) ([][]int, error) {
	var sets [][]int
	for _, part := range strings.Split(s, "/") {
		set, err := parseInts(part)
		if err != nil {
			return nil, err
		}
		sets = append(sets, set)
	}
	return sets, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not a list of numbers", s)
		}
		out = append(out, v)
	}
	return out, nil
}

func parseKind(s string) (dmutex.MessageKind, bool) {
	for k := dmutex.MessageKind(1); k.Valid(); k++ {
		if k.String() == s {
			return k, true
		}
	}
	return 0, false
}

// writeText prints the result for people.
func writeText(w io.Writer, r dmutex.CheckResult, mermaid bool) {
	name := r.Algorithm
	if r.Variant != "" {
		name = r.Variant
	}
	fmt.Fprintf(w, "%s: n=%d requests=%s", name, r.N, requestsString(r.Requests))
	if r.Tries != 0 {
		fmt.Fprintf(w, " tries=%s", requestsString(r.Tries))
	}
	fmt.Fprintf(w, " network=%s", r.Network)
	if r.Faults != "" {
		fmt.Fprintf(w, " faults=%q", r.Faults)
	}
	if r.Detector != "" {
		fmt.Fprintf(w, " detector=%q", r.Detector)
	}
	if r.PartialOrder {
		fmt.Fprint(w, " reduced=partial-order")
	}
	if r.StampGaps {
		fmt.Fprint(w, " stamp-gaps")
	}
	if r.OnTheFly {
		fmt.Fprint(w, " on-the-fly")
	}
	fmt.Fprintln(w)
	rate := 0.0
	if r.Seconds > 0 {
		rate = float64(r.States) / r.Seconds
	}
	fmt.Fprintf(w, "%d states, %d transitions, %s, %s (%.0f states/s)\n", r.States, r.Transitions, extent(r),
		(time.Duration(r.Seconds * float64(time.Second))).Round(time.Millisecond), rate)
	fmt.Fprintf(w, "%d-bit fingerprints: chance of a collision below %.1e\n", r.FingerprintBits, r.CollisionChance)
	if r.SpillMerges > 0 {
		merges := "merges"
		if r.SpillMerges == 1 {
			merges = "merge"
		}
		fmt.Fprintf(w, "%d states' fingerprints on disk at the end, after %d %s of the table into the file\n", r.Spilled, r.SpillMerges, merges)
	}
	fmt.Fprintf(w, "safe: %v\ndeadlock free: %v\n", r.Safe, r.DeadlockFree)
	if r.Fenced {
		fmt.Fprintf(w, "fenced safe: %v\n", r.FencedSafe)
	}
	fmt.Fprintf(w, "starvation free: %v\n", r.StarvationFree)
	switch {
	case !r.Liveness:
		fmt.Fprintln(w, "max overtakes: undecided")
	case r.MaxOvertakes >= 0:
		fmt.Fprintf(w, "max overtakes: %d\n", r.MaxOvertakes)
	default:
		fmt.Fprintln(w, "max overtakes: unbounded")
	}
	if r.Blocked > 0 {
		fmt.Fprintf(w, "blocked after a fault: %d states\n", r.Blocked)
	}
	if v := r.Violation; v != nil {
		fmt.Fprintf(w, "\nviolation (%s): %s\n", v.Property, v.Message)
		for i, l := range v.Trace {
			if v.Property == "starvation" && i == v.CycleStart {
				fmt.Fprintln(w, "  -- from here the run repeats for ever --")
			}
			fmt.Fprintf(w, "  %3d %s\n", i+1, l)
		}
		if mermaid {
			fmt.Fprintf(w, "\n%s", v.Mermaid)
		}
	}
}

// extent says how much of the state space the search saw.
func extent(r dmutex.CheckResult) string {
	switch {
	case r.Complete:
		return "complete"
	case r.Stopped == dmutex.StoppedAtViolation:
		return "stopped at a violation"
	case r.Stopped == dmutex.StoppedByContext:
		return "interrupted"
	case r.Stopped != "":
		return "stopped at the " + string(r.Stopped)
	}
	return "incomplete"
}

func requestsString(k int) string {
	if k == dmutex.Unlimited {
		return "unlimited"
	}
	return strconv.Itoa(k)
}
