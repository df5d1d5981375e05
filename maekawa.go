package dmutex

import (
	"fmt"
	"slices"
	"strings"
)

// NewMaekawa starts n peers running the quorum algorithm of M. Maekawa, "A
// √N algorithm for mutual exclusion in decentralized systems", ACM TOCS
// 3(2), 1985, with the INQUIRE, FAILED and RELINQUISH messages that keep
// it from deadlocking.
//
// Each peer asks only the peers of its voting set (see VotingSets and
// WithVotingSets): at most 2⌈√n⌉-1 of them on the default grid sets, q+1
// on a projective plane of order q; every two sets share a peer, and each
// peer votes for one request at a time, so no two peers can collect all
// their votes at once. A requester stamps its request with its Lamport
// clock and sends it to its set; it enters when every member has answered
// LOCKED, and on leaving it sends RELEASE, after which each voter votes
// for the best waiting request, the one with the smallest (timestamp, id).
// A voter that has voted tells every waiting request that is behind a
// better one, granted or waiting, that it cannot win now (FAILED, once):
// not only a request as it arrives, but also one that a better request
// overtakes later, without which four peers on the grid sets can deadlock
// (the variant maekawa-textbook-failed). When a better
// request than its grantee's arrives, the voter asks for its vote back
// (INQUIRE, once per vote). The grantee gives it back (RELINQUISH) if it
// knows it cannot win now (it has a FAILED, or gave another vote back and
// is still waiting for it), and otherwise keeps the INQUIRE until it
// knows, or enters and answers with its RELEASE. Every message carries the
// timestamp of the request it concerns, and a stale one is ignored. A
// peer's vote for itself is local and costs no message.
//
// The repair. Maekawa's paper sends FAILED only to a request as it
// arrives at a voter whose grant or queue holds a better one. That rule
// deadlocks with four peers on the default grid sets {0,1,2} {0,1,3}
// {0,2,3} {1,2,3}, one request each (the variant maekawa-textbook-failed;
// the README shows the checker's trace): a request queued behind a worse
// grant gets no FAILED, a better request then overtakes it in the queue
// and wins the vote, and the displaced request, which holds another
// voter's vote, keeps that voter's INQUIRE for ever, since it has heard no
// FAILED. This machine also sends FAILED to a queued request that a
// better one displaces. Why that is deadlock-free, over FIFO channels:
// suppose a state with requests waiting, nobody inside and nothing in
// flight, and take the best waiting request R. A voter of R that has not
// voted for R has voted for a worse request Y, and asked Y for the vote
// back when R arrived. Y waits, so a voter of Y votes for some Z. If Z is
// better than Y, Y has heard FAILED from that voter (as it arrived, or
// when Z displaced it), or gave that voter's vote back before and waits
// for it again; either way Y answers the INQUIRE with RELINQUISH, and the
// state was not stuck. Otherwise Z is worse than Y and Y's arrival there sent Z an
// INQUIRE; repeat with Z. Priorities only get worse along that chain, so
// it ends at a request that has heard FAILED and holds an INQUIRE: it
// relinquishes, a contradiction. B. A. Sanders, "The information
// structure of distributed mutual exclusion algorithms", ACM TOCS 5(3),
// 1987, generalizes Maekawa's algorithm and revisited its deadlock
// handling. New here are only the displacement rule stated as a rule,
// the four-peer counterexample found by the checker, and the exhaustive
// checks of small clusters; the argument above is an informal proof, not
// a mechanized one.
//
// Cost: 3(K-1) messages per entry with one entry at a time, for a voting
// set of size K (request, locked and release to each other member): K = 3
// for n = 7, 4 for 13, 6 for 31 (projective planes, q+1), at most
// 2⌈√n⌉-1 on the grid. Contention
// adds FAILED, INQUIRE and RELINQUISH messages, and a second LOCKED for
// every vote given back. The literature puts contention at 5(K-1) to
// 6(K-1) per entry, with no firm bound; with every peer contending on the
// in-memory transport this implementation measures about 4(K-1): nearly
// every request hears FAILED from its other voters, and INQUIRE is rare
// (0.01 to 0.05 per entry). Channels: per-pair FIFO order is
// required, as in the paper. Over reordering channels an INQUIRE can
// overtake the LOCKED it concerns, and a requester that gives back a vote
// it does not hold yet loses track of that vote. This machine keeps such
// an INQUIRE until its LOCKED arrives, and exhaustive search of small
// clusters over reordering channels finds no failure, but that is not a
// proof: only FIFO channels are supported (Maekawa.NeedsFIFO is true). The
// in-memory transport keeps per-pair FIFO order. Fairness: no starvation.
// Once a request has reached all its voters, every other peer enters at
// most twice before it, because each answer carries the voter's clock and
// stamps that peer's later requests after it. Counted from the request
// itself, Check finds at most 2 entries by the other peer at n = 2 with
// four requests per peer, and at n = 3 at most 2, 4 and 5 entries by the
// others with one, two and three requests per peer. Entries do not follow
// (timestamp, id) order: a younger request whose voters are idle can enter
// before an older one still collecting votes elsewhere. Failures: assumes
// reliable peers and channels. A crashed peer blocks every requester
// whose voting set contains it; a request that waits on it keeps the
// votes it has, so peers whose sets avoid the crashed one are blocked too
// once their requests meet a stuck one (they enter only sometimes). A
// crashed holder blocks everyone. The package documentation's failure
// table, computed by the checker, has every case; none lets two peers in
// at once.
//
// TryLock sends a try, stamped as a request, to the voting set. A voter
// whose vote is free gives it (LOCKED) and asks nothing back for it; a
// voter whose vote is with another request answers busy and queues
// nothing. Once every member has answered, the try enters if all gave
// their votes, and otherwise sends RELEASE to every member, which frees
// the votes it got and is ignored by the voters that said busy. So a try
// costs 3(K-1) messages, entered or refused (tries, answers, releases).
// Requests that reach a voter while its vote is with a try wait in its
// queue as usual, and may hear FAILED.
func NewMaekawa(n int, opts ...Option) (*Cluster, error) {
	return New(Maekawa, n, opts...)
}

