package httplimit

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

var paceT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParseQuota(t *testing.T) {
	const maxPause = time.Hour
	date := paceT0.Add(-10 * time.Second).Format(http.TimeFormat) // the server's clock, 10s behind
	for _, tc := range []struct {
		name string
		h    http.Header
		want []quota
	}{
		{"ours", hdr("RateLimit", `"api";r=42;t=30`), []quota{{"api", 42, 30 * time.Second}}},
		{"two policies, token names", hdr("RateLimit", `a;r=1;t=2, "b";r=0;t=5`), []quota{{"a", 1, 2 * time.Second}, {"b", 0, 5 * time.Second}}},
		{"two lines", hdr("RateLimit", `"a";r=1;t=2`, "RateLimit", `"b";r=3;t=4`), []quota{{"a", 1, 2 * time.Second}, {"b", 3, 4 * time.Second}}},
		{"other params and spaces", hdr("RateLimit", ` "a" ; pk=:YWJj: ; r=7 ; t=9 `), []quota{{"a", 7, 9 * time.Second}}},
		{"quoted name with a comma", hdr("RateLimit", `"a,b";r=1;t=1`), []quota{{"a,b", 1, time.Second}}},
		{"escaped quote in a name", hdr("RateLimit", `"a\"b";r=1;t=1`), []quota{{`a"b`, 1, time.Second}}},
		{"semicolon in a quoted name", hdr("RateLimit", `"a;r=9";r=1;t=1`), []quota{{"a;r=9", 1, time.Second}}},
		{"a huge line: its first items", hdr("RateLimit", `a;r=1;t=1`+strings.Repeat(`, x;r=2;t=2`, 100_000)), []quota{
			{"a", 1, time.Second}, {"x", 2, 2 * time.Second}, {"x", 2, 2 * time.Second}, {"x", 2, 2 * time.Second},
			{"x", 2, 2 * time.Second}, {"x", 2, 2 * time.Second}, {"x", 2, 2 * time.Second}, {"x", 2, 2 * time.Second}}},
		{"no t: ignored", hdr("RateLimit", `"a";r=1`), nil},
		{"negative r: ignored", hdr("RateLimit", `"a";r=-1;t=5`), nil},
		{"fractional t rounds up", hdr("RateLimit", `"a";r=1;t=1.2`), []quota{{"a", 1, 2 * time.Second}}},
		{"huge t capped", hdr("RateLimit", `"a";r=1;t=99999999999999999999999`), []quota{{"a", 1, maxPause}}},
		{"huge r saturates", hdr("RateLimit", `"a";r=99999999999999999999999;t=1`), []quota{{"a", 1 << 62, time.Second}}},
		{"unterminated string", hdr("RateLimit", `"a;r=1;t=1`), nil},
		{"garbage", hdr("RateLimit", `;;,,==""`), nil},
		{"older dictionary", hdr("RateLimit", `limit=100, remaining=50, reset=30`), []quota{{"Ratelimit", 50, 30 * time.Second}}},
		{"older fields", hdr("RateLimit-Remaining", "5", "RateLimit-Reset", "3"), []quota{{"Ratelimit-Remaining", 5, 3 * time.Second}}},
		{"x- seconds", hdr("X-RateLimit-Remaining", "5", "X-RateLimit-Reset", "60"), []quota{{"X-Ratelimit-Remaining", 5, time.Minute}}},
		{"x- unix time, against Date", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(paceT0.Unix()+50, 10), "Date", date),
			[]quota{{"X-Ratelimit-Remaining", 0, time.Minute}}},
		{"x- unix time, no Date", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(paceT0.Unix()+50, 10)),
			[]quota{{"X-Ratelimit-Remaining", 0, 50 * time.Second}}},
		{"x- unix time in the past", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1000000000"), []quota{{"X-Ratelimit-Remaining", 0, 0}}},
		{"x- remaining alone", hdr("X-RateLimit-Remaining", "5"), nil},
		{"x- garbage reset", hdr("X-RateLimit-Remaining", "5", "X-RateLimit-Reset", "soon"), nil},
		{"x- signed reset", hdr("X-RateLimit-Remaining", "5", "X-RateLimit-Reset", "-5"), nil},
		{"too many policies: the first eight", hdr("RateLimit", `a;r=1;t=1,b;r=1;t=1,c;r=1;t=1,d;r=1;t=1,e;r=1;t=1,f;r=1;t=1,g;r=1;t=1,h;r=1;t=1,i;r=1;t=1`), []quota{
			{"a", 1, time.Second}, {"b", 1, time.Second}, {"c", 1, time.Second}, {"d", 1, time.Second},
			{"e", 1, time.Second}, {"f", 1, time.Second}, {"g", 1, time.Second}, {"h", 1, time.Second}}},
	} {
		got := parseQuota(tc.h, paceT0, maxPause)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
				break
			}
		}
	}
}

