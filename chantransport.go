package dmutex

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// A Transport carries one peer's messages. Send never blocks on the
// receiving peer's loop: a transport that could block there would let two
// peers sending to each other deadlock. Recv returns the channel of
// messages for this peer; it is closed after Close. Close releases the
// transport's resources and stops its goroutines; a second call returns
// nil.
//
// A transport may lose, delay or reorder messages; the algorithms that need
// per-pair FIFO order say so, and the runtime counts only messages whose
// Send returned nil. A transport must never duplicate a message, nor
// deliver one that no peer sent: the machines do not detect duplicates.
// Ricart-Agrawala survives a duplicate, but a duplicated token makes a
// token algorithm panic on its second token (in the receive goroutine,
// rather than let two peers in), and a duplicated grant lets two
// centralized peers in at once. Messages that no peer could have sent
// (a foreign receiver, an unknown sender, a fence out of bounds; see
// FenceWindow) are refused and counted in Stats.Refused.
type Transport interface {
	Send(to int, m Message) error
	Recv() <-chan Message
	Close() error
}

// A Deliverer is a Transport that can hand each message to the peer
// itself, from the goroutine that received it, instead of through Recv:
// the peer then steps its machine in that goroutine, which saves a
// goroutine hand-off per message. NewPeer calls SetDeliver once, before
// it uses Recv, with self the very Transport it was given; SetDeliver
// reports false, and changes nothing, if self is not the Deliverer itself
// (see below) or if the transport cannot switch (for instance because it
// has already sent a message on Recv), and the peer reads Recv as usual.
//
// Embedding: a wrapper such as struct{ *grpctransport.Transport; ... }
// that declares its own Recv (to inspect, filter or authorize incoming
// messages) has the embedded SetDeliver promoted into its method set, so
// it is a Deliverer too. Were the promoted method to switch, the messages
// would bypass the wrapper's Recv. The self argument prevents that: the
// promoted method runs on the embedded transport, which sees a self that
// is not itself (it is the wrapper) and refuses, so a peer over the
// wrapper reads the wrapper's Recv. Every Deliverer must make that check
// (a type assertion to its own type and a pointer comparison, not an
// interface ==, which panics for an uncomparable wrapper). A wrapper that
// wants push delivery chooses it by declaring SetDeliver itself, and
// passes on its embedded transport as self, with a function of its own
// around f if it inspects messages.
//
// After SetDeliver(self, f) returns true, the transport calls f for every
// message it would have sent on Recv, in the same order per sender, and
// sends nothing on Recv, which it still closes at Close. f may be called
// from several goroutines at once (the peer serialises them) and until
// Close returns; f returns quickly, but it may call the transport's Send.
// The gRPC transport is one.
type Deliverer interface {
	Transport
	SetDeliver(self Transport, f func(Message)) bool
}

// mailboxSize is the buffer of each endpoint's receive channel. Messages
// beyond it wait in a backlog, so Send never blocks; the buffer only saves
// the backlog's goroutine hop in the common case. Kept small, since every
// idle peer pays for it.
const mailboxSize = 16

// A ChanNetwork connects n in-memory endpoints, one per peer, with
// unbounded mailboxes that keep per-pair FIFO order. Faults (delay,
// reordering, loss, crashes, partitions; see faults.go) can be injected
// at any time. Its methods are safe for concurrent use.
type ChanNetwork struct {
	eps []*ChanEndpoint

	floorMu sync.Mutex
	floors  map[int]uint64 // the fence floors of the peers NewPeer started here, by id; see claimFloor

	faulty     atomic.Bool // set once faults exists; see faults.go
	faultsOnce sync.Once
	faults     *faultState
}

// NewChanNetwork returns a network of n endpoints, ids 0 to n-1. As
// make does for a negative length, it panics if n < 0: a negative size
// is a bug in the caller, not a condition to handle.
func NewChanNetwork(n int) *ChanNetwork {
	if n < 0 {
		panic(fmt.Sprintf("dmutex: NewChanNetwork(%d): negative number of endpoints", n))
	}
	nw := &ChanNetwork{eps: make([]*ChanEndpoint, n)}
	for i := range nw.eps {
		nw.eps[i] = &ChanEndpoint{
			net:   nw,
			id:    i,
			ch:    make(chan Message, mailboxSize),
			done:  make(chan struct{}),
			reach: make(chan struct{}, 1),
		}
	}
	return nw
}

