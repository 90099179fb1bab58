package shardid

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// isCanonical reports whether s is the decimal form of a non-negative int64,
// as strconv, the reference, sees it.
func isCanonical(s string) (int64, bool) {
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil && v >= 0 && strconv.FormatInt(v, 10) == s
}

func FuzzParse(f *testing.F) {
	for _, tc := range parseTests {
		f.Add(tc.in)
	}
	for _, v := range vectors {
		f.Add(strconv.FormatUint(v.value, 10))
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := Parse(s)
		want, ok := isCanonical(s)
		if ok != (err == nil) {
			t.Fatalf("Parse(%q) = %v, %v; strconv says canonical = %v", s, id, err, ok)
		}
		if err != nil {
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) {
				t.Fatalf("Parse(%q): untyped error %v", s, err)
			}
			return
		}
		if int64(id) != want || id.String() != s {
			t.Fatalf("Parse(%q) = %v, want %d", s, id, want)
		}
	})
}

func FuzzUnmarshalText(f *testing.F) {
	for _, tc := range parseTests {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var id ID
		err := id.UnmarshalText(b)
		want, ok := isCanonical(string(b))
		if ok != (err == nil) || (ok && int64(id) != want) {
			t.Fatalf("UnmarshalText(%q) = %v, %v; want %d, %v", b, id, err, want, ok)
		}
		if err == nil {
			text, _ := id.MarshalText()
			if string(text) != string(b) {
				t.Fatalf("MarshalText(UnmarshalText(%q)) = %q", b, text)
			}
		}
	})
}

func FuzzUnmarshalJSON(f *testing.F) {
	for _, s := range []string{`"1"`, `1`, `null`, `-1`, `1.5`, `2.2e18`, `"\u0031"`,
		`9223372036854775807`, `9223372036854775808`, `""`, `"01"`, `01`, `{}`, `[1]`, `true`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var id ID
		err := id.UnmarshalJSON(b)
		if err != nil {
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) {
				t.Fatalf("UnmarshalJSON(%q): untyped error %v", b, err)
			}
		}

		// The reference: what encoding/json makes of the same bytes.
		var s string
		var n json.Number
		switch {
		case strings.Trim(string(b), " \t\r\n") == "null":
			if err != nil || id != 0 {
				t.Fatalf("UnmarshalJSON(null) = %v, %v", id, err)
			}
		case json.Unmarshal(b, &s) == nil:
			want, ok := isCanonical(s)
			if ok != (err == nil) || (ok && int64(id) != want) {
				t.Fatalf("UnmarshalJSON(%q) = %v, %v; the string is %q", b, id, err, s)
			}
		case json.Unmarshal(b, &n) == nil && json.Valid(b):
			want, ok := isCanonical(n.String())
			if ok != (err == nil) || (ok && int64(id) != want) {
				t.Fatalf("UnmarshalJSON(%q) = %v, %v; the number is %s", b, id, err, n)
			}
		default:
			if err == nil {
				t.Fatalf("UnmarshalJSON(%q) = %v, accepted invalid JSON", b, id)
			}
		}
		if err == nil {
			out, _ := id.MarshalJSON()
			var back ID
			if err := back.UnmarshalJSON(out); err != nil || back != id {
				t.Fatalf("round trip of %v via %s = %v, %v", id, out, back, err)
			}
		}
	})
}

func FuzzScan(f *testing.F) {
	f.Add(int64(0), "0", uint64(0))
	f.Add(int64(-1), "-1", uint64(math.MaxUint64))
	f.Add(int64(math.MaxInt64), "9223372036854775807", uint64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, i int64, s string, u uint64) {
		var id ID
		if err := id.Scan(i); (err == nil) != (i >= 0) || (err == nil && int64(id) != i) {
			t.Fatalf("Scan(int64 %d) = %v, %v", i, id, err)
		} else if err != nil && !errors.Is(err, ErrRange) {
			t.Fatalf("Scan(int64 %d): %v, want ErrRange", i, err)
		}
		if err := id.Scan(u); (err == nil) != (u <= math.MaxInt64) || (err == nil && uint64(id) != u) {
			t.Fatalf("Scan(uint64 %d) = %v, %v", u, id, err)
		}
		want, ok := isCanonical(s)
		for _, src := range []any{s, []byte(s)} {
			err := id.Scan(src)
			if ok != (err == nil) || (ok && int64(id) != want) {
				t.Fatalf("Scan(%#v) = %v, %v; canonical = %v", src, id, err, ok)
			}
			var n NullID
			// ID 0 is no ID: a NullID holding it is NULL.
			if err2 := n.Scan(src); (err2 == nil) != (err == nil) || (ok && (n.ID != id || n.Valid != (id != 0))) {
				t.Fatalf("NullID.Scan(%#v) = %+v, %v", src, n, err2)
			}
		}
	})
}

func FuzzComposeDecompose(f *testing.F) {
	for _, v := range vectors {
		p := v.layout.DecomposeUint64(v.value)
		f.Add(uint8(0), p.Time.UnixNano(), p.Shard, p.Worker, p.Seq)
	}
	layouts := []Layout{Instagram, Snowflake, Sonyflake, Simpleflake, Simpleflake63}
	f.Fuzz(func(t *testing.T, which uint8, ns int64, shard, worker, seq int) {
		l := layouts[int(which)%len(layouts)]
		p := Parts{Time: time.Unix(0, ns).UTC(), Shard: shard, Worker: worker, Seq: seq}
		id, err := l.Compose(p)
		if err != nil {
			for _, want := range []error{ErrTimeBeforeEpoch, ErrTimeOverflow, ErrShardRange, ErrWorkerRange, ErrSeqRange} {
				if errors.Is(err, want) {
					return
				}
			}
			t.Fatalf("Compose(%+v): untyped error %v", p, err)
		}
		if id < 0 {
			t.Fatalf("%s: Compose(%+v) = %d, negative", l.Name(), p, id)
		}
		got := l.Decompose(id)
		p.Time = p.Time.Truncate(l.Unit()) // Truncate is relative to the zero time, as the epochs are whole units
		if got.Shard != p.Shard || got.Worker != p.Worker || got.Seq != p.Seq || !got.Time.Equal(l.Epoch().Add(p.Time.Sub(l.Epoch())/l.Unit()*l.Unit())) {
			t.Fatalf("%s: Decompose(Compose(%+v)) = %+v", l.Name(), p, got)
		}
		if again, err := l.Compose(got); err != nil || again != id {
			t.Fatalf("%s: Compose(Decompose(%d)) = %d, %v", l.Name(), id, again, err)
		}
	})
}
