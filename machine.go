package dmutex

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// A MessageKind names what a Message means to the protocol. Kinds are shared by
// all algorithms; each algorithm uses the few its paper defines and ignores
// the rest.
type MessageKind uint8

// Message kinds. Their String forms are the keys of Stats.ByKind.
const (
	KindRequest     MessageKind = iota + 1 // ask for permission or for the token
	KindReply                              // permission (Lamport, Ricart-Agrawala)
	KindRelease                            // the sender left the critical section
	KindGrant                              // the coordinator's permission (centralized)
	KindToken                              // the token itself (Suzuki-Kasami, token ring)
	KindPrivilege                          // Raymond's name for the token
	KindLocked                             // a Maekawa voter's vote
	KindInquire                            // a Maekawa voter asks for its vote back
	KindFailed                             // a Maekawa voter says the request cannot win now
	KindRelinquish                         // a Maekawa requester gives a vote back
	KindTry                                // a TryLock request: answer at once, never defer it
	KindBusy                               // the answer to a KindTry that cannot be granted now
	KindCoordinator                        // the sender takes over as coordinator (centralized failover, Suzuki-Kasami regeneration)
	KindStatus                             // a survivor tells the new coordinator what it holds (the same recoveries)
	numKinds                               // one past the last kind
)

var kindNames = [numKinds]string{
	KindRequest:     "request",
	KindReply:       "reply",
	KindRelease:     "release",
	KindGrant:       "grant",
	KindToken:       "token",
	KindPrivilege:   "privilege",
	KindLocked:      "locked",
	KindInquire:     "inquire",
	KindFailed:      "failed",
	KindRelinquish:  "relinquish",
	KindTry:         "try",
	KindBusy:        "busy",
	KindCoordinator: "coordinator",
	KindStatus:      "status",
}

