package dmutex

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var diffSchedules = flag.Int("dmutex.diff", 0,
	"random schedules per configuration in TestRuntimeMatchesWorld (0: the CI default, fewer under -race)")

// A diffConfig is one configuration TestRuntimeMatchesWorld runs: the
// same algorithm and options for the runtime's peers and the World.
type diffConfig struct {
	alg      Algorithm
	n        int
	opts     []Option
	recovery bool // crashes and suspicions join the schedule
}

func (c diffConfig) String() string {
	var parts []string
	for _, o := range c.opts {
		parts = append(parts, o.name)
	}
	return fmt.Sprintf("%v/n=%d/%s", c.alg, c.n, strings.Join(parts, "+"))
}

// diffConfigs lists every algorithm, plain, and with each option that
// changes what its driver or machine does: implicit replies, recovery
// (with crashes and suspicions), and a fence floor.
func diffConfigs() []diffConfig {
	var cs []diffConfig
	for _, alg := range Algorithms() {
		cs = append(cs, diffConfig{alg: alg, n: 3})
		if c, err := New(alg, 1, WithRecovery(), WithUnreachableAfter(time.Hour)); err == nil {
			_ = c.Close()
			cs = append(cs, diffConfig{alg: alg, n: 3, opts: []Option{WithRecovery()}, recovery: true})
		}
	}
	cs = append(cs,
		diffConfig{alg: RicartAgrawala, n: 3, opts: []Option{WithImplicitReplies()}},
		diffConfig{alg: RicartAgrawala, n: 3, opts: []Option{WithImplicitReplies(), WithRecovery()}, recovery: true},
		diffConfig{alg: Maekawa, n: 4},
		diffConfig{alg: SuzukiKasami, n: 2, opts: []Option{WithFenceFloor(1 << 40)}},
	)
	return cs
}

// TestRuntimeMatchesWorld is the differential test of the runtime against
// the World: for every configuration, seeded random schedules of local
// calls (Lock, TryLock, a caller giving up, Unlock), deliveries in any
// order the network allows, a crash and the failure detector's
// suspicions are played on real Peers, over a transport the test
// controls, and on the World the checker explores. After every step each
// peer must have sent the same messages, with the same fences, and its
// callers must have had the same answers: entries, refusals and the
// fence of each hold. Both sides run the one driver (driver.go), so a
// rule changed on one side only, such as a refused try that does not
// make the request of a Lock queued behind it, fails here.
func TestRuntimeMatchesWorld(t *testing.T) {
	schedules := 60
	if raceEnabled {
		schedules = 15
	}
	if testing.Short() {
		schedules = 5
	}
	if *diffSchedules > 0 {
		schedules = *diffSchedules
	}
	for _, c := range diffConfigs() {
		t.Run(c.String(), func(t *testing.T) {
			for seed := range uint64(schedules) {
				runDiffSchedule(t, c, seed, 60)
			}
		})
	}
}

// diffNet is the transport of a differential run: sends are logged and
// held in flight until the test delivers them, by pushing them into the
// receiving peer, and a crashed peer's links lose what is sent on them,
// as the World's do. Each endpoint's Reachability reports what the test
// decided its detector sees, and the peer's own watcher turns that into
// suspicions, as it does over a real transport.
type diffNet struct {
	mu      sync.Mutex
	seq     uint64
	sent    []InFlightMessage // every message sent, in order, lost or not
	flight  []InFlightMessage // in flight, in order of sending
	crashed []bool
	down    [][]bool // down[i][j]: peer i is told that j is unreachable
	push    []func(Message)
	changed []chan struct{} // changed[i]: i's Reachability changed; a buffer of one
}

type diffEnd struct {
	nw *diffNet
	id int
}

func (e diffEnd) Send(to int, m Message) error {
	nw := e.nw
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.seq++
	f := InFlightMessage{Seq: nw.seq, Msg: traced(m)}
	nw.sent = append(nw.sent, f)
	if !nw.crashed[e.id] && !nw.crashed[to] {
		nw.flight = append(nw.flight, f)
	}
	return nil
}

