// Command dmutexpeer runs one peer of a dmutex cluster in its own process,
// over the gRPC transport, and takes the lock a given number of times.
// Each entry appends a begin and an end line to a log file that all peers
// share, so that a checker can see whether two entries ever overlapped,
// and when each peer asked, entered and left.
//
// Usage:
//
//	dmutexpeer -id 0 -peers 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002 \
//		-alg ricart-agrawala -entries 100 -log shared.log -insecure
//
// With mutual TLS, give -cert, -key and -ca instead of -insecure; peer i's
// certificate must carry the DNS name peer-i. To try it,
//
//	dmutexpeer certs -n 3 -dir certs
//
// writes a throwaway authority (certs/ca.crt) and, for each peer i,
// certs/peer-i.crt and certs/peer-i.key.
//
// With -state DIR, a directory the peers share as they share the log,
// fencing tokens survive restarts: before it uses a fence, peer i records
// it in DIR/peer-i.fence (written to a temporary file and renamed, so a
// crash leaves the old number or the new one, and the directory synced,
// so that a power loss does not undo the rename), and at start every peer
// takes the highest number in any DIR/peer-*.fence as its fence floor
// (dmutex.WithFenceFloor). The directory is shared, so a peer reads only
// regular files of at most 64 bytes there, never through a symbolic link
// nor from a named pipe, and refuses to start on anything else, naming it;
// at start it removes the temporary files that a killed process of the
// same id left. Every fence of a restarted cluster is then
// above every fence the old one handed out. Each peer's floor goes in the
// hello of its streams (grpctransport.WithFenceFloor): peers given
// separate directories whose floors lie more than dmutex.MaxFloorSpread
// apart refuse each other and exit with an error naming both floors.
//
// The log's lines are
//
//	begin ID K FENCE ASKED ENTERED
//	end ID K FENCE LEFT
//
// for entry K (from 0) of peer ID, with the fencing token it held.
// ASKED is when the peer called Lock, ENTERED when Lock returned and LEFT
// just before Unlock, in nanoseconds since the Unix epoch by the system's
// clock, which the peers of one machine share: from them a reader gets
// each entry's latency (ENTERED-ASKED) and the synchronization delay (an
// exit's LEFT to the next entry's ENTERED while a peer was waiting).
//
// With -hold D each entry stays inside for D. With -think D a peer waits,
// after each exit, a random time before it asks again: exponentially
// distributed with mean D (seeded with -seed and the id), so that a
// cluster of such peers makes requests as a Poisson process would, from
// light load (D long against an entry) to saturation (the default, 0).
//
// Every peer waits until all are reachable before its first entry, and
// after its last entry keeps serving the others until all have finished.
// At exit it prints its message counts. It exits with status 1 on an
// error and 2 on bad flags.
//
// With -recovery, the peers survive the crash of one of them, a kill -9
// included: the algorithm's crash recovery is on (dmutex.WithRecovery:
// Ricart-Agrawala's crash exclusion, Suzuki-Kasami's token regeneration,
// centralized coordinator failover; other algorithms refuse -recovery), and a peer is suspected once its
// connections have been down for -unreachable-after (a process that dies
// closes them at once; keepalive pings every -keepalive find one that
// hangs). An entry refused because a peer it needs is unreachable (a
// minority, or a peer not heard from yet) is asked again until -timeout.
// The survivors go on entering, and the first entry after a
// suspicion takes a fence of a new epoch (dmutex.FenceEpoch), above every
// fence the dead peer used. After its last entry a peer then waits for
// every other peer to have logged all its entries or to be suspected,
// instead of for all of them. A crashed peer cannot rejoin the running
// cluster: its protocol state is gone, so a restarted process is refused
// by the peers that knew the old one, exits with status 1 and the error
// "peer ID restarted ... cannot rejoin; restart the whole cluster", and
// stays suspected. The detector is imperfect: a peer that is alive but
// cut off for longer than -unreachable-after is taken for dead, and two
// peers may then be inside at once. The fence in the log is what a store
// would check.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dmutex/dmutex"
	"github.com/dmutex/dmutex/grpctransport"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is the parsed command line.
type config struct {
	id       int
	addrs    []string
	alg      dmutex.Algorithm
	entries  int
	logPath  string
	tls      bool
	cert     string
	key      string
	ca       string
	hold     time.Duration
	think    time.Duration // -think: mean pause between an exit and the next request
	seed     uint64
	timeout  time.Duration
	logLevel slog.Level
	stateDir string // -state: where the fence floor is kept; "" for none

	recovery         bool          // -recovery
	unreachableAfter time.Duration // -unreachable-after
	keepalive        time.Duration // -keepalive
}

