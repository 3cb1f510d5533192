// Command ratelimit tries rate limits on traffic already served.
//
//	ratelimit replay -rules RULES [flags] LOG...
//	ratelimit suggest -scope ip|user|global [-class PATTERN] [-algorithm A] [flags] LOG...
//
// reads access logs (the combined or common log format, or JSON lines;
// gzip-compressed or not; "-" for standard input), runs every request
// through the rules (ParseRules syntax) on a clock driven by the logs'
// timestamps, and reports, rule by rule, what they would have refused.
// Several -rules compare rule sets on the same traffic. suggest finds, for
// a scope and candidate rates, the smallest token-bucket burst that
// refuses at most a share of the requests (or of the keys); with
// -algorithm, the leaky bucket's capacity at each rate or a window
// algorithm's limit at each candidate window (-windows).
//
// See docs/replay.md for the flags, the report and its limits.
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/accesslog"
	"github.com/ratelimitkit/ratelimit/internal/replay"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage: ratelimit replay -rules FILE [-rules FILE...] [flags] LOG...
       ratelimit suggest -scope ip|user|global [-class PATTERN] [flags] LOG...
run "ratelimit replay -h" or "ratelimit suggest -h" for the flags;
see docs/replay.md`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	switch args[0] {
	case "replay":
		return runReplay(args[1:], stdin, stdout, stderr)
	case "suggest":
		return runSuggest(args[1:], stdin, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "ratelimit: unknown command %q\n%s\n", args[0], usage)
	return 2
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

type replayFlags struct {
	rules                             multiFlag
	format                            string
	jsonOut, strict                   bool
	html                              string
	maxKeys, top, ipv6                int
	reorder                           time.Duration
	timeF, ipF, userF, methodF, pathF string
}

func (f *replayFlags) define(fs *flag.FlagSet) {
	fs.Var(&f.rules, "rules", "a rules file (ParseRules syntax); repeat to compare rule sets")
	fs.StringVar(&f.format, "format", "combined", "log format: "+strings.Join(accesslog.Formats, ", "))
	fs.BoolVar(&f.jsonOut, "json", false, "write the report as JSON")
	fs.BoolVar(&f.strict, "strict", false, "stop at the first malformed line")
	fs.StringVar(&f.html, "html", "", "replay: also write the report as one HTML page with SVG charts to this file")
	fs.IntVar(&f.maxKeys, "max-keys", 1_000_000, "keys each limiter holds at most")
	fs.IntVar(&f.top, "top", 5, "keys refused most listed per rule")
	fs.IntVar(&f.ipv6, "ipv6-prefix", 64, "IPv6 clients are keyed by this prefix")
	fs.DurationVar(&f.reorder, "reorder", 0, "how far out of order lines may come and still be decided in order")
	fs.StringVar(&f.timeF, "time-field", "time", "JSON: the member holding the time")
	fs.StringVar(&f.ipF, "ip-field", "remote_addr", "JSON: the member holding the client address")
	fs.StringVar(&f.userF, "user-field", "user", "JSON: the member holding the user")
	fs.StringVar(&f.methodF, "method-field", "method", "JSON: the member holding the method")
	fs.StringVar(&f.pathF, "path-field", "path", "JSON: the member holding the path")
}

func runReplay(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ratelimit replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f replayFlags
	f.define(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if len(f.rules) == 0 || fs.NArg() == 0 {
		fmt.Fprintln(stderr, "ratelimit replay: want at least one -rules file and one log (\"-\" for standard input)")
		return 2
	}
	rep, err := replayLogs(&f, fs.Args(), stdin, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "ratelimit replay:", err)
		return 1
	}
	if f.html != "" {
		if err := writeHTMLFile(f.html, rep); err != nil {
			fmt.Fprintln(stderr, "ratelimit replay:", err)
			return 1
		}
		for i := range rep.Sets { // the details are the page's; the other reports stay as without -html
			for j := range rep.Sets[i].Rules {
				rr := &rep.Sets[i].Rules[j]
				rr.Limit, rr.Period, rr.Minutes, rr.PeakRates = 0, 0, nil, nil
			}
		}
	}
	if f.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(jsonReport(rep)); err != nil {
			fmt.Fprintln(stderr, "ratelimit replay:", err)
			return 1
		}
		return 0
	}
	writeText(stdout, rep)
	return 0
}

func replayLogs(f *replayFlags, logs []string, stdin io.Reader, stderr io.Writer) (*replay.Report, error) {
	format, err := accesslog.ParseFormat(f.format)
	if err != nil {
		return nil, err
	}
	parser, err := accesslog.NewParser(format, accesslog.Fields{Time: f.timeF, IP: f.ipF, User: f.userF, Method: f.methodF, Path: f.pathF})
	if err != nil {
		return nil, err
	}
	var files []replay.RuleFile
	for _, name := range f.rules {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		files = append(files, replay.RuleFile{Name: filepath.Base(name), Text: string(b)})
	}
	if f.maxKeys < 1 {
		return nil, fmt.Errorf("-max-keys must be at least 1, got %d", f.maxKeys)
	}
	if f.top < 1 {
		return nil, fmt.Errorf("-top must be at least 1, got %d", f.top)
	}
	r, err := replay.New(files, replay.Options{MaxKeys: f.maxKeys, Reorder: f.reorder, IPv6Prefix: f.ipv6, Top: f.top, Detail: f.html != ""})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	prog := newProgress(stderr)
	pp := newPipe(r)
	for _, name := range logs {
		if err := replayFile(pp, parser, name, stdin, f.strict, prog); err != nil {
			pp.close()
			return nil, err
		}
	}
	pp.close()
	prog.done()
	return r.Finish(), nil
}

// sink is what the lines of a log go to: a replay or a trace.
type sink interface {
	Add(file string, line int64, e *accesslog.Entry)
	Malformed(file string, line int64, err error)
}

func replayFile(r sink, p *accesslog.Parser, name string, stdin io.Reader, strict bool, prog *progress) error {
	var in io.Reader = stdin
	var size int64 = -1
	if name != "-" {
		fh, err := os.Open(name)
		if err != nil {
			return err
		}
		defer fh.Close()
		if st, err := fh.Stat(); err == nil && st.Mode().IsRegular() {
			size = st.Size()
		}
		in = fh
	}
	counted := &countingReader{r: in}
	br := bufio.NewReaderSize(counted, 1<<16)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 1<<16)
	}
	prog.file(counted, size)
	var e accesslog.Entry
	var lineNo int64
	defer func() { prog.lines = lineNo }() // the file's count, for the next file's base
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			lineNo++
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if perr := malformedLine(r, name, lineNo, errors.New("line longer than 64 KiB"), strict); perr != nil {
				return perr
			}
			if err != nil && err != io.EOF {
				return fmt.Errorf("%s: %w", name, err)
			}
			if err == io.EOF {
				return nil
			}
			continue
		}
		if len(line) > 0 {
			lineNo++
			line = bytes.TrimSuffix(line, []byte{'\n'})
			line = bytes.TrimSuffix(line, []byte{'\r'})
			if len(line) > 0 {
				if perr := p.Parse(line, &e); perr != nil {
					if perr := malformedLine(r, name, lineNo, perr, strict); perr != nil {
						return perr
					}
				} else {
					r.Add(name, lineNo, &e)
				}
			}
			if lineNo&0xffff == 0 {
				prog.tick(lineNo)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
}

func malformedLine(r sink, name string, n int64, err error, strict bool) error {
	if strict {
		return fmt.Errorf("%s:%d: %w", name, n, err)
	}
	r.Malformed(name, n, err)
	return nil
}

func writeHTMLFile(name string, rep *replay.Report) error {
	fh, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := writeHTML(fh, rep); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
