package main

import (
	"strings"
	"testing"
)

const fairSample = `BenchmarkFair/tenants=1/impl=shared-tokenbucket-2   	1000000	        20.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkFair/tenants=1/impl=ours-fair-2            	1000000	        36.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkFair/tenants=10000/impl=shared-tokenbucket-2	1000000	        20.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkFair/tenants=10000/impl=ours-fair-2        	1000000	        50.00 ns/op	       0 B/op	       1 allocs/op
BenchmarkFair/tenants=1/impl=shared-tokenbucket-2   	1000000	        30.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkFair/tenants=1/impl=ours-fair-2            	1000000	        45.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkFair/tenants=10000/impl=shared-tokenbucket-2	1000000	        20.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkFair/tenants=10000/impl=ours-fair-2        	1000000	        30.00 ns/op	       0 B/op	       1 allocs/op
`

// The fair rows: a table against the shared token bucket, and the targets
// (≤ 2×, 0 allocs) per tenant count, with the per-round ratios' spread.
func TestReportFair(t *testing.T) {
	r := newResults()
	if err := r.parse(strings.NewReader(fairSample)); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	report(&b, r, true)
	out := b.String()
	for _, want := range []string{
		"| Fair tenants=1 | shared-tokenbucket 25.0 ns | 1.00× (25.0; ×1.50 over 2) | 1.62× (40.5; ×1.25 over 2) |",
		// medians 40.5 / 25: met; the rounds 1.80× and 1.50×.
		"| fair Allow, tenants=1: ≤ 2× plain Allow of its shared token bucket | 1.62× (40.5 / 25.0 ns); per round 1.50–1.80× over 2 | met |",
		"| fair Allow, tenants=1: 0 allocs/op | 0 | met |",
		// medians 40 / 20: met at exactly 2×; the rounds 2.50× and 1.50×.
		"| fair Allow, tenants=10000: ≤ 2× plain Allow of its shared token bucket | 2.00× (40.0 / 20.0 ns); per round 1.50–2.50× over 2 | met |",
		"| fair Allow, tenants=10000: 0 allocs/op | 1.00 | **missed** |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
