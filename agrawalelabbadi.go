package dmutex

import (
	"fmt"
	"slices"
	"strings"
)

// NewAgrawalElAbbadi starts n peers running the tree quorum algorithm:
// Maekawa's voting over quorums that are root-to-leaf paths of a binary
// tree of the peers.
//
// Cost: 3(K-1) messages per entry one at a time, where K is the length of
// the peer's path, ⌊log₂ n⌋+1 or one less (2 at n = 3, 3 at n = 7, 4 at
// n = 15); more under contention, as Maekawa's. Channels: per-pair FIFO
// (NeedsFIFO), as Maekawa's. Crashes: without WithRecovery a crashed peer
// on a requester's path blocks it; with WithRecovery the survivors go on
// entering around the peers they suspect, at more messages the higher
// the failed peer sits (below), and a false suspicion can let two peers
// in, as with the other recoveries: fence the resource.
//
// D. Agrawal and A. El Abbadi, "An efficient and fault-tolerant solution
// for distributed mutual exclusion", ACM Transactions on Computer Systems
// 9(1), 1991.
//
// The peers form a complete binary tree in heap order: peer 0 is the
// root and peer k's children are 2k+1 and 2k+2. A tree quorum of a
// subtree is its root together with a tree quorum of one of its two
// subtrees, or, when its root has failed, a tree quorum of each of them;
// a leaf is its own quorum, an empty subtree has none. Any two tree
// quorums share a peer (by induction on the tree: two quorums that both
// hold the root meet there; one that does not holds a quorum of each
// subtree, which meets the other's quorum of one of them), whichever
// peers either chose to avoid. With nobody failed a quorum is a
// root-to-leaf path: peer i asks the path from the root through itself
// and on down the leftmost branch below it, so it is always in its own
// quorum and its own vote costs no message.
//
// Over the quorum the algorithm is Maekawa's, as the paper prescribes:
// a voter votes for one request at a time and queues the others by
// (timestamp, id), and deadlocks are resolved by INQUIRE, FAILED and
// RELINQUISH, with this project's repair (FAILED also to a queued request
// that a better one displaces); see [NewMaekawa], whose voter and
// requester this machine reuses unchanged. The paper leaves the choice of
// deadlock handling to the quorum algorithm it serves; Maekawa's is the
// one it names, and the checker finds it deadlock free on these quorums.
// Synchronization delay: two message delays (RELEASE to the voter, LOCKED
// to the next), response time at light load 2T+E, as Maekawa's.
//
// With WithRecovery, and a failure detector (WithUnreachableAfter, or the
// checker's), a requester asks the tree quorum around the peers it
// suspects (TreeQuorum): a suspected peer on its path is replaced by a
// quorum of each of its subtrees, so an entry costs more the higher the
// failed peer sits. At n = 7 a failed leaf or inner peer costs nothing
// more, and a failed root 9 messages per entry instead of 6; at n = 15 a
// failed root costs 15 instead of 9, and the worst three failures 21
// (docs/benchmarks.md, "Agrawal-El Abbadi as peers fail", has the table
// by number and position of failed peers, measured by a test). If a
// member of its quorum becomes suspected while it waits, it asks the
// substitutes too, and enters as soon as the votes it holds contain a
// tree quorum; a try counts a suspected voter that has not answered as
// busy. A voter takes its vote back from a peer it suspects and gives it
// to the best request of a peer it does not suspect; the requests of
// suspected peers wait aside until they are trusted again. That is what
// lets the survivors go on after a crash: every tree quorum meets the
// crashed peer's, so a vote it held must come back. It is also why a
// false suspicion can let two peers in: the falsely suspected peer may be
// inside with the vote its voter gave away. Quorum intersection protects
// the requesters, not a vote taken back, and no rule can tell a crashed
// holder from a slow one; the variant agrawal-el-abbadi-keep-votes, whose
// voters never take a vote back, is safe under false suspicions but
// deadlocks when a peer crashes holding a vote, with a perfect detector.
// So a resource must check fences, as with the other recoveries (see
// [WithRecovery]): each peer takes its fences from its own class, and the
// first entry after a new suspicion a new epoch. Check, at n = 3, one
// crash of any peer at any point: safe, deadlock free and starvation
// free with a perfect detector (and with two requests per peer); with one
// false suspicion two peers can be inside, and the fenced store accepts
// no interleaved writes (docs/checking.md, "Crash recovery, checked"). A
// peer that suspects more than (n-1)/2 others acts on none of its
// suspicions and makes no new request (WithRecovery): at n = 3 one crash
// is tolerated, at n = 7 up to three, at n = 15 up to seven, if the
// survivors still hold a tree quorum (some sets of three failures at
// n = 7 leave none: then the survivors wait). When a suspected peer is
// trusted again, or reachable again after a cut too short to suspect it,
// the peer asks it again for what it waits for (its request or try, if
// unanswered), sends it its vote and INQUIRE again if it has them, and
// its FAILED again; a vote that comes for a request that is over is given
// back at once (RELEASE). A request that entered on a tree quorum without
// every vote it asked for withdraws the rest with its RELEASE.
//
// Departures from the paper: the tree is fixed in heap order; the path of
// each peer is fixed (the paper lets a requester pick any path, for
// example at random, to spread the load); a requester that suspects a
// member while it waits keeps the requests it made and adds the
// substitutes, where the paper's requester starts its quorum again; and
// what a voter does with a vote held by a peer it suspects, which the
// quorum construction does not settle, is this implementation's choice
// (above).
func NewAgrawalElAbbadi(n int, opts ...Option) (*Cluster, error) {
	return New(AgrawalElAbbadi, n, opts...)
}