// errUsage marks errors in the command line.
var errUsage = errors.New("usage")

func parse(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("dmutexpeer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var peers, alg string
	var insecure, verbose bool
	fs.IntVar(&c.id, "id", -1, "this peer's id, 0 to n-1 (required)")
	fs.StringVar(&peers, "peers", "", "host:port of every peer, comma-separated, in id order (required)")
	fs.StringVar(&alg, "alg", "ricart-agrawala", "algorithm: "+algNames())
	fs.IntVar(&c.entries, "entries", 100, "critical-section entries to make")
	fs.StringVar(&c.logPath, "log", "", "file shared by all peers to append begin and end lines to (required)")
	fs.StringVar(&c.stateDir, "state", "", "directory shared by all peers that keeps the highest fence each used, so that fences go on above it after a restart")
	fs.StringVar(&c.cert, "cert", "", "PEM certificate of this peer, naming it peer-<id> (mutual TLS)")
	fs.StringVar(&c.key, "key", "", "PEM private key of -cert")
	fs.StringVar(&c.ca, "ca", "", "PEM certificate of the authority that signed every peer's certificate")
	fs.BoolVar(&insecure, "insecure", false, "run without TLS: no encryption, and peers' ids are not checked")
	fs.DurationVar(&c.hold, "hold", 0, "time to stay in the critical section on each entry")
	fs.DurationVar(&c.think, "think", 0, "mean of the random pause, exponentially distributed, between an exit and the next request")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the -think pauses (each peer mixes in its id)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up if the whole run takes longer")
	fs.BoolVar(&c.recovery, "recovery", false, "survive the crash of a peer: the algorithm's crash recovery, with connections down for -unreachable-after as the failure detector")
	fs.DurationVar(&c.unreachableAfter, "unreachable-after", 2*time.Second, "with -recovery, how long a peer's connections must be down before it is suspected")
	fs.DurationVar(&c.keepalive, "keepalive", grpctransport.MinKeepalive, "interval of the keepalive pings that find a peer that hangs (at least 10s); an unanswered ping takes the connection down after 5s")
	fs.BoolVar(&verbose, "v", false, "log reconnections and other transport events, not only warnings and errors")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: dmutexpeer -id ID -peers ADDR,ADDR,... -log FILE (-insecure | -cert F -key F -ca F) [flags]")
		fmt.Fprintln(fs.Output(), "       dmutexpeer certs -n N -dir DIR")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err // flag has printed the error and the usage
	}
	bad := func(format string, a ...any) (*config, error) {
		fmt.Fprintf(stderr, "dmutexpeer: "+format+"\n", a...)
		fs.Usage()
		return nil, errUsage
	}
	if fs.NArg() > 0 {
		return bad("unexpected arguments %q", fs.Args())
	}
	if peers == "" {
		return bad("-peers is required")
	}
	c.addrs = strings.Split(peers, ",")
	if c.id < 0 || c.id >= len(c.addrs) {
		return bad("-id %d is not one of the %d peers", c.id, len(c.addrs))
	}
	a, err := dmutex.ParseAlgorithm(alg)
	if err != nil {
		return bad("-alg: %v", err)
	}
	c.alg = a
	if c.entries < 0 {
		return bad("-entries %d is negative", c.entries)
	}
	if c.logPath == "" {
		return bad("-log is required")
	}
	files := c.cert != "" || c.key != "" || c.ca != ""
	switch {
	case insecure && files:
		return bad("-insecure and TLS files are exclusive")
	case !insecure && (c.cert == "" || c.key == "" || c.ca == ""):
		return bad("give -cert, -key and -ca for mutual TLS, or -insecure")
	}
	c.tls = !insecure
	if c.hold < 0 || c.think < 0 || c.timeout <= 0 {
		return bad("-hold and -think must not be negative and -timeout must be positive")
	}
	if c.unreachableAfter <= 0 {
		return bad("-unreachable-after must be positive")
	}
	if c.keepalive < grpctransport.MinKeepalive {
		return bad("-keepalive %v is below gRPC's floor of %v", c.keepalive, grpctransport.MinKeepalive)
	}
	c.logLevel = slog.LevelWarn // refused handshakes and streams say why
	if verbose {
		c.logLevel = slog.LevelDebug
	}
	return &c, nil
}

func algNames() string {
	var names []string
	for _, a := range dmutex.Algorithms() {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "certs" {
		return runCerts(args[1:], stdout, stderr)
	}
	c, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.run(ctx, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "dmutexpeer: peer %d: %v\n", c.id, err)
		return 1
	}
	return 0
}