func (e diffEnd) Recv() <-chan Message { return nil }
func (e diffEnd) Close() error         { return nil }

func (e diffEnd) SetDeliver(self Transport, f func(Message)) bool {
	if s, ok := self.(diffEnd); !ok || s != e {
		return false
	}
	e.nw.mu.Lock()
	defer e.nw.mu.Unlock()
	e.nw.push[e.id] = f
	return true
}

func (e diffEnd) Reachable(j int) (bool, time.Time) {
	e.nw.mu.Lock()
	defer e.nw.mu.Unlock()
	if e.nw.down[e.id][j] {
		return false, time.Unix(0, 0)
	}
	return true, time.Time{}
}

func (e diffEnd) ReachChanged() <-chan struct{} { return e.nw.changed[e.id] }

// A diffCaller is one call of LockContext or TryLockContext on the
// runtime's side.
type diffCaller struct {
	try    bool
	cancel context.CancelFunc
	res    chan error
	done   bool
	err    error
	holds  bool // returned nil and has not unlocked yet
}

// A diffRun is one schedule played on both sides.
type diffRun struct {
	t       *testing.T
	c       diffConfig
	nw      *diffNet
	peers   []*Peer
	callers [][]*diffCaller // by peer, in order of call
	w       *World
	events  int // World events already compared
	sends   int // runtime sends already compared
	log     []string
}

func runDiffSchedule(t *testing.T, c diffConfig, seed uint64, steps int) {
	t.Helper()
	r := newDiffRun(t, c)
	defer r.close()
	rng := rand.New(rand.NewPCG(seed, 0xd1ff))
	for range steps {
		if r.w.Err() != nil {
			break
		}
		if !r.step(rng) {
			break
		}
	}
	if t.Failed() {
		t.Logf("seed %d, schedule:\n%s", seed, strings.Join(r.log, "\n"))
		t.FailNow()
	}
}

func newDiffRun(t *testing.T, c diffConfig) *diffRun {
	n := c.n
	nw := &diffNet{crashed: make([]bool, n), push: make([]func(Message), n)}
	for range n {
		nw.down = append(nw.down, make([]bool, n))
		nw.changed = append(nw.changed, make(chan struct{}, 1))
	}
	r := &diffRun{t: t, c: c, nw: nw, callers: make([][]*diffCaller, n)}
	cc := CheckConfig{Algorithm: c.alg, N: n, Options: c.opts, Fenced: true}
	if !c.alg.NeedsFIFO() {
		cc.Network = NetworkUnordered
	}
	if c.recovery {
		cc.Faults = CheckFaults{Crash: true}
		cc.Detector = Detector{Kind: DetectorImperfect, FalseSuspicions: 1 << 20}
	}
	ch, err := newChecker(cc)
	require.NoError(t, err)
	r.w, err = ch.startWorld(true)
	require.NoError(t, err)
	opts := slices.Clone(c.opts)
	if c.recovery {
		opts = append(opts, WithUnreachableAfter(time.Hour))
	}
	for id := range n {
		p, err := NewPeer(c.alg, id, n, diffEnd{nw: nw, id: id}, opts...)
		require.NoError(t, err)
		r.peers = append(r.peers, p)
	}
	return r
}

// close closes every peer: the callers still waiting get ErrClosed.
func (r *diffRun) close() {
	for _, p := range r.peers {
		require.NoError(r.t, p.Close())
	}
	for _, cs := range r.callers {
		for _, c := range cs {
			if !c.done {
				<-c.res
			}
			c.cancel()
		}
	}
}

