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
		"/* /* nested */ */ UPDATE photos SET a = 1":   true,
		"MERGE INTO photos USING x ON true WHEN MATCHED THEN DELETE": true,
	} {
		mysql := strings.HasPrefix(q, "#")
		if got := ChangesRows(q, mysql); got != want {
			t.Errorf("ChangesRows(%q) = %v, want %v", q, got, want)
		}
		if got := ReturnsChanges(q, mysql); got != want {
			t.Errorf("ReturnsChanges(%q) = %v, want %v", q, got, want)
		}
	}
}

// A WITH read as rows is checked when a statement of it changes rows, and
// only then: the words in strings, quoted names and comments, and a
// locking clause's UPDATE, are a read's.
func TestReturnsChangesWith(t *testing.T) {
	for _, c := range []struct {
		q           string
		mysql, want bool
	}{
		{"WITH u AS (UPDATE photos SET a = 1 WHERE id = $1 RETURNING id) SELECT id FROM u", false, true},
		{"with d as (delete from photos where id = $1 returning id) select count(*) from d", false, true},
		{"WITH x AS (SELECT id FROM photos) DELETE FROM photos USING x WHERE photos.id = x.id RETURNING photos.id", false, true},
		{"WITH i AS (INSERT INTO photos VALUES (1) ON CONFLICT (id) DO UPDATE SET a = 2 RETURNING id) SELECT id FROM i", false, true},
		{"WITH x AS (SELECT id FROM photos WHERE id = $1 FOR UPDATE) SELECT id FROM x", false, false},
		{"WITH x AS (SELECT id FROM photos FOR NO KEY UPDATE SKIP LOCKED) SELECT id FROM x", false, false},
		{"WITH x AS (SELECT id FROM photos WHERE note = 'update; delete') SELECT id FROM x", false, false},
		{`WITH x AS (SELECT "update", "delete" FROM photos) SELECT * FROM x`, false, false},
		{"WITH x AS (SELECT $$ DELETE $$ AS s, $t$UPDATE$t$) SELECT * FROM x", false, false},
		{"WITH x AS (SELECT 1) -- delete\n/* update */ SELECT * FROM x", false, false},
		{"WITH x AS (SELECT last_update, deleted FROM photos) SELECT * FROM x", false, false},
		{"WITH x AS (SELECT E'it\\' DELETE' AS s) SELECT s FROM x", false, false},
		{"WITH x AS (SELECT 'it''s' AS s) DELETE FROM photos", false, true},
		{"WITH x AS (SELECT 'no end) DELETE FROM photos", false, true},
		// MySQL: backslash escapes, "..." strings, # comments.
		{"WITH x AS (SELECT 'it\\' DELETE' AS s) SELECT s FROM x", true, false},
		{`WITH x AS (SELECT "update" AS s) SELECT s FROM x`, true, false},
		{"WITH x AS (SELECT 1) # delete\nSELECT * FROM x", true, false},
		{"WITH x AS (SELECT id FROM photos) UPDATE photos JOIN x USING (id) SET a = 1", true, true},
		{"SELECT * FROM photos FOR UPDATE", false, false},
		// The review's: PostgreSQL nests comments, ends -- at \r; KEY
		// alone is a column's name, not NO KEY's.
		{"WITH u AS (/* /* old */ isn't used */ UPDATE photos SET t = $2 WHERE id = $1 RETURNING id) SELECT id FROM u", false, true},
		{"WITH u AS (SELECT 1) -- note\rDELETE FROM photos", false, true},
		{"WITH s AS (SELECT id FROM jobs ORDER BY key) UPDATE jobs SET a = 1 FROM s WHERE jobs.id = s.id RETURNING jobs.id", false, true},
		{"WITH m AS (MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE RETURNING t.id) SELECT * FROM m", false, true},
		// Left open at the end: what it swallowed may have been a write.
		{"WITH x AS (SELECT 'open", false, true},
		{"WITH x AS (SELECT 1) /* open", false, true},
		{"WITH x AS (SELECT $q$ open", false, true},
		{`WITH x AS (SELECT "open`, false, true},
		{"WITH x AS (SELECT 'closed')", false, false},
		{"WITH x AS (SELECT $q$ closed $q$)", false, false},
		{"WITH x AS (SELECT 1) /* closed */", false, false},
		// MySQL does not nest: the comment ends at the first */.
		{"WITH x AS (SELECT 1) /* /* */ DELETE FROM photos", true, true},
	} {
		if got := ReturnsChanges(c.q, c.mysql); got != c.want {
			t.Errorf("ReturnsChanges(%q, mysql %v) = %v, want %v", c.q, c.mysql, got, c.want)
		}
	}
}