// agrawalElAbbadi is the tree quorum machine: a Maekawa machine whose set
// is the peer's tree quorum, and, under WithRecovery, grows around the
// peers it suspects.
type agrawalElAbbadi struct {
	maekawa
	n         int
	path      []int // our quorum with nobody suspected, in increasing order; fixed
	recovery  bool
	suspected []bool // WithRecovery: suspected[j] while the detector suspects j

	// parked, WithRecovery: requests of peers we suspect, set aside from
	// the voter's queue until we trust their peer again; the request our
	// vote was with when its peer became suspected is among them.
	parked []mkEntry
}

func newAgrawalElAbbadi(id, n int, cfg *config) (machine, error) {
	set := treePath(id, n)
	return &agrawalElAbbadi{
		path: slices.Clone(set),
		maekawa: maekawa{
			id:      id,
			set:     set,
			votes:   make([]mkVote, len(set)),
			inquiry: make([]bool, len(set)),
			grantTo: -1,
		},
		n:         n,
		recovery:  cfg.recovery,
		suspected: make([]bool, n),
	}, nil
}

// treePath returns peer i's quorum with nobody failed: the path from the
// root through i and on down the leftmost branch, in increasing order.
func treePath(i, n int) []int {
	var path []int
	for v := i; v > 0; v = (v - 1) / 2 {
		path = append(path, v)
	}
	path = append(path, 0)
	for v := 2*i + 1; v < n; v = 2*v + 1 {
		path = append(path, v)
	}
	slices.Sort(path)
	return path
}

// TreeQuorum returns the tree quorum peer i of n asks when it suspects
// the peers in down, in increasing order, and false when the peers not in
// down hold no tree quorum. With down empty it is the root-to-leaf path
// through i; a peer of down on the way is replaced by a quorum of each of
// its subtrees. It returns nil and false if i is not a peer of n.
func TreeQuorum(i, n int, down []int) ([]int, bool) {
	if i < 0 || i >= n {
		return nil, false
	}
	failed := make([]bool, n)
	for _, j := range down {
		if j >= 0 && j < n {
			failed[j] = true
		}
	}
	q, ok := treeQuorum(nil, 0, i, n, failed)
	slices.Sort(q)
	return q, ok
}

