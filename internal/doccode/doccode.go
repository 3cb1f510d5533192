// Package doccode finds the Go code blocks of Markdown files and compiles
// them, so that the README and docs/ cannot show code that does not build.
// It is used by tests only.
//
// A ```go block is compiled in one of two ways:
//
//   - A block that begins with a package clause is a complete file and is
//     built as it is.
//   - Any other block is a fragment. If it parses as top-level declarations
//     it is compiled as a file of its own; otherwise as the body of a
//     function. The imports it needs are added from the package names it
//     uses (see [Imports]), and every variable it declares at the top of
//     the body is marked used, so a fragment may end without using what it
//     built.
//
// An HTML comment on the line just before the opening fence gives
// directives, space-separated:
//
//	<!-- go: given ctx context.Context, mux *http.ServeMux -->
//	<!-- go: module redis -->
//	<!-- go: skip the reason, in words -->
//	<!-- go: serve localhost:8080 -->
//
// "given" declares what a fragment takes from its surroundings, as the
// parameters of the function around it. "module" names the nested module
// whose test compiles the block (its imports are not the core's); the
// core's test checks that the module exists. "skip" leaves the block out
// of every build; the reason is required and stays visible in the
// Markdown. "serve" marks the complete program that the quick-start test
// runs, listening on a loopback port in place of the address given.
//
// Compile errors are reported at the block's own lines in the Markdown
// file, through //line directives.
package doccode

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// A Block is one ```go block of a Markdown file.
type Block struct {
	File   string // the Markdown file, as given to Extract
	Line   int    // the line of the block's first line of code
	Code   string // the code, without the fences
	Given  string // the fragment's parameters, from a "given" directive
	Module string // the nested module that compiles it; "" for the core
	Skip   string // why the block is not compiled; "" if it is
	Serve  string // the address of a "serve" directive
}

// Program reports whether b is a complete file (it begins with a package
// clause).
func (b Block) Program() bool {
	for _, l := range strings.Split(b.Code, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		return strings.HasPrefix(l, "package ")
	}
	return false
}

var directive = regexp.MustCompile(`^<!--\s*go:\s*(\w+)\s*(.*?)\s*-->$`)

// Extract returns the ```go blocks of the Markdown file at path, in order,
// with their directives. It fails on a malformed directive, a "skip"
// without a reason, and a block left open.
func Extract(path string) ([]Block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(data), "\n")
	var blocks []Block
	for i := 0; i < len(lines); i++ {
		fence := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(fence, "```") {
			continue
		}
		lang := strings.TrimSpace(strings.TrimPrefix(fence, "```"))
		start := i + 1
		end := start
		for end < len(lines) && strings.TrimSpace(lines[end]) != "```" {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("%s:%d: code block not closed", path, i+1)
		}
		if lang == "go" {
			b := Block{File: path, Line: start + 1, Code: strings.Join(lines[start:end], "\n") + "\n"}
			for j := i - 1; j >= 0; j-- {
				d := strings.TrimSpace(lines[j])
				if !strings.HasPrefix(d, "<!--") {
					break
				}
				if err := b.apply(d); err != nil {
					return nil, fmt.Errorf("%s:%d: %v", path, j+1, err)
				}
			}
			blocks = append(blocks, b)
		}
		i = end
	}
	return blocks, nil
}

func (b *Block) apply(comment string) error {
	m := directive.FindStringSubmatch(comment)
	if m == nil {
		return nil // an ordinary comment
	}
	switch arg := m[2]; m[1] {
	case "given":
		b.Given = arg
	case "module":
		b.Module = arg
	case "skip":
		if arg == "" {
			return fmt.Errorf("a skip directive needs a reason")
		}
		b.Skip = arg
	case "serve":
		b.Serve = arg
	default:
		return fmt.Errorf("unknown directive %q", m[1])
	}
	return nil
}

