package grpclimit_test

import (
	"path/filepath"
	"testing"

	"github.com/ratelimitkit/ratelimit/internal/doccode"
)

// TestDocCodeCompiles compiles the Go code blocks of the repository's
// README and docs/ that name this module (<!-- go: module grpclimit -->):
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
			if b.Module == "grpclimit" && b.Skip == "" {
				mine = append(mine, b)
			}
		}
	}
	// docs/grpc.md shows the server and the client.
	if len(mine) < 2 {
		t.Fatalf("found %d Go blocks for the grpclimit module; the extraction is broken", len(mine))
	}
	if err := doccode.Build(".", mine); err != nil {
		t.Fatal(err)
	}
}
