// Command ratios reads the output of the benchmarks module's go test -bench
// run and prints, as Markdown, the median of each benchmark as a ratio
// against the baseline measured in the same run: x/time/rate for the rate
// limiters (a single rate.Limiter for one key, the map+mutex pattern for
// many keys), x/sync/semaphore for the bulkheads. With -targets it then
// checks the project's performance targets for our limiters.
//
// Usage:
//
//	go run ./cmd/ratios [-targets] bench.txt [more.txt ...]
//
// With no file it reads standard input. Benchmark names are expected in
// the module's form, Benchmark<Group>/<key>=<value>/..., where impl=<name>
// names the implementation; every other part names the scenario. A
// trailing -N (GOMAXPROCS) is ignored, except in the Contended group,
// which runs at several -cpu values: there it becomes part of the scenario
// as procs=N (no suffix meaning 1). With -count > 1 each figure is the
// median of its samples; the contended rows also give the spread of their
// samples, max/min.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	targets := flag.Bool("targets", false, "check the project's performance targets too")
	flag.Parse()
	r, err := readAll(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratios:", err)
		os.Exit(1)
	}
	if len(r.order) == 0 {
		fmt.Fprintln(os.Stderr, "ratios: no benchmark results in the input")
		os.Exit(1)
	}
	report(os.Stdout, r, *targets)
}

