package grpctransport

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dmutex/dmutex/grpctransport/internal/wirepb"
)

// BenchmarkRawGRPC measures the floors that BenchmarkGRPC is held
// against: plain gRPC on loopback, with default settings and no
// transport code of this package. pingpong sends one small message on a
// bidirectional stream and waits for one back, the shape of a centralized
// entry's wait; fanout/k=K sends one message to each of K servers and
// waits for one answer from each, the shape of a Ricart-Agrawala entry at
// n = K+1.
func BenchmarkRawGRPC(b *testing.B) {
	b.Run("pingpong", func(b *testing.B) { benchFanout(b, 1) })
	for _, k := range []int{2, 7} {
		b.Run(fmt.Sprintf("fanout/k=%d", k), func(b *testing.B) { benchFanout(b, k) })
	}
}

func benchFanout(b *testing.B, k int) {
	streams := make([]wirepb.Link_ConnectClient, k)
	for i := range k {
		streams[i] = echoStream(b)
	}
	f := &wirepb.Frame{Seq: 1, Msg: &wirepb.Message{Kind: wirepb.Kind_KIND_REQUEST, From: 1, Ts: 1, Ref: 2, Fence: 3}}
	round := func() {
		for _, s := range streams {
			if err := s.Send(f); err != nil {
				b.Fatal(err)
			}
		}
		for _, s := range streams {
			if _, err := s.Recv(); err != nil {
				b.Fatal(err)
			}
		}
	}
	round() // connect everything first
	b.ReportAllocs()
	m := startMeter()
	b.ResetTimer()
	for range b.N {
		round()
	}
	b.StopTimer()
	m.report(b)
	b.ReportMetric(float64(2*k), "msgs/op")
}

// echoServer answers every frame with one acknowledgement.
type echoServer struct{ wirepb.UnimplementedLinkServer }

func (echoServer) Connect(s wirepb.Link_ConnectServer) error {
	for {
		f, err := s.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Send(&wirepb.Ack{Seq: f.GetSeq()}); err != nil {
			return err
		}
	}
}

// echoStream starts an echo server on loopback and opens a stream to it;
// the test's cleanup closes both.
func echoStream(b *testing.B) wirepb.Link_ConnectClient {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	srv := grpc.NewServer()
	wirepb.RegisterLinkServer(srv, echoServer{})
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(l) }()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := wirepb.NewLinkClient(conn).Connect(ctx)
	require.NoError(b, err)
	b.Cleanup(func() {
		cancel()
		_ = conn.Close()
		srv.Stop()
		<-served
	})
	return s
}