// treeQuorum appends to q a tree quorum of the subtree rooted at v that
// avoids the failed peers, preferring the branch towards peer i, then
// the left one, and reports whether there is one; on false q is returned
// as it came.
func treeQuorum(q []int, v, i, n int, failed []bool) ([]int, bool) {
	if v >= n {
		return q, false
	}
	l, r := 2*v+1, 2*v+2
	if failed[v] {
		q0 := q
		q, ok := treeQuorum(q, l, i, n, failed)
		if !ok {
			return q0, false
		}
		q, ok = treeQuorum(q, r, i, n, failed)
		if !ok {
			return q0, false
		}
		return q, true
	}
	if l >= n {
		return append(q, v), true
	}
	if inSubtree(i, r) {
		l, r = r, l
	}
	if q2, ok := treeQuorum(append(q, v), l, i, n, failed); ok {
		return q2, true
	}
	if q2, ok := treeQuorum(append(q, v), r, i, n, failed); ok {
		return q2, true
	}
	return q, false
}

// inSubtree reports whether peer x is in the subtree rooted at v.
func inSubtree(x, v int) bool {
	for x > v {
		x = (x - 1) / 2
	}
	return x == v
}

// holdsQuorum reports whether the peers with has set contain a tree
// quorum of the subtree rooted at v.
func holdsQuorum(v, n int, has func(int) bool) bool {
	if v >= n {
		return false
	}
	l, r := 2*v+1, 2*v+2
	if l >= n {
		return has(v)
	}
	if holdsQuorum(l, n, has) {
		return has(v) || holdsQuorum(r, n, has)
	}
	return has(v) && holdsQuorum(r, n, has)
}

func (a *agrawalElAbbadi) step(ev event, out *output) {
	if !a.recovery {
		a.maekawa.step(ev, out)
		return
	}
	switch ev.kind {
	case evRequest, evTry:
		a.setQuorum(a.quorum())
		a.ask(ev.kind == evTry, out)
	case evRelease:
		a.release(out)
	case evMessage:
		a.receive(ev.msg, out)
	case evSuspect, evTrust:
		j := ev.msg.From
		if j < 0 || j >= a.n || j == a.id {
			return
		}
		a.suspected[j] = ev.kind == evSuspect
		if a.suspected[j] {
			a.park(j, out)
		} else {
			a.unpark(j, out)
		}
		a.onSuspicion(a.suspected[j], j, out)
	case evReached:
		if j := ev.msg.From; j >= 0 && j < a.n && j != a.id {
			a.reached(j, out)
		}
	}
	// Messages between our own roles; handling one may send more.
	for i := 0; i < len(a.local); i++ {
		a.receive(a.local[i], out)
	}
	a.local = a.local[:0]
	a.enterOnQuorum(out)
}

// receive handles a message with recovery on: what a lost message, a
// suspected sender or a quorum entered without every vote changes, and
// Maekawa's rules for the rest.
func (a *agrawalElAbbadi) receive(msg Message, out *output) {
	j := msg.From
	if j < 0 || j >= a.n {
		return
	}
	switch msg.Kind {
	case KindRequest, KindTry:
		a.clock = max(a.clock, msg.TS, msg.Ref)
		if a.answerAgain(j, msg.TS, out) {
			return // asked again after a cut: answered again
		}
		switch {
		case !a.suspected[j]:
		case msg.Kind == KindTry:
			// A try from a peer we suspect is refused: our vote, if
			// given, would have nobody to come back from.
			a.send(Message{Kind: KindBusy, From: a.id, To: j, TS: msg.TS}, out)
			return
		default:
			a.parked = append(a.parked, mkEntry{ts: msg.TS, id: j})
			return
		}
	case KindRelease:
		// Our vote may never have reached a request that entered on a
		// quorum without it: it must not wait in our queue for ever.
		a.queue = slices.DeleteFunc(a.queue, func(e mkEntry) bool { return e.id == j && e.ts == msg.TS })
		a.parked = slices.DeleteFunc(a.parked, func(e mkEntry) bool { return e.id == j && e.ts == msg.TS })
	case KindLocked:
		if msg.TS != a.ts {
			// A vote for a request of ours that is over (its RELEASE
			// was lost, or the vote was given after it): give it back.
			a.clock = max(a.clock, msg.TS, msg.Ref)
			a.send(Message{Kind: KindRelease, From: a.id, To: j, TS: msg.TS}, out)
			return
		}
	}
	a.maekawa.receive(msg, out)
}

