package dmutex

import (
	"fmt"
	"slices"
)

// NewCentralized starts n peers of which peer 0 is the coordinator: it
// keeps the current holder and a FIFO queue of waiting peers, and the
// others ask it, as a lock server would be asked.
//
// Cost: 3 messages per entry by a peer other than the coordinator
// (REQUEST, GRANT, RELEASE); none for the coordinator's own entries.
// Synchronization delay: 2 messages (RELEASE, then GRANT). Channels: any
// order will do: a peer's next request may overtake its release, and the
// coordinator just queues it behind that release. Fairness: FIFO in the
// order requests reach the coordinator, and no starvation. There is no
// bound on overtaking: while a request is on its way to the coordinator,
// another peer may enter as often as it requests (Check finds (n-1)·r
// entries by others between a request and its entry for r requests per
// peer: n = 2 with r = 4, n = 3 with r = 1 to 3, n = 4 with r = 1 and 2).
// Failures: without WithRecovery (below) the coordinator is a single point
// of failure. If it crashes, no peer can enter again and the holder's
// release is lost; if a holder crashes, the lock is never released. A lost message
// blocks its requester, and a partition blocks every peer cut off from
// peer 0 while the coordinator's side goes on.
//
// TryLock: the coordinator decides at once, with no message for its own
// try. Another peer sends a try to the coordinator, which grants it if
// nobody holds the lock (then release as usual: 3 messages in all) and
// answers busy otherwise (2 messages: try, busy), keeping nothing.
//
// WithRecovery turns on coordinator failover, which needs a failure
// detector: the runtime's (WithUnreachableAfter), or the checker's
// (CheckConfig.Detector). The election is
// the bully rule of H. Garcia-Molina, "Elections in a distributed
// computing system", IEEE Trans. Computers C-31(1), 1982, with the lowest
// id as the highest priority: a peer that suspects the coordinator, and
// every peer of lower id than its own, takes over. Coordinators have
// terms: the coordinator of term t is peer t mod n (term 0 is peer 0's),
// a peer taking over picks the smallest term above the highest it knows
// that it coordinates, so no two coordinators ever share a term, and
// every message carries its term in TS and, but for COORDINATOR, the
// number of the request it concerns in Ref. The new coordinator sends
// COORDINATOR(t) to every other peer and grants nothing until every peer
// it does not suspect has reported. A peer that hears of a term above its
// own adopts it (a coordinator of an older term steps down and forgets
// its holder and queue) and reports to the new coordinator in one
// message: its REQUEST again if it waits, else STATUS(t) with the number
// of the request it holds, or 0 if it holds nothing; a try outstanding at
// the old coordinator is refused. From the reports the new coordinator
// rebuilds the holder and the queue, the waiting requests in (request
// number, id) order, and then grants as before. Extra messages: n-1
// COORDINATOR and n-2 reports when the coordinator crashed, 2n-3 in all,
// and as many when the holder did (2(n-1) after a false suspicion, and
// one COORDINATOR more when the suspected peer is back: the coordinator
// names its term again to a peer it could not reach, which may have
// missed it); none while nobody is suspected. A peer that suspects more
// than (n-1)/2 others takes nothing over (see [WithRecovery]): at n = 2
// a survivor waits.
//
// A link that comes back from a cut the coordinator was never told of
// (too short to suspect anyone, or while it was in a minority) may have
// lost anything that went across it: a COORDINATOR, a request, a grant,
// a release. Nobody can tell which, so the coordinator starts a term of
// its own (2(n-1) messages), and the reports rebuild the holder and the
// queue: after a healed partition every waiting peer is served (Check at
// n = 2 with a partition that heals, docs/checking.md, and
// TestRecoveryHealedPartition).
//
// What happens to what was in flight. A grant, busy or release of an
// older term is ignored wherever it arrives: a client takes only its own
// term's grant for its outstanding request number, a coordinator only its
// own term's messages. The first message of the new term from a peer is
// its report, so a release or a request that overtakes a status over a
// reordering network supersedes it; a release names the hold it ends. A
// holder that the coordinator suspects has left: its release will never
// come. The coordinator then starts a term of its own (COORDINATOR again,
// and the reports) before it grants again, and the lock goes to the next
// queued peer that is not suspected (a suspected one keeps its place until
// it is trusted again; a suspected peer's report of a hold is not taken).
// A peer that missed a term hears of it: one that suspects its coordinator
// of a term past 0 names that term in a STATUS to the lowest peer it does
// not suspect, and a peer answers an announcement of a term below its own
// with its term; the receiver adopts it, and takes over above it if it is
// to. Fences follow terms (Peer.Fence): a hold granted in term t takes a
// fence above t·FenceEpoch, so above every fence of an older term's
// holds, those of a suspected holder included.
//
// With a perfect detector (only crashed peers are suspected) this is
// safe, and every surviving request is served (Check at n = 3 and 4, one
// crash of any peer at any point; README, "Crash recovery, checked").
// With an imperfect one, a falsely suspected coordinator is alive: until
// COORDINATOR reaches it, it is a second coordinator, of an older term,
// and since its report is not awaited, the new coordinator may grant
// while it is inside; so may a coordinator that falsely suspects the
// holder. Check finds the first run: peer 0, the coordinator, is inside
// when peer 1 suspects it, and peer 1 grants itself on peer 2's report.
// The survivors still go on entering, and a store that checks fences
// stays safe: the older term's holder writes with a smaller fence (Check
// with CheckConfig.Fenced at n = 3). FIFO order of service holds
// within a term only; the World checks no order with recovery on. The
// public variant centralized-naive-failover grants before the reports are
// in, and Check finds two holders with a perfect detector.
func NewCentralized(n int, opts ...Option) (*Cluster, error) {
	return New(Centralized, n, opts...)
}

