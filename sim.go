package dmutex

import (
	"cmp"
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
	// SimConfig.UnsafeDelivery is set.
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
	unsafe   bool      // SimConfig.UnsafeDelivery: reorder even if the algorithm needs FIFO
	noTrace  bool      // SimConfig.NoTrace, WorldConfig.NoTrace
	loss     float64   // SimConfig.Loss, WorldConfig.Loss
	suspect  float64   // SimConfig.FalseSuspicionRate
	detector *Detector // SimConfig.Detector; nil for the default; NewSimulation sets the one it runs
	livelock int       // deliveries without an entry or exit, with requests outstanding, past which the world fails; 0 for no bound
}

// A SimConfig is what a Simulation needs beside its algorithm, its size
// and the algorithm's options: the scheduler's seed and delivery policy,
// the faults it draws at random, its failure detector, a variant to run
// instead of the algorithm, and whether it records a trace. The zero
// SimConfig is a run under seed 0 over per-pair FIFO channels, with no
// loss, a trace, and a failure detector only with WithRecovery.
type SimConfig struct {
	// Seed seeds every random choice of the run. Two simulations with the
	// same algorithm, size, options, configuration and calls behave the
	// same, event for event.
	Seed uint64

	// Delivery is the order in which messages are delivered; the zero
	// Delivery is DeliverFIFO.
	Delivery Delivery

	// UnsafeDelivery lets DeliverReorder reorder the messages of an
	// algorithm that needs FIFO channels (see Algorithm.NeedsFIFO), which
	// is refused without it. Such a run may well break mutual exclusion:
	// that is its purpose, to show why the algorithm needs FIFO.
	UnsafeDelivery bool

	// Loss is the probability, from 0 to 1, that a message is lost as it
	// is sent, drawn from the seed, so that a lossy run replays exactly.
	// A lost message still counts in Stats, as it does in a Cluster,
	// where it was handed to the transport. For a Cluster, see WithFaults.
	Loss float64

	// FalseSuspicionRate makes the failure detector imperfect: at each
	// scheduling step, with this probability drawn from the seed, a live
	// peer chosen at random starts to suspect another live peer that it
	// trusts now, before the step's own choice. The detector trusts a
	// suspected live peer again later, at a scheduling step of its own
	// chosen like a delivery, as it suspects a crashed peer after Crash.
	// Simulation.FalseSuspicions counts them. Machines act on suspicions
	// only under WithRecovery, and with it a false suspicion may let two
	// peers in at once, which the run reports as a violation: that is the
	// imperfect detector's lesson. The rate must be from 0 to 1, and
	// DeliverLockStep, which uses no randomness, refuses a non-zero one.
	FalseSuspicionRate float64

	// Detector, if not nil, sets the failure detector. When nil the
	// detector is perfect under WithRecovery or a FalseSuspicionRate, and
	// absent otherwise; a run is the same, event for event, whether or
	// not Detector names that default.
	//
	// DetectorNone runs no detector, so that machines with WithRecovery
	// never hear a suspicion, as in Check without one. DetectorPerfect has
	// each survivor suspect a crashed peer at a scheduling step of its
	// own, as WithRecovery alone does; it needs no WithRecovery, for a
	// variant that acts on suspicions by itself
	// (ricart-agrawala-naive-exclusion). DetectorImperfect also allows up
	// to FalseSuspicions suspicions of live peers, made by hand: the World
	// offers each as a transition with an ID such as "s1-0"
	// (World.Transitions, Find and Apply, as in Check), the scheduler
	// never takes one, and the suspected peer is trusted again at a
	// scheduling step of its own. Suspicions fired by FalseSuspicionRate
	// count against that bound. A simulation with a detector has at most
	// 8 peers.
	Detector *Detector

	// Variant, if not empty, names a variant (see Variants) to run
	// instead of the real algorithm; the algorithm given to NewSimulation
	// must be the variant's. Unlike CheckConfig.Variant it adds none of
	// the variant's Options: give them as options.
	Variant string

	// NoTrace stops the simulation from recording its events, which long
	// runs cannot afford to keep; Events then returns nil, and WriteLog
	// and WriteMermaid return an error.
	NoTrace bool
}

