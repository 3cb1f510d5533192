package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress writes a line on stderr, rewritten in place, when stderr is a
// terminal: lines read, lines per second and, for a regular file, the
// time left. When stderr is not a terminal it writes nothing.
type progress struct {
	w       io.Writer
	on      bool
	start   time.Time
	last    time.Time
	fstart  time.Time // when this file began
	base    int64     // lines of the files before this one
	lines   int64
	counted *countingReader
	size    int64
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, start: time.Now()}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.on = true
		}
	}
	return p
}

func (p *progress) file(c *countingReader, size int64) {
	p.base += p.lines
	p.lines = 0
	p.counted, p.size, p.fstart = c, size, time.Now()
}

func (p *progress) tick(lines int64) {
	p.lines = lines
	if !p.on {
		return
	}
	now := time.Now()
	if now.Sub(p.last) < 200*time.Millisecond {
		return
	}
	p.last = now
	total := p.base + lines
	el := now.Sub(p.start).Seconds()
	msg := fmt.Sprintf("\r%d lines, %.0f lines/s", total, float64(total)/el)
	if p.size > 0 && p.counted.n > 0 && p.counted.n <= p.size {
		left := time.Duration(float64(now.Sub(p.fstart)) * float64(p.size-p.counted.n) / float64(p.counted.n))
		msg += fmt.Sprintf(", about %v left in this file", left.Round(time.Second))
	}
	fmt.Fprint(p.w, msg+"\033[K")
}

func (p *progress) done() {
	if p.on && !p.last.IsZero() {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