// centralized is the coordinator machine. Without WithRecovery its
// messages carry nothing but their kind; with it, every message carries
// in TS the coordinator term it belongs to, and a request, try, grant,
// busy, release or status carries in Ref the number of the request it
// concerns (a status: 0 when the sender holds nothing).
type centralized struct {
	id, n int

	// At every peer.
	wanting bool // our REQUEST is out (or queued locally at the coordinator)
	trying  bool // our TRY is out, not yet answered

	// At the coordinator only.
	holder int   // peer in the critical section, or -1
	queue  []int // waiting peers, oldest first

	// WithRecovery only: see stepRecovery.
	recovery   bool
	inside     bool     // granted and not yet released
	term       uint64   // highest coordinator term known; its coordinator is term % n
	req        uint64   // number of this peer's latest request or try
	suspected  []bool   // suspected[j]: the failure detector suspects j
	collecting bool     // the coordinator of term waits for the survivors' reports
	reported   []bool   // at the coordinator: reported[j], j's first message of this term came
	nums       []uint64 // at the coordinator: nums[j], the number of j's queued request
	held       uint64   // at the coordinator: the number of the holder's request
}

const coordinator = 0

func newCentralized(id, n int, cfg *config) (machine, error) {
	c := &centralized{id: id, n: n, holder: -1}
	if cfg != nil && cfg.recovery {
		c.recovery = true
		c.suspected = make([]bool, n)
		c.reported = make([]bool, n)
		c.nums = make([]uint64, n)
	}
	return c, nil
}

