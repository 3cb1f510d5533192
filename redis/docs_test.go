package redis_test

import (
	"testing"

	"github.com/ratelimitkit/ratelimit/internal/doccode"
)

// TestDocCodeCompiles compiles the Go code blocks of the repository's
// README and docs/ that name this module (<!-- go: module redis -->): they
// need its imports, which the core module's own check does not have.
func TestDocCodeCompiles(t *testing.T) {
	blocks, err := doccode.ModuleBlocks("..", "redis")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) < 2 { // the README and docs/ each show the module at work
		t.Fatalf("found %d Go blocks for the redis module; the extraction is broken", len(blocks))
	}
	if err := doccode.Build(".", blocks); err != nil {
		t.Fatal(err)
	}
}
