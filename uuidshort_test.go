package shardid

import (
	"encoding/json"
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

func TestUUIDShortVectors(t *testing.T) {
	start := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC) // Unix 1714979289
	tests := []struct {
		name  string
		value UUIDShort
		parts UUIDShortParts
	}{
		// (1 & 255) << 56 + 1714979289 << 24 + 5
		{"server 1", 100830172005007365, UUIDShortParts{ServerID: 1, Start: start, Counter: 5}},
		// (200 & 255) << 56 + 1714979289 << 24 + 0: past 2^63
		{"server 200", 14440291385552666624, UUIDShortParts{ServerID: 200, Start: start}},
	}
	for _, tc := range tests {
		if got := tc.value.Decompose(); got != tc.parts {
			t.Errorf("%s: Decompose(%d) = %+v, want %+v", tc.name, tc.value, got, tc.parts)
		}
		g, err := NewUUIDShortGenerator(tc.parts.ServerID, tc.parts.Start, tc.parts.Counter)
		if err != nil || g.Next() != tc.value {
			t.Errorf("%s: the generator primed with %+v does not give %d (%v)", tc.name, tc.parts, tc.value, err)
		}
	}
}

// Past 2^24 values the counter carries into the start seconds, as the
// server's addition does.
func TestUUIDShortCarry(t *testing.T) {
	start := time.Unix(1714979289, 0)
	g, _ := NewUUIDShortGenerator(7, start, 1<<24-1)
	last, next := g.Next(), g.Next()
	if next != last+1 {
		t.Fatalf("%d then %d: not an addition", last, next)
	}
	p := next.Decompose()
	if p.Counter != 0 || !p.Start.Equal(start.Add(time.Second)) || p.ServerID != 7 {
		t.Errorf("after the carry: %+v, want counter 0 and start + 1s", p)
	}
}

func TestUUIDShortGeneratorConcurrent(t *testing.T) {
	g, _ := NewUUIDShortGenerator(3, time.Unix(1714979289, 0), 0)
	var mu sync.Mutex
	seen := map[UUIDShort]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]UUIDShort, 10000)
			for i := range local {
				local[i] = g.Next()
			}
			mu.Lock()
			defer mu.Unlock()
			for _, v := range local {
				if seen[v] {
					t.Errorf("duplicate %d", v)
				}
				seen[v] = true
			}
		}()
	}
	wg.Wait()
	if len(seen) != 80000 {
		t.Errorf("%d values, want 80000", len(seen))
	}
}

func TestUUIDShortEncodings(t *testing.T) {
	big := UUIDShort(math.MaxUint64)
	if s := big.String(); s != "18446744073709551615" {
		t.Errorf("String = %s", s)
	}
	for _, v := range []UUIDShort{0, 1, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64} {
		b, _ := json.Marshal(v)
		var back UUIDShort
		if err := json.Unmarshal(b, &back); err != nil || back != v {
			t.Errorf("JSON %s = %d, %v; want %d", b, back, err, v)
		}
		dv, _ := v.Value()
		var scanned UUIDShort
		if err := scanned.Scan(dv); err != nil || scanned != v {
			t.Errorf("Scan(Value(%d) = %#v) = %d, %v", v, dv, scanned, err)
		}
	}
	if v, _ := UUIDShort(math.MaxUint64).Value(); v != "18446744073709551615" {
		t.Errorf("Value past 2^63 = %#v, want the decimal string", v)
	}
	for _, bad := range []string{"", "-1", "18446744073709551616", "01", "1e3", " 1"} {
		if _, err := ParseUUIDShort(bad); !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) {
			t.Errorf("ParseUUIDShort(%q) = %v", bad, err)
		}
	}
	var u UUIDShort
	for _, src := range []any{int64(-1), 1.5} {
		if err := u.Scan(src); err == nil {
			t.Errorf("Scan(%#v) accepted", src)
		}
	}
	if err := u.UnmarshalJSON([]byte("-5")); !errors.Is(err, ErrRange) {
		t.Errorf("UnmarshalJSON(-5) = %v, want ErrRange", err)
	}
	if _, err := NewUUIDShortGenerator(256, time.Now(), 0); !errors.Is(err, ErrWorkerRange) {
		t.Errorf("server_id 256: %v", err)
	}
}

func FuzzParseUUIDShort(f *testing.F) {
	for _, s := range []string{"0", "18446744073709551615", "18446744073709551616", "-1", "01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseUUIDShort(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if v.String() != s {
			t.Fatalf("ParseUUIDShort(%q).String() = %q", s, v.String())
		}
		var scanned UUIDShort
		if err := scanned.Scan([]byte(s)); err != nil || scanned != v {
			t.Fatalf("Scan(%q) = %d, %v", s, scanned, err)
		}
	})
}

func TestPinterest(t *testing.T) {
	// 7<<46 | 2<<36 | 123456 = 492718648320576 (computed outside Go)
	p, err := ComposePinterest(7, 2, 123456)
	if err != nil || p != 492718648320576 {
		t.Fatalf("ComposePinterest = %d, %v", p, err)
	}
	if p.Shard() != 7 || p.Type() != 2 || p.Local() != 123456 || p.Validate() != nil {
		t.Errorf("%d decodes to %d %d %d", p, p.Shard(), p.Type(), p.Local())
	}
	max, _ := ComposePinterest(1<<16-1, 1<<10-1, 1<<36-1)
	if max != 1<<62-1 || max.Shard() != 65535 {
		t.Errorf("the largest PinterestID is %d", max)
	}
	for _, tc := range []struct {
		shard, typ int
		local      int64
		err        error
	}{{1 << 16, 0, 0, ErrShardRange}, {0, 1 << 10, 0, ErrRange}, {0, 0, 1 << 36, ErrSeqRange}, {-1, 0, 0, ErrShardRange}} {
		if _, err := ComposePinterest(tc.shard, tc.typ, tc.local); !errors.Is(err, tc.err) {
			t.Errorf("ComposePinterest(%d, %d, %d) = %v, want %v", tc.shard, tc.typ, tc.local, err, tc.err)
		}
	}
	if _, err := ParsePinterest("4611686018427387904"); !errors.Is(err, ErrRange) { // 1 << 62
		t.Errorf("a reserved bit set: %v, want ErrRange", err)
	}
	var back PinterestID
	b, _ := json.Marshal(p)
	if err := json.Unmarshal(b, &back); err != nil || back != p {
		t.Errorf("JSON %s: %d, %v", b, back, err)
	}
}

func FuzzUUIDShortAndPinterestJSON(f *testing.F) {
	for _, s := range []string{`"18446744073709551615"`, `18446744073709551615`, `null`, `-1`, `1.5`, `"4611686018427387904"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var u UUIDShort
		if err := u.UnmarshalJSON(b); err == nil {
			out, _ := u.MarshalJSON()
			var back UUIDShort
			if err := back.UnmarshalJSON(out); err != nil || back != u {
				t.Fatalf("UUIDShort round trip of %q via %s: %d, %v", b, out, back, err)
			}
		} else if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) {
			t.Fatalf("UUIDShort: untyped error %v", err)
		}
		var p PinterestID
		if err := p.UnmarshalJSON(b); err == nil {
			if p.Validate() != nil {
				t.Fatalf("accepted %d with reserved bits set", p)
			}
		} else if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) {
			t.Fatalf("PinterestID: untyped error %v", err)
		}
	})
}
