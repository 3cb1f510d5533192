package grpclimit

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The forwarded address is read from metadata only when the connection
// comes from a trusted proxy: over a real loopback connection, a client
// sending x-forwarded-for is keyed by its own address unless 127.0.0.1 is
// trusted.
func TestClientIPOverLoopback(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trusted []string
		xff     []string
		want    string
	}{
		{"untrusted peer: header ignored", nil, []string{"203.0.113.9"}, "127.0.0.1"},
		{"other proxy trusted: header ignored", []string{"10.0.0.0/8"}, []string{"203.0.113.9"}, "127.0.0.1"},
		{"trusted peer", []string{"127.0.0.1"}, []string{"203.0.113.9"}, "203.0.113.9"},
		{"trusted peer, spoofed left part", []string{"127.0.0.0/8"}, []string{"198.51.100.1, 203.0.113.9"}, "203.0.113.9"},
		{"trusted chain", []string{"127.0.0.0/8", "10.0.0.0/8"}, []string{"203.0.113.9, 10.1.2.3"}, "203.0.113.9"},
		{"trusted peer, garbage", []string{"127.0.0.1"}, []string{"not an address"}, "127.0.0.1"},
		{"trusted peer, IPv6 grouped", []string{"127.0.0.1"}, []string{"2001:db8:1:2:3:4:5:6"}, "2001:db8:1:2::/64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefixes, err := httplimit.ParsePrefixes(tc.trusted...)
			if err != nil {
				t.Fatal(err)
			}
			keyOf, err := ClientIP(httplimit.IPConfig{TrustedProxies: prefixes})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var got []string
			record := func(ctx context.Context, m string) (string, error) {
				k, err := keyOf(ctx, m)
				mu.Lock()
				got = append(got, k)
				mu.Unlock()
				return k, err
			}
			lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(100), 100)
			conn, _ := serve(t, serverOpts(RateLimit(lim, WithKey(record))))
			ctx := metadata.AppendToOutgoingContext(testCtx(t), "x-forwarded-for", tc.xff[0])
			if err := say(ctx, conn, methodSay); err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Errorf("key %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := ClientIP(httplimit.IPConfig{Header: "X-Client"}); err == nil {
		t.Error("an unknown forwarded header was accepted")
	}
}

func TestKeyFuncs(t *testing.T) {
	base := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 4000}})
	ctx := metadata.NewIncomingContext(base, metadata.Pairs("x-api-key", "k1", "x-api-key", "k2", "x-empty", ""))
	type idKey struct{}
	authed := context.WithValue(ctx, idKey{}, "ann")
	identity := ByIdentity(func(ctx context.Context) (string, bool) {
		id, ok := ctx.Value(idKey{}).(string)
		return id, ok
	})
	fwd := metadata.NewIncomingContext(base, metadata.Pairs("x-forwarded-for", "203.0.113.1"))
	trusted, _ := ClientIP(httplimit.IPConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}})
	realIP, _ := ClientIP(httplimit.IPConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, Header: "X-Real-IP"})
	realCtx := metadata.NewIncomingContext(base, metadata.Pairs("x-real-ip", "203.0.113.2", "x-forwarded-for", "203.0.113.1"))
	unix := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.UnixAddr{Name: "/tmp/s", Net: "unix"}})

	for _, tc := range []struct {
		name string
		f    KeyFunc
		ctx  context.Context
		want string // "" wants ErrNoKey
	}{
		{"peer", ByPeer(), ctx, "192.0.2.7"},
		{"peer of a unix socket", ByPeer(), unix, ""},
		{"no peer", ByPeer(), context.Background(), ""},
		{"forwarded, trusted", trusted, fwd, "203.0.113.1"},
		{"forwarded, untrusted", ByPeer(), fwd, "192.0.2.7"},
		{"x-real-ip only", realIP, realCtx, "203.0.113.2"},
		{"metadata: first value", ByMetadata("X-Api-Key"), ctx, "k1"},
		{"metadata: empty", ByMetadata("x-empty"), ctx, ""},
		{"metadata: absent", ByMetadata("x-none"), ctx, ""},
		{"metadata: no metadata", ByMetadata("x-api-key"), base, ""},
		{"identity", identity, authed, "ann"},
		{"identity: anonymous", identity, ctx, ""},
		{"method", ByMethod(), ctx, methodSay},
		{"constant", Constant("all"), ctx, "all"},
		{"either: first found", Either(identity, ByPeer()), authed, "ann"},
		{"either: fallback", Either(identity, ByPeer()), ctx, "192.0.2.7"},
		{"either: none", Either(), ctx, ""},
		{"join", Join(ByMethod(), ByPeer()), ctx, "14:/test.Echo/Say9:192.0.2.7"},
		{"join: a part fails", Join(ByMethod(), identity), ctx, ""},
	} {
		k, err := tc.f(tc.ctx, methodSay)
		if tc.want == "" {
			if !errors.Is(err, ErrNoKey) {
				t.Errorf("%s: key %q, err %v; want ErrNoKey", tc.name, k, err)
			}
			continue
		}
		if err != nil || k != tc.want {
			t.Errorf("%s: key %q, err %v; want %q", tc.name, k, err, tc.want)
		}
	}
	// Join keeps distinct tuples apart.
	a, _ := Join(Constant("a:1"), Constant("b"))(ctx, "")
	b, _ := Join(Constant("a"), Constant("1:b"))(ctx, "")
	if a == b {
		t.Errorf("Join collides: %q", a)
	}
}

// FuzzRetryInfo: whatever RetryInfo a server sends, the client's pause is
// never negative and never longer than MaxPause, and there is a pause
// exactly when the delay is a valid positive duration.
func FuzzRetryInfo(f *testing.F) {
	f.Add(int64(1), int32(0))
	f.Add(int64(-1), int32(0))
	f.Add(int64(0), int32(-1))
	f.Add(int64(0), int32(1e9))
	f.Add(int64(1<<62), int32(999_999_999))
	f.Add(int64(-1<<63), int32(-1<<31))
	f.Add(int64(1<<63-1), int32(1<<31-1))
	f.Add(int64(9223372036), int32(854775807))
	f.Fuzz(func(t *testing.T, secs int64, nanos int32) {
		const maxPause = 90 * time.Second
		clock := ratelimit.NewManualClock(t0)
		c := &Client{Clock: clock, MaxPause: maxPause}
		st, err := status.New(codes.ResourceExhausted, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: secs, Nanos: nanos}})
		if err != nil {
			t.Fatal(err)
		}
		c.after(methodSay, st.Err())
		until, paused := c.PausedUntil(methodSay)
		valid := secs >= 0 && nanos >= 0 && nanos < 1e9 && (secs > 0 || nanos > 0)
		if paused != valid {
			t.Fatalf("secs %d nanos %d: paused %v, want %v", secs, nanos, paused, valid)
		}
		if !paused {
			return
		}
		d := until.Sub(t0)
		if d <= 0 || d > maxPause {
			t.Fatalf("secs %d nanos %d: pause %v outside (0, %v]", secs, nanos, d, maxPause)
		}
		if want := min(time.Duration(min(secs, 1<<33))*time.Second+time.Duration(nanos), maxPause); d != want {
			t.Fatalf("secs %d nanos %d: pause %v, want %v", secs, nanos, d, want)
		}
	})
}
