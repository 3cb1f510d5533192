package ratelimit_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/doccode"
)

// docFiles are the Markdown files whose Go code blocks must compile.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md"}, files...)
}

// TestDocCodeCompiles compiles every Go code block of the README and
// docs/ that the core module can build (see package doccode for the
// directives), and checks that blocks left to a nested module name one
// that exists.
func TestDocCodeCompiles(t *testing.T) {
	var core []doccode.Block
	for _, f := range docFiles(t) {
		blocks, err := doccode.Extract(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			switch {
			case b.Skip != "":
				t.Logf("%s:%d: not compiled: %s", b.File, b.Line, b.Skip)
			case b.Module != "":
				if _, err := os.Stat(filepath.Join(b.Module, "go.mod")); err != nil {
					t.Errorf("%s:%d: the block names module %q, which has no go.mod here", b.File, b.Line, b.Module)
				}
			default:
				core = append(core, b)
			}
		}
	}
	// The README alone has a dozen blocks: finding few means the
	// extraction broke, not that there is nothing to check.
	if len(core) < 10 {
		t.Fatalf("found %d Go blocks for the core module; the extraction is broken", len(core))
	}
	if err := doccode.Build(".", core); err != nil {
		t.Fatal(err)
	}
}

// TestQuickStart runs the README's complete program, listening on a
// loopback port instead of the address it names, sends the requests of the
// transcript that follows it, and compares each response with the one the
// README shows, Date values aside.
func TestQuickStart(t *testing.T) {
	blocks, err := doccode.Extract("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var prog *doccode.Block
	for i := range blocks {
		if blocks[i].Serve != "" {
			if prog != nil {
				t.Fatalf("README.md:%d: a second program to serve", blocks[i].Line)
			}
			prog = &blocks[i]
		}
	}
	if prog == nil {
		t.Fatal("README.md has no block marked <!-- go: serve ADDR -->")
	}
	console, line, err := doccode.Console("README.md", prog.Line)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := doccode.Transcripts(console, line)
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	if len(ts) < 2 {
		t.Fatalf("README.md:%d: the transcript has %d requests", line, len(ts))
	}

	bin := filepath.Join(t.TempDir(), "quickstart")
	var addr string
	build := func() {
		addr = freeAddr(t)
		quoted := strconv.Quote(prog.Serve)
		err := doccode.BuildProgram(".", *prog, bin, func(src string) (string, error) {
			if strings.Count(src, quoted) != 1 {
				return "", fmt.Errorf("README.md:%d: want the address %s once in the program", prog.Line, quoted)
			}
			return strings.Replace(src, quoted, strconv.Quote(addr), 1), nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The port is free when chosen; another process may take it before
	// the program listens, so try a few.
	for attempt := 0; ; attempt++ {
		build()
		cmd := exec.Command(bin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if waitListening(addr, exited) {
			t.Cleanup(func() { cmd.Process.Kill(); <-exited })
			break
		}
		if attempt == 2 {
			t.Fatalf("the quick start did not listen on %s: %s", addr, stderr.String())
		}
	}

	for _, tr := range ts {
		got, err := curl(addr, tr.Path)
		if err != nil {
			t.Fatalf("README.md:%d: %s: %v", tr.Line, tr.Command, err)
		}
		if !doccode.SameResponse(got, tr.Response) {
			t.Errorf("README.md:%d: %s\ngot:\n%s\nREADME shows:\n%s", tr.Line, tr.Command,
				strings.ReplaceAll(got, "\r\n", "\n"), tr.Response)
		}
	}
}

// freeAddr returns a loopback address with a port that was free just now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitListening reports whether addr accepts connections within 10 s, or
// false as soon as the process exits.
func waitListening(addr string, exited <-chan error) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// curl sends what curl -i sends for GET path and returns the raw response,
// headers and body, as curl -i prints it.
func curl(addr, path string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: localhost:8080\r\nUser-Agent: curl/8\r\nAccept: */*\r\n\r\n", path); err != nil {
		return "", err
	}
	var raw bytes.Buffer
	resp, err := http.ReadResponse(bufio.NewReader(io.TeeReader(c, &raw)), nil)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return "", err
	}
	resp.Body.Close()
	return raw.String(), nil
}

// TestDocLinks checks that every relative link and image of the README and
// docs/ names a file of the repository.
func TestDocLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	n := 0
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") {
				continue
			}
			n++
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s: a link to %s, which does not exist", f, m[1])
			}
		}
	}
	if n < 10 {
		t.Fatalf("found %d relative links; the README alone has more", n)
	}
}
