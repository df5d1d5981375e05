package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/dmutex/dmutex"
)

// maxN is the largest cluster the lab draws; the library allows far more,
// but a space-time diagram of more lanes is no longer readable.
const maxN = 8

// maxTicks bounds a run's length, so that a URL cannot make the server
// replay for ever.
const maxTicks = 2000

// checkStates bounds the model checker's search from the page: enough for
// every variant (the largest, maekawa-textbook-failed, needs about 283,000
// states). States of eight peers with a detector are far larger than
// the 150 bytes of a small one, so checkMemory (main.go) bounds the
// search too: over every algorithm at n = 8, each network and detector,
// the largest stopped at it with the server's peak resident set at 542 MB
// and took at most 9.5 s.
const checkStates = 1_000_000

// A state is everything a run is made of, as the page's URL holds it: the
// configuration, the seed of the automatic steps, and every choice.
type state struct {
	Alg      dmutex.Algorithm
	N        int
	Seed     int64
	Delivery dmutex.Delivery
	Variant  string
	Implicit bool
	Sets     string // Maekawa voting sets, "0,1/1,2/0,2"
	Tree     string // Raymond's parents, "-1,0,0"
	Loss     float64
	Recovery bool                // WithRecovery
	Detector dmutex.DetectorKind // the failure detector
	False    int                 // the false suspicions an imperfect detector allows
	Choices  []string
	CX       int // the first CX choices are a checker's counterexample
}

// maxFalse bounds the false suspicions a run may allow: each one is a
// person's click, and the checker's search grows with each.
const maxFalse = 9

var detectors = []dmutex.DetectorKind{dmutex.DetectorNone, dmutex.DetectorPerfect, dmutex.DetectorImperfect}

// hasRecovery reports whether a variant's options turn on WithRecovery.
func hasRecovery(v *dmutex.Variant) bool {
	return v != nil && slices.ContainsFunc(v.Options, func(o dmutex.Option) bool { return o.String() == dmutex.WithRecovery().String() })
}

// variant is the state's variant, or nil.
func (st *state) variant() *dmutex.Variant {
	if st.Variant == "" {
		return nil
	}
	v, err := dmutex.LookupVariant(st.Variant)
	if err != nil {
		return nil // parseState has refused it
	}
	return v
}

// A badRequest is an error the client made: the server answers 400 with
// its text.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func bad(format string, a ...any) error {
	return &badRequest{"dmutexlab: " + fmt.Sprintf(format, a...)}
}

var deliveries = []dmutex.Delivery{dmutex.DeliverFIFO, dmutex.DeliverReorder, dmutex.DeliverLockStep}

