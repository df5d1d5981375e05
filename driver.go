package dmutex

// A driver applies the local rules around one peer's machine, the rules
// that are the same whoever runs the peer: the queue of local callers
// (Lock and TryLock), the try and its refusal, entry and release, the
// fencing token of each hold and its epochs, and suspicions. The runtime
// (Peer) and the World each keep one driver per peer and call it for
// every local call, delivery and suspicion; each adds only what is its
// own: the runtime its mutex, waiters, goroutines and fast path, the
// World its copy-on-write state and its checks. So a rule is written
// once, and the checker explores exactly what runs. etcd-io/raft's
// RawNode plays this part for every caller of its Step machine.
//
// A driver is a plain value with no pointers, so that a World copies it
// with its peers. The machine and the step output are the caller's,
// reached through a driverHost; the host also hears each thing the
// driver does, in order (asked, send, entered, left, tryRefused), which is
// where the runtime wakes its callers and the World checks its promises.
//
// The local callers form one FIFO queue: waiting counts them, the first
// being the one the outstanding request (or try) is for. A caller may
// give up (cancel) at any time. The machine's request stays outstanding
// all the same, since the machine cannot take it back: when it is granted
// the entry goes to the next caller still waiting or, if there is none,
// the peer leaves at once, taking no fence. This keeps the machine's contract (evRequest
// and evTry only when idle, evRelease only after an entry) whatever the
// callers do.
type driver struct {
	id, n int

	waiting   int  // local callers waiting to enter, the try's caller included
	requested bool // the machine has a request or a try outstanding
	trying    bool // with requested: it is a try
	tryCaller bool // with trying: the try's caller still waits, first in line
	inside    bool // a local caller holds the critical section

	// Fences. fenced is set at runtime, and in a World with a fenced
	// store (CheckConfig.Fenced): without one, a World leaves them out,
	// since they would tell apart states that behave the same.
	fenced    bool
	recovery  bool   // WithRecovery: a machine may enter without a suspected peer; see suspect
	fence     uint64 // highest fencing token seen or taken
	holdFence uint64 // the fencing token of the current hold, or 0
	epochDue  bool   // WithRecovery: the machine was told of a suspicion since the last entry
	suspects  int    // peers suspected now

	entries uint64 // entries given to a local caller
}

// A driverHost is what a driver steps and tells: the runtime's Peer or a
// World's peer.
type driverHost interface {
	// machine returns the machine to step, ready to be changed.
	machine() machine
	// send hands m, stamped with the peer's fence, to the network.
	send(m Message)
	// asked says that the machine is about to be given a request, or a
	// try if try is set.
	asked(try bool)
	// entered says that the machine entered: for the first waiting
	// caller, whose hold's fence is in holdFence, if forCaller is set;
	// else for nobody, and the peer leaves at once.
	entered(forCaller bool)
	// left says that the machine is about to be told the peer left.
	left()
	// suspected reports whether the peer's failure detector suspects
	// peer j now; the host records a change before it tells the driver.
	suspected(j int) bool
	// tryRefused says that the outstanding try was refused; callerWaits
	// says its caller was still waiting, and is no longer.
	tryRefused(callerWaits bool)
	// broken says that the machine broke its contract, in words that
	// follow "peer N ", in an entry if entry is set: the runtime panics,
	// the World records a violation.
	broken(what string, entry bool)
}

func newDriver(id, n int, cfg *config, fenced bool) driver {
	return driver{id: id, n: n, fenced: fenced, recovery: cfg.recovery, fence: cfg.fenceFloor}
}

// idle reports whether no local caller is inside or waiting and the
// machine has nothing outstanding.
func (d *driver) idle() bool { return !d.requested && !d.inside && d.waiting == 0 }

// pending returns the callers queued behind the one the outstanding
// request is for (behind the holder, while one is inside).
func (d *driver) pending() int {
	if d.requested && d.waiting > 0 {
		return d.waiting - 1
	}
	return d.waiting
}

// request queues a local caller of Lock. If nothing is outstanding,
// nobody is inside and the peer is not in a minority, the machine is
// asked at once, and the caller may be let in within this call (entered,
// with forCaller).
func (d *driver) request(h driverHost, out *output) {
	d.waiting++
	d.next(h, out)
}

// try makes a local caller's try, if the peer is idle and not in a
// minority, and reports whether it did; a try is never queued. The
// machine either lets the caller in or refuses it, in this call or in a
// later one.
func (d *driver) try(h driverHost, out *output) bool {
	if !d.idle() || d.minority() {
		return false
	}
	d.waiting++
	d.ask(h, out, true)
	return true
}

