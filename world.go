package dmutex

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// A World is one whole cluster as a value: every peer's machine and local
// status (requests still to make, waiting, inside, crashed), the messages
// in flight (a FIFO queue per ordered pair of peers, or an unordered bag),
// the faults that struck, and the bookkeeping of the checks (the order of
// entries, the tokens). It has no goroutines and no clocks: a scheduler
// lists the enabled transitions with Transitions and takes one with Apply.
// The Simulation takes them at random under a seed, Check takes them all,
// and a person may pick them one by one.
//
// After every transition the world checks that at most one peer is
// inside, that machines promising an order of entry keep it, that token
// algorithms have exactly one token (held, in flight or lost to a fault)
// and that no machine sends a malformed message. The first violation is
// returned by Apply, wrapping ErrViolation, and by Err from then on; a
// world with a violation enables no more transitions.
//
// A World is not safe for concurrent use. Clone is cheap: the copy shares
// machines and queues with the original until either changes them. The
// zero World is not usable; call NewWorld.
type World struct {
	alg Algorithm
	n   int
	cfg *config

	ms    []machine
	own   []bool // own[i]: ms[i] belongs to this world alone (copy on write)
	peers []peerStatus

	// The network. With per-pair FIFO order, queues[from*n+to] holds the
	// pair's messages, oldest first, and active lists the non-empty pairs
	// (pos[pair] is the pair's index in active, or -1); qown[pair] says
	// the queue's array belongs to this world alone. Otherwise bag holds
	// every message in flight, in no meaningful order.
	queues [][]envelope
	qown   []bool
	active []int
	pos    []int
	bag    []envelope
	bagOwn bool

	inside    []int  // peers inside, in order of entry
	step      int    // scheduling steps taken
	seq       uint64 // serial number of the last message sent
	idle      int    // deliveries since the last entry or exit
	refusedAt int    // the step in which a try was last refused
	enteredAt int    // the step in which a machine last entered, allowed or not
	enteredBy int    // the peer whose machine entered then
	err       error  // the first violation
	hostPeer  int    // the peer whose driver runs now: see drive

	tokens   bool // the machines implement tokenHolder
	regen    bool // the machines regenerate tokens: at most one per epoch, not exactly one
	clocks   bool // the machines implement clockMachine: stamps are encoded less the least
	inFlight int  // token messages in flight

	order    orderRule
	lastTS   uint64 // orderTimestamp: the latest entry's request
	lastID   int    // -1 before the first entry
	arrivals []int  // orderCoordinator: requests at the coordinator, in order of arrival, not yet granted

	f worldFaults

	store *checkStore // the fenced store, with CheckConfig.Fenced; nil without
	soft  error       // fenced store: two holders overlapped in this step (not fatal)

	entries uint64
	sent    [numKinds]uint64

	trace  bool         // record events
	events []TraceEvent // recorded while trace is set
	mark   int          // len(events) when the current Apply began

	out         output // scratch for machine steps; never shared by clones
	acts        uint64 // machine steps taken
	restChecked uint64 // acts+1 when the world was last found sound at rest; 0 never
	owns        []bool // the array behind own and qown
	ints        []int  // the array behind pos and active

	// made[i] says that ms[i] is a copy this world made (by machine); nil
	// in a world that cloneInto never built. spare[i], if not nil, is
	// such a copy of peer i's machine, from before cloneInto reused the
	// world: machine copies a state into it instead of allocating a
	// clone. Neither is shared by clones.
	made  []bool
	spare []machine
}

// peerStatus is what a World keeps of one peer beside its machine: the
// driver, which a Peer keeps beside its own, and the budgets of the
// transitions.
type peerStatus struct {
	budget int    // requests the peer may still make as transitions
	tries  int    // tries (TryLock) the peer may still make as transitions
	d      driver // the local rules around the machine
}

// orderRule is the order in which an algorithm promises to grant entries.
type orderRule uint8

const (
	orderNone        orderRule = iota // no order promised (Maekawa, token algorithms)
	orderTimestamp                    // (timestamp, id) order of the requests
	orderCoordinator                  // order of arrival of the requests at the coordinator
)

// A StateField is one labelled part of a machine's state, for people: "clock"
// and "3", or "queue" and "[(1,0) (2,2)]".
type StateField struct {
	Name  string
	Value string
}

// A PeerStatus is what a World knows of one peer beside its machine.
type PeerStatus struct {
	Waiting bool // a request is out and the peer has not entered
	Trying  bool // with Waiting: the request is a try, which enters or is refused
	Inside  bool // in the critical section
	Crashed bool
	Pending int // Request calls queued at the peer behind the current one
	Budget  int // requests the peer may still make as transitions, or Unlimited
	Tries   int // tries the peer may still make as transitions, or Unlimited
}