// maekawa is the Maekawa machine. Each peer plays two roles: a requester,
// which collects the votes of its voting set, and a voter, which votes for
// one request of the peers whose sets contain it. Every message carries in
// TS the timestamp of the request it concerns: REQUEST, RELINQUISH and
// RELEASE go from a requester to a voter, LOCKED, INQUIRE and FAILED from
// a voter to a requester. Ref carries the sender's Lamport clock, so that
// a requester that has lost to an older request at a voter learns the
// voter's clock and stamps its next request later than that one: without
// it, a peer with a slow clock could overtake an older request again and
// again. Messages between a peer's two roles are delivered locally,
// within the same step, in the order sent.
type maekawa struct {
	id  int
	set []int // our voting set, in increasing order; contains id

	// Requester.
	clock   uint64 // Lamport clock: highest timestamp seen
	state   mkState
	ts      uint64   // timestamp of our request, while not idle
	votes   []mkVote // votes[k]: what voter set[k] did with our request
	inquiry []bool   // inquiry[k]: set[k] asked for its vote back, not yet answered

	// Voter.
	grantTo  int       // requester our vote is with, or -1
	grantTS  uint64    // timestamp of that request; 0 if none
	grantTry bool      // that request is a try: it never waits, so it is never inquired
	inquired bool      // we sent INQUIRE for the current grant
	queue    []mkEntry // waiting requests, by (ts, id)

	local []Message // messages to ourselves not yet processed; empty between steps
}

type mkState uint8

const (
	mkIdle mkState = iota
	mkWanting
	mkHeld
	mkTrying // a try waits for every voter's answer
)

// An mkVote is what a requester knows about one voter's vote.
type mkVote uint8

const (
	voteNone    mkVote = iota // nothing heard yet
	voteLocked                // we hold the vote
	voteFailed                // the voter said FAILED: a better request is ahead of ours there
	voteYielded               // we gave the vote back and wait for it again
	voteBusy                  // the voter refused our try
)

