package dmutex

// A World's canonical state encoding, which the checker hashes.

import (
	"bytes"
	"fmt"
	"slices"
)

// appendState appends w's canonical encoding to b: two worlds encode
// equally exactly when they behave the same from now on, whatever their
// messages' serial numbers. scratch is reused for the bag's sorting.
func (w *World) appendState(b []byte, scratch *[][]byte, sbuf *[]byte, stamps *stampMap) []byte {
	var noTries bool
	var sm *stampMap
	if w.clocks {
		noTries = w.triesOver()
		w.stamps(stamps, noTries)
		sm = stamps
	}
	for p, m := range w.ms {
		if w.clocks {
			*sbuf = m.(clockMachine).appendStateIn((*sbuf)[:0], noTries, sm)
		} else {
			*sbuf = m.appendState((*sbuf)[:0])
		}
		b = appendInt(b, len(*sbuf))
		b = append(b, *sbuf...)
		s := &w.peers[p]
		b = appendInt(b, s.budget)
		b = appendInt(b, s.tries)
		b = s.d.appendState(b)
		b = appendBool(b, w.isCrashed(p))
	}
	if w.queues != nil {
		for _, q := range w.queues {
			b = appendInt(b, len(q))
			for _, e := range q {
				b = appendMessage(b, sm.message(e.m))
				if w.store != nil {
					b = appendUint(b, e.m.Fence)
				}
			}
		}
	} else {
		// A multiset: the messages' encodings in sorted order.
		bufs := (*scratch)[:0]
		for i, e := range w.bag {
			var mb []byte
			if i < cap(bufs) {
				mb = bufs[:i+1][i][:0]
			}
			mb = appendMessage(mb, sm.message(e.m))
			if w.store != nil {
				mb = appendUint(mb, e.m.Fence)
			}
			bufs = append(bufs, mb)
		}
		slices.SortFunc(bufs, bytes.Compare)
		b = appendInt(b, len(bufs))
		for _, mb := range bufs {
			b = append(b, mb...)
		}
		*scratch = bufs
	}
	switch w.order {
	case orderTimestamp:
		if w.lastID >= 0 {
			b = appendUint(b, sm.of(w.lastTS))
		}
		b = appendInt(b, w.lastID)
	case orderCoordinator:
		b = appendInts(b, w.arrivals)
	}
	b = appendInt(b, w.f.lostTokens)
	b = appendBool(b, w.faulted())
	b = appendInt(b, w.f.crashLeft)
	b = appendInt(b, w.f.loseLeft)
	b = appendInt(b, w.f.partLeft)
	b = appendInt(b, w.f.healLeft)
	b = appendInts(b, w.f.deadInside)
	if w.f.detector != 0 {
		b = appendUint(b, w.f.suspects)
		b = appendInt(b, w.f.falseLeft)
	}
	if w.f.group != nil {
		b = appendInts(b, w.f.group)
	}
	if s := w.store; s != nil {
		b = appendInts(b, s.writes)
		b = appendBools(b, s.closed)
		b = appendUint(b, s.hi)
		b = appendInt(b, s.last)
	}
	return b
}

// A stampMap renames the stamps of a world's encoding in order: the
// least becomes 0 and each gap to the next is kept, up to a cap (see
// World.stampGap). Without a cap that is the shift clockMachine allows.
type stampMap struct {
	vals []uint64 // the stamps encoded, sorted and distinct
	to   []uint64 // to[i] is what vals[i] is written as
}

// of returns what stamp v is written as; a nil map leaves it as it is.
func (sm *stampMap) of(v uint64) uint64 {
	if sm == nil {
		return v
	}
	i, ok := slices.BinarySearch(sm.vals, v)
	if !ok {
		panic(fmt.Sprintf("dmutex: internal error: stamp %d is not among the world's %v", v, sm.vals))
	}
	return sm.to[i]
}

