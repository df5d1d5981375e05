package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// runPeer runs peer id of the comma-separated peers with args after the
// common ones, and sends its exit code and output on the channel it
// returns.
func runPeer(id int, peers, logPath string, args ...string) <-chan peerResult {
	ch := make(chan peerResult, 1)
	go func() {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"-id", fmt.Sprint(id), "-peers", peers, "-log", logPath, "-insecure"}, args...), &stdout, &stderr)
		ch <- peerResult{code, stdout.String() + stderr.String()}
	}()
	return ch
}

type peerResult struct {
	code int
	out  string
}

// TestFloorsApart gives two peers separate -state directories, one of
// them holding a fence of 2^48+10 (a store whose fences are nanosecond
// timestamps). Before, both waited until -timeout with nothing said:
// each refused the other's messages. Now both exit at the first stream
// with an error naming both peers and both floors.
func TestFloorsApart(t *testing.T) {
	const high = 1<<48 + 10
	dirs := []string{t.TempDir(), t.TempDir()}
	require.NoError(t, os.WriteFile(filepath.Join(dirs[0], "peer-0.fence"), fmt.Appendf(nil, "%d\n", uint64(high)), 0o644))
	logPath := filepath.Join(t.TempDir(), "shared.log")
	peers := strings.Join(freeAddrs(t, 2), ",")
	start := time.Now()
	var res [2]<-chan peerResult
	for id := range 2 {
		res[id] = runPeer(id, peers, logPath, "-alg", "ricart-agrawala", "-entries", "3", "-state", dirs[id], "-timeout", "1m")
	}
	for id := range 2 {
		r := <-res[id]
		require.Equal(t, 1, r.code, "peer %d: %s", id, r.out)
		lines := strings.Split(strings.TrimSpace(r.out), "\n")
		last := lines[len(lines)-1]
		assert.Contains(t, last, fmt.Sprintf("dmutexpeer: peer %d: waiting for the other peers: ", id))
		assert.Contains(t, last, fmt.Sprintf("fence floors too far apart: peer 0 was given floor %d and peer 1 floor 0", uint64(high)))
	}
	assert.Less(t, time.Since(start), 30*time.Second, "the peers waited for their timeout")
}

// TestForgedHello has a raw gRPC client send peer 1 of an -insecure
// cluster, before peer 0 starts, a hello claiming to be peer 0 with
// n = 99 and no algorithm. Before, peer 1 exited with "cluster mismatch"
// and peer 0 waited until its timeout. Now peer 1 refuses the stream,
// warns, and the run goes on: both peers make every entry.
func TestForgedHello(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "shared.log")
	addrs := freeAddrs(t, 2)
	peers := strings.Join(addrs, ",")
	args := []string{"-alg", "ricart-agrawala", "-entries", "20", "-timeout", "1m"}
	r1 := runPeer(1, peers, logPath, args...)

	// Frame{hello: Hello{from: 0, to: 1, n: 99, epoch: 5, first_seq: 1}}
	var hello []byte
	for _, f := range [][2]uint64{{1, 0}, {2, 1}, {3, 99}, {4, 5}, {5, 1}} {
		hello = protowire.AppendTag(hello, protowire.Number(f[0]), protowire.VarintType)
		hello = protowire.AppendVarint(hello, f[1])
	}
	frame := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), hello)
	conn, err := grpc.NewClient(addrs[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var refused error
	for refused == nil || status.Code(refused) == codes.Unavailable {
		require.NoError(t, ctx.Err(), "peer 1 never answered the forged hello: %v", refused)
		refused = sendRaw(ctx, conn, frame)
		if status.Code(refused) == codes.Unavailable {
			time.Sleep(20 * time.Millisecond) // peer 1 is not listening yet
		}
	}
	require.Equal(t, codes.FailedPrecondition, status.Code(refused), "%v", refused)
	assert.Contains(t, status.Convert(refused).Message(), "cluster mismatch: peer 0 runs an unnamed algorithm with n=99")

	r0 := runPeer(0, peers, logPath, args...)
	for id, ch := range []<-chan peerResult{r0, r1} {
		r := <-ch
		require.Equal(t, 0, r.code, "peer %d: %s", id, r.out)
		assert.Contains(t, r.out, "entries=20 ", "peer %d", id)
	}
	checkLog(t, logPath, 2, 20)
}

// sendRaw opens a Link.Connect stream on conn, sends frame, and returns
// the error that ends the stream.
func sendRaw(ctx context.Context, conn *grpc.ClientConn, frame []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
		"/dmutex.wire.v1.Link/Connect", grpc.ForceCodec(rawBytes{}))
	if err != nil {
		return err
	}
	if err := s.SendMsg(frame); err != nil {
		return err
	}
	var b []byte
	for {
		if err := s.RecvMsg(&b); err != nil {
			return err
		}
	}
}

// rawBytes is a gRPC codec that sends a []byte as it is.
type rawBytes struct{}

func (rawBytes) Marshal(v any) ([]byte, error) { return v.([]byte), nil }

func (rawBytes) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}

func (rawBytes) Name() string { return "proto" }
