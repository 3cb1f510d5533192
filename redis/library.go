package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// The algorithms' scripts run as one Redis Functions library (Redis 7.0
// or later): FUNCTION LOAD runs the helpers' definitions once, and each
// decision is an FCALL of an already-built function, where EVAL would
// build every helper anew on each call. The library's name carries a hash
// of its source, so that versions of this package that differ never
// replace each other's functions.
//
// Where the library is missing (a fresh server, a FUNCTION FLUSH, a new
// master that never had it), the first call that finds it so loads it on
// every master and calls again. Where Functions are unavailable (Redis
// before 7.0, FUNCTION and FCALL renamed away, or not allowed to the
// client by an ACL), the limiter falls back
// for good to the same scripts by EVALSHA, and EVAL when Redis answers
// NOSCRIPT. Clients other than go-redis's *Client, *ClusterClient and
// *Ring use EVALSHA and EVAL only.

var libScripts = append([]script{tbScript, lbScript, fwScript, swcScript, slScript},
	penaltyScripts([]script{tbScript, lbScript, fwScript, swcScript, slScript})...)

// libName and libSource are the library's name and its FUNCTION LOAD text.
var libName, libSource = buildLibrary()

func buildLibrary() (name, src string) {
	var b strings.Builder
	b.WriteString(luaPrelude)
	for _, s := range libScripts {
		b.WriteString("\ndo\n")
		b.WriteString(s.defs)
		b.WriteString(s.oneSource())
		b.WriteString("redis.register_function('@_" + s.name + "', function(keys, argv) return one(keys, argv) end)\n")
		b.WriteString("redis.register_function('@_" + s.name + "_b', function(keys, argv) return " + s.batchCall("keys", "argv") + " end)\n")
		b.WriteString("end\n")
	}
	body := b.String()
	sum := sha1.Sum([]byte(body))
	name = "ratelimit_" + hex.EncodeToString(sum[:8])
	return name, "#!lua name=" + name + "\n" + strings.ReplaceAll(body, "'@_", "'"+name+"_")
}

// fcaller is what FCALL needs of a client.
type fcaller interface {
	FCall(ctx context.Context, function string, keys []string, args ...any) *goredis.Cmd
}

// functions is a caller's use of the library: the client's FCALL (nil if
// it has none) and whether Redis turned out to lack Functions.
type functions struct {
	fc    fcaller
	fn    string // the function's name in the library
	fnb   string // its batch form's (see batch in luaPrelude)
	none  *atomic.Bool
	load  func(ctx context.Context) error
	loads *atomic.Int64 // how many times the library was loaded (tests)
}

func newFunctions(client Client, name string) functions {
	f := functions{fn: libName + "_" + name, fnb: libName + "_" + name + "_b", none: new(atomic.Bool), loads: new(atomic.Int64)}
	if name == "" { // not in the library
		return f
	}
	loadOne := func(ctx context.Context, c *goredis.Client) error {
		return c.FunctionLoadReplace(ctx, libSource).Err()
	}
	switch c := client.(type) {
	case *goredis.Client:
		f.fc = c
		f.load = func(ctx context.Context) error { return loadOne(ctx, c) }
	case *goredis.ClusterClient:
		f.fc = c
		f.load = func(ctx context.Context) error { return c.ForEachMaster(ctx, loadOne) }
	case *goredis.Ring:
		f.fc = c
		f.load = func(ctx context.Context) error { return c.ForEachShard(ctx, loadOne) }
	case interface {
		fcaller
		FunctionLoadReplace(ctx context.Context, code string) *goredis.StringCmd
	}:
		f.fc = c
		f.load = func(ctx context.Context) error { return c.FunctionLoadReplace(ctx, libSource).Err() }
	}
	return f
}

// call runs the function by FCALL, loading the library if Redis lacks it;
// ok is false if the caller must use EVALSHA instead (no Functions).
func (f *functions) call(ctx context.Context, keys []string, args []any) (v any, err error, ok bool) {
	return f.callFn(ctx, f.fn, keys, args)
}

// callFn is call of the library's function fn (f.fn or f.fnb).
func (f *functions) callFn(ctx context.Context, fn string, keys []string, args []any) (v any, err error, ok bool) {
	if f.fc == nil || f.none.Load() {
		return nil, nil, false
	}
	v, err = f.fc.FCall(ctx, fn, keys, args...).Result()
	if err == nil || !missingFunction(err) {
		return v, err, true
	}
	if unknownCommand(err) {
		f.none.Store(true)
		return nil, nil, false
	}
	if lerr := f.load(ctx); lerr != nil {
		if unknownCommand(lerr) {
			f.none.Store(true)
			return nil, nil, false
		}
		return nil, lerr, true
	}
	f.loads.Add(1)
	v, err = f.fc.FCall(ctx, fn, keys, args...).Result()
	return v, err, true
}

// missingFunction reports whether err says Redis has no such function (or
// no FCALL at all).
func missingFunction(err error) bool {
	var re goredis.Error
	if !errors.As(err, &re) {
		return false
	}
	return strings.Contains(re.Error(), "Function not found") || unknownCommand(err)
}

// unknownCommand reports whether err is Redis refusing a command it does
// not know (Redis before 7.0, or the command renamed away) or that this
// client may not run (an ACL that allows scripts but not Functions).
func unknownCommand(err error) bool {
	var re goredis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "ERR unknown command") || strings.HasPrefix(msg, "NOPERM")
}
