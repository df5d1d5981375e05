package dmutex

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"time"
)

// A Peer runs one algorithm machine for one peer id: it turns Lock and
// Unlock calls and the messages its Transport receives into events for the
// machine, and hands the machine's messages to the Transport.
//
// A Peer is safe for concurrent use. Its machine is stepped under the
// peer's mutex, by the goroutine that calls Lock or Unlock when no message
// has to be waited for, and by the peer's receive goroutine otherwise.
// Callers of Lock on one peer queue in FIFO order; each gets an entry of
// its own. After Close, LockContext returns ErrClosed and Lock panics with
// it.
type Peer struct {
	id  int
	n   int
	alg Algorithm
	tr  Transport

	mu        sync.Mutex
	m         machine
	d         driver    // the local rules: callers, entries, fences, suspicions; see driver.go
	out       output    // reused step output
	tryWaiter *waiter   // the caller of TryLockContext waiting for the try's answer, or nil; then waiters[0]
	yielded   bool      // receive has yielded once for the outstanding request
	waiters   []*waiter // callers blocked in Lock or TryLock, oldest first: d.waiting of them, but for a caller entering on its own goroutine
	closed    bool
	sent      [numKinds]uint64
	delivered uint64   // messages stepped; with sent, tells tests when the network is quiet
	refused   uint64   // messages dropped unstepped: malformed, or a fence beyond the bound
	farFence  error    // why the last message with a fence beyond the window was refused; nil if none was
	fast      fastPath // re-entry without the mutex or the machine; see fastpath.go
	reach     reach    // WithUnreachableAfter; see reach.go
	held      holdLost // whether the current hold may be lost; see holdlost.go
	recovery  bool     // WithRecovery: suspicions step the machine; set once

	obs       Observer  // WithObserver; nil means none, and no clock is read
	holdStart time.Time // when the current hold began, if obs is set

	closeOnce sync.Once // every Close waits for the one that does the work
	wg        sync.WaitGroup
}

// A waiter is one blocked Lock call. ch receives once: when the caller has
// been given the critical section, or, with err set to ErrClosed, when the
// peer was closed first. A waiter given up is no longer in the queue, so it
// can never be signalled.
type waiter struct {
	ch  chan struct{}
	err error // set before ch is signalled by Close
}

var waiterPool = sync.Pool{New: func() any { return &waiter{ch: make(chan struct{}, 1)} }}

// NewPeer starts one peer of a distributed cluster: peer id of n, running
// alg and talking through tr, which the peer owns from now on and closes
// in Close. Every peer of the cluster must be given the same algorithm, n
// and options. NewPeer is for peers in separate processes; New builds a
// whole cluster in one process.
func NewPeer(alg Algorithm, id, n int, tr Transport, opts ...Option) (*Peer, error) {
	cfg, err := newConfig(alg, n, forPeer, opts)
	if err != nil {
		return nil, err
	}
	if id < 0 || id >= n {
		return nil, fmt.Errorf("%w: peer id %d out of range [0, %d)", ErrInvalidConfig, id, n)
	}
	if isNil(tr) {
		return nil, fmt.Errorf("%w: nil Transport (%T)", ErrInvalidConfig, tr)
	}
	if _, ok := tr.(Reachability); cfg.unreachableAfter > 0 && !ok {
		return nil, fmt.Errorf("%w: WithUnreachableAfter: transport %T does not implement Reachability", ErrInvalidConfig, tr)
	}
	if f, ok := tr.(interface{ FenceFloor() uint64 }); ok && f.FenceFloor() != cfg.fenceFloor {
		return nil, fmt.Errorf("%w: the transport announces fence floor %d to the other peers, but the peer was given %d (WithFenceFloor): give both the same floor",
			ErrInvalidConfig, f.FenceFloor(), cfg.fenceFloor)
	}
	m, err := cfg.newMachine(alg, id, n)
	if err != nil {
		return nil, err
	}
	if c, ok := tr.(floorClaimer); ok {
		if err := c.claimFloor(id, cfg.fenceFloor); err != nil {
			return nil, err
		}
	}
	return startPeer(alg, id, n, m, tr, cfg), nil
}

