package main

import (
	"os"
	"strings"
	"testing"
)

// The example runs end to end and leaves no file behind.
func TestRuns(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "shard 1341  on west") {
		t.Errorf("the example printed\n%s", out.String())
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the example left %s in the temporary directory", left[0].Name())
	}
}