// Imports maps the package names fragments may use to their import paths.
var Imports = map[string]string{
	"context":    "context",
	"errors":     "errors",
	"fmt":        "fmt",
	"http":       "net/http",
	"httptest":   "net/http/httptest",
	"io":         "io",
	"log":        "log",
	"net":        "net",
	"netip":      "net/netip",
	"os":         "os",
	"slog":       "log/slog",
	"strings":    "strings",
	"sync":       "sync",
	"testing":    "testing",
	"time":       "time",
	"ratelimit":  "github.com/ratelimitkit/ratelimit",
	"httplimit":  "github.com/ratelimitkit/ratelimit/httplimit",
	"rlredis":    "github.com/ratelimitkit/ratelimit/redis",
	"goredis":    "github.com/redis/go-redis/v9",
	"grpclimit":  "github.com/ratelimitkit/ratelimit/grpclimit",
	"grpc":       "google.golang.org/grpc",
	"insecure":   "google.golang.org/grpc/credentials/insecure",
	"rlprom":     "github.com/ratelimitkit/ratelimit/prometheus",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"promhttp":   "github.com/prometheus/client_golang/prometheus/promhttp",
	"rlotel":     "github.com/ratelimitkit/ratelimit/otel",
	"sdkmetric":  "go.opentelemetry.io/otel/sdk/metric",
}

// Source returns the Go file that compiles b, with //line directives that
// point back into the Markdown file.
func Source(b Block) (string, error) {
	at := fmt.Sprintf("//line %s:%d\n", filepath.ToSlash(b.File), b.Line)
	if b.Program() {
		return at + b.Code, nil
	}
	fset := token.NewFileSet()
	decls := "package block\n" + b.Code
	if f, err := parser.ParseFile(fset, "", decls, 0); err == nil {
		return "package block\n" + imports(f) + at + b.Code, nil
	}
	body := "package block\nfunc _(" + b.Given + ") {\n" + b.Code + "}\n"
	f, err := parser.ParseFile(fset, "", body, 0)
	if err != nil {
		// Report the error at the block's lines.
		_, err = parser.ParseFile(token.NewFileSet(), "", "package block\nfunc _("+b.Given+") {\n"+at+b.Code+"}\n", 0)
		return "", fmt.Errorf("%s:%d: neither declarations nor statements: %v", b.File, b.Line, err)
	}
	fn := f.Decls[0].(*ast.FuncDecl)
	var used strings.Builder
	for _, s := range fn.Body.List {
		for _, name := range declared(s) {
			fmt.Fprintf(&used, "\t_ = %s\n", name)
		}
	}
	return "package block\n" + imports(f) + "func _(" + b.Given + ") {\n" + at + b.Code + used.String() + "}\n", nil
}

// declared returns the variables statement s declares in its block.
func declared(s ast.Stmt) []string {
	var names []string
	add := func(id *ast.Ident) {
		if id.Name != "_" {
			names = append(names, id.Name)
		}
	}
	switch s := s.(type) {
	case *ast.AssignStmt:
		if s.Tok == token.DEFINE {
			for _, e := range s.Lhs {
				if id, ok := e.(*ast.Ident); ok {
					add(id)
				}
			}
		}
	case *ast.DeclStmt:
		if g, ok := s.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
			for _, spec := range g.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					add(id)
				}
			}
		}
	}
	return names
}

// imports returns the import declaration for the packages f refers to by
// the names in Imports, leaving out names f declares itself.
func imports(f *ast.File) string {
	own := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			for _, id := range n.Names {
				own[id.Name] = true
			}
		case *ast.ValueSpec:
			for _, id := range n.Names {
				own[id.Name] = true
			}
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, e := range n.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						own[id.Name] = true
					}
				}
			}
		case *ast.FuncDecl:
			own[n.Name.Name] = true
		case *ast.TypeSpec:
			own[n.Name.Name] = true
		}
		return true
	})
	need := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && !own[id.Name] && Imports[id.Name] != "" {
				need[id.Name] = true
			}
		}
		return true
	})
	if len(need) == 0 {
		return ""
	}
	var names []string
	for n := range need {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("import (\n")
	for _, n := range names {
		fmt.Fprintf(&b, "\t%s %q\n", n, Imports[n])
	}
	b.WriteString(")\n")
	return b.String()
}

// Build compiles blocks within the module at dir (its go.mod's directory),
// each as a package of its own that exists only in an overlay, with one go
// build. It returns the compiler's output on failure, its positions in the
// Markdown files.
func Build(dir string, blocks []Block) error {
	if len(blocks) == 0 {
		return nil
	}
	tmp, err := os.MkdirTemp("", "doccode")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	overlay := map[string]string{}
	var pkgs []string
	for i, b := range blocks {
		src, err := Source(b)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("b%03d", i)
		file := filepath.Join(tmp, name+".go")
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			return err
		}
		overlay[filepath.Join(abs, "internal", "docblocks", name, "block.go")] = file
		pkgs = append(pkgs, "./internal/docblocks/"+name)
	}
	return goBuild(abs, tmp, overlay, pkgs...)
}