// A floorClaimer is a transport that knows the floors (WithFenceFloor) of
// the other peers started on it, as a ChanEndpoint does: claimFloor
// records peer id's floor, or returns FloorsApart's error if it lies too
// far from another's.
type floorClaimer interface {
	claimFloor(id int, floor uint64) error
}

// isNil reports whether v is nil or an interface holding a nil pointer,
// map, channel, function or slice, such as a (*ChanEndpoint)(nil): the
// peer would crash on its first call to it.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.Slice, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

func startPeer(alg Algorithm, id, n int, m machine, tr Transport, cfg *config) *Peer {
	p := &Peer{id: id, n: n, alg: alg, tr: tr, m: m, d: newDriver(id, n, cfg, true), obs: cfg.observer, recovery: cfg.recovery}
	p.fast.setStride(1)
	if cfg.recovery {
		p.fast.setStride(uint64(n))
	}
	if r, ok := tr.(Reachability); ok && cfg.unreachableAfter > 0 {
		p.reach = reach{
			r:         r,
			after:     cfg.unreachableAfter,
			stop:      make(chan struct{}),
			suspected: make([]bool, n),
			down:      make([]bool, n),
			met:       make([]bool, n),
			unheard:   make([]bool, n),
			changed:   make(chan struct{}),
		}
		// The peers reachable now are met before NewPeer returns, so
		// that a crash right after it is suspected however late the
		// watcher first looks.
		for j := range n {
			if j != id {
				p.reach.met[j], _ = r.Reachable(j)
			}
		}
		p.wg.Add(1)
		go p.watch()
	}
	if d, ok := tr.(Deliverer); !ok || !d.SetDeliver(tr, p.push) {
		p.wg.Add(1)
		go p.receive(tr.Recv())
	}
	return p
}

// ID returns the peer's id.
func (p *Peer) ID() int { return p.id }

// Lock blocks until this peer is in the critical section. On a closed peer
// it panics with ErrClosed rather than block forever. It keeps waiting
// while peers are unreachable (see WithUnreachableAfter).
func (p *Peer) Lock() {
	if p.obs == nil && p.fast.tryLock() {
		return
	}
	var err error
	if p.obs != nil {
		err = p.observed(context.Background(), p.lockForever)
	} else {
		err = p.lockForever(context.Background())
	}
	if err != nil {
		panic(err)
	}
}

// LockContext blocks until this peer is in the critical section, ctx ends,
// or the peer is closed. See Locker.
func (p *Peer) LockContext(ctx context.Context) error {
	if p.obs != nil {
		return p.observed(ctx, p.lockContext)
	}
	return p.lockContext(ctx)
}

// lockContext is LockContext without the observer.
func (p *Peer) lockContext(ctx context.Context) error { return p.lockWait(ctx, false) }

// lockForever is Lock without the observer: unreachable peers do not end
// its wait.
func (p *Peer) lockForever(ctx context.Context) error { return p.lockWait(ctx, true) }

func (p *Peer) lockWait(ctx context.Context, forever bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.fast.tryLock() {
		return nil
	}
	w, sus, err := p.request(forever)
	if w == nil && p.lookAgain(err) {
		w, sus, err = p.request(forever)
	}
	if w == nil {
		return err // entered at once, closed, or a needed peer unreachable
	}
	return p.wait(ctx, w, sus)
}