func (c *centralized) step(ev event, out *output) {
	if c.recovery {
		c.stepRecovery(ev, out)
		return
	}
	switch ev.kind {
	case evRequest:
		c.wanting = true
		if c.id == coordinator {
			c.ask(c.id, out)
		} else {
			out.send(Message{Kind: KindRequest, From: c.id, To: coordinator})
		}
	case evTry:
		switch {
		case c.id != coordinator:
			c.trying = true
			out.send(Message{Kind: KindTry, From: c.id, To: coordinator})
		case c.holder < 0:
			c.give(c.id, out)
		default:
			out.refuse()
		}
	case evRelease:
		if c.id == coordinator {
			c.free(out)
		} else {
			out.send(Message{Kind: KindRelease, From: c.id, To: coordinator})
		}
	case evMessage:
		m := ev.msg
		switch {
		case m.Kind == KindGrant && c.id != coordinator && (c.wanting || c.trying) && m.From == coordinator:
			c.wanting, c.trying = false, false
			out.enter()
		case m.Kind == KindBusy && c.id != coordinator && c.trying && m.From == coordinator:
			c.trying = false
			out.refuse()
		case m.Kind == KindRequest && c.id == coordinator:
			c.ask(m.From, out)
		case m.Kind == KindTry && c.id == coordinator:
			if c.holder < 0 {
				c.give(m.From, out)
			} else {
				out.send(Message{Kind: KindBusy, From: c.id, To: m.From})
			}
		case m.Kind == KindRelease && c.id == coordinator && m.From == c.holder:
			c.free(out)
		}
	}
}

// ask is the coordinator's handling of peer j's request.
func (c *centralized) ask(j int, out *output) {
	if c.holder >= 0 {
		c.queue = append(c.queue, j)
		return
	}
	c.give(j, out)
}

// free is the coordinator's handling of the holder's release.
func (c *centralized) free(out *output) {
	c.holder = -1
	if len(c.queue) > 0 {
		j := c.queue[0]
		c.queue = c.queue[1:]
		c.give(j, out)
	}
}

func (c *centralized) give(j int, out *output) {
	c.holder = j
	if j == c.id {
		c.wanting = false
		out.enter()
		return
	}
	out.send(Message{Kind: KindGrant, From: c.id, To: j})
}

// idleViolation reports what this peer still keeps once the cluster is at
// rest, with every request and try answered and nothing in flight.
func (c *centralized) idleViolation() string {
	switch {
	case c.wanting || c.trying:
		return "keeps a request"
	case c.holder >= 0 || len(c.queue) > 0:
		return fmt.Sprintf("keeps holder %d and queue %v", c.holder, c.queue)
	}
	return ""
}

// needs appends the peers a request can wait for (WithUnreachableAfter):
// the coordinator, or for the coordinator itself the current holder.
func (c *centralized) needs(buf []int) []int {
	switch {
	case c.id != c.coord():
		return append(buf, c.coord())
	case c.holder >= 0 && c.holder != c.id:
		return append(buf, c.holder)
	}
	return buf
}

func (c *centralized) clone() machine {
	d := *c
	d.queue = append([]int(nil), c.queue...)
	if c.recovery {
		d.suspected = append([]bool(nil), c.suspected...)
		d.reported = append([]bool(nil), c.reported...)
		d.nums = append([]uint64(nil), c.nums...)
	}
	return &d
}

func (c *centralized) appendState(b []byte) []byte {
	b = appendBool(b, c.wanting)
	b = appendBool(b, c.trying)
	b = appendInt(b, c.holder)
	b = appendInts(b, c.queue)
	if c.recovery {
		b = appendBool(b, c.inside)
		b = appendUint(b, c.term)
		b = appendUint(b, c.req)
		b = appendBools(b, c.suspected)
		b = appendBool(b, c.collecting)
		b = appendBools(b, c.reported)
		b = appendUints(b, c.nums)
		b = appendUint(b, c.held)
	}
	return b
}

// coordinatorID names the coordinator whose order of arrivals the World
// checks; with recovery the coordinator changes, and the promise of FIFO
// order holds only within a term, so it is -1: no order is checked.
func (c *centralized) coordinatorID() int {
	if c.recovery {
		return -1
	}
	return coordinator
}

// requestArrives: a KindRequest joins the coordinator's queue as it
// arrives (or is granted at once, first in line).
func (c *centralized) requestArrives(m Message) bool { return m.Kind == KindRequest }

// tryGranted: a KindTry is granted in the step that delivers it unless
// the coordinator answers it KindBusy.
func (c *centralized) tryGranted(m Message, sent []Message) bool {
	return m.Kind == KindTry && !slices.ContainsFunc(sent, func(s Message) bool { return s.Kind == KindBusy })
}