// step plays one random step on both sides and compares them; it reports
// false when nothing is left to do.
func (r *diffRun) step(rng *rand.Rand) bool {
	type choice struct {
		name string
		do   func()
	}
	var cs []choice
	w := r.w
	for p := range r.c.n {
		if r.nw.crashed[p] {
			continue
		}
		st := w.Peer(p)
		if st.Inside {
			cs = append(cs, choice{fmt.Sprintf("P%d unlocks", p), func() { r.unlock(p) }})
		}
		if len(r.waiting(p)) < 3 {
			cs = append(cs, choice{fmt.Sprintf("P%d locks", p), func() { r.call(p, false) }})
			cs = append(cs, choice{fmt.Sprintf("P%d tries", p), func() { r.call(p, true) }})
		}
		if len(r.waiting(p)) > 0 {
			cs = append(cs, choice{fmt.Sprintf("P%d's newest caller gives up", p), func() { r.cancel(p) }})
		}
	}
	for _, tr := range w.Transitions() {
		switch tr.Kind {
		case TransDeliver:
			// Deliveries are likelier than local calls, so that
			// requests are answered as often as they are made.
			for range 3 {
				cs = append(cs, choice{tr.String(), func() { r.deliver(tr) }})
			}
		case TransCrash:
			cs = append(cs, choice{tr.String(), func() { r.crash(tr) }})
		case TransSuspect, TransTrust:
			cs = append(cs, choice{tr.String(), func() { r.suspect(tr) }})
		}
	}
	if len(cs) == 0 {
		return false
	}
	ch := cs[rng.IntN(len(cs))]
	r.log = append(r.log, ch.name)
	ch.do()
	r.compare()
	return true
}

// waiting returns peer p's callers that have not returned.
func (r *diffRun) waiting(p int) []*diffCaller {
	var ws []*diffCaller
	for _, c := range r.callers[p] {
		if !c.done {
			ws = append(ws, c)
		}
	}
	return ws
}

// call starts a LockContext, or a TryLockContext, at peer p on the
// runtime's side, and makes the same call on the World.
func (r *diffRun) call(p int, try bool) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &diffCaller{try: try, cancel: cancel, res: make(chan error, 1)}
	r.callers[p] = append(r.callers[p], c)
	peer := r.peers[p]
	go func() {
		if try {
			c.res <- peer.TryLockContext(ctx)
		} else {
			c.res <- peer.LockContext(ctx)
		}
	}()
	r.settle(p)
	if c.done && errors.Is(c.err, ErrPeerUnreachable) {
		// A peer in a minority gives up at once (WithRecovery): the
		// call never reached the driver.
		require.True(r.t, r.w.peers[p].d.minority(), "P%d gave up a call outside a minority: %v", p, c.err)
		return
	}
	var err error
	if try {
		err = r.w.Try(p)
		if errors.Is(err, ErrLocked) {
			require.True(r.t, c.done, "the World refused P%d's try at once; the runtime's caller still waits", p)
			require.ErrorIs(r.t, c.err, ErrLocked, "the World refused P%d's try at once", p)
			return
		}
	} else {
		err = r.w.Request(p)
	}
	if err != nil && !errors.Is(err, ErrViolation) {
		require.NoError(r.t, err)
	}
}

// cancel makes peer p's newest waiting caller give up, on both sides.
func (r *diffRun) cancel(p int) {
	ws := r.waiting(p)
	c := ws[len(ws)-1]
	c.cancel()
	select {
	case c.err = <-c.res:
		c.done = true
	case <-time.After(20 * time.Second):
		r.t.Fatalf("P%d's caller did not return after its context ended", p)
	}
	r.settle(p)
	require.ErrorIs(r.t, c.err, context.Canceled, "P%d's caller that gave up", p)
	require.NoError(r.t, r.w.Cancel(p))
}

// unlock has peer p's holder write twice to the World's fenced store and
// leave, and the runtime's holder check its fence and unlock.
func (r *diffRun) unlock(p int) {
	peer := r.peers[p]
	fence := peer.Fence()
	for range writesPerHold {
		st, err := r.w.Apply(Transition{Kind: TransWrite, Peer: p})
		if err != nil && !errors.Is(err, ErrViolation) {
			require.NoError(r.t, err)
		}
		require.Equal(r.t, st.Fence, fence, "P%d's hold has the same fence on both sides", p)
	}
	var holder *diffCaller
	for _, c := range r.callers[p] {
		if c.holds {
			holder = c
		}
	}
	require.NotNil(r.t, holder, "the World has P%d inside; no runtime caller of P%d holds the lock", p, p)
	holder.holds = false
	peer.Unlock()
	r.settle(p)
	r.applyWorld(Transition{Kind: TransLeave, Peer: p})
}