// parseState reads a state from a URL query, naming the first bad value.
func parseState(q url.Values) (*state, error) {
	st := &state{Alg: dmutex.RicartAgrawala, N: 3}
	if v := q.Get("variant"); v != "" {
		vr, err := dmutex.LookupVariant(v)
		if err != nil {
			return nil, bad("variant: %v", err)
		}
		st.Variant, st.Alg, st.N = vr.Name, vr.Algorithm, vr.N
		if vr.Network == dmutex.NetworkUnordered {
			st.Delivery = dmutex.DeliverReorder
		}
		st.Detector, st.False, st.Recovery = vr.Detector.Kind, vr.Detector.FalseSuspicions, hasRecovery(vr)
	}
	if v := q.Get("alg"); v != "" {
		a, err := dmutex.ParseAlgorithm(v)
		if err != nil {
			return nil, bad("alg: %v", err)
		}
		if st.Variant != "" && a != st.Alg {
			return nil, bad("alg %q: variant %s is of %v", v, st.Variant, st.Alg)
		}
		st.Alg = a
	}
	if v := q.Get("n"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, bad("n: %q is not a number", v)
		}
		if n < 1 || n > maxN {
			return nil, bad("n = %d peers, want 1 to %d", n, maxN)
		}
		st.N = n
	}
	if v := q.Get("seed"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, bad("seed: %q is not a number", v)
		}
		st.Seed = s
	}
	if v := q.Get("net"); v != "" {
		i := slices.IndexFunc(deliveries, func(d dmutex.Delivery) bool { return d.String() == v })
		if i < 0 {
			return nil, bad("net: %q is not fifo, reorder or lock-step", v)
		}
		st.Delivery = deliveries[i]
	}
	switch v := q.Get("implicit"); v {
	case "", "0":
	case "1":
		st.Implicit = true
	default:
		return nil, bad("implicit: %q is not 0 or 1", v)
	}
	switch v := q.Get("recovery"); v {
	case "":
	case "0":
		if vr := st.variant(); hasRecovery(vr) {
			return nil, bad("recovery=0: variant %s runs with WithRecovery", vr.Name)
		}
		st.Recovery = false
	case "1":
		st.Recovery = true
	default:
		return nil, bad("recovery: %q is not 0 or 1", v)
	}
	if v := q.Get("detector"); v != "" {
		i := slices.IndexFunc(detectors, func(d dmutex.DetectorKind) bool { return d.String() == v })
		if i < 0 {
			return nil, bad("detector: %q is not none, perfect or imperfect", v)
		}
		if vr := st.variant(); vr != nil && detectors[i] == dmutex.DetectorNone && vr.Detector.Kind != dmutex.DetectorNone {
			return nil, bad("detector=none: variant %s needs its %v detector", vr.Name, vr.Detector.Kind)
		}
		if detectors[i] != st.Detector {
			st.Detector, st.False = detectors[i], 0
			if st.Detector == dmutex.DetectorImperfect {
				st.False = 1 // the README's recovery table allows one
			}
		}
	}
	if v := q.Get("false"); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil || k < 0 || k > maxFalse {
			return nil, bad("false: %q is not a number of false suspicions from 0 to %d", v, maxFalse)
		}
		if st.Detector != dmutex.DetectorImperfect && k != 0 {
			return nil, bad("false=%d: false suspicions need detector=imperfect, not %v", k, st.Detector)
		}
		st.False = k
	}
	// The numbers of sets and tree are re-printed, so that the query the
	// answer repeats (in every tick's upto) is as short as the state.
	if v := q.Get("sets"); v != "" {
		var parts []string
		for part := range strings.SplitSeq(v, "/") {
			set, err := parseInts(part)
			if err != nil {
				return nil, bad("sets: %v", err)
			}
			parts = append(parts, printInts(set))
		}
		st.Sets = strings.Join(parts, "/")
	}
	if v := q.Get("tree"); v != "" {
		parents, err := parseInts(v)
		if err != nil {
			return nil, bad("tree: %v", err)
		}
		st.Tree = printInts(parents)
	}
	if v := q.Get("loss"); v != "" {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil || !(p >= 0 && p < 1) { // NaN fails both
			return nil, bad("loss: %q is not a probability in [0, 1)", v)
		}
		st.Loss = p
	}
	if v := q.Get("c"); v != "" {
		st.Choices = strings.Split(v, ".")
		if len(st.Choices) > maxTicks {
			return nil, bad("c: %d choices, more than %d", len(st.Choices), maxTicks)
		}
	}
	if v := q.Get("cx"); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil || k < 0 || k > len(st.Choices) {
			return nil, bad("cx: %q is not a number of choices from 0 to %d", v, len(st.Choices))
		}
		st.CX = k
	}
	return st, nil
}

