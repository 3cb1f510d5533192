package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/ratelimitkit/ratelimit/benchmarks
cpu: Test CPU
BenchmarkFloor/op=time.Since-2         	1000000	        20.00 ns/op
BenchmarkFloor/op=CAS-2                	1000000	         5.00 ns/op
BenchmarkOneKey/path=allow/impl=ours-tokenbucket/run=serial-2   	1000000	        30.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkOneKey/path=allow/impl=ours-tokenbucket/run=serial-2   	1000000	        34.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkOneKey/path=allow/impl=ours-tokenbucket/run=serial-2   	1000000	        90.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkOneKey/path=allow/impl=xrate/run=serial-2              	1000000	        80.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkOneKey/path=allow/impl=ulule/run=serial-2              	1000000	       400.0 ns/op	      32 B/op	       2 allocs/op
BenchmarkKeys/keys=10k/impl=ours-tokenbucket/run=serial-2       	1000000	        60.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys/keys=10k/impl=xrate-map/run=serial-2              	1000000	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys/keys=10k/impl=sethvargo/run=serial-2              	1000000	        50.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkMemory/keys=1M/impl=ours-tokenbucket-2  	1	       100.0 B/key	         0.5 idle-%	         0.5 idle-B/key	      2000 ns/key
BenchmarkMemory/keys=1M/impl=xrate-map-2         	1	       150.0 B/key	       100.0 idle-%	       150.0 idle-B/key	      4000 ns/key
BenchmarkMemory/keys=1M/impl=ulule-2             	1	       190.0 B/key	      4500 ns/key
BenchmarkGrowth/keys=10M/impl=ours-tokenbucket-2         	       1	        51.85 B/key	      1145 ns/key	      1504 over200us	    478063 p9999-ns	  16749983 worst-ns
BenchmarkGrowth/keys=10M/impl=ours-fixedwindow-2         	       1	        70.00 B/key	      1008 ns/key	         0 over200us	    42275 p9999-ns	  150000 worst-ns
BenchmarkContended/op=tokenbucket/impl=ours-tokenbucket     	1000000	        40.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkContended/op=tokenbucket/impl=ours-tokenbucket     	1000000	        44.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkContended/op=tokenbucket/impl=ours-tokenbucket-2   	1000000	        50.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkContended/op=tokenbucket/impl=ours-tokenbucket-2   	1000000	       120.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkContended/op=tokenbucket/impl=ours-tokenbucket-2   	1000000	        60.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkContended/op=tokenbucket/impl=xrate                	1000000	        80.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkContended/op=tokenbucket/impl=xrate-2              	1000000	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkContended/op=tokenbucket/impl=mutex-tokenbucket    	1000000	        50.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkContended/op=tokenbucket/impl=mutex-tokenbucket-2  	1000000	        55.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkContended/op=bulkhead/impl=ours-bulkhead-2         	1000000	        12.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkContended/op=bulkhead/impl=xsync-semaphore-2       	1000000	        15.00 ns/op	       0 B/op	       0 allocs/op
PASS
`

func TestParseName(t *testing.T) {
	for _, c := range []struct {
		in   string
		want key
	}{
		{"BenchmarkOneKey/path=allow/impl=xrate/run=serial-2", key{"OneKey/path=allow/run=serial", "xrate"}},
		{"BenchmarkKeys/keys=1M/impl=ours-tokenbucket/run=parallel", key{"Keys/keys=1M/run=parallel", "ours-tokenbucket"}},
		{"BenchmarkFloor/op=time.Now-16", key{"Floor/op=time.Now", ""}},
		{"BenchmarkMemory/keys=1M/impl=xrate-map-2", key{"Memory/keys=1M", "xrate-map"}},
		// The contended rows keep their GOMAXPROCS; none means 1.
		{"BenchmarkContended/op=tokenbucket/impl=xrate-8", key{"Contended/op=tokenbucket/procs=8", "xrate"}},
		{"BenchmarkContended/op=bulkhead/impl=ours-bulkhead", key{"Contended/op=bulkhead/procs=1", "ours-bulkhead"}},
	} {
		if got := parseName(c.in); got != c.want {
			t.Errorf("parseName(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestReport(t *testing.T) {
	r := newResults()
	if err := r.parse(strings.NewReader(sample)); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.get("OneKey/path=allow/run=serial", "ours-tokenbucket", "ns/op"); got != 34 {
		t.Errorf("median of 30, 34, 90 = %v, want 34", got)
	}
	var plain strings.Builder
	report(&plain, r, false)
	if strings.Contains(plain.String(), "verdict") {
		t.Errorf("without -targets, the report checks targets:\n%s", plain.String())
	}
	var sb strings.Builder
	report(&sb, r, true)
	out := sb.String()
	for _, want := range []string{
		"cpu: Test CPU",
		"| OneKey path=allow run=serial | xrate 80.0 ns | 0.42× (34.0) | 1.00× (80.0) | 5.00× (400) 2 allocs |",
		"| scenario | baseline | ours-tokenbucket | xrate-map | sethvargo |",
		"| Keys keys=10k run=serial | xrate-map 100 ns | 0.60× (60.0) | 1.00× (100) | 0.50× (50.0) |",
		"| time.Since | 20.0 |",
		"| Memory keys=1M | ours-tokenbucket | 100 | 0.67× | 0.50 | 0.5% | 2000 |",
		"| Memory keys=1M | ulule | 190 | 1.27× | n/a | n/a | 4500 |",
		"| one key, allow, serial: ≤ 0.45× xrate | 0.42× (34.0 / 80.0 ns) | met |",
		"| one key, allow, serial: ≤ 1.25× (time.Since + CAS) | 1.36× (34.0 / 25.0 ns) | **missed** |",
		"| 10k keys, serial: ≤ 0.5× xrate-map | 0.60× (60.0 / 100 ns) | **missed** |",
		"| 10k keys, serial: faster than sethvargo | 1.20× (60.0 / 50.0 ns) | **missed** |",
		"| one key, deny, serial: ≤ 0.45× xrate | — | not run |",
		"| ours-tokenbucket: 0 allocs/op in every one-key and keyed run | 0 | met |",
		"| ours-tokenbucket: ≤ 64 B per key after 1M keys | 100 B/key | **missed** |",
		"| ours-tokenbucket: memory comes back after keys go idle (≤ 10% of the flood still held) | 0.5% still held | met |",
		"| ours-tokenbucket: worst single Allow while 10M new keys arrive ≤ 200 µs | 16749983 ns (99.99th percentile 478063 ns) | **missed** |",
		"| ours-fixedwindow: worst single Allow while 10M new keys arrive ≤ 200 µs | 150000 ns (99.99th percentile 42275 ns) | met |",
		"| ours-tokenbucket: ≤ 64 B per key after 10M keys | 51.9 B/key | met |",
		"| ours-fixedwindow: ≤ 64 B per key after 10M keys | 70.0 B/key | **missed** |",
		// Contended rows: a ratio, the median and the spread of the samples.
		"| Contended op=tokenbucket procs=1 | xrate 80.0 ns | 0.53× (42.0; ×1.10 over 2) | 1.00× (80.0; ×1.00 over 1) | 0.62× (50.0; ×1.00 over 1) |",
		"| Contended op=tokenbucket procs=2 | xrate 100 ns | 0.60× (60.0; ×2.40 over 3) |",
		"| Contended op=bulkhead procs=2 | xsync-semaphore 15.0 ns | 0.80× (12.0; ×1.00 over 1) | 1.00× (15.0; ×1.00 over 1) |",
		"| one key, contended, procs=1: ≤ 1.0× mutex-tokenbucket | 0.84× (42.0 / 50.0 ns) | met |",
		"| one key, contended, procs=2: ≤ 1.0× mutex-tokenbucket | 1.09× (60.0 / 55.0 ns) | **missed** |",
		"| one key, contended, procs=1: spread of samples (max/min) ≤ 1.3 | ×1.10 over 2 samples | met |",
		"| one key, contended, procs=2: spread of samples (max/min) ≤ 1.3 | ×2.40 over 3 samples | **missed** |",
		"| bulkhead, contended, procs=2: faster than x/sync/semaphore | 0.80× (12.0 / 15.0 ns) | met |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q\n%s", want, out)
		}
	}
}

// Every ratio target gives the spread of its per-round ratios when both
// sides were sampled once a round, as make bench samples them.
func TestRatioCheckPerRound(t *testing.T) {
	r := newResults()
	in := `BenchmarkKeys/keys=1M/impl=ours-tokenbucket/run=serial-2   	1000	       500.0 ns/op
