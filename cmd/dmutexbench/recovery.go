package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/dmutex/dmutex"
)

// A recoveryRow is the cost of one crash under one variant's recovery
// (dmutex.WithRecovery), at one size, for one victim: in virtual time
// (dmutex.MeasureRecovery: saturation, every delay T, every critical
// section E = 1 T, the detector suspecting the crashed peer -detect T
// after the crash), and on a real in-memory cluster with one request at a
// time and -unreachable-after as the detector's bound.
type recoveryRow struct {
	Algorithm   string  `json:"algorithm"`
	N           int     `json:"n"`
	Victim      string  `json:"victim"`
	Detect      float64 `json:"detect_T"`
	Time        float64 `json:"time_T"` // from the crash to the next entry by a survivor
	Messages    uint64  `json:"msgs"`
	After       string  `json:"unreachable_after"`
	RuntimeMS   float64 `json:"runtime_ms"`
	RuntimeMsgs uint64  `json:"runtime_msgs"`
}

// measureRecovery measures every variant whose algorithm has a recovery,
// at every size, for both victims.
func measureRecovery(o *options) ([]recoveryRow, error) {
	var rows []recoveryRow
	for _, n := range o.ns {
		if n < 2 || n > 8 {
			return nil, fmt.Errorf("-recovery: n = %d, want 2 to 8 (the simulation's failure detector)", n)
		}
		for _, v := range o.variants {
			if !v.alg.Recovers() {
				if o.explicitAlgs {
					return nil, fmt.Errorf("-recovery: %s has no crash recovery", v.name)
				}
				continue
			}
			opts := append(slices.Clip(v.opts), dmutex.WithRecovery())
			for _, victim := range []dmutex.Victim{dmutex.VictimHolder, dmutex.VictimWaiting} {
				c, err := dmutex.MeasureRecovery(v.alg, n, dmutex.RecoveryTiming{CS: timedCS, Detect: o.detect, Seed: o.seed, Victim: victim}, opts...)
				if err != nil {
					return nil, fmt.Errorf("%s n=%d %v: %w", v.name, n, victim, err)
				}
				wall, msgs, err := runtimeRecovery(v, n, victim, o.unreachableAfter)
				if err != nil {
					return nil, fmt.Errorf("%s n=%d %v at run time: %w", v.name, n, victim, err)
				}
				rows = append(rows, recoveryRow{
					Algorithm: v.name, N: n, Victim: victim.String(), Detect: o.detect,
					Time: c.Time, Messages: c.Messages,
					After: o.unreachableAfter.String(), RuntimeMS: float64(wall) / float64(time.Millisecond), RuntimeMsgs: msgs,
				})
			}
		}
	}
	return rows, nil
}

// runtimeRecovery measures one crash on an in-memory cluster with the
// variant's recovery and WithUnreachableAfter(after): peer 0 takes the
// lock; the victim crashes (peer 0 itself, inside, or peer 1, idle, after
// which peer 0 leaves); the first survivor after them locks. It returns
// the wall time from the crash to that entry, and the messages sent in
// between.
func runtimeRecovery(v variant, n int, victim dmutex.Victim, after time.Duration) (time.Duration, uint64, error) {
	c, err := dmutex.New(v.alg, n, append(slices.Clip(v.opts), dmutex.WithRecovery(), dmutex.WithUnreachableAfter(after))...)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Peer(0).LockContext(ctx); err != nil {
		return 0, 0, err
	}
	crashed, next := 0, 1
	if victim == dmutex.VictimWaiting {
		crashed, next = 1, 2%n
	}
	before := c.Stats()
	start := time.Now()
	if err := c.Network().Crash(crashed); err != nil {
		return 0, 0, err
	}
	if crashed != 0 {
		c.Peer(0).Unlock()
	}
	if next == 0 {
		return 0, 0, fmt.Errorf("no survivor besides peer 0 at n = %d", n)
	}
	if err := c.Peer(next).LockContext(ctx); err != nil {
		return 0, 0, err
	}
	wall := time.Since(start)
	msgs := c.Stats().Sub(before).Messages
	c.Peer(next).Unlock()
	return wall, msgs, nil
}

var recoveryHeader = []string{"algorithm", "n", "victim", "detect", "crash to entry", "msgs",
	"unreachable after", "crash to entry at run time", "msgs at run time"}

// cells formats r to match recoveryHeader.
func (r recoveryRow) cells() []string {
	num := func(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }
	return []string{r.Algorithm, strconv.Itoa(r.N), r.Victim, num(r.Detect) + "T", num(r.Time) + "T",
		strconv.FormatUint(r.Messages, 10), r.After, num(r.RuntimeMS) + "ms", strconv.FormatUint(r.RuntimeMsgs, 10)}
}

// writeRecovery writes the recovery table in o's format.
func writeRecovery(w io.Writer, o *options, rows []recoveryRow) error {
	cells := make([][]string, len(rows))
	for i, r := range rows {
		cells[i] = r.cells()
	}
	return writeTable(w, o.format, rows, recoveryHeader, cells, recoveryHeader, cells)
}