func (c *config) run(ctx context.Context, stdout, stderr io.Writer) (err error) {
	log, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, log.Close()) }()

	var floor uint64
	if c.stateDir != "" {
		if floor, err = readFloor(ctx, c.stateDir, c.id); err != nil {
			return err
		}
	}
	opts := []grpctransport.Option{
		// The floor goes in every hello: peers whose floors lie too far
		// apart are refused at the first stream too.
		grpctransport.WithFenceFloor(floor),
		// Peers started with another -alg or another -peers list are
		// refused at the first stream, and Barrier says so.
		grpctransport.WithCluster(c.alg, ""),
		grpctransport.WithLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.logLevel}))),
		grpctransport.WithKeepalive(c.keepalive, 5*time.Second),
	}
	if c.tls {
		cfg, err := grpctransport.LoadTLSConfig(c.cert, c.key, c.ca)
		if err != nil {
			return err
		}
		opts = append(opts, grpctransport.WithTLS(cfg))
	} else {
		opts = append(opts, grpctransport.Insecure())
	}
	tr, err := grpctransport.New(c.id, c.addrs, opts...)
	if err != nil {
		return err
	}
	popts := []dmutex.Option{dmutex.WithFenceFloor(floor)}
	if c.recovery {
		popts = append(popts, dmutex.WithRecovery(), dmutex.WithUnreachableAfter(c.unreachableAfter))
	}
	p, err := dmutex.NewPeer(c.alg, c.id, len(c.addrs), tr, popts...)
	if err != nil {
		return errors.Join(err, tr.Close())
	}
	defer func() { err = errors.Join(err, p.Close()) }()

	// Start together: the first barrier needs every peer up.
	if err := tr.Barrier(ctx); err != nil {
		return fmt.Errorf("waiting for the other peers: %w", err)
	}
	if c.recovery {
		// A peer that came up slowly may still be suspected from before
		// the barrier: an entry now would go on without it.
		if err := trustAll(ctx, p); err != nil {
			return fmt.Errorf("waiting for the other peers: %w", err)
		}
	}
	rng := rand.New(rand.NewPCG(c.seed, uint64(c.id)))
	start := time.Now()
	for k := range c.entries {
		if k > 0 && c.think > 0 {
			if err := sleep(ctx, time.Duration(rng.ExpFloat64()*float64(c.think))); err != nil {
				return fmt.Errorf("entry %d: %w", k, err)
			}
		}
		asked := time.Now()
		if err := c.lock(ctx, p); err != nil {
			return fmt.Errorf("entry %d: %w", k, err)
		}
		entered := time.Now()
		fence := p.Fence()
		err := c.saveFence(fence) // before the fence is used: the file is never behind the log
		if err == nil {
			err = c.entry(log, k, fence, asked, entered)
		}
		p.Unlock()
		if err != nil {
			return err
		}
	}
	elapsed := time.Since(start)
	// Stay up, serving the others' requests, until all are done.
	if c.recovery {
		err = c.awaitOthers(ctx, p)
	} else {
		err = tr.Barrier(ctx)
	}
	if err != nil {
		return fmt.Errorf("waiting for the other peers to finish: %w", err)
	}
	ts := tr.Stats()
	fmt.Fprintf(stdout, "peer %d: %v %v in %v; transport sent=%d delivered=%d resent=%d refused=%d\n",
		c.id, c.alg, p.Stats(), elapsed.Round(time.Millisecond), ts.Sent, ts.Delivered, ts.Resent, ts.Refused)
	return nil
}

// pollInterval is how often a peer looks again at what it waits for with
// -recovery: the suspicions and the shared log.
const pollInterval = 10 * time.Millisecond

// lock takes the lock for one entry. With -recovery, a call refused
// because a peer it needs is unreachable (dmutex.ErrPeerUnreachable: this
// peer is in a minority, or a peer it has not heard from yet is down) is
// made again until the context ends, as a minority waits: a peer that
// starts late, or a link that has just come up but that the peer's last
// look at the transport saw down, is no reason to give up an entry.
func (c *config) lock(ctx context.Context, p *dmutex.Peer) error {
	for {
		err := p.LockContext(ctx)
		if err == nil || !c.recovery || !errors.Is(err, dmutex.ErrPeerUnreachable) {
			return err
		}
		if serr := sleep(ctx, pollInterval); serr != nil {
			return errors.Join(serr, err)
		}
	}
}

// trustAll waits until p suspects no peer.
func trustAll(ctx context.Context, p *dmutex.Peer) error {
	for len(p.Suspected()) > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("still suspecting peers %v: %w", p.Suspected(), ctx.Err())
		case <-time.After(pollInterval):
		}
	}
	return nil
}