// answerAgain answers a request of peer j stamped ts that we already
// have, which j sent again after a cut (see reached): our vote if it is
// with it, FAILED if we told it so; it reports whether we had it.
func (a *agrawalElAbbadi) answerAgain(j int, ts uint64, out *output) bool {
	if a.grantTo == j && a.grantTS == ts {
		a.send(Message{Kind: KindLocked, From: a.id, To: j, TS: ts}, out)
		if a.inquired {
			a.send(Message{Kind: KindInquire, From: a.id, To: j, TS: ts}, out)
		}
		return true
	}
	for _, e := range a.queue {
		if e.id == j && e.ts == ts {
			if e.failed {
				a.send(Message{Kind: KindFailed, From: a.id, To: j, TS: ts}, out)
			}
			return true
		}
	}
	return slices.ContainsFunc(a.parked, func(e mkEntry) bool { return e.id == j && e.ts == ts })
}

// park sets aside, as a voter, the requests of peer j, which we now
// suspect: our vote, if j has it, is taken back and given to the best
// request of a peer we do not suspect, and j's waiting requests wait
// apart until we trust j again. Only so can the others go on when j
// crashed holding our vote; if j is alive, it may enter with the vote
// we gave another (see NewAgrawalElAbbadi).
func (a *agrawalElAbbadi) park(j int, out *output) {
	a.setAside(j)
	if a.grantTo == j {
		if !a.grantTry { // a try is never queued
			// If j is alive, it counts our vote as its own: no FAILED.
			a.parked = append(a.parked, mkEntry{ts: a.grantTS, id: j, failed: true})
		}
		a.grantBest(out)
	}
}

// setAside moves peer j's waiting requests from our queue to parked.
func (a *agrawalElAbbadi) setAside(j int) {
	for _, e := range a.queue {
		if e.id == j {
			a.parked = append(a.parked, e)
		}
	}
	a.queue = slices.DeleteFunc(a.queue, func(e mkEntry) bool { return e.id == j })
}

// unpark puts peer j's requests back in our queue, now that we trust j
// again.
func (a *agrawalElAbbadi) unpark(j int, out *output) {
	back := false
	a.parked = slices.DeleteFunc(a.parked, func(e mkEntry) bool {
		if e.id == j {
			a.enqueue(e)
			back = true
			return true
		}
		return false
	})
	switch {
	case !back:
	case a.grantTo < 0:
		a.grantBest(out)
	default:
		a.tell(out)
	}
}

// reached asks peer j again for what we wait for from it, and answers it
// again, now that it is back from a cut in which messages may have been
// lost: our request or try, if j has not answered it; our vote, and our
// INQUIRE, if j has it (j gives it back if its request is over); our
// FAILED, if j waits behind another. Whatever j already had is answered
// as before, and counts once.
func (a *agrawalElAbbadi) reached(j int, out *output) {
	if k, ok := slices.BinarySearch(a.set, j); ok && a.votes[k] == voteNone && (a.state == mkWanting || a.state == mkTrying) {
		kind := KindRequest
		if a.state == mkTrying {
			kind = KindTry
		}
		a.send(Message{Kind: kind, From: a.id, To: j, TS: a.ts}, out)
	}
	if a.grantTo == j {
		a.answerAgain(j, a.grantTS, out)
	}
	for _, e := range a.queue {
		if e.id == j && e.failed {
			a.send(Message{Kind: KindFailed, From: a.id, To: j, TS: e.ts}, out)
		}
	}
}