// query is the state as a URL query, the inverse of parseState.
func (st *state) query() string {
	q := url.Values{}
	if st.Variant != "" {
		q.Set("variant", st.Variant)
	}
	q.Set("alg", st.Alg.String())
	q.Set("n", strconv.Itoa(st.N))
	q.Set("seed", strconv.FormatInt(st.Seed, 10))
	q.Set("net", st.Delivery.String())
	if st.Implicit {
		q.Set("implicit", "1")
	}
	if st.Sets != "" {
		q.Set("sets", st.Sets)
	}
	if st.Tree != "" {
		q.Set("tree", st.Tree)
	}
	if st.Loss > 0 {
		q.Set("loss", strconv.FormatFloat(st.Loss, 'g', -1, 64))
	}
	if st.Recovery {
		q.Set("recovery", "1")
	}
	if st.Detector != dmutex.DetectorNone {
		q.Set("detector", st.Detector.String())
	}
	if st.Detector == dmutex.DetectorImperfect {
		q.Set("false", strconv.Itoa(st.False))
	}
	if len(st.Choices) > 0 {
		q.Set("c", strings.Join(st.Choices, "."))
	}
	if st.CX > 0 {
		q.Set("cx", strconv.Itoa(st.CX))
	}
	return q.Encode()
}

// simulation is the configuration and the library options of the
// state's simulation.
func (st *state) simulation() (dmutex.SimConfig, []dmutex.Option, error) {
	cfg := dmutex.SimConfig{Seed: uint64(st.Seed), Delivery: st.Delivery, Loss: st.Loss}
	var opts []dmutex.Option
	if vr := st.variant(); vr != nil {
		// The variant's own options come first, as Check adds them.
		opts = append(opts, vr.Options...)
		cfg.Variant = st.Variant
	}
	if st.Recovery && !hasRecovery(st.variant()) {
		opts = append(opts, dmutex.WithRecovery())
	}
	if st.Recovery || st.Detector != dmutex.DetectorNone {
		d := st.detector()
		cfg.Detector = &d
	}
	algOpts, err := st.algOptions()
	return cfg, append(opts, algOpts...), err
}

// detector is the state's failure detector.
func (st *state) detector() dmutex.Detector {
	return dmutex.Detector{Kind: st.Detector, FalseSuspicions: st.False}
}

// algOptions are the algorithm's own options, which Check takes too.
func (st *state) algOptions() ([]dmutex.Option, error) {
	var opts []dmutex.Option
	if st.Implicit {
		opts = append(opts, dmutex.WithImplicitReplies())
	}
	if st.Sets != "" {
		var sets [][]int
		for part := range strings.SplitSeq(st.Sets, "/") {
			set, err := parseInts(part)
			if err != nil {
				return nil, bad("sets: %v", err)
			}
			sets = append(sets, set)
		}
		opts = append(opts, dmutex.WithVotingSets(sets))
	}
	if st.Tree != "" {
		parents, err := parseInts(st.Tree)
		if err != nil {
			return nil, bad("tree: %v", err)
		}
		opts = append(opts, dmutex.WithTree(parents))
	}
	return opts, nil
}

// printInts is the inverse of parseInts.
func printInts(vs []int) string {
	fs := make([]string, len(vs))
	for i, v := range vs {
		fs[i] = strconv.Itoa(v)
	}
	return strings.Join(fs, ",")
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not a list of numbers", s)
		}
		out = append(out, v)
	}
	return out, nil
}

// A run is a state replayed: the simulation after every choice, and what
// each tick of the diagram did.
type run struct {
	st        *state
	sim       *dmutex.Simulation
	ticks     []tick
	violation *violation
	blocked   string
	entered   int // the peer whose machine entered in the last choice World.Apply took, or -1
}

// A tick is one column of the diagram: one choice made by hand, or one
// step the simulation's scheduler took.
type tick struct {
	ID     string `json:"id"`     // the choice, or for a scheduler step the transition it amounts to
	Auto   bool   `json:"auto"`   // the scheduler chose it
	Text   string `json:"text"`   // what happened, for people
	Upto   string `json:"upto"`   // the query that replays the run up to this tick
	Events [2]int `json:"events"` // the tick's events are events[Events[0]:Events[1]]
	Cause  bool   `json:"cause"`  // part of a checker's counterexample
	// BrokeIn is 1 + the peer whose entry broke the promise in this tick,
	// or 0: the World records no event for an entry it refuses.
	BrokeIn int `json:"-"`
}

type violation struct {
	Message string `json:"message"`
	Tick    int    `json:"tick"` // the tick that broke the promise, or -1 for a deadlock found at rest
}

