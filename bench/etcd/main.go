// Command etcdbench measures, in one run on one machine, etcd's lock and
// dmutex's over gRPC side by side: an embedded single-node etcd on
// loopback (client/v3/concurrency.Mutex), and dmutex clusters of three
// peers in this process, each peer on its own grpctransport on loopback.
//
// For each it reports the median of uncontended Lock+Unlock calls (one
// caller at a time; for dmutex the peers take turns, as BenchmarkGRPC
// does) and the entries per second that 8 contenders make together (for
// dmutex, spread over the three peers). It then prints dmutex's ratios to
// etcd against issue 15's targets.
//
// It lives in a module of its own so that the library's go.mod does not
// carry etcd's dependencies. Run it from this folder:
//
//	go run . [-rounds 300] [-duration 3s] [-contenders 8]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/dmutex/dmutex"
	"github.com/dmutex/dmutex/grpctransport"
)

func main() {
	var c config
	flag.IntVar(&c.rounds, "rounds", 300, "uncontended Lock+Unlock calls per system")
	flag.DurationVar(&c.duration, "duration", 3*time.Second, "length of each contended run")
	flag.IntVar(&c.contenders, "contenders", 8, "goroutines contending in the contended runs")
	flag.Parse()
	if c.rounds < 1 || c.duration <= 0 || c.contenders < 1 {
		fmt.Fprintln(os.Stderr, "etcdbench: -rounds and -contenders must be at least 1, -duration positive")
		os.Exit(2)
	}
	if err := run(os.Stdout, c); err != nil {
		fmt.Fprintln(os.Stderr, "etcdbench:", err)
		os.Exit(1)
	}
}

type config struct {
	rounds     int
	duration   time.Duration
	contenders int
}

// A result is one system's two figures.
type result struct {
	name       string
	median     time.Duration // uncontended Lock+Unlock
	perSecond  float64       // entries/s with c.contenders contenders
	minShare   int           // fewest entries by one contender
	maxShare   int           // most entries by one contender
	uncontTgt  float64       // target speed-up over etcd, uncontended (0: none)
	contendTgt float64       // target speed-up over etcd, contended
}

// A locker is one contender's view of a lock: etcd's or a dmutex peer.
type locker interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
}

func run(w io.Writer, c config) error {
	ctx := context.Background()
	start := time.Now()
	fmt.Fprintf(w, "etcdbench: %s; %d uncontended rounds, %d contenders for %v each\n",
		start.UTC().Format("2006-01-02 15:04 MST"), c.rounds, c.contenders, c.duration)

	etcdRes, err := benchEtcd(ctx, c)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	results := []result{etcdRes}
	for _, tt := range []struct {
		alg               dmutex.Algorithm
		uncont, contended float64
	}{
		{dmutex.RicartAgrawala, 6, 100},
		{dmutex.Centralized, 10, 100},
		{dmutex.SuzukiKasami, 0, 100},
	} {
		r, err := benchDmutex(ctx, c, tt.alg, 3)
		if err != nil {
			return fmt.Errorf("%v: %w", tt.alg, err)
		}
		r.uncontTgt, r.contendTgt = tt.uncont, tt.contended
		results = append(results, r)
	}
	report(w, c, results)
	return nil
}

func report(w io.Writer, c config, results []result) {
	etcd := results[0]
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "system\tuncontended median\tvs etcd\ttarget\tentries/s, %d contenders\tvs etcd\ttarget\tper contender min-max\t\n", c.contenders)
	for _, r := range results {
		if r.name == etcd.name {
			fmt.Fprintf(tw, "%s\t%v\t\t\t%.0f\t\t\t%d-%d\t\n", r.name, r.median.Round(time.Microsecond), r.perSecond, r.minShare, r.maxShare)
			continue
		}
		up := float64(etcd.median) / float64(r.median)
		through := r.perSecond / etcd.perSecond
		fmt.Fprintf(tw, "%s\t%v\t%.1fx\t%s\t%.0f\t%.0fx\t%s\t%d-%d\t\n", r.name, r.median.Round(time.Microsecond),
			up, verdict(up, r.uncontTgt), r.perSecond, through, verdict(through, r.contendTgt), r.minShare, r.maxShare)
	}
	_ = tw.Flush()
	fmt.Fprint(w, `
What etcd gives that dmutex does not: etcd keeps the lock in a replicated,
durable log (Raft), so a lock survives the crash of a minority of its
servers and of any client; its locks are tied to leases, so a holder that
dies or is cut off loses the lock when its lease expires; and clients can
come and go without a fixed membership. dmutex's peers are a fixed set,
its state lives only in the peers' memory, and a crashed peer (a holder
above all) blocks the algorithms until the whole cluster is restarted.
This etcd is one node on loopback, the cheapest etcd can be; a real
deployment has three or five nodes and a disk fsync per write.
`)
}

