package shardid

import (
	"encoding/json"
	"errors"
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
		{`0`, NullID{ID: 0, Valid: true}},
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