// wait waits for waiter w to be given the critical section (or a try's
// answer), for ctx to end, or for a peer that the request needs to be
// suspected, when sus, from suspicionsLocked, is not nil.
func (p *Peer) wait(ctx context.Context, w *waiter, sus <-chan struct{}) error {
	if ctx.Done() == nil && sus == nil {
		// A context that never ends, as Lock's: a plain receive is the
		// cheapest wait, and Close signals the waiter itself.
		<-w.ch
		return w.done()
	}
	for {
		select {
		case <-w.ch:
			return w.done()
		case <-ctx.Done():
			return p.abandon(w, p.gaveUp(ctx.Err()))
		case <-sus:
			p.mu.Lock()
			err := p.unreachableLocked()
			sus = p.suspicionsLocked()
			p.mu.Unlock()
			if err != nil {
				return p.abandon(w, err)
			}
		}
	}
}

// gaveUp returns err, the context's error that ends a wait, with what this
// peer knows of why the cluster cannot answer: a message it refused for
// its fence (see FenceWindow), and the transport's own reason to give up,
// if it has an Err method (as grpctransport's) that returns one.
func (p *Peer) gaveUp(err error) error {
	p.mu.Lock()
	far := p.farFence
	p.mu.Unlock()
	if far != nil {
		err = fmt.Errorf("%w; %v", err, far)
	}
	if t, ok := p.tr.(interface{ Err() error }); ok {
		if e := t.Err(); e != nil {
			err = fmt.Errorf("%w; the transport gave up: %v", err, e)
		}
	}
	return err
}

// request is LockContext's part under the peer's mutex, held with defer so
// that a panic on the way (in the machine, or in a transport's Send) leaves
// the peer usable for Close and Stats. It enters at once and returns a nil
// waiter and nil error when the machine can; it returns ErrClosed on a
// closed peer; otherwise it queues and returns a waiter, with the
// channel of suspicions to watch unless forever is set. If a peer the
// request needs is suspected already, it returns that error instead of a
// waiter, leaving a request that it sent outstanding, as a cancelled
// request is.
func (p *Peer) request(forever bool) (*waiter, <-chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, ErrClosed
	}
	p.disarmLocked()
	idle := p.d.idle()
	if !forever {
		if err := p.unreachableLocked(); err != nil && (!idle || p.d.minority() || !p.entersAtOnceLocked(evRequest)) {
			return nil, nil, err
		}
	}
	p.d.request(p.host(), &p.out)
	if idle && p.d.inside {
		// A machine that can enter at once (an idle token holder, a lone
		// peer) has done so on this goroutine, for this caller.
		p.localEntryLocked()
		return nil, nil, nil
	}
	var sus <-chan struct{}
	if !forever {
		sus = p.suspicionsLocked()
	}
	w := waiterPool.Get().(*waiter)
	p.waiters = append(p.waiters, w)
	return w, sus, nil
}

// TryLock tries to enter the critical section without waiting for a
// holder to leave, and reports whether it did; see Locker. When this peer
// re-enters through its fast path (fastpath.go), or a caller of this peer
// is inside by it, TryLock decides with one atomic operation and no lock.
func (p *Peer) TryLock() bool {
	if p.obs == nil {
		if entered, decided := p.fast.try(); decided {
			return entered
		}
	}
	return p.TryLockContext(context.Background()) == nil
}

// TryLockContext tries to enter the critical section without waiting for
// a holder to leave. It returns nil once in, ErrLocked if the lock is held
// or promised to a request with priority, ctx.Err() if ctx ends before the
// answer, and ErrClosed on a closed peer. See Locker.
//
// While another caller of this peer is inside or waiting, the answer is
// ErrLocked at once, with no message. Otherwise the machine is asked: some
// answer at once (an idle token holder, the coordinator), the others ask
// their peers, who answer without waiting for anyone to leave. A try
// abandoned because ctx ended is withdrawn when its answer comes: if the
// answer is yes, the critical section goes to the next caller of Lock
// waiting on this peer, or is left at once.
func (p *Peer) TryLockContext(ctx context.Context) error {
	if p.obs != nil {
		return p.observed(ctx, p.tryLockContext)
	}
	return p.tryLockContext(ctx)
}

