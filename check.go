package dmutex

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"slices"
	"strings"
	"time"
)

// A Network is the checker's model of the network.
type Network uint8

// The network models. The zero Network is the default: FIFO, unless a
// variant says otherwise.
const (
	NetworkDefault   Network = iota
	NetworkFIFO              // a FIFO queue per ordered pair of peers
	NetworkUnordered         // an unordered multiset of messages in flight
)

// String returns "fifo", "unordered" or "default".
func (k Network) String() string {
	switch k {
	case NetworkFIFO:
		return "fifo"
	case NetworkUnordered:
		return "unordered"
	case NetworkDefault:
		return "default"
	}
	return fmt.Sprintf("Network(%d)", uint8(k))
}

// ParseNetwork returns the Network named s: "fifo" or "unordered".
func ParseNetwork(s string) (Network, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "fifo":
		return NetworkFIFO, nil
	case "unordered", "bag", "reorder":
		return NetworkUnordered, nil
	}
	return 0, fmt.Errorf("%w: unknown network %q (want fifo or unordered)", ErrInvalidConfig, s)
}

// CheckFaults are the faults Check may inject, each at most once, at any
// point of any run. The zero CheckFaults injects none.
type CheckFaults struct {
	Crash bool // one peer, any of them unless CrashOnly says otherwise, may crash
	// CrashOnly, if not zero, is the set of peers that may crash, with
	// Crash (peer p is bit 1<<p, as in Partition): 1<<2 lets only peer 2
	// crash. Zero lets any peer crash.
	CrashOnly   uint64
	CrashInside bool // with Crash: only while it is inside the critical section
	// CrashWaiting, with Crash, lets the crash strike only a peer whose
	// request is out and not yet served: one that may sit in a queue of
	// the algorithm (a token's queue, a chain of NEXT pointers).
	CrashWaiting bool
	Lose         bool        // one message in flight may be lost
	LoseKind     MessageKind // with Lose: the kind of message that may be lost; 0 for any

	// Partition, if not zero, lets the network split once into two
	// groups, the peers whose bits are set (peer p is bit 1<<p) and the
	// others: the messages in flight between them are lost, and so is
	// every message sent between them until a heal. Heal lets the
	// partition end once, at any later point; what it dropped stays lost.
	Partition uint64
	Heal      bool
}

// peerSet lists the peers of the set s (peer p is bit 1<<p), in order.
func peerSet(s uint64) []string {
	var in []string
	for p := range 64 {
		if s&(1<<p) != 0 {
			in = append(in, itoa(p))
		}
	}
	return in
}

// zero reports whether f injects no fault.
func (f CheckFaults) zero() bool {
	return !f.Crash && !f.Lose && f.Partition == 0
}

