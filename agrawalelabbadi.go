package dmutex

import "slices"

// NewAgrawalElAbbadi starts n peers running the tree quorum algorithm:
// Maekawa's voting over quorums that are root-to-leaf paths of a binary
// tree of the peers.
//
// Cost: 3(K-1) messages per entry one at a time, where K is the length of
// the peer's path, ⌊log₂ n⌋+1 or one less (2 at n = 3, 3 at n = 7, 4 at
// n = 15); more under contention, as Maekawa's. Channels: per-pair FIFO
// (NeedsFIFO), as Maekawa's. Crashes: without WithRecovery a crashed peer
// on a requester's path blocks it; with WithRecovery a requester builds
// its quorum around the peers it suspects, and stays safe whoever is
// suspected.
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
// With WithRecovery, a requester builds its quorum from the peers it does
// not suspect: a suspected peer on its path is replaced by a quorum of
// each of its subtrees, which costs more messages the higher the peer is
// (a suspected root at n = 7 turns a path of 3 into two of 2). If a
// member of its quorum becomes suspected while it waits, it asks the
// substitutes too, and enters as soon as the votes it holds contain a
// tree quorum, whoever it suspects now; a try is refused instead. Since
// entry needs a tree quorum's votes and a voter gives one vote at a time,
// a false suspicion cannot let two peers in: it only costs messages. A
// voter never takes back a vote from a peer it suspects, which would not
// be safe under false suspicions: a peer that crashes holding votes (inside
// or waiting) keeps them, and a quorum that needs one of those voters
// waits, as in the paper, until the crashed peer recovers.
//
// Departures from the paper: the tree is fixed in heap order; the path of
// each peer is fixed (the paper lets a requester pick any path, for
// example at random, to spread the load); and a requester that suspects
// a member while it waits keeps the requests it made and adds the
// substitutes, where the paper's requester starts its quorum again.
func NewAgrawalElAbbadi(n int, opts ...Option) (*Cluster, error) {
	return New(AgrawalElAbbadi, n, opts...)
}

// agrawalElAbbadi is the tree quorum machine: a Maekawa machine whose set
// is the peer's tree quorum, and, under WithRecovery, grows around the
// peers it suspects.
type agrawalElAbbadi struct {
	maekawa
	n         int
	recovery  bool
	suspected []bool // WithRecovery: suspected[j] while the detector suspects j
}

func newAgrawalElAbbadi(id, n int, cfg *config) (machine, error) {
	set := treePath(id, n)
	return &agrawalElAbbadi{
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
	switch ev.kind {
	case evRequest, evTry:
		if a.recovery {
			a.setQuorum(a.quorum())
		}
	case evSuspect, evTrust:
		if !a.recovery {
			return
		}
		a.suspected[ev.msg.From] = ev.kind == evSuspect
		a.onSuspicion(ev.kind == evSuspect, ev.msg.From, out)
		for i := 0; i < len(a.local); i++ { // a refused try's own RELEASE
			a.receive(a.local[i], out)
		}
		a.local = a.local[:0]
		return
	}
	a.maekawa.step(ev, out)
	a.enterOnQuorum(out)
}

// quorum returns the quorum to ask now: a tree quorum around the peers we
// suspect, or our path if the others hold none.
func (a *agrawalElAbbadi) quorum() []int {
	q, ok := treeQuorum(nil, 0, a.id, a.n, a.suspected)
	if !ok {
		return treePath(a.id, a.n)
	}
	slices.Sort(q)
	return q
}

// setQuorum makes q, in increasing order, the set of the next request.
func (a *agrawalElAbbadi) setQuorum(q []int) {
	a.set = q
	a.votes = make([]mkVote, len(q))
	a.inquiry = make([]bool, len(q))
}

// onSuspicion adapts a request or try in progress to a changed suspicion
// of peer j: a try whose voter j has not answered counts it as busy; a
// request asks every member of the quorum around the peers suspected now
// that it has not asked yet.
func (a *agrawalElAbbadi) onSuspicion(suspected bool, j int, out *output) {
	switch a.state {
	case mkTrying:
		if k, ok := slices.BinarySearch(a.set, j); ok && suspected && a.votes[k] == voteNone {
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
	if a.state != mkWanting || !a.recovery {
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

func (a *agrawalElAbbadi) clone() machine {
	c := *a
	c.maekawa = *a.maekawa.clone().(*maekawa)
	c.suspected = slices.Clone(a.suspected)
	return &c
}

func (a *agrawalElAbbadi) appendState(b []byte) []byte {
	if a.recovery {
		b = appendInts(b, a.set)
		b = appendBools(b, a.suspected)
	}
	return a.maekawa.appendState(b)
}

func (a *agrawalElAbbadi) describe() []Field {
	fs := a.maekawa.describe()
	if a.recovery {
		var down []int
		for j, s := range a.suspected {
			if s {
				down = append(down, j)
			}
		}
		fs = append(fs, Field{"suspects", describePeers(down)})
	}
	return fs
}
