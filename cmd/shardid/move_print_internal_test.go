package main

import (
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid/reshard"
)

// A move that compared both sides without being asked to says so; one
// asked to (--compare-source), or that did not, does not.
func TestPrintMovedSaysItComparedBothSides(t *testing.T) {
	res := reshard.MoveResult{Shard: 3, To: "pg2", Version: 7, Fenced: 41 * time.Millisecond,
		Tables: []reshard.TableCheck{{Table: "photos", Rows: 12, Checksum: 0xabc}}}
	const said = "the move compared both sides"
	for _, tc := range []struct {
		compared, asked, says bool
	}{{false, false, false}, {true, false, true}, {true, true, false}} {
		res.ComparedSource = tc.compared
		var out strings.Builder
		printMoved(&out, res, tc.asked)
		if strings.Contains(out.String(), said) != tc.says {
			t.Errorf("compared %v, asked %v:\n%s", tc.compared, tc.asked, out.String())
		}
		if !strings.HasSuffix(out.String(), "  photos: 12 rows, checksum 0000000000000abc on both sides\nmoved shard 3 to pg2 (catalog version 7); writes were fenced for 41ms\n") {
			t.Errorf("the move's lines:\n%s", out.String())
		}
	}
}