// The check of every query a router runs for its rows costs no
// allocation.
func TestReturnsChangesAllocs(t *testing.T) {
	for _, q := range []string{"SELECT * FROM photos WHERE id = $1", "select 1", "/* c */ update photos set a = 1",
		"WITH u AS (SELECT id FROM photos WHERE note = 'x' FOR UPDATE) SELECT id FROM u"} {
		if n := testing.AllocsPerRun(100, func() { ReturnsChanges(q, false); ReturnsChanges(q, true); ChangesRows(q, false) }); n != 0 {
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
		got := ChangesRows(q, false)
		if strings.HasPrefix(q, "UPDATE ") && !got {
			t.Errorf("ChangesRows(%q) = false", q)
		}
		// Whatever follows it, a WITH's DELETE is a write in either
		// dialect; and any text is lexed to its end.
		for _, mysql := range []bool{false, true} {
			if w := "WITH x AS (SELECT 1) DELETE FROM t " + q; !ReturnsChanges(w, mysql) {
				t.Errorf("ReturnsChanges(%q, mysql %v) = false", w, mysql)
			}
			ReturnsChanges("WITH "+q, mysql)
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

// The verdict of a batch's write, from the probe sent before the batch
// and the check's answer in it: for a write known to have changed no row,
// and for a WITH whose result does not tell (only a seal fails it).
func TestBatchVerdict(t *testing.T) {
	moving, unchecked := errors.New("moving"), errors.New("unchecked")
	for _, c := range []struct {
		probe, v int64
		zero     bool
		want     error
		says     string
	}{
		{splitFunctionCallable, 1, true, moving, "no longer holds shard 7"},
		{splitFunctionCallable, 1, false, moving, "no longer holds shard 7"},
		{splitFunctionCallable, 0, true, nil, ""},
		{splitFunctionCallable, 0, false, nil, ""},
		{splitNoFunction, splitNoFunction, true, nil, ""},
		{splitNoFunction, splitFunctionCallable, true, unchecked, "began while the batch was sent"},
		{splitNoFunction, splitFunctionCallable, false, nil, ""},
		{splitNoFunction, splitFunctionDenied, true, unchecked, "GRANT EXECUTE"},
		{splitFunctionDenied, splitFunctionDenied, true, unchecked, "GRANT EXECUTE"},
		{splitFunctionDenied, splitFunctionDenied, false, nil, ""},
		{splitFunctionDenied, splitFunctionCallable, true, unchecked, "began while the batch was sent"},
	} {
		err := BatchVerdict(c.probe, c.v, 7, c.zero, moving, unchecked)
		if c.want == nil && err != nil || c.want != nil && (!errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says)) {
			t.Errorf("BatchVerdict(probe %d, %d, zero %v) = %v; want %v saying %q", c.probe, c.v, c.zero, err, c.want, c.says)
		}
	}
	if q, args := BatchCheck(splitFunctionCallable, 7); q != "SELECT CASE WHEN "+SplitSealedFunction+"($1::integer) THEN 1 ELSE 0 END" || len(args) != 1 || args[0] != 7 {
		t.Errorf("BatchCheck(callable, 7) = %q, %v", q, args)
	}
	if q, args := BatchCheck(splitNoFunction, 7); q != SplitFunctionProbe || args != nil {
		t.Errorf("BatchCheck(no function, 7) = %q, %v", q, args)
	}
}