// tryLockContext is TryLockContext without the observer.
func (p *Peer) tryLockContext(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if entered, decided := p.fast.try(); decided {
		if entered {
			return nil
		}
		return ErrLocked
	}
	w, sus, err := p.try()
	if w == nil && p.lookAgain(err) {
		w, sus, err = p.try()
	}
	if w == nil {
		return err // entered or refused at once, closed, or a needed peer unreachable
	}
	return p.wait(ctx, w, sus)
}

// try is TryLockContext's part under the peer's mutex, as request is
// LockContext's. It returns a nil waiter with a nil error if the machine
// entered at once, with ErrLocked if it refused at once or a caller of this
// peer is inside or waiting, with ErrClosed on a closed peer, with an
// *UnreachableError if a peer the try needs is suspected; otherwise it
// returns the try's waiter, which is the only one queued, and the channel
// of suspicions.
func (p *Peer) try() (*waiter, <-chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, ErrClosed
	}
	p.disarmLocked()
	idle := p.d.idle()
	if err := p.unreachableLocked(); err != nil && (!idle || p.d.minority() || !p.entersAtOnceLocked(evTry)) {
		return nil, nil, err
	}
	if !p.d.try(p.host(), &p.out) {
		return nil, nil, ErrLocked
	}
	switch {
	case p.d.inside:
		p.localEntryLocked()
		return nil, nil, nil
	case !p.d.requested:
		return nil, nil, ErrLocked // refused at once
	}
	w := waiterPool.Get().(*waiter)
	p.waiters = append(p.waiters, w)
	p.tryWaiter = w
	return w, p.suspicionsLocked(), nil
}

// done returns w, which has been signalled, to the pool and returns nil if
// it was given the critical section, or ErrClosed, or ErrLocked for a
// refused try.
func (w *waiter) done() error {
	err := w.err
	w.err = nil
	waiterPool.Put(w)
	return err
}

// abandon withdraws waiter w, which gives up with err. If w was given the
// critical section in the meantime, the caller holds it and abandon
// returns nil, as DialContext returns a connection that completed, unless
// the peer has been closed since: then the hold is dropped, and so is the
// entry that the driver counted for it, so that Stats().Entries stays the
// number of calls that returned nil. A request the machine already sent
// stays outstanding; when it is granted with nobody waiting, the peer
// leaves at once (see driver).
func (p *Peer) abandon(w *waiter, err error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	try := w == p.tryWaiter
	if try {
		p.tryWaiter = nil // the try stays outstanding: see driver
	}
	for i, x := range p.waiters {
		if x == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			p.waiters[len(p.waiters) : len(p.waiters)+1][0] = nil
			p.d.cancel(try)
			waiterPool.Put(w)
			return err
		}
	}
	// Not queued any more: admitLocked chose w, or Close woke it, and
	// signalled it.
	<-w.ch
	if closedErr := w.done(); closedErr != nil {
		return closedErr // woken by Close, or a try refused: w holds nothing
	}
	if p.closed {
		p.d.inside = false
		p.d.holdFence = 0
		p.d.entries-- // counted by the driver for a caller that now fails
		return err
	}
	return nil
}

// Unlock leaves the critical section. It panics if the peer is not in it,
// as sync.Mutex does. Unlock on a closed peer that held the lock only
// clears the hold.
func (p *Peer) Unlock() {
	if p.obs != nil {
		p.observedUnlock()
		return
	}
	p.unlock()
}

// observedUnlock is Unlock for a peer with an observer.
func (p *Peer) observedUnlock() {
	hold := time.Since(p.holdStart) // read while this caller still holds it
	p.unlock()
	p.obs.Released(p.id, hold)
}

// unlock is Unlock without the observer.
func (p *Peer) unlock() {
	if p.fast.tryUnlock() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.disarmLocked()
	if !p.d.inside {
		panic("dmutex: unlock of unlocked mutex")
	}
	if p.closed {
		p.d.inside = false
		p.d.holdFence = 0
		return
	}
	p.releaseProbeLocked()
}

