package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit/internal/replay"
)

var update = flag.Bool("update", false, "rewrite the golden outputs")

func runOK(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(args, strings.NewReader(stdin), &out, &errb); code != 0 {
		t.Fatalf("ratelimit %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	if errb.Len() != 0 {
		t.Fatalf("ratelimit %s wrote on stderr (not a terminal): %q", strings.Join(args, " "), errb.String())
	}
	return out.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update to rewrite it):\n%s", path, got)
	}
}

func TestGoldenText(t *testing.T) {
	out := runOK(t, "", "replay", "-rules", "testdata/site.rules", "-rules", "testdata/strict.rules", "testdata/combined.log")
	golden(t, "compare.txt.golden", out)
}

func TestGoldenJSONMalformed(t *testing.T) {
	out := runOK(t, "", "replay", "-json", "-rules", "testdata/site.rules", "testdata/malformed.log")
	golden(t, "malformed.json.golden", out)
	var rep struct {
		replay.Report
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Malformed != 3 || len(rep.MalformedLines) != 3 || rep.MalformedLines[0].Line != 102 {
		t.Fatalf("malformed: %d %+v", rep.Malformed, rep.MalformedLines)
	}
	// The malformed lines change nothing else: the rules decide as on the
	// clean log.
	clean := reportOf(t, "", "-rules", "testdata/site.rules", "testdata/combined.log")
	if !reflect.DeepEqual(rep.Sets, clean.Sets) {
		t.Fatalf("malformed lines changed the decisions:\n%+v\n%+v", rep.Sets, clean.Sets)
	}
}

func reportOf(t *testing.T, stdin string, args ...string) *replay.Report {
	t.Helper()
	out := runOK(t, stdin, append([]string{"replay", "-json"}, args...)...)
	var rep replay.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	return &rep
}

// The same requests logged as JSON lines (other member names, UTC times,
// gzipped) replay to the same report as the combined log.
func TestJSONLinesEndToEnd(t *testing.T) {
	js := reportOf(t, "", "-format", "json", "-time-field", "ts", "-ip-field", "client", "-user-field", "uid", "-path-field", "uri",
		"-rules", "testdata/site.rules", "-rules", "testdata/strict.rules", "testdata/access.jsonl.gz")
	comb := reportOf(t, "", "-rules", "testdata/site.rules", "-rules", "testdata/strict.rules", "testdata/combined.log")
	if js.Requests != comb.Requests || js.Malformed != 0 || js.Late != 0 {
		t.Fatalf("json: %d requests, %d malformed, %d late; combined: %d requests", js.Requests, js.Malformed, js.Late, comb.Requests)
	}
	if !reflect.DeepEqual(js.Sets, comb.Sets) {
		t.Fatalf("the JSON lines replay differently:\n%+v\n%+v", js.Sets, comb.Sets)
	}
	if js.Sets[0].Refused == 0 || js.Sets[1].Refused == 0 {
		t.Fatal("nothing refused: the sample tests nothing")
	}
	text := runOK(t, "", "replay", "-format", "json", "-time-field", "ts", "-ip-field", "client", "-user-field", "uid", "-path-field", "uri",
		"-rules", "testdata/site.rules", "testdata/access.jsonl.gz")
	golden(t, "jsonl.txt.golden", text)
}

// Two servers' logs concatenated: without a window the second's lines are
// late; with a window as wide as their skew they replay as the merged log.
func TestReorder(t *testing.T) {
	late := reportOf(t, "", "-rules", "testdata/site.rules", "testdata/unordered.log")
	if late.Late == 0 || len(late.LateLines) != 5 {
		t.Fatalf("no late lines without a window: %d %+v", late.Late, late.LateLines)
	}
	ordered := reportOf(t, "", "-reorder", "4m", "-rules", "testdata/site.rules", "testdata/unordered.log")
	if ordered.Late != 0 {
		t.Fatalf("%d late lines within the window", ordered.Late)
	}
	golden(t, "unordered.txt.golden", runOK(t, "", "replay", "-rules", "testdata/site.rules", "testdata/unordered.log"))
}

func TestStdinAndStrict(t *testing.T) {
	data, err := os.ReadFile("testdata/malformed.log")
	if err != nil {
		t.Fatal(err)
	}
	fromStdin := reportOf(t, string(data), "-rules", "testdata/site.rules", "-")
	fromFile := reportOf(t, "", "-rules", "testdata/site.rules", "testdata/malformed.log")
	for i := range fromFile.MalformedLines {
		fromFile.MalformedLines[i].File = "-"
	}
	if !reflect.DeepEqual(fromStdin, fromFile) {
		t.Fatalf("standard input replays differently:\n%+v\n%+v", fromStdin, fromFile)
	}
	var out, errb bytes.Buffer
	code := run([]string{"replay", "-strict", "-rules", "testdata/site.rules", "testdata/malformed.log"}, nil, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "testdata/malformed.log:102: malformed log line") {
		t.Fatalf("-strict: exit %d, %q", code, errb.String())
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "-format", "w3c", "-rules", "testdata/site.rules", "testdata/combined.log"}, `unknown log format "w3c": the formats supported are combined, common, json`},
		{[]string{"replay", "testdata/combined.log"}, "want at least one -rules file"},
		{[]string{"replay", "-rules", "testdata/nope.rules", "testdata/combined.log"}, "nope.rules"},
		{[]string{"replay", "-rules", "testdata/combined.log", "testdata/combined.log"}, "combined.log: ratelimit: invalid rule"},
		{[]string{"replay", "-rules", "testdata/site.rules", "-max-keys", "0", "testdata/combined.log"}, "-max-keys must be at least 1"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, nil, &out, &errb); code == 0 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

func TestGoldenSuggest(t *testing.T) {
	out := runOK(t, "", "suggest", "-scope", "ip", "-class", "POST /login", "-rates", "1/m,5/m,30/m", "-targets", "0%,1%,5%", "testdata/combined.log")
	golden(t, "suggest.txt.golden", out)
	js := runOK(t, "", "suggest", "-json", "-scope", "user", "-rates", "1/s", "-targets", "1%", "-of", "keys",
		"-format", "json", "-time-field", "ts", "-ip-field", "client", "-user-field", "uid", "-path-field", "uri", "testdata/access.jsonl.gz")
	golden(t, "suggest.json.golden", js)
	fw := []string{"suggest", "-algorithm", "fixedwindow", "-scope", "ip", "-class", "POST /login", "-windows", "10s,1m", "-targets", "0%,1%,5%", "testdata/combined.log"}
	golden(t, "suggest-fixedwindow.txt.golden", runOK(t, "", fw...))
	golden(t, "suggest-fixedwindow.json.golden", runOK(t, "", append([]string{"suggest", "-json"}, fw[1:]...)...))
	for _, args := range [][]string{
		{"suggest", "-algorithm", "gcra", "testdata/combined.log"},
		{"suggest", "-algorithm", "slidinglog", "-rates", "1/s", "testdata/combined.log"},
		{"suggest", "-windows", "1m", "testdata/combined.log"},
		{"suggest", "-algorithm", "fixedwindow", "-windows", "0s", "testdata/combined.log"},
		{"suggest", "-scope", "tenant", "testdata/combined.log"},
		{"suggest", "-targets", "5", "testdata/combined.log"},
		{"suggest", "-rates", "fast", "testdata/combined.log"},
		{"suggest", "-of", "bytes", "testdata/combined.log"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, nil, &out, &errb); code == 0 || errb.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}
