package dmutex

import "fmt"

// NewRaymond starts n peers running Raymond's tree-based token algorithm
// over a static spanning tree, by default in heap order: the parent of
// peer i is (i-1)/2, and the root, peer 0, starts with the privilege (the
// token). WithTree sets another tree.
//
// Raymond, "A tree-based algorithm for distributed mutual exclusion", ACM
// Transactions on Computer Systems 7(1), 1989. Every peer keeps HOLDER,
// itself or the neighbour in the direction of the privilege, a FIFO queue
// of neighbours (and itself) that asked it, and an ASKED flag, so that it
// asks its HOLDER at most once for all of them. A REQUEST message goes one
// edge towards the privilege; a PRIVILEGE message moves the privilege one
// edge back towards the oldest request. Neither carries data.
//
// Cost: an entry by the holder of the idle privilege sends nothing; any
// other entry costs a request and a privilege on each edge of the path
// between the requester and the holder, 2d messages for distance d, at
// most twice the tree's diameter (at most 4⌊log2 n⌋ on the default tree) and
// O(log n) on average on a balanced tree. Under contention requests merge
// in the queues and the cost per entry falls. Channels may reorder
// messages.
//
// Fairness: each peer serves its queue in FIFO order and the tree has no
// cycles, so every request is served after finitely many entries by
// others; there is no starvation. Entries are not in request order.
// There is no bound on overtaking: while a request climbs the tree,
// another peer may enter as often as it requests (Check finds (n-1)·r
// entries by others between a request and its entry for r requests per
// peer: n = 2 with r = 4, n = 3 with r = 1 to 3, n = 4 with r = 1 and 2).
//
// Failures: the algorithm assumes reliable peers and channels. A crashed
// peer cuts the tree: the privilege is lost if the crashed peer held it
// or is sent it on the way, and requests from the subtrees it separates
// can no longer reach the privilege; those peers wait forever
// (LockContext returns at its deadline). A lost privilege message blocks
// every later request; a lost request blocks every request that was
// queued behind it at its sender, since ASKED stops the sender from asking
// again. A partition blocks the side without the privilege until it heals.
//
// TryLock: the holder of the idle privilege enters with no message, and a
// peer whose queue is not empty, that has asked already, or that another
// try passes through, refuses at once with no message, since that goes
// first. Otherwise a try goes
// one edge towards the privilege, and each node on the way forwards it,
// unless it can tell: a node with a request or another try of its own
// waiting answers busy, and the holder answers busy if it is inside and
// hands the privilege over if it is idle. The answer, busy or privilege,
// comes back one edge at a time along the same path, and the nodes on it
// hold their own requests back until it has passed. So a try costs 2d'
// messages, where d' is the distance to the node that answered: 2d if the
// privilege at distance d is handed over or its holder is inside.
func NewRaymond(n int, opts ...Option) (*Cluster, error) {
	return New(Raymond, n, opts...)
}

// WithTree gives Raymond's algorithm the spanning tree to use instead of
// the balanced heap order: parent[i] is the parent of peer i, and the one
// peer whose parent is -1 is the root, which starts with the privilege.
// The tree must span all n peers without a cycle. Every peer of a cluster
// must be given the same tree. A star (peer 0 the root, every other
// peer's parent 0) costs at most 4 messages per entry but loads its
// centre; a path makes the diameter n-1. It applies to Raymond only;
// parent is copied.
func WithTree(parent []int) Option {
	parent = append([]int(nil), parent...)
	return Option{
		name:  "WithTree",
		algs:  []Algorithm{Raymond},
		where: forAll,
		apply: func(c *config) error {
			if err := checkRaymondTree(parent, c.n); err != nil {
				return err
			}
			c.treeParent = parent
			return nil
		},
	}
}

// checkRaymondTree returns an error wrapping ErrInvalidConfig unless
// parent describes a tree over n peers: one root with parent -1, every
// other parent a peer id, and no cycle.
func checkRaymondTree(parent []int, n int) error {
	if len(parent) != n {
		return fmt.Errorf("%w: WithTree: %d parents for n = %d peers", ErrInvalidConfig, len(parent), n)
	}
	root := -1
	for i, p := range parent {
		switch {
		case p == -1 && root >= 0:
			return fmt.Errorf("%w: WithTree: two roots, peers %d and %d", ErrInvalidConfig, root, i)
		case p == -1:
			root = i
		case p < 0 || p >= n || p == i:
			return fmt.Errorf("%w: WithTree: parent of peer %d is %d, want -1 or another peer in [0, %d)", ErrInvalidConfig, i, p, n)
		}
	}
	if root < 0 {
		return fmt.Errorf("%w: WithTree: no root (a parent of -1)", ErrInvalidConfig)
	}
	// Every walk up from a peer must reach the root within n-1 steps.
	for i := range parent {
		j := i
		for steps := 0; parent[j] != -1; steps++ {
			if steps == n {
				return fmt.Errorf("%w: WithTree: peer %d is on a cycle, not under root %d", ErrInvalidConfig, i, root)
			}
			j = parent[j]
		}
	}
	return nil
}

// raymond is one node of Raymond's tree.
type raymond struct {
	id int

	holder int   // self, or the neighbour towards the privilege
	using  bool  // in the critical section
	asked  bool  // a request for the queue's head went to holder
	queue  []int // FIFO of neighbours, or self, waiting for the privilege

	// tryFrom is -1, or the node a try passing here came from (ourselves
	// for our own try): the try went to holder, and its answer goes back
	// to tryFrom. Meanwhile holder stays put and we ask nothing.
	tryFrom int
}