// State names the peer's status in one word: "crashed", "inside",
// "waiting" or "idle", in that order of precedence.
func (ps PeerStatus) State() string {
	switch {
	case ps.Crashed:
		return "crashed"
	case ps.Inside:
		return "inside"
	case ps.Waiting:
		return "waiting"
	}
	return "idle"
}

// InFlightMessage is a message in flight and its serial number.
type InFlightMessage struct {
	Seq uint64
	Msg Message
}

// Unlimited, as WorldConfig.Requests or Tries or CheckConfig.Requests or
// Tries, lets every peer request (or try) again whenever it is idle, for
// ever.
const Unlimited = -1

// A WorldConfig is what a World needs beside its algorithm, its size and
// the algorithm's options, in the words of CheckConfig, which builds its
// worlds from the same settings. The zero WorldConfig is a world over
// per-pair FIFO queues, with no requests but those of World.Request, no
// loss, and a trace.
type WorldConfig struct {
	// Variant, if not empty, names a variant (see Variants) to run
	// instead of the real algorithm; the algorithm given to NewWorld must
	// be the variant's. Unlike CheckConfig.Variant it adds none of the
	// variant's Options: give them as options.
	Variant string

	// Network is the network model: NetworkFIFO (the default, also for
	// NetworkDefault) keeps a FIFO queue per ordered pair of peers, and
	// NetworkUnordered an unordered bag of messages in flight, for any
	// algorithm, as in Check: the world is where one sees why an
	// algorithm needs FIFO.
	Network Network

	// Requests lets every peer make that many requests, each as a
	// transition of its own (TransRequest) whenever the peer is idle; it
	// may be Unlimited. Zero, the default, is none: requests come only
	// from World.Request.
	Requests int

	// Tries lets every peer make that many tries, each as a transition of
	// its own (TransTry) whenever the peer is idle, beside its requests;
	// it may be Unlimited. A try is what TryLock asks of the machine: it
	// enters, or it is refused, without waiting for a holder to leave.
	// The default is none.
	Tries int

	// Loss is the probability, from 0 to 1, that a message is lost as it
	// is sent, drawn from Seed's stream of its own.
	Loss float64
	// Seed seeds the draws of Loss.
	Seed uint64

	// NoTrace stops the world from recording its events (World.Events).
	NoTrace bool
}

// apply validates wc and sets it in c.
func (wc WorldConfig) apply(c *config) error {
	switch {
	case wc.Network > NetworkUnordered:
		return fmt.Errorf("%w: WorldConfig.Network: unknown network %v", ErrInvalidConfig, wc.Network)
	case wc.Requests < Unlimited:
		return fmt.Errorf("%w: WorldConfig.Requests %d: want zero or more, or Unlimited", ErrInvalidConfig, wc.Requests)
	case wc.Tries < Unlimited:
		return fmt.Errorf("%w: WorldConfig.Tries %d: want zero or more, or Unlimited", ErrInvalidConfig, wc.Tries)
	case !(wc.Loss >= 0 && wc.Loss <= 1):
		return fmt.Errorf("%w: WorldConfig.Loss %v: want a probability from 0 to 1", ErrInvalidConfig, wc.Loss)
	}
	if wc.Variant != "" {
		if err := c.setVariant(wc.Variant); err != nil {
			return err
		}
	}
	if wc.Network == NetworkUnordered {
		c.sim.delivery, c.sim.unsafe = DeliverReorder, true
	}
	c.requests, c.tries = wc.Requests, wc.Tries
	c.sim.loss, c.sim.seed = wc.Loss, wc.Seed
	c.sim.noTrace = wc.NoTrace
	return nil
}

// NewWorld builds the world of n peers running alg at its start: nothing
// requested and nothing in flight. It takes the algorithm's options, as
// New does, and cfg for the rest (see WorldConfig). Invalid n,
// configuration or options give an error wrapping ErrInvalidConfig.
func NewWorld(alg Algorithm, n int, cfg WorldConfig, opts ...Option) (*World, error) {
	c, err := newWorldConfig(alg, n, cfg, opts)
	if err != nil {
		return nil, err
	}
	return newWorld(c, nil)
}

// newWorldConfig checks and applies a world's configuration and options.
func newWorldConfig(alg Algorithm, n int, wc WorldConfig, opts []Option) (*config, error) {
	c, err := newConfig(alg, n, forWorld, opts)
	if err != nil {
		return nil, err
	}
	if err := wc.apply(c); err != nil {
		return nil, err
	}
	return c, nil
}

