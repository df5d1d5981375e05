package dmutex

// A World's network: messages in flight, in per-pair FIFO queues or an unordered bag.

import (
	"cmp"
	"slices"
)

// An envelope is a message in flight with its serial number.
type envelope struct {
	seq uint64
	m   Message
}

// bagDup reports whether an equal message comes earlier in the bag: two
// copies of one message give the same successor, so only the first is
// offered.
func (w *World) bagDup(i int) bool {
	for j := range i {
		if sameMessage(w.bag[j].m, w.bag[i].m) && (w.store == nil || w.bag[j].m.Fence == w.bag[i].m.Fence) {
			return true
		}
	}
	return false
}

// sameMessage reports whether a and b are equal but for Fence.
func sameMessage(a, b Message) bool {
	if a.Kind != b.Kind || a.From != b.From || a.To != b.To || a.TS != b.TS || a.Ref != b.Ref || (a.Token == nil) != (b.Token == nil) {
		return false
	}
	return a.Token == nil || (slices.Equal(a.Token.LN, b.Token.LN) && slices.Equal(a.Token.Queue, b.Token.Queue))
}

// take removes the message with serial seq from the network and returns
// it; it must be there.
func (w *World) take(from, to int, seq uint64) envelope {
	if w.queues == nil {
		for k, e := range w.bag {
			if e.seq == seq {
				return w.takeBag(k)
			}
		}
		panic("dmutex: world: message not in flight")
	}
	pair := from*w.n + to
	q := w.queues[pair]
	if q[0].seq == seq {
		return w.popPair(pair)
	}
	k := slices.IndexFunc(q, func(e envelope) bool { return e.seq == seq })
	e := q[k]
	w.queues[pair] = slices.Concat(q[:k], q[k+1:])
	w.qown[pair] = true
	return e
}

// takeBag removes and returns the bag's message at index k, moving the
// last one into its place.
func (w *World) takeBag(k int) envelope {
	if !w.bagOwn {
		w.bag = slices.Clone(w.bag)
		w.bagOwn = true
	}
	e := w.bag[k]
	last := len(w.bag) - 1
	w.bag[k] = w.bag[last]
	w.bag[last] = envelope{}
	w.bag = w.bag[:last]
	return e
}

// popPair removes and returns the oldest message of a non-empty pair.
func (w *World) popPair(pair int) envelope {
	q := w.queues[pair]
	e := q[0]
	if w.qown[pair] {
		q[0] = envelope{} // drop the token pointer
	}
	if len(q) == 1 {
		if w.qown[pair] {
			w.queues[pair] = q[:0]
		} else {
			w.queues[pair] = nil
		}
		i, last := w.pos[pair], len(w.active)-1
		moved := w.active[last]
		w.active[i] = moved
		w.pos[moved] = i
		w.active = w.active[:last]
		w.pos[pair] = -1
	} else {
		w.queues[pair] = q[1:]
	}
	return e
}

func (w *World) send(peer int, m Message) {
	if m.From != peer || m.To < 0 || m.To >= w.n || m.To == peer || !m.Kind.Valid() {
		w.fail("peer %d sent a malformed message: %s", peer, formatMessage(m, true))
		return
	}
	w.sent[m.Kind]++
	w.seq++
	e := envelope{seq: w.seq, m: m}
	if w.carriesToken(m) {
		w.inFlight++
	}
	if w.trace {
		w.record(TraceEvent{Kind: EventSend, Peer: peer, Seq: e.seq, Msg: traced(m)})
	}
	if w.f.armed && w.lostOnSend(m) {
		w.lose(e)
		return
	}
	if w.queues == nil {
		if !w.bagOwn {
			w.bag = slices.Clip(w.bag)
			w.bagOwn = true
		}
		w.bag = append(w.bag, e)
		return
	}
	pair := m.From*w.n + m.To
	if !w.qown[pair] {
		w.queues[pair] = slices.Clip(w.queues[pair])
		w.qown[pair] = true
	}
	w.queues[pair] = append(w.queues[pair], e)
	if w.pos[pair] < 0 {
		w.pos[pair] = len(w.active)
		w.active = append(w.active, pair)
	}
}

// carriesToken reports whether m carries the token of a token algorithm,
// as the machines of the world, which send and take it, tell.
func (w *World) carriesToken(m Message) bool {
	return w.tokens && w.ms[m.To].(tokenHolder).carriesToken(m)
}

// traced returns m with a private copy of its token, so that the record
// keeps the token as it was sent.
func traced(m Message) Message {
	m.Token = m.Token.clone()
	return m
}

// purge loses every message in flight on a link that cut reports down, in
// order of sending.
func (w *World) purge(cut func(from, to int) bool) {
	var lost []envelope
	if w.queues != nil {
		for i := 0; i < len(w.active); {
			pair := w.active[i]
			if !cut(pair/w.n, pair%w.n) {
				i++
				continue
			}
			lost = append(lost, w.queues[pair]...)
			if w.qown[pair] {
				clear(w.queues[pair])
				w.queues[pair] = w.queues[pair][:0]
			} else {
				w.queues[pair] = nil
			}
			last := len(w.active) - 1
			moved := w.active[last]
			w.active[i] = moved
			w.pos[moved] = i
			w.active = w.active[:last]
			w.pos[pair] = -1
		}
	} else {
		if !w.bagOwn {
			w.bag = slices.Clone(w.bag)
			w.bagOwn = true
		}
		kept := w.bag[:0]
		for _, e := range w.bag {
			if cut(e.m.From, e.m.To) {
				lost = append(lost, e)
			} else {
				kept = append(kept, e)
			}
		}
		clear(w.bag[len(kept):])
		w.bag = kept
	}
	slices.SortFunc(lost, func(a, b envelope) int { return cmp.Compare(a.seq, b.seq) })
	for _, e := range lost {
		w.lose(e)
	}
}
