package grpctransport

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// HealthService is the service name, besides "" for the whole server,
// under which a Transport reports its health on the standard gRPC health
// service (grpc.health.v1.Health): the peer-to-peer link service.
const HealthService = "dmutex.wire.v1.Link"

// serveHealth registers the standard health service on srv, SERVING for
// the server and for HealthService until Close, and returns it for Close
// to shut down. With WithTLS a health client needs a certificate from the
// cluster's authority, as any client of the transport does. Watch streams
// end when ctx does, so that a monitor watching the peer does not hold up
// Close for its grace period.
func serveHealth(ctx context.Context, srv *grpc.Server) *health.Server {
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus(HealthService, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, healthServer{Server: h, ctx: ctx})
	return h
}

// healthServer is the health service with Watch streams bounded by ctx.
type healthServer struct {
	*health.Server
	ctx context.Context
}

func (h healthServer) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	stop := context.AfterFunc(h.ctx, cancel)
	defer stop()
	return h.Server.Watch(req, boundStream{stream, ctx})
}

// boundStream is a Watch stream whose context ends early.
type boundStream struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (s boundStream) Context() context.Context { return s.ctx }
