package reshard

import (
	"strings"
	"testing"
)

// copyRouter routes COPY lines to their shards whatever the pieces COPY
// TO STDOUT writes them in, counts and sums what it sends, sends a shard's
// rows once they reach copyChunk, and refuses a line it cannot read.
func TestCopyRouter(t *testing.T) {
	var got []copyChunkOf
	r := newCopyRouter([]int{3, 5}, func(c copyChunkOf) error { got = append(got, c); return nil }, nil)
	in := "3\t-1\t10\tab\\tc\n5\t7\t11\tx\n3\t2\t12\ty\\n\n"
	for _, piece := range []string{in[:1], in[1:9], in[9:20], in[20:]} {
		if n, err := r.Write([]byte(piece)); err != nil || n != len(piece) {
			t.Fatalf("Write(%q) = %d, %v", piece, n, err)
		}
	}
	if err := r.flushAll(); err != nil {
		t.Fatal(err)
	}
	want := map[int]string{3: "10\tab\\tc\n12\ty\\n\n", 5: "11\tx\n"}
	if len(got) != 2 {
		t.Fatalf("%d chunks sent, want 2: %+v", len(got), got)
	}
	for _, c := range got {
		if string(c.data) != want[c.shard] || c.rows != int64(strings.Count(want[c.shard], "\n")) {
			t.Errorf("shard %d: %q (%d rows), want %q", c.shard, c.data, c.rows, want[c.shard])
		}
	}
	if s := r.sent[3]; s.rows != 2 || s.sum != uint64(1) { // -1 + 2, modulo 2^64
		t.Errorf("shard 3 sent %+v, want 2 rows, sum 1", *s)
	}
	if s := r.sent[5]; s.rows != 1 || s.sum != 7 {
		t.Errorf("shard 5 sent %+v, want 1 row, sum 7", *s)
	}
	if r.total != 3 {
		t.Errorf("total %d, want 3", r.total)
	}

	// A shard's rows go once they reach copyChunk.
	got = nil
	big := newCopyRouter([]int{1}, func(c copyChunkOf) error { got = append(got, c); return nil }, nil)
	line := "1\t0\t" + strings.Repeat("z", 1000) + "\n"
	for range copyChunk/1000 + 1 {
		if _, err := big.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || len(got[0].data) < copyChunk {
		t.Errorf("%d chunks before the end, want 1 of at least %d bytes", len(got), copyChunk)
	}

	for _, bad := range []string{"x\t1\tv\n", "3\tv\n", "4\t1\tv\n", "\n"} {
		r := newCopyRouter([]int{3}, func(copyChunkOf) error { return nil }, nil)
		if _, err := r.Write([]byte(bad)); err == nil {
			t.Errorf("Write(%q): no error", bad)
		}
	}
}