// An mkEntry is a request waiting at a voter. After every step, failed is
// set exactly for the entries behind the grant or behind another entry,
// and the voter's inquired flag exactly when the first entry beats the
// grant; both are kept, rather than recomputed, to say what was sent.
type mkEntry struct {
	ts     uint64
	id     int
	failed bool // the requester knows it cannot win here: we sent FAILED, or it yielded to us
}

func newMaekawa(id, n int, cfg *config) (machine, error) {
	var set []int
	if cfg.votingSets != nil {
		set = slices.Clone(cfg.votingSets[id])
	} else {
		set = defaultVotingSet(id, n)
	}
	return &maekawa{
		id:      id,
		set:     set,
		votes:   make([]mkVote, len(set)),
		inquiry: make([]bool, len(set)),
		grantTo: -1,
	}, nil
}

func (m *maekawa) step(ev event, out *output) {
	switch ev.kind {
	case evRequest, evTry:
		m.ask(ev.kind == evTry, out)
	case evRelease:
		m.release(out)
	case evMessage:
		m.receive(ev.msg, out)
	}
	// Messages between our own roles; handling one may send more.
	for i := 0; i < len(m.local); i++ {
		m.receive(m.local[i], out)
	}
	m.local = m.local[:0]
}

// ask stamps a new request, or a try, and sends it to every member of
// our set.
func (m *maekawa) ask(try bool, out *output) {
	m.clock++
	m.ts = m.clock
	m.state = mkWanting
	kind := KindRequest
	if try {
		m.state = mkTrying
		kind = KindTry
	}
	for _, v := range m.set {
		m.send(Message{Kind: kind, From: m.id, To: v, TS: m.ts}, out)
	}
}

// release sends RELEASE for our request to every member of our set.
func (m *maekawa) release(out *output) {
	m.state = mkIdle
	clear(m.votes)
	clear(m.inquiry)
	for _, v := range m.set {
		m.send(Message{Kind: KindRelease, From: m.id, To: v, TS: m.ts}, out)
	}
	m.ts = 0
}

// send stamps msg with our clock and hands it to the transport, or keeps
// it for this step if it is addressed to ourselves.
func (m *maekawa) send(msg Message, out *output) {
	msg.Ref = m.clock
	if msg.To == m.id {
		m.local = append(m.local, msg)
		return
	}
	out.send(msg)
}

func (m *maekawa) receive(msg Message, out *output) {
	m.clock = max(m.clock, msg.TS, msg.Ref)
	switch msg.Kind {
	case KindRequest:
		m.onRequest(msg.From, msg.TS, out)
	case KindTry:
		if m.grantTo >= 0 {
			m.send(Message{Kind: KindBusy, From: m.id, To: msg.From, TS: msg.TS}, out)
			return
		}
		m.grantTo, m.grantTS, m.grantTry = msg.From, msg.TS, true
		m.send(Message{Kind: KindLocked, From: m.id, To: msg.From, TS: msg.TS}, out)
	case KindRelinquish:
		if m.grantTo == msg.From && m.grantTS == msg.TS {
			m.enqueue(mkEntry{ts: msg.TS, id: msg.From, failed: true})
			m.grantBest(out)
		}
	case KindRelease:
		if m.grantTo == msg.From && m.grantTS == msg.TS {
			m.grantBest(out)
		}
	case KindLocked, KindBusy, KindInquire, KindFailed:
		k, ok := slices.BinarySearch(m.set, msg.From)
		if !ok || msg.TS != m.ts {
			return // stale, or answered by our RELEASE
		}
		if m.state == mkTrying {
			m.onTryAnswer(k, msg.Kind, out)
			return
		}
		if m.state != mkWanting {
			return
		}
		switch msg.Kind {
		case KindLocked:
			m.onLocked(k, out)
		case KindInquire:
			m.onInquire(k, out)
		case KindFailed:
			m.onFailed(k, out)
		}
	}
}