func readAll(files []string) (*results, error) {
	r := newResults()
	if len(files) == 0 {
		return r, r.parse(os.Stdin)
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		err = r.parse(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return r, nil
}

// key names one row of results: a scenario and the implementation run in
// it. Floors have no implementation.
type key struct {
	scenario string // e.g. "OneKey/path=allow/run=serial"
	impl     string // e.g. "ours-tokenbucket"
}

// results holds every sample of every metric, by benchmark.
type results struct {
	samples   map[key]map[string][]float64 // unit -> values
	order     []key                        // first appearance
	scenarios []string                     // first appearance
	impls     []string                     // first appearance
	config    []string                     // "cpu: ..." and the like
}

func newResults() *results {
	return &results{samples: make(map[key]map[string][]float64)}
}

// parse reads go test -bench output, keeping benchmark lines and the
// configuration lines (goos, goarch, cpu, pkg) and skipping the rest.
func (r *results) parse(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, ": "); ok && (k == "cpu" || k == "goos" || k == "goarch") {
			if c := k + ": " + strings.TrimSpace(v); !slices.Contains(r.config, c) {
				r.config = append(r.config, c)
			}
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || len(f)%2 != 0 {
			continue // a name alone (chatty output) or a malformed line
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		k := parseName(f[0])
		m := r.samples[k]
		if m == nil {
			m = make(map[string][]float64)
			r.samples[k] = m
			r.order = append(r.order, k)
			if !slices.Contains(r.scenarios, k.scenario) {
				r.scenarios = append(r.scenarios, k.scenario)
			}
			if k.impl != "" && !slices.Contains(r.impls, k.impl) {
				r.impls = append(r.impls, k.impl)
			}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return fmt.Errorf("bad value %q in %q", f[i], line)
			}
			m[f[i+1]] = append(m[f[i+1]], v)
		}
	}
	return sc.Err()
}

// procsGroups are the groups run at several -cpu values, whose GOMAXPROCS
// is part of the scenario.
var procsGroups = []string{"Contended"}

// parseName splits a benchmark name into its scenario and implementation.
func parseName(name string) key {
	name = strings.TrimPrefix(name, "Benchmark")
	procs := 1 // go test omits the suffix at GOMAXPROCS 1
	if i := strings.LastIndexByte(name, '-'); i >= 0 {
		if n, err := strconv.Atoi(name[i+1:]); err == nil {
			name, procs = name[:i], n
		}
	}
	if slices.Contains(procsGroups, group(name)) {
		name += "/procs=" + strconv.Itoa(procs)
	}
	var k key
	parts := strings.Split(name, "/")
	kept := parts[:0]
	for _, p := range parts {
		if v, ok := strings.CutPrefix(p, "impl="); ok {
			k.impl = v
			continue
		}
		kept = append(kept, p)
	}
	k.scenario = strings.Join(kept, "/")
	return k
}

// get returns the median of unit for scenario and impl.
func (r *results) get(scenario, impl, unit string) (float64, bool) {
	vs := r.samples[key{scenario, impl}][unit]
	if len(vs) == 0 {
		return 0, false
	}
	return median(vs), true
}

// spread returns max/min of the samples of unit for scenario and impl,
// and how many there are.
func (r *results) spread(scenario, impl, unit string) (float64, int) {
	vs := r.samples[key{scenario, impl}][unit]
	if len(vs) == 0 || slices.Min(vs) <= 0 {
		return 0, len(vs)
	}
	return slices.Max(vs) / slices.Min(vs), len(vs)
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// baselines are the implementations ratios are taken against, by
// preference: the first one present in a scenario is its baseline.
var baselines = []string{"xrate", "xrate-map", "xsync-semaphore", "shared-tokenbucket"}

// baseline returns the baseline implementation of scenario, if it ran.
func (r *results) baseline(scenario, unit string) (string, float64, bool) {
	for _, b := range baselines {
		if v, ok := r.get(scenario, b, unit); ok && v > 0 {
			return b, v, true
		}
	}
	return "", 0, false
}

func group(scenario string) string {
	g, _, _ := strings.Cut(scenario, "/")
	return g
}

// inGroup reports whether scenario belongs to g, a group or a group with
// the leading parts of its scenarios ("Contended/op=bulkhead").
func inGroup(scenario, g string) bool {
	return scenario == g || strings.HasPrefix(scenario, g+"/")
}

// label makes a scenario readable in a table cell.
func label(scenario string) string {
	return strings.ReplaceAll(scenario, "/", " ")
}

// report prints the tables of r and, if targets, the targets' table.
func report(w io.Writer, r *results, targets bool) {
	if len(r.config) > 0 {
		fmt.Fprintf(w, "%s\n\n", strings.Join(r.config, ", "))
	}
	reportTime(w, r)
	reportFloors(w, r)
	reportMemory(w, r)
	if targets {
		reportTargets(w, r)
	}
}

// implsIn returns the implementations that ran in scenarios of the groups
// (see inGroup), in order of first appearance.
func (r *results) implsIn(groups ...string) []string {
	var out []string
	for _, im := range r.impls {
		for _, k := range r.order {
			if k.impl == im && slices.ContainsFunc(groups, func(g string) bool { return inGroup(k.scenario, g) }) {
				out = append(out, im)
				break
			}
		}
	}
	return out
}

// timeGroups are the timed scenario groups, one table each. Those with
// spread give each cell's max/min over its samples too.
var timeGroups = []struct {
	group, title string
	spread       bool
}{
	{"OneKey", "One key", false},
	{"Keys", "Many keys, allow path", false},
	{"Bulkhead", "Bulkhead, TryAcquire+Release", false},
	{"Fair", "Fair share: Fair.Allow for known tenants within their shares, against the Allow of its shared token bucket", true},
	{"Contended/op=tokenbucket", "Contended: one key (token bucket, allow path) from GOMAXPROCS goroutines", true},
	{"Contended/op=bulkhead", "Contended: one bulkhead, TryAcquire+Release from GOMAXPROCS goroutines", true},
}

func reportTime(w io.Writer, r *results) {
	for _, g := range timeGroups {
		impls := r.implsIn(g.group)
		if len(impls) == 0 {
			continue
		}
		spread := ""
		if g.spread {
			spread = ", then the spread of the samples, max/min"
		}
		fmt.Fprintf(w, "%s: time per call as a ratio to the baseline in the same run (median ns/op in brackets%s; allocs/op when not 0):\n\n", g.title, spread)
		fmt.Fprintf(w, "| scenario | baseline |")
		for _, im := range impls {
			fmt.Fprintf(w, " %s |", im)
		}
		fmt.Fprintf(w, "\n|---|---|%s\n", strings.Repeat("---|", len(impls)))
		for _, sc := range r.scenarios {
			if inGroup(sc, g.group) {
				timeRow(w, r, sc, impls, g.spread)
			}
		}
		fmt.Fprintln(w)
	}
}

func timeRow(w io.Writer, r *results, sc string, impls []string, spread bool) {
	bname, bns, hasBase := r.baseline(sc, "ns/op")
	if hasBase {
		fmt.Fprintf(w, "| %s | %s %s ns |", label(sc), bname, num(bns))
	} else {
		fmt.Fprintf(w, "| %s | none |", label(sc))
	}
	for _, im := range impls {
		ns, ok := r.get(sc, im, "ns/op")
		if !ok {
			fmt.Fprintf(w, " |")
			continue
		}
		var brackets []string
		if hasBase {
			fmt.Fprintf(w, " %.2f×", ns/bns)
			brackets = append(brackets, num(ns))
		} else {
			fmt.Fprintf(w, " %s ns", num(ns))
		}
		if spread {
			sp, n := r.spread(sc, im, "ns/op")
			brackets = append(brackets, fmt.Sprintf("×%.2f over %d", sp, n))
		}
		if len(brackets) > 0 {
			fmt.Fprintf(w, " (%s)", strings.Join(brackets, "; "))
		}
		if a, ok := r.get(sc, im, "allocs/op"); ok && a > 0 {
			fmt.Fprintf(w, " %s allocs", strconv.FormatFloat(a, 'f', -1, 64))
		}
		fmt.Fprintf(w, " |")
	}
	fmt.Fprintln(w)
}

func reportFloors(w io.Writer, r *results) {
	var rows []key
	for _, k := range r.order {
		if group(k.scenario) == "Floor" {
			rows = append(rows, k)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "Reference floors (median ns/op):\n\n| operation | ns/op |\n|---|---|\n")
	for _, k := range rows {
		ns, _ := r.get(k.scenario, k.impl, "ns/op")
		op := strings.TrimPrefix(strings.TrimPrefix(k.scenario, "Floor/"), "op=")
		fmt.Fprintf(w, "| %s | %s |\n", op, num(ns))
	}
	fmt.Fprintln(w)
}

func reportMemory(w io.Writer, r *results) {
	var scs []string
	for _, sc := range r.scenarios {
		if group(sc) == "Memory" {
			scs = append(scs, sc)
		}
	}
	if len(scs) == 0 {
		return
	}
	fmt.Fprintf(w, "Memory after a flood of new keys (medians). B/key: live heap retained per key; idle: what is still held after the keys go idle (n/a: the implementation reads only the real clock, not measurable without sleeping):\n\n")
	fmt.Fprintf(w, "| scenario | impl | B/key | ratio | idle B/key | idle %% of flood | ns per new key |\n|---|---|---|---|---|---|---|\n")
	for _, sc := range scs {
		_, base, hasBase := r.baseline(sc, "B/key")
		for _, k := range r.order {
			if k.scenario != sc {
				continue
			}
			im := k.impl
			bk, ok := r.get(sc, im, "B/key")
			if !ok {
				continue
			}
			ratio := "—"
			if hasBase {
				ratio = fmt.Sprintf("%.2f×", bk/base)
			}
			idle, idlePct := "n/a", "n/a"
			if v, ok := r.get(sc, im, "idle-B/key"); ok {
				idle = num(v)
			}
			if v, ok := r.get(sc, im, "idle-%"); ok {
				idlePct = fmt.Sprintf("%.1f%%", v)
			}
			nsKey, _ := r.get(sc, im, "ns/key")
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", label(sc), im, num(bk), ratio, idle, idlePct, num(nsKey))
		}
	}
	fmt.Fprintln(w)
}

// num formats a figure with three significant digits at most, and no
// exponent.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}
