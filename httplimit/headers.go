package httplimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/field"
)

// Headers selects the rate-limit response headers the middleware writes.
// Retry-After is written on every denial whatever the selection.
type Headers uint8

const (
	// IETFHeaders are RateLimit-Policy and RateLimit as
	// draft-ietf-httpapi-ratelimit-headers-11 (May 2026) writes them,
	// Structured Field lists of items named by a policy:
	//
	//	RateLimit-Policy: "default";q=100;w=60
	//	RateLimit: "default";r=42;t=30
	//
	// q is the policy's quota (the limit), w its window in seconds, r the
	// quota remaining and t the effective window in seconds. The default.
	IETFHeaders Headers = 1 << iota
	// XRateLimitHeaders are the older, unstandardised X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset, the last as a number of
	// seconds from now (the same value as RateLimit's t), not a Unix time.
	XRateLimitHeaders
)

// Canonical header keys, written straight into the header map (Set would
// canonicalise, and allocate, on every response).
const (
	hdrPolicy      = "Ratelimit-Policy"
	hdrRateLimit   = "Ratelimit"
	hdrXLimit      = "X-Ratelimit-Limit"
	hdrXRemaining  = "X-Ratelimit-Remaining"
	hdrXReset      = "X-Ratelimit-Reset"
	hdrRetryAfter  = "Retry-After"
	maxHeaderVals  = 6
	problemBaseURI = "https://iana.org/assignments/http-problem-types#"
)

// view is what the headers of one response say.
type view struct {
	policy string             // RateLimit-Policy value, "" for none
	item   string             // the binding limit's policy name, as an sf-string
	d      ratelimit.Decision // the binding limit's decision
	retry  time.Duration      // Retry-After, when denied
	denied bool
}

// effectiveWindow is RateLimit's t: the seconds within which the client
// gets no more than Remaining. On a denial that is until the request could
// be allowed (so t is never past Retry-After, as the draft asks); otherwise
// until the allowance is full again, which is conservative for a token
// bucket (it refills gradually, so a client keeping to r within t is never
// limited).
func effectiveWindow(v *view) int64 {
	if v.denied {
		return field.CeilSeconds(v.d.RetryAfter)
	}
	return field.CeilSeconds(v.d.ResetAfter)
}

// write sets the selected headers on h. The values built here share one
// string, and all values one slice backing array: two allocations for any
// selection. The RateLimit-Policy value is built once, elsewhere.
func write(h http.Header, which Headers, v *view) {
	var buf [128]byte
	var ends [maxHeaderVals]int // end of each value in buf; -1: v.policy
	var keys [maxHeaderVals]string
	b, k := buf[:0], 0
	mark := func(key string, end int) {
		keys[k], ends[k] = key, end
		k++
	}
	t := effectiveWindow(v)
	if which&IETFHeaders != 0 {
		if v.policy != "" {
			mark(hdrPolicy, -1)
		}
		b = append(b, v.item...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, int64(v.d.Remaining), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, t, 10)
		mark(hdrRateLimit, len(b))
	}
	if which&XRateLimitHeaders != 0 {
		b = strconv.AppendInt(b, int64(v.d.Limit), 10)
		mark(hdrXLimit, len(b))
		b = strconv.AppendInt(b, int64(v.d.Remaining), 10)
		mark(hdrXRemaining, len(b))
		b = strconv.AppendInt(b, t, 10)
		mark(hdrXReset, len(b))
	}
	if v.denied {
		b = strconv.AppendInt(b, field.CeilSeconds(v.retry), 10)
		mark(hdrRetryAfter, len(b))
	}
	if k == 0 {
		return
	}
	s := string(b)
	vals := make([]string, k)
	start := 0
	for i := range k {
		if ends[i] < 0 {
			vals[i] = v.policy
		} else {
			vals[i] = s[start:ends[i]]
			start = ends[i]
		}
		h[keys[i]] = vals[i : i+1 : i+1] // full slice: an Add reallocates
	}
}
