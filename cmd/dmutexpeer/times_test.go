package main

import (
	"bufio"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logEntry is one entry read back from a shared log, its times in
// nanoseconds since the Unix epoch.
type logEntry struct {
	id, k                int
	asked, entered, left int64
}

// parseTimes reads the entries of a shared log in the order they were
// made, with their times; verifyLog checks the rest of the file.
func parseTimes(text string) ([]logEntry, error) {
	var es []logEntry
	sc := bufio.NewScanner(strings.NewReader(text))
	for line := 1; sc.Scan(); line++ {
		var word string
		var id, k int
		var fence uint64
		var t1, t2 int64
		if strings.HasPrefix(sc.Text(), "begin ") {
			if _, err := fmt.Sscanf(sc.Text(), "%s %d %d %d %d %d", &word, &id, &k, &fence, &t1, &t2); err != nil {
				return nil, fmt.Errorf("line %d: %q: %v", line, sc.Text(), err)
			}
			es = append(es, logEntry{id: id, k: k, asked: t1, entered: t2})
			continue
		}
		if _, err := fmt.Sscanf(sc.Text(), "%s %d %d %d %d", &word, &id, &k, &fence, &t1); err != nil {
			return nil, fmt.Errorf("line %d: %q: %v", line, sc.Text(), err)
		}
		if len(es) == 0 || es[len(es)-1].id != id || es[len(es)-1].k != k {
			return nil, fmt.Errorf("line %d: end of an entry that is not the last begun", line)
		}
		es[len(es)-1].left = t1
	}
	return es, nil
}

// logTiming is what a shared log tells of time, in nanoseconds: each
// entry's latency (Lock called to Lock returned) and each
// synchronization delay (an exit to the next entry, over the exits at
// which another peer was waiting), counted as RunTimed counts them after
// skip entries of warm-up.
// minHandoff is the shortest time from an exit to the next entry by
// another peer, which must have waited for at least one message sent
// after that exit; -1 if no entry followed another peer's.
type logTiming struct {
	waits, syncs []float64
	minHandoff   float64
}

func timing(es []logEntry, skip int) logTiming {
	lt := logTiming{minHandoff: -1}
	for i, e := range es {
		if i+1 < len(es) && es[i+1].id != e.id {
			if gap := float64(es[i+1].entered - e.left); lt.minHandoff < 0 || gap < lt.minHandoff {
				lt.minHandoff = gap
			}
		}
		if i < skip {
			continue
		}
		lt.waits = append(lt.waits, float64(e.entered-e.asked))
		if i+1 == len(es) {
			break
		}
		for _, o := range es[i+1:] {
			if o.id != e.id && o.asked < e.left {
				lt.syncs = append(lt.syncs, float64(es[i+1].entered-e.left))
				break
			}
		}
	}
	return lt
}

// shares returns the fewest and the most entries one of n peers had made
// when the first of them made its last (each makes per entries), as
// shares of all the entries made by then: equal shares are 1/n each,
// while a peer that re-enters ahead of the others takes more.
func shares(es []logEntry, n, per int) (lo, hi float64) {
	made := make([]int, n)
	for i, e := range es {
		made[e.id]++
		if made[e.id] < per {
			continue
		}
		lo, hi = 1, 0
		for _, k := range made {
			f := float64(k) / float64(i+1)
			lo, hi = min(lo, f), max(hi, f)
		}
		return lo, hi
	}
	return 0, 0
}

// mean and median of xs, 0 for none.
func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func TestLogTimes(t *testing.T) {
	// Peer 0 asks at 0 and is in over [10, 20]; peer 1 asks at 5, while
	// peer 0 waits for the lock, and enters at 23 (sync delay 3); peer 0
	// asks again at 40, after peer 1 left at 30 with nobody waiting, and
	// enters at 41; peer 1 asks at 50, after that exit: no sync delay.
	text := "begin 0 0 1 0 10\nend 0 0 1 20\n" +
		"begin 1 0 2 5 23\nend 1 0 2 30\n" +
		"begin 0 1 3 40 41\nend 0 1 3 45\n" +
		"begin 1 1 4 50 52\nend 1 1 4 60\n"
	require.NoError(t, verifyLog(text, 2, 2))
	es, err := parseTimes(text)
	require.NoError(t, err)
	require.Equal(t, []logEntry{
		{0, 0, 0, 10, 20}, {1, 0, 5, 23, 30}, {0, 1, 40, 41, 45}, {1, 1, 50, 52, 60},
	}, es)

	lt := timing(es, 0)
	assert.Equal(t, []float64{10, 18, 1, 2}, lt.waits)
	assert.Equal(t, []float64{3}, lt.syncs)
	assert.InDelta(t, 3, lt.minHandoff, 1e-9, "30 to 41 and 45 to 52 are longer")
	assert.Equal(t, []float64{18, 1, 2}, timing(es, 1).waits, "warm-up left out")
	assert.InDelta(t, 7.75, mean(lt.waits), 1e-9)
	assert.InDelta(t, 6, median(lt.waits), 1e-9)
	assert.InDelta(t, 18, median([]float64{18}), 1e-9)

	// A peer's own next request does not make a sync delay.
	es, err = parseTimes("begin 0 0 1 0 1\nend 0 0 1 5\nbegin 0 1 2 3 6\nend 0 1 2 7\n")
	require.NoError(t, err)
	assert.Empty(t, timing(es, 0).syncs)
	assert.InDelta(t, -1, timing(es, 0).minHandoff, 1e-9)

	// Peer 1 finishes its two entries first, at the third entry: peer 0
	// had made one of the three.
	es = []logEntry{{id: 0}, {id: 1}, {id: 1}, {id: 0}}
	lo, hi := shares(es, 2, 2)
	assert.InDelta(t, 1.0/3, lo, 1e-9)
	assert.InDelta(t, 2.0/3, hi, 1e-9)
	lo, hi = shares(es[:2], 2, 2)
	assert.Zero(t, lo+hi, "nobody finished")

	_, err = parseTimes("begin 0 0 1 0 1\nend 1 0 1 5\n")
	require.ErrorContains(t, err, "not the last begun")
	_, err = parseTimes("begin 0 0 1\nend 0 0 1\n")
	require.ErrorContains(t, err, "line 1")
}