// deliver delivers message tr.Seq on both sides.
func (r *diffRun) deliver(tr Transition) {
	nw := r.nw
	nw.mu.Lock()
	k := slices.IndexFunc(nw.flight, func(f InFlightMessage) bool { return f.Seq == tr.Seq })
	require.GreaterOrEqual(r.t, k, 0, "message %d, in flight in the World, is not in flight at runtime", tr.Seq)
	m := nw.flight[k].Msg
	nw.flight = slices.Delete(nw.flight, k, k+1)
	push := nw.push[m.To]
	nw.mu.Unlock()
	requireSameMessage(r.t, tr.Msg, m, "message %d", tr.Seq)
	push(m)
	r.settle(m.To)
	r.applyWorld(tr)
}

// crash crashes peer tr.Peer on both sides: it is never called again,
// and its links lose what is sent on them.
func (r *diffRun) crash(tr Transition) {
	nw := r.nw
	nw.mu.Lock()
	nw.crashed[tr.Peer] = true
	nw.flight = slices.DeleteFunc(nw.flight, func(f InFlightMessage) bool { return f.Msg.From == tr.Peer || f.Msg.To == tr.Peer })
	nw.mu.Unlock()
	r.applyWorld(tr)
}

// suspect has peer tr.Peer's detector suspect tr.Target, or trust it
// again, on both sides: at runtime, the transport reports the change and
// the test waits until the peer's watcher has taken it in.
func (r *diffRun) suspect(tr Transition) {
	nw, want := r.nw, tr.Kind == TransSuspect
	nw.mu.Lock()
	nw.down[tr.Peer][tr.Target] = want
	nw.mu.Unlock()
	select {
	case nw.changed[tr.Peer] <- struct{}{}:
	default: // a change is signalled already
	}
	p := r.peers[tr.Peer]
	deadline := time.Now().Add(20 * time.Second)
	for {
		p.mu.Lock()
		done := p.reach.suspected[tr.Target] == want
		p.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("P%d's watcher did not take in %v", tr.Peer, tr)
		}
		time.Sleep(10 * time.Microsecond)
	}
	before := r.waiting(tr.Peer)
	r.settle(tr.Peer)
	r.applyWorld(tr)
	if !r.w.peers[tr.Peer].d.minority() {
		return
	}
	// Fallen into a minority, the peer's waiting callers give up, and
	// withdraw as cancelled ones do.
	for _, c := range before {
		if !c.done {
			select {
			case c.err = <-c.res:
				c.done = true
				c.holds = c.err == nil
			case <-time.After(20 * time.Second):
				r.t.Fatalf("P%d, in a minority, has a caller that does not give up", tr.Peer)
			}
		}
		require.ErrorIs(r.t, c.err, ErrPeerUnreachable, "P%d's caller gave up", tr.Peer)
		require.NoError(r.t, r.w.Cancel(tr.Peer))
	}
	r.settle(tr.Peer)
}

func (r *diffRun) applyWorld(tr Transition) {
	if _, err := r.w.Apply(tr); err != nil && !errors.Is(err, ErrViolation) {
		require.NoError(r.t, err, "World.Apply(%v)", tr)
	}
}

