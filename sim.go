package dmutex

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
)

// ErrViolation is wrapped by every error a Simulation returns because the
// algorithm broke one of its promises: two peers in the critical section at
// once, a deadlock, a livelock, an entry out of (timestamp, id) order, or a
// token lost or duplicated. The wrapping error says what happened and at
// which step.
var ErrViolation = errors.New("dmutex: protocol violation")

// A Delivery is the order in which a Simulation delivers the messages in
// flight. The zero Delivery is DeliverFIFO.
type Delivery uint8

// The delivery policies.
const (
	// DeliverFIFO keeps per-pair FIFO order: of the messages from one peer
	// to another, the oldest is delivered first. Which pair goes next, and
	// whether a peer inside leaves instead, is a seeded random choice.
	DeliverFIFO Delivery = iota

	// DeliverReorder may deliver any message in flight next, chosen at
	// random: a later message can overtake an earlier one between the
	// same two peers. Algorithms that need FIFO channels refuse it unless
	// WithUnsafeDelivery is given.
	DeliverReorder

	// DeliverLockStep runs in rounds: each round delivers every message
	// that was in flight when the round began, in the order they were
	// sent, and then makes every peer that was inside when the round began
	// leave. Messages sent during a round wait for the next one. It uses no
	// randomness and keeps per-pair FIFO order.
	DeliverLockStep

	numDeliveries
)

var deliveryNames = [numDeliveries]string{
	DeliverFIFO:     "fifo",
	DeliverReorder:  "reorder",
	DeliverLockStep: "lock-step",
}

// String returns the policy's name, such as "fifo".
func (d Delivery) String() string {
	if d < numDeliveries {
		return deliveryNames[d]
	}
	return fmt.Sprintf("Delivery(%d)", uint8(d))
}

// simConfig is the part of config that only a Simulation reads.
type simConfig struct {
	seed     uint64
	delivery Delivery
	unsafe   bool    // WithUnsafeDelivery: reorder even if the algorithm needs FIFO
	noTrace  bool    // WithoutTrace
	loss     float64 // WithLoss
}

// WithSeed sets the seed of a Simulation's random choices. Two simulations
// with the same algorithm, size, options, seed and calls behave the same,
// event for event. The default seed is 0. It applies to NewSimulation only.
func WithSeed(seed int64) Option {
	return Option{
		name:  "WithSeed",
		where: forSimulation,
		apply: func(c *config) error { c.sim.seed = uint64(seed); return nil },
	}
}

// WithDelivery sets a Simulation's delivery policy; the default is
// DeliverFIFO. It applies to NewSimulation only.
func WithDelivery(d Delivery) Option {
	return Option{
		name:  "WithDelivery",
		where: forSimulation,
		apply: func(c *config) error {
			if d >= numDeliveries {
				return fmt.Errorf("%w: WithDelivery(%d): unknown delivery policy", ErrInvalidConfig, uint8(d))
			}
			c.sim.delivery = d
			return nil
		},
	}
}

// WithUnsafeDelivery lets a Simulation reorder the messages of an algorithm
// that needs FIFO channels (see Algorithm.NeedsFIFO). Such a run may well
// break mutual exclusion: that is its purpose, to show why the algorithm
// needs FIFO. It applies to NewSimulation only.
func WithUnsafeDelivery() Option {
	return Option{
		name:  "WithUnsafeDelivery",
		where: forSimulation,
		apply: func(c *config) error { c.sim.unsafe = true; return nil },
	}
}

// WithoutTrace stops a Simulation from recording its events, which long
// runs cannot afford to keep; Events then returns nil, and WriteLog and
// WriteMermaid return an error. It applies to NewSimulation only.
func WithoutTrace() Option {
	return Option{
		name:  "WithoutTrace",
		where: forSimulation,
		apply: func(c *config) error { c.sim.noTrace = true; return nil },
	}
}

// An EventKind says what an Event records.
type EventKind uint8

// The event kinds.
const (
	EventRequest   EventKind = iota + 1 // the peer's machine is asked for the critical section
	EventSend                           // the peer sent Msg; it is now in flight
	EventReceive                        // Msg was delivered to the peer
	EventEnter                          // the peer entered the critical section
	EventLeave                          // the peer left the critical section
	EventLost                           // Msg, on its way to the peer, was lost to a fault
	EventCrash                          // the peer crashed
	EventPartition                      // the network was cut into Groups
	EventHeal                           // the partition ended
)

