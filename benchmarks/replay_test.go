package benchmarks

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/accesslog"
	"github.com/ratelimitkit/ratelimit/internal/replay"
)

// replayRules is a realistic set: a per-IP login limit, a per-route limit,
// a per-user limit, a shadow rule and a global one.
const replayRules = `
POST /login:      5/m    per ip
GET /items/{id}:  20/s   burst 40  per ip
POST /posts:      1/s    per user
GET /search:      30/m   burst 10  per ip  shadow
*:                5,000/s          global
`

// replayLog returns n lines of a combined log: 20,000 clients (a tenth of
// them IPv6), a few users, five routes, about 2,000 requests per second.
func replayLog(n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	var b bytes.Buffer
	t := time.Date(2024, 5, 1, 10, 0, 0, 0, time.FixedZone("", 2*3600))
	paths := []string{"POST /login", "GET /items/%d", "POST /posts", "GET /search?q=%d", "GET /static/app.js"}
	for range n {
		t = t.Add(time.Duration(rng.IntN(1000)) * time.Microsecond)
		c := rng.IntN(20000)
		ip := fmt.Sprintf("198.51.%d.%d", c/256, c%256)
		if c%10 == 0 {
			ip = fmt.Sprintf("2001:db8:%x::%x", c, rng.IntN(100))
		}
		user := "-"
		if c%3 == 0 {
			user = fmt.Sprintf("user%d", c%500)
		}
		p := paths[rng.IntN(len(paths))]
		if bytes.Contains([]byte(p), []byte("%d")) {
			p = fmt.Sprintf(p, rng.IntN(1000))
		}
		fmt.Fprintf(&b, "%s - %s [%s] \"%s HTTP/1.1\" 200 %d \"https://example.com/\" \"Mozilla/5.0 (X11; Linux x86_64)\"\n",
			ip, user, t.Format("02/Jan/2006:15:04:05 -0700"), p, rng.IntN(50000))
	}
	return b.Bytes()
}

// BenchmarkReplay replays a combined log through the rules: splitting the
// lines, parsing and deciding, as ratelimit replay does. One op is one
// line; lines/s is reported. impl=parse-only parses without deciding (the
// share of the cost that is reading the log).
func BenchmarkReplay(b *testing.B) {
	log := replayLog(200_000)
	for _, impl := range []string{"ours-replay", "parse-only"} {
		b.Run("format=combined/impl="+impl, func(b *testing.B) {
			p, err := accesslog.NewParser(accesslog.Combined, accesslog.Fields{})
			if err != nil {
				b.Fatal(err)
			}
			r, err := replay.New([]replay.RuleFile{{Name: "bench", Text: replayRules}}, replay.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			var e accesslog.Entry
			rest := log
			var line, shift, span int64
			if err := p.Parse(log[:bytes.IndexByte(log, '\n')], &e); err != nil {
				b.Fatal(err)
			}
			first := e.Time
			if err := p.Parse(bytes.TrimSuffix(log[bytes.LastIndexByte(log[:len(log)-1], '\n')+1:], []byte("\n")), &e); err != nil {
				b.Fatal(err)
			}
			span = e.Time - first + int64(time.Second)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if len(rest) == 0 {
					rest, shift = log, shift+span // the log again, later
				}
				i := bytes.IndexByte(rest, '\n')
				l := rest[:i]
				rest = rest[i+1:]
				line++
				if err := p.Parse(l, &e); err != nil {
					b.Fatal(err)
				}
				e.Time += shift
				if impl == "ours-replay" {
					r.Add("bench", line, &e)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
			r.Finish()
		})
	}
}
