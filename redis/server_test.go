package redis

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Tests run against a real redis-server: RATELIMIT_REDIS_ADDR if set, else
// one started on a free loopback port for the package's tests and stopped
// by TestMain. Without a redis-server binary the tests skip, unless
// RATELIMIT_REQUIRE_REDIS=1 (set by CI), which makes that a failure.

// skipNotice is the line TestMain prints when the Redis tests will skip.
// It ends with the testing package's own "no tests to run" warning, which
// go test turns into " [no tests to run]" on the package's ok line: in
// package list mode (go test ./...) the output of a passing package is not
// shown, and that mark is the one way a skip stays visible there.
const skipNotice = "redis: no redis-server in PATH and RATELIMIT_REDIS_ADDR unset: the Redis tests skip " +
	"(install redis-server or set RATELIMIT_REDIS_ADDR to run them; RATELIMIT_REQUIRE_REDIS=1 makes this a failure)\n" +
	"testing: warning: no tests to run\n"

func TestMain(m *testing.M) {
	// The failure tests stop Redis on purpose: keep go-redis's reports of
	// failed dials out of the test output.
	goredis.SetLogger(quietLogger{})
	if !redisAvailable() {
		if os.Getenv("RATELIMIT_REQUIRE_REDIS") == "1" {
			fmt.Fprintln(os.Stderr, "redis: RATELIMIT_REQUIRE_REDIS=1 but no redis-server in PATH and RATELIMIT_REDIS_ADDR unset")
		} else {
			fmt.Fprint(os.Stderr, skipNotice)
		}
	}
	code := m.Run()
	shared.mu.Lock()
	if shared.srv != nil {
		shared.srv.stop()
	}
	shared.mu.Unlock()
	os.Exit(code)
}

// redisAvailable reports whether the tests have a Redis to run against.
func redisAvailable() bool {
	if os.Getenv("RATELIMIT_REDIS_ADDR") != "" {
		return true
	}
	_, err := exec.LookPath("redis-server")
	return err == nil
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

var shared struct {
	mu  sync.Mutex
	srv *testServer
	err error
}

// redisAddr returns the address of the shared Redis, starting it on first use.
func redisAddr(t testing.TB) string {
	t.Helper()
	if a := os.Getenv("RATELIMIT_REDIS_ADDR"); a != "" {
		return a
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv == nil && shared.err == nil {
		shared.srv, shared.err = startServer(0)
	}
	if shared.err != nil {
		skipOrFail(t, shared.err)
	}
	return shared.srv.addr
}

func skipOrFail(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("RATELIMIT_REQUIRE_REDIS") == "1" {
		t.Fatalf("RATELIMIT_REQUIRE_REDIS=1 but no Redis to test against: %v", err)
	}
	t.Skipf("skipping Redis tests: %v (install redis-server or set RATELIMIT_REDIS_ADDR)", err)
}

// ownServer starts a redis-server for one test (for tests that stop it),
// stopped at the test's end. It skips or fails as redisAddr does.
func ownServer(t testing.TB) *testServer {
	t.Helper()
	s, err := startServer(0)
	if err != nil {
		skipOrFail(t, err)
	}
	t.Cleanup(s.stop)
	return s
}

// testServer is a redis-server process on loopback.
type testServer struct {
	port  int
	extra []string // more redis-server arguments
	addr  string
	dir   string
	cmd   *exec.Cmd
	out   *bytes.Buffer
}

// startServer starts redis-server on port (0: a free one) and waits until
// it answers PING.
func startServer(port int, extra ...string) (*testServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("no redis-server binary in PATH")
	}
	dir, err := os.MkdirTemp("", "ratelimit-redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for try := 0; try < 5; try++ {
		p := port
		if p == 0 {
			if p, err = freePort(); err != nil {
				return nil, err
			}
		}
		s := &testServer{port: p, addr: "127.0.0.1:" + strconv.Itoa(p), dir: dir, extra: extra}
		if lastErr = s.start(bin); lastErr == nil {
			return s, nil
		}
		if port != 0 {
			break
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *testServer) start(bin string) error {
	s.out = new(bytes.Buffer)
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--daemonize", "no"}, s.extra...)
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if ping(s.addr) == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.kill()
	return fmt.Errorf("redis-server on %s did not answer PING: %s", s.addr, s.out.String())
}

// ping sends PING on a fresh connection and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func (s *testServer) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGCONT) // in case it was paused
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

// stop kills the server and removes its directory.
func (s *testServer) stop() {
	s.kill()
	os.RemoveAll(s.dir)
}

// restart starts the server again on the same port.
func (s *testServer) restart(t testing.TB) {
	t.Helper()
	bin, _ := exec.LookPath("redis-server")
	var err error
	for try := 0; try < 20; try++ { // the port may linger briefly
		if err = s.start(bin); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("restart redis-server: %v", err)
}

// pause stops the server process (SIGSTOP): connections stay open and
// nothing answers, as with a server that hangs. resume continues it.
func (s *testServer) pause() {
	s.cmd.Process.Signal(syscall.SIGSTOP)
	// The signal is delivered asynchronously: wait (up to a second) until
	// the process is seen stopped, so that no request sent after pause is
	// answered. Where /proc cannot tell, go on at once.
	stat := "/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/stat"
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err != nil {
			return
		}
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return
		}
	}
}
func (s *testServer) resume() { s.cmd.Process.Signal(syscall.SIGCONT) }

// newClient returns a client of addr closed at the test's end.
// ctxTimeout sets ContextTimeoutEnabled.
func newClient(t testing.TB, addr string, ctxTimeout bool) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: ctxTimeout})
	t.Cleanup(func() { c.Close() })
	return c
}

// testPrefix returns a key prefix of the test's own.
func testPrefix(t testing.TB) string {
	return "rltest:" + filepath.Base(t.Name()) + ":" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
}

// keysWithPrefix lists the keys under prefix.
func keysWithPrefix(t testing.TB, c *goredis.Client, prefix string) []string {
	t.Helper()
	var keys []string
	iter := c.Scan(context.Background(), 0, prefix+"*", 1000).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}
