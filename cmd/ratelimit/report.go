package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/replay"
)

// jsonOut is the report as -json writes it.
type jsonOut struct {
	First *time.Time `json:"first,omitempty"`
	Last  *time.Time `json:"last,omitempty"`
	*replay.Report
}

func jsonReport(r *replay.Report) jsonOut {
	out := jsonOut{Report: r}
	if r.Requests > 0 {
		f, l := time.Unix(0, r.First).UTC(), time.Unix(0, r.Last).UTC()
		out.First, out.Last = &f, &l
	}
	return out
}

// count writes n with its thousands grouped: 1,234,567.
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func percent(part, whole int64) string {
	if whole == 0 {
		return "0%"
	}
	return strconv.FormatFloat(100*float64(part)/float64(whole), 'f', 2, 64) + "%"
}

const stamp = "2006-01-02 15:04:05"

func writeText(w io.Writer, r *replay.Report) {
	fmt.Fprintf(w, "%s lines: %s requests, %s malformed, %s late\n", count(r.Lines), count(r.Requests), count(r.Malformed), count(r.Late))
	if r.Requests > 0 {
		fmt.Fprintf(w, "from %s to %s UTC\n", time.Unix(0, r.First).UTC().Format(stamp), time.Unix(0, r.Last).UTC().Format(stamp))
	}
	for _, s := range r.MalformedLines {
		fmt.Fprintf(w, "  malformed %s:%d: %s\n", s.File, s.Line, s.Error)
	}
	for _, s := range r.LateLines {
		fmt.Fprintf(w, "  late %s:%d: %s\n", s.File, s.Line, s.Error)
	}
	for _, s := range r.Sets {
		fmt.Fprintf(w, "\n%s: %s refused of %s (%s), %s exempt, %s without a key\n",
			s.Name, count(s.Refused), count(s.Requests), percent(s.Refused, s.Requests), count(s.Exempt), count(s.NoKey))
		for _, rr := range s.Rules {
			verb := "refused"
			if rr.Shadow {
				verb = "would refuse"
			}
			fmt.Fprintf(w, "  %s\n", rr.Name)
			at := ""
			if rr.DistinctAtLeast {
				at = "at least "
			}
			keys := "keys"
			if rr.DistinctKeys == 1 && !rr.DistinctAtLeast {
				keys = "key"
			}
			fmt.Fprintf(w, "    %s %s of %s (%s), %s%s %s\n", verb, count(rr.Refused), count(rr.Seen), percent(rr.Refused, rr.Seen), at, count(rr.DistinctKeys), keys)
			if rr.Refused == 0 {
				continue
			}
			fmt.Fprintf(w, "    first %s, last %s\n", rr.FirstRefusal.Format(stamp), rr.LastRefusal.Format(stamp))
			fmt.Fprintf(w, "    worst minute %s (%s)\n", rr.PeakMinute.Format("2006-01-02 15:04"), count(rr.PeakMinuteRefused))
			for _, k := range rr.TopKeys {
				key := k.Key
				if key == "" {
					key = "(global)"
				}
				fmt.Fprintf(w, "    %8s  %s\n", count(k.Count), key)
			}
		}
	}
}
