package dmutex

import (
	"bytes"
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

	inside      []int  // peers inside, in order of entry
	step        int    // scheduling steps taken
	seq         uint64 // serial number of the last message sent
	outstanding int    // requests made (by Request or a transition) and not yet completed by a leave
	idle        int    // deliveries since the last entry or exit
	refusedAt   int    // the step in which a try was last refused
	enteredAt   int    // the step in which a machine last entered, allowed or not
	enteredBy   int    // the peer whose machine entered then
	err         error  // the first violation

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

	trace  bool    // record events
	events []Event // recorded while trace is set
	mark   int     // len(events) when the current Apply began

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

// peerStatus is the runtime status of one peer, kept beside its machine
// as a Peer keeps it beside its own.
type peerStatus struct {
	budget    int  // requests the peer may still make as transitions
	tries     int  // tries (TryLock) the peer may still make as transitions
	trying    bool // with requested: the outstanding request is a try
	pending   int  // Request calls queued locally, not yet given to the machine
	requested bool // the machine has a request outstanding
	inside    bool // in the critical section
}

// orderRule is the order in which an algorithm promises to grant entries.
type orderRule uint8

const (
	orderNone        orderRule = iota // no order promised (Maekawa, token algorithms)
	orderTimestamp                    // (timestamp, id) order of the requests
	orderCoordinator                  // order of arrival of the requests at the coordinator
)

// coordinated is implemented by machines whose coordinator grants in the
// order requests arrive there; coordinatorID names the coordinator, or is
// -1 when the coordinator changes (centralized failover) and no order is
// promised across the changes.
type coordinated interface {
	coordinatorID() int
}

// idleChecker is implemented by machines that can say what must hold of
// them once the whole cluster is at rest, with nothing in flight and
// nobody waiting (a Maekawa voter's vote must be home). idleViolation
// returns "" when all is well.
type idleChecker interface {
	idleViolation() string
}

// describer is implemented by every machine: its state for people, one
// labelled field at a time.
type describer interface {
	describe() []Field
}

// A Field is one labelled part of a machine's state, for people: "clock"
// and "3", or "queue" and "[(1,0) (2,2)]".
type Field struct {
	Name  string
	Value string
}

// worldFaults are the faults of a World: those a Simulation sets by
// calling its methods, and those a checker may inject as transitions.
type worldFaults struct {
	armed      bool       // some fault was ever set: only then is a send checked
	loss       float64    // WithLoss: probability that a sent message is lost
	lossSrc    *rand.PCG  // the stream of loss draws; nil when loss is 0
	rng        *rand.Rand // draws from lossSrc
	drops      []dropRule // DropNext
	crashed    []bool     // crashed[i]: peer i has crashed; nil before the first crash; never written once shared
	group      []int      // group[i]: partition group of peer i; nil when whole
	lost       uint64     // messages lost
	lostTokens int        // token messages lost
	deadInside []int      // peers that crashed inside the critical section

	// Faults a checker may inject, as transitions.
	crashLeft int     // crashes still allowed
	crashWho  int     // the peer that may crash, or -1 for any
	crashIn   bool    // a peer may crash only inside the critical section
	loseLeft  int     // losses of a message in flight still allowed
	loseKind  Kind    // the kind that may be lost; 0 for any
	partLeft  int     // partitions still allowed
	partInto  [][]int // the groups such a partition cuts the network into
	healLeft  int     // heals still allowed, once partitioned
	parted    bool    // a partition transition was taken

	// The failure detector a checker models (CheckConfig.Detector):
	// suspects has bit i*n+j set while peer i suspects peer j, and
	// falseLeft counts the suspicions of live peers still allowed.
	detector  DetectorKind
	suspects  uint64
	falseLeft int
}

// checkStore is the World's model of a resource that checks fences
// (CheckConfig.Fenced): each peer's fence as the runtime keeps it, and a
// store that accepts a write only if its fence is at least the highest it
// has accepted. Its arrays are copied on write, as crashed is.
type checkStore struct {
	fence    []uint64 // fence[p]: highest fence peer p has seen or taken
	epochDue []bool   // epochDue[p]: p began to suspect a peer since its last entry (WithRecovery)
	hold     []uint64 // hold[p]: the fencing token of p's current hold
	writes   []int    // writes[p]: writes p has made in its current hold
	closed   []bool   // closed[p]: p's current hold wrote, and another hold wrote after it
	hi       uint64   // highest fence accepted
	last     int      // peer whose current hold made the last accepted write, or -1
	broken   bool     // a write of a closed hold was accepted: fenced safety is lost
}

// writesPerHold is how many writes a holder makes before it may leave.
const writesPerHold = 2

func newCheckStore(n int) *checkStore {
	return &checkStore{
		fence:    make([]uint64, n),
		epochDue: make([]bool, n),
		hold:     make([]uint64, n),
		writes:   make([]int, n),
		closed:   make([]bool, n),
		last:     -1,
	}
}

func (s *checkStore) clone() *checkStore {
	c := *s
	c.fence = slices.Clone(s.fence)
	c.epochDue = slices.Clone(s.epochDue)
	c.hold = slices.Clone(s.hold)
	c.writes = slices.Clone(s.writes)
	c.closed = slices.Clone(s.closed)
	return &c
}

// An envelope is a message in flight with its serial number.
type envelope struct {
	seq uint64
	m   Message
}

// A TransitionKind says what a Transition does.
type TransitionKind uint8

// The transition kinds. Later kinds (a suspicion, a TryLock) are added at
// the end, so that the letters of existing IDs never change.
const (
	TransRequest   TransitionKind = iota + 1 // the peer asks for the critical section
	TransDeliver                             // a message in flight reaches its receiver
	TransLeave                               // the peer inside leaves the critical section
	TransCrash                               // the peer crashes for good
	TransLose                                // a message in flight is lost
	TransTry                                 // the peer tries the critical section, as TryLock does
	TransPartition                           // the network splits into the checker's groups
	TransHeal                                // the partition ends
	TransSuspect                             // the peer's failure detector starts suspecting Target
	TransTrust                               // the peer's failure detector trusts Target again
	TransWrite                               // the peer inside writes to the fenced store
	numTransitionKinds
)

// transitionLetters are the first letters of transition IDs.
var transitionLetters = [numTransitionKinds]byte{
	TransRequest:   'r',
	TransDeliver:   'd',
	TransLeave:     'l',
	TransCrash:     'c',
	TransLose:      'x',
	TransTry:       't',
	TransPartition: 'p',
	TransHeal:      'h',
	TransSuspect:   's',
	TransTrust:     'u',
	TransWrite:     'w',
}

// A Transition is one move a World can make. Its ID is stable and small,
// fit for a URL: the same choices from the same start give the same IDs.
type Transition struct {
	Kind TransitionKind
	Peer int     // who requests, leaves or crashes; for a delivery or a loss, the receiver
	Seq  uint64  // TransDeliver and TransLose: the message's serial number
	Msg  Message // TransDeliver and TransLose: the message
	// Target is the peer suspected or trusted again, for TransSuspect
	// and TransTrust.
	Target int
}

// ID returns the transition's identity: a letter for the kind and the
// peer or the message's serial number, such as "r0" (P0 requests), "d7"
// (message 7 is delivered), "l2", "c1", "x7" or "t1" (P1 tries).
func (t Transition) ID() string {
	if t.Kind == 0 || t.Kind >= numTransitionKinds {
		return "?"
	}
	switch t.Kind {
	case TransDeliver, TransLose:
		return fmt.Sprintf("%c%d", transitionLetters[t.Kind], t.Seq)
	case TransPartition, TransHeal:
		return string(transitionLetters[t.Kind])
	case TransSuspect, TransTrust:
		return fmt.Sprintf("%c%d-%d", transitionLetters[t.Kind], t.Peer, t.Target)
	}
	return fmt.Sprintf("%c%d", transitionLetters[t.Kind], t.Peer)
}

// String describes the transition for people, such as
// "P1 receives request P0->P1 ts=1".
func (t Transition) String() string {
	switch t.Kind {
	case TransRequest:
		return fmt.Sprintf("P%d requests", t.Peer)
	case TransTry:
		return fmt.Sprintf("P%d tries", t.Peer)
	case TransDeliver:
		return fmt.Sprintf("P%d receives %s", t.Peer, formatMessage(t.Msg, true))
	case TransLeave:
		return fmt.Sprintf("P%d leaves", t.Peer)
	case TransCrash:
		return fmt.Sprintf("P%d crashes", t.Peer)
	case TransLose:
		return fmt.Sprintf("%s is lost", formatMessage(t.Msg, true))
	case TransPartition:
		return "the network splits"
	case TransHeal:
		return "the partition heals"
	case TransSuspect:
		return fmt.Sprintf("P%d suspects P%d", t.Peer, t.Target)
	case TransTrust:
		return fmt.Sprintf("P%d trusts P%d again", t.Peer, t.Target)
	case TransWrite:
		return fmt.Sprintf("P%d writes", t.Peer)
	}
	return fmt.Sprintf("Transition(%d)", uint8(t.Kind))
}

// A Step is what one Apply did: the transition taken, the peer whose
// machine entered in it (or -1; also when the entry broke a promise, so
// that the trace of a safety violation shows who went in), whether the try of the transition's peer was
// refused in it, and, when the world records a trace, its events.
type Step struct {
	Transition Transition
	Entered    int
	Refused    bool
	Events     []Event

	// Write, for a TransWrite: the fence written with and whether the
	// store accepted it.
	Fence    uint64
	Accepted bool

	overlap error // fenced store: the step let a second holder in, not fatal
}

// String describes the step, such as "P1 receives reply P0->P1, enters".
func (s Step) String() string {
	if s.Transition.Kind == TransWrite {
		if s.Accepted {
			return fmt.Sprintf("%v with fence %s, accepted", s.Transition, formatFence(s.Fence))
		}
		return fmt.Sprintf("%v with fence %s, refused", s.Transition, formatFence(s.Fence))
	}
	if s.Refused {
		return s.Transition.String() + ", refused"
	}
	if s.Entered >= 0 {
		if s.Entered == s.Transition.Peer {
			return s.Transition.String() + ", enters"
		}
		return fmt.Sprintf("%v, P%d enters", s.Transition, s.Entered)
	}
	return s.Transition.String()
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

// InFlight is a message in flight and its serial number.
type InFlight struct {
	Seq uint64
	Msg Message
}

// Unlimited, given to WithRequests or as CheckConfig.Requests, lets
// every peer request again whenever it is idle, for ever.
const Unlimited = -1

// WithRequests lets every peer of a World make k requests, each as a
// transition of its own (TransRequest) whenever the peer is idle; k may
// be Unlimited. The default is none: requests come only from
// World.Request. It applies to NewWorld only.
func WithRequests(k int) Option {
	return budgetOption("WithRequests", k, func(c *config) *int { return &c.requests })
}

// WithTries lets every peer of a World make k tries, each as a transition
// of its own (TransTry) whenever the peer is idle, beside its requests; k
// may be Unlimited. A try is what TryLock asks of the machine: it enters,
// or it is refused, without waiting for a holder to leave. The default is
// none. It applies to NewWorld only.
func WithTries(k int) Option {
	return budgetOption("WithTries", k, func(c *config) *int { return &c.tries })
}

// budgetOption is a World option that sets the budget field picks to k,
// which must be zero or more, or Unlimited.
func budgetOption(name string, k int, field func(*config) *int) Option {
	return Option{
		name:  name,
		where: forWorld,
		apply: func(c *config) error {
			if k < Unlimited {
				return fmt.Errorf("%w: %s(%d): want zero or more, or Unlimited", ErrInvalidConfig, name, k)
			}
			*field(c) = k
			return nil
		},
	}
}

// NewWorld builds the world of n peers running alg at its start: nothing
// requested and nothing in flight. It takes the algorithm's options and
// WithDelivery (DeliverFIFO, the default, for per-pair FIFO queues; any
// other policy for an unordered bag), WithUnsafeDelivery, WithoutTrace,
// WithLoss, WithSeed (for the loss draws), WithVariant, WithRequests and
// WithTries.
// Invalid n or options give an error wrapping ErrInvalidConfig.
func NewWorld(alg Algorithm, n int, opts ...Option) (*World, error) {
	cfg, err := newConfig(alg, n, forWorld, opts)
	if err != nil {
		return nil, err
	}
	return newWorld(cfg, nil)
}

// newWorld builds a world from a checked configuration; build, if set,
// replaces the machines (tests of the checks).
func newWorld(cfg *config, build func(id, n int) machine) (*World, error) {
	alg, n := cfg.alg, cfg.n
	if cfg.sim.delivery == DeliverReorder && alg.NeedsFIFO() && !cfg.sim.unsafe {
		return nil, fmt.Errorf("%w: %v needs FIFO channels and delivery %v would reorder them (add WithUnsafeDelivery to insist)",
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
	w.f.crashWho = -1
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
		Waiting: s.requested,
		Trying:  s.trying,
		Inside:  s.inside,
		Crashed: w.isCrashed(p),
		Pending: s.pending,
		Budget:  s.budget,
		Tries:   s.tries,
	}
}

// Describe returns peer p's machine state for people; p must be in range.
func (w *World) Describe(p int) []Field {
	if d, ok := w.ms[p].(describer); ok {
		return d.describe()
	}
	return nil
}

// Messages returns the messages in flight, in order of sending.
func (w *World) Messages() []InFlight {
	var all []InFlight
	add := func(es []envelope) {
		for _, e := range es {
			all = append(all, InFlight{Seq: e.seq, Msg: traced(e.m)})
		}
	}
	if w.queues != nil {
		for _, q := range w.queues {
			add(q)
		}
	} else {
		add(w.bag)
	}
	slices.SortFunc(all, func(a, b InFlight) int { return cmp.Compare(a.Seq, b.Seq) })
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
			st.ByKind[Kind(k).String()] = v
			st.Messages += v
		}
	}
	return st
}

// Events returns what has happened so far, in order; nil under
// WithoutTrace. The slice is the caller's.
func (w *World) Events() []Event {
	if !w.trace {
		return nil
	}
	return slices.Clone(w.events)
}

// Transitions returns every transition enabled now, in a canonical order:
// each peer's request or leave by peer, then the deliveries (by pair with
// FIFO queues, in the bag's order otherwise, one per distinct message),
// then the faults a checker may inject. It returns nil after a violation.
func (w *World) Transitions() []Transition {
	return w.appendTransitions(nil, true)
}

// appendTransitions appends the enabled transitions to trs, the fault
// transitions only if faults is set.
func (w *World) appendTransitions(trs []Transition, faults bool) []Transition {
	if w.err != nil {
		return trs
	}
	for p := range w.n {
		if w.isCrashed(p) {
			continue
		}
		s := &w.peers[p]
		switch {
		case s.inside && w.store != nil && w.store.writes[p] < writesPerHold:
			trs = append(trs, Transition{Kind: TransWrite, Peer: p})
		case s.inside:
			trs = append(trs, Transition{Kind: TransLeave, Peer: p})
		case !s.requested:
			if s.budget != 0 {
				trs = append(trs, Transition{Kind: TransRequest, Peer: p})
			}
			if s.tries != 0 {
				trs = append(trs, Transition{Kind: TransTry, Peer: p})
			}
		}
	}
	if w.queues != nil {
		for _, q := range w.queues {
			if len(q) > 0 {
				trs = append(trs, Transition{Kind: TransDeliver, Peer: q[0].m.To, Seq: q[0].seq, Msg: q[0].m})
			}
		}
	} else {
		for i, e := range w.bag {
			if !w.bagDup(i) {
				trs = append(trs, Transition{Kind: TransDeliver, Peer: e.m.To, Seq: e.seq, Msg: e.m})
			}
		}
	}
	trs = w.appendDetector(trs, false)
	if !faults {
		return trs
	}
	trs = w.appendDetector(trs, true)
	if w.f.crashLeft > 0 {
		for p := range w.n {
			if !w.isCrashed(p) && (w.f.crashWho < 0 || w.f.crashWho == p) && (!w.f.crashIn || w.peers[p].inside) {
				trs = append(trs, Transition{Kind: TransCrash, Peer: p})
			}
		}
	}
	if w.f.partLeft > 0 {
		trs = append(trs, Transition{Kind: TransPartition, Peer: -1})
	}
	if w.f.healLeft > 0 && w.f.group != nil {
		trs = append(trs, Transition{Kind: TransHeal, Peer: -1})
	}
	if w.f.loseLeft > 0 {
		lose := func(e envelope) {
			if w.f.loseKind == 0 || e.m.Kind == w.f.loseKind {
				trs = append(trs, Transition{Kind: TransLose, Peer: e.m.To, Seq: e.seq, Msg: e.m})
			}
		}
		if w.queues != nil {
			for _, q := range w.queues {
				for _, e := range q {
					lose(e)
				}
			}
		} else {
			for i, e := range w.bag {
				if !w.bagDup(i) {
					lose(e)
				}
			}
		}
	}
	return trs
}

// appendDetector appends the failure detector's transitions: with free
// unset those it owes (a suspicion of a crashed peer, a trust of a live
// suspected one), which happen eventually; with free set the false
// suspicions it may still make.
func (w *World) appendDetector(trs []Transition, free bool) []Transition {
	if w.f.detector == 0 || (free && (w.f.detector != DetectorImperfect || w.f.falseLeft <= 0)) {
		return trs
	}
	for i := range w.n {
		if w.isCrashed(i) {
			continue
		}
		for j := range w.n {
			if j == i {
				continue
			}
			sus, dead := w.suspects(i, j), w.isCrashed(j)
			switch {
			case !free && !sus && dead:
				trs = append(trs, Transition{Kind: TransSuspect, Peer: i, Target: j})
			case !free && sus && !dead:
				trs = append(trs, Transition{Kind: TransTrust, Peer: i, Target: j})
			case free && !sus && !dead:
				trs = append(trs, Transition{Kind: TransSuspect, Peer: i, Target: j})
			}
		}
	}
	return trs
}

// maxDetectorPeers is the largest cluster a World models a failure
// detector for: suspects keeps one bit per ordered pair in a uint64.
const maxDetectorPeers = 8

// suspectsAny reports whether peer i's failure detector suspects anyone.
func (w *World) suspectsAny(i int) bool {
	return w.f.suspects>>uint(i*w.n)&(1<<uint(w.n)-1) != 0
}

// write has peer, inside, write to the fenced store with the fence of its
// hold. The store accepts it if the fence is at least the highest it has
// accepted; fenced safety breaks if it accepts a write of a hold that
// another hold has written after.
func (w *World) write(peer int) Step {
	s := w.store
	s.writes[peer]++
	f := s.hold[peer]
	st := Step{Fence: f}
	if f < s.hi || f == 0 {
		return st
	}
	st.Accepted = true
	if s.closed[peer] {
		s.broken = true
		w.fail("fenced safety: the store accepted peer %d's write with fence %s after another holder's", peer, formatFence(f))
		return st
	}
	if s.last >= 0 && s.last != peer {
		s.closed[s.last] = true
	}
	s.last = peer
	s.hi = f
	return st
}

// formatFence writes a fence as epoch:count when it is past the first
// epoch (FenceEpoch), else as a plain number.
func formatFence(f uint64) string {
	if f < FenceEpoch {
		return fmt.Sprint(f)
	}
	return fmt.Sprintf("%d:%d", f/FenceEpoch, f%FenceEpoch)
}

// suspects reports whether peer i's failure detector suspects peer j.
func (w *World) suspects(i, j int) bool { return w.f.suspects&(1<<uint(i*w.n+j)) != 0 }

// bagDup reports whether an equal message comes earlier in the bag: two
// copies of one message give the same successor, so only the first is
// offered.
func (w *World) bagDup(i int) bool {
	for j := range i {
		if sameMessage(w.bag[j].m, w.bag[i].m) && (w.store == nil || w.bag[j].m.Fence == w.bag[i].m.Fence) {
			return true
		}
	}
	return false
}

// sameMessage reports whether a and b are equal but for Fence.
func sameMessage(a, b Message) bool {
	if a.Kind != b.Kind || a.From != b.From || a.To != b.To || a.TS != b.TS || a.Ref != b.Ref || (a.Token == nil) != (b.Token == nil) {
		return false
	}
	return a.Token == nil || (slices.Equal(a.Token.LN, b.Token.LN) && slices.Equal(a.Token.Queue, b.Token.Queue))
}

// Find returns the enabled transition whose ID is id.
func (w *World) Find(id string) (Transition, bool) {
	for _, t := range w.Transitions() {
		if t.ID() == id {
			return t, true
		}
	}
	return Transition{}, false
}

// Apply takes transition t, which must be enabled (as listed by
// Transitions, or equal to one of them), and returns what it did. An error
// wraps ErrViolation when the step broke a promise, and ErrInvalidConfig
// when t is not enabled; the world is unchanged in that case.
func (w *World) Apply(t Transition) (Step, error) {
	if w.err != nil {
		return Step{Entered: -1}, w.err
	}
	if !w.enabled(t) {
		return Step{Entered: -1}, fmt.Errorf("%w: transition %s (%v) is not enabled", ErrInvalidConfig, t.ID(), t)
	}
	return w.apply(t)
}

// apply is Apply for a transition known to be enabled.
func (w *World) apply(t Transition) (Step, error) {
	w.step++
	w.mark = len(w.events)
	w.soft = nil
	var wr Step
	switch t.Kind {
	case TransWrite:
		wr = w.write(t.Peer)
	case TransRequest:
		if w.peers[t.Peer].budget > 0 {
			w.peers[t.Peer].budget--
		}
		w.outstanding++
		w.ask(t.Peer)
	case TransLeave:
		w.leave(t.Peer)
	case TransDeliver:
		w.deliver(w.take(t.Msg.From, t.Msg.To, t.Seq))
	case TransTry:
		if w.peers[t.Peer].tries > 0 {
			w.peers[t.Peer].tries--
		}
		w.outstanding++
		w.try(t.Peer)
	case TransCrash:
		w.f.crashLeft--
		w.crash(t.Peer)
	case TransLose:
		w.f.loseLeft--
		w.f.armed = true
		w.lose(w.take(t.Msg.From, t.Msg.To, t.Seq))
	case TransPartition:
		w.f.partLeft--
		w.f.parted = true
		_ = w.partition(w.f.partInto) // the groups were checked by the checker
	case TransHeal:
		w.f.healLeft--
		w.f.group = nil
		w.record(Event{Kind: EventHeal, Peer: -1})
	case TransSuspect:
		if !w.isCrashed(t.Target) {
			w.f.falseLeft--
		}
		w.f.suspects |= 1 << uint(t.Peer*w.n+t.Target)
		w.record(Event{Kind: EventSuspect, Peer: t.Peer, Target: t.Target})
		if w.store != nil && w.cfg.recovery {
			w.store.epochDue[t.Peer] = true
		}
		w.stepMachine(t.Peer, event{kind: evSuspect, msg: Message{From: t.Target, To: t.Peer}})
	case TransTrust:
		w.f.suspects &^= 1 << uint(t.Peer*w.n+t.Target)
		w.record(Event{Kind: EventTrust, Peer: t.Peer, Target: t.Target})
		w.stepMachine(t.Peer, event{kind: evTrust, msg: Message{From: t.Target, To: t.Peer}})
	}
	if w.err == nil {
		w.err = w.checkTokens()
	}
	st := Step{Transition: t, Entered: -1, Refused: w.refusedAt == w.step, Fence: wr.Fence, Accepted: wr.Accepted, overlap: w.soft}
	if w.enteredAt == w.step {
		st.Entered = w.enteredBy
	}
	if w.trace {
		st.Events = slices.Clone(w.events[w.mark:])
	}
	return st, w.err
}

// enabled reports whether t is enabled now.
func (w *World) enabled(t Transition) bool {
	switch t.Kind {
	case TransPartition, TransHeal:
		return slices.Contains(w.appendTransitions(nil, true), Transition{Kind: t.Kind, Peer: -1})
	}
	if t.Peer < 0 || t.Peer >= w.n {
		return false
	}
	switch t.Kind {
	case TransRequest, TransLeave, TransCrash, TransTry, TransWrite:
		return slices.Contains(w.appendTransitions(nil, true), Transition{Kind: t.Kind, Peer: t.Peer})
	case TransSuspect, TransTrust:
		return slices.Contains(w.appendTransitions(nil, true), Transition{Kind: t.Kind, Peer: t.Peer, Target: t.Target})
	case TransDeliver, TransLose:
		m := t.Msg
		if m.From < 0 || m.From >= w.n || m.To != t.Peer || (t.Kind == TransLose && (w.f.loseLeft <= 0 || (w.f.loseKind != 0 && m.Kind != w.f.loseKind))) {
			return false
		}
		if w.queues != nil {
			q := w.queues[m.From*w.n+m.To]
			if t.Kind == TransDeliver {
				return len(q) > 0 && q[0].seq == t.Seq
			}
			return slices.ContainsFunc(q, func(e envelope) bool { return e.seq == t.Seq })
		}
		return slices.ContainsFunc(w.bag, func(e envelope) bool { return e.seq == t.Seq })
	}
	return false
}

// take removes the message with serial seq from the network and returns
// it; it must be there.
func (w *World) take(from, to int, seq uint64) envelope {
	if w.queues == nil {
		for k, e := range w.bag {
			if e.seq == seq {
				return w.takeBag(k)
			}
		}
		panic("dmutex: world: message not in flight")
	}
	pair := from*w.n + to
	q := w.queues[pair]
	if q[0].seq == seq {
		return w.popPair(pair)
	}
	k := slices.IndexFunc(q, func(e envelope) bool { return e.seq == seq })
	e := q[k]
	w.queues[pair] = slices.Concat(q[:k], q[k+1:])
	w.qown[pair] = true
	return e
}

// takeBag removes and returns the bag's message at index k, moving the
// last one into its place.
func (w *World) takeBag(k int) envelope {
	if !w.bagOwn {
		w.bag = slices.Clone(w.bag)
		w.bagOwn = true
	}
	e := w.bag[k]
	last := len(w.bag) - 1
	w.bag[k] = w.bag[last]
	w.bag[last] = envelope{}
	w.bag = w.bag[:last]
	return e
}

// popPair removes and returns the oldest message of a non-empty pair.
func (w *World) popPair(pair int) envelope {
	q := w.queues[pair]
	e := q[0]
	if w.qown[pair] {
		q[0] = envelope{} // drop the token pointer
	}
	if len(q) == 1 {
		if w.qown[pair] {
			w.queues[pair] = q[:0]
		} else {
			w.queues[pair] = nil
		}
		i, last := w.pos[pair], len(w.active)-1
		moved := w.active[last]
		w.active[i] = moved
		w.pos[moved] = i
		w.active = w.active[:last]
		w.pos[pair] = -1
	} else {
		w.queues[pair] = q[1:]
	}
	return e
}

// Request has peer ask for the critical section now, outside the
// transitions: its machine sends its messages into the network, and
// nothing is delivered yet. If the peer is already waiting or inside, the
// request is queued at the peer and made when the peer leaves. A peer out
// of range is an error wrapping ErrInvalidConfig, and so is a crashed one;
// after a violation Request returns it.
func (w *World) Request(peer int) error {
	if peer < 0 || peer >= w.n {
		return fmt.Errorf("%w: request by peer %d out of range [0, %d)", ErrInvalidConfig, peer, w.n)
	}
	if w.err != nil {
		return w.err
	}
	if w.isCrashed(peer) {
		return fmt.Errorf("%w: request by peer %d, which has crashed", ErrInvalidConfig, peer)
	}
	w.outstanding++
	p := &w.peers[peer]
	if p.requested || p.inside {
		p.pending++
		return nil
	}
	w.ask(peer)
	if w.err == nil {
		w.err = w.checkTokens()
	}
	return w.err
}

// ask gives one request to peer's machine.
func (w *World) ask(peer int) {
	w.peers[peer].requested = true
	w.record(Event{Kind: EventRequest, Peer: peer})
	if w.order == orderCoordinator && peer == w.coordinator() {
		w.arrivals = append(slices.Clip(w.arrivals), peer)
	}
	w.stepMachine(peer, event{kind: evRequest})
}

// try gives one try to peer's machine.
func (w *World) try(peer int) {
	w.peers[peer].requested = true
	w.peers[peer].trying = true
	w.record(Event{Kind: EventTry, Peer: peer})
	if w.order == orderCoordinator && peer == w.coordinator() {
		w.arrivals = append(slices.Clip(w.arrivals), peer)
	}
	w.stepMachine(peer, event{kind: evTry})
}

// refuse records that peer's machine refused its try.
func (w *World) refuse(peer int) {
	p := &w.peers[peer]
	if !p.trying {
		w.fail("peer %d refused a try it did not make", peer)
		return
	}
	p.requested, p.trying = false, false
	w.outstanding--
	w.idle = 0
	w.refusedAt = w.step
	w.record(Event{Kind: EventRefused, Peer: peer})
	if i := slices.Index(w.arrivals, peer); i >= 0 {
		w.arrivals = slices.Delete(slices.Clone(w.arrivals), i, i+1)
	}
}

func (w *World) coordinator() int { return w.ms[0].(coordinated).coordinatorID() }

// stepMachine steps peer's machine with ev and puts its output into
// effect.
func (w *World) stepMachine(peer int, ev event) {
	w.acts++
	m := w.machine(peer)
	w.out.reset()
	m.step(ev, &w.out)
	for _, msg := range w.out.msgs {
		w.send(peer, msg)
	}
	if w.out.entered {
		w.enter(peer, ev.kind)
	}
	if w.out.refused {
		w.refuse(peer)
	}
}

func (w *World) send(peer int, m Message) {
	if m.From != peer || m.To < 0 || m.To >= w.n || m.To == peer || !m.Kind.Valid() {
		w.fail("peer %d sent a malformed message: %s", peer, formatMessage(m, true))
		return
	}
	w.sent[m.Kind]++
	w.seq++
	if w.store != nil {
		m.Fence = w.store.fence[peer]
	}
	e := envelope{seq: w.seq, m: m}
	if isTokenKind(m.Kind) {
		w.inFlight++
	}
	if w.trace {
		w.record(Event{Kind: EventSend, Peer: peer, Seq: e.seq, Msg: traced(m)})
	}
	if w.f.armed && w.lostOnSend(m) {
		w.lose(e)
		return
	}
	if w.queues == nil {
		if !w.bagOwn {
			w.bag = slices.Clip(w.bag)
			w.bagOwn = true
		}
		w.bag = append(w.bag, e)
		return
	}
	pair := m.From*w.n + m.To
	if !w.qown[pair] {
		w.queues[pair] = slices.Clip(w.queues[pair])
		w.qown[pair] = true
	}
	w.queues[pair] = append(w.queues[pair], e)
	if w.pos[pair] < 0 {
		w.pos[pair] = len(w.active)
		w.active = append(w.active, pair)
	}
}

// deliver hands e, just taken from the network, to its receiver.
func (w *World) deliver(e envelope) {
	if isTokenKind(e.m.Kind) {
		w.inFlight--
	}
	to := e.m.To
	if w.trace {
		w.record(Event{Kind: EventReceive, Peer: to, Seq: e.seq, Msg: traced(e.m)})
	}
	w.idle++
	if w.store != nil && e.m.Fence > w.store.fence[to] {
		w.store.fence[to] = e.m.Fence
	}
	if w.order == orderCoordinator && e.m.Kind == KindRequest && to == w.coordinator() {
		w.arrivals = append(slices.Clip(w.arrivals), e.m.From)
	}
	w.stepMachine(to, event{kind: evMessage, msg: e.m})
	if w.order == orderCoordinator && e.m.Kind == KindTry && to == w.coordinator() &&
		!slices.ContainsFunc(w.out.msgs, func(m Message) bool { return m.Kind == KindBusy }) {
		// A try is never queued: for the order, it arrives when granted.
		w.arrivals = append(slices.Clip(w.arrivals), e.m.From)
	}
}

func (w *World) enter(peer int, cause eventKind) {
	w.enteredAt, w.enteredBy = w.step, peer
	p := &w.peers[peer]
	switch {
	case cause == evRelease:
		w.fail("peer %d entered on leaving", peer)
		return
	case p.inside:
		w.fail("peer %d entered while already inside", peer)
		return
	case !p.requested:
		w.fail("peer %d entered without a request", peer)
		return
	case len(w.inside) > 0 && w.store == nil:
		w.fail("peer %d entered while peer %d was inside", peer, w.inside[0])
		return
	case len(w.inside) > 0 && w.soft == nil:
		// With the fenced store, the store is what must stay safe: the
		// overlap is recorded, and the run goes on.
		w.soft = fmt.Errorf("%w: step %d: peer %d entered while peer %d was inside", ErrViolation, w.step, peer, w.inside[0])
	case len(w.f.deadInside) > 0:
		w.fail("peer %d entered while peer %d, which crashed inside, never left", peer, w.f.deadInside[0])
		return
	}
	switch w.order {
	case orderTimestamp:
		ts := w.ms[peer].(timestamped).requestTS()
		if w.lastID >= 0 && !before(w.lastTS, w.lastID, ts, peer) {
			msg := fmt.Sprintf("peer %d entered with request (%d, %d) after the younger (%d, %d)", peer, ts, peer, w.lastTS, w.lastID)
			if w.store == nil {
				w.fail("%s", msg)
				return
			}
			if w.soft == nil {
				w.soft = fmt.Errorf("%w: step %d: %s", ErrViolation, w.step, msg)
			}
		}
		w.lastTS, w.lastID = ts, peer
	case orderCoordinator:
		if len(w.arrivals) == 0 || w.arrivals[0] != peer {
			w.fail("peer %d entered, but the coordinator had the requests of %v first", peer, w.arrivals)
			return
		}
		w.arrivals = w.arrivals[1:]
	}
	p.requested, p.trying = false, false
	p.inside = true
	w.inside = append(w.inside, peer)
	if s := w.store; s != nil {
		if s.fence[peer] < MaxFence {
			s.fence[peer] = entryFence(w.ms[peer], s.fence[peer], s.epochDue[peer] && w.suspectsAny(peer), peer, w.n)
		}
		s.epochDue[peer] = false
		s.hold[peer] = s.fence[peer]
		s.writes[peer] = 0
		s.closed[peer] = false
		if s.last == peer {
			s.last = -1 // its last hold is over
		}
	}
	w.entries++
	w.idle = 0
	w.record(Event{Kind: EventEnter, Peer: peer})
}

func (w *World) leave(peer int) {
	w.inside = slices.DeleteFunc(w.inside, func(q int) bool { return q == peer })
	p := &w.peers[peer]
	p.inside = false
	w.outstanding--
	w.idle = 0
	w.record(Event{Kind: EventLeave, Peer: peer})
	w.stepMachine(peer, event{kind: evRelease})
	if w.err == nil && p.pending > 0 {
		p.pending--
		w.ask(peer)
	}
}

// checkTokens checks that a token algorithm has exactly one token.
func (w *World) checkTokens() error {
	if !w.tokens {
		return nil
	}
	if w.regen {
		return w.checkEpochs()
	}
	held := 0
	for _, m := range w.ms {
		if m.(tokenHolder).hasToken() {
			held++
		}
	}
	switch {
	case w.f.lostTokens > 0 && held+w.inFlight+w.f.lostTokens != 1:
		return fmt.Errorf("%w: step %d: %d tokens held, %d in flight and %d lost, want exactly one in all",
			ErrViolation, w.step, held, w.inFlight, w.f.lostTokens)
	case held+w.inFlight+w.f.lostTokens != 1:
		return fmt.Errorf("%w: step %d: %d tokens held and %d in flight, want exactly one in all",
			ErrViolation, w.step, held, w.inFlight)
	}
	return nil
}

// checkEpochs checks that no two tokens of one epoch exist, held (by a
// live or crashed peer) or in flight, for machines that regenerate the
// token.
func (w *World) checkEpochs() error {
	var epochs []uint64
	for _, m := range w.ms {
		if e, ok := m.(regenerator).heldEpoch(); ok {
			epochs = append(epochs, e)
		}
	}
	r := w.ms[0].(regenerator)
	add := func(es []envelope) {
		for _, e := range es {
			if isTokenKind(e.m.Kind) {
				epochs = append(epochs, r.sentEpoch(e.m))
			}
		}
	}
	if w.queues != nil {
		for _, pair := range w.active {
			add(w.queues[pair])
		}
	} else {
		add(w.bag)
	}
	slices.Sort(epochs)
	for i := 1; i < len(epochs); i++ {
		if epochs[i] == epochs[i-1] {
			return fmt.Errorf("%w: step %d: two tokens of epoch %d", ErrViolation, w.step, epochs[i])
		}
	}
	return nil
}

// quiet reports whether no peer can act and nothing is in flight: no
// transition but the faults is enabled.
func (w *World) quiet() bool {
	if len(w.inside) > 0 || len(w.active) > 0 || len(w.bag) > 0 {
		return false
	}
	for p := range w.n {
		if s := &w.peers[p]; !w.isCrashed(p) && !s.requested && s.budget != 0 {
			return false
		}
	}
	return len(w.appendDetector(nil, false)) == 0
}

// finalCheck checks a world in which nothing is left to do (quiet): any
// request still outstanding can never be served, which is a deadlock
// without faults and wraps ErrBlocked after one; and machines with a
// promise for a cluster at rest must keep it.
func (w *World) finalCheck() error {
	if w.err != nil {
		return w.err
	}
	if w.outstanding == 0 {
		if w.faulted() || w.restChecked == w.acts+1 {
			return nil
		}
		for p, m := range w.ms {
			if ic, ok := m.(idleChecker); ok {
				if v := ic.idleViolation(); v != "" {
					w.fail("at rest, peer %d %s", p, v)
					return w.err
				}
			}
		}
		// Nothing has stepped since: a scheduler polling a world at rest
		// need not check it again.
		w.restChecked = w.acts + 1
		return nil
	}
	waiting := w.Waiting()
	if w.faulted() && w.f.detector == 0 {
		return w.blocked(waiting)
	}
	w.err = fmt.Errorf("%w: deadlock after step %d: peers %v wait and no message is in flight", ErrViolation, w.step, waiting)
	return w.err
}

// Waiting returns the peers, crashed ones left out, that have a request
// outstanding, in increasing order.
func (w *World) Waiting() []int {
	var waiting []int
	for i, p := range w.peers {
		if !w.isCrashed(i) && (p.requested || p.pending > 0) {
			waiting = append(waiting, i)
		}
	}
	return waiting
}

func (w *World) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("%w: step %d: %s", ErrViolation, w.step, fmt.Sprintf(format, args...))
	}
}