// String returns the kind's lower-case name, such as "request".
func (k MessageKind) String() string {
	if k.Valid() {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is one of the kinds defined above.
func (k MessageKind) Valid() bool { return k > 0 && k < numKinds }

// A Message is what one peer sends another. It is a plain value: a
// Transport may copy it, serialize it, or hold it as long as it likes.
//
// What TS and Ref mean depends on the algorithm; each machine's comment
// says. TS is a Lamport timestamp, a request number or a hop count. Ref is
// a second number: in a Ricart-Agrawala reply, the timestamp of the request
// it answers, so that a stale reply can be told apart; in Maekawa, the
// sender's clock; on the token ring, the token's idle count.
type Message struct {
	Kind  MessageKind
	From  int    // sender's peer id
	To    int    // receiver's peer id
	TS    uint64 // timestamp, request number or hop count
	Ref   uint64 // a second number, per algorithm (see above)
	Fence uint64 // highest fencing token the sender has seen; set by the runtime
	Token *Token // the token, on messages that carry one with data; else nil
}

// A Token is the data a Suzuki-Kasami token carries. Ownership moves with
// the message: the sender never touches it again.
type Token struct {
	LN    []uint64 // LN[j]: number of peer j's last satisfied request
	Queue []int    // peers waiting for the token, in FIFO order
}

func (t *Token) clone() *Token {
	if t == nil {
		return nil
	}
	return &Token{
		LN:    append([]uint64(nil), t.LN...),
		Queue: append([]int(nil), t.Queue...),
	}
}

// A machine is one peer's algorithm as a pure, synchronous state machine.
// It has no goroutines, channels, locks, clocks or I/O: step applies one
// event and appends what that event causes to out. The same machine runs
// under the goroutine runtime (peer.go), the simulator and the model
// checker, and a given state with a given event always gives the same
// output.
//
// The driver guarantees the local events come in a sane order: evRequest
// and evTry only when the peer is neither waiting nor inside, evRelease
// only after the machine entered. Messages may arrive at any time.
//
// evTry is a request that must not wait for a holder to leave: the machine
// either enters (output.enter) or refuses (output.refuse), in the step of
// evTry itself or in the step of a later message, and after a refusal it
// and every other machine are left with nothing that waits for the try.
//
// The machine contract: every machine implements machine and describer.
// What else it may implement, each optional interface declared in this
// file but needer (reach.go), and who asks:
//
//   - assigner: copy a state into a spare machine without allocating
//     (World.machine, for the checker's clones).
//   - clockMachine: stamps that matter only through their order, encoded
//     shifted and capped (World.appendState, World.stamps,
//     World.stampGap, World.triesOver; World.classify turns it on).
//   - tokenHolder: hold and carry the one token (World.checkTokens, and
//     World.carriesToken for every message sent, delivered or lost).
//   - regenerator: tokens of several epochs (World.classify,
//     World.checkEpochs).
//   - fencer: fences of its own, such as a token's epoch (entryFence, for
//     the per-peer driver's driver.takeFence, under Peer and World alike).
//   - timestamped: entries in (timestamp, id) order (World.classify, and
//     worldHost.entered's check of the order).
//   - coordinated: entries in order of arrival at a coordinator
//     (World.classify, worldHost.asked, World.deliver, worldHost.entered).
//   - idleChecker: what must hold at rest (World.finalCheck).
//   - needer, in reach.go: the peers a request can wait for
//     (Peer.unreachableLocked, under WithUnreachableAfter).
//
// A variant (variants.go) wraps a real machine and must keep every
// interface the real one has; its clone must return the wrapper. The
// machine-contract test (machine_test.go) holds every algorithm and
// variant to clone, assign and appendState: a field that clone or assign
// does not copy, or that the encoding does not see without a reason
// listed there, fails it.
type machine interface {
	step(ev event, out *output)

	// clone returns a deep copy that shares no memory with the receiver:
	// World.machine copies a machine before it steps one that a clone of
	// the world shares, and Peer.entersAtOnceLocked steps a copy to see
	// what a request would do.
	clone() machine

	// appendState appends a canonical encoding of the state to b: two
	// machines of one algorithm encode equally exactly when they would
	// behave the same from now on. The checker hashes it into the
	// world's state (World.appendState), and the runtime's fast path
	// compares it before and after a local round to find that the round
	// changed nothing (fastpath.go), so whatever a later step can read
	// must be encoded.
	appendState(b []byte) []byte
}

// describer is implemented by every machine: its state for people, one
// labelled field at a time (World.Describe, for World.String and the
// lab).
type describer interface {
	describe() []StateField
}

// assigner is implemented by machines that can take over the state of
// another machine of their type, reusing their own arrays, so that the
// checker copies a state without allocating (World.machine, with the
// spares cloneInto keeps). assign reports false, and changes nothing,
// when src is of another type; afterwards the receiver must be what
// src.clone() would have returned.
type assigner interface {
	assign(src machine) bool
}

// reuse returns a copy of src in dst's array: nil for nil.
func reuse[T any](dst, src []T) []T {
	if src == nil {
		return nil
	}
	return append(dst[:0], src...)
}

// A clockMachine is a machine whose stamps (its clock, the stamps it
// keeps, and the TS and non-zero Ref of every message it sends) matter
// only through their order, max and +1, with 0 meaning "none" where it is
// kept: adding one constant to every stamp of a whole world of such
// machines changes nothing they do. The world then encodes every stamp
// less the least one it encodes, so that states that differ by such a
// shift are one state.
//
// appendStateIn appends the machine's encoding with every stamp v it
// encodes written as sm.of(v) (sm renames the stamps of the whole world
// in order; nil leaves them as they are), and may leave out what no
// future event can read given noTries, a fact of the whole world that its
// own encoding implies: no try will be made or delivered again (every
// peer's budget of tries is spent and no try is in flight). appendStamps
// appends every stamp appendStateIn would encode with that noTries.
// World.classify uses it only over FIFO queues and when every machine of
// the world implements it.
type clockMachine interface {
	appendStateIn(b []byte, noTries bool, sm *stampMap) []byte
	appendStamps(s []uint64, noTries bool) []uint64
	// entryEvents is the most steps of the world (a request or try, a
	// leave, a delivery) one entry or refusal of n peers can take, from
	// its request to the last delivery its messages cause: see
	// World.stampGap.
	entryEvents(n int) int
	// carriesTry reports whether message m, in flight, belongs to a try
	// whose delivery may still read what noTries lets appendStateIn
	// leave out; the World asks it of every message in flight to decide
	// noTries (World.triesOver).
	carriesTry(m Message) bool
}

// tokenHolder is implemented by machines of token algorithms, so that the
// World can count tokens: exactly one must exist, held by a machine, in
// flight or lost (World.checkTokens). hasToken reports whether the
// machine holds it; carriesToken whether message m, sent by a machine of
// its algorithm, carries it, which the World asks of every message it
// sends, delivers or loses, so that it names no algorithm's kinds.
type tokenHolder interface {
	hasToken() bool
	carriesToken(m Message) bool
}

// regenerator is implemented by token machines that can regenerate a lost
// token (Suzuki-Kasami with WithRecovery). When regenerates is true,
// several tokens may exist, one per epoch, old ones waiting to be
// discarded where they arrive; the World then checks that no two tokens
// of one epoch exist instead of exactly one token. heldEpoch returns the
// epoch of the token the machine holds, and whether it holds one;
// sentEpoch the epoch of a token message it sent.
type regenerator interface {
	regenerates() bool
	heldEpoch() (uint64, bool)
	sentEpoch(m Message) uint64
}

// fencer is implemented by machines whose recovery can let two peers in
// at once (a falsely suspected holder and its successor), so that fences
// must not come from the count of entries alone: nextFence returns the
// fencing token of a hold that begins now, given the highest fence the
// peer has seen, and must be larger than it. A machine without it takes
// fence+1 or a fence of a new epoch (entryFence in reach.go, which the
// per-peer driver calls in driver.takeFence, for Peer and World alike).
type fencer interface {
	nextFence(fence uint64) uint64
}

// timestamped is implemented by machines that promise entries in
// (timestamp, id) order, which the World checks at every entry
// (worldHost.entered); requestTS is the timestamp of the peer's latest request.
type timestamped interface {
	requestTS() uint64
}

// coordinated is implemented by machines whose coordinator grants in the
// order requests arrive there, which the World checks at every entry
// (worldHost.entered). coordinatorID names the coordinator, or is -1 when the
// coordinator changes (centralized failover) and no order is promised
// across the changes. The coordinator's own requests and tries arrive
// when it makes them; of a message m delivered to the coordinator,
// requestArrives reports whether it is a request that arrives as it is
// delivered, and tryGranted, asked after the step on m with what that
// step sent, whether it is a try granted in that step, which arrives only
// then (a try is never queued).
type coordinated interface {
	coordinatorID() int
	requestArrives(m Message) bool
	tryGranted(m Message, sent []Message) bool
}

// idleChecker is implemented by machines that can say what must hold of
// them once the whole cluster is at rest, with nothing in flight and
// nobody waiting (a Maekawa voter's vote must be home), which the World
// checks when nothing is left to do (World.finalCheck). idleViolation
// returns "" when all is well.
type idleChecker interface {
	idleViolation() string
}

type eventKind uint8

const (
	evRequest eventKind = iota + 1 // the local user wants the critical section
	evRelease                      // the local user leaves the critical section
	evMessage                      // msg arrived from another peer
	evTry                          // the local user tries the critical section (TryLock)

	// evSuspect and evTrust say that the failure detector suspects peer
	// msg.From to have failed, or trusts it again: the runtime's, from
	// WithUnreachableAfter (see Peer.suspectLocked), or the checker's
	// and the simulator's. Only machines built with WithRecovery act on
	// them; the others ignore them.
	evSuspect
	evTrust

	// evReached says that peer msg.From is reachable again after a cut:
	// what was sent to or from it meanwhile may have been lost. The
	// driver sends it when the failure detector trusts the peer again
	// (not for a suspicion taken back because the peer fell into a
	// minority; see driver.suspect), with msg.Ref 1 if the machine was
	// told of the suspicion and has just been told evTrust, so that it
	// has already acted on the change; and when the transport reports the
	// peer back from a cut too short for any suspicion (driver.reached),
	// or the machine was told neither, with msg.Ref 0. A machine with a
	// recovery asks again for what it still waits for from msg.From; the
	// others ignore it.
	evReached
)

// An event is one input to a machine.
type event struct {
	kind eventKind
	msg  Message // for evMessage
}

// output collects what one step caused. The driver owns it and reuses it,
// so a step on the hot path allocates nothing.
type output struct {
	msgs    []Message
	entered bool
	refused bool // an outstanding try was refused: the machine is idle again
	sent    int  // set by the driver: how many messages the step sent (msgs may have been let go)
}

func (o *output) reset() {
	clear(o.msgs) // drop Token pointers so they can be collected
	o.msgs = o.msgs[:0]
	o.entered = false
	o.refused = false
	o.sent = 0
}

func (o *output) send(m Message) { o.msgs = append(o.msgs, m) }

// enter records that the machine has entered the critical section.
func (o *output) enter() {
	if o.entered || o.refused {
		panic("dmutex: machine entered twice, or entered and refused, in one step")
	}
	o.entered = true
}

// refuse records that the machine's outstanding try was refused.
func (o *output) refuse() {
	if o.entered || o.refused {
		panic("dmutex: machine both entered and refused, or refused twice, in one step")
	}
	o.refused = true
}

// broadcast sends a copy of m, from id, to every other peer of n.
func (o *output) broadcast(id, n int, m Message) {
	m.From = id
	for j := 0; j < n; j++ {
		if j != id {
			m.To = j
			o.send(m)
		}
	}
}

// before reports whether request (ts1, id1) has priority over (ts2, id2):
// the older timestamp wins, and the smaller id breaks a tie.
func before(ts1 uint64, id1 int, ts2 uint64, id2 int) bool {
	return ts1 < ts2 || (ts1 == ts2 && id1 < id2)
}

// State encoding helpers for appendState.

func appendUint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendInt(b []byte, v int) []byte { return binary.AppendVarint(b, int64(v)) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendUints(b []byte, vs []uint64) []byte {
	b = appendInt(b, len(vs))
	for _, v := range vs {
		b = appendUint(b, v)
	}
	return b
}

func appendInts(b []byte, vs []int) []byte {
	b = appendInt(b, len(vs))
	for _, v := range vs {
		b = appendInt(b, v)
	}
	return b
}

func appendBools(b []byte, vs []bool) []byte {
	b = appendInt(b, len(vs))
	for _, v := range vs {
		b = appendBool(b, v)
	}
	return b
}

// Helpers for describe.

// describeTS is a request's timestamp, or "none".
func describeTS(out bool, ts uint64) string {
	if !out {
		return "none"
	}
	return fmt.Sprintf("ts=%d", ts)
}

// describeStamps lists the peers with a non-zero timestamp, as P1:3.
func describeStamps(ts []uint64) string {
	var parts []string
	for j, t := range ts {
		if t != 0 {
			parts = append(parts, fmt.Sprintf("P%d:%d", j, t))
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// describePeers lists peer ids as [P1 P2].
func describePeers(ids []int) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("P%d", id)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
