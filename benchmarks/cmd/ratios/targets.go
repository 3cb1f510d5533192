package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// ourTB is our token bucket, the reference for the project's performance
// targets; our other limiters are named "ours-<algorithm>".
const ourTB = "ours-tokenbucket"

// check is one of the project's performance targets, as measured in this
// run.
type check struct {
	target   string
	measured string
	ran      bool // false: an implementation or scenario it needs did not run
	met      bool
}

func (c check) verdict() string {
	switch {
	case !c.ran:
		return "not run"
	case c.met:
		return "met"
	default:
		return "**missed**"
	}
}

// ratioCheck checks that impl's ns/op in scenario is at most limit times
// base's in baseScenario ("" for the same scenario), on the medians. When
// both have the same number of samples, two or more (make bench's
// interleaved rounds sample each once a round), it also gives the spread
// of the per-round ratios (see perRound).
func (r *results) ratioCheck(target, scenario, impl, baseScenario, base string, limit float64) check {
	c := check{target: target}
	if baseScenario == "" {
		baseScenario = scenario
	}
	a, ok1 := r.get(scenario, impl, "ns/op")
	b, ok2 := r.get(baseScenario, base, "ns/op")
	if !ok1 || !ok2 || b == 0 {
		return c
	}
	c.ran, c.met = true, a/b <= limit
	c.measured = fmt.Sprintf("%.2f× (%s / %s ns)", a/b, num(a), num(b)) + r.perRound(scenario, impl, baseScenario, base)
	return c
}

// perRound returns "; per round min–max× over n": the spread of the ratios
// of sample i of impl in scenario over sample i of base in baseScenario,
// which on a shared machine says more than the spread of either alone. It
// returns "" unless both have the same number of samples, two or more.
func (r *results) perRound(scenario, impl, baseScenario, base string) string {
	a := r.samples[key{scenario, impl}]["ns/op"]
	b := r.samples[key{baseScenario, base}]["ns/op"]
	if len(a) != len(b) || len(a) < 2 {
		return ""
	}
	rs := make([]float64, len(a))
	for i := range a {
		if b[i] <= 0 {
			return ""
		}
		rs[i] = a[i] / b[i]
	}
	return fmt.Sprintf("; per round %.2f–%.2f× over %d", slices.Min(rs), slices.Max(rs), len(rs))
}

// fasterCheck checks that impl's ns/op in scenario is below base's.
func (r *results) fasterCheck(target, scenario, impl, base string) check {
	c := r.ratioCheck(target, scenario, impl, "", base, 1)
	if c.ran {
		a, _ := r.get(scenario, impl, "ns/op")
		b, _ := r.get(scenario, base, "ns/op")
		c.met = a < b
	}
	return c
}

// ours returns our implementations that ran in the scenarios of group.
func (r *results) ours(groups ...string) []string {
	var out []string
	for _, im := range r.implsIn(groups...) {
		if strings.HasPrefix(im, "ours-") && !strings.HasSuffix(im, "bulkhead") {
			out = append(out, im)
		}
	}
	return out
}

