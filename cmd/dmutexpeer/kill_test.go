package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dmutex/dmutex"
)

// killUnreachable is -unreachable-after in the kill tests: each kill costs
// the survivors about that much, and nothing in the tests depends on it.
const killUnreachable = "500ms"

// TestKillOne starts dmutexpeer processes on loopback with -recovery, for
// each algorithm with a recovery (Ricart-Agrawala's crash exclusion,
// Suzuki-Kasami's token regeneration, centralized coordinator failover),
// and
// kills one with SIGKILL in the middle of the run, inside the critical
// section or outside it: the survivors finish all their entries, and the
// shared log (verifyRun) shows no two entries overlapping, fences strictly
// increasing across the kill, and survivors' entries after it. With
// restart, the killed peer is started again at once, and is refused with
// the error that says it cannot rejoin, while the survivors go on.
func TestKillOne(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	bin := sharedBinary(t)
	ra, sk, cn := dmutex.RicartAgrawala, dmutex.SuzukiKasami, dmutex.Centralized
	tests := []struct {
		name    string
		alg     dmutex.Algorithm
		n       int
		victim  int
		inside  bool // kill at the victim's begin line, holding long; else at its end line
		restart bool
	}{
		{"ricart-agrawala/n=3/inside", ra, 3, 1, true, false},
		{"ricart-agrawala/n=3/outside", ra, 3, 0, false, false},
		{"ricart-agrawala/n=3/restart", ra, 3, 2, true, true},
		{"ricart-agrawala/n=5/inside", ra, 5, 3, true, false},
		{"suzuki-kasami/n=3/inside", sk, 3, 0, true, false},
		{"suzuki-kasami/n=3/outside", sk, 3, 1, false, false},
		{"centralized/n=3/coordinator-inside", cn, 3, 0, true, false},
		{"centralized/n=3/outside", cn, 3, 2, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.True(t, tt.alg.Recovers(), "%v", tt.alg)
			killOne(t, bin, tt.alg, tt.n, tt.victim, tt.inside, tt.restart)
		})
	}
}

// killAt is the victim's entry at which it is killed.
const killAt = 3

func killOne(t *testing.T, bin string, alg dmutex.Algorithm, n, victim int, inside, restart bool) {
	const entries = 100
	logPath := filepath.Join(t.TempDir(), "shared.log")
	peers := strings.Join(freeAddrs(t, n), ",")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := func(id int) []string {
		hold := "2ms"
		if id == victim && inside {
			hold = "300ms" // the kill comes, most likely, while it is inside
		}
		return []string{"-id", fmt.Sprint(id), "-peers", peers, "-alg", alg.String(), "-insecure",
			"-entries", fmt.Sprint(entries), "-log", logPath, "-hold", hold, "-timeout", "100s",
			"-recovery", "-unreachable-after", killUnreachable}
	}
	start := func(id int) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.CommandContext(ctx, bin, args(id)...)
		out := new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		return cmd, out
	}
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	for i := range n {
		cmds[i], outs[i] = start(i)
	}

	// Wait for the victim's line of entry killAt, then kill it.
	word := "end"
	if inside {
		word = "begin"
	}
	mark := fmt.Sprintf("%s %d %d ", word, victim, killAt)
	for {
		b, err := os.ReadFile(logPath)
		if err == nil && bytes.Contains(b, []byte("\n"+mark)) || bytes.HasPrefix(b, []byte(mark)) {
			break
		}
		require.NoError(t, ctx.Err(), "the victim never reached entry %d: %s", killAt, outs[victim])
		time.Sleep(time.Millisecond)
	}
	killedAt := time.Now().UnixNano()
	require.NoError(t, cmds[victim].Process.Kill())
	err := cmds[victim].Wait()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%v", err)
	require.Equal(t, -1, exit.ExitCode(), "killed by a signal")

	if restart {
		again, out := start(victim)
		err := again.Wait()
		require.True(t, errors.As(err, &exit), "the restarted peer exited with %v: %s", err, out)
		assert.Equal(t, 1, exit.ExitCode())
		assert.Contains(t, out.String(), fmt.Sprintf("peer %d restarted", victim))
		assert.Contains(t, out.String(), "cannot rejoin; restart the whole cluster")
	}

	for i, c := range cmds {
		if i == victim {
			continue
		}
		require.NoError(t, c.Wait(), "peer %d: %s", i, outs[i])
		require.Contains(t, outs[i].String(), fmt.Sprintf("entries=%d ", entries), "peer %d", i)
	}
	b, err := os.ReadFile(logPath)
	require.NoError(t, err)
	after, err := verifyRun(string(b), n, entries, victim, killedAt)
	require.NoError(t, err)
	assert.Positive(t, after, "no entry after the kill")
	gap, died := recoveryGap(string(b), victim, killedAt)
	t.Logf("killed %s; %d entries after the kill, the first %v after it; a survivor: %s",
		died, after, gap, strings.TrimSpace(outs[(victim+1)%n].String()))
}

// recoveryGap returns the time from the kill to the first entry after it,
// and whether the victim died inside the critical section, as the log says.
func recoveryGap(text string, victim int, killedAt int64) (time.Duration, string) {
	var gap time.Duration = -1
	died := "outside"
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		word, id, _, _, at, err := parseLine(line)
		if err != nil {
			continue
		}
		if id == victim {
			died = map[string]string{"begin": "inside", "end": "outside"}[word]
		}
		if word == "begin" && at > killedAt && gap < 0 {
			gap = time.Duration(at - killedAt)
		}
	}
	return gap.Round(time.Millisecond), died
}

// TestStaggeredStart starts three dmutexpeer processes with -recovery and
// a short -unreachable-after, a second apart, as a deployment started one
// process at a time does: each later peer is unreachable for several
// times the bound while the earlier ones already run. A peer never
// reached is not suspected (dmutex.WithRecovery), so nobody goes on
// without it: every peer makes all its entries, and the shared log shows
// no two entries overlapping and fences strictly increasing.
func TestStaggeredStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	bin := sharedBinary(t)
	for _, alg := range []dmutex.Algorithm{dmutex.RicartAgrawala, dmutex.SuzukiKasami, dmutex.Centralized} {
		t.Run(alg.String(), func(t *testing.T) {
			const n, entries = 3, 30
			logPath := filepath.Join(t.TempDir(), "shared.log")
			peers := strings.Join(freeAddrs(t, n), ",")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmds := make([]*exec.Cmd, n)
			outs := make([]*bytes.Buffer, n)
			for i := range n {
				if i > 0 {
					time.Sleep(time.Second)
				}
				cmds[i] = exec.CommandContext(ctx, bin, "-id", fmt.Sprint(i), "-peers", peers, "-alg", alg.String(), "-insecure",
					"-entries", fmt.Sprint(entries), "-log", logPath, "-hold", "2ms", "-think", "5ms", "-timeout", "50s",
					"-recovery", "-unreachable-after", "200ms")
				outs[i] = new(bytes.Buffer)
				cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
				require.NoError(t, cmds[i].Start())
			}
			for i, c := range cmds {
				require.NoError(t, c.Wait(), "peer %d: %s", i, outs[i])
				require.Contains(t, outs[i].String(), fmt.Sprintf("entries=%d ", entries), "peer %d", i)
			}
			checkLog(t, logPath, n, entries)
		})
	}
}
