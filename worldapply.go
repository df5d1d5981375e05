package dmutex

// A World's transitions: what each one is, which are enabled, and Apply, which takes one.

import (
	"fmt"
	"slices"
)

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

// A StepResult is what one Apply did: the transition taken, the peer whose
// machine entered in it (or -1; also when the entry broke a promise, so
// that the trace of a safety violation shows who went in), whether the try of the transition's peer was
// refused in it, and, when the world records a trace, its events.
type StepResult struct {
	Transition Transition
	Entered    int
	Refused    bool
	Events     []TraceEvent

	// Write, for a TransWrite: the fence written with and whether the
	// store accepted it.
	Fence    uint64
	Accepted bool

	overlap error // fenced store: the step let a second holder in, not fatal
}

// String describes the step, such as "P1 receives reply P0->P1, enters".
func (s StepResult) String() string {
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
		case s.d.inside && w.store != nil && w.store.writes[p] < writesPerHold:
			trs = append(trs, Transition{Kind: TransWrite, Peer: p})
		case s.d.inside:
			trs = append(trs, Transition{Kind: TransLeave, Peer: p})
		case s.d.idle():
			if s.budget != 0 {
				trs = append(trs, Transition{Kind: TransRequest, Peer: p})
			}
			if s.tries != 0 && !s.d.minority() {
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
			if !w.isCrashed(p) && w.f.mayCrash(p) && (!w.f.crashIn || w.peers[p].d.inside) &&
				(!w.f.crashWait || w.peers[p].d.requested) {
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
// unset those it owes, which happen eventually: a suspicion of a peer
// that is gone (crashed, or cut off by a partition: a real detector
// cannot tell the two apart), a trust of a suspected peer that is back
// (alive, and no partition between them); with free set the false
// suspicions it may still make, of peers that are not gone.
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
			sus, gone := w.suspects(i, j), w.gone(i, j)
			switch {
			case !free && !sus && gone:
				trs = append(trs, Transition{Kind: TransSuspect, Peer: i, Target: j})
			case !free && sus && !gone:
				trs = append(trs, Transition{Kind: TransTrust, Peer: i, Target: j})
			case free && !sus && !gone:
				trs = append(trs, Transition{Kind: TransSuspect, Peer: i, Target: j})
			}
		}
	}
	return trs
}

// gone reports whether peer j is gone for peer i's failure detector: it
// has crashed, or a partition cuts it off from i.
func (w *World) gone(i, j int) bool {
	return w.isCrashed(j) || (w.f.group != nil && w.f.group[i] != w.f.group[j])
}

// cutOff reports whether a partition in force leaves peer p on a side
// with no majority of the cluster: with WithRecovery it may not enter
// until the partition heals (see driver.suspect), so no progress is owed
// to it meanwhile.
func (w *World) cutOff(p int) bool {
	if w.f.group == nil {
		return false
	}
	side := 0
	for _, g := range w.f.group {
		if g == w.f.group[p] {
			side++
		}
	}
	return 2*side <= w.n
}

// maxDetectorPeers is the largest cluster a World models a failure
// detector for: suspects keeps one bit per ordered pair in a uint64.
const maxDetectorPeers = 8

// suspectsAny reports whether peer i's failure detector suspects anyone.
func (w *World) suspectsAny(i int) bool {
	return w.f.suspects>>uint(i*w.n)&(1<<uint(w.n)-1) != 0
}

// suspects reports whether peer i's failure detector suspects peer j.
func (w *World) suspects(i, j int) bool { return w.f.suspects&(1<<uint(i*w.n+j)) != 0 }

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
func (w *World) Apply(t Transition) (StepResult, error) {
	if w.err != nil {
		return StepResult{Entered: -1}, w.err
	}
	if !w.enabled(t) {
		return StepResult{Entered: -1}, fmt.Errorf("%w: transition %s (%v) is not enabled", ErrInvalidConfig, t.ID(), t)
	}
	return w.apply(t)
}

