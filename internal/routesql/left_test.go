package routesql

import (
	"errors"
	"strings"
	"testing"
)

func TestChangesRows(t *testing.T) {
	for q, want := range map[string]bool{
		"UPDATE photos SET caption = 'x'":              true,
		"  delete from photos":                         true,
		"-- a note\nUPDATE photos SET a = 1":           true,
		"/* why */ DELETE FROM photos":                 true,
		"# MySQL's comment\ndelete from photos":        true,
		"WITH x AS (SELECT 1) UPDATE photos SET a = 1": true,
		"(UPDATE photos SET a = 1)":                    true,
		"INSERT INTO photos VALUES (1)":                false,
		"SELECT 1":                                     false,
		"UPDATED":                                      false,
		"":                                             false,
		"-- only a comment":                            false,
		"/* unterminated UPDATE":                       false,
	} {
		if got := ChangesRows(q); got != want {
			t.Errorf("ChangesRows(%q) = %v, want %v", q, got, want)
		}
		if got := ReturnsChanges(q); got != (want && !strings.HasPrefix(q, "WITH")) {
			t.Errorf("ReturnsChanges(%q) = %v", q, got)
		}
	}
}

// The check of every query a router runs for its rows costs no
// allocation.
func TestReturnsChangesAllocs(t *testing.T) {
	for _, q := range []string{"SELECT * FROM photos WHERE id = $1", "select 1", "/* c */ update photos set a = 1"} {
		if n := testing.AllocsPerRun(100, func() { ReturnsChanges(q); ChangesRows(q) }); n != 0 {
			t.Errorf("%q: %v allocations", q, n)
		}
	}
}

// FuzzChangesRows: any text, no panic; a statement that starts with
// UPDATE or DELETE after blanks is one.
func FuzzChangesRows(f *testing.F) {
	for _, s := range []string{"UPDATE t", "/**/DELETE", "--\n", "#", "/*", "((("} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		got := ChangesRows(q)
		if strings.HasPrefix(q, "UPDATE ") && !got {
			t.Errorf("ChangesRows(%q) = false", q)
		}
	})
}

// answers is a OneValue that answers each query by the first key it
// contains, and records the queries.
type answers struct {
	by   map[string]func() (int64, bool, error)
	ran  []string
	args []any
}

func (a *answers) one(q string, args ...any) (int64, bool, error) {
	a.ran = append(a.ran, q)
	a.args = append(a.args, args...)
	for k, f := range a.by {
		if strings.Contains(q, k) {
			return f()
		}
	}
	return 0, false, errors.New("unexpected query " + q)
}

func val(v int64) func() (int64, bool, error) {
	return func() (int64, bool, error) { return v, true, nil }
}

func fail(msg string) func() (int64, bool, error) {
	return func() (int64, bool, error) { return 0, false, errors.New(msg) }
}

func TestLeft(t *testing.T) {
	noRow := func() (int64, bool, error) { return 0, false, nil }
	for _, c := range []struct {
		name            string
		dialect, schema string
		shared          bool
		by              map[string]func() (int64, bool, error)
		want            bool
		wantErr         error
		queries         int
	}{
		{"postgres, never split", "postgres", "", true, map[string]func() (int64, bool, error){"to_regprocedure": val(0)}, false, nil, 1},
		{"postgres, sealed", "postgres", "", true, map[string]func() (int64, bool, error){"to_regprocedure": val(1), "shardid_split_sealed($1)": val(1)}, true, nil, 2},
		{"postgres, not sealed", "postgres", "", true, map[string]func() (int64, bool, error){"to_regprocedure": val(1), "shardid_split_sealed($1)": val(0)}, false, nil, 2},
		{"postgres, not callable", "postgres", "", true, map[string]func() (int64, bool, error){"to_regprocedure": val(2)}, false, ErrCannotCheck, 1},
		{"postgres, a shard's schema: its fence is a statement trigger", "postgres", "s_0003", false, nil, false, nil, 0},
		{"mysql, sealed", "mysql", "", true, map[string]func() (int64, bool, error){SplitStateTable: val(1)}, true, nil, 1},
		{"mysql, not sealed", "mysql", "", true, map[string]func() (int64, bool, error){SplitStateTable: val(0)}, false, nil, 1},
		{"mysql, no state row", "mysql", "", true, map[string]func() (int64, bool, error){SplitStateTable: noRow}, false, nil, 1},
		{"mysql, never split", "mysql", "", true, map[string]func() (int64, bool, error){SplitStateTable: fail("Error 1146 (42S02): Table 'mono.shardid_split_state' doesn't exist")}, false, nil, 1},
		{"mysql, not readable", "mysql", "", true, map[string]func() (int64, bool, error){SplitStateTable: fail("Error 1142 (42000): SELECT command denied to user 'app'@'%' for table `mono`.`shardid_split_state`")}, false, ErrCannotCheck, 1},
		{"mysql, a moved shard's old copy", "mysql", "s_0003", false, map[string]func() (int64, bool, error){"`s_0003`." + FenceStateTable: val(1)}, true, nil, 1},
		{"mysql, a shard never moved", "mysql", "s_0003", false, map[string]func() (int64, bool, error){FenceStateTable: fail("Error 1146 (42S02): Table 's_0003.shardid_fence_state' doesn't exist")}, false, nil, 1},
		{"sqlite", "sqlite", "", true, nil, false, nil, 0},
	} {
		a := &answers{by: c.by}
		got, err := Left(c.dialect, c.schema, c.shared, 3, a.one)
		if got != c.want || !errors.Is(err, c.wantErr) || c.wantErr == nil && err != nil || len(a.ran) != c.queries {
			t.Errorf("%s: Left = %v, %v after %q; want %v, %v after %d queries", c.name, got, err, a.ran, c.want, c.wantErr, c.queries)
		}
		for _, q := range a.ran {
			if strings.Contains(q, SplitStateTable) || strings.Contains(q, FenceStateTable) {
				if !strings.HasSuffix(q, "LOCK IN SHARE MODE") {
					t.Errorf("%s: %q is not a locking read", c.name, q)
				}
			}
		}
		for _, arg := range a.args {
			if arg != 3 {
				t.Errorf("%s: argument %v, want the shard, 3", c.name, arg)
			}
		}
	}
	// Another error of the check is returned as it is.
	a := &answers{by: map[string]func() (int64, bool, error){"to_regprocedure": fail("connection reset")}}
	if _, err := Left("postgres", "", true, 3, a.one); err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Errorf("a failed check: %v", err)
	}
	if err := Gone(errors.New("moving"), 3, true); !strings.Contains(err.Error(), "shard 3") || !strings.Contains(err.Error(), "split") {
		t.Errorf("Gone: %v", err)
	}
}

func TestCheckFailed(t *testing.T) {
	moving, unchecked := errors.New("moving"), errors.New("unchecked")
	if err := CheckFailed(stateErr("40001"), moving, unchecked); !errors.Is(err, moving) || errors.Is(err, unchecked) || !errors.Is(err, stateErr("40001")) {
		t.Errorf("a serialization failure: %v, want moving with the driver's error", err)
	}
	if err := CheckFailed(stateErr("42501"), moving, unchecked); !errors.Is(err, unchecked) || errors.Is(err, moving) || !errors.Is(err, stateErr("42501")) {
		t.Errorf("another failure: %v, want unchecked with the driver's error", err)
	}
}
