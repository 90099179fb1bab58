package shardid

import (
	"errors"
	"strconv"
	"testing"
)

// A negative number is out of range (ErrRange), and a malformed one is a
// syntax error (ErrSyntax), whichever way it arrives: Parse, text, JSON
// (quoted or not), or Scan (a string, bytes, as MySQL's text protocol
// sends, or an int64). They agree for ID, NullID and UUIDShort.
func TestNegativeAgreesEverywhere(t *testing.T) {
	type decoder struct {
		name string
		fn   func(s string) error
	}
	decoders := []decoder{
		{"Parse", func(s string) error { _, err := Parse(s); return err }},
		{"ID.UnmarshalText", func(s string) error { var id ID; return id.UnmarshalText([]byte(s)) }},
		{"ID.UnmarshalJSON number", func(s string) error { var id ID; return id.UnmarshalJSON([]byte(s)) }},
		{"ID.UnmarshalJSON string", func(s string) error { var id ID; return id.UnmarshalJSON([]byte(strconv.Quote(s))) }},
		{"ID.Scan string", func(s string) error { var id ID; return id.Scan(s) }},
		{"ID.Scan bytes", func(s string) error { var id ID; return id.Scan([]byte(s)) }},
		{"NullID.UnmarshalJSON number", func(s string) error { var n NullID; return n.UnmarshalJSON([]byte(s)) }},
		{"NullID.UnmarshalJSON string", func(s string) error { var n NullID; return n.UnmarshalJSON([]byte(strconv.Quote(s))) }},
		{"NullID.Scan bytes", func(s string) error { var n NullID; return n.Scan([]byte(s)) }},
		{"ParseUUIDShort", func(s string) error { _, err := ParseUUIDShort(s); return err }},
		{"UUIDShort.UnmarshalText", func(s string) error { var u UUIDShort; return u.UnmarshalText([]byte(s)) }},
		{"UUIDShort.UnmarshalJSON number", func(s string) error { var u UUIDShort; return u.UnmarshalJSON([]byte(s)) }},
		{"UUIDShort.UnmarshalJSON string", func(s string) error { var u UUIDShort; return u.UnmarshalJSON([]byte(strconv.Quote(s))) }},
		{"UUIDShort.Scan string", func(s string) error { var u UUIDShort; return u.Scan(s) }},
		{"UUIDShort.Scan bytes", func(s string) error { var u UUIDShort; return u.Scan([]byte(s)) }},
	}
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"-5", ErrRange},
		{"-1", ErrRange},
		{"-9223372036854775808", ErrRange},
		{"-99999999999999999999999", ErrRange},
		{"-0", ErrSyntax}, // zero, written as no canonical form writes it
		{"-05", ErrSyntax},
		{"-", ErrSyntax},
		{"--5", ErrSyntax},
		{"-5x", ErrSyntax},
		{"- 5", ErrSyntax},
		{"+5", ErrSyntax},
	} {
		for _, d := range decoders {
			err := d.fn(tc.in)
			if !errors.Is(err, tc.want) {
				t.Errorf("%s(%q) = %v, want %v", d.name, tc.in, err, tc.want)
			}
		}
	}
	// A negative integer from the database is out of range too.
	var id ID
	if err := id.Scan(int64(-5)); !errors.Is(err, ErrRange) {
		t.Errorf("ID.Scan(int64(-5)) = %v, want ErrRange", err)
	}
}
