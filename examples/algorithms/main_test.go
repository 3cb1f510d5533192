package main

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The committed picture is the one this program draws: make svg redraws it.
func TestPictureIsCommitted(t *testing.T) {
	lanes, err := simulate()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../../docs/algorithms.svg")
	if err != nil {
		t.Fatal(err)
	}
	if got := picture(lanes); got != string(want) {
		t.Fatal("docs/algorithms.svg is not what examples/algorithms draws: run make svg")
	}
}

// What the picture's callouts and notes say holds for the trace.
func TestPictureClaims(t *testing.T) {
	lanes, err := simulate()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string][]time.Duration{}
	for _, l := range lanes {
		for j, ok := range l.allowed {
			if ok {
				allowed[l.name] = append(allowed[l.name], l.at[j])
			}
		}
	}
	if n := mostWithin(allowed["fixed"], 101*time.Millisecond); n != 8 {
		t.Errorf("fixed window: %d allowed within 0.1 s, the picture says 8", n)
	}
	if n := mostWithin(allowed["leaky"], 500*time.Millisecond); n != 1 {
		t.Errorf("leaky bucket: %d allowed within 0.5 s, the picture says never two", n)
	}
	if n := mostWithin(allowed["log"], 2*time.Second); n != 4 {
		t.Errorf("sliding log: %d allowed within 2 s, the picture says at most 4", n)
	}
	if !slices.Equal(allowed["meter"], allowed["token"]) {
		t.Errorf("leaky meter: allowed at %v, the token bucket at %v; the picture says the same", allowed["meter"], allowed["token"])
	}
	if n := mostWithin(allowed["token"], time.Nanosecond); n != 4 {
		t.Errorf("token bucket: a burst of %d at one instant, the picture says up to 4", n)
	}
}

// make demo prints this program's output: it must fit 80 columns.
func TestOutputFits80Columns(t *testing.T) {
	var b bytes.Buffer
	if err := run(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) < 20 {
		t.Fatalf("%d lines of output; want the whole table", len(lines))
	}
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("line %d is %d columns: %q", i+1, n, l)
		}
	}
}
