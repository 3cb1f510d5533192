package redis

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSkipIsVisible runs this test binary again with no redis-server in
// PATH: the Redis tests must say that they skip, and fail instead under
// RATELIMIT_REQUIRE_REDIS=1.
func TestSkipIsVisible(t *testing.T) {
	if os.Getenv("RATELIMIT_SKIP_CHILD") == "1" {
		t.Skip("the child run")
	}
	run := func(require string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run", "^(TestConformanceRandomTraces|TestSkipIsVisible)$", "-test.count", "1")
		env := []string{"PATH=" + t.TempDir(), "RATELIMIT_SKIP_CHILD=1"}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "RATELIMIT_") {
				env = append(env, kv)
			}
		}
		if require != "" {
			env = append(env, "RATELIMIT_REQUIRE_REDIS="+require)
		}
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	out, err := run("")
	if err != nil {
		t.Fatalf("without redis-server the tests must skip, not fail: %v\n%s", err, out)
	}
	if !strings.Contains(out, skipNotice) {
		t.Errorf("without redis-server the output lacks the skip notice:\n%s", out)
	}
	out, err = run("1")
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("with RATELIMIT_REQUIRE_REDIS=1 and no redis-server the tests must fail, got %v\n%s", err, out)
	}
	if !strings.Contains(out, "RATELIMIT_REQUIRE_REDIS=1") || strings.Contains(out, skipNotice) {
		t.Errorf("with RATELIMIT_REQUIRE_REDIS=1 the output should name the requirement, not the skip:\n%s", out)
	}
}
