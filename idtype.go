package shardid

import (
	"encoding/json"
	"math"
	"strconv"
	"time"
)

// ID is a 64-bit, time-ordered ID that names the logical shard of its row.
//
// With the default Instagram layout its bits are 41 of milliseconds since
// 2011-01-01T00:00:00Z, 13 of logical shard and 10 of sequence. A valid ID is
// never negative. The zero ID means "not assigned yet": it is the only value
// the GORM plugin overwrites.
//
// An ID is stored as a BIGINT, and travels in JSON and text as a decimal
// string, because JavaScript numbers lose digits above 2^53.
type ID int64

// maxIDLen is the length of the longest decimal ID, math.MaxInt64.
const maxIDLen = 19

// Parse parses the canonical decimal form of an ID, as String returns it.
// Signs, spaces, leading zeros, exponents and values above math.MaxInt64 are
// rejected with ErrSyntax or ErrRange.
func Parse(s string) (ID, error) {
	v, err := parseDigits(s)
	if err != nil {
		return 0, parseError(s, err)
	}
	return ID(v), nil
}

// MustParse is like Parse but panics if s cannot be parsed. It is meant for
// package-level variables and tests.
func MustParse(s string) ID {
	id, err := Parse(s)
	if err != nil {
		panic("shardid.MustParse(" + strconv.Quote(s) + "): " + err.Error())
	}
	return id
}

// parseDigits parses a canonical non-negative decimal int64 from s, which may
// be a string or a []byte, without allocating. A well-formed negative
// number ("-5") is ErrRange, as a negative int64 from the database is:
// only its sign is wrong. "-0" is ErrSyntax, as "+5" and "05" are.
func parseDigits[T string | []byte](s T) (int64, error) {
	if len(s) > 1 && s[0] == '-' {
		return 0, negativeError(parseNonNegative(s[1:]))
	}
	return parseNonNegative(s)
}

// negativeError is the error for "-" followed by digits that parsed as v,
// err: ErrRange for a well-formed number above zero, else ErrSyntax.
func negativeError[V int64 | uint64](v V, err error) error {
	if (err == nil && v != 0) || err == ErrRange {
		return ErrRange
	}
	return ErrSyntax
}

// parseNonNegative is parseDigits without the sign.
func parseNonNegative[T string | []byte](s T) (int64, error) {
	n := len(s)
	if n == 0 {
		return 0, ErrSyntax
	}
	if s[0] == '0' && n > 1 {
		return 0, ErrSyntax
	}
	var v uint64
	for i := 0; i < n; i++ {
		c := s[i] - '0'
		if c > 9 {
			return 0, ErrSyntax
		}
		if i >= maxIDLen {
			// A 20th digit: every remaining byte must still be a digit to
			// call it a range error rather than a syntax error.
			for _, b := range []byte(s[i:]) {
				if b-'0' > 9 {
					return 0, ErrSyntax
				}
			}
			return 0, ErrRange
		}
		v = v*10 + uint64(c)
	}
	if v > math.MaxInt64 {
		return 0, ErrRange
	}
	return int64(v), nil
}

func parseError[T string | []byte](s T, err error) error {
	const maxShown = 40
	q := string(s)
	if len(q) > maxShown {
		q = q[:maxShown] + "..."
	}
	return withDetail(err, "parsing "+strconv.Quote(q))
}

// String returns the decimal form of id.
func (id ID) String() string { return strconv.FormatInt(int64(id), 10) }

// Int64 returns id as an int64.
func (id ID) Int64() int64 { return int64(id) }

// IsZero reports whether id is zero, that is, not assigned yet.
func (id ID) IsZero() bool { return id == 0 }

// Time returns the start of the millisecond id was made in, decoded with the
// default Instagram layout. Decode an ID of another layout with that layout:
// layout.Decompose(id).Time (Instagram.WithWorkerBits(n) keeps the time
// field where it is, so there both agree).
func (id ID) Time() time.Time { return defaultLayout.Decompose(id).Time }

// Shard returns the logical shard of id, decoded with the default Instagram
// layout: (id >> 10) & 0x1FFF. For an ID of another layout use
// layout.Decompose(id).Shard (Instagram.WithWorkerBits(n) keeps the shard
// where it is, so there both agree).
func (id ID) Shard() int { return int(id>>defaultLayout.shardShift) & (1<<defaultLayout.shardBits - 1) }

// Seq returns the sequence number of id, decoded with the default Instagram
// layout: id & 0x3FF. With worker bits the low 10 bits hold the worker too:
// for an ID of Instagram.WithWorkerBits(3) made by worker 5, Seq is 640 more
// than the sequence. Decode such IDs with their layout:
// layout.Decompose(id).Seq and .Worker.
func (id ID) Seq() int { return int(id) & (1<<defaultLayout.seqBits - 1) }

// AppendText implements the [encoding.TextAppender] interface: it appends
// the decimal form of id to b. It allocates only when b has no room.
func (id ID) AppendText(b []byte) ([]byte, error) {
	return strconv.AppendInt(b, int64(id), 10), nil
}

// MarshalText implements the [encoding.TextMarshaler] interface.
func (id ID) MarshalText() ([]byte, error) {
	return id.AppendText(make([]byte, 0, maxIDLen))
}

// UnmarshalText implements the [encoding.TextUnmarshaler] interface. It
// accepts what Parse accepts.
func (id *ID) UnmarshalText(b []byte) error {
	v, err := parseDigits(b)
	if err != nil {
		return parseError(b, err)
	}
	*id = ID(v)
	return nil
}

// MarshalJSON implements the [encoding/json.Marshaler] interface. It writes
// id as a quoted decimal string, "2217813737473025833", so that JavaScript
// keeps every digit.
func (id ID) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, maxIDLen+2) // the one allocation: the result
	b = append(b, '"')
	b = strconv.AppendInt(b, int64(id), 10)
	return append(b, '"'), nil
}

// UnmarshalJSON implements the [encoding/json.Unmarshaler] interface. It
// accepts a quoted decimal string, a bare JSON integer (exactly, with no
// float rounding: 2.2e18 and 1.5 are errors) and null, which sets id to 0.
func (id *ID) UnmarshalJSON(b []byte) error {
	v, null, err := unmarshalJSONInt(b)
	if err != nil {
		return err
	}
	if null {
		*id = 0
		return nil
	}
	*id = ID(v)
	return nil
}

// trimJSONSpace removes the white space JSON allows around a value.
// encoding/json has already removed it; other callers may not have.
func trimJSONSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// unmarshalJSONInt decodes an ID from a JSON string, number or null.
func unmarshalJSONInt(b []byte) (v int64, null bool, err error) {
	b = trimJSONSpace(b)
	if string(b) == "null" {
		return 0, true, nil
	}
	digits := b
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		digits = b[1 : len(b)-1]
		for _, c := range digits {
			if c == '\\' {
				// An escaped string is rare but valid JSON: decode it the
				// slow way, then parse the result.
				var s string
				if err := json.Unmarshal(b, &s); err != nil {
					return 0, false, parseError(b, ErrSyntax)
				}
				v, err := parseDigits(s)
				if err != nil {
					return 0, false, parseError(s, err)
				}
				return v, false, nil
			}
		}
	}
	v, err = parseDigits(digits)
	if err != nil {
		return 0, false, parseError(b, err)
	}
	return v, false, nil
}
