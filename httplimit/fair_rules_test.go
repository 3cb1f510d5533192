package httplimit

import (
	"cmp"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// floodAsk is one request of a flood: at instant at (ns from the start),
// by user who (0 is the flooder).
type floodAsk struct {
	at  int64
	who int
}

// floodSchedule: nine users asking share a second each, evenly spaced at
// random phases, and user 0 asking 100 times that, for windows seconds;
// requests at one instant in random order.
func floodSchedule(seed uint64, share, windows int) []floodAsk {
	rng := rand.New(rand.NewPCG(seed, 11))
	sec := int64(time.Second)
	var s []floodAsk
	for w := range windows {
		for i := range 10 {
			k := share
			if i == 0 {
				k = 100 * share
			}
			phase := rng.Int64N(sec / int64(k))
			for j := range k {
				s = append(s, floodAsk{int64(w)*sec + phase + int64(j)*(sec/int64(k)), i})
			}
		}
	}
	rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	slices.SortStableFunc(s, func(a, b floodAsk) int { return cmp.Compare(a.at, b.at) })
	return s
}

// A fair rule works end to end through RulesMiddleware on a real server:
// under "*: 200/s global fair per user", with one user flooding at 100
// times its share and nine asking their share (20 a second), each of the
// nine gets at least 95% of its share over every second after the first;
// under the same rule without "fair" the flooder crowds them out. A
// request without a user is refused and takes nothing from the limit.
func TestRulesMiddlewareFair(t *testing.T) {
	const share, windows = 20, 6
	s := floodSchedule(1, share, windows)
	for _, fair := range []bool{true, false} {
		config := "*: 200/s global as shared"
		if fair {
			config = "*: 200/s global fair per user as shared"
		}
		clock := ratelimit.NewManualClock(t0)
		rules, err := ratelimit.ParseRules(config, ratelimit.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		h := RulesMiddleware(rules, WithUser(func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }))(okHandler)
		srv := httptest.NewServer(h)
		get := func(user string) *http.Response {
			req, _ := http.NewRequest("GET", srv.URL+"/items", nil)
			if user != "" {
				req.Header.Set("X-User", user)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp
		}
		var got [windows][10]int
		for _, a := range s {
			clock.Set(t0.Add(time.Duration(a.at)))
			resp := get("u" + strconv.Itoa(a.who))
			switch resp.StatusCode {
			case 200:
				got[a.at/int64(time.Second)][a.who]++
			case 429:
				if resp.Header.Get("Retry-After") == "" {
					t.Fatal("a 429 without Retry-After")
				}
			default:
				t.Fatalf("status %d", resp.StatusCode)
			}
		}
		want := share * (windows - 1)
		worst := want
		for i := 1; i < 10; i++ {
			each := 0
			for w := 1; w < windows; w++ {
				each += got[w][i]
			}
			worst = min(worst, each)
		}
		t.Logf("fair %v: the worst of the nine got %d of %d (%.0f%%)", fair, worst, want, 100*float64(worst)/float64(want))
		if fair && worst*100 < want*95 {
			t.Errorf("fair: one of the nine got %d of its share %d", worst, want)
		}
		if !fair && worst*100 >= want*50 {
			t.Errorf("not fair: the worst of the nine got %d of %d; the flood should crowd them out", worst, want)
		}
		if fair {
			clock.Advance(time.Hour) // the bucket full again
			if resp := get(""); resp.StatusCode == 200 {
				t.Error("a request without a user passed a fair per-user rule")
			}
			d, err := rules.Check(t.Context(), "GET /items", ratelimit.Subject{User: "x"}, 0)
			if err != nil || d.Remaining != 200 {
				t.Errorf("a request without a user took from the shared limit: %+v, %v", d, err)
			}
		}
		srv.Close()
	}
}