// newWorld builds a world from a checked configuration; build, if set,
// replaces the machines (tests of the checks).
func newWorld(cfg *config, build func(id, n int) machine) (*World, error) {
	alg, n := cfg.alg, cfg.n
	if cfg.sim.delivery == DeliverReorder && alg.NeedsFIFO() && !cfg.sim.unsafe {
		return nil, fmt.Errorf("%w: %v needs FIFO channels and delivery %v would reorder them (set SimConfig.UnsafeDelivery to insist)",
			ErrInvalidConfig, alg, cfg.sim.delivery)
	}
	w := &World{
		alg:    alg,
		n:      n,
		cfg:    cfg,
		own:    make([]bool, n),
		peers:  make([]peerStatus, n),
		lastID: -1,
		trace:  !cfg.sim.noTrace,
		bagOwn: true,
	}
	for i := range n {
		var m machine
		if build != nil {
			m = build(i, n)
		} else {
			var err error
			if m, err = cfg.newMachine(alg, i, n); err != nil {
				return nil, err
			}
		}
		w.ms = append(w.ms, m)
		w.own[i] = true
		w.peers[i].budget = cfg.requests
		w.peers[i].tries = cfg.tries
		w.peers[i].d = newDriver(i, n, cfg, cfg.fenced)
	}
	w.classify()
	if cfg.fenced {
		w.store = newCheckStore(n)
	}
	if cfg.sim.delivery == DeliverFIFO {
		w.queues = make([][]envelope, n*n)
		w.qown = make([]bool, n*n)
		w.pos = make([]int, n*n)
		for i := range w.pos {
			w.pos[i] = -1
		}
	}
	if d := cfg.sim.detector; d != nil {
		w.f.detector, w.f.falseLeft = d.Kind, d.FalseSuspicions
	}
	w.f.loss = cfg.sim.loss
	if w.f.loss > 0 {
		w.f.armed = true
		// A stream of its own, so that the loss draws do not shift a
		// scheduler's.
		w.f.lossSrc = rand.NewPCG(cfg.sim.seed, 0x1055)
		w.f.rng = rand.New(w.f.lossSrc)
	}
	if err := w.checkTokens(); err != nil {
		return nil, err
	}
	return w, nil
}

// classify reads from the machines which checks apply to them.
func (w *World) classify() {
	_, w.tokens = w.ms[0].(tokenHolder)
	r, ok := w.ms[0].(regenerator)
	w.regen = ok && r.regenerates()
	// Only over FIFO queues: there the checker's fairness classes are
	// the pairs, while over a bag they are the messages' encodings, which
	// a shift would tell apart along one run.
	w.clocks = w.cfg.sim.delivery == DeliverFIFO
	for _, m := range w.ms {
		if _, ok := m.(clockMachine); !ok {
			w.clocks = false
		}
	}
	w.order = orderNone
	if _, ok := w.ms[0].(timestamped); ok {
		w.order = orderTimestamp
	} else if c, ok := w.ms[0].(coordinated); ok && c.coordinatorID() >= 0 {
		w.order = orderCoordinator
	}
}

// Algorithm returns the world's algorithm.
func (w *World) Algorithm() Algorithm { return w.alg }

// N returns the number of peers.
func (w *World) N() int { return w.n }

// FIFO reports whether the network keeps per-pair FIFO order.
func (w *World) FIFO() bool { return w.queues != nil }

// Err returns the first violation, or nil.
func (w *World) Err() error { return w.err }

// Clone returns a copy of w that evolves independently of it. The two
// share machines and queues until either changes one, which it then
// copies, so a clone costs a few small slices. The trace so far is
// shared too, and each world extends its own.
func (w *World) Clone() *World { return w.cloneInto(new(World)) }

// cloneInto makes c a clone of w, reusing c's arrays and the machines it
// copied, and returns it. c must be a world nobody else shares, and whose
// own clones are no longer used: a fresh one, a clone that a checker
// found was a state it knew, or a world a depth-first search is done
// with.
func (w *World) cloneInto(c *World) *World {
	ms, peers, queues, owns, ints, inside, out, spare, made := c.ms, c.peers, c.queues, c.owns, c.ints, c.inside, c.out, c.spare, c.made
	// The machines c copied are nobody's but its clones', which are no
	// longer used: keep them to copy states into.
	for i, mine := range made {
		if mine {
			if spare == nil {
				spare = make([]machine, w.n)
			}
			spare[i] = ms[i]
		}
	}
	if made == nil {
		made = make([]bool, w.n)
	} else {
		clear(made)
	}
	*c = *w
	c.spare, c.made = spare, made
	c.ms = append(ms[:0], w.ms...)
	c.peers = append(peers[:0], w.peers...)
	// The ownership flags of machines and queues, in one array.
	k := len(w.own) + len(w.qown)
	if cap(owns) < k {
		owns = make([]bool, k)
	} else {
		owns = owns[:k]
		clear(owns)
	}
	c.owns = owns
	c.own = owns[:w.n:w.n]
	clear(w.own)
	if w.queues != nil {
		c.queues = append(queues[:0], w.queues...)
		c.qown = owns[w.n:]
		clear(w.qown)
		// pos and active share one array; active never outgrows its part.
		pairs := len(w.pos)
		if cap(ints) < 2*pairs {
			ints = make([]int, 2*pairs)
		}
		ints = ints[:2*pairs]
		copy(ints, w.pos)
		copy(ints[pairs:], w.active)
		c.ints = ints
		c.pos = ints[:pairs:pairs]
		c.active = ints[pairs : pairs+len(w.active)]
	}
	c.bagOwn, w.bagOwn = false, false
	c.inside = append(inside[:0], w.inside...)
	c.arrivals = slices.Clip(w.arrivals)
	c.f.drops = slices.Clone(w.f.drops)
	c.f.deadInside = slices.Clip(w.f.deadInside)
	if w.f.lossSrc != nil {
		src := *w.f.lossSrc
		c.f.lossSrc = &src
		c.f.rng = rand.New(&src)
	}
	c.events = slices.Clip(w.events)
	if w.store != nil {
		c.store = w.store.clone()
	}
	out.reset()
	c.out = out
	return c
}