func (w *World) record(e Event) {
	if !w.trace {
		return
	}
	e.Step = w.step
	w.events = append(w.events, e)
}

// isTokenKind reports whether messages of kind k carry the token.
func isTokenKind(k Kind) bool { return k == KindToken || k == KindPrivilege }

// traced returns m with a private copy of its token, so that the record
// keeps the token as it was sent.
func traced(m Message) Message {
	m.Token = m.Token.clone()
	return m
}

// Faults.

// isCrashed reports whether peer has crashed.
func (w *World) isCrashed(peer int) bool {
	return w.f.crashed != nil && w.f.crashed[peer]
}

// faulted reports whether a fault has struck: a message lost, a peer
// crashed, or a checker's partition.
func (w *World) faulted() bool {
	return w.f.lost > 0 || w.f.crashed != nil || w.f.parted
}

// lostOnSend reports whether the network loses m as it is sent, in the
// runtime's order: a cut link first, then DropNext rules, then WithLoss.
func (w *World) lostOnSend(m Message) bool {
	if w.cut(m.From, m.To) {
		return true
	}
	for i := range w.f.drops {
		if r := &w.f.drops[i]; r.count > 0 && (r.match == nil || r.match(m)) {
			r.count--
			return true
		}
	}
	return w.f.rng != nil && w.f.rng.Float64() < w.f.loss
}

