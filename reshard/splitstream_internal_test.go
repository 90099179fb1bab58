package reshard

import (
	"strings"
	"testing"
)

// copyRouter routes COPY lines to their shards whatever the pieces COPY
// TO STDOUT writes them in, counts and sums what it sends, sends a shard's
// rows once they reach copyChunk, and refuses a line it cannot read.
func TestCopyRouter(t *testing.T) {
	t.Parallel()
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

// sumOf takes an exact sum of signed or unsigned hashes modulo 2^64, as
// rowCheck adds them up, and refuses what is not a number.
func TestSumOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"0", 0},
		{"-1", ^uint64(0)},
		{"18446744073709551616", 0},                              // 2^64
		{"18446744073709551617", 1},                              // 2^64 + 1
		{"-9223372036854775808", 1 << 63},                        // min int64
		{"36893488147419103231", ^uint64(0)},                     // 2^65 - 1
		{"-18446744073709551617", ^uint64(0)},                    // -(2^64 + 1)
		{"123456789012345678901234567890", 14083847773837265618}, // mod 2^64
	} {
		got, err := sumOf(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("sumOf(%q) = %d, %v, want %d", tc.in, got, err, tc.want)
		}
	}
	if _, err := sumOf("1e3"); err == nil {
		t.Error(`sumOf("1e3"): no error`)
	}
}

// bucketSummer adds up a move's copied rows by bucket whatever the pieces
// COPY TO STDOUT writes them in, passes each row's columns on, a row a
// write, and refuses a line it cannot read or a copy that ends in a row.
func TestBucketSummer(t *testing.T) {
	t.Parallel()
	var out []string
	w := writerFunc(func(p []byte) (int, error) { out = append(out, string(p)); return len(p), nil })
	s := &bucketSummer{w: w, sent: bucketSent{}}
	in := "-3\t-1\t-3\tab\\tc\n5\t7\t5\tx\n-3\t2\t-4099\ty\\n\n"
	for _, piece := range []string{in[:2], in[2:9], in[9:21], in[21:]} {
		if n, err := s.Write([]byte(piece)); err != nil || n != len(piece) {
			t.Fatalf("Write(%q) = %d, %v", piece, n, err)
		}
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"-3\tab\\tc\n", "5\tx\n", "-4099\ty\\n\n"}; strings.Join(out, "|") != strings.Join(want, "|") {
		t.Errorf("passed on %q, want %q", out, want)
	}
	if s.rows != 3 || s.sent[-3] != (sentRows{rows: 2, sum: 1}) || s.sent[5] != (sentRows{rows: 1, sum: 7}) {
		t.Errorf("summed %d rows: %+v %+v", s.rows, s.sent[-3], s.sent[5])
	}
	for _, bad := range []string{"x\t1\t2\n", "1\tnohash\t2\n", "1\n"} {
		s := &bucketSummer{w: w, sent: bucketSent{}}
		if _, err := s.Write([]byte(bad)); err == nil {
			t.Errorf("Write(%q): no error", bad)
		}
	}
	s = &bucketSummer{w: w, sent: bucketSent{}}
	if _, err := s.Write([]byte("1\t2\t3")); err != nil {
		t.Fatal(err)
	}
	if err := s.close(); err == nil {
		t.Error("a copy that ended in a row closed without an error")
	}
}

// writerFunc is an io.Writer of a function.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
