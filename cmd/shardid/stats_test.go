package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemoPrintsStats: the demo ends with the generator's and the router's
// figures.
func TestDemoPrintsStats(t *testing.T) {
	code, out, errs := shardidCmd(t, "", "demo", "--users", "30", "--photos", "2", "--dir", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
	m := regexp.MustCompile(`generator: (\d+) IDs issued; \d+ waits .*; clock behind 0 times \(at most 0s\); 0 errors`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no generator figures:\n%s", out)
	}
	// Generators of one layout share their figures in a process: other
	// demos of this test binary may have added theirs.
	if n, _ := strconv.Atoi(m[1]); n < 30*2*3 {
		t.Errorf("%d IDs issued, want at least %d", n, 30*2*3)
	}
	for _, want := range []string{"monitoring (Generator.Stats and Router.Stats",
		"router: 1 Gather fan-outs", "failed statements per database: db0 0, db1 0, db2 0, db3 0; 0 shards failing; 0 writes fenced"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}