// BuildProgram compiles a complete program block into the binary out.
// Replace, if not nil, rewrites its source first.
func BuildProgram(dir string, b Block, out string, replace func(string) (string, error)) error {
	src, err := Source(b)
	if err != nil {
		return err
	}
	if replace != nil {
		if src, err = replace(src); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "doccode")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	file := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		return err
	}
	overlay := map[string]string{filepath.Join(abs, "internal", "docblocks", "program", "main.go"): file}
	return goBuild(abs, tmp, overlay, "-o", out, "./internal/docblocks/program")
}

func goBuild(dir, tmp string, overlay map[string]string, args ...string) error {
	js, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		return err
	}
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, js, 0o644); err != nil {
		return err
	}
	cmd := exec.Command("go", append([]string{"build", "-overlay", ov}, args...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	return nil
}

// Transcript is one request of a curl transcript and the response it
// shows.
type Transcript struct {
	Line     int    // the line of the "$ curl" command
	Command  string // the command, without "$ "
	Path     string // the request's path
	Response string // the response as curl -i prints it, lines ending in \n
}

// Transcripts parses a console block of "$ curl -i URL" commands, each
// followed by the response, as the block's text says it.
func Transcripts(code string, firstLine int) ([]Transcript, error) {
	var ts []Transcript
	sc := bufio.NewScanner(strings.NewReader(code))
	for n := firstLine; sc.Scan(); n++ {
		l := sc.Text()
		if cmd, ok := strings.CutPrefix(l, "$ "); ok {
			f := strings.Fields(cmd)
			if len(f) != 3 || f[0] != "curl" || f[1] != "-i" {
				return nil, fmt.Errorf("line %d: want $ curl -i URL, got %q", n, l)
			}
			_, path, ok := strings.Cut(strings.TrimPrefix(f[2], "http://"), "/")
			if !ok {
				return nil, fmt.Errorf("line %d: URL without a path: %q", n, f[2])
			}
			ts = append(ts, Transcript{Line: n, Command: cmd, Path: "/" + path})
			continue
		}
		if len(ts) == 0 {
			return nil, fmt.Errorf("line %d: response before any command", n)
		}
		ts[len(ts)-1].Response += l + "\n"
	}
	for i := range ts {
		// The blank line between two commands separates them; it is not
		// part of the response.
		ts[i].Response = strings.TrimRight(ts[i].Response, "\n") + "\n"
	}
	return ts, nil
}

// SameResponse reports whether got, a raw HTTP response (CRLF line ends),
// is what want shows, comparing Date lines by their name only (the value
// is the time of the request).
func SameResponse(got, want string) bool {
	g := strings.Split(strings.TrimRight(string(bytes.ReplaceAll([]byte(got), []byte("\r\n"), []byte("\n"))), "\n"), "\n")
	w := strings.Split(strings.TrimRight(want, "\n"), "\n")
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		if strings.HasPrefix(g[i], "Date: ") && strings.HasPrefix(w[i], "Date: ") {
			continue
		}
		if g[i] != w[i] {
			return false
		}
	}
	return true
}

// Console returns the first ```console block after line (1-based) of the
// Markdown file, and the line of its first line.
func Console(path string, line int) (string, int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", 0, err
	}
	lines := strings.Split(string(data), "\n")
	for i := line; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```console" {
			continue
		}
		for j := i + 1; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == "```" {
				return strings.Join(lines[i+1:j], "\n") + "\n", i + 2, nil
			}
		}
	}
	return "", 0, fmt.Errorf("%s: no console block after line %d", path, line)
}

// ModuleBlocks returns the Go blocks of the repository's README.md and
// docs/*.md, read from root, that name module (<!-- go: module NAME -->)
// and are not skipped: the blocks a nested module's own test compiles,
// since they need imports the core module does not have.
func ModuleBlocks(root, module string) ([]Block, error) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	var mine []Block
	for _, f := range append([]string{filepath.Join(root, "README.md")}, files...) {
		blocks, err := Extract(f)
		if err != nil {
			return nil, err
		}
		for _, b := range blocks {
			if b.Module == module && b.Skip == "" {
				mine = append(mine, b)
			}
		}
	}
	return mine, nil
}
