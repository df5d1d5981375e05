package grpctransport

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"

	"github.com/dmutex/dmutex"
)

// An Option configures a Transport. The zero Option is invalid.
type Option struct {
	name  string
	apply func(*options) error
}

type options struct {
	insecure        bool
	tls             *tls.Config
	lis             net.Listener
	log             *slog.Logger // WithLogger
	logSet          bool         // WithLogger was given, maybe with nil
	minBackoff      time.Duration
	maxBackoff      time.Duration
	maxFrame        int
	alg, algOptions string // WithCluster
	floor           uint64 // WithFenceFloor

	noCertCheck bool                // withoutCertificateCheck: tests that play an impostor
	serverOpts  []grpc.ServerOption // WithServerOptions
	dialOpts    []grpc.DialOption   // WithDialOptions
	maxQueue    int                 // WithMaxQueue; 0 means DefaultMaxQueue

	keepalive, keepaliveTimeout time.Duration // WithKeepalive
}

// Insecure runs the transport without transport credentials: no
// encryption, and a peer's claimed id is believed without proof. It is for
// tests and for networks that are trusted as a whole; New refuses to start
// without either Insecure or WithTLS.
func Insecure() Option {
	return Option{name: "Insecure", apply: func(o *options) error { o.insecure = true; return nil }}
}

// WithTLS secures every connection with mutual TLS. cfg holds this peer's
// certificate (Certificates) and the pool of the authority that signed the
// cluster's certificates (RootCAs; ClientCAs too if it differs). Peer i's
// certificate must name it with the DNS subject alternative name
// PeerName(i): a dialing peer checks that the peer it reached is the one
// it meant, and a receiving peer refuses a stream whose claimed sender id
// is not the name on the client certificate. New does not modify cfg.
func WithTLS(cfg *tls.Config) Option {
	return Option{name: "WithTLS", apply: func(o *options) error {
		if cfg == nil {
			return fmt.Errorf("%w: WithTLS(nil)", dmutex.ErrInvalidConfig)
		}
		if len(cfg.Certificates) == 0 && cfg.GetCertificate == nil {
			return fmt.Errorf("%w: WithTLS config has no certificate of this peer", dmutex.ErrInvalidConfig)
		}
		if cfg.RootCAs == nil {
			return fmt.Errorf("%w: WithTLS config has no RootCAs to verify the other peers", dmutex.ErrInvalidConfig)
		}
		o.tls = cfg
		return nil
	}}
}

// WithListener makes the transport serve on lis instead of listening on its
// own address, for callers that must know the port before the transport
// starts (a test picking free ports, socket activation). The transport
// closes lis in Close.
func WithListener(lis net.Listener) Option {
	return Option{name: "WithListener", apply: func(o *options) error {
		if lis == nil {
			return fmt.Errorf("%w: WithListener(nil)", dmutex.ErrInvalidConfig)
		}
		o.lis = lis
		return nil
	}}
}

// WithLogger sends the transport's log records to l instead of
// slog.Default(); WithLogger(nil), like a logger whose handler is
// slog.DiscardHandler, turns them off. The transport logs at warning
// level or above only what an operator must act on: a refused TLS
// handshake, with its reason (one that repeats is warned about again
// only now and then), a refused or malformed stream, a full queue, a
// transport that gives up. Broken links, reconnections and the hang-ups
// of peers that stop are logged at debug level, so a cluster that shuts
// down cleanly logs nothing at info level or above.
func WithLogger(l *slog.Logger) Option {
	return Option{name: "WithLogger", apply: func(o *options) error {
		o.log, o.logSet = l, true
		return nil
	}}
}

// WithBackoff sets the delays between attempts to reach a peer that is
// down: the first retry waits about min, each further one longer, up to
// max. The defaults are 50ms and 2s.
func WithBackoff(min, max time.Duration) Option {
	return Option{name: "WithBackoff", apply: func(o *options) error {
		if min <= 0 || max < min {
			return fmt.Errorf("%w: WithBackoff(%v, %v), want 0 < min <= max", dmutex.ErrInvalidConfig, min, max)
		}
		o.minBackoff, o.maxBackoff = min, max
		return nil
	}}
}