// message returns m with its stamps renamed: TS, and Ref if it is not
// zero, as one more than its name, so that a Ref never reads as "none"
// (the least stamp is named 0).
func (sm *stampMap) message(m Message) Message {
	m.TS = sm.of(m.TS)
	if m.Ref != 0 {
		m.Ref = sm.of(m.Ref) + 1
	}
	return m
}

// stamps fills sm from every stamp the world encodes, with clocks set:
// every clockMachine's, the TS and non-zero Ref of every message in
// flight, and the latest entry's stamp once there is one.
func (w *World) stamps(sm *stampMap, noTries bool) {
	vals := sm.vals[:0]
	for _, m := range w.ms {
		vals = m.(clockMachine).appendStamps(vals, noTries)
	}
	msg := func(m Message) {
		vals = append(vals, m.TS)
		if m.Ref != 0 {
			vals = append(vals, m.Ref)
		}
	}
	for _, q := range w.queues {
		for _, e := range q {
			msg(e.m)
		}
	}
	for _, e := range w.bag {
		msg(e.m)
	}
	if w.order == orderTimestamp && w.lastID >= 0 {
		vals = append(vals, w.lastTS)
	}
	slices.Sort(vals)
	vals = slices.Compact(vals)
	gap := w.stampGap()
	to := sm.to[:0]
	for i, v := range vals {
		if i == 0 {
			to = append(to, 0)
			continue
		}
		to = append(to, to[i-1]+min(v-vals[i-1], gap))
	}
	sm.vals, sm.to = vals, to
}

// stampGap is the widest gap between two stamps next to each other in
// order that the encoding keeps, with the checker's StampGaps; wider ones
// are written as that gap. Every stamp a clockMachine will make is a stamp
// it holds now (or one in flight to it) plus one per step on a causal
// chain of steps, and no chain is longer than the steps left in the whole
// run, E. Two stamps further apart than E therefore compare the same way
// as anything made from them ever will, and keeping such a gap at E+1
// keeps every comparison, max and +1 the machines will do: the states
// that differ only in how wide those gaps are behave the same. E is
// bounded by entryEvents for every entry not yet over (budgets and tries
// left, and requests out or inside) plus the messages in flight. With a
// budget without end, or without StampGaps, there is no cap.
func (w *World) stampGap() uint64 {
	if !w.cfg.stampGaps {
		return ^uint64(0)
	}
	entries := 0
	for p := range w.peers {
		s := &w.peers[p]
		if s.budget < 0 || s.tries < 0 {
			return ^uint64(0)
		}
		entries += s.budget + s.tries
		if s.d.requested || s.d.inside {
			entries++
		}
	}
	inFlight := len(w.bag)
	for _, q := range w.queues {
		inFlight += len(q)
	}
	return uint64(entries*w.ms[0].(clockMachine).entryEvents(w.n)+inFlight) + 1
}

// triesOver reports whether no try will be made or delivered again: no
// peer may still try, and no message of a try is in flight, as the
// machines tell (clockMachine.carriesTry). The encoding of the budgets and
// of the messages in flight implies it.
func (w *World) triesOver() bool {
	for p := range w.peers {
		if w.peers[p].tries != 0 && !w.isCrashed(p) {
			return false
		}
	}
	try := func(m Message) bool { return w.ms[m.To].(clockMachine).carriesTry(m) }
	for _, q := range w.queues {
		for _, e := range q {
			if try(e.m) {
				return false
			}
		}
	}
	for _, e := range w.bag {
		if try(e.m) {
			return false
		}
	}
	return true
}

// appendMessage appends a canonical, self-delimiting encoding of m; Fence
// is left out, since only the runtime sets it.
func appendMessage(b []byte, m Message) []byte {
	b = append(b, byte(m.Kind))
	b = appendInt(b, m.From)
	b = appendInt(b, m.To)
	b = appendUint(b, m.TS)
	b = appendUint(b, m.Ref)
	b = appendBool(b, m.Token != nil)
	if m.Token != nil {
		b = appendUints(b, m.Token.LN)
		b = appendInts(b, m.Token.Queue)
	}
	return b
}
