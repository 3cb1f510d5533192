package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/grpclimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A gRPC server allowing each client address two calls a second, in bursts
// of two; the third call is refused with ResourceExhausted and a RetryInfo
// saying when to come back. The service is gRPC's own health service, on a
// loopback listener.
func ExampleRateLimit() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(2), 2, ratelimit.WithClock(clock))
	l := grpclimit.RateLimit(lim, grpclimit.WithPolicy("api", time.Second))

	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(l.Unary), grpc.ChainStreamInterceptor(l.Stream))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(ln)
	defer srv.Stop()

	conn, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	for range 3 {
		var md metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		st := status.Convert(err)
		fmt.Printf("%v ratelimit: %s\n", st.Code(), md.Get("ratelimit")[0])
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Println("  retry after", d.GetRetryDelay().AsDuration())
			case *errdetails.QuotaFailure:
				fmt.Println("  violated", d.GetViolations()[0].GetQuotaId())
			}
		}
	}
	// Output:
	// OK ratelimit: "api";r=1;t=1
	// OK ratelimit: "api";r=0;t=1
	// ResourceExhausted ratelimit: "api";r=0;t=1
	//   retry after 500ms
	//   violated api
}

// A client that holds its calls after a server's RetryInfo: the second
// call waits until the server's limit allows it, rather than being sent
// and refused.
func ExampleClient() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1, ratelimit.WithClock(clock))
	l := grpclimit.RateLimit(lim)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(l.Unary))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(ln)
	defer srv.Stop()

	c := &grpclimit.Client{Clock: clock, MaxPause: time.Minute}
	conn, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(c.Unary), grpc.WithChainStreamInterceptor(c.Stream))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	check := func() error {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err
	}

	fmt.Println("first:", status.Code(check()))
	fmt.Println("second:", status.Code(check()))
	until, _ := c.PausedUntil("/grpc.health.v1.Health/Check")
	fmt.Println("held for", until.Sub(clock.Now()))

	done := make(chan error)
	go func() { done <- check() }()
	for clock.Timers() == 0 { // the third call is waiting out the pause
		time.Sleep(time.Millisecond)
	}
	clock.Advance(time.Second)
	fmt.Println("third, after the pause:", status.Code(<-done))
	// Output:
	// first: OK
	// second: ResourceExhausted
	// held for 1s
	// third, after the pause: OK
}

// A call charged an estimate when it comes in and settled at its actual
// cost once it is done: here every health check is estimated at 10
// events and settled at 1 by an interceptor inside the limit (a real
// handler settles at the rows it read, the tokens it used). The header
// metadata shows the charge at admission; the trailer, the state after
// the settlement.
func ExampleSettle() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 20, ratelimit.WithClock(clock))
	l := grpclimit.RateLimit(lim, grpclimit.WithCost(func(context.Context, string) int { return 10 }))
	settle := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err == nil {
			err = grpclimit.Settle(ctx, 1)
		}
		return resp, err
	}

	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(l.Unary, settle))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(ln)
	defer srv.Stop()

	conn, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	for range 2 {
		var header, trailer metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		fmt.Printf("%v header: %s trailer: %s\n", status.Code(err), header.Get("ratelimit")[0], trailer.Get("ratelimit")[0])
	}
	// Output:
	// OK header: "default";r=10;t=1 trailer: "default";r=19;t=1
	// OK header: "default";r=9;t=2 trailer: "default";r=18;t=1
}
