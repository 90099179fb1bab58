package shardid

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

var parseTests = []struct {
	in   string
	want ID
	err  error
}{
	{"0", 0, nil},
	{"1", 1, nil},
	{"182432091342174089", 182432091342174089, nil},
	{"9223372036854775807", 1<<63 - 1, nil},
	{"9223372036854775808", 0, ErrRange},
	{"18446744073709551615", 0, ErrRange},
	{"99999999999999999999999", 0, ErrRange},
	{"", 0, ErrSyntax},
	{"-1", 0, ErrRange}, // well-formed, but negative
	{"+1", 0, ErrSyntax},
	{" 1", 0, ErrSyntax},
	{"1 ", 0, ErrSyntax},
	{"01", 0, ErrSyntax},
	{"00", 0, ErrSyntax},
	{"1e3", 0, ErrSyntax},
	{"1.0", 0, ErrSyntax},
	{"0x10", 0, ErrSyntax},
	{"1_000", 0, ErrSyntax},
	{"１", 0, ErrSyntax}, // a full-width digit
	{"99999999999999999999x", 0, ErrSyntax},
}

func TestParse(t *testing.T) {
	for _, tc := range parseTests {
		got, err := Parse(tc.in)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("Parse(%q) = %v, %v; want %v, %v", tc.in, got, err, tc.want, tc.err)
		}
		var u ID
		if err := u.UnmarshalText([]byte(tc.in)); u != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v, %v", tc.in, u, err, tc.want, tc.err)
		}
	}
}

func TestParseErrorNamesInput(t *testing.T) {
	_, err := Parse("12a")
	if err == nil || !strings.Contains(err.Error(), `"12a"`) || !strings.HasPrefix(err.Error(), "shardid: ") {
		t.Errorf("Parse(\"12a\") error = %q; want the shardid prefix and the input", err)
	}
	_, err = Parse(strings.Repeat("9", 10000))
	if len(err.Error()) > 200 {
		t.Errorf("error for a long input is %d bytes long", len(err.Error()))
	}
}

func TestMustParse(t *testing.T) {
	if got := MustParse("42"); got != 42 {
		t.Errorf("MustParse(\"42\") = %v", got)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), `"x"`) {
			t.Errorf("MustParse(\"x\") panicked with %v", r)
		}
	}()
	MustParse("x")
}

func TestStringRoundTrip(t *testing.T) {
	for _, v := range vectors {
		if v.value > 1<<63-1 {
			continue
		}
		id := ID(v.value)
		if got, err := Parse(id.String()); got != id || err != nil {
			t.Errorf("Parse(%v.String()) = %v, %v", id, got, err)
		}
		if id.Int64() != int64(v.value) || id.IsZero() {
			t.Errorf("ID(%d): Int64 = %d, IsZero = %v", v.value, id.Int64(), id.IsZero())
		}
	}
	if !ID(0).IsZero() {
		t.Error("ID(0).IsZero() = false")
	}
}

func TestAppendText(t *testing.T) {
	buf := make([]byte, 0, 64)
	b, err := ID(182432091342174089).AppendText(append(buf, "id="...))
	if string(b) != "id=182432091342174089" || err != nil {
		t.Errorf("AppendText = %q, %v", b, err)
	}
	allocs := testing.AllocsPerRun(100, func() { buf, _ = ID(182432091342174089).AppendText(buf[:0]) })
	if allocs != 0 {
		t.Errorf("AppendText into a buffer with room: %v allocations, want 0", allocs)
	}
	if b, _ := ID(7).MarshalText(); string(b) != "7" {
		t.Errorf("MarshalText = %q", b)
	}
}

func TestMarshalJSON(t *testing.T) {
	b, err := json.Marshal(ID(2217813737473025833))
	if string(b) != `"2217813737473025833"` || err != nil {
		t.Errorf("json.Marshal = %s, %v", b, err)
	}
	allocs := testing.AllocsPerRun(100, func() { _, _ = ID(2217813737473025833).MarshalJSON() })
	if allocs != 1 {
		t.Errorf("MarshalJSON: %v allocations, want 1 (the result)", allocs)
	}
}

func TestUnmarshalJSON(t *testing.T) {
	tests := []struct {
		in   string
		want ID
		err  error
	}{
		{`"2217813737473025833"`, 2217813737473025833, nil},
		{`2217813737473025833`, 2217813737473025833, nil},
		{`9223372036854775807`, 1<<63 - 1, nil},
		{`"\u0031\u0032"`, 12, nil}, // an escaped string is still "12"
		{`null`, 0, nil},
		{`0`, 0, nil},
		{`"0"`, 0, nil},
		{`9223372036854775808`, 0, ErrRange},
		{`-1`, 0, ErrRange},
		{`"-1"`, 0, ErrRange},
		{`2.2e18`, 0, ErrSyntax},
		{`1.5`, 0, ErrSyntax},
		{`1E3`, 0, ErrSyntax},
		{`""`, 0, ErrSyntax},
		{`" 1"`, 0, ErrSyntax},
		{`"1`, 0, ErrSyntax},
		{`true`, 0, ErrSyntax},
		{`{}`, 0, ErrSyntax},
		{`"\u00311x"`, 0, ErrSyntax},
		{`"\x"`, 0, ErrSyntax},
	}
	for _, tc := range tests {
		id := ID(99) // null must reset it
		err := id.UnmarshalJSON([]byte(tc.in))
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("UnmarshalJSON(%s) = %v, %v; want %v", tc.in, id, err, tc.err)
			}
			continue
		}
		if err != nil || id != tc.want {
			t.Errorf("UnmarshalJSON(%s) = %v, %v; want %v", tc.in, id, err, tc.want)
		}
	}
}

func TestJSONInStructs(t *testing.T) {
	type photo struct {
		ID     ID  `json:"id"`
		Parent ID  `json:"parent,omitempty"`
		Owner  *ID `json:"owner"`
	}
	in := photo{ID: 182432091342174089}
	b, err := json.Marshal(in)
	if want := `{"id":"182432091342174089","owner":null}`; string(b) != want || err != nil {
		t.Errorf("json.Marshal = %s, %v; want %s", b, err, want)
	}
	var out photo
	if err := json.Unmarshal([]byte(`{"id":182432091342174089,"parent":"5","owner":"6"}`), &out); err != nil {
		t.Fatal(err)
	}
	if out.ID != 182432091342174089 || out.Parent != 5 || out.Owner == nil || *out.Owner != 6 {
		t.Errorf("json.Unmarshal = %+v", out)
	}
	// A decoding error names the field and keeps errors.Is working.
	err = json.Unmarshal([]byte(`{"id":1.5}`), &out)
	if !errors.Is(err, ErrSyntax) {
		t.Errorf("json.Unmarshal of 1.5 = %v, want ErrSyntax", err)
	}

	// As a map key, through TextMarshaler.
	m := map[ID]string{182432091342174089: "a", 3: "b"}
	b, err = json.Marshal(m)
	if want := `{"182432091342174089":"a","3":"b"}`; string(b) != want || err != nil {
		t.Errorf("json.Marshal(map) = %s, %v; want %s", b, err, want)
	}
	var back map[ID]string
	if err := json.Unmarshal(b, &back); err != nil || back[182432091342174089] != "a" || back[3] != "b" {
		t.Errorf("json.Unmarshal(map) = %v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"-3":"x"}`), &back); !errors.Is(err, ErrRange) {
		t.Errorf("a negative map key: %v, want ErrRange", err)
	}
}
