package grpctransport

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/dmutex/dmutex"
)

// TestInterceptorsCalled gives both transports a server and a client
// stream interceptor, as an OpenTelemetry user would, and checks that
// each sees the link streams that carry a message both ways.
func TestInterceptorsCalled(t *testing.T) {
	var serverCalls, clientCalls [2]atomic.Int32
	var methods [2]atomic.Value
	trs := startTransports(t, 2, func(id int) []Option {
		server := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			serverCalls[id].Add(1)
			methods[id].Store(info.FullMethod)
			return h(srv, ss)
		}
		client := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, s grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			clientCalls[id].Add(1)
			return s(ctx, desc, cc, method, opts...)
		}
		return []Option{Insecure(),
			WithServerOptions(grpc.ChainStreamInterceptor(server)),
			WithDialOptions(grpc.WithChainStreamInterceptor(client))}
	})
	require.NoError(t, trs[0].Send(1, msg(0, 1, 1)))
	require.NoError(t, trs[1].Send(0, msg(1, 0, 1)))
	receive(t, trs[1], 1, 10*time.Second)
	receive(t, trs[0], 1, 10*time.Second)
	for id := range 2 {
		assert.Positive(t, serverCalls[id].Load(), "peer %d's server interceptor", id)
		assert.Positive(t, clientCalls[id].Load(), "peer %d's client interceptor", id)
		assert.Equal(t, "/dmutex.wire.v1.Link/Connect", methods[id].Load(), "peer %d", id)
	}
}

func TestGRPCOptionsRefuseNil(t *testing.T) {
	_, err := New(0, []string{"127.0.0.1:1"}, Insecure(), WithServerOptions(nil))
	require.ErrorIs(t, err, dmutex.ErrInvalidConfig)
	_, err = New(0, []string{"127.0.0.1:1"}, Insecure(), WithDialOptions(grpc.WithUserAgent("x"), nil))
	require.ErrorIs(t, err, dmutex.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "WithDialOptions")
}