// onTryAnswer records voter set[k]'s answer to our try and, once every
// voter has answered, enters or withdraws.
func (m *maekawa) onTryAnswer(k int, kind MessageKind, out *output) {
	switch {
	case m.votes[k] != voteNone:
		return
	case kind == KindLocked:
		m.votes[k] = voteLocked
	case kind == KindBusy:
		m.votes[k] = voteBusy
	default:
		return // a voter never sends a try INQUIRE or FAILED
	}
	all := true
	for _, v := range m.votes {
		switch v {
		case voteNone:
			return
		case voteBusy:
			all = false
		}
	}
	if all {
		m.state = mkHeld
		out.enter()
		return
	}
	m.release(out)
	out.refuse()
}

// Voter.

func (m *maekawa) onRequest(j int, ts uint64, out *output) {
	m.enqueue(mkEntry{ts: ts, id: j})
	if m.grantTo < 0 {
		m.grantBest(out)
		return
	}
	m.tell(out)
}

// enqueue inserts e into the queue in (ts, id) order and returns its
// index.
func (m *maekawa) enqueue(e mkEntry) int {
	k, _ := slices.BinarySearchFunc(m.queue, e, func(a, b mkEntry) int {
		switch {
		case before(a.ts, a.id, b.ts, b.id):
			return -1
		case before(b.ts, b.id, a.ts, a.id):
			return 1
		}
		return 0
	})
	m.queue = slices.Insert(m.queue, k, e)
	return k
}

// grantBest votes for the best waiting request, if any, after our vote
// came back.
func (m *maekawa) grantBest(out *output) {
	m.inquired = false
	m.grantTry = false
	if len(m.queue) == 0 {
		m.grantTo, m.grantTS = -1, 0
		return
	}
	e := m.queue[0]
	m.queue = slices.Delete(m.queue, 0, 1)
	m.grantTo, m.grantTS = e.id, e.ts
	m.send(Message{Kind: KindLocked, From: m.id, To: e.id, TS: e.ts}, out)
	m.tell(out)
}

// tell brings the waiting requesters and our grantee up to date, after a
// request arrived or the vote moved: every waiting request behind
// a better one, granted or waiting, learns that it cannot win now (FAILED,
// once), and the grantee is asked for the vote back (INQUIRE, once per
// grant) when a better request waits. The FAILED rule covers a request
// that was the best waiting one when it arrived, and so got no FAILED,
// and then fell behind a better one: if it never learnt, it could keep a
// vote elsewhere that the better request needs, while waiting for the
// vote the better one has. The variant maekawa-textbook-failed answers
// FAILED only to an arriving request, and so deadlocks (four peers on the
// grid sets); the variant maekawa-no-inquire sends neither message.
func (m *maekawa) tell(out *output) {
	for k := range m.queue {
		e := &m.queue[k]
		if !e.failed && (k > 0 || before(m.grantTS, m.grantTo, e.ts, e.id)) {
			e.failed = true
			m.send(Message{Kind: KindFailed, From: m.id, To: e.id, TS: e.ts}, out)
		}
	}
	if len(m.queue) > 0 && !m.inquired && !m.grantTry && before(m.queue[0].ts, m.queue[0].id, m.grantTS, m.grantTo) {
		m.inquired = true
		m.send(Message{Kind: KindInquire, From: m.id, To: m.grantTo, TS: m.grantTS}, out)
	}
}

// Requester.

func (m *maekawa) onLocked(k int, out *output) {
	m.votes[k] = voteLocked
	if m.inquiry[k] && m.losing() {
		m.yield(k, out) // an INQUIRE that overtook this LOCKED
		return
	}
	for _, v := range m.votes {
		if v != voteLocked {
			return
		}
	}
	m.state = mkHeld
	clear(m.inquiry) // our RELEASE will answer them
	out.enter()
}

func (m *maekawa) onInquire(k int, out *output) {
	if m.votes[k] == voteLocked && m.losing() {
		m.yield(k, out)
		return
	}
	m.inquiry[k] = true // until we know we lose, or until its LOCKED arrives
}

