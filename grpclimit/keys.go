package grpclimit

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// ErrNoKey is ratelimit.ErrNoKey: a call carries no usable key. Key
// functions return errors matching it; the interceptors then refuse the
// call (by default with codes.PermissionDenied), never letting it through
// unlimited.
var ErrNoKey = ratelimit.ErrNoKey

// KeyFunc returns the key a call is limited by, from the call's context
// and its full method name ("/pkg.Service/Method"), or an error (matching
// ErrNoKey when the call simply has no such key).
//
// A key is whatever the function says it is: the limiter cannot tell a
// genuine user id from one a client made up. Derive keys from what the
// client cannot choose (the connection's address, an authenticated
// identity), or expect a client to rotate through fresh keys.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// ByPeer returns the default key function: the address of the connection
// the call came on, IPv6 grouped by /64, no forwarded address believed.
// It is ClientIP with a zero httplimit.IPConfig.
func ByPeer() KeyFunc {
	f, _ := ClientIP(httplimit.IPConfig{})
	return f
}

// ClientIP returns a key function by client address under cfg, with the
// rules of httplimit.ClientIP, which it uses: the connection's address is
// the client unless it is one of cfg.TrustedProxies, in which case the
// forwarded chain is read from the call's metadata entry named by
// cfg.Header (lowercased, as gRPC metadata keys are: "x-forwarded-for" by
// default, "forwarded" or "x-real-ip"), and the client is the right-most
// address of the chain that is not a trusted proxy. The metadata is never
// read when the connection's address is not trusted.
//
// A call whose peer is not an IP address (a Unix socket, an in-memory
// listener) gets an error matching ErrNoKey. ClientIP returns an error if
// cfg is invalid, as httplimit.ClientIP does.
func ClientIP(cfg httplimit.IPConfig) (KeyFunc, error) {
	keyOf, err := httplimit.ClientIP(cfg)
	if err != nil {
		return nil, err
	}
	header := http.CanonicalHeaderKey(cfg.Header)
	if header == "" {
		header = "X-Forwarded-For"
	}
	mdKey := strings.ToLower(header)
	forwarded := len(cfg.TrustedProxies) > 0
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", fmt.Errorf("%w: the call has no peer address", ErrNoKey)
		}
		// httplimit's parser reads a request; give it one holding only the
		// peer's address and, when proxies may be trusted, the one
		// forwarded entry it is told to read. It reads the entry only if
		// the peer is one of those proxies.
		r := &http.Request{RemoteAddr: p.Addr.String()}
		if forwarded {
			if md, ok := metadata.FromIncomingContext(ctx); ok {
				if vals := md.Get(mdKey); len(vals) > 0 {
					r.Header = http.Header{header: vals}
				}
			}
		}
		return keyOf(r)
	}, nil
}

// ByMetadata returns a key function by the first value of a metadata
// entry of the call, such as an API key ("x-api-key"). A missing or empty
// entry gets an error matching ErrNoKey. Any client can send any value:
// limit by metadata only after checking it (authentication before the
// limiter), or combine it with the address (Join).
func ByMetadata(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) (string, error) {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if vals := md.Get(name); len(vals) > 0 && vals[0] != "" {
				return vals[0], nil
			}
		}
		return "", fmt.Errorf("%w: no %s metadata", ErrNoKey, name)
	}
}

// ByIdentity returns a key function by the authenticated identity of the
// caller: identity returns it from the call's context (where an
// authentication interceptor that runs before the limiter put it, or from
// the peer's credentials) and true, or false for an anonymous call, which
// gets an error matching ErrNoKey. Use Either(ByIdentity(f), ByPeer()) to
// limit anonymous calls by address instead.
func ByIdentity(identity func(ctx context.Context) (id string, ok bool)) KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		if id, ok := identity(ctx); ok && id != "" {
			return id, nil
		}
		return "", fmt.Errorf("%w: no authenticated identity", ErrNoKey)
	}
}

// ByMethod returns a key function by the call's full method name, such as
// "/pkg.Service/Method": one allowance per method, whoever calls.
func ByMethod() KeyFunc {
	return func(_ context.Context, fullMethod string) (string, error) { return fullMethod, nil }
}

// Constant returns a key function that gives every call the same key: one
// allowance shared by all.
func Constant(key string) KeyFunc {
	return func(context.Context, string) (string, error) { return key, nil }
}

// Either returns a key function that tries fns in order and returns the
// first key found; if none finds one, the last error.
func Either(fns ...KeyFunc) KeyFunc {
	return func(ctx context.Context, m string) (string, error) {
		var err error
		for _, f := range fns {
			var k string
			if k, err = f(ctx, m); err == nil {
				return k, nil
			}
		}
		if err == nil {
			err = fmt.Errorf("%w: no key function", ErrNoKey)
		}
		return "", err
	}
}

// Join returns a key function whose key combines the keys of all fns, such
// as Join(ByMethod(), ByPeer()) for an allowance per method per address.
// The parts are length-prefixed, so distinct tuples never share a key. If
// one fails, Join returns its error.
func Join(fns ...KeyFunc) KeyFunc {
	return func(ctx context.Context, m string) (string, error) {
		var b []byte
		for _, f := range fns {
			k, err := f(ctx, m)
			if err != nil {
				return "", err
			}
			b = strconv.AppendInt(b, int64(len(k)), 10)
			b = append(b, ':')
			b = append(b, k...)
		}
		return string(b), nil
	}
}