// raymondParent is the parent of peer i in the default tree, heap order.
func raymondParent(i int) int { return (i - 1) / 2 }

func newRaymond(id, n int, cfg *config) (machine, error) {
	r := &raymond{id: id, holder: id, tryFrom: -1}
	switch {
	case cfg.treeParent != nil:
		if p := cfg.treeParent[id]; p >= 0 {
			r.holder = p
		}
	case id != 0:
		r.holder = raymondParent(id)
	}
	return r, nil
}

func (r *raymond) step(ev event, out *output) {
	switch ev.kind {
	case evRequest:
		r.queue = append(r.queue, r.id)
	case evTry:
		switch {
		case r.holder == r.id:
			r.using = true // the privilege is here and idle
			out.enter()
		case len(r.queue) > 0 || r.asked || r.tryFrom >= 0:
			out.refuse() // a request, or another try passing here, goes first
		default:
			r.tryFrom = r.id
			out.send(Message{Kind: KindTry, From: r.id, To: r.holder})
		}
		return
	case evRelease:
		r.using = false
	case evMessage:
		m := ev.msg
		switch m.Kind {
		case KindRequest:
			r.queue = append(r.queue, m.From)
		case KindTry:
			r.onTry(m.From, out)
			return
		case KindBusy:
			if r.tryFrom < 0 {
				return
			}
			if r.tryFrom == r.id {
				out.refuse()
			} else {
				out.send(Message{Kind: KindBusy, From: r.id, To: r.tryFrom})
			}
			r.tryFrom = -1
		case KindPrivilege:
			if r.holder == r.id {
				panic(fmt.Sprintf("dmutex: raymond peer %d received a second privilege from peer %d", r.id, m.From))
			}
			r.holder = r.id
			switch {
			case r.tryFrom == r.id:
				r.tryFrom = -1
				r.using = true
				out.enter()
				return
			case r.tryFrom >= 0:
				// A try passing through: hand the privilege on towards it.
				r.holder = r.tryFrom
				r.tryFrom = -1
				out.send(Message{Kind: KindPrivilege, From: r.id, To: r.holder})
			}
		default:
			return
		}
	}
	r.assignPrivilege(out)
	r.makeRequest(out)
}

// onTry handles a try from neighbour y: forward it towards the privilege,
// or answer it if this node can tell.
func (r *raymond) onTry(y int, out *output) {
	switch {
	case r.tryFrom >= 0 || len(r.queue) > 0 || r.asked || (r.holder == r.id && r.using):
		out.send(Message{Kind: KindBusy, From: r.id, To: y})
	case r.holder == r.id:
		r.holder = y
		out.send(Message{Kind: KindPrivilege, From: r.id, To: y})
	default:
		r.tryFrom = y
		out.send(Message{Kind: KindTry, From: r.id, To: r.holder})
	}
}

// assignPrivilege hands the idle privilege to the queue's head: this
// peer enters, or the privilege moves one edge towards the head's request.
func (r *raymond) assignPrivilege(out *output) {
	if r.holder != r.id || r.using || len(r.queue) == 0 {
		return
	}
	r.holder = r.queue[0]
	// Shift rather than reslice, so the queue's array is reused and a
	// hot holder's entry allocates nothing. The queue holds at most the
	// peer and its neighbours.
	r.queue = r.queue[:copy(r.queue, r.queue[1:])]
	r.asked = false
	if r.holder == r.id {
		r.using = true
		out.enter()
		return
	}
	out.send(Message{Kind: KindPrivilege, From: r.id, To: r.holder})
}

// makeRequest asks the holder for the privilege, once, when someone here
// waits for it.
func (r *raymond) makeRequest(out *output) {
	if r.holder == r.id || len(r.queue) == 0 || r.asked || r.tryFrom >= 0 {
		return
	}
	out.send(Message{Kind: KindRequest, From: r.id, To: r.holder})
	r.asked = true
}

// idleViolation reports what this peer still keeps once the cluster is at
// rest, with every request and try answered and nothing in flight.
func (r *raymond) idleViolation() string {
	switch {
	case r.using || r.asked || len(r.queue) > 0:
		return fmt.Sprintf("keeps using %v, asked %v, queue %v", r.using, r.asked, r.queue)
	case r.tryFrom >= 0:
		return fmt.Sprintf("keeps a try from P%d", r.tryFrom)
	}
	return ""
}

func (r *raymond) hasToken() bool { return r.holder == r.id }

// carriesToken: Raymond's token is the PRIVILEGE message.
func (r *raymond) carriesToken(m Message) bool { return m.Kind == KindPrivilege }

func (r *raymond) clone() machine {
	c := *r
	c.queue = append([]int(nil), r.queue...)
	return &c
}

func (r *raymond) appendState(b []byte) []byte {
	b = appendInt(b, r.holder)
	b = appendBool(b, r.using)
	b = appendBool(b, r.asked)
	b = appendInt(b, r.tryFrom)
	return appendInts(b, r.queue)
}

func (r *raymond) describe() []StateField {
	holder := "self"
	if r.holder != r.id {
		holder = fmt.Sprintf("P%d", r.holder)
	}
	fs := []StateField{
		{"HOLDER", holder},
		{"USING", fmt.Sprint(r.using)},
		{"ASKED", fmt.Sprint(r.asked)},
		{"REQUEST_Q", describePeers(r.queue)},
	}
	switch {
	case r.tryFrom == r.id:
		fs = append(fs, StateField{"try", "own, out"})
	case r.tryFrom >= 0:
		fs = append(fs, StateField{"try", fmt.Sprintf("from P%d, passed on", r.tryFrom)})
	}
	return fs
}