var eventNames = [...]string{
	EventRequest:   "request",
	EventSend:      "send",
	EventReceive:   "receive",
	EventEnter:     "enter",
	EventLeave:     "leave",
	EventLost:      "lost",
	EventCrash:     "crash",
	EventPartition: "partition",
	EventHeal:      "heal",
}

// String returns the kind's name, such as "receive".
func (k EventKind) String() string {
	if k >= EventRequest && k <= EventHeal {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// An Event is one thing that happened in a Simulation.
type Event struct {
	Step   int       // the scheduling step it happened in; 0 for calls before the first step
	Kind   EventKind // what happened
	Peer   int       // the peer that requested, sent, received, entered, left or crashed, or a lost message's addressee; -1 for EventPartition and EventHeal
	Seq    uint64    // for EventSend, EventReceive and EventLost: the message's serial number, from 1 in order of sending
	Msg    Message   // for EventSend, EventReceive and EventLost: the message, as sent
	Groups [][]int   // for EventPartition: the groups, every peer in one of them
}

// String formats e as one line of the event log, such as
// "   3 P1 receive m2 request P0->P1 ts=1".
func (e Event) String() string {
	switch e.Kind {
	case EventSend, EventReceive, EventLost:
		return fmt.Sprintf("%4d P%d %v m%d %s", e.Step, e.Peer, e.Kind, e.Seq, formatMessage(e.Msg, true))
	case EventPartition:
		return fmt.Sprintf("%4d partition %v", e.Step, e.Groups)
	case EventHeal:
		return fmt.Sprintf("%4d heal", e.Step)
	}
	return fmt.Sprintf("%4d P%d %v", e.Step, e.Peer, e.Kind)
}

// formatMessage describes m as "request P0->P1 ts=1 ref=0", leaving out
// the ends when ends is false and zero fields in any case.
func formatMessage(m Message, ends bool) string {
	s := m.Kind.String()
	if ends {
		s += fmt.Sprintf(" P%d->P%d", m.From, m.To)
	}
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

// An envelope is a message in flight with its serial number.
type envelope struct {
	seq uint64
	m   Message
}

// simPeer is the runtime status of one simulated peer, kept beside its
// machine as a Peer keeps it beside its own.
type simPeer struct {
	pending   int  // Request calls queued locally, not yet given to the machine
	requested bool // the machine has a request outstanding
	inside    bool // in the critical section
}

// A Simulation runs n peers of one algorithm in a single goroutine, with
// no clocks: it steps the same machines a Cluster runs, and delivers their
// messages in an order chosen by its Delivery policy and seed. The same
// configuration, seed and calls give the same run, event for event, so a
// failing run replays exactly.
//
// Each peer that enters the critical section leaves it by a scheduling
// step of its own, chosen like a delivery, so messages keep flowing while
// it is inside. A Request for a peer that is already waiting or inside is
// queued at that peer, as concurrent Lock calls on one Peer are, and
// given to the machine when the peer leaves.
//
// After every step the simulation checks that at most one peer is inside,
// that machines promising (timestamp, id) order enter in that order, and
// that token algorithms have exactly one token, held or in flight. The
// first violation is returned, wrapping ErrViolation, by that call and by
// every later one.
//
// Faults replay as deterministically as the rest: Crash, Partition, Heal
// and DropNext mirror the methods of ChanNetwork, and WithLoss loses
// messages at a seeded rate. Lost messages count in Stats, appear in the
// trace as EventLost, and are counted by Dropped.
//
// A Simulation is not safe for concurrent use. Its zero value is not
// usable; call NewSimulation.
type Simulation struct {
	alg   Algorithm
	n     int
	cfg   *config
	ms    []machine
	out   output
	rng   *rand.Rand
	peers []simPeer

	// The network. With DeliverFIFO, queues[from*n+to] holds each pair's
	// messages, oldest first, and active lists the non-empty pairs
	// (pos[pair] is a pair's index in active, or -1). Otherwise bag holds
	// every message in flight.
	queues [][]envelope
	active []int
	pos    []int
	bag    []envelope

	inside      []int // peers inside, in order of entry
	step        int
	seq         uint64 // serial number of the last message sent
	outstanding int    // requests made and not yet completed by a leave
	idle        int    // deliveries since the last entry or exit
	err         error  // the first violation

	tokens   bool // the machines implement tokenHolder
	inFlight int  // token messages in flight

	f simFaults // crashes, partitions and lost messages (simfaults.go)

	ordered       bool // the machines implement timestamped
	lastTS        uint64
	lastID        int // -1 before the first entry
	entries       uint64
	sent          [numKinds]uint64
	events        []Event
	livelockLimit int
}

// NewSimulation builds a simulation of n peers running alg; nothing is
// requested yet. Besides the algorithm's own options it takes WithSeed,
// WithDelivery, WithUnsafeDelivery, WithoutTrace and WithLoss. An
// algorithm that needs FIFO channels refuses DeliverReorder unless
// WithUnsafeDelivery is also given. Invalid n or options give an error wrapping
// ErrInvalidConfig.
func NewSimulation(alg Algorithm, n int, opts ...Option) (*Simulation, error) {
	cfg, err := newConfig(alg, n, forSimulation, opts)
	if err != nil {
		return nil, err
	}
	if cfg.sim.delivery == DeliverReorder && alg.NeedsFIFO() && !cfg.sim.unsafe {
		return nil, fmt.Errorf("%w: %v needs FIFO channels and delivery %v would reorder them (add WithUnsafeDelivery to insist)",
			ErrInvalidConfig, alg, cfg.sim.delivery)
	}
	s := &Simulation{
		alg:    alg,
		n:      n,
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(cfg.sim.seed, 0x5eed)),
		peers:  make([]simPeer, n),
		lastID: -1,
		// Between two entries every peer may request once and every
		// request be answered a few times over; far beyond that, the run
		// is going round in circles.
		livelockLimit: 100*n*n + 10000,
	}
	for i := range n {
		m, err := cfg.newMachine(alg, i, n)
		if err != nil {
			return nil, err
		}
		s.ms = append(s.ms, m)
	}
	s.initFaults()
	_, s.tokens = s.ms[0].(tokenHolder)
	_, s.ordered = s.ms[0].(timestamped)
	if cfg.sim.delivery == DeliverFIFO {
		s.queues = make([][]envelope, n*n)
		s.pos = make([]int, n*n)
		for i := range s.pos {
			s.pos[i] = -1
		}
	}
	if err := s.checkTokens(); err != nil {
		return nil, err
	}
	return s, nil
}

// Request has peer ask for the critical section now: its machine sends
// its messages into the network, and nothing is delivered yet. If the
// peer is already waiting or inside, the request is queued at the peer
// and made when the peer leaves. A peer outside 0 to n-1 is an error.
func (s *Simulation) Request(peer int) error {
	if peer < 0 || peer >= s.n {
		return fmt.Errorf("dmutex: request by peer %d out of range [0, %d)", peer, s.n)
	}
	if s.err != nil {
		return s.err
	}
	if s.isCrashed(peer) {
		return fmt.Errorf("dmutex: request by peer %d, which has crashed", peer)
	}
	s.outstanding++
	p := &s.peers[peer]
	if p.requested || p.inside {
		p.pending++
		return nil
	}
	s.ask(peer)
	if s.err == nil {
		s.err = s.checkTokens()
	}
	return s.err
}

// Run takes steps until every request made so far has entered and left
// the critical section and no message is left in flight. It returns an
// error wrapping ErrViolation if the algorithm breaks a promise on the
// way, or if peers still wait when nothing is left to deliver (deadlock)
// or after far more deliveries than any entry needs (livelock). If peers
// still wait when nothing is left to deliver after a fault (a message
// lost or a peer crashed), Run instead returns an error wrapping
// ErrBlocked that names them; see Waiting. If every request is served
// but messages keep flowing (a token circling a ring for ever), Run
// returns nil after as many deliveries as the livelock bound allows.
func (s *Simulation) Run() error {
	for {
		more, err := s.Step()
		if err != nil || !more {
			return err
		}
		if s.outstanding == 0 && s.idle > s.livelockLimit {
			return nil
		}
	}
}

// Step takes one scheduling step: with DeliverFIFO and DeliverReorder it
// delivers one message or lets one peer leave, chosen at random; with
// DeliverLockStep it runs one round. It reports false when there was
// nothing to do. It returns an error wrapping ErrViolation or ErrBlocked
// as Run does.
// Step lets a test add requests between steps, for contention that comes
// and goes.
func (s *Simulation) Step() (bool, error) {
	if s.err != nil {
		return false, s.err
	}
	if s.cfg.sim.delivery == DeliverLockStep {
		return s.round()
	}
	var msgs int
	if s.queues != nil {
		msgs = len(s.active)
	} else {
		msgs = len(s.bag)
	}
	total := msgs + len(s.inside)
	if total == 0 {
		return false, s.finalCheck()
	}
	s.step++
	k := s.rng.IntN(total)
	switch {
	case k >= msgs:
		s.leave(s.inside[k-msgs])
	case s.queues != nil:
		s.deliver(s.popPair(s.active[k]))
	default:
		e := s.bag[k]
		last := len(s.bag) - 1
		s.bag[k] = s.bag[last]
		s.bag[last] = envelope{}
		s.bag = s.bag[:last]
		s.deliver(e)
	}
	if s.err == nil {
		s.err = s.checkTokens()
	}
	return true, s.err
}

// round is one step of DeliverLockStep.
func (s *Simulation) round() (bool, error) {
	if len(s.bag) == 0 && len(s.inside) == 0 {
		return false, s.finalCheck()
	}
	s.step++
	msgs := s.bag
	s.bag = nil
	leaving := slices.Clone(s.inside)
	for _, e := range msgs {
		if s.err != nil {
			break
		}
		s.deliver(e)
		if s.err == nil {
			s.err = s.checkTokens()
		}
	}
	for _, p := range leaving {
		if s.err != nil {
			break
		}
		s.leave(p)
		if s.err == nil {
			s.err = s.checkTokens()
		}
	}
	return true, s.err
}

// finalCheck is called when nothing is left to deliver: any request still
// outstanding can never be served.
func (s *Simulation) finalCheck() error {
	if s.outstanding == 0 {
		return nil
	}
	waiting := s.Waiting()
	if s.faulted() {
		return s.blocked(waiting)
	}
	s.err = fmt.Errorf("%w: deadlock after step %d: peers %v wait and no message is in flight", ErrViolation, s.step, waiting)
	return s.err
}

// Stats returns the simulation's counts so far, counted as a Cluster
// counts them: every entry, and every message at the moment it is sent.
func (s *Simulation) Stats() Stats {
	st := Stats{Entries: s.entries}
	for k, v := range s.sent {
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
func (s *Simulation) Events() []Event {
	if s.cfg.sim.noTrace {
		return nil
	}
	return slices.Clone(s.events)
}

// ask gives one request to peer's machine.
func (s *Simulation) ask(peer int) {
	s.peers[peer].requested = true
	s.record(Event{Kind: EventRequest, Peer: peer})
	s.apply(peer, event{kind: evRequest})
}

// apply steps peer's machine with ev and puts its output into effect.
func (s *Simulation) apply(peer int, ev event) {
	s.out.reset()
	s.ms[peer].step(ev, &s.out)
	for _, m := range s.out.msgs {
		s.send(peer, m)
	}
	if s.out.entered {
		s.enter(peer, ev.kind)
	}
}

func (s *Simulation) send(peer int, m Message) {
	if m.From != peer || m.To < 0 || m.To >= s.n || m.To == peer || !m.Kind.Valid() {
		s.fail("peer %d sent a malformed message: %s", peer, formatMessage(m, true))
		return
	}
	s.sent[m.Kind]++
	s.seq++
	e := envelope{seq: s.seq, m: m}
	if isTokenKind(m.Kind) {
		s.inFlight++
	}
	if !s.cfg.sim.noTrace {
		s.record(Event{Kind: EventSend, Peer: peer, Seq: e.seq, Msg: traced(m)})
	}
	if s.f.armed && s.lostOnSend(m) {
		s.lose(e)
		return
	}
	if s.queues == nil {
		s.bag = append(s.bag, e)
		return
	}
	pair := m.From*s.n + m.To
	s.queues[pair] = append(s.queues[pair], e)
	if s.pos[pair] < 0 {
		s.pos[pair] = len(s.active)
		s.active = append(s.active, pair)
	}
}

// popPair removes and returns the oldest message of a non-empty pair.
func (s *Simulation) popPair(pair int) envelope {
	q := s.queues[pair]
	e := q[0]
	q[0] = envelope{}
	if len(q) == 1 {
		s.queues[pair] = q[:0]
		i, last := s.pos[pair], len(s.active)-1
		moved := s.active[last]
		s.active[i] = moved
		s.pos[moved] = i
		s.active = s.active[:last]
		s.pos[pair] = -1
	} else {
		s.queues[pair] = q[1:]
	}
	return e
}

func (s *Simulation) deliver(e envelope) {
	if isTokenKind(e.m.Kind) {
		s.inFlight--
	}
	to := e.m.To
	if !s.cfg.sim.noTrace {
		s.record(Event{Kind: EventReceive, Peer: to, Seq: e.seq, Msg: traced(e.m)})
	}
	s.idle++
	s.apply(to, event{kind: evMessage, msg: e.m})
	if s.err == nil && s.idle > s.livelockLimit && s.outstanding > 0 {
		s.fail("livelock: %d deliveries without an entry or exit", s.idle)
	}
}

func (s *Simulation) enter(peer int, cause eventKind) {
	p := &s.peers[peer]
	switch {
	case cause == evRelease:
		s.fail("peer %d entered on leaving", peer)
		return
	case p.inside:
		s.fail("peer %d entered while already inside", peer)
		return
	case !p.requested:
		s.fail("peer %d entered without a request", peer)
		return
	case len(s.inside) > 0:
		s.fail("peer %d entered while peer %d was inside", peer, s.inside[0])
		return
	case len(s.f.deadInside) > 0:
		s.fail("peer %d entered while peer %d, which crashed inside, never left", peer, s.f.deadInside[0])
		return
	}
	if s.ordered {
		ts := s.ms[peer].(timestamped).requestTS()
		if s.lastID >= 0 && !before(s.lastTS, s.lastID, ts, peer) {
			s.fail("peer %d entered with request (%d, %d) after the younger (%d, %d)", peer, ts, peer, s.lastTS, s.lastID)
			return
		}
		s.lastTS, s.lastID = ts, peer
	}
	p.requested = false
	p.inside = true
	s.inside = append(s.inside, peer)
	s.entries++
	s.idle = 0
	s.record(Event{Kind: EventEnter, Peer: peer})
}

func (s *Simulation) leave(peer int) {
	s.inside = slices.DeleteFunc(s.inside, func(q int) bool { return q == peer })
	p := &s.peers[peer]
	p.inside = false
	s.outstanding--
	s.idle = 0
	s.record(Event{Kind: EventLeave, Peer: peer})
	s.apply(peer, event{kind: evRelease})
	if s.err == nil && p.pending > 0 {
		p.pending--
		s.ask(peer)
	}
}

// checkTokens checks that a token algorithm has exactly one token.
func (s *Simulation) checkTokens() error {
	if !s.tokens {
		return nil
	}
	held := 0
	for _, m := range s.ms {
		if m.(tokenHolder).hasToken() {
			held++
		}
	}
	switch {
	case s.f.lostTokens > 0 && held+s.inFlight+s.f.lostTokens != 1:
		return fmt.Errorf("%w: step %d: %d tokens held, %d in flight and %d lost, want exactly one in all",
			ErrViolation, s.step, held, s.inFlight, s.f.lostTokens)
	case held+s.inFlight+s.f.lostTokens != 1:
		return fmt.Errorf("%w: step %d: %d tokens held and %d in flight, want exactly one in all",
			ErrViolation, s.step, held, s.inFlight)
	}
	return nil
}

func (s *Simulation) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("%w: step %d: %s", ErrViolation, s.step, fmt.Sprintf(format, args...))
	}
}

func (s *Simulation) record(e Event) {
	if s.cfg.sim.noTrace {
		return
	}
	e.Step = s.step
	s.events = append(s.events, e)
}

// isTokenKind reports whether messages of kind k carry the token.
func isTokenKind(k Kind) bool { return k == KindToken || k == KindPrivilege }

// traced returns m with a private copy of its token, so that the record
// keeps the token as it was sent.
func traced(m Message) Message {
	m.Token = m.Token.clone()
	return m
}
