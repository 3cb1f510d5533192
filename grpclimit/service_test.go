package grpclimit

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The tests talk to a real gRPC server on a 127.0.0.1 TCP listener. Its
// service, test.Echo, is registered by hand (no generated code): Say
// echoes a string, Chat echoes every message of a bidirectional stream.
// A handler can be made to block until the test lets it go, and can be
// given an error to return.

const (
	methodSay  = "/test.Echo/Say"
	methodChat = "/test.Echo/Chat"
	methodPing = "/test.Other/Ping"
)

type echo struct {
	mu      sync.Mutex
	calls   int
	gate    chan struct{} // if not nil, Say waits for it to be closed or sent to
	entered chan struct{} // if not nil, Say signals it on entry
	fail    error         // if not nil, Say returns it
	// work, if not nil, runs in Say after the gate; its error is returned.
	work func(ctx context.Context, in string) error
}

func (e *echo) say(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	e.mu.Lock()
	e.calls++
	gate, entered, fail, work := e.gate, e.entered, e.fail, e.work
	e.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if fail != nil {
		return nil, fail
	}
	if work != nil {
		if err := work(ctx, in.GetValue()); err != nil {
			return nil, err
		}
	}
	return in, nil
}

func (e *echo) Calls() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls
}

func unaryHandler(method string) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		e := srv.(*echo)
		if ic == nil {
			return e.say(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, func(ctx context.Context, req any) (any, error) {
			return e.say(ctx, req.(*wrapperspb.StringValue))
		})
	}
}

func chatHandler(srv any, ss grpc.ServerStream) error {
	for {
		m := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := ss.SendMsg(m); err != nil {
			return err
		}
	}
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Say", Handler: unaryHandler(methodSay)}},
	Streams: []grpc.StreamDesc{{
		StreamName: "Chat", Handler: chatHandler, ServerStreams: true, ClientStreams: true,
	}},
}

var otherDesc = grpc.ServiceDesc{
	ServiceName: "test.Other",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Ping", Handler: unaryHandler(methodPing)}},
}

// serve starts a server with opts on 127.0.0.1 and returns a connection to
// it made with dial, and the service.
func serve(t *testing.T, opts []grpc.ServerOption, dial ...grpc.DialOption) (*grpc.ClientConn, *echo) {
	t.Helper()
	return serveDesc(t, opts, &echoDesc, dial...)
}

// serveDesc is serve with desc in place of test.Echo.
func serveDesc(t *testing.T, opts []grpc.ServerOption, desc *grpc.ServiceDesc, dial ...grpc.DialOption) (*grpc.ClientConn, *echo) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	e := &echo{}
	srv.RegisterService(desc, e)
	srv.RegisterService(&otherDesc, e)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, e
}

func serverOpts(l *ServerLimit) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.Unary), grpc.ChainStreamInterceptor(l.Stream)}
}

func say(ctx context.Context, conn *grpc.ClientConn, method string, opts ...grpc.CallOption) error {
	out := new(wrapperspb.StringValue)
	return conn.Invoke(ctx, method, wrapperspb.String("hi"), out, opts...)
}

func chat(ctx context.Context, conn *grpc.ClientConn) (grpc.ClientStream, error) {
	return conn.NewStream(ctx, &echoDesc.Streams[0], methodChat)
}

// testCtx is a context for one call: long enough for a loaded machine,
// short enough that a hang fails the test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
