package grpctransport

import (
	"fmt"
	"slices"

	"google.golang.org/grpc"

	"github.com/dmutex/dmutex"
)

// WithServerOptions adds gRPC server options to the transport's server,
// such as interceptors (grpc.ChainStreamInterceptor) or an OpenTelemetry
// stats handler (grpc.StatsHandler). They are applied before the
// transport's own, so they cannot replace its credentials, codec, message
// size limit, keepalive policy or flow-control windows. Several calls add
// up.
func WithServerOptions(opts ...grpc.ServerOption) Option {
	return Option{name: "WithServerOptions", apply: func(o *options) error {
		if slices.Contains(opts, nil) {
			return fmt.Errorf("%w: WithServerOptions with a nil option", dmutex.ErrInvalidConfig)
		}
		o.serverOpts = append(o.serverOpts, opts...)
		return nil
	}}
}

// WithDialOptions adds gRPC dial options to the transport's connections
// to the other peers, such as client interceptors
// (grpc.WithChainStreamInterceptor) or grpc.WithStatsHandler. They are
// applied before the transport's own, so they cannot replace its
// credentials, backoff, keepalive or flow-control windows. Several calls
// add up.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return Option{name: "WithDialOptions", apply: func(o *options) error {
		if slices.Contains(opts, nil) {
			return fmt.Errorf("%w: WithDialOptions with a nil option", dmutex.ErrInvalidConfig)
		}
		o.dialOpts = append(o.dialOpts, opts...)
		return nil
	}}
}
