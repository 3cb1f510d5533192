package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// chromium returns the headless browser to open pages with, skipping the
// test when there is none, unless RATELIMIT_REQUIRE_CHROMIUM=1 (as CI
// sets, after installing it).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("RATELIMIT_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("no chromium, and RATELIMIT_REQUIRE_CHROMIUM=1")
	}
	t.Skip("no chromium: the HTML report is not opened in a browser")
	return ""
}

var (
	ruleDiv = regexp.MustCompile(`(?s)<div class="rule" data-set="([^"]*)" data-rule="([^"]*)" data-seen="(\d+)" data-refused="(\d+)">(.*?)</div>`)
	rectN   = regexp.MustCompile(`<rect class="(allowed|refused|peak|over)"[^>]* data-n="(\d+)"`)
)

// The HTML report, opened in headless Chromium: no console message (the
// page's policy forbids scripts and loads, so a violation would show
// there), an SVG timeline and peak chart per rule, and the bars' totals
// equal to the JSON report's.
func TestHTMLInChromium(t *testing.T) {
	browser := chromium(t)
	page := filepath.Join(t.TempDir(), "report.html")
	args := []string{"-rules", "testdata/site.rules", "-rules", "testdata/strict.rules", "testdata/malformed.log"}
	rep := reportOf(t, "", args...)
	text := runOK(t, "", append([]string{"replay", "-html", page}, args...)...)
	if text != runOK(t, "", append([]string{"replay"}, args...)...) {
		t.Fatal("-html changed the text report")
	}
	cmd := exec.Command(browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0", "--dump-dom", "file://"+page)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, ":CONSOLE") {
			t.Errorf("console: %s", line)
		}
	}
	if !strings.Contains(string(dom), "<svg") {
		t.Fatal("no SVG in the page as the browser read it")
	}
	divs := ruleDiv.FindAllStringSubmatch(string(dom), -1)
	want := 0
	for _, s := range rep.Sets {
		want += len(s.Rules)
	}
	if len(divs) != want {
		t.Fatalf("%d rules in the page, %d in the report", len(divs), want)
	}
	i := 0
	for _, s := range rep.Sets {
		for _, rr := range s.Rules {
			d := divs[i]
			i++
			if d[1] != s.Name || d[2] != rr.Name {
				t.Fatalf("rule %d: the page has %s / %s, the report %s / %s", i, d[1], d[2], s.Name, rr.Name)
			}
			if strings.Count(d[5], "<svg") != 2 {
				t.Errorf("%s: %d charts, want 2", rr.Name, strings.Count(d[5], "<svg"))
			}
			var allowed, refused, keys int64
			for _, m := range rectN.FindAllStringSubmatch(d[5], -1) {
				n, _ := strconv.ParseInt(m[2], 10, 64)
				switch m[1] {
				case "allowed":
					allowed += n
				case "refused":
					refused += n
				default:
					keys += n
				}
			}
			seen, _ := strconv.ParseInt(d[3], 10, 64)
			if refused != rr.Refused || allowed+refused != rr.Seen || seen != rr.Seen {
				t.Errorf("%s / %s: the bars show %d allowed and %d refused, the report %d seen and %d refused", s.Name, rr.Name, allowed, refused, rr.Seen, rr.Refused)
			}
			if keys == 0 || keys < rr.DistinctKeys {
				t.Errorf("%s / %s: the peak chart counts %d keys, the report %d refused", s.Name, rr.Name, keys, rr.DistinctKeys)
			}
			if !strings.Contains(text, "  "+rr.Name+"\n") {
				t.Errorf("%s is not in the text report", rr.Name)
			}
		}
	}
}