// apply validates sc and sets it in c.
func (sc SimConfig) apply(c *config) error {
	switch {
	case sc.Delivery >= numDeliveries:
		return fmt.Errorf("%w: SimConfig.Delivery %d: unknown delivery policy", ErrInvalidConfig, uint8(sc.Delivery))
	case !(sc.Loss >= 0 && sc.Loss <= 1):
		return fmt.Errorf("%w: SimConfig.Loss %v: want a probability from 0 to 1", ErrInvalidConfig, sc.Loss)
	case !(sc.FalseSuspicionRate >= 0 && sc.FalseSuspicionRate <= 1):
		return fmt.Errorf("%w: SimConfig.FalseSuspicionRate %v: want a probability from 0 to 1", ErrInvalidConfig, sc.FalseSuspicionRate)
	}
	if d := sc.Detector; d != nil && !d.valid() {
		return fmt.Errorf("%w: SimConfig.Detector: detector %v with %d false suspicions", ErrInvalidConfig, d.Kind, d.FalseSuspicions)
	}
	if sc.Variant != "" {
		if err := c.setVariant(sc.Variant); err != nil {
			return err
		}
	}
	c.sim.seed = sc.Seed
	c.sim.delivery = sc.Delivery
	c.sim.unsafe = c.sim.unsafe || sc.UnsafeDelivery
	c.sim.loss = sc.Loss
	c.sim.suspect = sc.FalseSuspicionRate
	if sc.Detector != nil {
		d := *sc.Detector
		c.sim.detector = &d
	}
	c.sim.noTrace = sc.NoTrace
	return nil
}

// An EventKind says what a TraceEvent records.
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
	EventTry                            // the peer's machine is asked to try the critical section (TryLock)
	EventRefused                        // the peer's try was refused
	EventSuspect                        // the peer's failure detector starts suspecting Target
	EventTrust                          // the peer's failure detector trusts Target again
	EventCancel                         // a caller waiting at the peer gave up (World.Cancel)
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
	EventTry:       "try",
	EventRefused:   "refused",
	EventSuspect:   "suspect",
	EventTrust:     "trust",
	EventCancel:    "cancel",
}

