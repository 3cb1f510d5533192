// Command grpcserver runs a gRPC service behind rate-limit rules and calls
// it from two clients: one that sends as fast as it can and meets
// ResourceExhausted, and one whose interceptor (grpclimit.Client) holds its
// calls for as long as the server's RetryInfo says and then keeps to the
// server's published rate with a limiter of its own.
//
// The service is gRPC's own health service on a loopback listener, limited
// to 4 calls a second per client address, in bursts of up to 2. The
// program prints what each call got, in real time.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
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

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "grpcserver:", err)
		os.Exit(1)
	}
}

const check = "/grpc.health.v1.Health/Check"

func run(w io.Writer) error {
	rules, err := ratelimit.ParseRules(`
		/grpc.health.v1.Health/Check: 4/s burst 2 per ip as check
		*:                            1000/s      global as all
	`)
	if err != nil {
		return err
	}
	limit := grpclimit.RulesLimit(rules)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(limit.Unary),
		grpc.ChainStreamInterceptor(limit.Stream),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go srv.Serve(ln)
	defer srv.Stop()

	fmt.Fprintln(w, "Rules: "+check)
	fmt.Fprintln(w, "       4/s per client address, bursts of 2.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "A plain client, 5 calls back to back:")
	plain, err := dial(ln.Addr().String())
	if err != nil {
		return err
	}
	defer plain.Close()
	calls(w, healthpb.NewHealthClient(plain), 5)

	fmt.Fprintln(w)
	fmt.Fprintln(w, "At once, a client with grpclimit.Client and its own limiter")
	fmt.Fprintln(w, "of 3/s, 5 calls back to back:")
	own, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(3), 1)
	if err != nil {
		return err
	}
	pacer := &grpclimit.Client{Limiter: own, MaxPause: 5 * time.Second}
	paced, err := dial(ln.Addr().String(),
		grpc.WithChainUnaryInterceptor(pacer.Unary),
		grpc.WithChainStreamInterceptor(pacer.Stream))
	if err != nil {
		return err
	}
	defer paced.Close()
	calls(w, healthpb.NewHealthClient(paced), 5)
	fmt.Fprintln(w, "The plain client had spent the allowance: the first call was")
	fmt.Fprintln(w, "refused; the client held the next for the RetryInfo's delay,")
	fmt.Fprintln(w, "then its limiter kept it under the server's rate.")
	return nil
}

func dial(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	return grpc.NewClient(addr, opts...)
}

// calls makes n health checks one after the other and prints each outcome.
func calls(w io.Writer, c healthpb.HealthClient, n int) {
	start := time.Now()
	for i := 1; i <= n; i++ {
		var md metadata.MD
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		cancel()
		at := time.Since(start).Seconds()
		st := status.Convert(err)
		line := fmt.Sprintf("  t=%.2fs  call %d  %-17v", at, i, st.Code())
		if rl := md.Get("ratelimit"); len(rl) > 0 {
			line += "  " + rl[0]
		}
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay := ri.GetRetryDelay().AsDuration().Round(time.Millisecond)
				line += fmt.Sprintf("  retry in %v", delay)
			}
		}
		fmt.Fprintln(w, line)
	}
}
