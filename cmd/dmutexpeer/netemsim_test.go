package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dmutex/dmutex"
)

// netemDelay is the wire's one-way delay, T; each entry holds the lock
// for netemHold (E = 1T, as in the timed table).
const (
	netemDelay = 2 * time.Millisecond
	netemHold  = netemDelay
	// netemLight is the light load: one request per netemLight T in the
	// whole cluster, on average.
	netemLight = 25
	// netemWarm is how many entries per peer each run leaves out at its
	// start, while the connections warm up.
	netemWarm = 2
)

// netemThink is the mean pause of each of n peers at light load.
func netemThink(n int) time.Duration { return time.Duration(n*netemLight) * netemDelay }

type netemConfig struct {
	n            int
	algs         []dmutex.Algorithm
	heavy, light int // entries per peer at each load
}

// netemRun is what one run measured: its timing and the messages per
// entry the peers counted.
type netemRun struct {
	logTiming
	msgs             float64
	shareLo, shareHi float64 // see shares
}

const netemHeader = "| algorithm | n | sync delay, mean and median | RunTimed | entry latency light, mean and median | RunTimed | msgs/entry heavy | RunTimed | share min-max heavy |\n" +
	"| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"

// netemSim returns RunTimed's columns of the table for alg and n, at the
// same T, E and loads: the sync delay and messages per entry at
// saturation, and the entry latency (Wait) at light load.
func netemSim(alg dmutex.Algorithm, n int) ([3]string, error) {
	cs := float64(netemHold) / float64(netemDelay)
	heavy, err := dmutex.RunTimed(alg, n, dmutex.Timing{CS: cs, Entries: 400, Warmup: 4 * n, Seed: 1})
	if err != nil {
		return [3]string{}, err
	}
	light, err := dmutex.RunTimed(alg, n, dmutex.Timing{CS: cs, Rate: 1 / float64(n*netemLight), Entries: 400, Seed: 1})
	if err != nil {
		return [3]string{}, err
	}
	return [3]string{fmt.Sprintf("%.2fT", heavy.SyncDelay), fmt.Sprintf("%.2fT", light.Wait), fmt.Sprintf("%.2f", heavy.Messages)}, nil
}

// TestNetemTableInDocs holds the RunTimed columns of docs/benchmarks.md's
// delayed-network table against netemSim, which computes them exactly;
// the measured columns are a dated record of one run of
// TestDelayedNetwork -dmutex.netem.
func TestNetemTableInDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/benchmarks.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(b), "<!-- BEGIN netem-table -->\n")
	require.True(t, ok, "no netem-table in docs/benchmarks.md")
	table, _, ok := strings.Cut(after, "<!-- END netem-table -->")
	require.True(t, ok)
	require.Contains(t, table, netemHeader)
	_, rows, _ := strings.Cut(table, netemHeader)
	lines := strings.Split(strings.TrimSpace(rows), "\n")
	require.Len(t, lines, len(dmutex.Algorithms()), "one row per algorithm")
	for _, line := range lines {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		require.Len(t, cells, 9, "%q", line)
		alg, err := dmutex.ParseAlgorithm(cells[0])
		require.NoError(t, err)
		n, err := strconv.Atoi(cells[1])
		require.NoError(t, err)
		sim, err := netemSim(alg, n)
		require.NoError(t, err)
		assert.Equal(t, sim, [3]string{cells[3], cells[5], cells[7]}, "%s n=%d: RunTimed's sync delay, entry latency and msgs/entry", alg, n)
	}
}
