package httplimit

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// countingBase answers with status() and counts the requests it got.
type countingBase struct {
	sent   int
	status func() int
}

func (b *countingBase) RoundTrip(req *http.Request) (*http.Response, error) {
	b.sent++
	rec := httptest.NewRecorder()
	rec.WriteHeader(b.status())
	return rec.Result(), nil
}

// A Transport with a Throttle: while the server fails every call the
// throttle rejects most requests locally (ErrThrottled, not sent: the
// server's count proves it), and after the server recovers it lifts.
func TestTransportThrottle(t *testing.T) {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	src := rand.New(rand.NewPCG(1, 2))
	th, err := ratelimit.NewClientThrottle(2, time.Second, ratelimit.WithThrottleClock(clock), ratelimit.WithThrottleRand(src.Float64))
	if err != nil {
		t.Fatal(err)
	}
	status := http.StatusServiceUnavailable
	base := &countingBase{status: func() int { return status }}
	tr := &Transport{Base: base, Throttle: th, Clock: clock, MaxPause: -1}
	call := func() (sent, throttled bool) {
		clock.Advance(time.Millisecond)
		before := base.sent
		req, _ := http.NewRequest("GET", "http://api.example/", nil)
		resp, err := tr.RoundTrip(req)
		switch {
		case errors.Is(err, ratelimit.ErrThrottled):
			if base.sent != before {
				t.Fatal("a throttled request reached the server")
			}
			return false, true
		case err != nil:
			t.Fatal(err)
		}
		resp.Body.Close()
		return base.sent == before+1, false
	}
	throttled := 0
	for range 3000 {
		if _, th := call(); th {
			throttled++
		}
	}
	if throttled < 2500 {
		t.Fatalf("throttled %d of 3000 requests to a server failing them all", throttled)
	}
	status = http.StatusOK
	for range 12_000 {
		call()
	}
	throttled = 0
	for range 1000 {
		if _, th := call(); th {
			throttled++
		}
	}
	if throttled != 0 {
		t.Fatalf("throttled %d of 1000 requests after the server recovered", throttled)
	}
}

func TestAccepted(t *testing.T) {
	resp := func(code int) *http.Response { return &http.Response{StatusCode: code} }
	for code, want := range map[int]bool{200: true, 404: true, 429: false, 500: false, 503: false} {
		if got := DefaultAccepted(resp(code), nil); got != want {
			t.Errorf("DefaultAccepted(%d) = %v, want %v", code, got, want)
		}
	}
	if DefaultAccepted(nil, errors.New("refused")) {
		t.Error("DefaultAccepted counts a failed round trip as accepted")
	}
	acc := AcceptStatus(200, 204)
	if !acc(resp(204), nil) || acc(resp(404), nil) || acc(nil, errors.New("x")) {
		t.Error("AcceptStatus(200, 204) misjudges")
	}
	// A Transport with a custom Accepted: 404 counted as a refusal.
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	th, err := ratelimit.NewClientThrottle(2, time.Second, ratelimit.WithThrottleClock(clock), ratelimit.WithThrottleRand(func() float64 { return 0.99 }))
	if err != nil {
		t.Fatal(err)
	}
	tr := &Transport{Base: &countingBase{status: func() int { return 404 }}, Throttle: th, Accepted: acc, Clock: clock}
	for range 3 {
		req, _ := http.NewRequest("GET", "http://api.example/", nil)
		if resp, err := tr.RoundTrip(req); err == nil {
			resp.Body.Close()
		}
	}
	if p := th.RejectProbability(); p != 0.75 {
		t.Fatalf("p = %v after three 404s counted as refusals, want 0.75", p)
	}
}
