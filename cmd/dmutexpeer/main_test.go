package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dmutex/dmutex"
	"github.com/dmutex/dmutex/grpctransport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if shared.dir != "" {
			_ = os.RemoveAll(shared.dir)
		}
		os.Exit(code)
	}))
}

// shared is one dmutexpeer binary for the tests of this process, built
// once, so that a test run -count times builds it once too.
var shared struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// sharedBinary returns the path of the shared binary, building it first.
func sharedBinary(t *testing.T) string {
	t.Helper()
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "dmutexpeer-test-")
		if shared.err != nil {
			return
		}
		shared.bin = filepath.Join(shared.dir, "dmutexpeer")
		var out []byte
		out, shared.err = exec.Command("go", "build", "-o", shared.bin, ".").CombinedOutput()
		if shared.err != nil {
			shared.err = fmt.Errorf("go build: %v: %s", shared.err, out)
		}
	})
	require.NoError(t, shared.err)
	return shared.bin
}

func TestBadFlags(t *testing.T) {
	ok := []string{"-id", "0", "-peers", "127.0.0.1:1,127.0.0.1:2", "-log", "x.log", "-insecure"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no flags", nil, "-peers is required"},
		{"unknown flag", append([]string{"-bogus"}, ok...), "flag provided but not defined"},
		{"bad number", []string{"-id", "zero"}, "invalid value"},
		{"extra argument", append(ok, "more"), "unexpected arguments"},
		{"id out of range", append(ok, "-id", "2"), "-id 2 is not one of the 2 peers"},
		{"unknown algorithm", append(ok, "-alg", "paxos"), `unknown algorithm "paxos"`},
		{"negative entries", append(ok, "-entries", "-1"), "-entries -1"},
		{"no log", []string{"-id", "0", "-peers", "127.0.0.1:1", "-insecure"}, "-log is required"},
		{"no credentials", []string{"-id", "0", "-peers", "127.0.0.1:1", "-log", "x"}, "or -insecure"},
		{"half of TLS", []string{"-id", "0", "-peers", "127.0.0.1:1", "-log", "x", "-cert", "c"}, "give -cert, -key and -ca"},
		{"TLS and insecure", append(ok, "-cert", "c", "-key", "k", "-ca", "a"), "exclusive"},
		{"zero timeout", append(ok, "-timeout", "0s"), "-timeout must be positive"},
		{"negative think", append(ok, "-think", "-1s"), "-think must not be negative"},
		{"zero unreachable-after", append(ok, "-recovery", "-unreachable-after", "0s"), "-unreachable-after must be positive"},
		{"keepalive below gRPC's floor", append(ok, "-keepalive", "1s"), "-keepalive 1s is below gRPC's floor of 10s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, 2, run(tt.args, &stdout, &stderr))
			assert.Contains(t, stderr.String(), tt.want)
			assert.Contains(t, stderr.String(), "Usage: dmutexpeer")
			assert.Empty(t, stdout.String())
		})
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"log in a missing directory", []string{"-id", "0", "-peers", "127.0.0.1:0", "-insecure", "-log", filepath.Join(dir, "no", "x.log")}, "no such file"},
		{"recovery without one", []string{"-id", "0", "-peers", "127.0.0.1:0", "-insecure", "-log", filepath.Join(dir, "x.log"), "-alg", "lamport", "-recovery"}, "option WithRecovery does not apply to lamport"},
		{"missing certificate", []string{"-id", "0", "-peers", "127.0.0.1:0", "-log", filepath.Join(dir, "x.log"), "-cert", "c", "-key", "k", "-ca", "a"}, "load certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, 1, run(tt.args, &stdout, &stderr))
			assert.Contains(t, stderr.String(), tt.want)
		})
	}
}

// TestSinglePeer runs a cluster of one in-process: every entry is logged.
func TestSinglePeer(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "shared.log")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-id", "0", "-peers", freeAddrs(t, 1)[0], "-insecure", "-entries", "5", "-log", logPath}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	assert.Contains(t, stdout.String(), "entries=5 messages=0")
	checkLog(t, logPath, 1, 5)

	// Each entry's times are in order: asked, entered, left, and the
	// next asked after (no -think: at once).
	b, err := os.ReadFile(logPath)
	require.NoError(t, err)
	es, err := parseTimes(string(b))
	require.NoError(t, err)
	require.Len(t, es, 5)
	for i, e := range es {
		assert.Equal(t, i, e.k)
		assert.Positive(t, e.asked)
		assert.LessOrEqual(t, e.asked, e.entered, "entry %d", i)
		assert.LessOrEqual(t, e.entered, e.left, "entry %d", i)
		if i > 0 {
			assert.LessOrEqual(t, es[i-1].left, e.asked, "entry %d", i)
		}
	}
}