// cancel withdraws a waiting caller: the try's caller if try is set,
// which must be waiting, else any caller of Lock. See driver for what
// becomes of a request the machine has out.
func (d *driver) cancel(try bool) {
	d.waiting--
	if try {
		d.tryCaller = false
	}
}

// release is a local caller leaving the critical section, which it
// holds.
func (d *driver) release(h driverHost, out *output) {
	d.inside = false
	d.holdFence = 0
	d.leave(h, out)
}

// deliver steps the machine with m, which arrived from another peer,
// after taking in its fence.
func (d *driver) deliver(h driverHost, out *output, m Message) {
	if d.fenced {
		d.fence = max(d.fence, m.Fence)
	}
	d.step(h, out, event{kind: evMessage, msg: m})
}

// suspect records that the peer's failure detector suspects peer j, or
// trusts it again (the host reports only changes, after recording them),
// and tells the machine what it may act on.
//
// Without WithRecovery the machine is told of every change; the
// algorithms ignore it (the runtime only ends the waits that need j), and
// the textbook's naive recoveries, World-only variants, act on it.
//
// With WithRecovery a machine lets its peer in without the peers it
// suspects, so a suspicion is a vote that they are gone, and only a peer
// that trusts a majority of the cluster, itself included, may cast it:
// while the peer suspects more than (n-1)/2 others it is in a minority,
// perhaps cut off alone, and the machine is told of no suspicion at all
// (the ones it was told of are taken back as trusts), so that it enters
// only with the real permission, token or grant of the others, and no
// new request is given to it (callers wait; see minority). A minority
// therefore never enters on its own, and the fences a majority takes
// rank above any it could take. When the peer is back in a majority, the
// machine is told of every suspicion again, and a waiting caller's
// request goes out. The first entry after the machine is told of a
// suspicion takes a fence of a new epoch (see entryFence).
func (d *driver) suspect(h driverHost, out *output, j int, suspected bool) {
	wasMajority := d.majority()
	if suspected {
		d.suspects++
	} else {
		d.suspects--
	}
	if !d.recovery {
		d.tell(h, out, j, suspected)
		return // the machine goes on only with the peers' own answers
	}
	told := false // the machine is told that j is back, after it was told that j had gone
	switch nowMajority := d.majority(); {
	case wasMajority && nowMajority:
		d.tell(h, out, j, suspected)
		told = !suspected
	case wasMajority: // into a minority: take back what the machine was told
		for k := range d.n {
			if k != j && h.suspected(k) {
				d.tell(h, out, k, false)
			}
		}
	case nowMajority: // back in a majority: tell the machine every suspicion
		for k := range d.n {
			if h.suspected(k) {
				d.tell(h, out, k, true)
			}
		}
	}
	if !suspected {
		// j is back, whether or not the machine was told it had gone:
		// what it was sent, or sent, meanwhile may be lost. Ref says
		// which (see evReached).
		var ref uint64
		if told {
			ref = 1
		}
		d.step(h, out, event{kind: evReached, msg: Message{From: j, To: d.id, Ref: ref}})
	}
	d.next(h, out)
}

// tell steps the machine with a suspicion of peer j, or a trust.
func (d *driver) tell(h driverHost, out *output, j int, suspected bool) {
	if suspected {
		d.epochDue = d.epochDue || d.recovery
		d.step(h, out, event{kind: evSuspect, msg: Message{From: j, To: d.id}})
	} else {
		d.step(h, out, event{kind: evTrust, msg: Message{From: j, To: d.id}})
	}
}

// majority reports whether the peer trusts a majority of the cluster,
// itself included: it suspects at most (n-1)/2 others.
func (d *driver) majority() bool { return d.suspects <= (d.n-1)/2 }

// minority reports whether the peer, running WithRecovery, suspects so
// many others that it must not enter on its own: see suspect.
func (d *driver) minority() bool { return d.recovery && !d.majority() }

// acting reports whether the machine acts on a suspicion now: it runs
// WithRecovery and was told of one.
func (d *driver) acting() bool { return d.recovery && d.suspects > 0 && d.majority() }

// reached tells the machine that peer j, which was unreachable for a
// while but never suspected, is reachable again: what was sent to or
// from it meanwhile may be lost (see evReached).
func (d *driver) reached(h driverHost, out *output, j int) {
	d.step(h, out, event{kind: evReached, msg: Message{From: j, To: d.id}})
	d.next(h, out)
}