// cut reports whether the link from -> to is down.
func (w *World) cut(from, to int) bool {
	return w.isCrashed(from) || w.isCrashed(to) || (w.f.group != nil && w.f.group[from] != w.f.group[to])
}

// lose records that message e, sent and counted, is lost.
func (w *World) lose(e envelope) {
	if isTokenKind(e.m.Kind) {
		w.inFlight--
		w.f.lostTokens++
	}
	w.f.lost++
	if w.trace {
		w.record(Event{Kind: EventLost, Peer: e.m.To, Seq: e.seq, Msg: traced(e.m)})
	}
}

// crash stops peer for good; see Simulation.Crash.
func (w *World) crash(peer int) {
	crashed := make([]bool, w.n)
	if w.f.crashed != nil {
		copy(crashed, w.f.crashed)
	}
	crashed[peer] = true
	w.f.crashed = crashed
	w.f.armed = true
	w.record(Event{Kind: EventCrash, Peer: peer})
	p := &w.peers[peer]
	if p.inside {
		w.inside = slices.DeleteFunc(w.inside, func(q int) bool { return q == peer })
		if w.f.detector == 0 {
			// With a failure detector, a peer that crashed inside has
			// left: the survivors may enter once they suspect it.
			w.f.deadInside = append(slices.Clip(w.f.deadInside), peer)
		}
		w.outstanding--
	}
	if p.requested {
		w.outstanding--
	}
	w.outstanding -= p.pending
	p.pending = 0
	p.budget = 0
	w.purge(func(from, to int) bool { return from == peer || to == peer })
}