// freeAddrs returns n loopback addresses whose ports were free a moment
// ago.
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	// Every listener stays open until all n ports are chosen: a port
	// closed at once can be handed out again by the next Listen, and two
	// peers then get the same address (it happened in a soak run).
	ls := make([]net.Listener, n)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ls[i], addrs[i] = l, l.Addr().String()
	}
	for _, l := range ls {
		require.NoError(t, l.Close())
	}
	return addrs
}

// checkLog checks the shared file of a run of n peers with entries each;
// see verifyLog.
func checkLog(t *testing.T, path string, n, entries int) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, verifyLog(string(b), n, entries))
}

// verifyLog checks a shared file's text: begin and end lines alternate
// with nothing in between, each entry of each peer appears exactly once,
// and fencing tokens increase.
func verifyLog(text string, n, entries int) error {
	_, err := verifyRun(text, n, entries, -1, 0)
	return err
}

// verifyRun checks a shared file's text as verifyLog does, but for a run
// in which peer killed (or none, if -1) was killed with SIGKILL at
// killedAt (Unix nanoseconds, read before the signal was sent). That peer
// may have made fewer entries, and its last one may never end: a begin
// may then follow, but only one written after killedAt, since until then
// the peer was alive and inside. It returns how many entries began after
// killedAt.
func verifyRun(text string, n, entries, killed int, killedAt int64) (after int, err error) {
	seen := map[[2]int]bool{}
	count := make([]int, n)
	var fence uint64
	var open *[3]uint64 // the entry begun and not yet ended
	var dead bool       // the killed peer's last entry never ended
	sc := bufio.NewScanner(strings.NewReader(text))
	line := 0
	for sc.Scan() {
		line++
		word, id, k, fc, at, err := parseLine(sc.Text())
		if err != nil {
			return 0, fmt.Errorf("line %d: %q: %v", line, sc.Text(), err)
		}
		if id < 0 || id >= n {
			return 0, fmt.Errorf("line %d: peer %d of %d", line, id, n)
		}
		if word == "begin" && open != nil && int(open[0]) == killed && at > killedAt {
			// The killed peer died inside: its entry ends with it.
			open, dead = nil, true
		}
		cur := [3]uint64{uint64(id), uint64(k), fc}
		switch {
		case dead && id == killed:
			return 0, fmt.Errorf("line %d: peer %d writes after it died inside", line, id)
		case word == "begin" && open != nil:
			return 0, fmt.Errorf("line %d: peer %d begins entry %d while peer %d is inside", line, id, k, open[0])
		case word == "begin" && seen[[2]int{id, k}]:
			return 0, fmt.Errorf("line %d: entry %d of peer %d twice", line, k, id)
		case word == "begin" && k != count[id]:
			return 0, fmt.Errorf("line %d: entry %d of peer %d after %d entries", line, k, id, count[id])
		case word == "begin" && fc <= fence:
			return 0, fmt.Errorf("line %d: fencing token %d after %d", line, fc, fence)
		case word == "begin":
			seen[[2]int{id, k}] = true
			count[id]++
			fence = fc
			open = &cur
			if killed >= 0 && at > killedAt {
				after++
			}
		case word == "end" && (open == nil || *open != cur):
			return 0, fmt.Errorf("line %d: end of an entry that is not the one inside", line)
		case word == "end":
			open = nil
		default:
			return 0, fmt.Errorf("line %d: %q", line, sc.Text())
		}
	}
	if open != nil && int(open[0]) != killed {
		return 0, fmt.Errorf("entry %d of peer %d never ended", open[1], open[0])
	}
	for id, c := range count {
		if c != entries && (id != killed || c > entries) {
			return 0, fmt.Errorf("peer %d made %d entries, want %d", id, c, entries)
		}
	}
	return after, nil
}

