package shardid_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/shardid/shardid"
)

func newLegacy(t testing.TB) *shardid.LegacyIDs {
	t.Helper()
	l, err := shardid.NewLegacyIDs(shardid.Instagram, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLegacyIDs(t *testing.T) {
	l := newLegacy(t)
	for id := int64(1); id <= 200_000; id++ {
		if id%7 == 0 {
			continue // a gap: a deleted row
		}
		if err := l.Add("photos", shardid.ID(id), int(id%2000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Add("comments", 5, 77); err != nil {
		t.Fatal(err)
	}
	if err := l.Add("users", 5, 5); err != nil {
		t.Fatal(err)
	}
	if s, ok, err := l.Shard("photos", 123_456); s != 123_456%2000 || !ok || err != nil {
		t.Fatalf("Shard(photos, 123456) = %d %v %v", s, ok, err)
	}
	if _, ok, err := l.Shard("photos", 14); !ok || !errors.Is(err, shardid.ErrNoLegacyRow) {
		t.Fatalf("a gap: %v %v, want ErrNoLegacyRow", ok, err)
	}
	if _, _, err := l.Shard("orders", 14); !errors.Is(err, shardid.ErrInvalidID) {
		t.Fatalf("a table with no legacy IDs: %v, want ErrInvalidID", err)
	}
	if _, ok, err := l.Shard("photos", l.Max()+1); ok || !errors.Is(err, shardid.ErrInvalidID) {
		t.Fatalf("an ID above the legacy range and below Floor: %v %v", ok, err)
	}
	if _, ok, err := l.Shard("photos", l.Floor()); ok || err != nil {
		t.Fatalf("Floor is the layout's: %v %v", ok, err)
	}
	if _, _, err := l.ShardOfAny(5); !errors.Is(err, shardid.ErrAmbiguousLegacyID) {
		t.Fatalf("ID 5 of three tables on three shards: %v, want ErrAmbiguousLegacyID", err)
	}
	if s, _, err := l.ShardOfAny(6); s != 6 || err != nil {
		t.Fatalf("ShardOfAny(6) = %d %v", s, err)
	}
	for _, bad := range []struct {
		id    shardid.ID
		shard int
		want  error
	}{
		{0, 1, shardid.ErrRange}, {-3, 1, shardid.ErrRange}, {l.Floor(), 1, shardid.ErrRange},
		{9, -1, shardid.ErrShardRange}, {9, 8192, shardid.ErrShardRange}, {8, 9, shardid.ErrAmbiguousLegacyID},
	} {
		if err := l.Add("photos", bad.id, bad.shard); !errors.Is(err, bad.want) {
			t.Errorf("Add(%d, %d) = %v, want %v", bad.id, bad.shard, err, bad.want)
		}
	}

	b, err := l.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d legacy IDs encode in %d bytes", l.Rows("photos")+2, len(b))
	var back shardid.LegacyIDs
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	b2, _ := back.MarshalBinary()
	if !bytes.Equal(b, b2) || back.Rows("photos") != l.Rows("photos") || back.Max() != l.Max() || back.Floor() != l.Floor() {
		t.Fatal("a decoded LegacyIDs differs from the encoded one")
	}
	for _, cut := range []int{0, 5, len(b) / 2, len(b) - 1} {
		if err := new(shardid.LegacyIDs).UnmarshalBinary(b[:cut]); !errors.Is(err, shardid.ErrSyntax) {
			t.Errorf("UnmarshalBinary of %d of %d bytes: %v, want ErrSyntax", cut, len(b), err)
		}
	}
}

func FuzzLegacyIDsUnmarshal(f *testing.F) {
	l := newLegacy(f)
	for _, id := range []int64{1, 2, 3, 70_000, 1 << 40} {
		_ = l.Add("t", shardid.ID(id), int(id%13))
	}
	b, _ := l.MarshalBinary()
	f.Add(b)
	f.Add([]byte("shardid-legacy-1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var x shardid.LegacyIDs
		if err := x.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, shardid.ErrSyntax) {
				t.Fatalf("error %v is not ErrSyntax", err)
			}
			return
		}
		again, err := x.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var y shardid.LegacyIDs
		if err := y.UnmarshalBinary(again); err != nil {
			t.Fatalf("re-encoding does not decode: %v", err)
		}
	})
}

// BenchmarkLegacyShard measures what finding a legacy ID's shard costs,
// beside decoding the shard of an ID of the layout.
func BenchmarkLegacyShard(b *testing.B) {
	l := newLegacy(b)
	for id := int64(1); id <= 1_000_000; id++ {
		_ = l.Add("photos", shardid.ID(id), int(id%2000))
	}
	b.Run("legacy", func(b *testing.B) {
		b.ReportAllocs()
		var sum int
		for i := 0; b.Loop(); i++ {
			s, _, _ := l.Shard("photos", shardid.ID(1+i%1_000_000))
			sum += s
		}
		_ = sum
	})
	b.Run("layout", func(b *testing.B) {
		b.ReportAllocs()
		id := l.Floor() + 12345
		var sum int
		for b.Loop() {
			sum += shardid.Instagram.Decompose(id).Shard
		}
		_ = sum
	})
}