// MinKeepalive is the shortest keepalive interval WithKeepalive accepts:
// gRPC's client raises any shorter one to it.
const MinKeepalive = 10 * time.Second

// WithKeepalive sets how often the transport pings a peer whose connection
// is idle (interval, at least MinKeepalive) and how long it waits for the
// answer (timeout, positive) before it takes the connection down, and the
// peer with it (see Reachable). The defaults are 10 s and 5 s. A peer
// whose process dies closes its connections, which shows at once; the
// pings find a peer that hangs or a network that stops carrying packets.
// Every peer accepts pings as often as every 5 s, so peers of one cluster
// may be given different intervals.
func WithKeepalive(interval, timeout time.Duration) Option {
	return Option{name: "WithKeepalive", apply: func(o *options) error {
		if interval < MinKeepalive || timeout <= 0 {
			return fmt.Errorf("%w: WithKeepalive(%v, %v), want interval >= %v and a positive timeout", dmutex.ErrInvalidConfig, interval, timeout, MinKeepalive)
		}
		o.keepalive, o.keepaliveTimeout = interval, timeout
		return nil
	}}
}

// WithMaxFrameSize sets the largest encoded frame the transport accepts,
// in bytes; DefaultMaxFrameSize otherwise. A larger frame closes the
// stream that carried it.
func WithMaxFrameSize(bytes int) Option {
	return Option{name: "WithMaxFrameSize", apply: func(o *options) error {
		if bytes < 64 {
			return fmt.Errorf("%w: WithMaxFrameSize(%d), want at least 64", dmutex.ErrInvalidConfig, bytes)
		}
		o.maxFrame = bytes
		return nil
	}}
}

// WithCluster names the algorithm that this transport's peer runs, and
// describes its options in settings, a string of the caller's choosing
// (such as "implicit-replies"; empty for none). Every stream opens with
// both and the cluster size, and a transport refuses a stream whose
// sender differs in any of the three: both ends then give up, with an
// error naming both sides that Barrier and Err return (under Insecure, a
// stream's claimed sender is not proven, so a refused stream alone does
// not make the receiver give up; see Err). Without
// WithCluster both are sent empty, which matches only peers that do not
// give it either.
func WithCluster(alg dmutex.Algorithm, settings string) Option {
	return Option{name: "WithCluster", apply: func(o *options) error {
		if a, err := dmutex.ParseAlgorithm(alg.String()); err != nil || a != alg {
			return fmt.Errorf("%w: WithCluster(%v): unknown algorithm", dmutex.ErrInvalidConfig, alg)
		}
		o.alg, o.algOptions = alg.String(), settings
		return nil
	}}
}

// WithFenceFloor announces, in the hello that opens every stream, the
// fence floor that this transport's peer was given with
// dmutex.WithFenceFloor; 0 without it. A transport refuses a stream whose
// sender's floor lies more than dmutex.MaxFloorSpread from its own, as
// it refuses another cluster (see WithCluster): the peer with the lower
// floor would refuse every message of the other, so no Lock could end.
// Both ends then give up with an error naming both peers and both floors.
// dmutex.NewPeer refuses a transport whose floor is not the peer's own.
// A floor above dmutex.MaxFenceFloor is an error.
func WithFenceFloor(floor uint64) Option {
	return Option{name: "WithFenceFloor", apply: func(o *options) error {
		if floor > dmutex.MaxFenceFloor {
			return fmt.Errorf("%w: WithFenceFloor(%d): want at most %d (dmutex.MaxFenceFloor)", dmutex.ErrInvalidConfig, floor, uint64(dmutex.MaxFenceFloor))
		}
		o.floor = floor
		return nil
	}}
}

// LoadTLSConfig reads a peer's PEM certificate and key and the PEM
// certificate of the cluster's authority, and returns a config for
// WithTLS.
func LoadTLSConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("dmutex: load certificate: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("dmutex: load authority: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("dmutex: load authority: no PEM certificate in %s", caFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS13}, nil
}

// PeerName returns the name that peer id's certificate must carry as a DNS
// subject alternative name, such as "peer-3".
func PeerName(id int) string { return fmt.Sprintf("peer-%d", id) }
