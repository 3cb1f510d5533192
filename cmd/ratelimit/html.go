package main

import (
	"fmt"
	"html/template"
	"io"
	"strconv"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/replay"
)

// The HTML report: one page, no script and no resource from anywhere (its
// Content-Security-Policy forbids both), an SVG chart per rule of the
// requests allowed and refused over time, and one of the distribution of
// the keys' peak rates against the rule's limit.

const chartW, chartH, maxBars = 720.0, 140.0, 120

type bar struct {
	X, W, HAllowed, YAllowed, HRefused, YRefused float64
	Allowed, Refused                             int64
	From                                         string
}

type peakBar struct {
	X, Y, H float64
	Keys    int64
	Label   string
}

type htmlRule struct {
	replay.RuleReport
	Verb, Share   string
	Bars          []bar
	First, Last   string
	Peaks         []peakBar
	PeakMaxKeys   int64
	BucketMinutes int64
}

type htmlSet struct {
	replay.SetReport
	Share string
	Rules []htmlRule
}

type htmlPage struct {
	Report    *replay.Report
	Summary   string
	Span      string
	Sets      []htmlSet
	ChartW    float64
	ChartH    float64
	LabelY    float64
	Samples   []replay.Sample
	Generated string
}

func writeHTML(w io.Writer, r *replay.Report) error {
	p := htmlPage{Report: r, ChartW: chartW, ChartH: chartH, LabelY: chartH + 14,
		Summary: fmt.Sprintf("%s lines: %s requests, %s malformed, %s late", count(r.Lines), count(r.Requests), count(r.Malformed), count(r.Late))}
	if r.Requests > 0 {
		p.Span = fmt.Sprintf("from %s to %s UTC", time.Unix(0, r.First).UTC().Format(stamp), time.Unix(0, r.Last).UTC().Format(stamp))
	}
	p.Samples = append(append(p.Samples, r.MalformedLines...), r.LateLines...)
	for _, s := range r.Sets {
		hs := htmlSet{SetReport: s, Share: percent(s.Refused, s.Requests)}
		for _, rr := range s.Rules {
			hr := htmlRule{RuleReport: rr, Verb: "refused", Share: percent(rr.Refused, rr.Seen)}
			if rr.Shadow {
				hr.Verb = "would refuse"
			}
			hr.Bars, hr.BucketMinutes = bars(rr.Minutes)
			if len(rr.Minutes) > 0 {
				hr.First = rr.Minutes[0].Minute.Format("2006-01-02 15:04")
				hr.Last = rr.Minutes[len(rr.Minutes)-1].Minute.Format("2006-01-02 15:04")
			}
			hr.Peaks, hr.PeakMaxKeys = peakBars(rr.PeakRates)
			hs.Rules = append(hs.Rules, hr)
		}
		p.Sets = append(p.Sets, hs)
	}
	return page.Execute(w, p)
}

// bars groups the minutes into at most maxBars bars of whole minutes.
func bars(ms []replay.MinuteCount) ([]bar, int64) {
	if len(ms) == 0 {
		return nil, 0
	}
	first, last := ms[0].Minute, ms[len(ms)-1].Minute
	span := int64(last.Sub(first)/time.Minute) + 1
	per := (span + maxBars - 1) / maxBars
	n := (span + per - 1) / per
	allowed, refused := make([]int64, n), make([]int64, n)
	for _, m := range ms {
		i := int64(m.Minute.Sub(first)/time.Minute) / per
		allowed[i] += m.Seen - m.Refused
		refused[i] += m.Refused
	}
	var top int64 = 1
	for i := range allowed {
		top = max(top, allowed[i]+refused[i])
	}
	w := chartW / float64(n)
	out := make([]bar, n)
	for i := range out {
		ha := chartH * float64(allowed[i]) / float64(top)
		hr := chartH * float64(refused[i]) / float64(top)
		out[i] = bar{X: float64(i) * w, W: max(w-1, 1), HAllowed: ha, YAllowed: chartH - ha - hr, HRefused: hr, YRefused: chartH - hr,
			Allowed: allowed[i], Refused: refused[i], From: first.Add(time.Duration(int64(i)*per) * time.Minute).Format("15:04")}
	}
	return out, per
}

func peakBars(ps []replay.PeakBucket) ([]peakBar, int64) {
	if len(ps) == 0 {
		return nil, 0
	}
	var top int64 = 1
	for _, p := range ps {
		top = max(top, p.Keys)
	}
	w := chartW / float64(len(ps))
	out := make([]peakBar, len(ps))
	for i, p := range ps {
		h := chartH * float64(p.Keys) / float64(top)
		label := "≤ " + strconv.FormatFloat(p.Upto, 'f', -1, 64) + "×"
		if p.Upto == 0 {
			label = "> " + strconv.FormatFloat(ps[len(ps)-2].Upto, 'f', -1, 64) + "×"
		}
		out[i] = peakBar{X: float64(i)*w + 4, Y: chartH - h, H: h, Keys: p.Keys, Label: label}
	}
	return out, top
}

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"count": count,
	"half":  func(x, w float64) float64 { return x + w/2 },
	"barw":  func() float64 { return chartW/6 - 8 },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>ratelimit replay</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 780px; color: #222; }
