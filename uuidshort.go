package shardid

import (
	"database/sql/driver"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// UUIDShort is a value of MySQL's and MariaDB's UUID_SHORT():
//
//	(server_id & 255) << 56 + (server_startup_time_in_seconds << 24) + counter++
//
// It is unsigned: with server_id >= 128 the value is 2^63 or more and needs
// a BIGINT UNSIGNED column. It travels in JSON and text as a decimal string.
// The zero UUIDShort means "not assigned yet".
type UUIDShort uint64

// maxUUIDShortLen is the length of the longest decimal UUIDShort.
const maxUUIDShortLen = 20

// ParseUUIDShort parses the canonical decimal form of a UUIDShort, over the
// whole unsigned 64-bit range.
func ParseUUIDShort(s string) (UUIDShort, error) {
	v, err := parseUint(s)
	if err != nil {
		return 0, parseError(s, err)
	}
	return UUIDShort(v), nil
}

// parseUint parses a canonical decimal uint64: no sign, no leading zero. A
// well-formed negative number is ErrRange, as for parseDigits.
func parseUint[T string | []byte](s T) (uint64, error) {
	if len(s) > 1 && s[0] == '-' {
		return 0, negativeError(parseNonNegativeUint(s[1:]))
	}
	return parseNonNegativeUint(s)
}

// parseNonNegativeUint is parseUint without the sign.
func parseNonNegativeUint[T string | []byte](s T) (uint64, error) {
	if len(s) == 0 || (s[0] == '0' && len(s) > 1) {
		return 0, ErrSyntax
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := uint64(s[i] - '0')
		if c > 9 {
			return 0, ErrSyntax
		}
		if v > (math.MaxUint64-c)/10 {
			for j := i; j < len(s); j++ {
				if s[j]-'0' > 9 {
					return 0, ErrSyntax
				}
			}
			return 0, ErrRange
		}
		v = v*10 + c
	}
	return v, nil
}

// String returns the decimal form of u.
func (u UUIDShort) String() string { return strconv.FormatUint(uint64(u), 10) }

// AppendText implements the [encoding.TextAppender] interface.
func (u UUIDShort) AppendText(b []byte) ([]byte, error) {
	return strconv.AppendUint(b, uint64(u), 10), nil
}

// MarshalText implements the [encoding.TextMarshaler] interface.
func (u UUIDShort) MarshalText() ([]byte, error) {
	return u.AppendText(make([]byte, 0, maxUUIDShortLen))
}

// UnmarshalText implements the [encoding.TextUnmarshaler] interface.
func (u *UUIDShort) UnmarshalText(b []byte) error {
	v, err := parseUint(b)
	if err != nil {
		return parseError(b, err)
	}
	*u = UUIDShort(v)
	return nil
}

// MarshalJSON implements the [encoding/json.Marshaler] interface: a quoted
// decimal string, since the values pass 2^53 (and often 2^63).
func (u UUIDShort) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, maxUUIDShortLen+2)
	b = append(b, '"')
	b = strconv.AppendUint(b, uint64(u), 10)
	return append(b, '"'), nil
}

// UnmarshalJSON implements the [encoding/json.Unmarshaler] interface. It
// accepts a quoted decimal string, a bare JSON integer (exactly), and null,
// which sets u to 0.
func (u *UUIDShort) UnmarshalJSON(b []byte) error {
	b = trimJSONSpace(b)
	if string(b) == "null" {
		*u = 0
		return nil
	}
	digits := b
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		digits = b[1 : len(b)-1]
	}
	v, err := parseUint(digits)
	if err != nil {
		return parseError(b, err)
	}
	*u = UUIDShort(v)
	return nil
}

