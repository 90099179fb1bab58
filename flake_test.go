package shardid

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestFlakeVector(t *testing.T) {
	// 2024-05-06T07:08:09.123Z = 1714979289123 ms = 0x0000018F4CBB3823;
	// worker 0x0123456789AB, seq 0x0102.
	f, err := ComposeFlake(1714979289123, 0x0123456789AB, 0x0102)
	if err != nil {
		t.Fatal(err)
	}
	want := Flake{0x00, 0x00, 0x01, 0x8F, 0x4C, 0xBB, 0x38, 0x23, 0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0x01, 0x02}
	if f != want {
		t.Fatalf("ComposeFlake = %x, want %x", f, want)
	}
	if s := f.String(); s != "0000018f-4cbb-3823-0123-456789ab0102" {
		t.Errorf("String = %s", s)
	}
	if !f.Time().Equal(time.Date(2024, 5, 6, 7, 8, 9, 123e6, time.UTC)) || f.Worker() != 0x0123456789AB || f.Seq() != 0x0102 {
		t.Errorf("decodes to %v %x %x", f.Time(), f.Worker(), f.Seq())
	}
	for _, s := range []string{f.String(), "0000018f4cbb38230123456789ab0102", "0000018F-4CBB-3823-0123-456789AB0102"} {
		if g, err := ParseFlake(s); err != nil || g != f {
			t.Errorf("ParseFlake(%q) = %v, %v", s, g, err)
		}
	}
	for _, bad := range []string{"", "0000018f-4c8c-3a23-0123-456789ab010", "0000018f_4c8c-3a23-0123-456789ab0102", "zz00018f-4c8c-3a23-0123-456789ab0102"} {
		if _, err := ParseFlake(bad); !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseFlake(%q) = %v, want ErrSyntax", bad, err)
		}
	}
	if _, err := ComposeFlake(0, 1<<48, 0); !errors.Is(err, ErrWorkerRange) {
		t.Errorf("a 49-bit worker: %v", err)
	}
	b, _ := json.Marshal(f)
	var back Flake
	if err := json.Unmarshal(b, &back); err != nil || back != f || string(b) != `"`+f.String()+`"` {
		t.Errorf("JSON %s: %v, %v", b, back, err)
	}
	for _, src := range []any{f[:], f.String(), []byte(f.String()), [16]byte(f)} {
		var s Flake
		if err := s.Scan(src); err != nil || s != f {
			t.Errorf("Scan(%T) = %v, %v", src, s, err)
		}
	}
}

// Flakes sort by time byte-wise, and never repeat under many goroutines
// and a clock that steps back.
func TestFlakeGenerator(t *testing.T) {
	fg, err := NewFlakeGenerator(0xABCDEF)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var all []Flake
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]Flake, 0, 20000)
			for range 20000 {
				f, err := fg.Next()
				if err != nil {
					t.Error(err)
					return
				}
				if n := len(local); n > 0 && bytes.Compare(f[:], local[n-1][:]) <= 0 {
					t.Errorf("not increasing: %v after %v", f, local[n-1])
					return
				}
				local = append(local, f)
			}
			mu.Lock()
			all = append(all, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.SortFunc(all, func(a, b Flake) int { return bytes.Compare(a[:], b[:]) })
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("duplicate %v", all[i])
		}
	}
	if all[0].Worker() != 0xABCDEF || time.Since(all[0].Time()) > time.Minute {
		t.Errorf("first flake %v: worker %x time %v", all[0], all[0].Worker(), all[0].Time())
	}

	c := newFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	fc, _ := NewFlakeGenerator(1, WithClock(c.Now))
	fc.g.pause = c.Add
	a, _ := fc.Next()
	c.Add(-500 * time.Millisecond)
	b, err := fc.Next()
	if err != nil || bytes.Compare(b[:], a[:]) <= 0 {
		t.Errorf("after a 500ms step back: %v, %v; not after %v", b, err, a)
	}
	c.Add(-time.Hour)
	if _, err := fc.Next(); !errors.Is(err, ErrClockBackwards) {
		t.Errorf("after a 1h step back: %v, want ErrClockBackwards", err)
	}
}

func TestMACWorker(t *testing.T) {
	w, err := MACWorker()
	if err != nil {
		t.Skipf("no hardware address here: %v", err)
	}
	if w >= 1<<48 {
		t.Errorf("MACWorker = %x, wider than 48 bits", w)
	}
}

func FuzzFlakeText(f *testing.F) {
	f.Add("0000018f-4cbb-3823-0123-456789ab0102")
	f.Add("0000018f4cbb38230123456789ab0102")
	f.Fuzz(func(t *testing.T, s string) {
		fl, err := ParseFlake(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		again, err := ParseFlake(fl.String())
		if err != nil || again != fl {
			t.Fatalf("round trip of %q via %s: %v, %v", s, fl, again, err)
		}
	})
}

func FuzzFlakeScanJSON(f *testing.F) {
	f.Add([]byte(`"0000018f-4cbb-3823-0123-456789ab0102"`))
	f.Add([]byte("0123456789abcdef"))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fl Flake
		if err := fl.UnmarshalJSON(b); err == nil {
			out, _ := fl.MarshalJSON()
			var back Flake
			if err := back.UnmarshalJSON(out); err != nil || back != fl {
				t.Fatalf("JSON round trip of %q: %v, %v", b, back, err)
			}
		} else if !errors.Is(err, ErrSyntax) {
			t.Fatalf("UnmarshalJSON: untyped error %v", err)
		}
		var sc Flake
		if err := sc.Scan(b); err == nil {
			if len(b) == 16 && !bytes.Equal(sc[:], b) {
				t.Fatalf("Scan of 16 raw bytes gave %x", sc)
			}
		} else if !errors.Is(err, ErrSyntax) {
			t.Fatalf("Scan: untyped error %v", err)
		}
	})
}