// partition cuts the network into the given groups; see
// Simulation.Partition.
func (w *World) partition(groups [][]int) error {
	group := make([]int, w.n)
	for i := range group {
		group[i] = -1
	}
	for g, ids := range groups {
		for _, id := range ids {
			if id < 0 || id >= w.n {
				return fmt.Errorf("%w: partition names peer %d, out of range [0, %d)", ErrInvalidConfig, id, w.n)
			}
			if group[id] >= 0 {
				return fmt.Errorf("%w: partition names peer %d twice", ErrInvalidConfig, id)
			}
			group[id] = g
		}
	}
	if w.err != nil {
		return w.err
	}
	resolved := make([][]int, len(groups)+1)
	for i := range group {
		if group[i] < 0 {
			group[i] = len(groups)
		}
		resolved[group[i]] = append(resolved[group[i]], i)
	}
	resolved = slices.DeleteFunc(resolved, func(g []int) bool { return len(g) == 0 })
	w.f.group = group
	w.f.armed = true
	w.record(Event{Kind: EventPartition, Peer: -1, Groups: resolved})
	w.purge(func(from, to int) bool { return group[from] != group[to] })
	w.err = w.checkTokens()
	return w.err
}

// purge loses every message in flight on a link that cut reports down, in
// order of sending.
func (w *World) purge(cut func(from, to int) bool) {
	var lost []envelope
	if w.queues != nil {
		for i := 0; i < len(w.active); {
			pair := w.active[i]
			if !cut(pair/w.n, pair%w.n) {
				i++
				continue
			}
			lost = append(lost, w.queues[pair]...)
			if w.qown[pair] {
				clear(w.queues[pair])
				w.queues[pair] = w.queues[pair][:0]
			} else {
				w.queues[pair] = nil
			}
			last := len(w.active) - 1
			moved := w.active[last]
			w.active[i] = moved
			w.pos[moved] = i
			w.active = w.active[:last]
			w.pos[pair] = -1
		}
	} else {
		if !w.bagOwn {
			w.bag = slices.Clone(w.bag)
			w.bagOwn = true
		}
		kept := w.bag[:0]
		for _, e := range w.bag {
			if cut(e.m.From, e.m.To) {
				lost = append(lost, e)
			} else {
				kept = append(kept, e)
			}
		}
		clear(w.bag[len(kept):])
		w.bag = kept
	}
	slices.SortFunc(lost, func(a, b envelope) int { return cmp.Compare(a.seq, b.seq) })
	for _, e := range lost {
		w.lose(e)
	}
}