func (m *maekawa) onFailed(k int, out *output) {
	if m.votes[k] != voteNone {
		return
	}
	m.votes[k] = voteFailed
	for i, asked := range m.inquiry {
		if asked && m.votes[i] == voteLocked {
			m.yield(i, out)
		}
	}
}

// losing reports whether we know our request cannot win now: a voter said
// FAILED, or has the vote we gave back.
func (m *maekawa) losing() bool {
	for _, v := range m.votes {
		if v == voteFailed || v == voteYielded {
			return true
		}
	}
	return false
}

// yield gives voter set[k]'s vote back.
func (m *maekawa) yield(k int, out *output) {
	m.votes[k] = voteYielded
	m.inquiry[k] = false
	m.send(Message{Kind: KindRelinquish, From: m.id, To: m.set[k], TS: m.ts}, out)
}

// needs appends the other members of our voting set: only their votes
// can keep a request waiting (WithUnreachableAfter).
func (m *maekawa) needs(buf []int) []int {
	for _, v := range m.set {
		if v != m.id {
			buf = append(buf, v)
		}
	}
	return buf
}

func (m *maekawa) clone() machine {
	c := *m
	c.set = slices.Clone(m.set)
	c.votes = slices.Clone(m.votes)
	c.inquiry = slices.Clone(m.inquiry)
	c.queue = slices.Clone(m.queue)
	c.local = nil
	return &c
}

func (m *maekawa) appendState(b []byte) []byte {
	b = appendUint(b, m.clock)
	b = append(b, byte(m.state))
	b = appendUint(b, m.ts)
	for k, v := range m.votes {
		b = append(b, byte(v))
		b = appendBool(b, m.inquiry[k])
	}
	b = appendInt(b, m.grantTo)
	b = appendUint(b, m.grantTS)
	b = appendBool(b, m.grantTry)
	b = appendBool(b, m.inquired)
	b = appendInt(b, len(m.queue))
	for _, e := range m.queue {
		b = appendUint(b, e.ts)
		b = appendInt(b, e.id)
		b = appendBool(b, e.failed)
	}
	return b
}

// idleViolation reports a vote that did not come home: once the cluster
// is at rest, no voter may still vote for a request or queue one.
func (m *maekawa) idleViolation() string {
	if m.grantTo >= 0 || len(m.queue) > 0 {
		return fmt.Sprintf("still votes for peer %d with %d waiting", m.grantTo, len(m.queue))
	}
	return ""
}

func (m *maekawa) describe() []StateField {
	state := [...]string{mkIdle: "idle", mkWanting: "wanting", mkHeld: "held", mkTrying: "trying"}[m.state]
	voteNames := [...]string{voteNone: "-", voteLocked: "locked", voteFailed: "failed", voteYielded: "yielded", voteBusy: "busy"}
	var votes []string
	for k, v := range m.votes {
		s := fmt.Sprintf("P%d:%s", m.set[k], voteNames[v])
		if m.inquiry[k] {
			s += "(inquired)"
		}
		votes = append(votes, s)
	}
	vote := "home"
	if m.grantTo >= 0 {
		vote = fmt.Sprintf("P%d ts=%d", m.grantTo, m.grantTS)
		if m.inquired {
			vote += " (inquired)"
		}
		if m.grantTry {
			vote += " (a try)"
		}
	}
	var queue []string
	for _, e := range m.queue {
		s := fmt.Sprintf("(%d,P%d)", e.ts, e.id)
		if e.failed {
			s += "failed"
		}
		queue = append(queue, s)
	}
	return []StateField{
		{"clock", fmt.Sprint(m.clock)},
		{"state", state},
		{"request", describeTS(m.state != mkIdle, m.ts)},
		{"voting set", describePeers(m.set)},
		{"votes", "[" + strings.Join(votes, " ") + "]"},
		{"my vote", vote},
		{"voter queue", "[" + strings.Join(queue, " ") + "]"},
	}
}