// quorum returns the quorum to ask now: a tree quorum around the peers we
// suspect, or our path if we suspect nobody or the others hold none.
func (a *agrawalElAbbadi) quorum() []int {
	if !slices.Contains(a.suspected, true) {
		return a.path
	}
	q, ok := treeQuorum(nil, 0, a.id, a.n, a.suspected)
	if !ok {
		return a.path
	}
	slices.Sort(q)
	return q
}

// setQuorum makes q, in increasing order, the set of the next request,
// in the arrays the last one used.
func (a *agrawalElAbbadi) setQuorum(q []int) {
	a.set = append(a.set[:0], q...)
	a.votes = append(a.votes[:0], make([]mkVote, len(q))...)
	a.inquiry = append(a.inquiry[:0], make([]bool, len(q))...)
}

// onSuspicion adapts a request or try in progress to a new suspicion of
// peer j: a try whose voter j has not answered counts it as busy; a
// request asks every member of the quorum around the peers suspected now
// that it has not asked yet. A trust changes neither: the votes a request
// holds still count, and evReached asks j again if need be.
func (a *agrawalElAbbadi) onSuspicion(suspected bool, j int, out *output) {
	if !suspected {
		return
	}
	switch a.state {
	case mkTrying:
		if k, ok := slices.BinarySearch(a.set, j); ok && a.votes[k] == voteNone {
			a.onTryAnswer(k, KindBusy, out)
		}
	case mkWanting:
		q, ok := treeQuorum(nil, 0, a.id, a.n, a.suspected)
		if !ok {
			return
		}
		for _, v := range q {
			k, found := slices.BinarySearch(a.set, v)
			if found {
				continue
			}
			a.set = slices.Insert(a.set, k, v)
			a.votes = slices.Insert(a.votes, k, voteNone)
			a.inquiry = slices.Insert(a.inquiry, k, false)
			a.send(Message{Kind: KindRequest, From: a.id, To: v, TS: a.ts}, out)
		}
	}
}

// enterOnQuorum enters when a waiting request holds the votes of a tree
// quorum though not of every peer it asked: only after its quorum grew
// around a suspected peer.
func (a *agrawalElAbbadi) enterOnQuorum(out *output) {
	if a.state != mkWanting {
		return
	}
	has := func(v int) bool {
		k, ok := slices.BinarySearch(a.set, v)
		return ok && a.votes[k] == voteLocked
	}
	if holdsQuorum(0, a.n, has) {
		a.state = mkHeld
		clear(a.inquiry) // our RELEASE will answer them
		out.enter()
	}
}

// idleViolation adds to Maekawa's the requests set aside for suspected
// peers: at rest, none may be left.
func (a *agrawalElAbbadi) idleViolation() string {
	if len(a.parked) > 0 {
		return fmt.Sprintf("still keeps %d requests of suspected peers", len(a.parked))
	}
	return a.maekawa.idleViolation()
}

func (a *agrawalElAbbadi) clone() machine {
	c := *a
	c.maekawa = *a.maekawa.clone().(*maekawa)
	c.suspected = slices.Clone(a.suspected)
	c.parked = slices.Clone(a.parked)
	c.path = slices.Clone(a.path)
	return &c
}

func (a *agrawalElAbbadi) appendState(b []byte) []byte {
	if a.recovery {
		b = appendInts(b, a.set)
		b = appendBools(b, a.suspected)
		b = appendInt(b, len(a.parked))
		for _, e := range a.parked {
			b = appendUint(b, e.ts)
			b = appendInt(b, e.id)
			b = appendBool(b, e.failed)
		}
	}
	return a.maekawa.appendState(b)
}

func (a *agrawalElAbbadi) describe() []StateField {
	fs := a.maekawa.describe()
	if a.recovery {
		var down []int
		for j, s := range a.suspected {
			if s {
				down = append(down, j)
			}
		}
		fs = append(fs, StateField{"suspects", describePeers(down)})
		var parked []string
		for _, e := range a.parked {
			parked = append(parked, fmt.Sprintf("(%d,P%d)", e.ts, e.id))
		}
		fs = append(fs, StateField{"set aside", "[" + strings.Join(parked, " ") + "]"})
	}
	return fs
}