func (c *centralized) describe() []StateField {
	fs := []StateField{{"wanting", fmt.Sprint(c.wanting)}}
	if c.trying {
		fs = append(fs, StateField{"trying", "true"})
	}
	if c.recovery {
		fs = append(fs, StateField{"term", fmt.Sprintf("%d (coordinator P%d)", c.term, c.coord())}, StateField{"request", fmt.Sprint(c.req)})
		if c.inside {
			fs = append(fs, StateField{"inside", "true"})
		}
		var sus []int
		for j, s := range c.suspected {
			if s {
				sus = append(sus, j)
			}
		}
		fs = append(fs, StateField{"suspected", describePeers(sus)})
		if c.collecting {
			fs = append(fs, StateField{"collecting", "true"})
		}
	}
	if c.id == c.coord() {
		holder := "none"
		if c.holder >= 0 {
			holder = fmt.Sprintf("P%d", c.holder)
		}
		fs = append(fs, StateField{"holder", holder}, StateField{"queue", describePeers(c.queue)})
	}
	return fs
}

// coord is the coordinator of the term this peer knows.
func (c *centralized) coord() int {
	if !c.recovery {
		return coordinator
	}
	return int(c.term % uint64(c.n))
}

// maxTerm bounds the terms a peer adopts: an announcement beyond it is
// refused, so that no forged term can make the next one wrap.
const maxTerm = 1 << 62

// stepRecovery is step with WithRecovery: the protocol of the plain
// machine, each message stamped with its term, plus the failover.
func (c *centralized) stepRecovery(ev event, out *output) {
	switch ev.kind {
	case evRequest:
		c.req++
		c.wanting = true
		if c.id == c.coord() {
			c.enqueue(c.id, c.req)
			c.grantNext(out)
		} else {
			out.send(Message{Kind: KindRequest, From: c.id, To: c.coord(), TS: c.term, Ref: c.req})
		}
	case evTry:
		c.req++
		switch {
		case c.id != c.coord():
			c.trying = true
			out.send(Message{Kind: KindTry, From: c.id, To: c.coord(), TS: c.term, Ref: c.req})
		case !c.collecting && c.holder < 0:
			c.grantTo(c.id, c.req, out)
		default:
			out.refuse()
		}
	case evRelease:
		c.inside = false
		if c.id != c.coord() {
			out.send(Message{Kind: KindRelease, From: c.id, To: c.coord(), TS: c.term, Ref: c.req})
		} else if c.holder == c.id {
			c.holder, c.held = -1, 0
			c.grantNext(out)
		}
	case evReached:
		if j := ev.msg.From; j >= 0 && j < c.n && j != c.id && c.id == c.coord() {
			if ev.msg.Ref != 0 {
				// Back from a suspicion we acted on: we granted it
				// nothing meanwhile, but it may have missed our
				// term. Name it again: a peer that missed it takes
				// it and reports to us; one that knows a higher term
				// names it, and we take that one.
				out.send(Message{Kind: KindCoordinator, From: c.id, To: j, TS: c.term})
				return
			}
			// Back from a cut nobody suspected: what went between us
			// may be lost (our COORDINATOR, its request or release,
			// our grant), and nobody can tell which, so start a term
			// of our own: every peer reports what it waits for or
			// holds, and the holder and the queue are rebuilt from the
			// reports.
			c.takeOver(out)
		}
	case evSuspect, evTrust:
		j := ev.msg.From
		if j < 0 || j >= c.n || j == c.id {
			return
		}
		c.suspected[j] = ev.kind == evSuspect
		if c.id == c.coord() {
			switch {
			case !c.suspected[j] || c.holder != j:
			case c.collecting:
				// A holder of an older term: its fences are all below
				// this term's.
				c.holder, c.held = -1, 0
			default:
				// The holder is suspected: it crashed inside, we take
				// it, and its release will never come. A new term puts
				// the next holder's fence above the suspected one's.
				c.takeOver(out)
				return
			}
			c.progress(out)
			return
		}
		if ev.kind == evSuspect {
			c.maybeTakeOver(out)
		}
	case evMessage:
		c.receive(ev.msg, out)
	}
}