// Endpoint returns peer id's endpoint. It panics if id is out of range.
func (nw *ChanNetwork) Endpoint(id int) *ChanEndpoint {
	if id < 0 || id >= len(nw.eps) {
		panic(fmt.Sprintf("dmutex: endpoint %d out of range [0, %d)", id, len(nw.eps)))
	}
	return nw.eps[id]
}

// claimFloor records that peer id runs with fence floor floor, unless
// another peer started on the network was given a floor too far from it.
// A peer started again with the same id takes its place.
func (e *ChanEndpoint) claimFloor(id int, floor uint64) error {
	nw := e.net
	nw.floorMu.Lock()
	defer nw.floorMu.Unlock()
	for j, f := range nw.floors {
		if j != id {
			if err := FloorsApart(j, f, id, floor); err != nil {
				return err
			}
		}
	}
	if nw.floors == nil {
		nw.floors = make(map[int]uint64)
	}
	nw.floors[id] = floor
	return nil
}

// A ChanEndpoint is one peer's Transport on a ChanNetwork.
type ChanEndpoint struct {
	net    *ChanNetwork
	id     int
	ch     chan Message
	closed atomic.Bool

	mu        sync.Mutex
	backlog   []Message // messages waiting for room in ch, oldest first
	pumping   bool      // a pump goroutine is draining the backlog
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once // every Close waits for the one that does the work

	reach chan struct{} // ReachChanged; see chanreach.go
}

var _ Transport = (*ChanEndpoint)(nil)

// Send puts m in peer to's mailbox and returns at once. A message to a
// closed endpoint is dropped, as a network drops what a dead host would
// have received; Send from a closed endpoint returns ErrClosed.
func (e *ChanEndpoint) Send(to int, m Message) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if to < 0 || to >= len(e.net.eps) {
		return fmt.Errorf("dmutex: send to peer %d out of range [0, %d)", to, len(e.net.eps))
	}
	if e.net.faulty.Load() {
		e.net.faults.send(e.net, e.id, to, m)
		return nil
	}
	e.net.eps[to].put(m)
	return nil
}

// Recv returns the channel of messages sent to this endpoint.
func (e *ChanEndpoint) Recv() <-chan Message { return e.ch }

// Close stops the endpoint: later messages to it are dropped, and Recv's
// channel is closed. Close returns after its goroutines have exited and
// Recv's channel is closed; a second call, concurrent or later, returns
// nil no earlier than the first.
func (e *ChanEndpoint) Close() error {
	e.closeOnce.Do(e.shutdown)
	return nil
}

func (e *ChanEndpoint) shutdown() {
	e.mu.Lock()
	e.closed.Store(true)
	close(e.done)
	e.mu.Unlock()
	e.wg.Wait()
	e.mu.Lock()
	e.backlog = nil
	e.mu.Unlock()
	close(e.ch)
}

func (e *ChanEndpoint) put(m Message) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return
	}
	if len(e.backlog) == 0 {
		select {
		case e.ch <- m:
			return
		default:
		}
	}
	e.backlog = append(e.backlog, m)
	if !e.pumping {
		e.pumping = true
		e.wg.Add(1)
		go e.pump()
	}
}

// pump moves the backlog into ch in order, then exits.
func (e *ChanEndpoint) pump() {
	defer e.wg.Done()
	e.mu.Lock()
	for len(e.backlog) > 0 && !e.closed.Load() {
		m := e.backlog[0]
		e.mu.Unlock()
		select {
		case e.ch <- m:
		case <-e.done:
			e.mu.Lock()
			e.pumping = false
			e.mu.Unlock()
			return
		}
		e.mu.Lock()
		e.backlog[0] = Message{}
		e.backlog = e.backlog[1:]
	}
	e.backlog = nil
	e.pumping = false
	e.mu.Unlock()
}