// replay builds the state's run. Bad configurations and choices that are
// not enabled are badRequest errors naming the value.
func replay(st *state) (*run, error) {
	cfg, opts, err := st.simulation()
	if err != nil {
		return nil, err
	}
	sim, err := dmutex.NewSimulation(st.Alg, st.N, cfg, opts...)
	if err != nil {
		return nil, bad("%v", err)
	}
	r := &run{st: st, sim: sim}
	w := sim.World()
	var done []string // the choices replayed so far, autos merged
	for i, c := range st.Choices {
		if r.violation != nil {
			return nil, bad("choice %d %q: the run already broke a promise at tick %d", i, c, r.violation.Tick)
		}
		if len(r.ticks) >= maxTicks {
			return nil, bad("more than %d steps", maxTicks)
		}
		if c == "" {
			return nil, bad("choice %d is empty", i)
		}
		if c[0] == 'a' {
			k := 1
			if len(c) > 1 {
				if k, err = strconv.Atoi(c[1:]); err != nil || k < 1 || k > maxTicks {
					return nil, bad("choice %d %q: want a, or a and a number of steps from 1 to %d", i, c, maxTicks)
				}
			}
			for range k {
				if len(r.ticks) >= maxTicks {
					return nil, bad("more than %d steps", maxTicks)
				}
				if r.violation != nil {
					break // the scheduler stops at a broken promise
				}
				before := len(w.Events())
				more, err := sim.Step()
				if !more {
					// At rest: the steps asked for beyond this are not taken.
					r.atRest(err)
					break
				}
				if len(done) > 0 && strings.HasPrefix(done[len(done)-1], "a") {
					done[len(done)-1] = "a" + strconv.Itoa(autoCount(done[len(done)-1])+1)
				} else {
					done = append(done, "a")
				}
				r.addTick(w, before, "", true, done, i < st.CX)
				if err != nil {
					r.fail(err)
				}
			}
			continue
		}
		before := len(w.Events())
		r.entered = -1
		id, err := r.choose(c)
		if err != nil {
			var br *badRequest
			if errors.As(err, &br) {
				return nil, bad("choice %d %q: %s", i, c, strings.TrimPrefix(br.msg, "dmutexlab: "))
			}
			if !errors.Is(err, dmutex.ErrViolation) && !errors.Is(err, dmutex.ErrBlocked) {
				return nil, bad("choice %d %q: %v", i, c, err)
			}
		}
		done = append(done, c)
		r.addTick(w, before, id, false, done, i < st.CX)
		if err != nil {
			r.fail(err)
		}
	}
	if r.violation == nil && r.quiet() {
		_, err := sim.Step() // nothing to do: Step gives the verdict at rest
		r.atRest(err)
	}
	st.Choices = done
	st.CX = min(st.CX, len(done))
	return r, nil
}

func autoCount(c string) int {
	if c == "a" {
		return 1
	}
	k, _ := strconv.Atoi(c[1:])
	return k
}

// atRest records the verdict of a simulation with nothing left to do;
// it reports whether there was one.
func (r *run) atRest(err error) bool {
	switch {
	case errors.Is(err, dmutex.ErrViolation):
		r.violation = &violation{Message: plain(err), Tick: -1}
	case errors.Is(err, dmutex.ErrBlocked):
		r.blocked = plain(err)
	default:
		return false
	}
	return true
}

func (r *run) fail(err error) {
	if errors.Is(err, dmutex.ErrViolation) {
		r.violation = &violation{Message: plain(err), Tick: len(r.ticks) - 1}
	} else if errors.Is(err, dmutex.ErrBlocked) {
		r.blocked = plain(err)
	}
}

// stepPrefix and stepInfix are the World's step counts in a violation's
// text. The World counts scheduling steps only, and the lab counts
// requests as steps too, so the page shows its own numbers instead.
var (
	stepPrefix = regexp.MustCompile(`^(after )?step \d+: `)
	stepInfix  = regexp.MustCompile(` after step \d+:`)
)

