package shardid

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func TestNullIDValue(t *testing.T) {
	if v, err := (NullID{}).Value(); v != nil || err != nil {
		t.Errorf("NULL Value() = %#v, %v; want nil", v, err)
	}
	if v, err := NullIDOf(7).Value(); v != int64(7) || err != nil {
		t.Errorf("NullIDOf(7).Value() = %#v, %v", v, err)
	}
	if NullIDOf(0).Valid {
		t.Error("NullIDOf(0) is valid; an unassigned ID should be NULL")
	}
	if s := (NullID{}).String(); s != "NULL" {
		t.Errorf("String() = %q", s)
	}
}

func TestNullIDJSON(t *testing.T) {
	type comment struct {
		ID       ID     `json:"id"`
		ParentID NullID `json:"parent_id"`
		ReplyTo  NullID `json:"reply_to,omitzero"`
	}
	b, err := json.Marshal(comment{ID: 1, ParentID: NullIDOf(182432091342174089)})
	if want := `{"id":"1","parent_id":"182432091342174089"}`; string(b) != want || err != nil {
		t.Errorf("json.Marshal = %s, %v; want %s", b, err, want)
	}
	b, _ = json.Marshal(comment{ID: 1})
	if want := `{"id":"1","parent_id":null}`; string(b) != want {
		t.Errorf("json.Marshal = %s; want %s", b, want)
	}

	for _, tc := range []struct {
		in   string
		want NullID
	}{
		{`null`, NullID{}},
		{`"42"`, NullID{ID: 42, Valid: true}},
		{`42`, NullID{ID: 42, Valid: true}},
		{`0`, NullID{}}, // ID 0 is no ID: NULL, as NullIDOf(0) is
		{`"0"`, NullID{}},
	} {
		n := NullIDOf(99)
		if err := json.Unmarshal([]byte(tc.in), &n); err != nil || n != tc.want {
			t.Errorf("Unmarshal(%s) = %+v, %v; want %+v", tc.in, n, err, tc.want)
		}
	}
	var n NullID
	if err := json.Unmarshal([]byte(`-1`), &n); !errors.Is(err, ErrRange) {
		t.Errorf("Unmarshal(-1) = %v, want ErrRange", err)
	}
}

// ID 0 means "no ID" throughout shardid (the plugin fills a zero ID; a map
// spells an unassigned ID "0"), so a NullID holding 0 is NULL, however it
// was made: decoded, scanned, or written by hand.
func TestNullIDZeroIsNull(t *testing.T) {
	for _, src := range []any{int64(0), []byte("0"), "0", uint64(0), int32(0)} {
		n := NullIDOf(99)
		if err := n.Scan(src); err != nil || n != (NullID{}) {
			t.Errorf("Scan(%#v) = %+v, %v; want NULL", src, n, err)
		}
	}
	var n NullID
	if err := n.UnmarshalJSON([]byte("0")); err != nil || n.Valid {
		t.Errorf("UnmarshalJSON(0) = %+v, %v; want NULL", n, err)
	}
	hand := NullID{ID: 0, Valid: true}
	if v, err := hand.Value(); v != nil || err != nil {
		t.Errorf("%#v.Value() = %#v, %v; want nil (NULL), not a reference to row 0", hand, v, err)
	}
	if b, err := hand.MarshalJSON(); string(b) != "null" || err != nil {
		t.Errorf("%#v.MarshalJSON() = %s, %v; want null", hand, b, err)
	}
	if s := hand.String(); s != "NULL" {
		t.Errorf("%#v.String() = %q, want NULL", hand, s)
	}
	if !hand.IsZero() {
		t.Errorf("%#v.IsZero() = false: omitzero would write it", hand)
	}
	// As a sharding key it is no key, as NULL is, not an invalid one.
	p, err := NewPlugin(PluginConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []NullID{{}, hand} {
		_, ok, err := p.shardOfValue(&model{keyKind: keyNullID}, reflect.ValueOf(v))
		if ok || err != nil {
			t.Errorf("the key %#v: ok %v, %v; want no key, as NULL", v, ok, err)
		}
	}
	if s, ok, err := p.shardOfValue(&model{keyKind: keyNullID}, reflect.ValueOf(NullIDOf(182432091342174089))); s != 1341 || !ok || err != nil {
		t.Errorf("the key 182432091342174089: %d, %v, %v; want shard 1341", s, ok, err)
	}
}