// checks evaluates the project's performance targets on the run.
func (r *results) checks() []check {
	var cs []check
	add := func(c check) { cs = append(cs, c) }

	// One key: at most 0.45× x/time/rate, within ~1.25× of the floor of a
	// monotonic clock read plus a CAS.
	since, ok1 := r.get("Floor/op=time.Since", "", "ns/op")
	cas, ok2 := r.get("Floor/op=CAS", "", "ns/op")
	for _, path := range []string{"allow", "allow-whole", "deny"} {
		sc := "OneKey/path=" + path + "/run=serial"
		add(r.ratioCheck("one key, "+path+", serial: ≤ 0.45× xrate", sc, ourTB, "", "xrate", 0.45))
		add(r.ratioCheck("one key, "+path+", serial: ≤ 1.0× failsafe (a single limiter, no key to find)", sc, ourTB, "", "failsafe", 1.0))
		add(r.ratioCheck("one key, "+path+", serial, our global key \"\": ≤ 1.0× failsafe", "OneKey/path="+path+"/key=global/run=serial", ourTB, sc, "failsafe", 1.0))
		c := check{target: "one key, " + path + ", serial: ≤ 1.25× (time.Since + CAS)"}
		if ns, ok := r.get(sc, ourTB, "ns/op"); ok && ok1 && ok2 {
			floor := since + cas
			c.ran, c.met = true, ns/floor <= 1.25
			c.measured = fmt.Sprintf("%.2f× (%s / %s ns)", ns/floor, num(ns), num(floor))
		}
		add(c)
	}

	// Many keys, serial: each call's key built afresh (the key=prebuilt
	// rows are shown, not checked).
	add(r.ratioCheck("10k keys, serial: ≤ 0.5× xrate-map", "Keys/keys=10k/run=serial", ourTB, "", "xrate-map", 0.5))
	add(r.fasterCheck("10k keys, serial: faster than sethvargo", "Keys/keys=10k/run=serial", ourTB, "sethvargo"))
	add(r.ratioCheck("1M keys, serial: ≤ 0.6× xrate-map", "Keys/keys=1M/run=serial", ourTB, "", "xrate-map", 0.6))
	add(r.fasterCheck("1M keys, serial: faster than sethvargo", "Keys/keys=1M/run=serial", ourTB, "sethvargo"))

	// Parallel on distinct keys: scales, and beats every peer's parallel figure.
	for _, n := range []string{"10k", "1M"} {
		par, ser := "Keys/keys="+n+"/run=parallel", "Keys/keys="+n+"/run=serial"
		c := r.ratioCheck(n+" keys, parallel: ≤ 0.55× our serial", par, ourTB, ser, ourTB, 0.55)
		if c.ran {
			c.measured += r.linesFloor()
		}
		add(c)
		c = check{target: n + " keys, parallel: faster than every peer's parallel"}
		if ns, ok := r.get(par, ourTB, "ns/op"); ok {
			best, bestName := 0.0, ""
			for _, im := range r.impls {
				if strings.HasPrefix(im, "ours-") {
					continue
				}
				if v, ok := r.get(par, im, "ns/op"); ok && (bestName == "" || v < best) {
					best, bestName = v, im
				}
			}
			if bestName != "" {
				c.ran, c.met = true, ns < best
				c.measured = fmt.Sprintf("%.2f× the best peer, %s (%s / %s ns)", ns/best, bestName, num(ns), num(best))
			}
		}
		add(c)
	}

	// Allocations, and every algorithm near the token bucket.
	for _, im := range r.ours("OneKey", "Keys") {
		c := check{target: im + ": 0 allocs/op in every one-key and keyed run", ran: true, met: true}
		worst := 0.0
		for _, sc := range r.scenarios {
			if g := group(sc); g != "OneKey" && g != "Keys" {
				continue
			}
			if a, ok := r.get(sc, im, "allocs/op"); ok && a > worst {
				worst = a
				c.measured = fmt.Sprintf("%s allocs/op in %s", num(a), label(sc))
			}
		}
		if worst == 0 {
			c.measured = "0"
		}
		c.met = worst == 0
		add(c)
		if im == ourTB {
			continue
		}
		for _, sc := range []string{"OneKey/path=allow/run=serial", "Keys/keys=10k/run=serial"} {
			if _, ok := r.get(sc, im, "ns/op"); !ok {
				continue // not every algorithm runs every scenario
			}
			add(r.ratioCheck(im+", "+label(sc)+": ≤ 1.5× "+ourTB+" (sliding log excepted for large limits)", sc, im, "", ourTB, 1.5))
		}
	}

	// Memory.
	for _, im := range []string{ourTB, "ours-leakybucket", "ours-fixedwindow"} {
		c := check{target: im + ": ≤ 64 B per key after 1M keys"}
		if v, ok := r.get("Memory/keys=1M", im, "B/key"); ok {
			c.ran, c.met, c.measured = true, v <= 64, num(v)+" B/key"
		}
		if im == ourTB || c.ran {
			add(c)
		}
	}
	for _, im := range []string{ourTB, "ours-fixedwindow"} {
		c := check{target: im + ": ≤ 64 B per key after 10M keys"}
		if v, ok := r.get("Growth/keys=10M", im, "B/key"); ok {
			c.ran, c.met, c.measured = true, v <= 64, num(v)+" B/key"
		}
		add(c)
	}
	// Growth: no call waits for the store to grow.
	for _, im := range []string{ourTB, "ours-fixedwindow"} {
		c := check{target: im + ": worst single Allow while 10M new keys arrive ≤ 200 µs"}
		if v, ok := r.get("Growth/keys=10M", im, "worst-ns"); ok {
			p, _ := r.get("Growth/keys=10M", im, "p9999-ns")
			c.ran, c.met = true, v <= 200_000
			c.measured = fmt.Sprintf("%s ns (99.99th percentile %s ns)", num(v), num(p)) + r.machineFlood()
		}
		add(c)
	}
	for _, im := range r.ours("Memory") {
		c := check{target: im + ": memory comes back after keys go idle (≤ 10% of the flood still held)"}
		if v, ok := r.get("Memory/keys=1M", im, "idle-%"); ok {
			c.ran, c.met, c.measured = true, v <= 10, fmt.Sprintf("%.1f%% still held", v)
		}
		add(c)
	}

	// Bulkhead.
	add(r.ratioCheck("bulkhead, serial: ≤ 0.6× x/sync/semaphore", "Bulkhead/run=serial", "ours-bulkhead", "", "xsync-semaphore", 0.6))
	add(r.fasterCheck("bulkhead, parallel: faster than x/sync/semaphore", "Bulkhead/run=parallel", "ours-bulkhead", "xsync-semaphore"))

	// Fair share: Fair.Allow within 2× the Allow of the token bucket it
	// shares, and no allocation, at each tenant count that ran.
	for _, sc := range r.scenarios {
		if tenants, ok := strings.CutPrefix(sc, "Fair/"); ok {
			add(r.ratioCheck("fair Allow, "+tenants+": ≤ 2× plain Allow of its shared token bucket", sc, "ours-fair", "", "shared-tokenbucket", 2))
			c := check{target: "fair Allow, " + tenants + ": 0 allocs/op"}
			if a, ok := r.get(sc, "ours-fair", "allocs/op"); ok {
				c.ran, c.met, c.measured = true, a == 0, num(a)
			}
			add(c)
		}
	}

	// Contended: one key and one bulkhead from every core, at each
	// GOMAXPROCS that ran.
	for _, sc := range r.scenarios {
		procs, ok := strings.CutPrefix(sc, "Contended/op=tokenbucket/")
		if !ok {
			continue
		}
		add(r.ratioCheck("one key, contended, "+procs+": ≤ 1.0× mutex-tokenbucket", sc, ourTB, "", "mutex-tokenbucket", 1))
		add(r.spreadCheck("one key, contended, "+procs+": spread of samples (max/min) ≤ 1.3", sc, ourTB, 1.3))
	}
	for _, sc := range r.scenarios {
		if procs, ok := strings.CutPrefix(sc, "Contended/op=bulkhead/"); ok {
			add(r.fasterCheck("bulkhead, contended, "+procs+": faster than x/sync/semaphore", sc, "ours-bulkhead", "xsync-semaphore"))
		}
	}
	return cs
}

