package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var gen = flag.Bool("gen", false, "write the sample logs under testdata")

// sampleRequest is one request of the sample traffic.
type sampleRequest struct {
	t            time.Time
	ip, user     string
	method, path string
	status       int
}

// sampleTraffic is three minutes of a small site: a client hammering the
// login, a scraper of items, a user posting too often, IPv6 clients of one
// /64, an internal monitor (exempt) and ordinary visitors.
func sampleTraffic() []sampleRequest {
	rng := rand.New(rand.NewPCG(2024, 5))
	zone := time.FixedZone("", 2*3600)
	t := time.Date(2024, 5, 1, 10, 0, 0, 0, zone)
	end := t.Add(3 * time.Minute)
	var out []sampleRequest
	for t.Before(end) {
		t = t.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
		r := sampleRequest{t: t, method: "GET", status: 200}
		switch x := rng.IntN(100); {
		case x < 10:
			r.ip, r.method, r.path, r.status = "203.0.113.66", "POST", "/login", 401
		case x < 25:
			r.ip, r.path = "198.51.100.23", fmt.Sprintf("/items/%d", rng.IntN(5000))
		case x < 30:
			r.ip, r.user, r.method, r.path, r.status = "192.0.2.10", "mallory", "POST", "/posts", 201
		case x < 38:
			r.ip, r.path = fmt.Sprintf("2001:db8:7:1::%x", rng.IntN(1000)), fmt.Sprintf("/items/%d", rng.IntN(50))
		case x < 42:
			r.ip, r.path = "10.0.0.5", "/healthz"
		default:
			c := rng.IntN(60)
			r.ip = fmt.Sprintf("192.0.2.%d", 100+c)
			if c%2 == 0 {
				r.user = fmt.Sprintf("user%02d", c)
			}
			switch y := rng.IntN(10); {
			case y < 5:
				r.path = fmt.Sprintf("/items/%d?ref=home", rng.IntN(200))
			case y < 6:
				r.method, r.path, r.status = "POST", "/posts", 201
			case y < 7:
				r.method, r.path = "POST", "/login"
			default:
				r.path = "/"
			}
		}
		out = append(out, r)
	}
	return out
}

func combinedLine(r sampleRequest) string {
	user := r.user
	if user == "" {
		user = "-"
	}
	return fmt.Sprintf("%s - %s [%s] \"%s %s HTTP/1.1\" %d %d \"-\" \"Mozilla/5.0\"\n",
		r.ip, user, r.t.Format("02/Jan/2006:15:04:05 -0700"), r.method, r.path, r.status, 512+len(r.path))
}

func jsonLine(r sampleRequest) string {
	// In UTC, where the combined log writes +02:00: the same instants.
	m := map[string]any{"ts": r.t.UTC().Truncate(time.Second).Format(time.RFC3339Nano), "client": r.ip, "method": r.method, "uri": r.path, "status": r.status}
	if r.user != "" {
		m["uid"] = r.user
	}
	b, _ := json.Marshal(m)
	return string(b) + "\n"
}

// TestGenerateSamples writes the sample logs (go test -run Generate -gen).
// The logs are: combined.log; the same requests as JSON lines, gzipped
// (access.jsonl.gz); two servers' logs concatenated, each in order but
// the whole out of order by up to 3s (unordered.log); and the combined
// log with malformed lines mixed in (malformed.log).
func TestGenerateSamples(t *testing.T) {
	if !*gen {
		t.Skip("run with -gen to write the sample logs")
	}
	reqs := sampleTraffic()
	var comb, js, a, b, bad bytes.Buffer
	for i, r := range reqs {
		comb.WriteString(combinedLine(r))
		js.WriteString(jsonLine(r))
		bad.WriteString(combinedLine(r))
		// Two servers, b's clock 0-3s behind, their logs concatenated.
		if i%2 == 0 {
			a.WriteString(combinedLine(r))
		} else {
			r.t = r.t.Add(-time.Duration(i%4) * time.Second)
			b.WriteString(combinedLine(r))
		}
		switch i {
		case 100:
			bad.WriteString("this is not a log line\n")
		case 200:
			bad.WriteString(`192.0.2.1 - - [01/May/2024:10:01:00 +0200] "-" 400 0 "-" "-"` + "\n")
		case 300:
			bad.WriteString(`192.0.2.1 - - [31/Apr/2024:10:01:00 +0200] "GET / HTTP/1.1" 200 1 "-" "-"` + "\n")
		}
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(js.Bytes())
	zw.Close()
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join("testdata", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("combined.log", comb.Bytes())
	write("access.jsonl.gz", gz.Bytes())
	write("unordered.log", append(a.Bytes(), b.Bytes()...))
	write("malformed.log", bad.Bytes())
}