// Scan implements the [database/sql.Scanner] interface. The MySQL driver
// hands UUID_SHORT() back as uint64 (text protocol), int64 (binary
// protocol, below 2^63) or []byte; all are accepted, and nil sets u to 0.
func (u *UUIDShort) Scan(src any) error {
	switch src := src.(type) {
	case uint64:
		*u = UUIDShort(src)
	case int64:
		if src < 0 {
			return withDetail(ErrRange, fmt.Sprintf("scanning %d", src))
		}
		*u = UUIDShort(src)
	case []byte:
		return u.UnmarshalText(src)
	case string:
		v, err := parseUint(src)
		if err != nil {
			return parseError(src, err)
		}
		*u = UUIDShort(v)
	case nil:
		*u = 0
	default:
		return withDetail(ErrUnsupportedType, fmt.Sprintf("cannot scan %T into a UUIDShort", src))
	}
	return nil
}

// Value implements the [database/sql/driver.Valuer] interface: an int64
// below 2^63 and, above, the decimal string, because database/sql does not
// pass uint64 values with the high bit set. MySQL converts the string into a
// BIGINT UNSIGNED exactly.
func (u UUIDShort) Value() (driver.Value, error) {
	if u <= math.MaxInt64 {
		return int64(u), nil
	}
	return u.String(), nil
}

// GormDataType returns "shardid_uuidshort": not an int, so GORM never makes
// the column auto-increment.
func (UUIDShort) GormDataType() string { return "shardid_uuidshort" }

// GormDBDataType returns BIGINT UNSIGNED on MySQL, numeric(20) on
// PostgreSQL (which has no unsigned integers) and text on SQLite.
func (UUIDShort) GormDBDataType(db *gorm.DB, _ *schema.Field) string {
	switch db.Dialector.Name() {
	case "mysql":
		return "bigint unsigned"
	case "postgres":
		return "numeric(20)"
	}
	return "text"
}

// UUIDShortParts are the fields of a UUIDShort.
type UUIDShortParts struct {
	ServerID int       // server_id & 255
	Start    time.Time // the server's start, to the second
	Counter  uint64    // how many values the server gave before this one
}

// Decompose returns the parts of u. The formula is an addition: once a
// server has given out 2^24 values, its counter carries into the start
// seconds, and a value with counter c >= 2^24 reads as one with start + 1s
// and counter c - 2^24. The two cannot be told apart from the value alone.
func (u UUIDShort) Decompose() UUIDShortParts {
	return UUIDShortParts{
		ServerID: int(u >> 56),
		Start:    time.Unix(int64(u>>24&(1<<32-1)), 0).UTC(),
		Counter:  uint64(u) & (1<<24 - 1),
	}
}

// UUIDShortGenerator reproduces a server's UUID_SHORT() sequence: given its
// server_id, its start time and how many values it gave already, Next
// returns what the server returns next, carrying the way the server does.
// It is one atomic add. UUIDShortGenerator is safe for concurrent use.
//
// Two generators (or a generator and the server) primed alike give the same
// values: give each a server_id of its own.
type UUIDShortGenerator struct {
	base uint64
	next atomic.Uint64 // counter of the next value
}

// NewUUIDShortGenerator returns a generator of the values of the server
// with serverID (0 to 255, as the server keeps only serverID & 255), started
// at start, that has given counter values so far.
func NewUUIDShortGenerator(serverID int, start time.Time, counter uint64) (*UUIDShortGenerator, error) {
	if serverID < 0 || serverID > 255 {
		return nil, withDetail(ErrWorkerRange, "server_id "+rangeDetail(serverID, 256))
	}
	secs := start.Unix()
	if secs < 0 || secs >= 1<<32 {
		return nil, withDetail(ErrTimeOverflow, "start "+start.UTC().Format(time.RFC3339))
	}
	g := &UUIDShortGenerator{base: uint64(serverID)<<56 + uint64(secs)<<24}
	g.next.Store(counter)
	return g, nil
}

// Next returns the next value.
func (g *UUIDShortGenerator) Next() UUIDShort {
	return UUIDShort(g.base + g.next.Add(1) - 1)
}