// Fence returns the fencing token of the current hold, or 0; see Locker.
// A call that gave up takes none, though the peer may enter for it and
// leave at once (see abandon). Fences never
// wrap: once a peer's fence has reached MaxFence, each later hold has no
// fencing token, and Fence returns 0, which a store that rejects numbers
// smaller than the largest it has seen rejects too.
func (p *Peer) Fence() uint64 {
	if f := p.fast.fence(); f != 0 {
		return f
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.d.holdFence
}

// Stats returns this peer's counts.
func (p *Peer) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Stats{Entries: p.d.entries + p.fastEntriesLocked(), Refused: p.refused}
	for k, v := range p.sent {
		if v != 0 {
			if s.ByKind == nil {
				s.ByKind = make(map[string]uint64)
			}
			s.ByKind[MessageKind(k).String()] = v
			s.Messages += v
		}
	}
	return s
}

// Close stops the peer: blocked and later LockContext calls return
// ErrClosed, the transport is closed, and Close returns after the peer's
// goroutine has exited. A second call, concurrent or later, returns nil
// once the first has done so; it never returns earlier.
func (p *Peer) Close() error {
	var err error
	first := false
	p.closeOnce.Do(func() {
		first = true
		p.shutdownLocked()
		err = p.tr.Close()
		p.wg.Wait()
	})
	if !first {
		return nil
	}
	return err
}

// shutdownLocked marks the peer closed and wakes every waiter with
// ErrClosed. Despite the name it takes the peer's mutex itself, with
// defer, as every path that takes it does.
func (p *Peer) shutdownLocked() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.disarmLocked()
	p.holdLocked() // a hold in progress may be lost now (HoldLost)
	for _, w := range p.waiters {
		w.err = ErrClosed
		w.ch <- struct{}{} // buffered; never blocks
	}
	clear(p.waiters)
	p.waiters = nil
	p.tryWaiter = nil
	if p.reach.stop != nil {
		close(p.reach.stop)
	}
}

// receive feeds the transport's messages to the machine until Close,
// which closes the transport and so, by the Transport contract, in. A
// plain range costs much less than a select with a second channel, and
// every message passes here.
//
// While the peer waits for more answers (a request is outstanding) and
// none is queued, it yields before it blocks, once per request: the peers
// about to answer are usually runnable on this very P, and if they run
// first their answers land in the buffer of a goroutine that is not
// parked, which then takes them all in one go instead of being woken for
// each one. Yielding after every message instead costs more than it saves
// when every peer contends (n=1024: 40% slower).
func (p *Peer) receive(in <-chan Message) {
	defer p.wg.Done()
	for m := range in {
		if p.deliver(m) && len(in) == 0 {
			runtime.Gosched()
		}
	}
}

// push is deliver for a Deliverer, which calls it from its own
// goroutines: there is no receive loop to yield.
func (p *Peer) push(m Message) { p.deliver(m) }

// deliver steps the machine for m and reports whether receive should
// yield: a request of this peer is still outstanding, and receive has not
// yielded for it yet.
func (p *Peer) deliver(m Message) (waiting bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if !m.Kind.Valid() || m.To != p.id || m.From < 0 || m.From >= p.n || m.From == p.id {
		// A transport must not deliver such a message, and no correct
		// peer sends one: refuse it, before it touches any state.
		p.refused++
		return false
	}
	if own := p.fenceLocked(); m.Fence > MaxFence || m.Fence > own+FenceWindow {
		// Forged, or sent by a peer given a floor far above this one's:
		// refuse it, and keep the reason for the callers that give up.
		p.refused++
		p.farFence = fmt.Errorf("peer %d refused a %v of peer %d whose fence %d is more than FenceWindow above its own %d "+
			"(were the two given fence floors more than MaxFloorSpread apart? see WithFenceFloor)", p.id, m.Kind, m.From, m.Fence, own)
		return false
	}
	p.delivered++
	if p.obs != nil {
		p.obs.Received(p.id, m.From, m.Kind)
	}
	p.interruptLocked() // a message ends any fast path and probe
	p.d.deliver(p.host(), &p.out, m)
	if p.d.requested && !p.yielded {
		p.yielded = true
		return true
	}
	return false
}

