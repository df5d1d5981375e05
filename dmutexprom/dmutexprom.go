// Package dmutexprom exports what dmutex peers do as Prometheus metrics.
//
// A [Metrics] is a [dmutex.Observer] and a [prometheus.Collector]: give it
// to the peers with [dmutex.WithObserver] and register it with a
// registry.
//
//	m := dmutexprom.New()
//	prometheus.MustRegister(m)
//	c, err := dmutex.NewRicartAgrawala(5, dmutex.WithObserver(m))
//
// It lives in a module of its own, so that the dmutex module does not
// depend on the Prometheus client.
//
// # Metrics
//
//	dmutex_wait_seconds{peer}                  histogram: Lock and LockContext calls that entered, by time waited
//	dmutex_hold_seconds{peer}                  histogram: holds, by time from entry to Unlock
//	dmutex_lock_failures_total{peer,reason}    counter: calls that gave up; reason is timeout, canceled,
//	                                           refused (TryLock), unreachable, closed or other
//	dmutex_messages_total{peer,direction,kind} counter: messages sent (accepted by the transport) and received
//	dmutex_send_errors_total{peer,kind}        counter: messages the transport refused
//
// The peer label is the peer's id. A peer's wait and hold histograms
// appear, at zero, with the first event of that peer; the counters appear
// when they first count.
package dmutexprom

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dmutex/dmutex"
)

// Reasons for dmutex_lock_failures_total.
const (
	ReasonTimeout     = "timeout"     // the context's deadline passed (context.DeadlineExceeded)
	ReasonCanceled    = "canceled"    // the context was cancelled (context.Canceled)
	ReasonRefused     = "refused"     // a TryLock found the lock held or promised (dmutex.ErrLocked)
	ReasonUnreachable = "unreachable" // a peer the request needs is unreachable (dmutex.ErrPeerUnreachable)
	ReasonClosed      = "closed"      // the peer was closed (dmutex.ErrClosed)
	ReasonOther       = "other"       // any other error
)

// Reason returns the reason label under which Metrics counts a call that
// gave up with err.
func Reason(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, context.Canceled):
		return ReasonCanceled
	case errors.Is(err, dmutex.ErrLocked):
		return ReasonRefused
	case errors.Is(err, dmutex.ErrPeerUnreachable):
		return ReasonUnreachable
	case errors.Is(err, dmutex.ErrClosed):
		return ReasonClosed
	}
	return ReasonOther
}

// kindSlots bounds the message kinds whose counters are cached per peer;
// dmutex has fewer, and a larger kind is counted through the vector.
const kindSlots = 32

// A Metrics turns observed peer events into Prometheus metrics. Its
// methods are safe for concurrent use; the zero Metrics is not usable
// (New makes one).
type Metrics struct {
	wait, hold *prometheus.HistogramVec
	failures   *prometheus.CounterVec
	messages   *prometheus.CounterVec
	sendErrs   *prometheus.CounterVec

	mu    sync.Mutex                    // serializes growing peers
	peers atomic.Pointer[[]*peerSeries] // by peer id; nil until first seen
}

// peerSeries caches one peer's series, so that the observer methods, which
// a peer calls for every message, look nothing up by label.
type peerSeries struct {
	wait, hold prometheus.Observer
	sent       [kindSlots]lazyCounter
	received   [kindSlots]lazyCounter
	sendErrs   [kindSlots]lazyCounter
}

// lazyCounter is a counter child made on first use.
type lazyCounter struct {
	c    atomic.Pointer[prometheus.Counter]
	once sync.Once
}

// direction says which of a peer's message counters to count in.
type direction int

const (
	sent direction = iota
	received
	refused
)

// DefaultBuckets are the bounds, in seconds, of the wait and hold
// histograms: from 1µs (a token holder's re-entry) to 10s.
var DefaultBuckets = prometheus.ExponentialBucketsRange(1e-6, 10, 15)