// plain is err's text for the page: the sentinel's prefix and the World's
// step numbers left out.
func plain(err error) string {
	s := strings.TrimPrefix(err.Error(), dmutex.ErrViolation.Error()+": ")
	s = strings.TrimPrefix(s, dmutex.ErrBlocked.Error()+": ")
	s = stepPrefix.ReplaceAllString(s, "")
	return stepInfix.ReplaceAllString(s, ":")
}

// quiet reports whether only the environment can act: nothing in flight,
// nobody inside, and nothing the failure detector owes (a suspicion of a
// crashed peer, a trust of a live suspected one).
func (r *run) quiet() bool {
	w := r.sim.World()
	if len(w.Messages()) > 0 {
		return false
	}
	for p := range w.N() {
		if w.Peer(p).Inside {
			return false
		}
	}
	return !slices.ContainsFunc(w.Transitions(), func(t dmutex.Transition) bool {
		return t.Kind == dmutex.TransTrust || t.Kind == dmutex.TransSuspect && w.Peer(t.Target).Crashed
	})
}

// choose makes one choice by hand and returns the transition ID it
// stands for.
func (r *run) choose(c string) (string, error) {
	sim, w := r.sim, r.sim.World()
	peer := func() (int, error) {
		p, err := strconv.Atoi(c[1:])
		if err != nil {
			return 0, bad("%q is not a peer", c[1:])
		}
		if p < 0 || p >= w.N() {
			return 0, bad("peer %d out of range [0, %d)", p, w.N())
		}
		return p, nil
	}
	switch c[0] {
	case 'r':
		p, err := peer()
		if err != nil {
			return "", err
		}
		if w.Peer(p).Crashed {
			return "", bad("P%d has crashed and cannot request", p)
		}
		return c, sim.Request(p)
	case 'c':
		p, err := peer()
		if err != nil {
			return "", err
		}
		return c, sim.Crash(p)
	case 'l', 'd':
		t, ok := w.Find(c)
		if !ok {
			if c[0] == 'l' {
				p, err := peer()
				if err != nil {
					return "", err
				}
				return "", bad("P%d is not inside, so it cannot leave", p)
			}
			if slices.ContainsFunc(w.Messages(), func(m dmutex.InFlightMessage) bool { return "d"+strconv.FormatUint(m.Seq, 10) == c }) {
				return "", bad("message %s is in flight behind an older one on its FIFO channel", c[1:])
			}
			return "", bad("message %s is not in flight", c[1:])
		}
		step, err := w.Apply(t)
		r.entered = step.Entered
		return c, err
	case 'p':
		var groups [][]int
		for g := range strings.SplitSeq(c[1:], "_") {
			ids, err := parseInts(strings.ReplaceAll(g, "-", ","))
			if err != nil {
				return "", bad("partition: %v (want groups such as p0-1_2)", err)
			}
			groups = append(groups, ids)
		}
		if err := sim.Partition(groups...); err != nil {
			if errors.Is(err, dmutex.ErrViolation) {
				return c, err
			}
			return "", bad("%v", err)
		}
		return c, nil
	case 's', 'u':
		return r.chooseDetector(c)
	case 'h':
		if c != "h" {
			return "", bad("unknown choice")
		}
		sim.Heal()
		return c, nil
	}
	return "", bad("unknown choice (want r, l, c or d and a number, s or u and two, p for a partition, h to heal, a for a scheduler step)")
}

