// Command fairshare shows a flood contained by a fair rule, on a manual
// clock: three tenants share a limit of 100 requests a second with a
// fourth that floods it for four seconds. First come, first served, the
// flood takes nearly all of it; with "fair per user" the three keep what
// they ask, the flood gets only what they leave, and when the flood stops
// nothing is refused.
package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fairshare:", err)
		os.Exit(1)
	}
}

// tenants and what each asks a second; "flood" asks only in seconds
// floodFrom to floodTo.
var tenants = []struct {
	name string
	rate int
}{{"flood", 1000}, {"a", 20}, {"b", 20}, {"c", 20}}

const (
	seconds            = 8
	floodFrom, floodTo = 2, 5
)

type ask struct {
	at  time.Duration
	who int
}

// schedule returns every request of the run, evenly spaced per tenant
// (each tenant shifted a little, so none always comes first), in order.
func schedule() []ask {
	var s []ask
	for sec := range seconds {
		for i, t := range tenants {
			if i == 0 && (sec < floodFrom || sec > floodTo) {
				continue
			}
			step := time.Second / time.Duration(t.rate)
			for j := range t.rate {
				at := time.Duration(sec)*time.Second + time.Duration(j)*step + time.Duration(i)*step/8
				s = append(s, ask{at, i})
			}
		}
	}
	slices.SortStableFunc(s, func(a, b ask) int { return cmp.Compare(a.at, b.at) })
	return s
}

func run(w io.Writer) error {
	fmt.Fprintln(w, "one shared limit of 100 requests a second; tenants a, b and c ask")
	fmt.Fprintf(w, "20 a second each, and \"flood\" asks 1000 a second in seconds %d to %d\n", floodFrom, floodTo)
	for _, config := range []string{"*: 100/s global", "*: 100/s global fair per user"} {
		if err := table(w, config); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\nfirst come, first served: the flood takes the limit while it lasts")
	fmt.Fprintln(w, "fair per user: a, b and c keep about what they ask, the flood gets")
	fmt.Fprintln(w, "what they leave (in second 2 it is new and borrows what the bucket had")
	fmt.Fprintln(w, "saved), and once it stops nothing is refused")
	return nil
}

// table runs the schedule through rules of config and prints what each
// tenant was allowed, second by second.
func table(w io.Writer, config string) error {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := ratelimit.NewManualClock(start)
	rules, err := ratelimit.ParseRules(config, ratelimit.WithClock(clock))
	if err != nil {
		return err
	}
	defer rules.Close()
	var got [seconds][4]int
	var refused [seconds]int
	for _, a := range schedule() {
		clock.Set(start.Add(a.at))
		who := ratelimit.Subject{User: tenants[a.who].name}
		d, err := rules.Check(context.Background(), "GET /", who, 1)
		if err != nil {
			return err
		}
		sec := a.at / time.Second
		if d.Allowed {
			got[sec][a.who]++
		} else {
			refused[sec]++
		}
	}
	fmt.Fprintf(w, "\n%s\n", config)
	fmt.Fprintln(w, "second   flood      a      b      c   refused")
	for sec := range seconds {
		g := got[sec]
		fmt.Fprintf(w, "%6d  %6d %6d %6d %6d  %8d\n", sec, g[0], g[1], g[2], g[3], refused[sec])
	}
	return nil
}