func TestVerifyLog(t *testing.T) {
	tests := []struct {
		name string
		text string
		want string // "" for a good log
	}{
		{"good", "begin 0 0 1 5 10\nend 0 0 1 11\nbegin 1 0 2 7 12\nend 1 0 2 13\n", ""},
		{"interleaved", "begin 0 0 1 5 10\nbegin 1 0 2 6 11\nend 0 0 1 12\nend 1 0 2 13\n", "while peer 0 is inside"},
		{"missing entry", "begin 0 0 1 5 10\nend 0 0 1 11\n", "peer 1 made 0 entries, want 1"},
		{"entry twice", "begin 0 0 1 5 10\nend 0 0 1 11\nbegin 0 0 2 7 12\nend 0 0 2 13\n", "twice"},
		{"fence goes back", "begin 0 0 2 5 10\nend 0 0 2 11\nbegin 1 0 1 7 12\nend 1 0 1 13\n", "fencing token 1 after 2"},
		{"end of another entry", "begin 0 0 1 5 10\nend 1 0 1 11\n", "not the one inside"},
		{"never ended", "begin 0 0 1 5 10\nend 0 0 1 11\nbegin 1 0 2 7 12\n", "never ended"},
		{"garbage", "begin 0 0 1 5 10\nhello\n", "line 2"},
		{"no time", "begin 0 0 1\nend 0 0 1\n", "line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := verifyLog(tt.text, 2, 1)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// parseLine reads one line of the shared log: its word, the peer, the
// entry, the fence and the time the line stands for, when the peer
// entered (a begin line) or left (an end line).
func parseLine(line string) (word string, id, k int, fence uint64, at int64, err error) {
	var asked int64
	if strings.HasPrefix(line, "begin ") {
		_, err = fmt.Sscanf(line, "%s %d %d %d %d %d", &word, &id, &k, &fence, &asked, &at)
	} else {
		_, err = fmt.Sscanf(line, "%s %d %d %d %d", &word, &id, &k, &fence, &at)
	}
	return word, id, k, fence, at, err
}

// TestVerifyRun checks the verifier of a run with a killed peer (peer 1
// of 2, killed at time 100, one entry each wanted).
func TestVerifyRun(t *testing.T) {
	tests := []struct {
		name  string
		text  string
		want  string // "" for a good log
		after int
	}{
		{"killed inside", "begin 1 0 2 85 90\nbegin 0 0 3 145 150\nend 0 0 3 151\n", "", 1},
		{"asked before the kill, entered after", "begin 1 0 2 85 90\nbegin 0 0 3 95 150\nend 0 0 3 151\n", "", 1},
		{"killed before its entry", "begin 0 0 1 105 110\nend 0 0 1 111\n", "", 1},
		{"killed after its entries", "begin 1 0 1 5 10\nend 1 0 1 11\nbegin 0 0 2 115 120\nend 0 0 2 121\n", "", 1},
		{"entered beside the living", "begin 1 0 2 85 90\nbegin 0 0 3 90 95\nend 0 0 3 96\n", "while peer 1 is inside", 0},
		{"the dead write", "begin 1 0 2 85 90\nbegin 0 0 3 145 150\nend 0 0 3 151\nend 1 0 2 152\n", "writes after it died", 0},
		{"fence back after the kill", "begin 1 0 5 85 90\nbegin 0 0 3 145 150\nend 0 0 3 151\n", "fencing token 3 after 5", 0},
		{"a survivor short", "begin 1 0 1 5 10\nend 1 0 1 11\n", "peer 0 made 0 entries", 0},
		{"a survivor dies inside", "begin 0 0 1 5 10\n", "entry 0 of peer 0 never ended", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			after, err := verifyRun(tt.text, 2, 1, 1, 100)
			if tt.want != "" {
				require.ErrorContains(t, err, tt.want)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.after, after)
		})
	}
}

// build compiles dmutexpeer into dir.
func build(t *testing.T, dir string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	require.NoError(t, err)
	bin := filepath.Join(dir, "dmutexpeer")
	out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// TestThreeProcesses builds dmutexpeer and runs three of them on
// loopback, each taking the lock a hundred times, then checks the shared
// file.
func TestThreeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	dir := t.TempDir()
	bin := build(t, dir)
	tlsArgs := writeCerts(t, dir, 3)

	const n, entries = 3, 100
	tests := []struct {
		name string
		alg  dmutex.Algorithm
		tls  bool
	}{
		{"ricart-agrawala", dmutex.RicartAgrawala, false},
		{"centralized", dmutex.Centralized, false},
		{"suzuki-kasami", dmutex.SuzukiKasami, false},
		{"lamport-mtls", dmutex.Lamport, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "shared.log")
			peers := strings.Join(freeAddrs(t, n), ",")
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmds := make([]*exec.Cmd, n)
			outs := make([]*bytes.Buffer, n)
			for i := range n {
				args := []string{"-id", fmt.Sprint(i), "-peers", peers, "-alg", tt.alg.String(),
					"-entries", fmt.Sprint(entries), "-log", logPath, "-timeout", "80s"}
				if tt.tls {
					args = append(args, tlsArgs[i]...)
				} else {
					args = append(args, "-insecure")
				}
				cmds[i] = exec.CommandContext(ctx, bin, args...)
				outs[i] = new(bytes.Buffer)
				cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
				require.NoError(t, cmds[i].Start())
			}
			for i, c := range cmds {
				require.NoError(t, c.Wait(), "peer %d: %s", i, outs[i])
				require.Contains(t, outs[i].String(), fmt.Sprintf("entries=%d ", entries), "peer %d", i)
				assert.NotContains(t, outs[i].String(), "level=WARN", "peer %d: a normal run and shutdown warns of nothing", i)
				assert.NotContains(t, outs[i].String(), "level=ERROR", "peer %d: nor logs an error: %s", i, outs[i])
				t.Logf("%s", strings.TrimSpace(outs[i].String()))
			}
			checkLog(t, logPath, n, entries)
		})
	}

	t.Run("bad flags exit 2", func(t *testing.T) {
		err := exec.Command(bin, "-id", "x").Run()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		require.Equal(t, 2, exit.ExitCode())
	})

	t.Run("wrong certificate", func(t *testing.T) {
		// Peer 1 runs with peer 2's certificate: it refuses to start and
		// says why, and peer 0 gets no further than waiting for it.
		logPath := filepath.Join(t.TempDir(), "shared.log")
		peers := strings.Join(freeAddrs(t, 2), ",")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		args := func(id int, cert []string) []string {
			return append([]string{"-id", fmt.Sprint(id), "-peers", peers, "-entries", "1", "-log", logPath, "-timeout", "2s"}, cert...)
		}
		good := exec.CommandContext(ctx, bin, args(0, tlsArgs[0])...)
		bad := exec.CommandContext(ctx, bin, args(1, tlsArgs[2])...)
		var goodOut, badOut bytes.Buffer
		good.Stderr, bad.Stderr = &goodOut, &badOut
		require.NoError(t, good.Start())
		require.NoError(t, bad.Start())
		goodErr, badErr := good.Wait(), bad.Wait()
		require.Error(t, goodErr)
		require.Error(t, badErr)
		assert.Contains(t, badOut.String(), `certificate names [peer-2], not "peer-1"`)
		assert.Contains(t, goodOut.String(), "waiting for the other peers")
		_, err := os.Stat(logPath)
		require.NoError(t, err)
		b, err := os.ReadFile(logPath)
		require.NoError(t, err)
		assert.Empty(t, b, "an entry was made")
	})
}