// awaitOthers waits, with -recovery, until every other peer has logged the
// end of all its entries or is suspected: a peer that crashed will not
// finish, and one that finishes needs nobody any more.
func (c *config) awaitOthers(ctx context.Context, p *dmutex.Peer) error {
	for {
		ends, err := countEnds(c.logPath, len(c.addrs))
		if err != nil {
			return err
		}
		sus := p.Suspected()
		var left []int
		for j, e := range ends {
			if j != c.id && e < c.entries && !slices.Contains(sus, j) {
				left = append(left, j)
			}
		}
		if left == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("peers %v neither finished nor suspected: %w", left, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// countEnds returns, per peer of n, how many end lines the shared log
// holds.
func countEnds(path string, n int) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ends := make([]int, n)
	for _, line := range strings.Split(string(b), "\n") {
		var id int
		if _, err := fmt.Sscanf(line, "end %d ", &id); err == nil && id >= 0 && id < n {
			ends[id]++
		}
	}
	return ends, nil
}

// maxStateFile is the largest state file readFloor reads: a fence is at
// most 20 digits and a newline.
const maxStateFile = 64

// readFloor returns the highest fence recorded in dir by any peer, or 0
// if there is none yet; it creates dir if need be. Since the directory is
// shared, it trusts none of its entries: it reads only regular files of at
// most maxStateFile bytes, never through a symbolic link or from a named
// pipe (see stateOpenFlags), and it gives up when ctx ends. It first
// removes the temporary files that an earlier process of peer id left
// when it was killed during saveFence; no other process writes those.
func readFloor(ctx context.Context, dir string, id int) (uint64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	stale, err := filepath.Glob(filepath.Join(dir, tempPattern(id)))
	if err != nil {
		return 0, err
	}
	for _, name := range stale {
		if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("stale temporary state file: %w", err)
		}
	}
	names, err := filepath.Glob(filepath.Join(dir, "peer-*.fence"))
	if err != nil {
		return 0, err
	}
	var floor uint64
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("reading the state files: %w", err)
		}
		f, err := readState(name)
		if err != nil {
			return 0, err
		}
		floor = max(floor, f)
	}
	return floor, nil
}

// readState returns the fence in the state file name, which must be a
// regular file of at most maxStateFile bytes.
func readState(name string) (uint64, error) {
	fi, err := os.Lstat(name)
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("state file %s: not a regular file (%v)", name, fi.Mode().Type())
	}
	f, err := os.OpenFile(name, os.O_RDONLY|stateOpenFlags, 0)
	if err != nil {
		return 0, fmt.Errorf("state file %s: %w", name, err)
	}
	defer func() { _ = f.Close() }()
	if fi, err = f.Stat(); err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() { // replaced since the Lstat
		return 0, fmt.Errorf("state file %s: not a regular file (%v)", name, fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxStateFile+1))
	if err != nil {
		return 0, fmt.Errorf("state file %s: %w", name, err)
	}
	if len(b) > maxStateFile {
		return 0, fmt.Errorf("state file %s: more than %d bytes, too long for a fence", name, maxStateFile)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("state file %s: %q is not a fence", name, strings.TrimSpace(string(b)))
	}
	return v, nil
}

// tempPattern is the glob of peer id's temporary state files.
func tempPattern(id int) string { return fmt.Sprintf(".peer-%d.fence.*", id) }

// syncDir flushes dir's entries to stable storage, so that a rename in it
// survives a power loss; a variable, so that a test can see when it runs.
var syncDir = func(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// saveFence records fence as the highest this peer has used, atomically
// and durably: a temporary file, synced, renamed over
// DIR/peer-<id>.fence, and then the directory synced, without which a
// power loss could undo the rename and bring back an older floor.
func (c *config) saveFence(fence uint64) error {
	if c.stateDir == "" {
		return nil
	}
	name := filepath.Join(c.stateDir, fmt.Sprintf("peer-%d.fence", c.id))
	tmp, err := os.CreateTemp(c.stateDir, tempPattern(c.id))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(tmp, "%d\n", fence)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return syncDir(c.stateDir)
}

// entry writes one entry's lines (see the package comment). Each line is
// one write to a file opened with O_APPEND, so lines from different
// processes never mix.
func (c *config) entry(log *os.File, k int, fence uint64, asked, entered time.Time) error {
	if _, err := fmt.Fprintf(log, "begin %d %d %d %d %d\n", c.id, k, fence, asked.UnixNano(), entered.UnixNano()); err != nil {
		return err
	}
	if c.hold > 0 {
		time.Sleep(c.hold)
	}
	_, err := fmt.Fprintf(log, "end %d %d %d %d\n", c.id, k, fence, time.Now().UnixNano())
	return err
}

// sleep waits for d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
