package dmutex

import "fmt"

// NewRaymond starts n peers running Raymond's tree-based token algorithm
// over a static spanning tree in heap order: the parent of peer i is
// (i-1)/2, and the root, peer 0, starts with the privilege (the token).
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
// most twice the tree's diameter (about 4 log2 n) and O(log n) on average
// on this balanced tree. Under contention requests merge in the queues
// and the cost per entry falls. Channels may reorder messages.
//
// Fairness: each peer serves its queue in FIFO order and the tree has no
// cycles, so every request is served after finitely many entries by
// others; there is no starvation. Entries are not in request order.
//
// Failures: the algorithm assumes reliable peers and channels. A crashed
// peer cuts the tree: the privilege is lost if the crashed peer held it
// or is sent it on the way, and requests from the subtrees it separates
// can no longer reach the privilege; those peers wait forever
// (LockContext returns at its deadline). A lost privilege message blocks
// every later request; a lost request blocks every request that was
// queued behind it at its sender, since ASKED stops the sender from asking
// again. A partition blocks the side without the privilege until it heals.
func NewRaymond(n int, opts ...Option) (*Cluster, error) {
	return New(Raymond, n, opts...)
}

// raymond is one node of Raymond's tree.
type raymond struct {
	id int

	holder int   // self, or the neighbour towards the privilege
	using  bool  // in the critical section
	asked  bool  // a request for the queue's head went to holder
	queue  []int // FIFO of neighbours, or self, waiting for the privilege
}

// raymondParent is the parent of peer i in the default tree, heap order.
func raymondParent(i int) int { return (i - 1) / 2 }

func newRaymond(id, n int, _ *config) (machine, error) {
	r := &raymond{id: id, holder: id}
	if id != 0 {
		r.holder = raymondParent(id)
	}
	return r, nil
}

func (r *raymond) step(ev event, out *output) {
	switch ev.kind {
	case evRequest:
		r.queue = append(r.queue, r.id)
	case evRelease:
		r.using = false
	case evMessage:
		m := ev.msg
		switch m.Kind {
		case KindRequest:
			r.queue = append(r.queue, m.From)
		case KindPrivilege:
			if r.holder == r.id {
				panic(fmt.Sprintf("dmutex: raymond peer %d received a second privilege from peer %d", r.id, m.From))
			}
			r.holder = r.id
		default:
			return
		}
	}
	r.assignPrivilege(out)
	r.makeRequest(out)
}

// assignPrivilege hands the idle privilege to the queue's head: this
// peer enters, or the privilege moves one edge towards the head's request.
func (r *raymond) assignPrivilege(out *output) {
	if r.holder != r.id || r.using || len(r.queue) == 0 {
		return
	}
	r.holder = r.queue[0]
	r.queue = r.queue[1:]
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
	if r.holder == r.id || len(r.queue) == 0 || r.asked {
		return
	}
	out.send(Message{Kind: KindRequest, From: r.id, To: r.holder})
	r.asked = true
}

func (r *raymond) hasToken() bool { return r.holder == r.id }

func (r *raymond) clone() machine {
	c := *r
	c.queue = append([]int(nil), r.queue...)
	return &c
}

func (r *raymond) appendState(b []byte) []byte {
	b = appendInt(b, r.holder)
	b = appendBool(b, r.using)
	b = appendBool(b, r.asked)
	return appendInts(b, r.queue)
}