// blocked is the error for a world that can go no further after a fault.
func (w *World) blocked(waiting []int) error {
	var crashed []int
	for i := range w.n {
		if w.isCrashed(i) {
			crashed = append(crashed, i)
		}
	}
	return fmt.Errorf("%w: after step %d: peers %v wait forever (messages lost: %d, peers crashed: %v)",
		ErrBlocked, w.step, waiting, w.f.lost, crashed)
}

// State encoding.

// appendState appends w's canonical encoding to b: two worlds encode
// equally exactly when they behave the same from now on, whatever their
// messages' serial numbers. scratch is reused for the bag's sorting.
func (w *World) appendState(b []byte, scratch *[][]byte, sbuf *[]byte, stamps *stampMap) []byte {
	var noTries bool
	var sm *stampMap
	if w.clocks {
		noTries = w.triesOver()
		w.stamps(stamps, noTries)
		sm = stamps
	}
	for p, m := range w.ms {
		if w.clocks {
			*sbuf = m.(clockMachine).appendStateIn((*sbuf)[:0], noTries, sm)
		} else {
			*sbuf = m.appendState((*sbuf)[:0])
		}
		b = appendInt(b, len(*sbuf))
		b = append(b, *sbuf...)
		s := &w.peers[p]
		b = appendInt(b, s.budget)
		b = appendInt(b, s.tries)
		b = appendBool(b, s.trying)
		b = appendInt(b, s.pending)
		b = appendBool(b, s.requested)
		b = appendBool(b, s.inside)
		b = appendBool(b, w.isCrashed(p))
	}
	if w.queues != nil {
		for _, q := range w.queues {
			b = appendInt(b, len(q))
			for _, e := range q {
				b = appendMessage(b, sm.message(e.m))
				if w.store != nil {
					b = appendUint(b, e.m.Fence)
				}
			}
		}
	} else {
		// A multiset: the messages' encodings in sorted order.
		bufs := (*scratch)[:0]
		for i, e := range w.bag {
			var mb []byte
			if i < cap(bufs) {
				mb = bufs[:i+1][i][:0]
			}
			mb = appendMessage(mb, sm.message(e.m))
			if w.store != nil {
				mb = appendUint(mb, e.m.Fence)
			}
			bufs = append(bufs, mb)
		}
		slices.SortFunc(bufs, bytes.Compare)
		b = appendInt(b, len(bufs))
		for _, mb := range bufs {
			b = append(b, mb...)
		}
		*scratch = bufs
	}
	switch w.order {
	case orderTimestamp:
		if w.lastID >= 0 {
			b = appendUint(b, sm.of(w.lastTS))
		}
		b = appendInt(b, w.lastID)
	case orderCoordinator:
		b = appendInts(b, w.arrivals)
	}
	b = appendInt(b, w.f.lostTokens)
	b = appendBool(b, w.faulted())
	b = appendInt(b, w.f.crashLeft)
	b = appendInt(b, w.f.loseLeft)
	b = appendInt(b, w.f.partLeft)
	b = appendInt(b, w.f.healLeft)
	b = appendInts(b, w.f.deadInside)
	if w.f.detector != 0 {
		b = appendUint(b, w.f.suspects)
		b = appendInt(b, w.f.falseLeft)
	}
	if w.f.group != nil {
		b = appendInts(b, w.f.group)
	}
	if s := w.store; s != nil {
		b = appendUints(b, s.fence)
		b = appendBools(b, s.epochDue)
		b = appendUints(b, s.hold)
		b = appendInts(b, s.writes)
		b = appendBools(b, s.closed)
		b = appendUint(b, s.hi)
		b = appendInt(b, s.last)
	}
	return b
}