// machine returns peer p's machine, ready to be stepped: its own copy.
func (w *World) machine(p int) machine {
	if !w.own[p] {
		if s := w.spareFor(p); s != nil && s.(assigner).assign(w.ms[p]) {
			w.ms[p] = s
		} else {
			w.ms[p] = w.ms[p].clone()
		}
		w.own[p] = true
		if w.made != nil {
			w.made[p] = true
		}
	}
	return w.ms[p]
}

// spareFor takes from w.spare a machine of peer p that can copy another's
// state, or returns nil.
func (w *World) spareFor(p int) machine {
	if w.spare == nil || w.spare[p] == nil {
		return nil
	}
	s := w.spare[p]
	w.spare[p] = nil
	if _, ok := s.(assigner); !ok {
		return nil
	}
	return s
}

// Peer returns peer p's status; p must be in range.
func (w *World) Peer(p int) PeerStatus {
	s := w.peers[p]
	return PeerStatus{
		Waiting: s.d.wanting(),
		Trying:  s.d.trying,
		Inside:  s.d.inside,
		Crashed: w.isCrashed(p),
		Pending: s.d.pending(),
		Budget:  s.budget,
		Tries:   s.tries,
	}
}

// Describe returns peer p's machine state for people; p must be in range.
func (w *World) Describe(p int) []StateField {
	if d, ok := w.ms[p].(describer); ok {
		return d.describe()
	}
	return nil
}

// Messages returns the messages in flight, in order of sending.
func (w *World) Messages() []InFlightMessage {
	var all []InFlightMessage
	add := func(es []envelope) {
		for _, e := range es {
			all = append(all, InFlightMessage{Seq: e.seq, Msg: traced(e.m)})
		}
	}
	if w.queues != nil {
		for _, q := range w.queues {
			add(q)
		}
	} else {
		add(w.bag)
	}
	slices.SortFunc(all, func(a, b InFlightMessage) int { return cmp.Compare(a.Seq, b.Seq) })
	return all
}

// Stats returns the world's counts so far, counted as a Cluster counts
// them: every entry, and every message at the moment it is sent.
func (w *World) Stats() Stats {
	st := Stats{Entries: w.entries}
	for k, v := range w.sent {
		if v != 0 {
			if st.ByKind == nil {
				st.ByKind = make(map[string]uint64)
			}
			st.ByKind[MessageKind(k).String()] = v
			st.Messages += v
		}
	}
	return st
}

// Events returns what has happened so far, in order; nil under
// WorldConfig.NoTrace. The slice is the caller's.
func (w *World) Events() []TraceEvent {
	if !w.trace {
		return nil
	}
	return slices.Clone(w.events)
}

func (w *World) record(e TraceEvent) {
	if !w.trace {
		return
	}
	e.Step = w.step
	w.events = append(w.events, e)
}

// String describes the world for people: each peer's status and machine
// state, then the messages in flight.
func (w *World) String() string {
	var b strings.Builder
	for p := range w.n {
		fmt.Fprintf(&b, "P%d %s:", p, w.Peer(p).State())
		for _, f := range w.Describe(p) {
			fmt.Fprintf(&b, " %s=%s", f.Name, f.Value)
		}
		b.WriteByte('\n')
	}
	for _, m := range w.Messages() {
		fmt.Fprintf(&b, "m%d %s\n", m.Seq, formatMessage(m.Msg, true))
	}
	return b.String()
}

// replaceMachines replaces every machine by build's (tests of the checks)
// and rereads which checks apply.
func (w *World) replaceMachines(build func(id, n int) machine) {
	for i := range w.n {
		w.ms[i] = build(i, w.n)
		w.own[i] = true
	}
	w.classify()
}