BenchmarkKeys/keys=1M/impl=xrate-map/run=serial-2          	1000	      1000.0 ns/op
BenchmarkKeys/keys=1M/impl=ours-tokenbucket/run=serial-2   	1000	       700.0 ns/op
BenchmarkKeys/keys=1M/impl=xrate-map/run=serial-2          	1000	       1000.0 ns/op
BenchmarkKeys/keys=1M/impl=ours-tokenbucket/run=parallel-2 	1000	       300.0 ns/op
`
	out := targetsOf(t, r, in)
	wantLines(t, out,
		// medians 600 / 1000; the rounds 0.50× and 0.70×.
		"| 1M keys, serial: ≤ 0.6× xrate-map | 0.60× (600 / 1000 ns); per round 0.50–0.70× over 2 | met |",
		// one parallel sample against two serial ones: no rounds to pair.
		"| 1M keys, parallel: ≤ 0.55× our serial | 0.50× (300 / 600 ns) | met |",
	)
}

// targetsOf parses in, benchmark output, into r and returns the targets'
// report of it.
func targetsOf(t *testing.T, r *results, in string) string {
	t.Helper()
	if err := r.parse(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	reportTargets(&b, r)
	return b.String()
}

// wantLines fails t for each of wants that out lacks.
func wantLines(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// The checks of the parallel rows and of the flood give the machine's own
// figures from the same run next to ours: the cost of neighbouring lines
// written by two cores, and the flood's slowest calls without a limiter.
func TestMachineContext(t *testing.T) {
	r := newResults()
	in := `BenchmarkFloor/op=lines-apart-parallel-2     	1000	         3.00 ns/op