// settle waits until every caller of peer p has returned or waits at the
// peer, so that the runtime has done all that the last step caused, and
// records what the callers that returned were told.
func (r *diffRun) settle(p int) {
	peer := r.peers[p]
	deadline := time.Now().Add(20 * time.Second)
	for spins := 0; ; spins++ {
		running := 0
		for _, c := range r.callers[p] {
			if c.done {
				continue
			}
			select {
			case c.err = <-c.res:
				c.done = true
				c.holds = c.err == nil
			default:
				running++
			}
		}
		peer.mu.Lock()
		parked := len(peer.waiters)
		peer.mu.Unlock()
		if running == parked {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("P%d: %d callers still running, %d waiting at the peer, after 20s; schedule:\n%s",
				p, running, parked, strings.Join(r.log, "\n"))
		}
		if spins < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(10 * time.Microsecond)
		}
	}
}

// compare requires that both sides have sent the same messages so far,
// have the same messages in flight, and that each peer's callers have had
// the same answers.
func (r *diffRun) compare() {
	t := r.t
	w := r.w
	var worldSent []InFlightMessage
	for _, e := range w.events[r.events:] {
		if e.Kind == EventSend {
			worldSent = append(worldSent, InFlightMessage{Seq: e.Seq, Msg: e.Msg})
		}
	}
	r.events = len(w.events)
	r.nw.mu.Lock()
	sent := slices.Clone(r.nw.sent[r.sends:])
	r.sends = len(r.nw.sent)
	flight := slices.Clone(r.nw.flight)
	r.nw.mu.Unlock()
	require.Equal(t, len(worldSent), len(sent), "messages sent in the last step: World %v, runtime %v", worldSent, sent)
	for i := range sent {
		require.Equal(t, worldSent[i].Seq, sent[i].Seq)
		requireSameMessage(t, worldSent[i].Msg, sent[i].Msg, "message %d", sent[i].Seq)
	}
	var worldFlight []uint64
	for _, m := range w.Messages() {
		worldFlight = append(worldFlight, m.Seq)
	}
	var rtFlight []uint64
	for _, f := range flight {
		rtFlight = append(rtFlight, f.Seq)
	}
	require.Equal(t, worldFlight, rtFlight, "messages in flight")
	for p := range r.c.n {
		if r.nw.crashed[p] {
			continue
		}
		st := w.Peer(p)
		holders, entries := 0, 0
		for _, c := range r.callers[p] {
			if c.holds {
				holders++
			}
			if c.done && c.err == nil {
				entries++
			}
		}
		require.Equal(t, st.Inside, holders == 1, "P%d inside: World %v, runtime holders %d", p, st.Inside, holders)
		d := &w.peers[p].d
		require.Equal(t, d.entries, uint64(entries), "P%d's callers let in: World %d, runtime %d", p, d.entries, entries)
		require.Equal(t, d.entries, r.peers[p].Stats().Entries, "P%d's Stats().Entries", p)
		require.Equal(t, d.waiting, len(r.waiting(p)), "P%d's callers waiting", p)
		pd := r.peerDriver(p)
		require.Equal(t, d.requested, pd.requested, "P%d has a request out", p)
		require.Equal(t, d.trying, pd.trying, "P%d's request is a try", p)
		require.Equal(t, d.fence, pd.fence, "P%d's fence", p)
		require.Equal(t, d.epochDue, pd.epochDue, "P%d's epoch due", p)
	}
}

// peerDriver returns a copy of peer p's driver with the fast path's
// entries folded in, as the peer would have them if it disarmed now.
func (r *diffRun) peerDriver(p int) driver {
	peer := r.peers[p]
	peer.mu.Lock()
	defer peer.mu.Unlock()
	d := peer.d
	if w := peer.fast.word.Load(); w&fastArmed != 0 {
		d.fence = w >> fastShift
		d.entries += (d.fence - peer.fast.armFence) / peer.fast.stride
		d.inside = w&fastInside != 0
	}
	return d
}

// requireSameMessage requires that a and b are the same message, fence
// included.
func requireSameMessage(t *testing.T, a, b Message, format string, args ...any) {
	t.Helper()
	require.Truef(t, sameMessage(a, b) && a.Fence == b.Fence, format+": World %s fence %d, runtime %s fence %d",
		append(args, formatMessage(a, true), a.Fence, formatMessage(b, true), b.Fence)...)
}