// chooseDetector makes a suspicion sI-J or a trust uI-J by hand: enabled
// exactly when the World offers the transition, and otherwise refused
// with the reason.
func (r *run) chooseDetector(c string) (string, error) {
	w := r.sim.World()
	a, b, ok := strings.Cut(c[1:], "-")
	i, err1 := strconv.Atoi(a)
	j, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil {
		return "", bad("want %c and two peers, such as %c1-0", c[0], c[0])
	}
	for _, p := range []int{i, j} {
		if p < 0 || p >= w.N() {
			return "", bad("peer %d out of range [0, %d)", p, w.N())
		}
	}
	if t, ok := w.Find(c); ok {
		step, err := w.Apply(t)
		r.entered = step.Entered
		return c, err
	}
	ds := detectorOf(w)
	switch {
	case r.st.Detector == dmutex.DetectorNone:
		return "", bad("there is no failure detector (choose detector=perfect or imperfect)")
	case i == j:
		return "", bad("P%d cannot suspect or trust itself", i)
	case w.Peer(i).Crashed:
		return "", bad("P%d has crashed", i)
	case c[0] == 'u' && !ds.suspects[[2]int{i, j}]:
		return "", bad("P%d does not suspect P%d", i, j)
	case c[0] == 'u':
		return "", bad("P%d has crashed, and a detector never trusts a crashed peer again", j)
	case ds.suspects[[2]int{i, j}]:
		return "", bad("P%d already suspects P%d", i, j)
	case r.st.Detector == dmutex.DetectorPerfect:
		return "", bad("P%d has not crashed, and a perfect detector suspects only crashed peers", j)
	}
	return "", bad("P%d has not crashed, and the imperfect detector's %d false suspicions are used up", j, r.st.False)
}

// A detectorState is what the failure detector has done in a run: who
// suspects whom now, and how many suspicions were of live peers.
type detectorState struct {
	suspects  map[[2]int]bool
	falseUsed int
}

// detectorOf reads the detector's state from the world's events.
func detectorOf(w *dmutex.World) detectorState {
	ds := detectorState{suspects: map[[2]int]bool{}}
	crashed := map[int]bool{}
	for _, e := range w.Events() {
		switch e.Kind {
		case dmutex.EventCrash:
			crashed[e.Peer] = true
		case dmutex.EventSuspect:
			ds.suspects[[2]int{e.Peer, e.Target}] = true
			if !crashed[e.Target] {
				ds.falseUsed++
			}
		case dmutex.EventTrust:
			delete(ds.suspects, [2]int{e.Peer, e.Target})
		}
	}
	return ds
}

// addTick records the tick that produced the events from index before.
func (r *run) addTick(w *dmutex.World, before int, id string, auto bool, done []string, cause bool) {
	evs := w.Events()
	t := tick{ID: id, Auto: auto, Events: [2]int{before, len(evs)}, Cause: cause}
	q := *r.st
	q.Choices = done
	q.CX = min(q.CX, len(done))
	t.Upto = q.query()
	t.Text, t.ID = describeTick(evs[before:], id)
	if !auto && r.entered >= 0 && w.Err() != nil && !slices.ContainsFunc(evs[before:], func(e dmutex.TraceEvent) bool {
		return e.Kind == dmutex.EventEnter && e.Peer == r.entered
	}) {
		t.BrokeIn = r.entered + 1
		t.Text += fmt.Sprintf(", P%d enters", r.entered)
	}
	r.ticks = append(r.ticks, t)
}

// describeTick says what a tick's events did, and the transition ID it
// amounts to when it is one delivery, leave, suspicion or trust.
func describeTick(evs []dmutex.TraceEvent, id string) (string, string) {
	var parts []string
	ids := 0
	for _, e := range evs {
		switch e.Kind {
		case dmutex.EventReceive:
			parts = append(parts, fmt.Sprintf("P%d receives %v", e.Peer, msgText(e.Msg)))
			id, ids = "d"+strconv.FormatUint(e.Seq, 10), ids+1
		case dmutex.EventLeave:
			parts = append(parts, fmt.Sprintf("P%d leaves", e.Peer))
			id, ids = "l"+strconv.Itoa(e.Peer), ids+1
		case dmutex.EventRequest:
			parts = append(parts, fmt.Sprintf("P%d requests", e.Peer))
		case dmutex.EventEnter:
			parts = append(parts, fmt.Sprintf("P%d enters", e.Peer))
		case dmutex.EventTry:
			parts = append(parts, fmt.Sprintf("P%d tries", e.Peer))
		case dmutex.EventRefused:
			parts = append(parts, fmt.Sprintf("P%d is refused", e.Peer))
		case dmutex.EventCrash:
			parts = append(parts, fmt.Sprintf("P%d crashes", e.Peer))
		case dmutex.EventPartition:
			parts = append(parts, fmt.Sprintf("partition %v", e.Groups))
		case dmutex.EventHeal:
			parts = append(parts, "heal")
		case dmutex.EventLost:
			parts = append(parts, fmt.Sprintf("m%d lost", e.Seq))
		case dmutex.EventSuspect:
			parts = append(parts, fmt.Sprintf("P%d suspects P%d", e.Peer, e.Target))
			id, ids = fmt.Sprintf("s%d-%d", e.Peer, e.Target), ids+1
		case dmutex.EventTrust:
			parts = append(parts, fmt.Sprintf("P%d trusts P%d again", e.Peer, e.Target))
			id, ids = fmt.Sprintf("u%d-%d", e.Peer, e.Target), ids+1
		}
	}
	if ids > 1 {
		id = "round"
	}
	if len(parts) == 0 {
		return "nothing happens", id
	}
	return strings.Join(parts, ", "), id
}