// receive handles a message with recovery on.
func (c *centralized) receive(m Message, out *output) {
	j := m.From
	if j < 0 || j >= c.n || j == c.id {
		return
	}
	if m.Kind == KindCoordinator {
		switch {
		case m.TS > c.term && m.TS <= maxTerm && m.TS%uint64(c.n) == uint64(j):
			c.adopt(m.TS, out)
		case m.TS < c.term:
			// j took over below a term it has not heard of (its
			// COORDINATOR was lost to a crash): tell it, so that it
			// takes a higher one.
			out.send(Message{Kind: KindStatus, From: c.id, To: j, TS: c.term})
		}
		return
	}
	if m.Kind == KindStatus && m.TS > c.term && m.TS <= maxTerm {
		// A term we missed, named by a peer that heard of it. A term
		// of our own above ours was never announced: only a forgery
		// names one, and adopting it would make us a coordinator that
		// holds no reports and reports to itself.
		if m.TS%uint64(c.n) != uint64(c.id) {
			c.adopt(m.TS, out)
		}
		return
	}
	if m.TS != c.term {
		return // of an older term: an old coordinator's, or to one
	}
	if c.id != c.coord() {
		// A client hears only from the coordinator of its term.
		switch {
		case j != c.coord():
		case m.Kind == KindGrant && (c.wanting || c.trying) && m.Ref == c.req:
			c.wanting, c.trying = false, false
			c.inside = true
			out.enter()
		case m.Kind == KindBusy && c.trying && m.Ref == c.req:
			c.trying = false
			out.refuse()
		}
		return
	}
	// At the coordinator: the first message of this term from j is its
	// report; a later one says something newer, so a status that comes
	// after it is stale (it can only have been overtaken).
	first := !c.reported[j]
	switch m.Kind {
	case KindStatus, KindRequest, KindTry, KindRelease:
		c.reported[j] = true
	default:
		return
	}
	switch m.Kind {
	case KindStatus:
		// A holder we suspect counts as gone: were it taken as the
		// holder, its crash, already suspected, would never free it.
		if first && m.Ref != 0 && c.holder < 0 && !c.suspected[j] {
			c.holder, c.held = j, m.Ref
		}
	case KindRequest:
		c.enqueue(j, m.Ref)
	case KindTry:
		if !c.collecting && c.holder < 0 {
			c.grantTo(j, m.Ref, out)
		} else {
			out.send(Message{Kind: KindBusy, From: c.id, To: j, TS: c.term, Ref: m.Ref})
		}
	case KindRelease:
		// Over a reordering network a release can come after the
		// holder's next request was granted: it must name the hold.
		if c.holder == j && m.Ref == c.held {
			c.holder, c.held = -1, 0
		}
	}
	c.progress(out)
}

// enqueue queues j's request number r, once. While the coordinator
// rebuilds, the queue is kept in (request number, id) order: the reports
// say nothing of the old coordinator's order, and fewer requests go
// first. Afterwards requests queue in order of arrival.
func (c *centralized) enqueue(j int, r uint64) {
	if slices.Contains(c.queue, j) {
		return
	}
	c.nums[j] = r
	k := len(c.queue)
	if c.collecting {
		k = 0
		for k < len(c.queue) && !before(r, j, c.nums[c.queue[k]], c.queue[k]) {
			k++
		}
	}
	c.queue = slices.Insert(c.queue, k, j)
}

// progress ends the rebuild once every peer not suspected has reported,
// and grants the lock when it is free.
func (c *centralized) progress(out *output) {
	if c.collecting {
		for j := range c.n {
			if j != c.id && !c.reported[j] && !c.suspected[j] {
				return
			}
		}
		c.collecting = false
	}
	c.grantNext(out)
}