// New returns a Metrics with the metric names listed in the package
// documentation and DefaultBuckets.
func New() *Metrics {
	return &Metrics{
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dmutex_wait_seconds",
			Help:    "Time from a Lock or LockContext call to its entry into the critical section.",
			Buckets: DefaultBuckets,
		}, []string{"peer"}),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dmutex_hold_seconds",
			Help:    "Time from an entry into the critical section to its Unlock.",
			Buckets: DefaultBuckets,
		}, []string{"peer"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dmutex_lock_failures_total",
			Help: "Lock and TryLock calls that gave up without entering, by reason.",
		}, []string{"peer", "reason"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dmutex_messages_total",
			Help: "Protocol messages sent (accepted by the transport) and received, by kind.",
		}, []string{"peer", "direction", "kind"}),
		sendErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dmutex_send_errors_total",
			Help: "Protocol messages the transport refused, by kind.",
		}, []string{"peer", "kind"}),
	}
}

var _ dmutex.Observer = (*Metrics)(nil)
var _ prometheus.Collector = (*Metrics)(nil)

// Describe sends the descriptors of every metric to ch.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.wait.Describe(ch)
	m.hold.Describe(ch)
	m.failures.Describe(ch)
	m.messages.Describe(ch)
	m.sendErrs.Describe(ch)
}

// Collect sends the current value of every series to ch.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.wait.Collect(ch)
	m.hold.Collect(ch)
	m.failures.Collect(ch)
	m.messages.Collect(ch)
	m.sendErrs.Collect(ch)
}

// series returns peer's cached series, making them on first use.
func (m *Metrics) series(peer int) *peerSeries {
	if ps := m.peers.Load(); ps != nil && peer < len(*ps) && (*ps)[peer] != nil {
		return (*ps)[peer]
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var old []*peerSeries
	if ps := m.peers.Load(); ps != nil {
		old = *ps
	}
	if peer < len(old) && old[peer] != nil {
		return old[peer]
	}
	grown := make([]*peerSeries, max(len(old), peer+1))
	copy(grown, old)
	id := strconv.Itoa(peer)
	grown[peer] = &peerSeries{wait: m.wait.WithLabelValues(id), hold: m.hold.WithLabelValues(id)}
	m.peers.Store(&grown)
	return grown[peer]
}

// Acquired observes a wait that ended in the critical section.
func (m *Metrics) Acquired(peer int, wait time.Duration) {
	m.series(peer).wait.Observe(wait.Seconds())
}

// Released observes a hold.
func (m *Metrics) Released(peer int, hold time.Duration) {
	m.series(peer).hold.Observe(hold.Seconds())
}

// Failed counts a call that gave up, under Reason(err).
func (m *Metrics) Failed(peer int, _ time.Duration, err error) {
	m.failures.WithLabelValues(strconv.Itoa(peer), Reason(err)).Inc()
}

// Sent counts a message sent, or refused by the transport if err is not
// nil.
func (m *Metrics) Sent(peer, _ int, kind dmutex.MessageKind, err error) {
	if err != nil {
		m.count(peer, kind, refused)
		return
	}
	m.count(peer, kind, sent)
}

// Received counts a message received.
func (m *Metrics) Received(peer, _ int, kind dmutex.MessageKind) {
	m.count(peer, kind, received)
}

// count increments peer's counter of kind in direction d. Once the
// counter exists, that is two atomic loads and an add.
func (m *Metrics) count(peer int, kind dmutex.MessageKind, d direction) {
	if int(kind) >= kindSlots {
		m.child(peer, kind, d).Inc()
		return
	}
	ps := m.series(peer)
	var l *lazyCounter
	switch d {
	case sent:
		l = &ps.sent[kind]
	case received:
		l = &ps.received[kind]
	default:
		l = &ps.sendErrs[kind]
	}
	if c := l.c.Load(); c != nil {
		(*c).Inc()
		return
	}
	l.once.Do(func() { c := m.child(peer, kind, d); l.c.Store(&c) })
	(*l.c.Load()).Inc()
}

// child returns the vector's counter for peer, kind and d.
func (m *Metrics) child(peer int, kind dmutex.MessageKind, d direction) prometheus.Counter {
	id := strconv.Itoa(peer)
	switch d {
	case sent:
		return m.messages.WithLabelValues(id, "sent", kind.String())
	case received:
		return m.messages.WithLabelValues(id, "received", kind.String())
	}
	return m.sendErrs.WithLabelValues(id, kind.String())
}
