package accesslog

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustParser(t testing.TB, f Format) *Parser {
	t.Helper()
	p, err := NewParser(f, Fields{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCombined(t *testing.T) {
	p := mustParser(t, Combined)
	line := `203.0.113.9 - alice [10/Oct/2000:13:55:36 -0700] "GET /items/42?x=1 HTTP/1.1" 200 2326 "http://example.com/" "Mozilla/5.0 (X11)"`
	var e Entry
	if err := p.Parse([]byte(line), &e); err != nil {
		t.Fatal(err)
	}
	want := time.Date(2000, 10, 10, 20, 55, 36, 0, time.UTC).UnixNano()
	if e.Time != want || string(e.IP) != "203.0.113.9" || string(e.User) != "alice" || string(e.Method) != "GET" || string(e.Path) != "/items/42?x=1" {
		t.Fatalf("got %+v (time %v), want time %v", e, time.Unix(0, e.Time).UTC(), time.Unix(0, want).UTC())
	}
	// The same day again, another zone: the cache must not answer.
	line2 := `203.0.113.9 - - [10/Oct/2000:13:55:37 +0100] "POST /login HTTP/1.1" 401 0 "-" "curl/8"`
	if err := p.Parse([]byte(line2), &e); err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2000, 10, 10, 12, 55, 37, 0, time.UTC).UnixNano(); e.Time != want || e.User != nil {
		t.Fatalf("got %v user %q, want %v and no user", time.Unix(0, e.Time).UTC(), e.User, time.Unix(0, want).UTC())
	}
}

func TestCommonAndCombinedDiffer(t *testing.T) {
	common := `::1 - - [01/Feb/2024:00:00:00 +0000] "GET / HTTP/1.0" 200 5`
	var e Entry
	if err := mustParser(t, Common).Parse([]byte(common), &e); err != nil {
		t.Fatal(err)
	}
	if err := mustParser(t, Combined).Parse([]byte(common), &e); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a common line read as combined: %v", err)
	}
}

func TestMalformed(t *testing.T) {
	for _, line := range []string{
		``,
		`garbage`,
		`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "-" 400 0 "-" "-"`,
		`1.2.3.4 - - [32/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 0 "-" "-"`,
		`1.2.3.4 - - [31/Apr/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 0 "-" "-"`,
		`1.2.3.4 - - [10/Xyz/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 0 "-" "-"`,
		`1.2.3.4 - - [10/Oct/2000:25:55:36 -0700] "GET / HTTP/1.1" 200 0 "-" "-"`,
		`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700 "GET / HTTP/1.1" 200 0 "-" "-"`,
		`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1`,
		`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 0 "-"`,
	} {
		var e Entry
		err := mustParser(t, Combined).Parse([]byte(line), &e)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: got %v, want ErrMalformed", line, err)
		}
	}
}

func TestJSON(t *testing.T) {
	p := mustParser(t, JSON)
	var e Entry
	line := `{"extra":{"a":[1,"}"]},"time":"2024-03-01T10:00:00.250+02:00","remote_addr":"2001:db8::1","user":"b\u00f6b\"","method":"PUT","path":"/x","n":12.5}`
	if err := p.Parse([]byte(line), &e); err != nil {
		t.Fatal(err)
	}
	want := time.Date(2024, 3, 1, 8, 0, 0, 250e6, time.UTC).UnixNano()
	if e.Time != want || string(e.IP) != "2001:db8::1" || string(e.User) != "böb\"" || string(e.Method) != "PUT" || string(e.Path) != "/x" {
		t.Fatalf("got %+v at %v", e, time.Unix(0, e.Time).UTC())
	}
	if err := p.Parse([]byte(`{"time":1700000000.5,"remote_addr":"192.0.2.1","path":"/"}`), &e); err != nil {
		t.Fatal(err)
	}
	if e.Time != 1700000000_500000000 || string(e.Method) != "GET" {
		t.Fatalf("got %+v", e)
	}
	for _, bad := range []string{`{"time":"2024-03-01T10:00:00Z"}`, `{"path":"/"}`, `{"time":"x","path":"/","remote_addr":"a"}`, `{"time":"2024-03-01T10:00:00Z","path":"/","remote_addr":"a"`, `[1]`, `{"time":"2024-03-01T10:00:00Z","path":"/","remote_addr":"a"} x`} {
		if err := p.Parse([]byte(bad), &e); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: got %v, want ErrMalformed", bad, err)
		}
	}
}

