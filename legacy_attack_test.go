package shardid_test

import (
	"encoding/binary"
	"errors"
	"runtime"
	"testing"

	"github.com/shardid/shardid"
)

// TestLegacyUnmarshalCraftedCounts: an encoding whose header claims a huge
// number of tables or chunks fails with ErrSyntax at once, allocating
// nothing in proportion to the claim.
func TestLegacyUnmarshalCraftedCounts(t *testing.T) {
	head := func(tables uint64) []byte {
		b := []byte("shardid-legacy-1\n")
		b = binary.AppendUvarint(b, 1<<40) // floor
		b = binary.AppendUvarint(b, 5)     // max
		return binary.AppendUvarint(b, tables)
	}
	pad := make([]byte, 1<<20)
	chunks := head(1)
	chunks = binary.AppendUvarint(chunks, 6)
	chunks = append(chunks, "photos"...)
	chunks = binary.AppendUvarint(chunks, 1<<40)
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"a table count as large as the input", append(head(1<<20), pad...)},
		{"2^40 tables", head(1 << 40)},
		{"2^40 chunks", chunks},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := new(shardid.LegacyIDs).UnmarshalBinary(c.data)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, shardid.ErrSyntax) {
			t.Errorf("%s: %v, want ErrSyntax", c.name, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Errorf("%s: %d bytes allocated to refuse it", c.name, n)
		}
	}
}
