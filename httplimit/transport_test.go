package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// upstream is a loopback server that counts requests and answers each
// with the next scripted response (200 once the script is done).
type upstream struct {
	*httptest.Server
	hits   atomic.Int64
	mu     sync.Mutex
	script []func(w http.ResponseWriter)
}

func newUpstream(t *testing.T, script ...func(w http.ResponseWriter)) *upstream {
	u := &upstream{script: script}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.mu.Lock()
		var next func(http.ResponseWriter)
		if len(u.script) > 0 {
			next, u.script = u.script[0], u.script[1:]
		}
		u.mu.Unlock()
		if next != nil {
			next(w)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(u.Close)
	return u
}

func status(code int, header ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
	}
}

func get(t *testing.T, c *http.Client, url string) (int, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// getAsync sends a GET in a goroutine and delivers its status (or -1).
func getAsync(c *http.Client, req *http.Request) chan int {
	done := make(chan int, 1)
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			done <- -1
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	return done
}

func waitTimers(t *testing.T, c *ratelimit.ManualClock, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.Timers() < n {
		if time.Now().After(deadline) {
			t.Fatalf("no request started waiting (timers %d, want %d)", c.Timers(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func newRequest(t *testing.T, ctx context.Context, url string) *http.Request {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// The transport spaces requests as the limiter says.
func TestTransportSpacesRequests(t *testing.T) {
	up := newUpstream(t)
	clock := ratelimit.NewManualClock(t0)
	tr := &Transport{Limiter: tokenBucket(t, ratelimit.PerSecond(1), 1, clock), Clock: clock}
	c := &http.Client{Transport: tr}
	if code, err := get(t, c, up.URL); err != nil || code != 200 {
		t.Fatalf("first: %d %v", code, err)
	}
	done := getAsync(c, newRequest(t, context.Background(), up.URL))
	waitTimers(t, clock, 1)
	clock.Advance(999 * time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	if up.hits.Load() != 1 {
		t.Fatal("second request sent before its slot")
	}
	clock.Advance(time.Millisecond)
	if code := <-done; code != 200 || up.hits.Load() != 2 {
		t.Fatalf("second: %d, hits %d", code, up.hits.Load())
	}
}

// After a 429 with Retry-After the transport holds that host's requests
// until then, to the nanosecond on its clock.
func TestTransportPausesAfterRetryAfter(t *testing.T) {
	date := "Mon, 05 Aug 2019 09:27:00 GMT"
	for _, tc := range []struct {
		name  string
		first func(http.ResponseWriter)
		pause time.Duration
	}{
		{"429 seconds", status(429, "Retry-After", "5"), 5 * time.Second},
		{"503 seconds", status(503, "Retry-After", "2"), 2 * time.Second},
		{"429 HTTP date, from the Date header", status(429, "Date", date, "Retry-After", "Mon, 05 Aug 2019 09:27:07 GMT"), 7 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, tc.first)
			clock := ratelimit.NewManualClock(t0)
			tr := &Transport{Clock: clock}
			c := &http.Client{Transport: tr}
			if code, _ := get(t, c, up.URL); code != 429 && code != 503 {
				t.Fatalf("first: %d", code)
			}
			key := strings.TrimPrefix(up.URL, "http://")
			if until, ok := tr.PausedUntil(key); !ok || !until.Equal(t0.Add(tc.pause)) {
				t.Fatalf("paused until %v (%v), want %v", until, ok, t0.Add(tc.pause))
			}
			done := getAsync(c, newRequest(t, context.Background(), up.URL))
			waitTimers(t, clock, 1)
			clock.Advance(tc.pause - 1)
			time.Sleep(10 * time.Millisecond)
			if up.hits.Load() != 1 {
				t.Fatal("request sent during the pause")
			}
			clock.Advance(1)
			if code := <-done; code != 200 || up.hits.Load() != 2 {
				t.Fatalf("after the pause: %d, hits %d", code, up.hits.Load())
			}
		})
	}
}

func TestTransportPauseEdges(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	up := newUpstream(t,
		status(429),                        // no Retry-After: no pause
		status(500, "Retry-After", "9"),    // not 429/503: no pause
		status(429, "Retry-After", "3600"), // capped by MaxPause
	)
	tr := &Transport{Clock: clock, MaxPause: 2 * time.Second}
	c := &http.Client{Transport: tr}
	key := strings.TrimPrefix(up.URL, "http://")
	for i := range 2 {
		get(t, c, up.URL)
		if _, ok := tr.PausedUntil(key); ok {
			t.Errorf("response %d paused", i)
		}
	}
	get(t, c, up.URL)
	if until, ok := tr.PausedUntil(key); !ok || !until.Equal(t0.Add(2*time.Second)) {
		t.Errorf("capped pause until %v, want %v", until, t0.Add(2*time.Second))
	}
	// Another host is not held.
	other := newUpstream(t)
	if code, _ := get(t, c, other.URL); code != 200 {
		t.Errorf("other host: %d", code)
	}
	// A negative MaxPause ignores Retry-After.
	up2 := newUpstream(t, status(429, "Retry-After", "5"))
	tr2 := &Transport{Clock: clock, MaxPause: -1}
	get(t, &http.Client{Transport: tr2}, up2.URL)
	if _, ok := tr2.PausedUntil(strings.TrimPrefix(up2.URL, "http://")); ok {
		t.Error("negative MaxPause paused")
	}
}

// A pause or a limiter delay past the context's deadline fails at once,
// sending nothing.
func TestTransportDeadline(t *testing.T) {
	up := newUpstream(t, status(429, "Retry-After", "5"))
	clock := ratelimit.NewManualClock(t0)
	lim := tokenBucket(t, ratelimit.PerMinute(1), 1, clock)
	c := &http.Client{Transport: &Transport{Clock: clock, Limiter: lim}}
	get(t, c, up.URL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // real time: < the 5s pause
	defer cancel()
	body := &closeRecorder{Reader: strings.NewReader("payload")}
	req, _ := http.NewRequestWithContext(ctx, "POST", up.URL, body)
	_, err := c.Do(req)
	if !errors.Is(err, ratelimit.ErrLimited) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if up.hits.Load() != 1 || !body.closed {
		t.Errorf("hits %d, body closed %v", up.hits.Load(), body.closed)
	}
	// After the pause, the limiter (1/min) still holds the request back.
	clock.Advance(5 * time.Second)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second) // < the 55s to wait
	defer cancel2()
	if _, err := c.Do(newRequest(t, ctx2, up.URL)); !errors.Is(err, ratelimit.ErrLimited) {
		t.Errorf("limiter past deadline: %v", err)
	}
	if d, _ := lim.AllowN(context.Background(), strings.TrimPrefix(up.URL, "http://"), 0); d.ResetAfter != 55*time.Second {
		t.Errorf("the refused request consumed: %+v", d)
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// A permit is held from before sending until the body is closed or read to
// the end.
func TestTransportHoldsPermit(t *testing.T) {
	up := newUpstream(t)
	sem := bulkhead(t, 1)
	c := &http.Client{Transport: &Transport{Concurrency: sem}}
	resp, err := c.Get(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	if sem.InFlight() != 1 {
		t.Fatalf("in flight %d with an open body", sem.InFlight())
	}
	done := getAsync(c, newRequest(t, context.Background(), up.URL))
	time.Sleep(20 * time.Millisecond)
	if up.hits.Load() != 1 {
		t.Fatal("second request sent while the first held the only permit")
	}
	resp.Body.Close()
	resp.Body.Close() // twice: released once
	if code := <-done; code != 200 {
		t.Fatalf("second: %d", code)
	}
	// Reading to EOF releases too, even without Close.
	resp, _ = c.Get(up.URL)
	io.ReadAll(resp.Body)
	if sem.InFlight() != 0 {
		t.Errorf("in flight %d after EOF", sem.InFlight())
	}
	resp.Body.Close()
	// A failed round trip releases at once.
	up.Close()
	if _, err := c.Get(up.URL); err == nil || sem.InFlight() != 0 {
		t.Errorf("failed round trip: err %v, in flight %d", err, sem.InFlight())
	}
}

func TestZeroTransport(t *testing.T) {
	up := newUpstream(t)
	if code, err := get(t, &http.Client{Transport: &Transport{}}, up.URL); err != nil || code != 200 {
		t.Errorf("%d %v", code, err)
	}
}

func TestRetryAfterParse(t *testing.T) {
	now := time.Date(2019, 8, 5, 9, 27, 0, 0, time.UTC)
	for _, tc := range []struct {
		header []string
		want   time.Duration
		ok     bool
	}{
		{[]string{"Retry-After", "0"}, 0, true},
		{[]string{"Retry-After", " 120 "}, 2 * time.Minute, true},
		{[]string{"Retry-After", "-1"}, 0, false},
		{[]string{"Retry-After", "soon"}, 0, false},
		{[]string{"Retry-After", "99999999999999999"}, time.Duration(1<<63 - 1), true},
		{[]string{"Retry-After", "Mon, 05 Aug 2019 09:27:05 GMT"}, 5 * time.Second, true},
		{[]string{"Retry-After", "Mon, 05 Aug 2019 09:27:05 GMT", "Date", "Mon, 05 Aug 2019 09:27:03 GMT"}, 2 * time.Second, true},
		{nil, 0, false},
	} {
		h := http.Header{}
		for i := 0; i+1 < len(tc.header); i += 2 {
			h.Set(tc.header[i], tc.header[i+1])
		}
		got, ok := retryAfter(h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%v: %v %v, want %v %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
}

// A pause that begins while a request waits on the limiter holds it too.
func TestTransportPauseWhileWaiting(t *testing.T) {
	unblock := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter) {
		<-unblock // the first request is slow, then refused
		status(429, "Retry-After", "5")(w)
	})
	clock := ratelimit.NewManualClock(t0)
	sem := bulkhead(t, 2)
	c := &http.Client{Transport: &Transport{Clock: clock, Concurrency: sem,
		Limiter: tokenBucket(t, ratelimit.PerSecond(1), 1, clock)}}
	first := getAsync(c, newRequest(t, context.Background(), up.URL))
	for up.hits.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	second := getAsync(c, newRequest(t, context.Background(), up.URL))
	waitTimers(t, clock, 1) // the second waits on the limiter, until t0+1s
	close(unblock)
	if code := <-first; code != 429 {
		t.Fatalf("first: %d", code)
	}
	// The pause woke the second, which gave back its booking and permit.
	for deadline := time.Now().Add(5 * time.Second); sem.InFlight() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second holds its permit after the pause began")
		}
	}
	clock.Advance(time.Second) // its turn would have come; the pause holds it
	waitTimers(t, clock, 1)
	if sem.InFlight() != 0 {
		t.Errorf("a paused request holds a permit")
	}
	clock.Advance(4*time.Second - 1)
	time.Sleep(10 * time.Millisecond)
	if up.hits.Load() != 1 {
		t.Fatal("request sent during a pause that began while it waited")
	}
	clock.Advance(1)
	if code := <-second; code != 200 || up.hits.Load() != 2 {
		t.Fatalf("second: %d, hits %d", code, up.hits.Load())
	}
}

// Retry-After in every form a server may send: the pause is what it asks,
// capped at MaxPause, whatever the size of the number.
func TestRetryAfterForms(t *testing.T) {
	now := time.Date(2019, 8, 5, 9, 27, 0, 0, time.UTC)
	const maxD = time.Duration(1<<63 - 1)
	for _, tc := range []struct {
		values []string // Retry-After lines
		date   string
		want   time.Duration
		ok     bool
	}{
		{[]string{"99999999999999999999999"}, "", maxD, true}, // beyond int64 seconds
		{[]string{"9223372036854775807"}, "", maxD, true},
		{[]string{"9223372036"}, "", 9223372036 * time.Second, true},
		{[]string{"9223372037"}, "", maxD, true}, // overflows when made nanoseconds
		{[]string{"000000000000000000000000005"}, "", 5 * time.Second, true},
		{[]string{"1.5"}, "", 1500 * time.Millisecond, true},
		{[]string{"0.0000000001"}, "", 1, true}, // rounded up, never earlier
		{[]string{"2.000000000000"}, "", 2 * time.Second, true},
		{[]string{"9223372036.9"}, "", maxD, true},
		{[]string{"1."}, "", 0, false},
		{[]string{".5"}, "", 0, false},
		{[]string{"-5"}, "", 0, false},
		{[]string{"+5"}, "", 0, false},
		{[]string{"1 2"}, "", 0, false},
		{[]string{"\t 7 \t"}, "", 7 * time.Second, true},
		{[]string{"-99999999999999999999999"}, "", 0, false},
		// Several lines: the longest valid one.
		{[]string{"5", "soon", "60"}, "", time.Minute, true},
		{[]string{"soon", "3"}, "", 3 * time.Second, true},
		// Dates, against Date when given.
		{[]string{"Fri, 31 Dec 9999 23:59:59 GMT"}, "", maxD, true},
		{[]string{"Fri, 31 Dec 9999 23:59:59 GMT"}, "Mon, 01 Jan 0001 00:00:00 GMT", maxD, true},
		{[]string{"Mon, 01 Jan 0001 00:00:00 GMT"}, "", time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Sub(now), true},
		{[]string{"Monday, 05-Aug-19 09:27:10 GMT"}, "", 10 * time.Second, true}, // RFC 850
		{[]string{"Mon Aug  5 09:27:20 2019"}, "", 20 * time.Second, true},       // asctime
	} {
		h := http.Header{"Retry-After": tc.values}
		if tc.date != "" {
			h.Set("Date", tc.date)
		}
		got, ok := retryAfter(h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q (Date %q): %v %v, want %v %v", tc.values, tc.date, got, ok, tc.want, tc.ok)
		}
	}
	// End to end: the pause is capped at MaxPause, and a date in the past
	// pauses nothing.
	for _, tc := range []struct {
		value string
		pause time.Duration
	}{
		{"99999999999999999999999", time.Minute},
		{"9223372036854775807", time.Minute},
		{"Fri, 31 Dec 9999 23:59:59 GMT", time.Minute},
		{"30.25", 30250 * time.Millisecond},
		{"Mon, 01 Jan 1990 00:00:00 GMT", 0},
	} {
		up := newUpstream(t, status(429, "Retry-After", tc.value))
		clock := ratelimit.NewManualClock(t0)
		tr := &Transport{Clock: clock, MaxPause: time.Minute}
		get(t, &http.Client{Transport: tr}, up.URL)
		until, paused := tr.PausedUntil(strings.TrimPrefix(up.URL, "http://"))
		if paused != (tc.pause > 0) || paused && until != t0.Add(tc.pause) {
			t.Errorf("Retry-After %q: paused %v until %v, want %v", tc.value, paused, until, tc.pause)
		}
	}
}

// A request that is not sent gives back what it took, on every path out:
// the limiter's booking and the permit.
func TestTransportGivesBackWhatItDidNotUse(t *testing.T) {
	type env struct {
		up    *upstream
		clock *ratelimit.ManualClock
		lim   *ratelimit.TokenBucket
		sem   *ratelimit.Bulkhead
		c     *http.Client
		key   string
	}
	setup := func(t *testing.T, script ...func(http.ResponseWriter)) *env {
		e := &env{up: newUpstream(t, script...), clock: ratelimit.NewManualClock(t0), sem: bulkhead(t, 1)}
		e.lim = tokenBucket(t, ratelimit.PerSecond(1), 4, e.clock)
		e.c = &http.Client{Transport: &Transport{Clock: e.clock, Limiter: e.lim, Concurrency: e.sem}}
		e.key = strings.TrimPrefix(e.up.URL, "http://")
		return e
	}
	remaining := func(e *env) int {
		d, _ := e.lim.AllowN(context.Background(), e.key, 0)
		return d.Remaining
	}
	waitFor := func(t *testing.T, what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.Run("waiting for a permit", func(t *testing.T) {
		e := setup(t)
		if !e.sem.TryAcquire() { // someone else holds the only permit
			t.Fatal("permit")
		}
		for i := range 4 {
			ctx, cancel := context.WithCancel(context.Background())
			done := getAsync(e.c, newRequest(t, ctx, e.up.URL))
			waitFor(t, "a request waiting for the permit", func() bool { return e.sem.Waiting() == 1 })
			cancel()
			if code := <-done; code != -1 {
				t.Fatalf("request %d: %d", i, code)
			}
		}
		if got := remaining(e); got != 4 || e.up.hits.Load() != 0 || e.sem.InFlight() != 1 {
			t.Errorf("after 4 requests never sent: %d tokens (want 4), %d sent, %d in flight (want 1)", got, e.up.hits.Load(), e.sem.InFlight())
		}
	})
	t.Run("deadline while waiting for a permit", func(t *testing.T) {
		e := setup(t)
		e.sem.TryAcquire()
		for range 4 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
			_, err := e.c.Do(newRequest(t, ctx, e.up.URL))
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err %v", err)
			}
		}
		if got := remaining(e); got != 4 || e.sem.InFlight() != 1 {
			t.Errorf("%d tokens (want 4), %d in flight (want 1)", got, e.sem.InFlight())
		}
	})
	t.Run("waiting on the limiter", func(t *testing.T) {
		e := setup(t)
		e.lim.AllowN(context.Background(), e.key, 4) // empty: the next is due in 1s
		ctx, cancel := context.WithCancel(context.Background())
		done := getAsync(e.c, newRequest(t, ctx, e.up.URL))
		waitTimers(t, e.clock, 1)
		cancel()
		if code := <-done; code != -1 {
			t.Fatalf("%d", code)
		}
		e.clock.Advance(time.Second)
		if got := remaining(e); got != 1 || e.sem.InFlight() != 0 {
			t.Errorf("%d tokens a second later (want 1), %d in flight", got, e.sem.InFlight())
		}
	})
	t.Run("limiter delay past the deadline", func(t *testing.T) {
		e := setup(t)
		e.lim.AllowN(context.Background(), e.key, 4)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond) // < 1s
		defer cancel()
		if _, err := e.c.Do(newRequest(t, ctx, e.up.URL)); !errors.Is(err, ratelimit.ErrLimited) {
			t.Fatalf("err %v", err)
		}
		e.clock.Advance(time.Second)
		if got := remaining(e); got != 1 || e.sem.InFlight() != 0 {
			t.Errorf("%d tokens a second later (want 1), %d in flight", got, e.sem.InFlight())
		}
	})
	t.Run("during a pause", func(t *testing.T) {
		e := setup(t, status(429, "Retry-After", "5"))
		get(t, e.c, e.up.URL) // 3 tokens left, paused 5s
		ctx, cancel := context.WithCancel(context.Background())
		done := getAsync(e.c, newRequest(t, ctx, e.up.URL))
		waitTimers(t, e.clock, 1)
		if e.sem.InFlight() != 0 {
			t.Error("a request waiting out a pause holds a permit")
		}
		cancel()
		if code := <-done; code != -1 {
			t.Fatalf("%d", code)
		}
		if got := remaining(e); got != 3 || e.sem.InFlight() != 0 || e.up.hits.Load() != 1 {
			t.Errorf("%d tokens (want 3), %d in flight, %d sent", got, e.sem.InFlight(), e.up.hits.Load())
		}
	})
	t.Run("a pause begins while waiting on the limiter", func(t *testing.T) {
		unblock := make(chan struct{})
		e := setup(t, func(w http.ResponseWriter) { <-unblock; status(429, "Retry-After", "5")(w) })
		e.sem.SetLimit(2)
		first := getAsync(e.c, newRequest(t, context.Background(), e.up.URL))
		waitFor(t, "the first request", func() bool { return e.up.hits.Load() == 1 })
		e.lim.AllowN(context.Background(), e.key, 3) // empty: the next is due in 1s
		ctx, cancel := context.WithCancel(context.Background())
		second := getAsync(e.c, newRequest(t, ctx, e.up.URL))
		waitTimers(t, e.clock, 1)
		close(unblock)
		if code := <-first; code != 429 {
			t.Fatalf("first: %d", code)
		}
		// The second gives back its booking and permit and waits out the
		// pause; its turn on the limiter passes, then its context ends.
		waitFor(t, "the second to give back its permit", func() bool { return e.sem.InFlight() == 0 })
		waitTimers(t, e.clock, 1)
		e.clock.Advance(time.Second)
		cancel()
		if code := <-second; code != -1 {
			t.Fatalf("second: %d", code)
		}
		if got := remaining(e); got != 1 || e.up.hits.Load() != 1 {
			t.Errorf("%d tokens a second later (want 1: the booking came back), %d sent", got, e.up.hits.Load())
		}
	})
	t.Run("the round trip fails", func(t *testing.T) {
		e := setup(t)
		e.up.Close()
		if _, err := e.c.Get(e.up.URL); err == nil {
			t.Fatal("no error")
		}
		// Handed to Base, the request may have reached the server: its
		// event stays taken; the permit comes back.
		if got := remaining(e); got != 3 || e.sem.InFlight() != 0 {
			t.Errorf("%d tokens (want 3), %d in flight", got, e.sem.InFlight())
		}
	})
}

// One server spelt several ways is one key: a caller whose URLs come from
// elsewhere cannot step around the limit by spelling the host anew.
func TestHostKey(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"https://api.example.com/x", "api.example.com"},
		{"https://API.Example.COM/x", "api.example.com"},
		{"https://api.example.com:443/x", "api.example.com"},
		{"https://api.example.com./x", "api.example.com"},
		{"http://api.example.com:80/x", "api.example.com"},
		{"http://api.example.com:443/x", "api.example.com:443"},
		{"https://api.example.com:8443/x", "api.example.com:8443"},
		{"http://127.0.0.1:8080/", "127.0.0.1:8080"},
		{"https://[2001:DB8::1]/", "[2001:db8::1]"},
		{"https://[2001:db8::1]:8443/", "[2001:db8::1]:8443"},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := HostKey(u); got != tc.want {
			t.Errorf("HostKey(%s) = %q, want %q", tc.url, got, tc.want)
		}
	}
	// Through the Transport: the limiter sees one key.
	clock := ratelimit.NewManualClock(t0)
	lim := tokenBucket(t, ratelimit.PerMinute(1), 1, clock)
	var sent []string
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = append(sent, r.URL.String())
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
	})
	c := &http.Client{Transport: &Transport{Base: base, Limiter: lim, Clock: clock}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, u := range []string{"https://api.example.com/a", "https://API.example.com:443/b", "https://api.example.com./c"} {
		c.Do(newRequest(t, ctx, u))
	}
	if len(sent) != 1 {
		t.Errorf("sent %q: one server spelt three ways got more than its 1 a minute", sent)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
