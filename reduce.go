package dmutex

// Partial-order reduction for the depth-first search (CheckConfig's
// PartialOrder), after Godefroid's persistent sets ("Partial-Order
// Methods for the Verification of Concurrent Systems", LNCS 1032, 1996)
// and the stack proviso of Holzmann and Peled ("An Improvement in Formal
// Verification", FORTE 1994).
//
// Over FIFO queues without faults, every step of the world belongs to one
// peer: its request, try, write or leave, or the delivery of the message
// at the head of a queue into it. Steps of two different peers commute
// (each reads and writes its own machine and the heads of the queues into
// it, and only appends to the tails of the queues out of it), and neither
// disables the other. A peer can gain a step only when a message is
// queued to it on an empty queue: a message behind another changes
// nothing that is enabled. So for a set S of peers such that every queue
// into S from outside S is non-empty, no sequence of steps outside S can
// enable a step of S or touch what S's steps read: the steps of S enabled
// now are a persistent set, and exploring only them keeps every deadlock.
//
// The checker defers the other steps only while that cannot hide a
// violation: if a step of S lets a peer in or out (the facts mutual
// exclusion and the entry order are about), or reaches a state on the
// current path (where a deferred step could be put off for ever), the
// state is expanded in full. A broken promise inside a step (a second
// token, a malformed message) stops the search wherever it is found, and
// a deferred step is still taken later, from a state whose peer it belongs
// to is unchanged.

// persistent reorders trs, the transitions enabled in w, so that a
// persistent set comes first, and returns its length: the steps of the
// closed set of peers (see above) with the fewest steps enabled (among
// equals the one found first, trying the peers in order), or len(trs)
// when every closed set with a step is every peer.
func (w *World) persistent(trs []Transition) int {
	if w.queues == nil {
		return len(trs) // a bag: a message sent later may come first
	}
	var enabled [64]int // steps per peer
	for _, t := range trs {
		switch t.Kind {
		case TransRequest, TransTry, TransLeave, TransWrite, TransDeliver:
			enabled[t.Peer]++
		default:
			return len(trs) // a step of the whole network
		}
	}
	best, bestSteps := uint64(0), len(trs)
	for p := range w.n {
		set := w.closedSet(p)
		steps := 0
		for q := range w.n {
			if set&(1<<uint(q)) != 0 {
				steps += enabled[q]
			}
		}
		if steps < bestSteps { // never for the set of every peer: it has every step
			best, bestSteps = set, steps
		}
	}
	if best == 0 {
		return len(trs)
	}
	// A stable partition: the set's steps first, in their order.
	k := 0
	for i, t := range trs {
		if best&(1<<uint(t.Peer)) != 0 {
			trs[k], trs[i] = trs[i], trs[k]
			k++
		}
	}
	// The swaps above may have disordered the rest; the order of the
	// deferred steps does not matter, only that the set comes first.
	return k
}

// closedSet returns, as a bit set, the smallest set of peers that holds
// p and every peer with an empty queue into one of its members.
func (w *World) closedSet(p int) uint64 {
	set := uint64(1) << uint(p)
	var buf [64]int
	work := append(buf[:0], p)
	for len(work) > 0 {
		to := work[len(work)-1]
		work = work[:len(work)-1]
		for from := range w.n {
			if set&(1<<uint(from)) != 0 { // to itself among them
				continue
			}
			if len(w.queues[from*w.n+to]) == 0 {
				set |= 1 << uint(from)
				work = append(work, from)
			}
		}
	}
	return set
}