func TestCustomFields(t *testing.T) {
	p, err := NewParser(JSON, Fields{Time: "ts", IP: "client", User: "uid", Method: "verb", Path: "uri"})
	if err != nil {
		t.Fatal(err)
	}
	var e Entry
	if err := p.Parse([]byte(`{"ts":"02/Jan/2006:15:04:05 +0000","client":"10.0.0.1","uid":"u1","verb":"POST","uri":"/a"}`), &e); err != nil {
		t.Fatal(err)
	}
	if string(e.User) != "u1" || string(e.Path) != "/a" || e.Time != time.Date(2006, 1, 2, 15, 4, 5, 0, time.UTC).UnixNano() {
		t.Fatalf("got %+v", e)
	}
}

func TestUnknownFormat(t *testing.T) {
	_, err := ParseFormat("w3c")
	if err == nil || !strings.Contains(err.Error(), "w3c") || !strings.Contains(err.Error(), "combined, common, json") {
		t.Fatalf("got %v", err)
	}
}

// The time read by hand equals time.Parse's on random instants and zones,
// whatever order the lines come in (the date cache must never answer for
// another day or zone).
func TestTimesAgreeWithTimePackage(t *testing.T) {
	p := mustParser(t, Combined)
	pj := mustParser(t, JSON)
	seed := uint64(1)
	next := func() uint64 { seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17; return seed }
	for range 20000 {
		sec := int64(next() % (4e9))
		off := int(next()%(28*4)) - 14*4 // quarter hours
		zone := time.FixedZone("", off*15*60)
		tm := time.Unix(sec, 0).In(zone)
		line := `192.0.2.1 - - [` + tm.Format("02/Jan/2006:15:04:05 -0700") + `] "GET / HTTP/1.1" 200 1 "-" "-"`
		var e Entry
		if err := p.Parse([]byte(line), &e); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if e.Time != sec*1e9 {
			t.Fatalf("%s: got %v, want %v", line, time.Unix(0, e.Time).UTC(), tm.UTC())
		}
		ns := int64(next() % 1e9)
		tn := time.Unix(sec, ns).In(zone)
		js := `{"time":"` + tn.Format(time.RFC3339Nano) + `","remote_addr":"a","path":"/"}`
		if err := pj.Parse([]byte(js), &e); err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		if e.Time != sec*1e9+ns {
			t.Fatalf("%s: got %v, want %v", js, time.Unix(0, e.Time).UTC(), tn.UTC())
		}
	}
}

func TestParseAllocatesNothing(t *testing.T) {
	p := mustParser(t, Combined)
	line := []byte(`203.0.113.9 - alice [10/Oct/2000:13:55:36 -0700] "GET /items/42 HTTP/1.1" 200 2326 "-" "Mozilla/5.0"`)
	pj := mustParser(t, JSON)
	js := []byte(`{"time":"2024-03-01T10:00:00Z","remote_addr":"192.0.2.1","user":"a\"b","path":"/"}`)
	var e Entry
	pj.Parse(js, &e) // warms the unescape buffer
	if n := testing.AllocsPerRun(100, func() { p.Parse(line, &e); pj.Parse(js, &e) }); n != 0 {
		t.Fatalf("%v allocations per line", n)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`203.0.113.9 - alice [10/Oct/2000:13:55:36 -0700] "GET /items/42 HTTP/1.1" 200 2326 "-" "Mozilla/5.0"`)
	f.Add(`{"time":"2024-03-01T10:00:00.5+02:00","remote_addr":"192.0.2.1","user":"a\u00e9","path":"/"}`)
	f.Add(`{"time":1700000000,"remote_addr":"192.0.2.1","path":"/","x":[{"y":"]"}]}`)
	f.Add(`{"time":1}`) // once left the time filled in on an error
	f.Fuzz(func(t *testing.T, line string) {
		for _, fm := range []Format{Common, Combined, JSON} {
			p := mustParser(t, fm)
			var e Entry
			err := p.Parse([]byte(line), &e)
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("%v: error %v does not match ErrMalformed", fm, err)
				}
				if e.Path != nil || e.Time != 0 {
					t.Fatalf("%v: an error with a filled entry %+v", fm, e)
				}
				continue
			}
			if len(e.Path) == 0 || len(e.Method) == 0 {
				t.Fatalf("%v: accepted %q without a path or method: %+v", fm, line, e)
			}
			if fm != JSON && !strings.Contains(line, string(e.Path)) {
				t.Fatalf("%v: path %q is not in the line", fm, e.Path)
			}
		}
	})
}