h2 { border-bottom: 1px solid #ccc; margin-top: 2em; }
.rule { margin: 1.5em 0; }
.num { font-variant-numeric: tabular-nums; }
svg { display: block; margin: .5em 0; }
svg text { font: 11px system-ui, sans-serif; fill: #555; }
.allowed { fill: #8fb3d9; } .refused { fill: #d9534f; } .peak { fill: #7a9e7e; } .over { fill: #d9534f; }
table { border-collapse: collapse; } td { padding: 0 .8em 0 0; }
</style>
</head>
<body>
<h1>ratelimit replay</h1>
<p class="num" id="summary">{{.Summary}}<br>{{.Span}}</p>
{{with .Samples}}<ul>{{range .}}<li>{{.File}}:{{.Line}}: {{.Error}}</li>{{end}}</ul>{{end}}
{{range $s := .Sets}}
<h2>{{$s.Name}}</h2>
<p class="num">{{count $s.Refused}} refused of {{count $s.Requests}} ({{$s.Share}}), {{count $s.Exempt}} exempt, {{count $s.NoKey}} without a key</p>
{{range $s.Rules}}
<div class="rule" data-set="{{$s.Name}}" data-rule="{{.Name}}" data-seen="{{.Seen}}" data-refused="{{.Refused}}">
<h3>{{.Name}}{{if .Shadow}} (shadow){{end}}</h3>
<p class="num">{{.Verb}} {{count .Refused}} of {{count .Seen}} ({{.Share}}), {{count .DistinctKeys}} keys{{if .FirstRefusal}}; first {{.FirstRefusal.Format "2006-01-02 15:04:05"}}, last {{.LastRefusal.Format "2006-01-02 15:04:05"}}, worst minute {{.PeakMinute.Format "15:04"}} ({{count .PeakMinuteRefused}}){{end}}</p>
{{if .Bars}}
<p>Requests per {{.BucketMinutes}} min: allowed (blue) and {{.Verb}} (red).</p>
<svg class="timeline" width="{{$.ChartW}}" height="{{$.LabelY}}" viewBox="0 0 {{$.ChartW}} {{$.LabelY}}" role="img" aria-label="requests allowed and refused over time">
<title>{{.Name}}: allowed (blue) and refused (red), {{.BucketMinutes}} min per bar</title>
{{range .Bars}}<g><title>{{.From}}: {{.Allowed}} allowed, {{.Refused}} refused</title><rect class="allowed" x="{{.X}}" y="{{.YAllowed}}" width="{{.W}}" height="{{.HAllowed}}" data-n="{{.Allowed}}"/><rect class="refused" x="{{.X}}" y="{{.YRefused}}" width="{{.W}}" height="{{.HRefused}}" data-n="{{.Refused}}"/></g>
{{end}}<text x="0" y="{{$.LabelY}}">{{.First}}</text><text x="{{$.ChartW}}" y="{{$.LabelY}}" text-anchor="end">{{.Last}} UTC</text>
</svg>
{{end}}
{{if .Peaks}}
<p>Keys by their busiest period ({{.Period}}) against the limit of {{.Limit}} per period.</p>
<svg class="peaks" width="{{$.ChartW}}" height="{{$.LabelY}}" viewBox="0 0 {{$.ChartW}} {{$.LabelY}}" role="img" aria-label="keys by their peak rate against the limit">
<title>keys by the most requests they made in one period, against the limit of {{.Limit}} per {{.Period}}</title>
{{range $i, $p := .Peaks}}<g><title>{{$p.Label}} the limit: {{$p.Keys}} keys</title><rect class="{{if ge $i 3}}over{{else}}peak{{end}}" x="{{$p.X}}" y="{{$p.Y}}" width="{{barw}}" height="{{$p.H}}" data-n="{{$p.Keys}}"/><text x="{{$p.X}}" y="{{$.LabelY}}">{{$p.Label}} limit: {{$p.Keys}}</text></g>
{{end}}</svg>
{{end}}
{{with .TopKeys}}<table class="num">{{range .}}<tr><td>{{count .Count}}</td><td>{{if .Key}}{{.Key}}{{else}}(global){{end}}</td></tr>{{end}}</table>{{end}}
</div>
{{end}}
{{end}}
</body>
</html>
`))
