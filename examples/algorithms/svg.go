package main

import (
	"fmt"
	"strings"
	"time"
)

// The picture's geometry, in SVG user units.
const (
	labelWidth = 230                     // the lanes' names on the left
	plotWidth  = 820                     // the time axis
	span       = 7500 * time.Millisecond // the time the axis shows
	top        = 58                      // above the first lane: title, legend
	laneHeight = 66
	axisHeight = 40
	markStep   = 10 // vertical distance between requests at one instant
)

// notes says, lane by lane, what the picture shows.
var notes = map[string]string{
	"token":   "bursts up to 4, then 2/s",
	"leaky":   "evenly spaced: one per 0.5 s",
	"meter":   "the token bucket's answers",
	"fixed":   "4 per window: 0–2 s, 2–4 s, …",
	"log":     "never more than 4 in any 2 s",
	"counter": "an estimate, near the log",
}

// callouts points at what the picture is about, in the empty stretch of
// the lane before the burst at 3.9 s.
var callouts = map[string]string{
	"leaky": "never two within 0.5 s",
	"fixed": "8 allowed within 0.1 s, across the boundary at 4 s",
}

// x returns the horizontal position of instant t.
func x(t time.Duration) float64 {
	return labelWidth + float64(t)/float64(span)*plotWidth
}

// picture draws the lanes as an SVG: time on the x axis, one lane per
// algorithm, each request a filled dot if allowed and a cross if denied,
// requests at the same instant stacked; the window boundaries of the fixed
// window and the counter as dashed lines.
func picture(lanes []lane) string {
	height := top + len(lanes)*laneHeight + axisHeight
	width := labelWidth + plotWidth + 30
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="14">`+"\n",
		width, height, width, height)
	p(`<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	p(`<text x="16" y="24" font-size="16" font-weight="bold">One bursty trace through the algorithms: 4 per 2 s (2/s on average)</text>` + "\n")
	// Legend.
	p(`<circle cx="22" cy="44" r="5" fill="#1a7f37"/><text x="32" y="49">allowed</text>` + "\n")
	cross(&b, 112, 44, "#cf222e")
	p(`<text x="122" y="49">denied</text>` + "\n")
	p(`<line x1="200" y1="44" x2="226" y2="44" stroke="#8c959f" stroke-dasharray="4 3"/><text x="232" y="49">window boundary (fixed window, counter)</text>` + "\n")

	bottom := top + len(lanes)*laneHeight
	for i := 1; i < len(lanes); i += 2 {
		p(`<rect x="0" y="%d" width="%d" height="%d" fill="#f6f8fa"/>`+"\n", top+i*laneHeight, width, laneHeight)
	}
	// Window boundaries every 2 s, and the axis below the lanes.
	for t := time.Duration(0); t <= span; t += 500 * time.Millisecond {
		xt := x(t)
		if t%(2*time.Second) == 0 {
			p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#8c959f" stroke-dasharray="4 3"/>`+"\n", xt, top, xt, bottom)
		}
		tick := 4
		if t%time.Second == 0 {
			tick = 8
			p(`<text x="%.1f" y="%d" text-anchor="middle">%d s</text>`+"\n", xt, bottom+24, int(t/time.Second))
		}
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#57606a"/>`+"\n", xt, bottom, xt, bottom+tick)
	}
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#57606a"/>`+"\n", labelWidth, bottom, labelWidth+plotWidth, bottom)

	for i, l := range lanes {
		y0 := top + i*laneHeight
		p(`<text x="16" y="%d" font-weight="bold">%s</text>`+"\n", y0+28, l.long)
		p(`<text x="16" y="%d" fill="#57606a" font-size="13">%s</text>`+"\n", y0+48, notes[l.name])
		if c := callouts[l.name]; c != "" {
			p(`<text x="%.1f" y="%d" text-anchor="end" fill="#9a6700" font-style="italic">%s →</text>`+"\n", x(3800*time.Millisecond), y0+38, c)
		}
		if l.name == "fixed" {
			// Frame the double burst.
			p(`<rect x="%.1f" y="%d" width="%.1f" height="%d" rx="6" fill="none" stroke="#9a6700" stroke-width="1.5"/>`+"\n",
				x(3900*time.Millisecond)-9, y0+5, x(4000*time.Millisecond)-x(3900*time.Millisecond)+18, laneHeight-10)
		}
		// Requests at one instant are stacked downwards from the lane's top.
		for j, at := range l.at {
			k := 0
			for k < j && l.at[j-k-1] == at {
				k++
			}
			cx, cy := x(at), float64(y0+13+k*markStep)
			if l.allowed[j] {
				p(`<circle cx="%.1f" cy="%.1f" r="4.5" fill="#1a7f37"/>`+"\n", cx, cy)
			} else {
				cross(&b, cx, cy, "#cf222e")
			}
		}
	}
	p("</svg>\n")
	return b.String()
}

// cross draws a denied request's mark centred on (cx, cy).
func cross(b *strings.Builder, cx, cy float64, color string) {
	const r = 4
	fmt.Fprintf(b, `<path d="M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f" stroke="%s" stroke-width="2"/>`+"\n",
		cx-r, cy-r, cx+r, cy+r, cx-r, cy+r, cx+r, cy-r, color)
}