// String returns the kind's name, such as "receive".
func (k EventKind) String() string {
	if k >= EventRequest && k <= EventCancel {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// A TraceEvent is one thing that happened in a Simulation or a World, as
// their trace records it (Simulation.Events, World.Events).
type TraceEvent struct {
	Step   int       // the scheduling step it happened in; 0 for calls before the first step
	Kind   EventKind // what happened
	Peer   int       // the peer that requested, sent, received, entered, left or crashed, or a lost message's addressee; -1 for EventPartition and EventHeal
	Seq    uint64    // for EventSend, EventReceive and EventLost: the message's serial number, from 1 in order of sending
	Msg    Message   // for EventSend, EventReceive and EventLost: the message, as sent
	Groups [][]int   // for EventPartition: the groups, every peer in one of them
	Target int       // for EventSuspect and EventTrust: the peer suspected or trusted again
}

// String formats e as one line of the event log, such as
// "   3 P1 receive m2 request P0->P1 ts=1".
func (e TraceEvent) String() string {
	switch e.Kind {
	case EventSend, EventReceive, EventLost:
		return fmt.Sprintf("%4d P%d %v m%d %s", e.Step, e.Peer, e.Kind, e.Seq, formatMessage(e.Msg, true))
	case EventPartition:
		return fmt.Sprintf("%4d partition %v", e.Step, e.Groups)
	case EventHeal:
		return fmt.Sprintf("%4d heal", e.Step)
	case EventSuspect:
		return fmt.Sprintf("%4d P%d suspects P%d", e.Step, e.Peer, e.Target)
	case EventTrust:
		return fmt.Sprintf("%4d P%d trusts P%d again", e.Step, e.Peer, e.Target)
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

// A Simulation runs n peers of one algorithm in a single goroutine, with
// no clocks: it steps the same machines a Cluster runs, and delivers their
// messages in an order chosen by its Delivery policy and seed. It is a
// World and a seeded random scheduler over it. The same configuration,
// seed and calls give the same run, event for event, so a failing run
// replays exactly.
//
// Each peer that enters the critical section leaves it by a scheduling
// step of its own, chosen like a delivery, so messages keep flowing while
// it is inside. A Request for a peer that is already waiting or inside is
// queued at that peer, as concurrent Lock calls on one Peer are, and
// given to the machine when the peer leaves.
//
// After every step the simulation checks what a World checks: that at
// most one peer is inside, that machines promising an order of entry
// ((timestamp, id), or arrival at the coordinator) enter in that order,
// and that token algorithms have exactly one token, held or in flight.
// The first violation is returned, wrapping ErrViolation, by that call
// and by every later one.
//
// Faults replay as deterministically as the rest: Crash, Partition, Heal
// and DropNext mirror the methods of ChanNetwork, and SimConfig.Loss loses
// messages at a seeded rate. Lost messages count in Stats, appear in the
// trace as EventLost, and are counted by Dropped.
//
// A Simulation is not safe for concurrent use. Its zero value is not
// usable; call NewSimulation.
type Simulation struct {
	w             *World
	rng           *rand.Rand
	lockStep      bool
	livelockLimit int
	suspect       float64      // SimConfig.FalseSuspicionRate
	falseFired    int          // false suspicions fired so far
	due           []Transition // scratch for the world's due transitions
}

// NewSimulation builds a simulation of n peers running alg; nothing is
// requested yet. It takes the algorithm's options, as New does, and cfg
// for the rest (see SimConfig). With WithRecovery or a
// FalseSuspicionRate it runs a failure detector (at most 8 peers; see
// SimConfig.Detector for the others): after Crash each survivor suspects
// the crashed peer at a scheduling step of its own, and a peer that
// crashed inside has left, so that survivors still waiting at the end are
// a deadlock, not merely blocked. An algorithm that needs FIFO channels
// refuses DeliverReorder unless cfg.UnsafeDelivery is set. Invalid n,
// configuration or options give an error wrapping ErrInvalidConfig.
func NewSimulation(alg Algorithm, n int, cfg SimConfig, opts ...Option) (*Simulation, error) {
	c, err := newConfig(alg, n, forSimulation, opts)
	if err != nil {
		return nil, err
	}
	if err := cfg.apply(c); err != nil {
		return nil, err
	}
	return newSimulation(c)
}

// newSimulation builds a simulation from a checked configuration.
func newSimulation(cfg *config) (*Simulation, error) {
	n := cfg.n
	var det Detector
	if cfg.recovery || cfg.sim.suspect > 0 {
		det.Kind = DetectorPerfect // the false suspicions are the simulation's own
	}
	if d := cfg.sim.detector; d != nil {
		if d.Kind == DetectorNone && cfg.sim.suspect > 0 {
			return nil, fmt.Errorf("%w: SimConfig.FalseSuspicionRate %v with no detector (SimConfig.Detector %v)", ErrInvalidConfig, cfg.sim.suspect, d.Kind)
		}
		det = *d
	}
	if det.Kind != DetectorNone {
		switch {
		case n > maxDetectorPeers:
			return nil, fmt.Errorf("%w: a failure detector (WithRecovery, SimConfig.FalseSuspicionRate or Detector) for %d peers, want at most %d", ErrInvalidConfig, n, maxDetectorPeers)
		case cfg.sim.suspect > 0 && cfg.sim.delivery == DeliverLockStep:
			return nil, fmt.Errorf("%w: SimConfig.FalseSuspicionRate with delivery %v, which uses no randomness", ErrInvalidConfig, DeliverLockStep)
		}
	}
	cfg.sim.detector = &det
	// Between two entries every peer may request once and every request
	// be answered a few times over; far beyond that, the run is going
	// round in circles. The world fails on the delivery past it.
	cfg.sim.livelock = 100*n*n + 10000
	w, err := newWorld(cfg, nil)
	if err != nil {
		return nil, err
	}
	return &Simulation{
		w:             w,
		rng:           rand.New(rand.NewPCG(cfg.sim.seed, 0x5eed)),
		suspect:       cfg.sim.suspect,
		lockStep:      cfg.sim.delivery == DeliverLockStep,
		livelockLimit: cfg.sim.livelock,
	}, nil
}

// World returns the world the simulation runs. Changing it changes the
// simulation; Clone it to explore from here without disturbing the run.
func (s *Simulation) World() *World { return s.w }

// Request has peer ask for the critical section now: its machine sends
// its messages into the network, and nothing is delivered yet. If the
// peer is already waiting or inside, the request is queued at the peer
// and made when the peer leaves. A peer outside 0 to n-1, or one that has
// crashed, is an error wrapping ErrInvalidConfig.
func (s *Simulation) Request(peer int) error { return s.w.Request(peer) }

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
		if s.w.Outstanding() == 0 && s.w.Idle() > s.livelockLimit {
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
	w := s.w
	if err := w.Err(); err != nil {
		return false, err
	}
	if s.lockStep {
		return s.round()
	}
	// The choice is among the transitions due when the step begins: a
	// delivery or a leave, chosen like a delivery, or a suspicion or
	// trust the detector owes.
	total := w.NumDue()
	if total == 0 {
		return false, w.CheckAtRest()
	}
	suspected := s.suspect > 0 && s.rng.Float64() < s.suspect
	if suspected {
		s.due = w.AppendDue(s.due[:0])
		// A false suspicion comes on top of the step, never instead of
		// it, so that no rate stops the run from going on.
		if err := s.falseSuspicion(); err != nil {
			return true, err
		}
	}
	k := s.rng.IntN(total)
	if !suspected {
		return true, w.ApplyDue(w.Due(k))
	}
	t := s.due[k]
	if t.Kind != TransDeliver {
		t = s.afterSuspicion(k)
	}
	return true, w.ApplyDue(t)
}

// afterSuspicion resolves the draw k of a step in which a false suspicion
// came first, as the scheduler always has: over the messages and the
// detector's debts due when the step began (s.due), but the peers inside
// when the draw is resolved. A suspicion that let a peer in thus lets the
// draw pick that peer's leave, and the detector's last debt not.
func (s *Simulation) afterSuspicion(k int) Transition {
	msgs, inside := 0, 0
	for _, t := range s.due {
		switch t.Kind {
		case TransDeliver:
			msgs++
		case TransLeave, TransWrite:
			inside++
		}
	}
	var leaves []Transition
	for _, t := range s.w.AppendDue(nil) {
		if t.Kind == TransLeave || t.Kind == TransWrite {
			leaves = append(leaves, t)
		}
	}
	if j := k - msgs; j < len(leaves) {
		return leaves[j]
	}
	return s.due[k-len(leaves)+inside]
}

// falseSuspicion has a live peer, drawn at random, start suspecting
// another live peer that it trusts now, if there is such a pair.
func (s *Simulation) falseSuspicion() error {
	w := s.w
	var pairs [][2]int
	for i := range w.N() {
		for j := range w.N() {
			if i != j && !w.Peer(i).Crashed && !w.Peer(j).Crashed && !w.Suspecting(i, j) {
				pairs = append(pairs, [2]int{i, j})
			}
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	s.falseFired++
	p := pairs[s.rng.IntN(len(pairs))]
	_, err := w.Suspect(p[0], p[1])
	return err
}

// FalseSuspicions returns how many false suspicions SimConfig.FalseSuspicionRate
// has fired so far.
func (s *Simulation) FalseSuspicions() int { return s.falseFired }

// round is one step of DeliverLockStep: the suspicions and trusts the
// detector owes, each a step of its own, then the round, one step in all:
// every message in flight, delivered in order of sending, then every peer
// inside leaving, in order of entry.
func (s *Simulation) round() (bool, error) {
	w := s.w
	due := w.AppendDue(s.due[:0])
	if len(due) == 0 {
		return false, w.CheckAtRest()
	}
	var owed []Transition
	for _, t := range due {
		if t.Kind == TransSuspect || t.Kind == TransTrust {
			owed = append(owed, t)
		}
	}
	for _, t := range owed {
		if err := w.ApplyDue(t); err != nil {
			return true, err
		}
	}
	// What the owed steps sent goes in this round too.
	due = w.AppendDue(due[:0])
	var round, leaves []Transition
	for _, t := range due {
		switch t.Kind {
		case TransDeliver:
			round = append(round, t)
		case TransLeave:
			leaves = append(leaves, t)
		}
	}
	s.due = due
	slices.SortFunc(round, func(a, b Transition) int { return cmp.Compare(a.Seq, b.Seq) })
	return true, w.ApplyDue(append(round, leaves...)...)
}

// Stats returns the simulation's counts so far, counted as a Cluster
// counts them: every entry, and every message at the moment it is sent.
func (s *Simulation) Stats() Stats { return s.w.Stats() }

// Events returns what has happened so far, in order; nil under
// SimConfig.NoTrace. The slice is the caller's.
func (s *Simulation) Events() []TraceEvent { return s.w.Events() }
