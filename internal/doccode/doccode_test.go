package doccode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeMarkdown(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "page.md")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestExtract(t *testing.T) {
	path := writeMarkdown(t, strings.Join([]string{
		"# Title", // 1
		"",
		"<!-- an ordinary comment -->",
		"<!-- go: given ctx context.Context -->",
		"<!-- go: module redis -->", // 5
		"```go",
		"x := 1",
		"```",
		"",
		"```console", // 10
		"$ echo",
		"```",
		"<!-- go: skip needs a server -->",
		"```go",
		"package main", // 15
		"```",
		"```go",
		"var y = 2",
		"```",
	}, "\n"))
	blocks, err := Extract(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 3 {
		t.Fatalf("%d blocks, want 3 (the console block is not Go)", len(blocks))
	}
	b := blocks[0]
	if b.Line != 7 || b.Code != "x := 1\n" || b.Given != "ctx context.Context" || b.Module != "redis" || b.Skip != "" {
		t.Errorf("first block: %+v", b)
	}
	if b := blocks[1]; b.Line != 15 || b.Skip != "needs a server" || !b.Program() {
		t.Errorf("second block: %+v", b)
	}
	// Directives belong to the block right after them only.
	if b := blocks[2]; b.Given != "" || b.Module != "" || b.Skip != "" || b.Program() {
		t.Errorf("third block: %+v", b)
	}
}

func TestExtractRejects(t *testing.T) {
	for name, text := range map[string]string{
		"skip without a reason": "<!-- go: skip -->\n```go\nx := 1\n```\n",
		"unknown directive":     "<!-- go: compile -->\n```go\nx := 1\n```\n",
		"block left open":       "```go\nx := 1\n",
	} {
		if _, err := Extract(writeMarkdown(t, text)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestSource(t *testing.T) {
	frag := Block{File: "docs/x.md", Line: 40, Given: "lim ratelimit.Limiter",
		Code: "d, err := lim.AllowN(context.Background(), \"k\", 1)\nvar n int\n"}
	src, err := Source(frag)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"func _(lim ratelimit.Limiter) {\n//line docs/x.md:40\nd, err :=",
		"\t_ = d\n\t_ = err\n\t_ = n\n",
		`context "context"`,
		`ratelimit "github.com/ratelimitkit/ratelimit"`,
	} {
		if !strings.Contains(src, want) {
			t.Errorf("fragment source lacks %q:\n%s", want, src)
		}
	}
	if strings.Contains(src, `"net/http"`) {
		t.Errorf("fragment source imports a package it does not use:\n%s", src)
	}

	decls := Block{File: "README.md", Line: 3, Code: "func work(http string) { _ = http }\n"}
	src, err = Source(decls)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(src, "package block\n//line README.md:3\nfunc work") {
		t.Errorf("declarations: want them at file level, with no import for a local name:\n%s", src)
	}

	if _, err := Source(Block{File: "a.md", Line: 1, Code: "x := (\n"}); err == nil {
		t.Error("a block that is neither declarations nor statements: no error")
	}
}

// Build reports a block that does not compile at its line in the
// Markdown file, and accepts one that does.
func TestBuild(t *testing.T) {
	good := Block{File: "docs/ok.md", Line: 10, Code: "lim, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1)\n"}
	bad := Block{File: "docs/bad.md", Line: 20, Code: "var n int = \"one\"\n"}
	if err := Build("../..", []Block{good}); err != nil {
		t.Fatalf("a good block: %v", err)
	}
	err := Build("../..", []Block{good, bad})
	if err == nil || !strings.Contains(err.Error(), "docs/bad.md:20") {
		t.Fatalf("a bad block: got %v, want an error at docs/bad.md:20", err)
	}
}

func TestTranscripts(t *testing.T) {
	ts, err := Transcripts("$ curl -i localhost:8080/hello\nHTTP/1.1 200 OK\nDate: x\n\nhello\n\n$ curl -i localhost:8080/a/b\nHTTP/1.1 429 Too Many Requests\n", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Line != 5 || ts[0].Path != "/hello" || ts[1].Line != 11 || ts[1].Path != "/a/b" {
		t.Fatalf("%+v", ts)
	}
	if ts[0].Response != "HTTP/1.1 200 OK\nDate: x\n\nhello\n" {
		t.Errorf("first response %q", ts[0].Response)
	}
	got := "HTTP/1.1 200 OK\r\nDate: Tue, 01 Dec 2026 16:16:22 GMT\r\n\r\nhello\n"
	if !SameResponse(got, ts[0].Response) {
		t.Error("a response differing only in its Date value: not the same")
	}
	if SameResponse(strings.Replace(got, "hello", "hullo", 1), ts[0].Response) {
		t.Error("a different body: the same")
	}
	for _, bad := range []string{"HTTP/1.1 200 OK\n", "$ curl localhost/x\n", "$ curl -i localhost\n"} {
		if _, err := Transcripts(bad, 1); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