// writeCerts writes an authority and one certificate and key per peer
// into dir with "dmutexpeer certs", as the README's walkthrough does, and
// returns each peer's TLS flags.
func writeCerts(t *testing.T, dir string, n int) [][]string {
	t.Helper()
	certs := filepath.Join(dir, "certs")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"certs", "-n", fmt.Sprint(n), "-dir", certs}, &stdout, &stderr), "%s", stderr.String())
	args := make([][]string, n)
	for i := range n {
		name := filepath.Join(certs, grpctransport.PeerName(i))
		args[i] = []string{"-cert", name + ".crt", "-key", name + ".key", "-ca", filepath.Join(certs, "ca.crt")}
	}
	return args
}

// TestAlgorithmMismatch starts two peers with different -alg, for every
// pair of algorithms: both must exit with an error that names both
// algorithms, instead of waiting for each other until -timeout.
func TestAlgorithmMismatch(t *testing.T) {
	algs := dmutex.Algorithms()
	for i, a := range algs {
		for _, b := range algs[i+1:] {
			t.Run(a.String()+"/"+b.String(), func(t *testing.T) {
				logPath := filepath.Join(t.TempDir(), "shared.log")
				peers := strings.Join(freeAddrs(t, 2), ",")
				codes := make([]int, 2)
				outs := []*bytes.Buffer{new(bytes.Buffer), new(bytes.Buffer)}
				done := make(chan int, 2)
				for id, alg := range []dmutex.Algorithm{a, b} {
					go func() {
						codes[id] = run([]string{"-id", fmt.Sprint(id), "-peers", peers, "-alg", alg.String(),
							"-entries", "1", "-log", logPath, "-insecure", "-timeout", "2m"}, io.Discard, outs[id])
						done <- id
					}()
				}
				<-done
				<-done
				for id := range 2 {
					assert.Equal(t, 1, codes[id], "peer %d: %s", id, outs[id])
					// The error the run ends with, not only a log line, names
					// the mismatch: a peer that timed out would say so here.
					lines := strings.Split(strings.TrimSpace(outs[id].String()), "\n")
					last := lines[len(lines)-1]
					assert.Contains(t, last, fmt.Sprintf("dmutexpeer: peer %d: waiting for the other peers: ", id))
					assert.Contains(t, last, "cluster mismatch", "peer %d", id)
					assert.Contains(t, last, "runs "+a.String()+" with n=2", "peer %d", id)
					assert.Contains(t, last, "runs "+b.String()+" with n=2", "peer %d", id)
				}
			})
		}
	}
}
