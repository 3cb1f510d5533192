package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/replay"
)

// The output of suggest for the algorithms other than the token bucket:
// the limit searched is the leaky bucket's capacity or the windows' limit
// per window, and each row a rate or a window.

type limitOut struct {
	Limit       int     `json:"limit"`
	Refused     int64   `json:"refused"`
	KeysRefused int64   `json:"keys_refused"`
	Share       float64 `json:"share"`
	KeyShare    float64 `json:"key_share"`
}

func limitOf(o replay.Outcome) limitOut {
	return limitOut{Limit: o.Burst, Refused: o.Refused, KeysRefused: o.KeysRefused, Share: o.Share, KeyShare: o.KeyShare}
}

func suggestJSON(w io.Writer, tr *replay.Trace, algo replay.Algorithm, scope ratelimit.Scope, class, of string, rows []replay.Row) error {
	type cellOut struct {
		Target  float64   `json:"target"`
		At      limitOut  `json:"at"`
		Smaller *limitOut `json:"one_less,omitempty"`
		Unmet   bool      `json:"unmet,omitempty"`
	}
	type rowOut struct {
		Rate      string    `json:"rate,omitempty"`
		Window    string    `json:"window,omitempty"`
		NoRefusal int       `json:"no_refusal_limit"`
		Cells     []cellOut `json:"targets"`
	}
	out := struct {
		Algorithm string   `json:"algorithm"`
		Scope     string   `json:"scope"`
		Class     string   `json:"class,omitempty"`
		Of        string   `json:"of"`
		Requests  int      `json:"requests"`
		Keys      int      `json:"keys"`
		NoKey     int64    `json:"no_key"`
		Rows      []rowOut `json:"rows"`
	}{Algorithm: algo.String(), Scope: scope.String(), Class: class, Of: of, Requests: tr.Requests(), Keys: tr.Keys(), NoKey: tr.NoKey}
	for _, r := range rows {
		ro := rowOut{NoRefusal: r.NoRefusal}
		if algo.Windowed() {
			ro.Window = fmtWindow(r.Rate.Period)
		} else {
			ro.Rate = r.Rate.String()
		}
		for _, c := range r.Cells {
			co := cellOut{Target: c.Target, At: limitOf(c.At), Unmet: c.Unmet}
			if c.Smaller != nil {
				s := limitOf(*c.Smaller)
				co.Smaller = &s
			}
			ro.Cells = append(ro.Cells, co)
		}
		out.Rows = append(out.Rows, ro)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func suggestText(w io.Writer, tr *replay.Trace, algo replay.Algorithm, scope ratelimit.Scope, class, of string, targets []float64, rows []replay.Row) {
	what := "every request"
	if class != "" {
		what = class
	}
	first, last := tr.Span()
	fmt.Fprintf(w, "%s, %s: %s requests, %s keys, %s without a key\n", scope, what, count(int64(tr.Requests())), count(int64(tr.Keys())), count(tr.NoKey))
	fmt.Fprintf(w, "from %s to %s UTC\n", first.Format(stamp), last.Format(stamp))
	head, thing := "rate", "capacity"
	if algo.Windowed() {
		head, thing = "window", "limit per window"
	}
	fmt.Fprintf(w, "smallest %s %s refusing at most the share of %s:\n\n", algo, thing, of)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, head+"\tnone")
	for _, p := range targets {
		fmt.Fprintf(tw, "\t≤ %s", strconv.FormatFloat(100*p, 'f', -1, 64)+"%")
	}
	fmt.Fprintln(tw)
	for _, r := range rows {
		label := r.Rate.String()
		if algo.Windowed() {
			label = fmtWindow(r.Rate.Period)
		}
		none := "-"
		if r.NoRefusal > 0 {
			none = strconv.Itoa(r.NoRefusal)
		}
		fmt.Fprintf(tw, "%s\t%s", label, none)
		for _, c := range r.Cells {
			sh := c.At.Share
			if of == "keys" {
				sh = c.At.KeyShare
			}
			n := strconv.Itoa(c.At.Burst)
			if c.Unmet {
				n = "-"
			}
			fmt.Fprintf(tw, "\t%s (%s)", n, strconv.FormatFloat(100*sh, 'f', 2, 64)+"%")
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n(%s (share it refuses); one less refuses more than the target)\n", thing)
	if algo == replay.LeakyBucket {
		fmt.Fprintln(w, "(a leaky bucket that never waits admits only into an empty queue, whatever its capacity:")
		fmt.Fprintln(w, " \"-\" is a rate no capacity meets, with the share every capacity refuses)")
	}
}

// fmtWindow writes a window as time.Duration does, without zero tails:
// 1m, not 1m0s.
func fmtWindow(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