// ask gives the machine a request, or a try, for the first waiting
// caller.
func (d *driver) ask(h driverHost, out *output, try bool) {
	d.requested, d.trying, d.tryCaller = true, try, try
	h.asked(try)
	if try {
		d.step(h, out, event{kind: evTry})
	} else {
		d.step(h, out, event{kind: evRequest})
	}
}

// leave tells the machine that the peer left, then asks again for the
// next waiting caller, if any.
func (d *driver) leave(h driverHost, out *output) {
	h.left()
	d.step(h, out, event{kind: evRelease})
	d.next(h, out)
}

// next asks the machine for the first waiting caller if nothing is
// outstanding, nobody is inside, and the peer is not in a minority.
func (d *driver) next(h driverHost, out *output) {
	if d.waiting > 0 && !d.requested && !d.inside && !d.minority() {
		d.ask(h, out, false)
	}
}

// wanting reports whether a caller waits to enter: the machine has a
// request out, or a caller's request waits for the peer to leave a
// minority.
func (d *driver) wanting() bool { return d.requested || (d.waiting > 0 && !d.inside) }

// step applies ev to the machine, hands what it sends to the host, and
// then puts an entry or a refusal into effect.
func (d *driver) step(h driverHost, out *output, ev event) {
	out.reset()
	h.machine().step(ev, out)
	for i := range out.msgs {
		m := &out.msgs[i]
		if d.fenced {
			m.Fence = d.fence
		}
		h.send(*m)
	}
	out.sent = len(out.msgs)
	if cap(out.msgs) > maxKeptOutput {
		// A broadcast at large n: do not keep n-1 messages alive until
		// the next step. Small buffers stay, so small clusters step
		// without allocating.
		out.msgs = nil
	}
	entered, refused := out.entered, out.refused
	switch {
	case entered:
		d.enter(h, out, ev.kind)
	case refused:
		d.refuse(h, out)
	}
}

// maxKeptOutput is the largest output capacity, in messages, a driver's
// caller keeps between steps.
const maxKeptOutput = 64

// enter puts into effect that the machine entered, in a step caused by
// an event of kind cause.
func (d *driver) enter(h driverHost, out *output, cause eventKind) {
	switch {
	case cause == evRelease:
		h.broken("entered on leaving", true)
		return
	case d.inside:
		h.broken("entered while already inside", true)
		return
	case !d.requested:
		h.broken("entered without a request", true)
		return
	}
	d.requested, d.trying = false, false
	if d.waiting == 0 {
		// Every caller gave up: an entry all the same, left at once. It
		// takes no fence: nobody holds it, so no store sees one, and
		// the next hold's fence follows the last one a caller got. A
		// new epoch that is due waits for that hold too.
		h.entered(false)
		d.leave(h, out)
		return
	}
	fence := d.takeFence(h.machine())
	d.waiting--
	d.tryCaller = false
	d.inside = true
	d.holdFence = fence
	d.entries++
	h.entered(true)
}

// refuse puts into effect that the machine refused the outstanding try:
// its caller, if it still waits, is told, and callers of Lock that queued
// behind it make the next request.
func (d *driver) refuse(h driverHost, out *output) {
	if !d.trying {
		h.broken("refused a try it did not make", false)
		return
	}
	d.requested, d.trying = false, false
	callerWaits := d.tryCaller
	if callerWaits {
		d.tryCaller = false
		d.waiting--
	}
	h.tryRefused(callerWaits)
	d.next(h, out)
}

// takeFence takes the fencing token of an entry by machine m: the next
// one, or, with WithRecovery, for the first entry since a peer became
// suspected while one still is, the first of the next epoch. It is 0
// once the fences have reached MaxFence (they never wrap), and without
// fences.
func (d *driver) takeFence(m machine) uint64 {
	if !d.fenced {
		return 0
	}
	due := d.epochDue && d.acting()
	d.epochDue = false
	if d.fence >= MaxFence {
		return 0
	}
	f := entryFence(m, d.fence, d.recovery, due, d.id, d.n)
	if f > MaxFence {
		d.fence = MaxFence // fences never wrap: no later hold has one
		return 0
	}
	d.fence = f
	return f
}

// appendState appends the driver's encoding for a World's state: what
// the peer's future depends on. The fences are left out when not kept,
// and the count of suspects, which the World's detector encodes, always.
func (d *driver) appendState(b []byte) []byte {
	b = appendInt(b, d.waiting)
	b = appendBool(b, d.requested)
	b = appendBool(b, d.trying)
	b = appendBool(b, d.tryCaller)
	b = appendBool(b, d.inside)
	if d.fenced {
		b = appendUint(b, d.fence)
		b = appendUint(b, d.holdFence)
		b = appendBool(b, d.epochDue)
	}
	return b
}