// MaxFence is the largest fencing token a peer hands out, and the largest
// Message.Fence a peer accepts. No cluster reaches it by entering (at a
// billion entries a second it takes over a century); only forged messages
// can bring it close, FenceWindow at a time. A transport may refuse a
// frame whose fence is larger.
const MaxFence = 1<<62 - 1

// FenceWindow is the most that one delivered message may raise a peer's
// fence by: a message whose Fence exceeds the receiver's own fence by more
// is refused unstepped and counted in Stats.Refused, so that no single
// forged message can use up the fencing tokens. A correct peer's message
// is above the receiver's fence only by the floors the two were given
// (WithFenceFloor), at most MaxFloorSpread apart, and by entries the
// receiver has not heard of, so it exceeds the window only when the
// receiver has missed 2^47 entries (a day and a half at a billion a
// second): in practice only an idle token holder re-entering alone for
// that long, whose token would then be refused. FenceWindow trades that
// for the bound on forgeries. A refused message is not silent: the
// refusing peer keeps the reason (both peers and both fences), and a
// LockContext of it that gives up returns it with the context's error.
const FenceWindow = 1 << 48

// fenceLocked returns the peer's fence, also while the fast path counts
// it.
func (p *Peer) fenceLocked() uint64 {
	if w := p.fast.word.Load(); w&fastArmed != 0 {
		return w >> fastShift
	}
	return p.d.fence
}

// host returns p as the host of its driver.
func (p *Peer) host() *peerHost { return (*peerHost)(p) }

// peerHost is a Peer in its part as its driver's host: it hands the
// machine's messages to the transport and wakes the callers the driver
// lets in or refuses. Its methods run under the peer's mutex.
type peerHost Peer

func (h *peerHost) machine() machine { return h.m }

func (h *peerHost) send(m Message) {
	err := h.tr.Send(m.To, m)
	if err == nil {
		h.sent[m.Kind]++
	}
	if h.obs != nil {
		h.obs.Sent(h.id, m.To, m.Kind, err)
	}
}

func (h *peerHost) asked(bool) { h.yielded = false }

func (h *peerHost) left() {}

func (h *peerHost) suspected(j int) bool { return h.reach.suspected != nil && h.reach.suspected[j] }

// entered hands the critical section, which the machine has just entered
// for the first waiting caller, to that caller's waiter. A caller that
// entered on its own goroutine has none: request and try see the entry.
func (h *peerHost) entered(forCaller bool) {
	if !forCaller || len(h.waiters) == 0 {
		return
	}
	// Shift the queue down rather than reslice it from the front, so that
	// append reuses its array and a steady stream of callers allocates
	// nothing; local queues are short.
	w := h.waiters[0]
	if w == h.tryWaiter {
		h.tryWaiter = nil
	}
	copy(h.waiters, h.waiters[1:])
	h.waiters[len(h.waiters)-1] = nil
	h.waiters = h.waiters[:len(h.waiters)-1]
	w.ch <- struct{}{} // buffered; never blocks
}

// tryRefused gives ErrLocked to the try's caller, if it still waits.
func (h *peerHost) tryRefused(callerWaits bool) {
	w := h.tryWaiter
	if !callerWaits || w == nil {
		return // given up, or refused on the caller's own goroutine
	}
	h.tryWaiter = nil
	copy(h.waiters, h.waiters[1:]) // w is waiters[0]
	h.waiters[len(h.waiters)-1] = nil
	h.waiters = h.waiters[:len(h.waiters)-1]
	w.err = ErrLocked
	w.ch <- struct{}{} // buffered; never blocks
}

func (h *peerHost) broken(what string, _ bool) {
	panic(fmt.Sprintf("dmutex: %v peer %d %s", h.alg, h.id, what))
}
