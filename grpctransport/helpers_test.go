package grpctransport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dmutex/dmutex/grpctransport/internal/wirepb"
)

// listeners opens n listeners on free loopback ports and returns them with
// their addresses.
func listeners(t testing.TB, n int) ([]net.Listener, []string) {
	t.Helper()
	ls := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range ls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ls[i], addrs[i] = l, l.Addr().String()
	}
	return ls, addrs
}

// fastRetry keeps reconnection quick in tests.
var fastRetry = WithBackoff(10*time.Millisecond, 100*time.Millisecond)

// quiet drops the log records of tests that do not look at them.
var quiet = WithLogger(slog.New(slog.DiscardHandler))

// startTransports starts n transports on free loopback ports; extra(id)
// gives peer id's options beyond a listener and fast retries. They are
// closed at the end of the test, if the test has not closed them.
func startTransports(t testing.TB, n int, extra func(id int) []Option) []*Transport {
	t.Helper()
	ls, addrs := listeners(t, n)
	trs := make([]*Transport, n)
	for i := range trs {
		opts := append([]Option{WithListener(ls[i]), fastRetry, quiet}, extra(i)...)
		tr, err := New(i, addrs, opts...)
		require.NoError(t, err)
		trs[i] = tr
		t.Cleanup(func() { require.NoError(t, tr.Close()) })
	}
	return trs
}

func insecureOpts(int) []Option { return []Option{Insecure()} }

// logBuffer is a concurrency-safe buffer for a test's slog output.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// rawCodec sends and receives frames as raw bytes, so a test can put any
// bytes on a stream. It keeps gRPC's name for protobuf, so the server
// decodes what it receives as protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// refusal opens a Link.Connect stream to addr over creds (insecure if
// nil), sends the raw frames on it, and returns the error that ends it, or
// nil if the server ended it normally.
func refusal(t *testing.T, addr string, creds credentials.TransportCredentials, frames ...[]byte) error {
	t.Helper()
	return openRaw(t, addr, creds, false, frames...)
}

// accepted opens a stream as refusal does and reports whether the server
// acknowledged its hello.
func accepted(t *testing.T, addr string, creds credentials.TransportCredentials, hello []byte) bool {
	t.Helper()
	return openRaw(t, addr, creds, true, hello) == errAcked
}

var errAcked = errors.New("acknowledged")

func openRaw(t *testing.T, addr string, creds credentials.TransportCredentials, stopAtAck bool, frames ...[]byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
		"/dmutex.wire.v1.Link/Connect", grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}
	for _, f := range frames {
		if err := s.SendMsg(&f); err != nil {
			break // the server already closed it; RecvMsg says why
		}
	}
	for {
		var b []byte
		if err := s.RecvMsg(&b); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if stopAtAck {
			return errAcked
		}
	}
}

// fakeLink plays a peer's Link service at its configured address, as far
// as a transport that dials it sees: it answers each stream's hello with
// an acknowledgement carrying the epoch it holds, as a transport does,
// reads the frames and drops them, and ends the stream when its epoch
// changes (a restart), so that the dialing transport opens another one.
type fakeLink struct {
	wirepb.UnimplementedLinkServer
	epoch *atomic.Uint64
}

func (f fakeLink) Connect(stream wirepb.Link_ConnectServer) error {
	fr, err := stream.Recv()
	if err != nil {
		return err
	}
	e := f.epoch.Load()
	if err := stream.Send(&wirepb.Ack{Seq: fr.GetHello().GetFirstSeq() - 1, Epoch: e}); err != nil {
		return err
	}
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	for f.epoch.Load() == e {
		select {
		case <-stream.Context().Done():
			return nil
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// serveFakeLink serves a fakeLink with epoch on l until the test ends.
func serveFakeLink(t testing.TB, l net.Listener, epoch *atomic.Uint64) *grpc.Server {
	t.Helper()
	srv := grpc.NewServer()
	wirepb.RegisterLinkServer(srv, fakeLink{epoch: epoch})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return srv
}