// linesFloor returns, for a parallel row's check, what this machine
// charges two cores for writing neighbouring lines ("; this machine: ..."),
// from the Floor rows lines-alternate and lines-apart, or "" if they did
// not run.
func (r *results) linesFloor() string {
	alt, ok1 := r.get("Floor/op=lines-alternate-parallel", "", "ns/op")
	apart, ok2 := r.get("Floor/op=lines-apart-parallel", "", "ns/op")
	if !ok1 || !ok2 || apart == 0 {
		return ""
	}
	return fmt.Sprintf("; this machine: cores writing neighbouring lines of one array %.2f× the time of writing separate blocks (%s / %s ns)", alt/apart, num(alt), num(apart))
}

// machineFlood returns, for a flood's check, the slowest calls of the
// machine row, the same flood writing new memory instead of calling
// Allow ("; the machine alone: ..."), or "" if it did not run.
func (r *results) machineFlood() string {
	v, ok := r.get("Growth/keys=10M", "machine", "worst-ns")
	if !ok {
		return ""
	}
	p, _ := r.get("Growth/keys=10M", "machine", "p9999-ns")
	o, _ := r.get("Growth/keys=10M", "machine", "over200us")
	return fmt.Sprintf("; the machine alone, the same flood writing new memory instead of calling Allow: %s ns (99.99th percentile %s ns, %.0f calls over 200 µs)", num(v), num(p), o)
}

// spreadCheck checks that the max/min of impl's ns/op samples in scenario
// is at most limit. One sample has no spread: the check is then not run.
func (r *results) spreadCheck(target, scenario, impl string, limit float64) check {
	c := check{target: target}
	sp, n := r.spread(scenario, impl, "ns/op")
	if n < 2 || sp == 0 {
		return c
	}
	c.ran, c.met = true, sp <= limit
	c.measured = fmt.Sprintf("×%.2f over %d samples", sp, n)
	return c
}

func reportTargets(w io.Writer, r *results) {
	cs := r.checks()
	fmt.Fprintf(w, "Performance targets, in this run:\n\n| target | measured | verdict |\n|---|---|---|\n")
	for _, c := range cs {
		m := c.measured
		if !c.ran {
			m = "—"
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", c.target, m, c.verdict())
	}
	fmt.Fprintln(w)
}
