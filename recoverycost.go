package dmutex

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Recovers reports whether a has a crash recovery that WithRecovery turns
// on.
func (a Algorithm) Recovers() bool { return slices.Contains(recoveryAlgorithms, a) }

// A Victim says which peer MeasureRecovery crashes.
type Victim uint8

// The victims.
const (
	// VictimHolder crashes the peer that has just entered the critical
	// section, before it leaves.
	VictimHolder Victim = iota
	// VictimWaiting crashes, at the same moment, the next peer by id
	// after the one that entered: under saturation, a peer with a
	// request outstanding.
	VictimWaiting
)

func (v Victim) String() string {
	switch v {
	case VictimHolder:
		return "holder"
	case VictimWaiting:
		return "waiting"
	}
	return fmt.Sprintf("Victim(%d)", uint8(v))
}

// RecoveryTiming sets up a MeasureRecovery run.
type RecoveryTiming struct {
	// Jitter, CS and Seed are as in Timing: every message takes T, or a
	// seeded delay in [1-Jitter, 1+Jitter] T, and every critical section
	// lasts CS T. The load is saturation: every peer requests at the
	// start and again the moment it leaves.
	Jitter float64
	CS     float64
	Seed   uint64

	// Warmup is how many entries are made before the crash, which comes
	// at the next entry; the default is n.
	Warmup int

	// Detect is how long, in T, the failure detector of each survivor
	// takes to suspect the crashed peer: WithUnreachableAfter's bound,
	// counted in message delays.
	Detect float64

	// Victim is the peer that crashes.
	Victim Victim
}

// A RecoveryCost is what one crash cost the survivors, from the crash to
// the next entry by one of them.
type RecoveryCost struct {
	Time     float64 // in T, Detect included
	Messages uint64  // messages sent in that time, as Stats counts them
	Crashed  int     // the peer that crashed
	Next     int     // the survivor that entered next
}

// MeasureRecovery runs n peers of alg in virtual time, as RunTimed does,
// crashes one of them (rt.Victim) at the entry after rt.Warmup entries,
// has each survivor's failure detector suspect it rt.Detect T later, and
// returns the time and the messages from the crash to the next entry by a
// survivor. Give WithRecovery for the algorithm's recovery: without it
// the survivors, for the permission algorithms, never enter again, and
// the error wraps ErrBlocked. A protocol violation returns an error
// wrapping ErrViolation; bad timing, or n outside 2 to 8, one wrapping
// ErrInvalidConfig. The run uses no clock: the same arguments give the
// same cost.
func MeasureRecovery(alg Algorithm, n int, rt RecoveryTiming, opts ...Option) (RecoveryCost, error) {
	switch {
	case n < 2 || n > maxDetectorPeers:
		return RecoveryCost{}, fmt.Errorf("%w: MeasureRecovery of %d peers, want 2 to %d", ErrInvalidConfig, n, maxDetectorPeers)
	case rt.Jitter < 0 || rt.Jitter >= 1 || math.IsNaN(rt.Jitter):
		return RecoveryCost{}, fmt.Errorf("%w: RecoveryTiming.Jitter %v: want 0 <= jitter < 1", ErrInvalidConfig, rt.Jitter)
	case rt.CS < 0 || math.IsNaN(rt.CS) || math.IsInf(rt.CS, 0):
		return RecoveryCost{}, fmt.Errorf("%w: RecoveryTiming.CS %v: want a finite duration >= 0", ErrInvalidConfig, rt.CS)
	case rt.Detect < 0 || math.IsNaN(rt.Detect) || math.IsInf(rt.Detect, 0):
		return RecoveryCost{}, fmt.Errorf("%w: RecoveryTiming.Detect %v: want a finite duration >= 0", ErrInvalidConfig, rt.Detect)
	case rt.Warmup < 0 || rt.Victim > VictimWaiting:
		return RecoveryCost{}, fmt.Errorf("%w: RecoveryTiming.Warmup %d, Victim %v", ErrInvalidConfig, rt.Warmup, rt.Victim)
	}
	if rt.Warmup == 0 {
		rt.Warmup = n
	}
	w, err := NewWorld(alg, n, WorldConfig{NoTrace: true}, opts...)
	if err != nil {
		return RecoveryCost{}, err
	}
	w.f.detector = DetectorPerfect
	r := &timedRun{
		w:       w,
		tm:      Timing{Jitter: rt.Jitter, CS: rt.CS},
		rng:     rand.New(rand.NewPCG(rt.Seed, 0x7117ed)),
		last:    make([]float64, n*n),
		arrived: make([][]float64, n),
		entered: make([]float64, n),
	}
	return r.recovery(rt)
}

// recovery is MeasureRecovery's event loop.
func (r *timedRun) recovery(rt RecoveryTiming) (RecoveryCost, error) {
	w, n := r.w, r.w.N()
	for p := range n {
		if err := w.Request(p); err != nil {
			return RecoveryCost{}, err
		}
	}
	r.schedule()
	var (
		entries int
		holder  = -1
		cost    = RecoveryCost{Crashed: -1, Next: -1}
		crashAt float64
		sent0   uint64
	)
	for {
		if len(r.q) == 0 {
			if cost.Crashed >= 0 {
				return cost, fmt.Errorf("%w: no survivor entered after peer %d crashed (waiting: %v)", ErrBlocked, cost.Crashed, w.Waiting())
			}
			return cost, fmt.Errorf("%w: run stopped after %d entries with nothing left to do", ErrViolation, entries)
		}
		e := heap.Pop(&r.q).(timedEvent)
		r.now = e.at
		var err error
		switch e.kind {
		case timedDeliver:
			if w.isCrashed(e.msg.Msg.From) || w.isCrashed(e.peer) {
				continue // lost with the crash
			}
			_, err = w.Apply(Transition{Kind: TransDeliver, Peer: e.peer, Seq: e.msg.Seq, Msg: e.msg.Msg})
		case timedLeave:
			if w.isCrashed(e.peer) {
				continue // it never leaves
			}
			holder = -1
			if _, err = w.Apply(Transition{Kind: TransLeave, Peer: e.peer}); err == nil {
				err = w.Request(e.peer)
			}
		case timedSuspect:
			_, err = w.Apply(Transition{Kind: TransSuspect, Peer: e.peer, Target: cost.Crashed})
		}
		if err != nil {
			return cost, err
		}
		if len(w.inside) > 0 && holder < 0 {
			p := w.inside[0]
			holder = p
			entries++
			if cost.Crashed >= 0 {
				cost.Time = r.now - crashAt
				cost.Messages = w.Stats().Messages - sent0
				cost.Next = p
				return cost, nil
			}
			r.push(timedEvent{at: r.now + r.tm.CS, kind: timedLeave, peer: p})
			if entries == rt.Warmup+1 {
				victim := p
				if rt.Victim == VictimWaiting {
					victim = (p + 1) % n
				}
				w.crash(victim)
				if w.err == nil {
					w.err = w.checkTokens()
				}
				if w.err != nil {
					return cost, w.err
				}
				if victim == p {
					holder = -1
				}
				cost.Crashed, crashAt, sent0 = victim, r.now, w.Stats().Messages
				for s := range n {
					if s != victim {
						r.push(timedEvent{at: r.now + rt.Detect, kind: timedSuspect, peer: s})
					}
				}
			}
		}
		r.schedule()
	}
}
