package routesql

import (
	"errors"
	"fmt"
	"testing"
)

func pq(s string) string { return `"` + s + `"` }

func TestRewrite(t *testing.T) {
	for _, c := range []struct {
		text, schema, alias string
		check               bool
		want                string
		refused             bool
	}{
		{"SELECT * FROM {{schema}}.photos", "shard_0005", "", true, `SELECT * FROM "shard_0005".photos`, false},
		{"SELECT * FROM {{schema}}.photos", "", "", true, "SELECT * FROM photos", false},
		{"SELECT '{{schema}}'", "", "", true, "SELECT '{{schema}}'", true},
		{"SELECT * FROM photos", "shard_0005", "", true, "SELECT * FROM photos", true},
		{"SELECT * FROM photos", "shard_0005", "", false, "SELECT * FROM photos", false},
		{"SELECT * FROM photos", "", "", true, "SELECT * FROM photos", false},
		{"SELECT * FROM shard_0005.photos", "shard_0005", "", true, "SELECT * FROM shard_0005.photos", false},
		{"SELECT * FROM app.photos JOIN app.users u ON true", "shard_0005", "app", true, `SELECT * FROM "shard_0005".photos JOIN "shard_0005".users u ON true`, false},
		{`SELECT * FROM "app".photos, myapp.x, 'app.y'`, "shard_0005", "app", true, `SELECT * FROM "shard_0005".photos, myapp.x, 'app.y'`, false},
		{"SELECT * FROM app.photos WHERE app.photos.id = 1", "", "app", true, "SELECT * FROM photos WHERE photos.id = 1", false},
		{"SELECT * FROM `app`.photos", "", "app", true, "SELECT * FROM photos", false},
		{"SELECT * FROM myapp.photos", "shard_0005", "app", true, "SELECT * FROM myapp.photos", true},
	} {
		got, why := Rewrite(c.text, c.schema, c.alias, pq, c.check)
		if got != c.want || (why != "") != c.refused {
			t.Errorf("Rewrite(%q, %q, %q) = %q, %q; want %q, refused %v", c.text, c.schema, c.alias, got, why, c.want, c.refused)
		}
	}
}

type stateErr string

func (e stateErr) Error() string    { return "state " + string(e) }
func (e stateErr) SQLState() string { return string(e) }

func TestErrors(t *testing.T) {
	if !IsFence(fmt.Errorf("ERROR: %s (SQLSTATE 55000)", FenceMessage)) || IsFence(errors.New("other")) || IsFence(nil) {
		t.Error("IsFence")
	}
	// A move's change log gone under a write that opened its table as the
	// capture was taken down: a refusal of the moving shard too. Another
	// missing table is not.
	for msg, want := range map[string]bool{
		"Error 1146 (42S02): Table 'app_0010.shardid_changes' doesn't exist":                                          true,
		"shardid: shard 1 on database my1: Error 1146 (42S02): Table 'shardid_mv_0001.shardid_changes' doesn't exist": true,
		"Error 1146 (42S02): Table 'app_0010.photos' doesn't exist":                                                   false,
		"Error 1146 (42S02): Table 'app_0010.shardid_changes_old' doesn't exist":                                      false,
		`ERROR: relation "shardid_changes" does not exist (SQLSTATE 42P01)`:                                           false,
	} {
		if got := IsFence(errors.New(msg)); got != want {
			t.Errorf("IsFence(%q) = %v, want %v", msg, got, want)
		}
	}
	if !IsPooledStatement(fmt.Errorf("x: %w", stateErr("42P05"))) || !IsPooledStatement(stateErr("26000")) || IsPooledStatement(stateErr("23505")) {
		t.Error("IsPooledStatement")
	}
}

// TestClassify: the fence's error, a lost prepared statement and a split's
// refusal of a row whose ID names another shard match their sentinel, once,
// and still unwrap to the driver's error.
func TestClassify(t *testing.T) {
	moving, pooled, wrong := errors.New("moving"), errors.New("pooled"), errors.New("wrong")
	fence := fmt.Errorf("ERROR: %s (SQLSTATE 55000)", FenceMessage)
	if got := Classify(fence, moving, pooled, wrong); !errors.Is(got, moving) || !errors.Is(got, fence) || got.Error() != "moving: "+fence.Error() {
		t.Errorf("fence: %v", got)
	}
	if got := Classify(fmt.Errorf("%w: %w", moving, fence), moving, pooled, wrong); got.Error() != "moving: "+fence.Error() {
		t.Errorf("fence classified twice: %v", got)
	}
	if got := Classify(stateErr("26000"), moving, pooled, wrong); !errors.Is(got, pooled) || !errors.Is(got, stateErr("26000")) {
		t.Errorf("lost statement: %v", got)
	}
	for _, key := range []error{
		fmt.Errorf("ERROR: %s: photos 7 in shard 3 (SQLSTATE 23514)", KeyMismatchMessage),
		fmt.Errorf("Error 1644 (45000): %s", KeyMismatchMessage),
	} {
		if got := Classify(key, moving, pooled, wrong); !errors.Is(got, wrong) || !errors.Is(got, key) || errors.Is(got, moving) {
			t.Errorf("key mismatch %q: %v", key, got)
		}
	}
	if other := stateErr("23505"); Classify(other, moving, pooled, wrong) != error(other) || Classify(nil, moving, pooled, wrong) != nil {
		t.Error("other errors are left alone")
	}
}
