package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dmutex/dmutex"
)

var netemFull = flag.Bool("dmutex.netem", false,
	"TestDelayedNetwork: the full table (every algorithm, 5 peers, more entries; about two minutes) instead of CI's small run")

// TestDelayedNetwork runs dmutexpeer processes, each in a network
// namespace of its own, over a wire that delays every packet by
// netemDelay one way (see delaynet_linux_test.go), once at saturation
// and once at light load per algorithm. It checks each shared log as
// TestThreeProcesses does and logs the table of docs/benchmarks.md: the
// synchronization delay and entry latency in units of the delay, beside
// RunTimed's at the same T. It asserts nothing about time.
//
// By default (CI) it runs 3 peers and two algorithms, 20 entries each at
// saturation and 8 at light load; -dmutex.netem runs the full table.
func TestDelayedNetwork(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes in network namespaces")
	}
	if missing := delayMissing(); missing != "" {
		t.Skipf("a delayed network needs %s", missing)
	}
	cfg := netemConfig{n: 3, algs: []dmutex.Algorithm{dmutex.RicartAgrawala, dmutex.Centralized}, heavy: 20, light: 8}
	if *netemFull {
		cfg = netemConfig{n: 5, algs: dmutex.Algorithms(), heavy: 100, light: 40}
	}
	bin := build(t, t.TempDir())
	dn, err := newDelayNet(fmt.Sprintf("dmx%d", os.Getpid()), cfg.n, netemDelay)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dn.Close()) })

	oneWay, err := dn.oneWay(200)
	require.NoError(t, err)
	require.GreaterOrEqual(t, oneWay, netemDelay, "the wire delivered early")
	var table strings.Builder
	fmt.Fprintf(&table, "T = %v one way; a raw TCP round trip of one byte over the same wire: %.2fT one way (median of 200)\n\n",
		netemDelay, float64(oneWay)/float64(netemDelay))
	table.WriteString(netemHeader)
	port := 7000
	for _, alg := range cfg.algs {
		var heavy, light netemRun
		for _, load := range []struct {
			name    string
			entries int
			think   time.Duration
			out     *netemRun
		}{
			{"heavy", cfg.heavy, 0, &heavy},
			{"light", cfg.light, netemThink(cfg.n), &light},
		} {
			t.Run(alg.String()+"/"+load.name, func(t *testing.T) {
				port++
				*load.out = runDelayed(t, dn, bin, alg, cfg.n, load.entries, load.think, port)
			})
		}
		if t.Failed() {
			return
		}
		sim, err := netemSim(alg, cfg.n)
		require.NoError(t, err)
		T := float64(netemDelay)
		fmt.Fprintf(&table, "| %s | %d | %.2fT, %.2fT | %s | %.2fT, %.2fT | %s | %.2f | %s | %.1f%%-%.1f%% |\n", alg, cfg.n,
			mean(heavy.syncs)/T, median(heavy.syncs)/T, sim[0],
			mean(light.waits)/T, median(light.waits)/T, sim[1],
			heavy.msgs, sim[2], 100*heavy.shareLo, 100*heavy.shareHi)
	}
	t.Logf("the delayed network's table, %s:\n%s", time.Now().UTC().Format("2006-01-02"), table.String())
}

var messagesRe = regexp.MustCompile(` entries=(\d+) messages=(\d+)`)

// runDelayed runs n dmutexpeer processes of alg, one per namespace of dn,
// each making entries entries with -think think, and returns what their
// shared log and their counts show.
func runDelayed(t *testing.T, dn *delayNet, bin string, alg dmutex.Algorithm, n, entries int, think time.Duration, port int) netemRun {
	logPath := filepath.Join(t.TempDir(), "shared.log")
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("%s:%d", delayAddr(i), port)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	waited := make([]bool, n)
	t.Cleanup(func() {
		// On a failure, the processes still running are killed.
		cancel()
		for i, c := range cmds {
			if c != nil && c.Process != nil && !waited[i] {
				_ = c.Wait()
			}
		}
	})
	for i := range n {
		cmds[i] = dn.command(ctx, i, bin, "-id", fmt.Sprint(i), "-peers", strings.Join(addrs, ","), "-alg", alg.String(),
			"-entries", fmt.Sprint(entries), "-hold", netemHold.String(), "-think", think.String(),
			"-log", logPath, "-insecure", "-timeout", "150s")
		outs[i] = new(bytes.Buffer)
		cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
		require.NoError(t, cmds[i].Start())
	}
	var sent, made int
	for i, c := range cmds {
		waited[i] = true
		require.NoError(t, c.Wait(), "peer %d: %s", i, outs[i])
		m := messagesRe.FindStringSubmatch(outs[i].String())
		require.NotNil(t, m, "peer %d: %s", i, outs[i])
		e, _ := strconv.Atoi(m[1])
		s, _ := strconv.Atoi(m[2])
		require.Equal(t, entries, e, "peer %d", i)
		made += e
		sent += s
	}
	checkLog(t, logPath, n, entries)
	b, err := os.ReadFile(logPath)
	require.NoError(t, err)
	es, err := parseTimes(string(b))
	require.NoError(t, err)
	lt := timing(es, netemWarm*n)
	// However loaded the machine, a peer cannot enter sooner than one
	// delay after another left: it needs a message sent after that exit.
	require.GreaterOrEqual(t, lt.minHandoff, float64(netemDelay), "a peer entered %v after another left", time.Duration(lt.minHandoff))
	r := netemRun{logTiming: lt, msgs: float64(sent) / float64(made)}
	r.shareLo, r.shareHi = shares(es, n, entries)
	return r
}