// verdict says whether got meets target, or "-" when there is none.
func verdict(got, target float64) string {
	switch {
	case target == 0:
		return "-"
	case got >= target:
		return fmt.Sprintf(">=%gx met", target)
	}
	return fmt.Sprintf(">=%gx MISSED", target)
}

// measure runs the uncontended and the contended parts over lockers:
// lockers[i] serves round i of the uncontended part (taken in turn) and
// contender i of the contended part.
func measure(ctx context.Context, c config, name string, turns, contenders []locker) (result, error) {
	r := result{name: name}
	for _, l := range turns { // warm up every path
		if err := cycle(ctx, l); err != nil {
			return r, err
		}
	}
	times := make([]time.Duration, c.rounds)
	for i := range times {
		t0 := time.Now()
		if err := cycle(ctx, turns[i%len(turns)]); err != nil {
			return r, err
		}
		times[i] = time.Since(t0)
	}
	slices.Sort(times)
	r.median = times[len(times)/2]

	counts := make([]int, len(contenders))
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make([]error, len(contenders))
	t0 := time.Now()
	for i, l := range contenders {
		wg.Go(func() {
			for !stop.Load() {
				if err := cycle(ctx, l); err != nil {
					errs[i] = err
					return
				}
				counts[i]++
			}
		})
	}
	time.Sleep(c.duration)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	total := 0
	for _, k := range counts {
		total += k
	}
	r.perSecond = float64(total) / elapsed.Seconds()
	r.minShare, r.maxShare = slices.Min(counts), slices.Max(counts)
	return r, nil
}

func cycle(ctx context.Context, l locker) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := l.lock(ctx); err != nil {
		return err
	}
	return l.unlock(ctx)
}

// etcdLocker is a concurrency.Mutex on its own session.
type etcdLocker struct{ m *concurrency.Mutex }

func (l etcdLocker) lock(ctx context.Context) error   { return l.m.Lock(ctx) }
func (l etcdLocker) unlock(ctx context.Context) error { return l.m.Unlock(ctx) }

func benchEtcd(ctx context.Context, c config) (result, error) {
	dir, err := os.MkdirTemp("", "etcdbench")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	ports, err := freePorts(2)
	if err != nil {
		return result{}, err
	}
	curl := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	purl := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{curl}, []url.URL{curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{purl}, []url.URL{purl}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return result{}, err
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		return result{}, errors.New("embedded etcd not ready after a minute")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{curl.String()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return result{}, err
	}
	defer cli.Close()

	newLocker := func() (locker, func(), error) {
		s, err := concurrency.NewSession(cli)
		if err != nil {
			return nil, nil, err
		}
		return etcdLocker{concurrency.NewMutex(s, "/etcdbench/lock")}, func() { _ = s.Close() }, nil
	}
	one, closeOne, err := newLocker()
	if err != nil {
		return result{}, err
	}
	defer closeOne()
	contenders := make([]locker, c.contenders)
	for i := range contenders {
		l, closeL, err := newLocker()
		if err != nil {
			return result{}, err
		}
		defer closeL()
		contenders[i] = l
	}
	return measure(ctx, c, "etcd (1 node)", []locker{one}, contenders)
}

// peerLocker is a dmutex peer.
type peerLocker struct{ p *dmutex.Peer }

func (l peerLocker) lock(ctx context.Context) error { return l.p.LockContext(ctx) }
func (l peerLocker) unlock(context.Context) error   { l.p.Unlock(); return nil }

func benchDmutex(ctx context.Context, c config, alg dmutex.Algorithm, n int) (result, error) {
	ls := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range ls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return result{}, err
		}
		ls[i], addrs[i] = l, l.Addr().String()
	}
	quiet := slog.New(slog.DiscardHandler)
	peers := make([]locker, n)
	for i := range n {
		tr, err := grpctransport.New(i, addrs, grpctransport.WithListener(ls[i]), grpctransport.Insecure(),
			grpctransport.WithCluster(alg, ""), grpctransport.WithLogger(quiet))
		if err != nil {
			return result{}, err
		}
		p, err := dmutex.NewPeer(alg, i, n, tr)
		if err != nil {
			return result{}, errors.Join(err, tr.Close())
		}
		defer p.Close()
		peers[i] = peerLocker{p}
	}
	contenders := make([]locker, c.contenders)
	for i := range contenders {
		contenders[i] = peers[i%n]
	}
	return measure(ctx, c, fmt.Sprintf("dmutex %v n=%d", alg, n), peers, contenders)
}

// freePorts returns k loopback ports that were free a moment ago.
func freePorts(k int) ([]int, error) {
	ports := make([]int, k)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		defer l.Close()
	}
	return ports, nil
}
