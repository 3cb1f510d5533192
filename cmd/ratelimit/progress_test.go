package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// On a terminal the progress line counts the lines of every file read so
// far; elsewhere it writes nothing.
func TestProgress(t *testing.T) {
	var w bytes.Buffer
	p := newProgress(&w)
	if p.on {
		t.Fatal("a buffer taken for a terminal")
	}
	p.tick(1 << 16)
	if w.Len() != 0 {
		t.Fatalf("wrote %q off a terminal", w.String())
	}
	p = newProgress(&w)
	p.on = true
	p.file(&countingReader{n: 50}, 100)
	p.lines = 70000 // the first file's count, as replayFile leaves it
	p.file(&countingReader{n: 50}, 100)
	p.last = time.Time{}
	p.tick(1 << 16)
	if got := w.String(); !strings.Contains(got, "135536 lines") || !strings.Contains(got, "left in this file") {
		t.Fatalf("progress line %q", got)
	}
}