func (f CheckFaults) String() string {
	var parts []string
	if f.Crash {
		switch ps := peerSet(f.CrashOnly); {
		case len(ps) == 0:
			parts = append(parts, "crash any")
		case len(ps) == 1:
			parts = append(parts, "crash P"+ps[0])
		default:
			parts = append(parts, "crash {"+strings.Join(ps, ",")+"}")
		}
	}
	if f.Crash && f.CrashInside {
		parts[len(parts)-1] += " inside"
	}
	if f.Crash && f.CrashWaiting {
		parts[len(parts)-1] += " waiting"
	}
	if f.Lose {
		if f.LoseKind == 0 {
			parts = append(parts, "lose any")
		} else {
			parts = append(parts, "lose "+f.LoseKind.String())
		}
	}
	if f.Partition != 0 {
		p := "partition {" + strings.Join(peerSet(f.Partition), ",") + "}|rest"
		if f.Heal {
			p += " then heal"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// A DetectorKind is the failure detector Check models.
type DetectorKind uint8

// The failure detectors. With either, a suspicion is a transition: "P1
// suspects P2" hands the machine of P1 the event that P2 is suspected,
// which a machine with recovery on (WithRecovery) acts upon. A peer that
// crashed inside the critical section counts as gone from it, and a
// quiet state in which a survivor waits is a deadlock, not merely
// blocked: the recovery promises that survivors go on entering.
const (
	DetectorNone DetectorKind = iota
	// DetectorPerfect suspects only peers that crashed, and each live
	// peer eventually suspects each crashed one (weak fairness).
	DetectorPerfect
	// DetectorImperfect also suspects live peers, at any time, at most
	// Detector.FalseSuspicions times in a run; a live suspected peer is
	// eventually trusted again (weak fairness).
	DetectorImperfect
)

// String returns "none", "perfect" or "imperfect".
func (k DetectorKind) String() string {
	switch k {
	case DetectorNone:
		return "none"
	case DetectorPerfect:
		return "perfect"
	case DetectorImperfect:
		return "imperfect"
	}
	return fmt.Sprintf("DetectorKind(%d)", uint8(k))
}

// A Detector is the failure detector of a Check.
type Detector struct {
	Kind            DetectorKind
	FalseSuspicions int // DetectorImperfect: suspicions of live peers allowed in a run
}

func (d Detector) String() string {
	if d.Kind == DetectorImperfect {
		return fmt.Sprintf("imperfect, %d false", d.FalseSuspicions)
	}
	if d.Kind == DetectorNone {
		return ""
	}
	return d.Kind.String()
}

// DefaultMaxStates is the number of states after which Check stops when
// CheckConfig.MaxStates is zero, so that a machine whose state grows
// without bound gets an answer (complete false, undecided) in minutes.
// Memory is bounded by CheckConfig.MaxMemory (DefaultMaxMemory), whatever
// the size of a state: a world of many peers with much in flight can
// take kilobytes, and a breadth-first frontier holds many.
const DefaultMaxStates = 4_000_000

// A CheckConfig says what Check explores.
type CheckConfig struct {
	Algorithm Algorithm
	Variant   string // a name from Variants; it sets Algorithm and the defaults below
	N         int    // peers; 0 means the variant's, else 3
	Requests  int    // requests per peer; 0 means the variant's, else 1; Unlimited for no end
	// RequestsPerPeer, if set, gives each peer its own number of
	// requests instead (some may be zero: voters only); its length is N.
	RequestsPerPeer []int
	// Tries is the number of tries (TryLock) per peer, beside the
	// requests: 0 for none, or Unlimited. TriesPerPeer, if set, gives
	// each peer its own number instead; its length is N.
	Tries        int
	TriesPerPeer []int
	Network      Network
	Options      []Option    // the algorithm's options, such as WithVotingSets
	Faults       CheckFaults // zero: no faults (or the variant's)
	// Detector is the failure detector: zero for none (or the
	// variant's). It needs N <= 8.
	Detector Detector

	// MaxStates stops the search after that many states, with Complete
	// false; 0 means DefaultMaxStates, and a negative value no limit.
	MaxStates int
	// MaxMemory stops the search, with Complete false, once it holds
	// more than that many bytes as it counts them: its table of hashes,
	// its graph (with what liveness will add), and the worlds waiting to
	// be explored, each at the average size of a sample of worlds (parts
	// that worlds share are counted in each). 0 means DefaultMaxMemory,
	// and a negative value no limit. The Go heap, with its garbage, may
	// reach about twice that between collections under the default GOGC.
	MaxMemory int64

	// Fingerprint is the bits of the hash kept for each state: 128 (the
	// default, also for 0) or 64, which halves the table of hashes (8
	// bytes a state instead of 16) at a higher chance that two states
	// share a hash and the search skips one: below s²/2^65 for s states
	// instead of s²/2^129 (docs/checking.md gives it for a few sizes).
	// CheckResult.CollisionChance gives it for the search made.
	Fingerprint int

	// SafetyOnly skips the graph that liveness and bounded waiting need:
	// the search keeps a fingerprint per state (16 bytes, or 8 with 64-bit
	// Fingerprint, in a table between 3/8 and 3/4 full) and the worlds of the current path,
	// instead of the graph's 100 bytes or so per state (see deepgraph.go), for the
	// biggest spaces. The search is then depth first, so a counterexample
	// is not always a shortest one, and the fair cycles of StarvationFree
	// are not searched nor MaxOvertakes computed (Liveness is false):
	// StarvationFree is Undecided unless a deadlock refutes it.
	SafetyOnly bool

	// PartialOrder, with SafetyOnly, explores from each state only the
	// steps of a set of peers that the others cannot interfere with, when
	// there is one (a partial-order reduction with persistent sets; see
	// reduce.go): two steps at different peers commute, and a peer that
	// has a message queued from every other peer outside the set can get
	// no new step from them. Steps that let a peer in or out, and steps
	// that would close a cycle on the search's path, are never deferred,
	// so safety and deadlocks are decided as by the full search, over
	// fewer states; States then counts the states the reduced search
	// visited. It needs a FIFO network, no faults, no failure detector and
	// no Fenced store.
	PartialOrder bool

	// Workers, if positive, is the number of goroutines that search. With
	// SafetyOnly, each runs the depth-first search on a share of the
	// states, all inserting into one visited set, so that a complete
	// search counts the same States, Transitions and Blocked for any
	// number of workers, and as many as depth first on one goroutine, at
	// about the same CPU time a state; when a worker meets a violation, a
	// deadlock or a limit, the search is made again breadth first, as
	// with the graph below, whose result (the states up to there, a shortest
	// counterexample) does not depend on the workers (see parallel.go).
	// With the graph over FIFO queues, the workers search depth first in
	// the same way, and each also records the edges it takes and what
	// holds in the states it adds; the complete graph is the one the
	// search on one goroutine finds, renumbered the same way, so the
	// result (States, Transitions, every verdict, MaxOvertakes, the
	// counterexample) is the same for any number of workers; where it
	// would stop, it too is made again breadth first (see pargraph.go).
	// Liveness then runs its passes over the peers on up to Workers
	// goroutines. Over an unordered network the search with the graph is
	// breadth first, in batches of states that the workers expand at once
	// and one goroutine merges in the order of the queue, with the same
	// result for any number of workers, but no faster. 0, the default, is
	// one goroutine, depth first with SafetyOnly. It excludes
	// PartialOrder, whose reduction needs a depth-first path.
	// BenchmarkCheckParallel measures what it gains; more workers than
	// cores only add waiting.
	Workers int

	// SpillDir, if not empty, lets a SafetyOnly search on one goroutine
	// go past its memory: once its table of hashes is as big as half of
	// MaxMemory lets it be, and 3/4 full, the table's fingerprints are
	// merged into a sorted file in this directory and the table starts
	// again empty; a state not in the table is looked up in the file, a
	// 4 KiB read that the system's page cache serves while the file fits
	// in free memory (spill.go, after TLC's disk fingerprint set). The
	// search visits the same states as without it. The file takes 8
	// bytes a state with 64-bit Fingerprint, 16 with 128, and is removed
	// before Check returns. It needs SafetyOnly, no Workers and a memory
	// limit; CheckResult.Spilled says how many states went to the file.
	SpillDir string

	// StampGaps counts as one the states of a world of clock machines
	// (Lamport's) that differ only in gaps between stamps too wide for
	// the rest of the run to bridge: every stamp to come is one held now
	// plus at most one per step left, so such a gap is written as one
	// more than the steps left (see World.stampGap). Those states behave
	// alike, so every property is decided as without it, over fewer
	// states. It does nothing for other algorithms, or with a budget
	// without end.
	StampGaps bool

	// OnTheFly decides StarvationFree and MaxOvertakes during a
	// depth-first search on one goroutine, by Tarjan's algorithm over the
	// states as they are found, instead of over the stored graph: it keeps
	// per state its slot in the table of hashes, a bit and a byte a peer,
	// and the edges of states whose strongly connected component is not
	// yet complete, instead of the graph's 60 to 100 bytes a state (see
	// onthefly.go for the algorithm and why its verdicts and bounds are
	// the graph's). It builds no counterexample: at a deadlock, a safety
	// violation, two peers inside with Fenced, or a fair cycle, it hands
	// over to the search with the graph, from the start, whose result
	// Check then returns (CheckResult.OnTheFly false), and whose memory
	// limit may stop it sooner. It excludes SafetyOnly and Workers.
	OnTheFly bool

	// StopAtDeadlock ends the search at the first deadlock, as it always
	// ends at the first safety violation; the result is then incomplete.
	StopAtDeadlock bool

	// Fenced adds a store to the world, which checks fences: a peer
	// inside writes to it twice (transition "w", ID w1 for P1) before it
	// may leave, each peer keeps its fence as the runtime does (the
	// highest seen on a message, the next one at an entry, a new epoch
	// after a suspicion with WithRecovery), and the store accepts a write
	// only if its fence is at least the highest it has accepted. Fenced
	// safety holds when, in the history of accepted writes, the writes of
	// two holds never interleave; CheckResult.FencedSafe says whether it
	// did. With Fenced, two peers inside at once (or out of their promised
	// order) is still a safety violation, reported in Safe and Violation,
	// but the search goes on, so that fenced safety and liveness are
	// checked past it.
	Fenced bool

	// Progress, if set, is called about once a second during a long
	// search.
	Progress func(CheckProgress)

	build func(id, n int) machine // tests: replaces the machines
	// breadthFirst: keep the graph breadth first, with the frontier's
	// worlds, as before deepgraph.go (tests compare the two).
	breadthFirst bool
	// spillSlots: with SpillDir, the most slots of the table (a power of
	// two), instead of what MaxMemory gives; tests make it small.
	spillSlots uint64
}

// CheckProgress is what a long Check reports as it goes.
type CheckProgress struct {
	States      int
	Transitions int
	Elapsed     time.Duration
	Memory      int64 // the bytes the search holds, as CheckConfig.MaxMemory counts them
}

// A Verdict is what Check decided about one property. The zero Verdict
// is Undecided. Its JSON form is true, false or null.
type Verdict int8

const (
	// Undecided: the search did not decide the property. It stopped first
	// (at MaxStates or MaxMemory, at a violation of another property,
	// or because its context ended), or the property is not checked in
	// this mode (starvation freedom with SafetyOnly, fenced safety without
	// Fenced). JSON null.
	Undecided Verdict = iota
	// Holds: the property holds in every reachable state (or run). JSON
	// true.
	Holds
	// Refuted: a reachable state or run breaks the property. JSON false.
	Refuted
)

// String returns "yes", "no" or "undecided", as dmutexcheck and the
// README's tables write them.
func (v Verdict) String() string {
	switch v {
	case Holds:
		return "yes"
	case Refuted:
		return "no"
	case Undecided:
		return "undecided"
	}
	return fmt.Sprintf("Verdict(%d)", int8(v))
}

// MarshalJSON writes true for Holds, false for Refuted and null for
// Undecided.
func (v Verdict) MarshalJSON() ([]byte, error) {
	switch v {
	case Holds:
		return []byte("true"), nil
	case Refuted:
		return []byte("false"), nil
	case Undecided:
		return []byte("null"), nil
	}
	return nil, fmt.Errorf("dmutex: unknown verdict %d", int8(v))
}

// UnmarshalJSON reads what MarshalJSON writes.
func (v *Verdict) UnmarshalJSON(b []byte) error {
	switch string(bytes.TrimSpace(b)) {
	case "true":
		*v = Holds
	case "false":
		*v = Refuted
	case "null":
		*v = Undecided
	default:
		return fmt.Errorf("dmutex: verdict %q is not true, false or null", b)
	}
	return nil
}

// decide is Refuted if broken, else Holds if the search saw every
// state, else Undecided.
func decide(broken, complete bool) Verdict {
	switch {
	case broken:
		return Refuted
	case complete:
		return Holds
	}
	return Undecided
}

// A StopReason says why Check ended before it had explored every
// reachable state; the empty StopReason means that it did not.
type StopReason string

// The reasons a search stops early.
const (
	StoppedAtStateLimit  StopReason = "state limit"  // CheckConfig.MaxStates
	StoppedAtMemoryLimit StopReason = "memory limit" // CheckConfig.MaxMemory
	StoppedAtViolation   StopReason = "violation"    // a safety or fenced-safety violation, or a deadlock with StopAtDeadlock
	StoppedByContext     StopReason = "canceled"     // the context ended
)

// A CheckResult is what Check found. Its JSON form has the keys named in
// the tags.
//
// Each property is a Verdict: Holds only when the search saw every
// reachable state (Complete), Refuted when it found a counterexample,
// and Undecided otherwise (JSON null): after a limit, after a search that
// stopped at an earlier violation, when the context ended, and for what
// the mode does not check. When several properties are refuted, Violation
// is the counterexample of one of them: the safety violation that stopped
// the search, else a deadlock, else a starvation, else two holders inside
// at once past which a Fenced search went on.
type CheckResult struct {
	Algorithm   string  `json:"algorithm"`
	Variant     string  `json:"variant,omitempty"`
	N           int     `json:"n"`
	Requests    int     `json:"requests"`
	Tries       int     `json:"tries,omitempty"`
	Network     string  `json:"network"`
	Faults      string  `json:"faults,omitempty"`
	Detector    string  `json:"detector,omitempty"`
	Fenced      bool    `json:"fenced,omitempty"` // CheckConfig.Fenced: FencedSafe was checked
	States      int     `json:"states"`
	Transitions int     `json:"transitions"`
	Seconds     float64 `json:"seconds"`
	// Complete says that the search explored every reachable state;
	// Stopped says why not when it is false (or StoppedByContext when the
	// context ended after the last state, before liveness was computed).
	Complete bool       `json:"complete"`
	Stopped  StopReason `json:"stopped,omitempty"`
	// PartialOrder says that the search was reduced (CheckConfig's
	// PartialOrder): States and Transitions count what it visited.
	PartialOrder bool `json:"partialOrder,omitempty"`
	// StampGaps says that states differing only in wide gaps between
	// stamps were merged (CheckConfig's StampGaps).
	StampGaps bool `json:"stampGaps,omitempty"`
	// OnTheFly says that the search ran on the fly, keeping no graph
	// (CheckConfig.OnTheFly), to its end or to the limit that stopped it;
	// false when it handed over to the search with the graph, whose
	// result this is. Whether liveness was decided is Liveness's to say:
	// a search on the fly stopped by a limit decided nothing.
	OnTheFly bool `json:"onTheFly,omitempty"`
	// Spilled is the states whose fingerprints were in the file of
	// CheckConfig.SpillDir at the end of the search, and SpillMerges how
	// often the table was merged into it.
	Spilled     int `json:"spilled,omitempty"`
	SpillMerges int `json:"spillMerges,omitempty"`
	// FingerprintBits is the bits of the hash kept for each state
	// (CheckConfig.Fingerprint), and CollisionChance a bound on the chance
	// that two of the States share one, so that the search skipped a state
	// and what is reachable only through it (see Check): s(s-1)/2^(b+1)
	// for s states and b bits, the union bound over pairs of states, were
	// the hashes independent and uniform.
	FingerprintBits int     `json:"fingerprintBits"`
	CollisionChance float64 `json:"collisionChance"`

	// Safe: no two peers inside at once, entries in the promised order,
	// exactly one token, no malformed message, and the promises a machine
	// makes for a cluster at rest; over every reachable state.
	Safe Verdict `json:"safe"`
	// DeadlockFree: no state with nothing left to do and a request
	// unserved, except after a fault (those are counted in Blocked).
	DeadlockFree Verdict `json:"deadlockFree"`
	// StarvationFree: deadlock free, and no fair cycle (see Check) in
	// which a request stays unserved, over the states before any fault.
	// It is Refuted by a deadlock; it Holds only when Liveness is true.
	StarvationFree Verdict `json:"starvationFree"`
	// MaxOvertakes is the most entries by other peers while one request
	// waits, over every path, or -1 when a cycle lets others in without
	// end; it means something only when Liveness is true (JSON null
	// otherwise).
	MaxOvertakes int `json:"maxOvertakes"`
	// Liveness says whether the fair cycles of StarvationFree were
	// searched and MaxOvertakes computed: the search completed, with the
	// graph (not SafetyOnly, and 32 peers at most), and found no
	// violation that stopped it.
	Liveness bool `json:"liveness"`
	// Blocked counts the states with nothing left to do, after a fault,
	// in which a surviving peer waits for ever.
	Blocked int `json:"blocked"`
	// FencedSafe, with CheckConfig.Fenced, says whether the fenced store
	// never accepted interleaved writes of two holds; Undecided (JSON
	// null) without Fenced. When it is Refuted, Violation is its
	// counterexample, with Property "fenced safety".
	FencedSafe Verdict `json:"fencedSafe"`

	Violation *Violation `json:"violation"`
}

// MarshalJSON writes maxOvertakes as null when it was not computed.
func (r CheckResult) MarshalJSON() ([]byte, error) {
	type plain CheckResult
	out := struct {
		plain
		MaxOvertakes *int `json:"maxOvertakes"`
	}{plain: plain(r)}
	if r.Liveness {
		out.MaxOvertakes = &r.MaxOvertakes
	}
	return json.Marshal(out)
}

// A Violation is a counterexample: the steps from the start to a broken
// promise. For a starvation it is a lasso: the steps from CycleStart on
// repeat for ever, a fair run in which a request is never served. It
// keeps what Replay needs (the configuration), not the search.
type Violation struct {
	Property    string   `json:"property"` // "safety", "fenced safety", "deadlock" or "starvation"
	Message     string   `json:"message"`
	Trace       []string `json:"trace"`                // one line per step
	Transitions []string `json:"transitions"`          // the steps' transition IDs, for World.Find
	CycleStart  int      `json:"cycleStart,omitempty"` // starvation: index in Trace where the cycle begins
	Mermaid     string   `json:"mermaid"`

	origin *origin
}

// Replay returns a world with a trace, after the violation's steps but
// the last one when that step broke the promise (a safety or fenced
// safety violation: that step is then the world's next Transition with
// ID Transitions[len-1]). After a deadlock the world is where nothing is
// left to do; after a starvation, at the end of one turn of the cycle.
func (v *Violation) Replay() (*World, error) {
	if v.origin == nil {
		return nil, fmt.Errorf("dmutex: replay: the violation was not found by Check")
	}
	w, err := v.origin.world(true)
	if err != nil {
		return nil, err
	}
	ids := v.Transitions
	if (v.Property == "safety" || v.Property == "fenced safety") && len(ids) > 0 {
		ids = ids[:len(ids)-1]
	}
	for _, id := range ids {
		t, ok := w.Find(id)
		if !ok {
			return nil, fmt.Errorf("dmutex: replay: transition %s not enabled", id)
		}
		if _, err := w.Apply(t); err != nil {
			return w, err
		}
	}
	return w, nil
}

// Check explores every state reachable from the start of cfg's cluster,
// taking every enabled transition in every state: each peer's requests
// (Requests of them, whenever it is idle) and tries (Tries of them), each
// delivery, each leave, and the faults of cfg.Faults. A try that is never
// answered is a deadlock like a request never served, and at rest every
// machine must keep nothing for a request or try that is over, so a
// refused try strands nothing. It checks safety in every state and deadlock
// in every state with nothing left to do, and reports a shortest
// counterexample: the search keeps the graph depth first, holding the
// worlds of one path only, and then numbers the states as a breadth-first
// search would have (deepgraph.go says why the result is the same), or
// searches breadth first after a safety violation, with StopAtDeadlock or
// with Workers. Two states are the same when they
// encode the same (serial numbers of messages left out); 128-bit hashes
// of the encodings are stored (hash compaction; 64-bit with
// cfg.Fingerprint). A collision, with a chance below s²/2^129 for s
// states (s²/2^65 with 64 bits; CheckResult.CollisionChance), would hide a state and those
// reachable only through it: a Holds could then be wrong, while a
// refuted safety, fenced safety or deadlock is always a state the search
// reached by real steps; the graph that starvation and MaxOvertakes are
// read from would join two states, which could add or hide a cycle.
//
// Once the search completes without a safety violation, it checks
// starvation-freedom under weak fairness: every message in flight is
// eventually delivered (per pair with FIFO queues; each distinct message
// in an unordered network), and a peer inside eventually leaves (with
// Fenced, it first makes its writes, which are owed like the leave), while
// requests and faults are the environment's free choice. For each peer p,
// it takes the states where p waits (before any fault), finds their
// strongly connected components, and reports a starvation when a
// component holds a cycle and every delivery or leave enabled in all its
// states is taken by some step inside it: a fair run that stays there for
// ever leaves p waiting. It also computes MaxOvertakes: the longest path
// through the states where p waits, counting the entries of other peers.
//
// Check returns an error wrapping ErrInvalidConfig for a bad
// configuration. If ctx ends first, it returns what it found so far,
// with Complete false and Stopped StoppedByContext, and ctx.Err().
//
// Check changes no process-wide setting, and any number of Checks may
// run at once.
func Check(ctx context.Context, cfg CheckConfig) (CheckResult, error) {
	c, err := newChecker(cfg)
	if err != nil {
		return CheckResult{}, err
	}
	defer c.release()
	if err := c.explore(ctx); err != nil {
		if errors.Is(err, errInterrupted) {
			return c.result(), ctx.Err()
		}
		return CheckResult{}, err
	}
	if ctx.Err() != nil {
		// Every state was seen, but the context ended before the fair
		// cycles were searched: liveness stays undecided.
		c.stopped = StoppedByContext
		return c.result(), ctx.Err()
	}
	c.liveness()
	return c.result(), nil
}

// result reads what the search found as a CheckResult: each property
// Refuted if a counterexample was found, else Holds if the search saw
// every state, else Undecided.
func (c *checker) result() CheckResult {
	r := c.res
	out := CheckResult{
		Algorithm:       c.cc.Algorithm.String(),
		Variant:         c.cc.Variant,
		N:               c.cc.N,
		Requests:        c.cc.Requests,
		Tries:           c.cc.Tries,
		Network:         c.cc.Network.String(),
		Faults:          c.cc.Faults.String(),
		Detector:        c.cc.Detector.String(),
		Fenced:          c.cc.Fenced,
		PartialOrder:    c.cc.PartialOrder,
		StampGaps:       c.cc.StampGaps,
		OnTheFly:        c.fly != nil,
		States:          r.States,
		Transitions:     r.Transitions,
		FingerprintBits: c.cc.Fingerprint,
		Spilled:         c.fps.spilled(),
		SpillMerges:     c.fps.merges(),
		CollisionChance: collisionChance(r.States, c.cc.Fingerprint),
		Seconds:         time.Since(c.start).Seconds(),
		Complete:        r.Complete,
		Liveness:        r.Liveness,
		MaxOvertakes:    -1,
		Blocked:         r.Blocked,
		Violation:       r.Violation,
	}
	if !r.Complete || c.stopped == StoppedByContext {
		out.Stopped = c.stopped
	}
	deadlock := c.firstDeadlock >= 0 || c.deadlockPath != nil
	out.Safe = decide(c.unsafe || c.overlap != nil, r.Complete)
	out.DeadlockFree = decide(deadlock, r.Complete)
	switch {
	case deadlock || (r.Liveness && !r.StarvationFree):
		out.StarvationFree = Refuted // a deadlock starves its waiting peers
	case r.Liveness:
		out.StarvationFree = Holds
	}
	if r.Liveness {
		out.MaxOvertakes = r.MaxOvertakes
	}
	if c.cc.Fenced {
		out.FencedSafe = decide(c.fencedBroken, r.Complete)
	}
	if out.Violation == nil {
		// Two were inside at once, and the Fenced search went on past
		// it; a deadlock or starvation found past the overlap is the
		// graver news.
		out.Violation = c.overlap
	}
	return out
}

// searchResult is what the search found, before result reads it as
// verdicts: Complete that it saw every state; Safe that no violation
// stopped it; DeadlockFree and StarvationFree that none was found so far
// (both mean something only with Complete); the liveness figures, which
// liveness computes when Complete and Safe.
type searchResult struct {
	States         int
	Transitions    int
	Complete       bool
	Safe           bool
	DeadlockFree   bool
	StarvationFree bool
	MaxOvertakes   int
	Liveness       bool
	Blocked        int
	Violation      *Violation
}

// checker is one run of Check.
type checker struct {
	cc     CheckConfig
	given  CheckConfig // as the caller gave it, for again
	origin *origin
	res    searchResult
	seeds  [2]maphash.Seed
	fps    *visited
	hash   hasher // the search's own goroutine's
	buf    []byte // classOf's
	start  time.Time
	done   <-chan struct{} // the context's

	handovers int // frames the parallel depth-first search handed over, for tests

	graph bool
	// Per state, in order of discovery (which is the order of expansion,
	// breadth first): parent[s] is the state it was found from (-1 for
	// the start). With the graph: off[s] is where s's edges begin in to,
	// cls and ent, and info[s] what holds there.
	parent []int32
	off    []int32
	end    []int32 // after the parallel search with the graph: where s's edges end (pargraph.go); nil otherwise
	to     []int32
	cls    []int32 // fairness class of the edge, -1 for none
	ent    []int8  // peer that entered on the edge, -1 for none
	info   []stateInfo
	// The depth-first search keeps each edge's class and entry as a
	// byte, code, naming one of at most 256 kinds (deepgraph.go), as long
	// as that many suffice; then cls and ent are nil. edgeClass and
	// edgeEntry read either.
	compact bool
	code    []uint8
	kinds   []edgeKind
	kindOf  map[edgeKind]uint8

	classes map[string]int32 // unordered network: message encoding to class

	firstDeadlock int32        // breadth first: a deadlocked state, -1 for none
	deadlockPath  []Transition // depth first: the path to a deadlock, nil for none
	// deep: the graph is searched depth first (deepgraph.go), which
	// records every deadlocked state and, with Fenced, every step that
	// let two peers in (a bit per edge), and then renumbers the states
	// breadth first and keeps only the first of each.
	deep      bool
	deadlocks []int32
	// fly: liveness is decided on the fly, without the graph
	// (onthefly.go); graph is then false.
	fly          *flySearch
	overlaps     []uint64
	firstOverlap int32

	unsafe       bool       // a safety violation was found
	fencedBroken bool       // the fenced store accepted interleaved writes
	stopped      StopReason // why the search ended early, if it did

	limit      int   // states after which the search stops; <= 0 for none
	budget     int64 // bytes after which the search stops; <= 0 for none
	expanded   int   // states expanded so far
	worldSize  int64 // the average size of a world sampled, in bytes
	samples    int64
	classBytes int64 // the size of classes
	waiting    int   // the worlds waiting to be explored, at the last overBudget
	frontier   []*World
	lastReport time.Time
	memKey     memoryKey // what memBytes was counted at (checkmem.go)
	memBytes   int64

	overlap *Violation // with Fenced: the first step that let two peers in, which does not stop the search
}

// stateInfo is what holds in one explored state: 12 bytes, for peers
// 0 to 31 (the graph is kept for 32 peers at most).
type stateInfo struct {
	wait    uint32 // peers waiting (request out, not inside), if no fault has struck
	waitAny uint32 // peers waiting, crashed ones left out, fault or not
	flags   uint8
}

// stateInfo flags.
const (
	stFaulted uint8 = 1 << iota // a fault has struck
	stQuiet                     // nothing left to do
	stBlocked                   // quiet, after a fault, with a surviving peer waiting
	stHealed                    // a partition struck and healed
)

func newChecker(cc CheckConfig) (*checker, error) {
	given := cc
	var v *Variant
	if cc.Variant != "" {
		var err error
		if v, err = LookupVariant(cc.Variant); err != nil {
			return nil, err
		}
		cc.Algorithm = v.Algorithm
		if cc.N == 0 {
			cc.N = v.N
		}
		if cc.Requests == 0 {
			cc.Requests = v.Requests
		}
		if cc.Network == NetworkDefault {
			cc.Network = v.Network
		}
		if cc.Faults.zero() {
			cc.Faults = v.Faults
		}
		if cc.Detector == (Detector{}) {
			cc.Detector = v.Detector
		}
		cc.Options = append(slices.Clip(v.Options), cc.Options...)
	}
	if cc.N == 0 {
		cc.N = 3
	}
	if cc.Requests == 0 {
		cc.Requests = 1
	}
	if cc.Network == NetworkDefault {
		cc.Network = NetworkFIFO
	}
	if cc.Requests < Unlimited {
		return nil, fmt.Errorf("%w: %d requests per peer, want 1 or more, or Unlimited", ErrInvalidConfig, cc.Requests)
	}
	if cc.RequestsPerPeer != nil {
		if len(cc.RequestsPerPeer) != cc.N {
			return nil, fmt.Errorf("%w: %d numbers of requests for %d peers", ErrInvalidConfig, len(cc.RequestsPerPeer), cc.N)
		}
		for p, k := range cc.RequestsPerPeer {
			if k < Unlimited {
				return nil, fmt.Errorf("%w: %d requests for peer %d", ErrInvalidConfig, k, p)
			}
		}
	}
	if cc.Tries < Unlimited {
		return nil, fmt.Errorf("%w: %d tries per peer, want 0 or more, or Unlimited", ErrInvalidConfig, cc.Tries)
	}
	if cc.TriesPerPeer != nil {
		if len(cc.TriesPerPeer) != cc.N {
			return nil, fmt.Errorf("%w: %d numbers of tries for %d peers", ErrInvalidConfig, len(cc.TriesPerPeer), cc.N)
		}
		for p, k := range cc.TriesPerPeer {
			if k < Unlimited {
				return nil, fmt.Errorf("%w: %d tries for peer %d", ErrInvalidConfig, k, p)
			}
		}
	}
	if cc.Network > NetworkUnordered {
		return nil, fmt.Errorf("%w: unknown network %v", ErrInvalidConfig, cc.Network)
	}
	if f := cc.Faults; f.CrashOnly != 0 && !f.Crash {
		return nil, fmt.Errorf("%w: CrashOnly %#x without Crash", ErrInvalidConfig, f.CrashOnly)
	}
	if f := cc.Faults; cc.N < 64 && f.CrashOnly>>uint(cc.N) != 0 {
		p := cc.N
		for f.CrashOnly&(1<<uint(p)) == 0 {
			p++
		}
		return nil, fmt.Errorf("%w: crash of peer %d out of range [0, %d)", ErrInvalidConfig, p, cc.N)
	}
	if f := cc.Faults; f.CrashWaiting && (!f.Crash || f.CrashInside) {
		return nil, fmt.Errorf("%w: CrashWaiting needs Crash and excludes CrashInside (crash %v, inside %v)", ErrInvalidConfig, f.Crash, f.CrashInside)
	}
	if f := cc.Faults; f.Partition != 0 && cc.N >= 64 {
		return nil, fmt.Errorf("%w: a partition of %d peers, want at most 63", ErrInvalidConfig, cc.N)
	}
	if f := cc.Faults; f.Partition != 0 && f.Partition>>uint(cc.N) != 0 {
		p := cc.N
		for f.Partition&(1<<uint(p)) == 0 {
			p++
		}
		return nil, fmt.Errorf("%w: partition %#x names peer %d, out of range [0, %d)", ErrInvalidConfig, f.Partition, p, cc.N)
	}
	if f := cc.Faults; f.Heal && f.Partition == 0 {
		return nil, fmt.Errorf("%w: heal without a partition", ErrInvalidConfig)
	}
	if f := cc.Faults; f.Lose && f.LoseKind != 0 && !f.LoseKind.Valid() {
		return nil, fmt.Errorf("%w: lose messages of unknown kind %v", ErrInvalidConfig, f.LoseKind)
	}
	if d := cc.Detector; d.Kind > DetectorImperfect || d.FalseSuspicions < 0 || (d.Kind != DetectorImperfect && d.FalseSuspicions != 0) {
		return nil, fmt.Errorf("%w: detector %v with %d false suspicions", ErrInvalidConfig, d.Kind, d.FalseSuspicions)
	}
	if cc.Detector.Kind != DetectorNone && cc.N > maxDetectorPeers {
		return nil, fmt.Errorf("%w: a failure detector for %d peers, want at most %d", ErrInvalidConfig, cc.N, maxDetectorPeers)
	}
	switch cc.Fingerprint {
	case 0:
		cc.Fingerprint = 128
	case 64, 128:
	default:
		return nil, fmt.Errorf("%w: %d-bit fingerprints, want 64 or 128", ErrInvalidConfig, cc.Fingerprint)
	}
	if cc.Workers < 0 {
		return nil, fmt.Errorf("%w: %d workers, want 0 or more", ErrInvalidConfig, cc.Workers)
	}
	if cc.OnTheFly {
		switch {
		case cc.SafetyOnly:
			return nil, fmt.Errorf("%w: OnTheFly with SafetyOnly: OnTheFly decides liveness, which SafetyOnly skips", ErrInvalidConfig)
		case cc.Workers > 0:
			return nil, fmt.Errorf("%w: OnTheFly with %d workers: Tarjan's algorithm on the fly needs one depth-first path", ErrInvalidConfig, cc.Workers)
		}
	}
	if cc.PartialOrder {
		switch {
		case cc.Workers > 0:
			return nil, fmt.Errorf("%w: PartialOrder with %d workers: the reduction needs the path of a depth-first search", ErrInvalidConfig, cc.Workers)
		case !cc.SafetyOnly:
			return nil, fmt.Errorf("%w: PartialOrder needs SafetyOnly: the reduced graph keeps safety and deadlocks, not the cycles liveness is checked on", ErrInvalidConfig)
		case cc.Network != NetworkFIFO:
			return nil, fmt.Errorf("%w: PartialOrder with network %v: it needs FIFO queues, where a message sent later cannot come before one already queued", ErrInvalidConfig, cc.Network)
		case !cc.Faults.zero():
			return nil, fmt.Errorf("%w: PartialOrder with faults %v: a fault is a step of the whole network", ErrInvalidConfig, cc.Faults)
		case cc.Detector.Kind != DetectorNone:
			return nil, fmt.Errorf("%w: PartialOrder with detector %v", ErrInvalidConfig, cc.Detector)
		case cc.Fenced:
			return nil, fmt.Errorf("%w: PartialOrder with Fenced: every write to the store is shared", ErrInvalidConfig)
		case cc.N > 64:
			return nil, fmt.Errorf("%w: PartialOrder for %d peers, want at most 64", ErrInvalidConfig, cc.N)
		}
	}
	if cc.SpillDir != "" {
		switch {
		case !cc.SafetyOnly:
			return nil, fmt.Errorf("%w: SpillDir %q without SafetyOnly: the graph liveness needs keeps every state in memory", ErrInvalidConfig, cc.SpillDir)
		case cc.Workers > 0:
			return nil, fmt.Errorf("%w: SpillDir %q with %d workers: only the search on one goroutine spills", ErrInvalidConfig, cc.SpillDir, cc.Workers)
		case cc.MaxMemory < 0:
			return nil, fmt.Errorf("%w: SpillDir %q without a memory limit (MaxMemory %d): the table spills when it fills its share of the limit", ErrInvalidConfig, cc.SpillDir, cc.MaxMemory)
		}
		if fi, err := os.Stat(cc.SpillDir); err != nil {
			return nil, fmt.Errorf("%w: SpillDir: %w", ErrInvalidConfig, err)
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("%w: SpillDir %q is not a directory", ErrInvalidConfig, cc.SpillDir)
		}
	}
	cfg, err := newConfig(cc.Algorithm, cc.N, forWorld, cc.Options)
	if err != nil {
		return nil, err
	}
	// The checker is where one sees why an algorithm needs FIFO: the
	// world takes an unordered network for any algorithm.
	wc := WorldConfig{Network: cc.Network, Requests: cc.Requests, Tries: cc.Tries, NoTrace: true}
	if v != nil {
		wc.Variant = v.Name
	}
	if err := wc.apply(cfg); err != nil {
		return nil, err
	}
	cfg.fenced = cc.Fenced
	cfg.stampGaps = cc.StampGaps
	c := &checker{
		cc:            cc,
		given:         given,
		seeds:         [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		graph:         !cc.SafetyOnly && cc.N <= 32,
		firstDeadlock: -1,
		firstOverlap:  -1,
		origin: &origin{
			cfg:      cfg,
			build:    cc.build,
			requests: cc.RequestsPerPeer,
			tries:    cc.TriesPerPeer,
			faults:   cc.Faults,
			detector: cc.Detector,
		},
	}
	c.res.MaxOvertakes = -1
	// The graph is searched depth first, on one goroutine or (over FIFO
	// queues) with workers: see deepgraph.go and pargraph.go.
	if cc.OnTheFly && c.graph {
		c.fly, c.graph = newFlySearch(cc.N), false
	}
	c.deep = c.graph && !cc.StopAtDeadlock && !cc.breadthFirst && (cc.Workers == 0 || cc.Network == NetworkFIFO)
	if c.deep && cc.Fenced {
		c.overlaps = []uint64{}
	}
	c.hash = hasher{seeds: &c.seeds, bits: cc.Fingerprint}
	if cc.Network == NetworkUnordered {
		c.classes = make(map[string]int32)
	}
	return c, nil
}

// origin is what builds the world at the start of a Check: all that a
// Violation keeps, to replay.
type origin struct {
	cfg             *config
	build           func(id, n int) machine // tests: replaces the machines
	requests, tries []int                   // per peer, if set
	faults          CheckFaults
	detector        Detector
}

// startWorld builds the world at the start, with a trace if asked.
func (c *checker) startWorld(trace bool) (*World, error) { return c.origin.world(trace) }

// world builds the world at the start, with a trace if asked.
func (o *origin) world(trace bool) (*World, error) {
	cfg := *o.cfg
	cfg.sim.noTrace = !trace
	w, err := newWorld(&cfg, o.build)
	if err != nil {
		return nil, err
	}
	for p, k := range o.requests {
		w.peers[p].budget = k
	}
	for p, k := range o.tries {
		w.peers[p].tries = k
	}
	if f := o.faults; f.Crash {
		w.f.crashLeft, w.f.crashOnly, w.f.crashIn, w.f.crashWait = 1, f.CrashOnly, f.CrashInside, f.CrashWaiting
	}
	if f := o.faults; f.Partition != 0 {
		var side []int
		for p := range cfg.n {
			if f.Partition&(1<<uint(p)) != 0 {
				side = append(side, p)
			}
		}
		w.f.partLeft, w.f.partInto = 1, [][]int{side}
		if f.Heal {
			w.f.healLeft = 1
		}
	}
	if f := o.faults; f.Lose {
		w.f.loseLeft, w.f.loseKind = 1, f.LoseKind
	}
	w.f.detector, w.f.falseLeft = o.detector.Kind, o.detector.FalseSuspicions
	return w, nil
}

// fingerprint returns the hash of w's encoding: 128 bits, or 64 in the
// first word.
func (c *checker) fingerprint(w *World) fingerprint { return c.hash.fingerprint(w) }

// A hasher encodes and hashes worlds, in buffers of its own: one per
// goroutine of the search.
type hasher struct {
	seeds  *[2]maphash.Seed
	bits   int
	buf    []byte
	sbuf   []byte
	mbufs  [][]byte
	stamps stampMap
}

// fingerprint returns the hash of w's encoding: 128 bits, or 64 in the
// first word.
func (h *hasher) fingerprint(w *World) fingerprint {
	h.buf = w.appendState(h.buf[:0], &h.mbufs, &h.sbuf, &h.stamps)
	if h.bits == 64 {
		return fingerprint{maphash.Bytes(h.seeds[0], h.buf), 0}
	}
	return fingerprint{maphash.Bytes(h.seeds[0], h.buf), maphash.Bytes(h.seeds[1], h.buf)}
}

// classOf is the fairness class of transition t from the world cur: one class per obligation of weak fairness (see liveness.go),
// -1 for the environment's choices. The classes are "holder q steps out"
// (its write to the fenced store, or its leave once it has written: at
// most one of them is enabled in a state, and a holder owes whichever
// is), "deliver on pair i->j" (FIFO), "deliver this message" (unordered,
// its fence included: two messages that differ only in it are two
// deliveries owed, as World.bagDup offers both), and a suspicion or trust
// the detector owes.
func (c *checker) classOf(cur *World, t Transition) int32 {
	n := int32(c.cc.N)
	switch t.Kind {
	case TransLeave, TransWrite:
		return int32(t.Peer)
	case TransSuspect, TransTrust:
		// Owed by the detector, when enabled outside the false budget:
		// a suspicion of a crashed peer, a trust of a live one.
		if t.Kind == TransSuspect && c.cc.Detector.Kind == DetectorImperfect && !(cur != nil && cur.isCrashed(t.Target)) {
			return -1
		}
		return 1<<30 + int32(t.Kind)*64 + int32(t.Peer*c.cc.N+t.Target)
	case TransDeliver:
		if c.classes == nil {
			return n + int32(t.Msg.From*c.cc.N+t.Msg.To)
		}
		c.buf = appendMessage(c.buf[:0], t.Msg)
		if c.cc.Fenced {
			c.buf = appendUint(c.buf, t.Msg.Fence)
		}
		k, ok := c.classes[string(c.buf)]
		if !ok {
			k = n + int32(len(c.classes))
			c.classes[string(c.buf)] = k
			c.classBytes += int64(len(c.buf)) + 64
		}
		return k
	}
	return -1
}

// explore runs the search. It stops at the first safety violation, and
// records the first deadlock but goes on. With the graph it is depth
// first, on one goroutine (deepgraph.go) or with workers (pargraph.go),
// and then renumbers the states breadth first, or breadth first
// throughout (StopAtDeadlock, workers over a bag, or again after a
// safety violation), so that a counterexample is a shortest one; without,
// it is depth first and keeps only the worlds on the current path. If ctx ends, it
// returns ctx.Err() with what it found so far in c.res.
func (c *checker) explore(ctx context.Context) error {
	c.start = time.Now()
	c.done = ctx.Done()
	w, err := c.startWorld(false)
	if err != nil {
		if errors.Is(err, ErrViolation) {
			c.res.Violation = &Violation{Property: "safety", Message: err.Error(), origin: c.origin}
			c.unsafe, c.stopped = true, StoppedAtViolation
			c.finish(false)
			return nil
		}
		return err
	}
	c.limit = c.cc.MaxStates
	if c.limit == 0 {
		c.limit = DefaultMaxStates
	}
	c.budget = c.cc.MaxMemory
	if c.budget == 0 {
		c.budget = DefaultMaxMemory
	}
	c.sample(w)
	if c.cc.SpillDir != "" {
		slots := spillSlots(c.budget, c.cc.Fingerprint)
		if c.cc.spillSlots > 0 {
			slots = c.cc.spillSlots // a test's, to merge often
		}
		c.fps = newVisitedSize(false, c.cc.Fingerprint, min(slots, 1<<16))
		c.fps.spill = newSpill(c.cc.SpillDir, c.cc.Fingerprint, slots)
	} else {
		c.fps = newVisited(c.graph || c.fly != nil || c.cc.Workers > 0, c.cc.Fingerprint)
	}
	c.fps.add(c.fingerprint(w), 0)
	c.res.States = 1
	c.lastReport = c.start
	var complete bool
	switch {
	case c.fly != nil:
		var over bool
		complete, over, err = c.onTheFly(w)
		if over {
			return c.handOver(ctx) // onthefly.go
		}
	case c.cc.Workers > 0 && !c.graph && !c.cc.breadthFirst:
		var redo bool
		complete, redo, err = c.parallelDepthFirst(w)
		if redo {
			// Where the workers stopped depends on their timing; the
			// breadth-first search's result does not (parallel.go).
			return c.again(ctx)
		}
	case c.cc.Workers > 0 && c.deep:
		var redo bool
		complete, redo, err = c.parallelDepthFirstGraph(w)
		if redo {
			return c.again(ctx) // as above, and as deepgraph.go's search below
		}
		if complete {
			c.renumber()
		}
	case c.cc.Workers > 0:
		complete, err = c.parallelBreadthFirst(w)
	case c.deep:
		complete, err = c.depthFirstGraph(w)
		if c.unsafe || c.fencedBroken {
			// A shortest counterexample, and the counts at it, are the
			// breadth-first search's: search again that way.
			return c.again(ctx)
		}
		c.renumber()
	case c.graph:
		complete, err = c.breadthFirst(w)
	default:
		complete, err = c.depthFirst(w)
	}
	if err != nil {
		c.stopped = StoppedByContext
	}
	if c.res.Violation != nil {
		return err
	}
	if c.graph && !c.deep {
		c.off = append(c.off, int32(len(c.to)))
	}
	c.finish(complete)
	if c.fly != nil && complete {
		c.flyResult()
	}
	switch {
	case c.firstDeadlock >= 0:
		c.res.Violation = c.violation("deadlock", c.pathTo(c.firstDeadlock), -1, Transition{}, "")
	case c.deadlockPath != nil:
		c.res.Violation = c.violationAlong("deadlock", c.deadlockPath, -1, Transition{}, "")
	}
	if c.res.Violation != nil {
		c.res.DeadlockFree = false
		c.res.StarvationFree = false
	}
	return err
}

// again runs the search from the start breadth first, as a new checker
// whose result replaces c's, keeping c's start time.
func (c *checker) again(ctx context.Context) error {
	cc := c.given
	cc.breadthFirst = true
	return c.restart(ctx, cc)
}

// restart runs the search from the start under cc, as a new checker
// whose result replaces c's, keeping c's start time.
func (c *checker) restart(ctx context.Context, cc CheckConfig) error {
	fresh, err := newChecker(cc)
	if err != nil {
		return err
	}
	start := c.start
	c.release() // the depth-first search's graph, no longer needed
	err = fresh.explore(ctx)
	fresh.start = start
	*c = *fresh
	c.hash.seeds = &c.seeds
	return err
}

// release returns the search's mapped arrays (bigarray.go) to the
// system; the graph is unusable afterwards. Arrays in the heap are left
// to the collector.
func (c *checker) release() {
	unmapArray(c.parent)
	unmapArray(c.off)
	unmapArray(c.to)
	unmapArray(c.cls)
	unmapArray(c.ent)
	unmapArray(c.code)
	unmapArray(c.info)
	unmapArray(c.end)
	c.parent, c.off, c.to, c.cls, c.ent, c.code, c.info, c.end = nil, nil, nil, nil, nil, nil, nil, nil
	if c.fly != nil {
		c.fly.release()
	}
	if c.fps != nil {
		c.fps.release()
	}
}

// interrupted reports whether the context has ended. It costs a
// non-blocking receive, so the search asks it at every transition.
func (c *checker) interrupted() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// errInterrupted is what the search returns when the context has ended;
// Check returns ctx.Err() instead.
var errInterrupted = errors.New("dmutex: check interrupted")

// full reports whether the search may take no more states, and if so
// records why it stopped.
func (c *checker) full() bool {
	if c.limit > 0 && c.res.States >= c.limit {
		c.stopped = StoppedAtStateLimit
		return true
	}
	return false
}

// overBudget reports, before a state is expanded, whether the search
// holds more than its budget with worlds waiting, and if so records why
// it stopped.
func (c *checker) overBudget(worlds int) bool {
	c.waiting = worlds
	if c.budget <= 0 || c.memory(worlds) <= c.budget {
		return false
	}
	c.stopped = StoppedAtMemoryLimit
	return true
}

// tick is called once per expanded state: every 4096 it reports
// progress.
func (c *checker) tick() {
	c.expanded++
	if c.expanded&4095 != 0 {
		return
	}
	if c.cc.Progress != nil && time.Since(c.lastReport) > time.Second {
		c.lastReport = time.Now()
		c.cc.Progress(CheckProgress{States: c.res.States, Transitions: c.res.Transitions, Elapsed: time.Since(c.start), Memory: c.memory(c.waiting)})
	}
}

// A verdict is what examine found of a state.
type verdict uint8

const (
	vOK       verdict = iota
	vDeadlock         // quiet with a request unserved, no fault struck
	vBroken           // a promise for a cluster at rest is broken: c.restErr
)

// examine lists cur's transitions into trs and, if cur is quiet, checks
// it; with the graph it also records what holds in cur.
func (c *checker) examine(cur *World, trs []Transition) ([]Transition, verdict, error) {
	trs, v, flags, broken := inspect(cur, trs)
	c.record(cur, flags)
	return trs, v, broken
}

// record counts a blocked state and, with the graph, records what holds
// in cur, given the flags inspect found (stQuiet, stBlocked).
func (c *checker) record(cur *World, flags uint8) {
	if flags&stBlocked != 0 {
		c.res.Blocked++
	}
	if !c.graph {
		return
	}
	if c.deep {
		c.off = grow(c.off, 1, c.stateReserve())
		c.info = grow(c.info, 1, c.stateReserve())
	}
	c.off = append(c.off, int32(len(c.to)))
	c.info = append(c.info, c.infoOf(cur, flags))
}

// infoOf returns what holds in cur, given the flags inspect found.
func (c *checker) infoOf(cur *World, flags uint8) stateInfo {
	info := stateInfo{flags: flags}
	for p, s := range cur.peers {
		if s.d.wanting() && !cur.isCrashed(p) {
			info.waitAny |= 1 << uint(p%32)
		}
	}
	if cur.f.parted && cur.f.group == nil {
		info.flags |= stHealed
	}
	if cur.faulted() {
		info.flags |= stFaulted
	}
	if !cur.faulted() || c.cc.Detector.Kind != DetectorNone {
		for p, s := range cur.peers {
			if s.d.wanting() && !cur.isCrashed(p) && !cur.cutOff(p) {
				info.wait |= 1 << uint(p%32)
			}
		}
	}
	return info
}

// inspect lists cur's transitions into trs and, if cur is quiet, checks
// it: flags has stQuiet, and stBlocked when a fault left a survivor
// waiting. It changes nothing but cur's error, which it clears, so that
// goroutines may inspect different worlds at once.
func inspect(cur *World, trs []Transition) ([]Transition, verdict, uint8, error) {
	var flags uint8
	trs = cur.appendTransitions(trs[:0], true)
	v := vOK
	var broken error
	if cur.quiet() {
		flags |= stQuiet
		err := cur.finalCheck()
		cur.err = nil // the faults may still strike
		if err != nil {
			switch {
			case errors.Is(err, ErrBlocked):
				flags |= stBlocked
			case strings.Contains(err.Error(), ": deadlock after step"):
				v = vDeadlock
			default: // a promise for a cluster at rest
				v, broken = vBroken, err
			}
		}
	}
	return trs, v, flags, broken
}

// breadthFirst explores from w breadth first, keeping the graph, and
// reports whether it saw every state. It returns errInterrupted as soon
// as the context ends, and stops at the first state past the limit.
func (c *checker) breadthFirst(w *World) (bool, error) {
	c.parent = append(c.parent, -1)
	c.frontier = append(c.frontier[:0], w)
	work := c.frontier
	defer func() { c.frontier = work }() // kept until Check returns, for tests that weigh it
	ids := []int32{0}
	head := 0
	var trs []Transition
	var spare *World
	for head < len(work) {
		cur, id := work[head], ids[head]
		work[head] = nil
		head++
		if c.overBudget(len(work) - head) {
			return false, nil
		}
		c.tick()
		var v verdict
		var broken error
		trs, v, broken = c.examine(cur, trs)
		switch v {
		case vDeadlock:
			if c.firstDeadlock < 0 {
				c.firstDeadlock = id
			}
			if c.cc.StopAtDeadlock {
				c.stopped = StoppedAtViolation
				return false, nil
			}
		case vBroken:
			c.safetyViolation(id, Transition{}, broken)
			return false, nil
		}
		for _, t := range trs {
			if c.interrupted() {
				return false, errInterrupted
			}
			c.res.Transitions++
			var next *World
			if spare != nil {
				next, spare = cur.cloneInto(spare), nil
			} else {
				next = cur.Clone()
			}
			st, err := next.apply(t)
			if err != nil {
				c.safetyViolation(id, t, err)
				c.fencedBreak(next)
				return false, nil
			}
			if st.overlap != nil && c.overlap == nil {
				c.overlap = c.violation("safety", c.pathTo(id), -1, t, st.overlap.Error())
			}
			fp := c.fingerprint(next)
			to, seen := c.fps.get(fp)
			if !seen {
				if c.full() {
					return false, nil
				}
				to = int32(c.res.States)
				c.fps.add(fp, to)
				c.parent = append(c.parent, id)
				c.res.States++
				work = append(work, dropSpare(next))
				ids = append(ids, to)
				if c.res.States&1023 == 0 {
					c.sample(next)
				}
			} else {
				spare = next // a known state: reuse its arrays
			}
			c.to = append(c.to, to)
			c.cls = append(c.cls, c.classOf(cur, t))
			c.ent = append(c.ent, int8(st.Entered))
		}
		if head > 4096 && head*2 > len(work) {
			n := copy(work, work[head:]) // drop the explored prefix
			clear(work[n:])
			work = work[:n]
			ids = ids[:copy(ids, ids[head:])]
			head = 0
		}
	}
	return true, nil
}

// stepInto takes t from w into a copy of w made in *slot, the world one
// level down the depth-first path: left there from an earlier visit, it
// is nobody else's, so it is reused (and made on first use). It returns
// that world, what the step did, and the promise it broke, if any.
func stepInto(w *World, slot **World, t Transition) (*World, StepResult, error) {
	if *slot == nil {
		*slot = new(World)
	}
	next := w.cloneInto(*slot)
	st, err := next.apply(t)
	return next, st, err
}

// brokenStep records the safety violation of step t, taken after trs,
// that broke err and led to next: fenced safety if the fenced store
// took interleaved writes, else safety. Either ends the search.
func (c *checker) brokenStep(trs []Transition, t Transition, next *World, err error) {
	c.res.Violation = c.violationAlong("safety", trs, -1, t, err.Error())
	c.unsafe, c.stopped = true, StoppedAtViolation
	c.fencedBreak(next)
}

// fencedBreak renames the safety violation just recorded, of the step
// that led to next, as one of fenced safety if that step made the
// fenced store take interleaved writes (CheckConfig.Fenced), as every
// search reports it.
func (c *checker) fencedBreak(next *World) {
	if next.store != nil && next.store.broken {
		c.res.Violation.Property = "fenced safety"
		c.unsafe, c.fencedBroken = false, true
	}
}

// dfsFrame is one world on the depth-first search's path, its enabled
// transitions, and the next one to take.
type dfsFrame struct {
	w     *World
	trs   []Transition
	next  int
	limit int         // the frame is done when next reaches it: len(trs), or fewer under PartialOrder
	fp    fingerprint // w's, under PartialOrder
	edge  int32       // the number of trs[0]'s edge, in the parallel search with the graph (pargraph.go)
}

// depthFirst explores from w depth first, without the graph: it keeps
// the worlds on the current path, and reuses each level's world and
// machines for the next state tried there, so that a known state costs
// no allocation. It reports whether it saw every state. It returns
// errInterrupted as soon as the context ends, and stops at the first
// state past the limit.
func (c *checker) depthFirst(w *World) (bool, error) {
	// along is the path to the world on top of the stack, as
	// transitions: the one each frame below it took last.
	along := func(stack []dfsFrame) []Transition {
		var trs []Transition
		for _, f := range stack[:len(stack)-1] {
			trs = append(trs, f.trs[f.next-1])
		}
		return trs
	}
	stack := []dfsFrame{{w: w}}
	// onStack counts the states on the path, under PartialOrder: a
	// deferred step must not be put off round a cycle for ever.
	var onStack map[fingerprint]int32
	if c.cc.PartialOrder {
		stack[0].fp = c.fingerprint(w)
		onStack = map[fingerprint]int32{stack[0].fp: 1}
	}
	// push examines the world just put on top of the stack; it reports
	// false when the search must end.
	push := func() bool {
		f := &stack[len(stack)-1]
		var v verdict
		var broken error
		f.trs, v, broken = c.examine(f.w, f.trs)
		f.next = 0
		f.limit = len(f.trs)
		if c.cc.PartialOrder {
			f.limit = f.w.persistent(f.trs)
		}
		switch v {
		case vDeadlock:
			if c.deadlockPath == nil {
				c.deadlockPath = along(stack)
			}
			if c.cc.StopAtDeadlock {
				c.stopped = StoppedAtViolation
				return false
			}
		case vBroken:
			c.res.Violation = c.violationAlong("safety", along(stack), -1, Transition{}, broken.Error())
			c.unsafe, c.stopped = true, StoppedAtViolation
			return false
		}
		return true
	}
	if !push() {
		return false, nil
	}
	for len(stack) > 0 {
		top := len(stack) - 1
		f := &stack[top]
		if f.next == f.limit {
			if onStack != nil {
				if onStack[f.fp]--; onStack[f.fp] == 0 {
					delete(onStack, f.fp)
				}
			}
			stack = stack[:top]
			continue
		}
		if c.interrupted() {
			return false, errInterrupted
		}
		t := f.trs[f.next]
		f.next++
		c.res.Transitions++
		if top+1 == cap(stack) {
			stack = append(stack, dfsFrame{})[:top+1]
			f = &stack[top]
		}
		next, st, err := stepInto(f.w, &stack[:top+2][top+1].w, t)
		if err != nil {
			c.brokenStep(along(stack), t, next, err)
			return false, nil
		}
		if st.overlap != nil && c.overlap == nil {
			c.overlap = c.violationAlong("safety", along(stack), -1, t, st.overlap.Error())
		}
		fp := c.fingerprint(next)
		if f.limit < len(f.trs) && (st.Entered >= 0 || t.Kind == TransLeave || st.overlap != nil || onStack[fp] > 0) {
			// A deferred step would change who is inside, or be put off
			// round a cycle: expand this state in full after all.
			f.limit = len(f.trs)
		}
		if c.limit > 0 && c.res.States >= c.limit {
			if _, seen := c.fps.get(fp); seen {
				continue
			}
			c.stopped = StoppedAtStateLimit
			return false, nil
		}
		if _, seen := c.fps.add(fp, 0); seen {
			continue
		}
		c.res.States++
		stack = stack[:top+2]
		if onStack != nil {
			stack[top+1].fp = fp
			onStack[fp]++
		}
		c.tick()
		if c.res.States&1023 == 0 {
			c.sample(stack[top+1].w)
		}
		if c.overBudget(len(stack)) {
			return false, nil
		}
		if !push() {
			return false, nil
		}
	}
	// A spill that failed (spill.go) answers every lookup "seen" from
	// then on, so the search ran out of new states: it saw too few to
	// be complete.
	if err := c.fps.failed(); err != nil {
		return false, err
	}
	return true, nil
}

// finish fills in the result after a search without safety violation.
func (c *checker) finish(complete bool) {
	c.res.Complete = complete
	c.res.Safe = c.res.Violation == nil
	c.res.DeadlockFree = c.res.Safe
	c.res.StarvationFree = c.res.Safe
}

// safetyViolation records that transition t from state id broke a
// promise (t is zero for a promise broken at rest).
func (c *checker) safetyViolation(id int32, t Transition, err error) {
	c.res.Complete = false
	c.res.Violation = c.violation("safety", c.pathTo(id), -1, t, err.Error())
	c.unsafe, c.stopped = true, StoppedAtViolation
}

// pathTo returns the states from the start to id.
func (c *checker) pathTo(id int32) []int32 {
	var path []int32
	for s := id; s >= 0; s = c.parent[s] {
		path = append(path, s)
	}
	slices.Reverse(path)
	return path
}

// violation builds the counterexample that visits the states of path in
// order, repeats from path[cycle] on if cycle >= 0, and then takes last
// if it is not zero. msg is the broken promise, or "" to take the final
// check's.
func (c *checker) violation(prop string, path []int32, cycle int, last Transition, msg string) *Violation {
	w, trs := c.worldAt(path)
	if w == nil {
		return &Violation{Property: prop, origin: c.origin,
			Message: "dmutex: internal error: the counterexample does not replay"}
	}
	if cycle >= 0 {
		cycle--
	}
	return c.violationAlong(prop, trs, cycle, last, msg)
}

// violationAlong builds the counterexample that takes the transitions trs
// from the start, repeats from trs[cycle] on if cycle >= 0 (cycle may be
// len(trs)), and then takes last if it is not zero. msg is the broken
// promise, or "" to take the final check's.
func (c *checker) violationAlong(prop string, trs []Transition, cycle int, last Transition, msg string) *Violation {
	v := &Violation{Property: prop, origin: c.origin, CycleStart: -1}
	w, err := c.startWorld(true)
	if err != nil {
		v.Message = err.Error()
		return v
	}
	if last.Kind != 0 {
		trs = append(slices.Clip(trs), last)
	}
	for i, t := range trs {
		if i == cycle {
			v.CycleStart = len(v.Trace)
		}
		t, ok := w.Find(t.ID())
		if !ok {
			v.Message = "dmutex: internal error: the counterexample does not replay"
			return v
		}
		st, _ := w.apply(t)
		v.Trace = append(v.Trace, st.String())
		v.Transitions = append(v.Transitions, t.ID())
	}
	if cycle == len(trs) {
		v.CycleStart = len(v.Trace)
	}
	if msg == "" {
		if err := w.finalCheck(); err != nil {
			msg = err.Error()
		}
	}
	v.Message = msg
	var b bytes.Buffer
	_ = w.WriteMermaid(&b)
	if v.CycleStart >= 0 {
		fmt.Fprintf(&b, "    Note over %s: from step %d on, the run repeats for ever\n", w.everyone(), v.CycleStart+1)
	}
	v.Mermaid = b.String()
	if v.CycleStart < 0 {
		v.CycleStart = 0
	}
	return v
}