// Timeline of one key on a manual clock.
func TestPacerSpacing(t *testing.T) {
	clock := ratelimit.NewManualClock(paceT0)
	p := &Pacer{Clock: clock, MaxPause: time.Minute}
	delay := func() time.Duration { return p.Reserve("h").Delay() }
	// t0: nothing known: no wait.
	if d := delay(); d != 0 {
		t.Fatalf("unknown key: %v", d)
	}
	// 4 left for 2s: spaced 500ms apart, the first at once.
	p.Observe("h", hdr("RateLimit", `"a";r=4;t=2`))
	for i, want := range []time.Duration{0, 500 * time.Millisecond, time.Second, 1500 * time.Millisecond} {
		if d := delay(); d != want {
			t.Errorf("request %d: wait %v, want %v", i, d, want)
		}
	}
	// A stricter second policy (1 left for 3s) governs while it lasts;
	// the key's turns already booked stand.
	clock.Advance(2 * time.Second) // t0+2s; the next turn was booked for t0+2s
	p.Observe("h", hdr("RateLimit", `"a";r=4;t=2, "b";r=1;t=3`))
	if d := delay(); d != 0 {
		t.Errorf("after the stricter policy: first wait %v, want 0", d)
	}
	if d := delay(); d != 3*time.Second {
		t.Errorf("after the stricter policy: second wait %v, want 3s", d)
	}
	// None left: hold until the reset, whatever was booked.
	p.Observe("h", hdr("RateLimit", `"b";r=0;t=10`))
	if d := delay(); d != 10*time.Second {
		t.Errorf("none left: wait %v, want 10s", d)
	}
	// After every policy reset, nothing is known: no wait (beyond turns
	// still booked).
	clock.Advance(time.Hour)
	if d := delay(); d != 0 {
		t.Errorf("after the resets: %v", d)
	}
	// A hostile reset never holds beyond MaxPause, however many wait.
	p.Observe("h", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "99999999"))
	for i := range 5 {
		if d := delay(); d < 0 || d > time.Minute {
			t.Errorf("hostile reset, request %d: wait %v", i, d)
		}
	}
}

func TestPacerWait(t *testing.T) {
	clock := ratelimit.NewManualClock(paceT0)
	p := &Pacer{Clock: clock}
	p.Observe("h", hdr("RateLimit", `"a";r=1;t=10`))
	if err := p.Wait(context.Background(), "h"); err != nil {
		t.Fatal(err)
	}
	// The next turn is 10s away: a 100ms deadline fails at once, and the
	// turn is given back.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := p.Wait(ctx, "h")
	if !errors.Is(err, ratelimit.ErrLimited) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past the deadline: %v", err)
	}
	if d := p.Reserve("h").Delay(); d != 10*time.Second {
		t.Errorf("after the refusal, the next turn is %v away, want 10s (the refused one given back)", d)
	}
	// Waiting goes on the clock; a cancelled wait gives its turn back.
	done := make(chan error, 1)
	go func() { done <- p.Wait(context.Background(), "h") }()
	for clock.Timers() == 0 {
		time.Sleep(time.Millisecond)
	}
	clock.Advance(20 * time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	go func() { done <- p.Wait(cctx, "h") }()
	for clock.Timers() == 0 {
		time.Sleep(time.Millisecond)
	}
	ccancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: %v", err)
	}
}

func TestPacerBoundedHosts(t *testing.T) {
	clock := ratelimit.NewManualClock(paceT0)
	p := &Pacer{Clock: clock, MaxHosts: 16}
	for i := range 1000 {
		p.Observe("host"+strconv.Itoa(i), hdr("RateLimit", `"a";r=1;t=60`))
		if n := len(p.hosts); n > 16 {
			t.Fatalf("%d hosts remembered, max 16", n)
		}
	}
	// Policies per host are bounded too, whatever names a server sends.
	for i := range 100 {
		p.Observe("h", hdr("RateLimit", `"p`+strconv.Itoa(i)+`";r=1;t=60`))
	}
	if n := len(p.hosts["h"].policies); n > maxPacePolicies {
		t.Errorf("%d policies remembered, max %d", n, maxPacePolicies)
	}
}

// FuzzPacerHeaders: whatever headers a server sends, every wait is in
// [0, MaxPause], and parsing never panics.
func FuzzPacerHeaders(f *testing.F) {
	f.Add(`"a";r=4;t=2`, "5", "60", int64(0))
	f.Add(`limit=1, remaining=0, reset=99999999999999999999`, "0", "1700000000", int64(5))
	f.Add(`"a";r=0;t=1.5, b;r=1;t=0`, "-1", "1e9", int64(-1))
	f.Add(`"unterminated;r=1;t=1`, "18446744073709551616", "9223372036854775807", int64(1<<40))
	f.Fuzz(func(t *testing.T, rl, remaining, reset string, advance int64) {
		const maxPause = 90 * time.Second
		clock := ratelimit.NewManualClock(paceT0)
		p := &Pacer{Clock: clock, MaxPause: maxPause}
		h := hdr("RateLimit", rl, "X-RateLimit-Remaining", remaining, "X-RateLimit-Reset", reset, "Date", paceT0.Format(http.TimeFormat))
		for _, q := range parseQuota(h, paceT0, maxPause) {
			if q.reset < 0 || q.reset > maxPause || q.remaining < 0 {
				t.Fatalf("quota %+v out of bounds", q)
			}
		}
		p.Observe("h", h)
		for range 3 {
			if d := p.Reserve("h").Delay(); d < 0 || d > maxPause {
				t.Fatalf("wait %v outside [0, %v]", d, maxPause)
			}
		}
		clock.Advance(time.Duration(advance % int64(time.Hour)))
		if d := p.Reserve("h").Delay(); d < 0 || d > maxPause {
			t.Fatalf("wait %v outside [0, %v] after moving the clock", d, maxPause)
		}
	})
}