// A stampMap renames the stamps of a world's encoding in order: the
// least becomes 0 and each gap to the next is kept, up to a cap (see
// World.stampGap). Without a cap that is the shift clockMachine allows.
type stampMap struct {
	vals []uint64 // the stamps encoded, sorted and distinct
	to   []uint64 // to[i] is what vals[i] is written as
}

// of returns what stamp v is written as; a nil map leaves it as it is.
func (sm *stampMap) of(v uint64) uint64 {
	if sm == nil {
		return v
	}
	i, ok := slices.BinarySearch(sm.vals, v)
	if !ok {
		panic(fmt.Sprintf("dmutex: internal error: stamp %d is not among the world's %v", v, sm.vals))
	}
	return sm.to[i]
}

// message returns m with its stamps renamed: TS, and Ref if it is not
// zero, as one more than its name, so that a Ref never reads as "none"
// (the least stamp is named 0).
func (sm *stampMap) message(m Message) Message {
	m.TS = sm.of(m.TS)
	if m.Ref != 0 {
		m.Ref = sm.of(m.Ref) + 1
	}
	return m
}

// stamps fills sm from every stamp the world encodes, with clocks set:
// every clockMachine's, the TS and non-zero Ref of every message in
// flight, and the latest entry's stamp once there is one.
func (w *World) stamps(sm *stampMap, noTries bool) {
	vals := sm.vals[:0]
	for _, m := range w.ms {
		vals = m.(clockMachine).appendStamps(vals, noTries)
	}
	msg := func(m Message) {
		vals = append(vals, m.TS)
		if m.Ref != 0 {
			vals = append(vals, m.Ref)
		}
	}
	for _, q := range w.queues {
		for _, e := range q {
			msg(e.m)
		}
	}
	for _, e := range w.bag {
		msg(e.m)
	}
	if w.order == orderTimestamp && w.lastID >= 0 {
		vals = append(vals, w.lastTS)
	}
	slices.Sort(vals)
	vals = slices.Compact(vals)
	gap := w.stampGap()
	to := sm.to[:0]
	for i, v := range vals {
		if i == 0 {
			to = append(to, 0)
			continue
		}
		to = append(to, to[i-1]+min(v-vals[i-1], gap))
	}
	sm.vals, sm.to = vals, to
}