// grantNext grants the lock, if it is free and the rebuild is over, to the
// oldest queued peer not suspected. A suspected one keeps its place: if
// it turns out alive, it is served once trusted again.
func (c *centralized) grantNext(out *output) {
	if c.collecting || c.holder >= 0 {
		return
	}
	for k, j := range c.queue {
		if !c.suspected[j] {
			c.queue = slices.Delete(c.queue, k, k+1) // the machine owns its queue: clone copies it
			c.grantTo(j, c.nums[j], out)
			return
		}
	}
}

// grantTo gives the lock to j for its request number r.
func (c *centralized) grantTo(j int, r uint64, out *output) {
	c.holder, c.held = j, r
	c.nums[j] = 0
	if j == c.id {
		c.wanting = false
		c.inside = true
		out.enter()
		return
	}
	out.send(Message{Kind: KindGrant, From: c.id, To: j, TS: c.term, Ref: r})
}

// maybeTakeOver starts a new term, with this peer as its coordinator,
// when the coordinator of the current one is suspected and every peer of
// lower id is too.
func (c *centralized) maybeTakeOver(out *output) {
	if !c.suspected[c.coord()] {
		return
	}
	if low := slices.Index(c.suspected[:c.id], false); low >= 0 {
		// A peer of lower id is to take over. Past term 0, which every
		// peer knows, it may have missed ours: name it (a coordinator's
		// announcement is lost with it when it crashes).
		if c.term != 0 {
			out.send(Message{Kind: KindStatus, From: c.id, To: low, TS: c.term})
		}
		return
	}
	c.takeOver(out)
}

// takeOver starts the next term whose coordinator is this peer. Terms
// stop at maxTerm: past it (2^62 takeovers, or a forged term) a peer
// takes over no more.
func (c *centralized) takeOver(out *output) {
	if c.term >= maxTerm {
		return
	}
	// The next term whose coordinator is this peer: terms never collide.
	t := c.term + uint64((c.id-c.coord()+c.n)%c.n)
	if t == c.term {
		t += uint64(c.n)
	}
	c.term = t
	c.dropTry(out)
	c.collecting = true
	c.holder, c.held = -1, 0
	c.queue = nil
	clear(c.reported)
	clear(c.nums)
	if c.inside {
		c.holder, c.held = c.id, c.req
	}
	if c.wanting {
		c.enqueue(c.id, c.req)
	}
	out.broadcast(c.id, c.n, Message{Kind: KindCoordinator, TS: t})
	c.progress(out)
}

// adopt moves this peer to term t, announced by its coordinator: a
// coordinator of an older term steps down, and the peer reports what it
// holds: its request again if it waits, a status otherwise.
func (c *centralized) adopt(t uint64, out *output) {
	c.term = t
	c.collecting = false
	c.holder, c.held = -1, 0
	c.queue = nil
	clear(c.reported)
	clear(c.nums)
	c.dropTry(out)
	to := c.coord()
	switch {
	case c.wanting:
		out.send(Message{Kind: KindRequest, From: c.id, To: to, TS: t, Ref: c.req})
	case c.inside:
		out.send(Message{Kind: KindStatus, From: c.id, To: to, TS: t, Ref: c.req})
	default:
		out.send(Message{Kind: KindStatus, From: c.id, To: to, TS: t})
	}
	c.maybeTakeOver(out)
}

// dropTry refuses a try outstanding at the coordinator of an older term:
// its answer, if it comes, is of that term and is ignored.
func (c *centralized) dropTry(out *output) {
	if c.trying {
		c.trying = false
		out.refuse()
	}
}

// nextFence puts the fences of a term in an epoch of their own (with
// WithRecovery): a hold granted in term t takes a fence above
// t·FenceEpoch, so above every fence of an older term's holds, even one
// a falsely suspected holder still writes with.
func (c *centralized) nextFence(fence uint64) uint64 {
	if c.recovery && c.term < MaxFence/FenceEpoch {
		return max(fence, c.term*FenceEpoch) + 1
	}
	return fence + 1
}
