package main

import (
	"os"
	"strings"
	"testing"

	"github.com/shardid/shardid/internal/readme"
)

// The example runs end to end and leaves no file behind.
func TestRuns(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	if err := readme.SameOutput("README.md", "go run ./examples/routing", out.String()); err != nil {
		t.Error(err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the example left %s in the temporary directory", left[0].Name())
	}
}