// apply is Apply for a transition known to be enabled.
func (w *World) apply(t Transition) (StepResult, error) {
	w.step++
	w.mark = len(w.events)
	w.soft = nil
	var wr StepResult
	switch t.Kind {
	case TransWrite:
		wr = w.write(t.Peer)
	case TransRequest:
		if w.peers[t.Peer].budget > 0 {
			w.peers[t.Peer].budget--
		}
		d, h := w.drive(t.Peer)
		d.request(h, &w.out)
	case TransLeave:
		d, h := w.drive(t.Peer)
		d.release(h, &w.out)
	case TransDeliver:
		w.deliver(w.take(t.Msg.From, t.Msg.To, t.Seq))
	case TransTry:
		if w.peers[t.Peer].tries > 0 {
			w.peers[t.Peer].tries--
		}
		d, h := w.drive(t.Peer)
		d.try(h, &w.out)
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
		group := w.f.group
		w.f.group = nil
		w.record(TraceEvent{Kind: EventHeal, Peer: -1})
		// Each live peer hears that the peers it was cut off from and
		// does not suspect are back, as the runtime's watcher sees a
		// link come back; a suspected one is trusted in a step of its
		// own, which the detector owes.
		for i := range w.n {
			for j := range w.n {
				if group[i] != group[j] && !w.isCrashed(i) && !w.isCrashed(j) && !w.suspects(i, j) {
					d, h := w.drive(i)
					d.reached(h, &w.out, j)
				}
			}
		}
	case TransSuspect:
		if !w.gone(t.Peer, t.Target) {
			w.f.falseLeft--
		}
		w.f.suspects |= 1 << uint(t.Peer*w.n+t.Target)
		w.record(TraceEvent{Kind: EventSuspect, Peer: t.Peer, Target: t.Target})
		d, h := w.drive(t.Peer)
		d.suspect(h, &w.out, t.Target, true)
	case TransTrust:
		w.f.suspects &^= 1 << uint(t.Peer*w.n+t.Target)
		w.record(TraceEvent{Kind: EventTrust, Peer: t.Peer, Target: t.Target})
		d, h := w.drive(t.Peer)
		d.suspect(h, &w.out, t.Target, false)
	}
	if w.err == nil {
		w.err = w.checkTokens()
	}
	st := StepResult{Transition: t, Entered: -1, Refused: w.refusedAt == w.step, Fence: wr.Fence, Accepted: wr.Accepted, overlap: w.soft}
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

// Request has peer ask for the critical section now, outside the
// transitions, as a caller of Lock does: its machine sends its messages
// into the network, and nothing is delivered yet. If the peer is already
// waiting or inside, the request is queued at the peer and made when the
// peer leaves. A peer out of range is an error wrapping ErrInvalidConfig,
// and so is a crashed one; after a violation Request returns it.
func (w *World) Request(peer int) error {
	if err := w.local("request", peer); err != nil {
		return err
	}
	d, h := w.drive(peer)
	d.request(h, &w.out)
	if w.err == nil {
		w.err = w.checkTokens()
	}
	return w.err
}

// Try has peer try the critical section now, outside the transitions, as
// a caller of TryLock does: the machine either lets the peer in or
// refuses, in this call or when a later delivery answers. If another
// caller of the peer is waiting or inside, Try returns ErrLocked and
// changes nothing, as TryLock does. A peer out of range or crashed is an
// error wrapping ErrInvalidConfig; after a violation Try returns it.
func (w *World) Try(peer int) error {
	if err := w.local("try", peer); err != nil {
		return err
	}
	d, h := w.drive(peer)
	if !d.try(h, &w.out) {
		return ErrLocked
	}
	if w.err == nil {
		w.err = w.checkTokens()
	}
	return w.err
}

// Cancel withdraws the newest caller waiting at peer, as a LockContext or
// TryLockContext whose context ends: a request queued at the peer is
// dropped; the one its machine has out stays outstanding, since a machine
// cannot take a request back, and when it is granted with nobody left
// waiting the peer enters and leaves at once. It is an error wrapping
// ErrInvalidConfig if nobody waits at peer, or peer is out of range or
// crashed.
func (w *World) Cancel(peer int) error {
	if err := w.local("cancel", peer); err != nil {
		return err
	}
	d := &w.peers[peer].d
	if d.waiting == 0 {
		return fmt.Errorf("%w: cancel at peer %d, where nobody waits", ErrInvalidConfig, peer)
	}
	d.cancel(d.waiting == 1 && d.tryCaller)
	w.record(TraceEvent{Kind: EventCancel, Peer: peer})
	return nil
}

// local checks a local call (what) by peer made outside the transitions.
func (w *World) local(what string, peer int) error {
	if peer < 0 || peer >= w.n {
		return fmt.Errorf("%w: %s by peer %d out of range [0, %d)", ErrInvalidConfig, what, peer, w.n)
	}
	if w.err != nil {
		return w.err
	}
	if w.isCrashed(peer) {
		return fmt.Errorf("%w: %s by peer %d, which has crashed", ErrInvalidConfig, what, peer)
	}
	return nil
}

func (w *World) coordinator() int { return w.ms[0].(coordinated).coordinatorID() }

// drive returns peer's driver and its host, for one driver call.
func (w *World) drive(peer int) (*driver, *worldHost) {
	w.hostPeer = peer
	return &w.peers[peer].d, (*worldHost)(w)
}

// worldHost is a World in its part as the host of the driver of peer
// hostPeer: it puts what the driver does into the world, recording it
// and checking the world's promises as it goes.
type worldHost World

func (h *worldHost) machine() machine {
	h.acts++
	return (*World)(h).machine(h.hostPeer)
}

func (h *worldHost) send(m Message) { (*World)(h).send(h.hostPeer, m) }

func (h *worldHost) asked(try bool) {
	w, peer := (*World)(h), h.hostPeer
	kind := EventRequest
	if try {
		kind = EventTry
	}
	w.record(TraceEvent{Kind: kind, Peer: peer})
	if w.order == orderCoordinator && peer == w.coordinator() {
		w.arrivals = append(slices.Clip(w.arrivals), peer)
	}
}

func (h *worldHost) tryRefused(bool) {
	w, peer := (*World)(h), h.hostPeer
	w.idle = 0
	w.refusedAt = w.step
	w.record(TraceEvent{Kind: EventRefused, Peer: peer})
	if i := slices.Index(w.arrivals, peer); i >= 0 {
		w.arrivals = slices.Delete(slices.Clone(w.arrivals), i, i+1)
	}
}

func (h *worldHost) broken(what string, entry bool) {
	w := (*World)(h)
	if entry {
		w.enteredAt, w.enteredBy = w.step, h.hostPeer
	}
	w.fail("peer %d %s", h.hostPeer, what)
}

func (h *worldHost) suspected(j int) bool { return (*World)(h).suspects(h.hostPeer, j) }

func (h *worldHost) left() {
	w, peer := (*World)(h), h.hostPeer
	w.inside = slices.DeleteFunc(w.inside, func(q int) bool { return q == peer })
	w.idle = 0
	w.record(TraceEvent{Kind: EventLeave, Peer: peer})
}

// deliver hands e, just taken from the network, to its receiver.
func (w *World) deliver(e envelope) {
	if w.carriesToken(e.m) {
		w.inFlight--
	}
	to := e.m.To
	if w.trace {
		w.record(TraceEvent{Kind: EventReceive, Peer: to, Seq: e.seq, Msg: traced(e.m)})
	}
	w.idle++
	atCoordinator := w.order == orderCoordinator && to == w.coordinator()
	if atCoordinator && w.ms[to].(coordinated).requestArrives(e.m) {
		w.arrivals = append(slices.Clip(w.arrivals), e.m.From)
	}
	d, h := w.drive(to)
	d.deliver(h, &w.out, e.m)
	if atCoordinator && w.ms[to].(coordinated).tryGranted(e.m, w.out.msgs) {
		// A try is never queued: for the order, it arrives when granted.
		w.arrivals = append(slices.Clip(w.arrivals), e.m.From)
	}
	if l := w.cfg.sim.livelock; l > 0 && w.err == nil && w.idle > l && w.outstanding() > 0 {
		w.fail("livelock: %d deliveries without an entry or exit", w.idle)
	}
}

// entered puts an entry by the machine of peer hostPeer into the world,
// checking it: at most one peer inside (with the fenced store, a second
// holder is recorded and the run goes on, since the store is what must
// stay safe), nobody inside who crashed there, and the order of entry the
// machines promise. Without a caller waiting (forCaller unset), the peer
// leaves at once, but the entry is checked all the same.
func (h *worldHost) entered(forCaller bool) {
	w, peer := (*World)(h), h.hostPeer
	w.enteredAt, w.enteredBy = w.step, peer
	switch {
	case len(w.inside) > 0 && w.store == nil:
		w.fail("peer %d entered while peer %d was inside", peer, w.inside[0])
		return
	case len(w.inside) > 0 && w.soft == nil:
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
	w.inside = append(w.inside, peer)
	if s := w.store; s != nil {
		s.writes[peer] = 0
		s.closed[peer] = false
		if s.last == peer {
			s.last = -1 // its last hold is over
		}
	}
	if forCaller {
		w.entries++
	}
	w.idle = 0
	w.record(TraceEvent{Kind: EventEnter, Peer: peer})
}

// leave has peer, inside, leave the critical section.
func (w *World) leave(peer int) {
	d, h := w.drive(peer)
	d.release(h, &w.out)
}
