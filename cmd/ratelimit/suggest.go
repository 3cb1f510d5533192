package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/accesslog"
	"github.com/ratelimitkit/ratelimit/internal/replay"
)

func runSuggest(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ratelimit suggest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f replayFlags
	f.define(fs)
	scopeF := fs.String("scope", "ip", "whose allowance: ip, user or global")
	class := fs.String("class", "", "only requests of this ServeMux pattern (\"POST /login\"); default every request")
	ratesF := fs.String("rates", "1/s,2/s,5/s,10/s,20/s,50/s,100/s", "candidate rates, comma-separated")
	targetsF := fs.String("targets", "0.1%,1%,5%", "target shares refused, comma-separated")
	of := fs.String("of", "requests", "the target counts refused requests, or keys refused at least once")
	algoF := fs.String("algorithm", "tokenbucket", "the limiter sized: tokenbucket, leakybucket, fixedwindow, slidinglog or slidingcounter")
	windowsF := fs.String("windows", "1s,10s,1m", "candidate windows of fixedwindow, slidinglog and slidingcounter, comma-separated")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	fail := func(err error) int {
		fmt.Fprintln(stderr, "ratelimit suggest:", err)
		return 1
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "ratelimit suggest: want at least one log (\"-\" for standard input)")
		return 2
	}
	scope, err := replay.ParseScope(*scopeF)
	if err != nil {
		return fail(err)
	}
	algo, err := replay.ParseAlgorithm(*algoF)
	if err != nil {
		return fail(err)
	}
	switch {
	case algo.Windowed() && set["rates"]:
		return fail(fmt.Errorf("-rates: %v is sized per window; give -windows", algo))
	case !algo.Windowed() && set["windows"]:
		return fail(fmt.Errorf("-windows: %v is sized at a rate; give -rates", algo))
	}
	var windows []time.Duration
	for _, s := range strings.Split(*windowsF, ",") {
		w, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || w <= 0 {
			return fail(fmt.Errorf("window %q is not a positive duration", s))
		}
		windows = append(windows, w)
	}
	var rates []ratelimit.Rate
	for _, s := range strings.Split(*ratesF, ",") {
		r, err := ratelimit.ParseRate(strings.TrimSpace(s))
		if err != nil {
			return fail(err)
		}
		rates = append(rates, r)
	}
	var targets []float64
	for _, s := range strings.Split(*targetsF, ",") {
		s = strings.TrimSpace(s)
		v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
		if err != nil || !strings.HasSuffix(s, "%") || v < 0 || v >= 100 {
			return fail(fmt.Errorf("target %q is not a percentage in [0%%, 100%%)", s))
		}
		targets = append(targets, v/100)
	}
	if *of != "requests" && *of != "keys" {
		return fail(fmt.Errorf("-of %q: want requests or keys", *of))
	}
	format, err := accesslog.ParseFormat(f.format)
	if err != nil {
		return fail(err)
	}
	parser, err := accesslog.NewParser(format, accesslog.Fields{Time: f.timeF, IP: f.ipF, User: f.userF, Method: f.methodF, Path: f.pathF})
	if err != nil {
		return fail(err)
	}
	tr, err := replay.NewTrace(scope, *class, f.ipv6)
	if err != nil {
		return fail(err)
	}
	prog := newProgress(stderr)
	for _, name := range fs.Args() {
		if err := replayFile(tr, parser, name, stdin, f.strict, prog); err != nil {
			return fail(err)
		}
	}
	prog.done()
	rows, err := tr.SuggestAlgorithm(algo, rates, windows, targets, *of == "keys")
	if err != nil {
		return fail(err)
	}
	if algo != replay.TokenBucket {
		if f.jsonOut {
			err = suggestJSON(stdout, tr, algo, scope, *class, *of, rows)
		} else {
			suggestText(stdout, tr, algo, scope, *class, *of, targets, rows)
		}
		if err != nil {
			return fail(err)
		}
		return 0
	}
	if f.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		type rowOut struct {
			Rate      string        `json:"rate"`
			NoRefusal int           `json:"no_refusal_burst"`
			Cells     []replay.Cell `json:"targets"`
		}
		out := struct {
			Scope    string   `json:"scope"`
			Class    string   `json:"class,omitempty"`
			Of       string   `json:"of"`
			Requests int      `json:"requests"`
			Keys     int      `json:"keys"`
			NoKey    int64    `json:"no_key"`
			Rows     []rowOut `json:"rates"`
		}{Scope: scope.String(), Class: *class, Of: *of, Requests: tr.Requests(), Keys: tr.Keys(), NoKey: tr.NoKey}
		for _, r := range rows {
			out.Rows = append(out.Rows, rowOut{Rate: r.Rate.String(), NoRefusal: r.NoRefusal, Cells: r.Cells})
		}
		if err := enc.Encode(out); err != nil {
			return fail(err)
		}
		return 0
	}
	what := "every request"
	if *class != "" {
		what = *class
	}
	first, last := tr.Span()
	fmt.Fprintf(stdout, "%s, %s: %s requests, %s keys, %s without a key\n", scope, what, count(int64(tr.Requests())), count(int64(tr.Keys())), count(tr.NoKey))
	fmt.Fprintf(stdout, "from %s to %s UTC\n", first.Format(stamp), last.Format(stamp))
	fmt.Fprintf(stdout, "smallest token-bucket burst refusing at most the share of %s:\n\n", *of)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "rate\tnone")
	for _, p := range targets {
		fmt.Fprintf(tw, "\t≤ %s", strconv.FormatFloat(100*p, 'f', -1, 64)+"%")
	}
	fmt.Fprintln(tw)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d", r.Rate, r.NoRefusal)
		for _, c := range r.Cells {
			sh := c.At.Share
			if *of == "keys" {
				sh = c.At.KeyShare
			}
			fmt.Fprintf(tw, "\t%d (%s)", c.At.Burst, strconv.FormatFloat(100*sh, 'f', 2, 64)+"%")
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(stdout, "\n(burst (share it refuses); one less refuses more than the target)")
	return 0
}
