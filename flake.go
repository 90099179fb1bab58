package shardid

import (
	"context"
	"database/sql/driver"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"
)

// Flake is a 128-bit ID in the layout of Boundary's flake: 64 bits of
// milliseconds since 1970, a 48-bit worker id (by default a MAC address of
// the host) and a 16-bit sequence, big-endian, so that IDs sort by time
// byte-wise (and as PostgreSQL uuid values). Flakes need no coordination at
// all, at twice the size of an ID.
//
// Its text form is the standard UUID form, 8-4-4-4-12 hex digits. It is
// stored as uuid on PostgreSQL and BINARY(16) on MySQL.
type Flake [16]byte

// flakeLayout is the packed time and sequence a FlakeGenerator issues: the
// 64-bit generator's rules (no wrap, monotonic clock, bounded clock-back)
// apply to it unchanged. 43 bits of milliseconds last until 2248.
var flakeLayout = mustLayout(LayoutConfig{
	Name: "flake", Epoch: time.Unix(0, 0).UTC(), TimeBits: 43, SeqBits: 16,
})

// ComposeFlake returns the Flake of the given parts. worker must fit 48 bits.
func ComposeFlake(ms uint64, worker uint64, seq uint16) (Flake, error) {
	if worker >= 1<<48 {
		return Flake{}, withDetail(ErrWorkerRange, fmt.Sprintf("worker %#x is wider than 48 bits", worker))
	}
	var f Flake
	binary.BigEndian.PutUint64(f[0:8], ms)
	binary.BigEndian.PutUint64(f[8:16], worker<<16|uint64(seq))
	return f, nil
}

// Millis returns the milliseconds since 1970 of f.
func (f Flake) Millis() uint64 { return binary.BigEndian.Uint64(f[0:8]) }

// Time returns the time of f, to the millisecond.
func (f Flake) Time() time.Time { return time.UnixMilli(int64(f.Millis())).UTC() }

// Worker returns the 48-bit worker id of f.
func (f Flake) Worker() uint64 { return binary.BigEndian.Uint64(f[8:16]) >> 16 }

// Seq returns the sequence of f.
func (f Flake) Seq() uint16 { return binary.BigEndian.Uint16(f[14:16]) }

// IsZero reports whether f is all zeros, that is, not assigned yet.
func (f Flake) IsZero() bool { return f == Flake{} }

// String returns f in the standard UUID text form.
func (f Flake) String() string {
	b, _ := f.AppendText(make([]byte, 0, 36))
	return string(b)
}

// AppendText implements the [encoding.TextAppender] interface, in the UUID
// text form.
func (f Flake) AppendText(b []byte) ([]byte, error) {
	var buf [36]byte
	hex.Encode(buf[0:8], f[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], f[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], f[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], f[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:36], f[10:16])
	return append(b, buf[:]...), nil
}

// ParseFlake parses the UUID text form (36 characters), or 32 hex digits.
func ParseFlake(s string) (Flake, error) {
	var f Flake
	return f, f.UnmarshalText([]byte(s))
}

// MarshalText implements the [encoding.TextMarshaler] interface.
func (f Flake) MarshalText() ([]byte, error) { return f.AppendText(make([]byte, 0, 36)) }

// UnmarshalText implements the [encoding.TextUnmarshaler] interface.
func (f *Flake) UnmarshalText(b []byte) error {
	var hexits [32]byte
	switch len(b) {
	case 36:
		if b[8] != '-' || b[13] != '-' || b[18] != '-' || b[23] != '-' {
			return parseError(b, ErrSyntax)
		}
		copy(hexits[0:8], b[0:8])
		copy(hexits[8:12], b[9:13])
		copy(hexits[12:16], b[14:18])
		copy(hexits[16:20], b[19:23])
		copy(hexits[20:32], b[24:36])
	case 32:
		copy(hexits[:], b)
	default:
		return parseError(b, ErrSyntax)
	}
	var out Flake
	if _, err := hex.Decode(out[:], hexits[:]); err != nil {
		return parseError(b, ErrSyntax)
	}
	*f = out
	return nil
}

// MarshalJSON implements the [encoding/json.Marshaler] interface: the UUID
// text form, quoted.
func (f Flake) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 38)
	b = append(b, '"')
	b, _ = f.AppendText(b)
	return append(b, '"'), nil
}