// stampGap is the widest gap between two stamps next to each other in
// order that the encoding keeps, with the checker's StampGaps; wider ones
// are written as that gap. Every stamp a clockMachine will make is a stamp
// it holds now (or one in flight to it) plus one per step on a causal
// chain of steps, and no chain is longer than the steps left in the whole
// run, E. Two stamps further apart than E therefore compare the same way
// as anything made from them ever will, and keeping such a gap at E+1
// keeps every comparison, max and +1 the machines will do: the states
// that differ only in how wide those gaps are behave the same. E is
// bounded by entryEvents for every entry not yet over (budgets and tries
// left, and requests out or inside) plus the messages in flight. With a
// budget without end, or without StampGaps, there is no cap.
func (w *World) stampGap() uint64 {
	if !w.cfg.stampGaps {
		return ^uint64(0)
	}
	entries := 0
	for p := range w.peers {
		s := &w.peers[p]
		if s.budget < 0 || s.tries < 0 {
			return ^uint64(0)
		}
		entries += s.budget + s.tries
		if s.requested || s.inside {
			entries++
		}
	}
	inFlight := len(w.bag)
	for _, q := range w.queues {
		inFlight += len(q)
	}
	return uint64(entries*w.ms[0].(clockMachine).entryEvents(w.n)+inFlight) + 1
}

// triesOver reports whether no try will be made or delivered again: no
// peer may still try, and no try is in flight. The encoding of the
// budgets and of the messages in flight implies it.
func (w *World) triesOver() bool {
	for p := range w.peers {
		if w.peers[p].tries != 0 && !w.isCrashed(p) {
			return false
		}
	}
	for _, q := range w.queues {
		for _, e := range q {
			if e.m.Kind == KindTry {
				return false
			}
		}
	}
	for _, e := range w.bag {
		if e.m.Kind == KindTry {
			return false
		}
	}
	return true
}

// appendMessage appends a canonical, self-delimiting encoding of m; Fence
// is left out, since only the runtime sets it.
func appendMessage(b []byte, m Message) []byte {
	b = append(b, byte(m.Kind))
	b = appendInt(b, m.From)
	b = appendInt(b, m.To)
	b = appendUint(b, m.TS)
	b = appendUint(b, m.Ref)
	b = appendBool(b, m.Token != nil)
	if m.Token != nil {
		b = appendUints(b, m.Token.LN)
		b = appendInts(b, m.Token.Queue)
	}
	return b
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
