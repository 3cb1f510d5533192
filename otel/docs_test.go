package otel_test

import (
	"path/filepath"
	"testing"

	"github.com/ratelimitkit/ratelimit/internal/doccode"
)

// TestDocCodeCompiles compiles the Go code blocks of the repository's
// README and docs/ that name this module (<!-- go: module otel -->):
// they need its imports, which the core module's own check does not have.
func TestDocCodeCompiles(t *testing.T) {
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var mine []doccode.Block
	for _, f := range append([]string{"../README.md"}, files...) {
		blocks, err := doccode.Extract(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if b.Module == "otel" && b.Skip == "" {
				mine = append(mine, b)
			}
		}
	}
	// docs/observability.md shows the instruments.
	if len(mine) < 1 {
		t.Fatalf("found %d Go blocks for the otel module; the extraction is broken", len(mine))
	}
	if err := doccode.Build(".", mine); err != nil {
		t.Fatal(err)
	}
}