BenchmarkFloor/op=lines-alternate-parallel-2 	1000	         9.00 ns/op
BenchmarkKeys/keys=10k/impl=ours-tokenbucket/run=serial-2   	1000	       100.0 ns/op
BenchmarkKeys/keys=10k/impl=ours-tokenbucket/run=parallel-2 	1000	        65.0 ns/op
BenchmarkGrowth/keys=10M/impl=ours-tokenbucket-2 	1	        56.00 B/key	      1000 ns/key	       100 over200us	     90000 p9999-ns	   3000000 worst-ns
BenchmarkGrowth/keys=10M/impl=machine-2          	1	        66.00 B/key	       100 ns/key	        40 over200us	     20000 p9999-ns	   2000000 worst-ns
`
	out := targetsOf(t, r, in)
	wantLines(t, out,
		"| 10k keys, parallel: ≤ 0.55× our serial | 0.65× (65.0 / 100 ns); this machine: cores writing neighbouring lines of one array 3.00× the time of writing separate blocks (9.00 / 3.00 ns) | **missed** |",
		"| ours-tokenbucket: worst single Allow while 10M new keys arrive ≤ 200 µs | 3000000 ns (99.99th percentile 90000 ns); the machine alone, the same flood writing new memory instead of calling Allow: 2000000 ns (99.99th percentile 20000 ns, 40 calls over 200 µs) | **missed** |",
	)
	// The machine is not one of ours: it has no memory target of its own.
	if strings.Contains(out, "machine: ≤ 64 B") {
		t.Errorf("report checks the machine row's memory:\n%s", out)
	}
}
