package shardid

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"math"
	"testing"
	"time"
)

var scanTests = []struct {
	name string
	src  any
	want ID
	err  error
}{
	{"int64", int64(182432091342174089), 182432091342174089, nil},
	{"int64 max", int64(math.MaxInt64), math.MaxInt64, nil},
	{"int", int(42), 42, nil},
	{"int32", int32(42), 42, nil},
	{"int16", int16(42), 42, nil},
	{"int8", int8(42), 42, nil},
	{"uint", uint(42), 42, nil},
	{"uint8", uint8(42), 42, nil},
	{"uint16", uint16(42), 42, nil},
	{"uint32", uint32(math.MaxUint32), math.MaxUint32, nil},
	{"uint64 (MySQL text protocol)", uint64(math.MaxInt64), math.MaxInt64, nil},
	{"bytes", []byte("182432091342174089"), 182432091342174089, nil},
	{"string", "182432091342174089", 182432091342174089, nil},
	{"nil", nil, 0, nil},
	{"negative int64", int64(-1), 0, ErrRange},
	{"negative int8", int8(-1), 0, ErrRange},
	{"uint64 past int64", uint64(math.MaxInt64 + 1), 0, ErrRange},
	{"uint past int64", uint(math.MaxUint64), 0, ErrRange},
	{"bytes too big", []byte("9223372036854775808"), 0, ErrRange},
	{"bytes negative", []byte("-5"), 0, ErrRange},
	{"string with space", " 5", 0, ErrSyntax},
	{"empty string", "", 0, ErrSyntax},
	{"float64", float64(1), 0, ErrUnsupportedType},
	{"bool", true, 0, ErrUnsupportedType},
	{"time", time.Now(), 0, ErrUnsupportedType},
}

func TestScan(t *testing.T) {
	for _, tc := range scanTests {
		t.Run(tc.name, func(t *testing.T) {
			id := ID(99)
			err := id.Scan(tc.src)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Errorf("Scan(%#v) = %v, want %v", tc.src, err, tc.err)
				}
				return
			}
			if err != nil || id != tc.want {
				t.Errorf("Scan(%#v) = %v, %v; want %v", tc.src, id, err, tc.want)
			}

			var n NullID
			err = n.Scan(tc.src)
			if err != nil || n.ID != tc.want || n.Valid != (tc.src != nil) {
				t.Errorf("NullID.Scan(%#v) = %+v, %v", tc.src, n, err)
			}
		})
	}
}

func TestValue(t *testing.T) {
	var _ driver.Valuer = ID(0)
	var _ sql.Scanner = (*ID)(nil)
	v, err := ID(182432091342174089).Value()
	if v != int64(182432091342174089) || err != nil {
		t.Errorf("Value() = %#v, %v", v, err)
	}
	// The default converter, as database/sql and go-sqlmock use it, accepts it.
	if v, err := driver.DefaultParameterConverter.ConvertValue(ID(5)); v != int64(5) || err != nil {
		t.Errorf("ConvertValue(ID(5)) = %#v, %v", v, err)
	}
	if ID(0).GormDataType() == "int" || ID(0).GormDBDataType(nil, nil) != "bigint" {
		t.Error("ID must not look like an int to GORM, and must be a bigint column")
	}
}

func TestScanAllocations(t *testing.T) {
	var id ID
	src := any(int64(182432091342174089))
	if n := testing.AllocsPerRun(100, func() { _ = id.Scan(src) }); n != 0 {
		t.Errorf("Scan(int64): %v allocations, want 0", n)
	}
	b := any([]byte("182432091342174089"))
	if n := testing.AllocsPerRun(100, func() { _ = id.Scan(b) }); n != 0 {
		t.Errorf("Scan([]byte): %v allocations, want 0", n)
	}
}