func msgText(m dmutex.Message) string {
	s := fmt.Sprintf("%v P%d→P%d", m.Kind, m.From, m.To)
	if m.TS != 0 {
		s += fmt.Sprintf(" ts=%d", m.TS)
	}
	if m.Ref != 0 {
		s += fmt.Sprintf(" ref=%d", m.Ref)
	}
	if m.Token != nil {
		s += fmt.Sprintf(" LN=%v Q=%v", m.Token.LN, m.Token.Queue)
	}
	return s
}

// checkState runs the model checker on the state's configuration and
// returns its counterexample as a state to replay, or nil and a summary.
func checkState(ctx context.Context, st *state) (*state, *dmutex.CheckResult, error) {
	if _, err := replay(&state{Alg: st.Alg, N: st.N, Seed: st.Seed, Delivery: st.Delivery, Variant: st.Variant,
		Implicit: st.Implicit, Sets: st.Sets, Tree: st.Tree, Recovery: st.Recovery, Detector: st.Detector, False: st.False}); err != nil {
		return nil, nil, err // the configuration itself is bad
	}
	algOpts, err := st.algOptions()
	if err != nil {
		return nil, nil, err
	}
	vr := st.variant()
	if st.Recovery && !hasRecovery(vr) {
		algOpts = append(algOpts, dmutex.WithRecovery()) // Check adds a variant's own
	}
	cc := dmutex.CheckConfig{
		Algorithm:      st.Alg,
		Variant:        st.Variant,
		N:              st.N,
		Network:        dmutex.NetworkFIFO,
		Options:        algOpts,
		MaxStates:      checkStates,
		MaxMemory:      checkMemory,
		StopAtDeadlock: true,
		Detector:       st.detector(),
	}
	if st.Detector != dmutex.DetectorNone && (vr == nil || vr.Faults == (dmutex.CheckFaults{})) {
		// A detector has something to detect: one crash of any peer at any
		// point, as in the README's recovery table. A variant's own faults
		// are Check's default.
		cc.Faults = dmutex.CheckFaults{Crash: true}
	}
	if st.Delivery == dmutex.DeliverReorder {
		cc.Network = dmutex.NetworkUnordered
	}
	res, err := dmutex.Check(ctx, cc) // ctx ends if the page goes away
	if err != nil {
		if errors.Is(err, dmutex.ErrInvalidConfig) {
			return nil, nil, bad("%v", err)
		}
		return nil, nil, err
	}
	if res.Violation == nil {
		return nil, &res, nil
	}
	cx := *st
	cx.Loss = 0
	cx.Choices = slices.Clone(res.Violation.Transitions)
	cx.CX = len(cx.Choices)
	for _, id := range cx.Choices {
		if id != "" && id[0] == 'x' {
			return nil, nil, fmt.Errorf("dmutexlab: the counterexample loses a message in flight (%s), which the lab cannot replay", id)
		}
	}
	return &cx, &res, nil
}