// UnmarshalJSON implements the [encoding/json.Unmarshaler] interface: a
// quoted UUID text form, or null, which sets f to zero.
func (f *Flake) UnmarshalJSON(b []byte) error {
	b = trimJSONSpace(b)
	if string(b) == "null" {
		*f = Flake{}
		return nil
	}
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return parseError(b, ErrSyntax)
	}
	return f.UnmarshalText(b[1 : len(b)-1])
}

// Scan implements the [database/sql.Scanner] interface: 16 raw bytes
// (BINARY(16)), or the text form as a string or []byte (PostgreSQL uuid).
// nil sets f to zero.
func (f *Flake) Scan(src any) error {
	switch src := src.(type) {
	case []byte:
		if len(src) == 16 {
			copy(f[:], src)
			return nil
		}
		return f.UnmarshalText(src)
	case string:
		return f.UnmarshalText([]byte(src))
	case [16]byte:
		*f = src
		return nil
	case nil:
		*f = Flake{}
		return nil
	}
	return withDetail(ErrUnsupportedType, fmt.Sprintf("cannot scan %T into a Flake", src))
}

// Value implements the [database/sql/driver.Valuer] interface: the 16 raw
// bytes, for BINARY(16) and BLOB columns. Through GORM, PostgreSQL gets the
// text form instead (see GormValue).
func (f Flake) Value() (driver.Value, error) { return f[:], nil }

// GormValue implements the [gorm.Valuer] interface: the UUID text form on
// PostgreSQL, the raw bytes elsewhere.
func (f Flake) GormValue(_ context.Context, db *gorm.DB) clause.Expr {
	if db.Dialector.Name() == "postgres" {
		return clause.Expr{SQL: "?", Vars: []any{f.String()}}
	}
	return clause.Expr{SQL: "?", Vars: []any{f[:]}}
}

// GormDataType returns "shardid_flake".
func (Flake) GormDataType() string { return "shardid_flake" }

// GormDBDataType returns uuid on PostgreSQL, binary(16) on MySQL and blob
// elsewhere.
func (Flake) GormDBDataType(db *gorm.DB, _ *schema.Field) string {
	switch db.Dialector.Name() {
	case "postgres":
		return "uuid"
	case "mysql":
		return "binary(16)"
	}
	return "blob"
}

// FlakeGenerator makes Flakes for one worker id. It never repeats a Flake
// and never goes backwards, under the same rules as Generator (it is one):
// a used-up sequence waits for the next millisecond, the clock is
// monotonic, and a clock behind the last millisecond used is tolerated up to
// a bound. FlakeGenerator is safe for concurrent use.
type FlakeGenerator struct {
	g      *Generator
	worker uint64
}

// NewFlakeGenerator returns a generator of Flakes for worker, a 48-bit id
// (see MACWorker). opts are those of NewGenerator, such as WithClock.
func NewFlakeGenerator(worker uint64, opts ...GeneratorOption) (*FlakeGenerator, error) {
	if worker >= 1<<48 {
		return nil, withDetail(ErrWorkerRange, fmt.Sprintf("worker %#x is wider than 48 bits", worker))
	}
	g, err := NewGenerator(flakeLayout, opts...)
	if err != nil {
		return nil, err
	}
	return &FlakeGenerator{g: g, worker: worker}, nil
}

// Next returns a new Flake.
func (fg *FlakeGenerator) Next() (Flake, error) {
	id, err := fg.g.Next(0)
	if err != nil {
		return Flake{}, err
	}
	var f Flake
	binary.BigEndian.PutUint64(f[0:8], uint64(id)>>16)
	binary.BigEndian.PutUint64(f[8:16], fg.worker<<16|uint64(id)&0xFFFF)
	return f, nil
}

// MACWorker returns a 48-bit worker id from the hardware address of the
// first network interface that has one, as Boundary's flake does. Addresses
// can repeat in containers and some clouds: prefer a configured or leased id
// there.
func MACWorker() (uint64, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, err
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 && len(i.HardwareAddr) == 6 {
			var b [8]byte
			copy(b[2:], i.HardwareAddr)
			return binary.BigEndian.Uint64(b[:]), nil
		}
	}
	return 0, withDetail(ErrNoWorker, "no network interface with a 48-bit hardware address")
}
