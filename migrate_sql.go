package shardid

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/shardid/shardid/shardmap"
)

// These errors can be returned by MigrateSQL, inside the *ShardError that
// names the database and the shard, besides those of Migrate.
var (
	// ErrMigrateStatement is returned by MigrateSQL, before it connects to
	// anything, for a statement it cannot apply shard by shard: not one of
	// CREATE TABLE, CREATE INDEX, ALTER TABLE or COMMENT ON, naming a table
	// qualified by a schema other than SchemaPlaceholder, an unnamed
	// index, or several statements in one string. The error quotes the
	// statement.
	ErrMigrateStatement = errors.New("shardid: MigrateSQL cannot apply this statement in every shard")

	// ErrMigrateDiverged is returned by MigrateSQL for a shard whose tables
	// still differ from what the statements make of an empty schema after
	// they were replayed in it: a column of another type, default or
	// nullability that no statement changes, an index or constraint that
	// the statements declare inside a CREATE TABLE of a table the shard
	// already has. The error names the shard and the difference; on
	// PostgreSQL nothing of the replay is kept.
	ErrMigrateDiverged = errors.New("shardid: a shard's tables differ from the statements'")
)

// MigrateSQL brings every logical shard of m to the schema that the DDL
// statements ddl make of an empty schema: it is Router.MigrateWith for
// plain SQL, with the same engine, lock, speed and guarantees, and needs
// no GORM. dbs are m's databases, in the order of m.Databases(): each a
// PostgreSQL or MySQL/MariaDB pool (for a pgxpool.Pool,
// stdlib.OpenDBFromPool gives one).
//
// The statements name their tables without a schema ("CREATE TABLE
// photos (...)"), or with SchemaPlaceholder where a name must be qualified
// ("DEFAULT {{schema}}.next_id()"); they run with the shard's schema
// (MySQL: database) as the current one, and the placeholder replaced by
// its name. Each string is one statement of these kinds:
//
//   - CREATE TABLE [IF NOT EXISTS] t (...)
//   - CREATE [UNIQUE] INDEX [IF NOT EXISTS] name ON t ... (named)
//   - ALTER TABLE t ...: ADD [COLUMN] c ..., ADD CONSTRAINT k ..., ADD
//     INDEX name (...) on MySQL, or any other single change (ALTER COLUMN
//     ... TYPE, SET DEFAULT, ...)
//   - COMMENT ON TABLE t / COMMENT ON COLUMN t.c (PostgreSQL)
//
// Others are refused with ErrMigrateStatement before anything runs.
//
// The statements describe what a shard must have, from the first release
// on: to change a schema, append statements (ALTER TABLE photos ADD COLUMN
// likes ...), and keep the old ones. On each database, MigrateSQL runs them
// all in a scratch template schema, reads the catalog of the template and
// of every shard in one set of queries, and gives each shard what it lacks,
// batched as Migrate does: every statement for a shard that has none of the
// tables, the statements of a table for a shard that lacks it, ALTER TABLE
// ... ADD COLUMN for a missing column, the statement that creates a missing
// index. A shard with every table, column and index is left alone, so a
// second run does nothing and an interrupted run resumes where it stopped.
//
// A shard whose difference is not an addition (a column whose type, default
// or nullability differs, a missing constraint, on MySQL a missing column)
// is replayed: the statements run in it one by one, but for those whose
// object it has (a CREATE TABLE of an existing table, a CREATE INDEX of an
// existing index, an ADD COLUMN of an existing column, an ADD CONSTRAINT
// of an existing constraint), then its tables are read again; when they
// still differ from the template's, the shard fails with
// ErrMigrateDiverged (on PostgreSQL, the replay runs in one transaction
// and is rolled back then). Other statements run again at each replay:
// write them so that they can (ALTER COLUMN ... TYPE, DROP COLUMN IF
// EXISTS). Tables, columns and indexes a shard has beyond the statements
// are left alone.
//
// A shard that m places in its database's shared tables, and every shard
// when m has no SchemaPattern, is served by the database's own tables: its
// schema is the one unqualified names resolve to (PostgreSQL's
// current_schema(), MySQL's DATABASE()), migrated once like a shard.
//
// Locking, progress, cancellation and errors are as in
// Router.MigrateWith, with which MigrateSQL of the same map takes turns;
// MigrateProgress.AutoMigrated counts the shards replayed. Nothing is left
// on a pooled connection, so it works through PgBouncer in transaction
// mode.
func MigrateSQL(ctx context.Context, dbs []*sql.DB, m *shardmap.Map, opts MigrateOptions, ddl ...string) error {
	if m == nil {
		return withDetail(ErrInvalidConfig, "MigrateSQL needs a shard map")
	}
	names := m.Databases()
	if len(dbs) != len(names) {
		return withDetail(ErrInvalidConfig, fmt.Sprintf("%d databases for a map of %d", len(dbs), len(names)))
	}
	if len(ddl) == 0 {
		return withDetail(ErrInvalidConfig, "MigrateSQL needs statements")
	}
	// Checked before anything connects; parsed again below for each
	// database's dialect.
	if _, err := newSQLSource("", ddl); err != nil {
		return err
	}
	v := m.Load()
	targets := make([]migrateTarget, len(dbs))
	total := 0
	for d, db := range dbs {
		tg := &targets[d]
		tg.name, tg.db, tg.pattern = names[d], db, m.SchemaPattern()
		own := false
		for _, s := range v.ShardsOn(d) {
			if schema := v.Schema(s); schema != "" {
				tg.shards = append(tg.shards, s)
				tg.schemas = append(tg.schemas, schema)
			} else {
				own = true
			}
		}
		if own {
			tg.shards = append(tg.shards, -1)
			tg.schemas = append(tg.schemas, "")
		}
		if len(tg.shards) > 0 && db == nil {
			return withDetail(ErrInvalidConfig, fmt.Sprintf("database %d (%s) is nil", d, names[d]))
		}
		total += len(tg.shards)
	}
	for d := range targets {
		tg := &targets[d]
		if len(tg.shards) == 0 {
			continue
		}
		dialect, err := sqlDialect(ctx, tg.db)
		if err != nil {
			return &ShardError{Shard: -1, Database: tg.name, Err: withContextErr(ctx, err)}
		}
		src, err := newSQLSource(dialect, ddl)
		if err != nil {
			return err
		}
		tg.dialect, tg.src = dialect, src
	}
	var jobs []migrateJob
	for _, tg := range targets {
		if len(tg.shards) > 0 {
			jobs = append(jobs, tg.job(opts))
		}
	}
	return runMigration(ctx, jobs, opts, total)
}

// sqlDialect tells PostgreSQL ("postgres") from MySQL and MariaDB ("mysql")
// by asking db.
func sqlDialect(ctx context.Context, db *sql.DB) (string, error) {
	var v string
	if err := db.QueryRowContext(ctx, "SELECT version()").Scan(&v); err != nil {
		return "", err
	}
	switch {
	case strings.Contains(v, "PostgreSQL"):
		return "postgres", nil
	case strings.Contains(v, "MariaDB"), mysqlVersion.MatchString(v):
		return "mysql", nil
	}
	return "", withDetail(ErrInvalidConfig, fmt.Sprintf("MigrateSQL needs PostgreSQL or MySQL, not %.60q", v))
}

var mysqlVersion = regexp.MustCompile(`^\d+\.\d+\.\d+`)

// sqlSource is a migration to SQL statements.
type sqlSource struct {
	stmts []recordedStmt
}

// newSQLSource parses ddl for dialect.
func newSQLSource(dialect string, ddl []string) (*sqlSource, error) {
	src := &sqlSource{}
	for i, q := range ddl {
		st, err := parseSQLStmt(dialect, q)
		if err != nil {
			return nil, fmt.Errorf("%w: statement %d, %s: %s", ErrMigrateStatement, i+1, abbrev(q), err)
		}
		src.stmts = append(src.stmts, st)
	}
	return src, nil
}

// build runs the statements in the template.
func (s *sqlSource) build(ctx context.Context, _ migrateDialect, q migrateConn, tmpl string) ([]recordedStmt, bool, error) {
	for _, st := range s.stmts {
		if _, err := q.ExecContext(ctx, s.bind(st.sql, tmpl)); err != nil {
			return nil, false, &stmtError{stmt: st.sql, err: err}
		}
	}
	return s.stmts, true, nil
}

func (*sqlSource) bind(stmt, schema string) string {
	return strings.ReplaceAll(stmt, SchemaPlaceholder, schema)
}

// slow replays the statements in schema (see MigrateSQL).
func (s *sqlSource) slow(ctx context.Context, dl migrateDialect, ctrl *sql.Conn, schema string, have, want catSchema, recorded []recordedStmt) error {
	stmts := replayPlan(have, recorded)
	for i, q := range stmts {
		stmts[i] = s.bind(q, schema)
	}
	return dl.replay(ctx, ctrl, schema, stmts, func(have catSchema) error {
		if diff := schemaDiff(have, want); diff != "" {
			return fmt.Errorf("%w: %s", ErrMigrateDiverged, diff)
		}
		return nil
	})
}

// replayPlan returns the recorded statements to run in a shard whose
// tables are have: all, but for those whose object have already holds.
func replayPlan(have catSchema, recorded []recordedStmt) []string {
	var out []string
	for _, st := range recorded {
		if t := have[st.table]; t != nil {
			switch st.kind {
			case kindCreateTable:
				continue
			case kindIndex:
				if t.indexes[st.index] {
					continue
				}
			case kindAddColumn:
				if _, ok := t.cols[st.name]; ok {
					continue
				}
			case kindAddConstraint:
				if t.cons[st.name] {
					continue
				}
			}
		}
		out = append(out, st.sql)
	}
	return out
}

// schemaDiff describes the first way in which have lacks or differs from
// what want holds, or returns "" when it does not.
func schemaDiff(have, want catSchema) string {
	for _, tname := range sortedKeys(want) {
		wt, ht := want[tname], have[tname]
		if ht == nil {
			return "table " + tname + " is missing"
		}
		for _, c := range sortedKeys(wt.cols) {
			hc, ok := ht.cols[c]
			switch {
			case !ok:
				return "column " + tname + "." + c + " is missing"
			case hc != wt.cols[c]:
				return fmt.Sprintf("column %s.%s is %s, the statements make it %s", tname, c, describeColumn(hc), describeColumn(wt.cols[c]))
			}
		}
		for _, k := range sortedKeys(wt.cons) {
			if !ht.cons[k] {
				return "constraint " + k + " of " + tname + " is missing"
			}
		}
		for _, i := range sortedKeys(wt.indexes) {
			if !ht.indexes[i] {
				return "index " + i + " of " + tname + " is missing"
			}
		}
	}
	return ""
}

func describeColumn(c catColumn) string {
	s := strings.ReplaceAll(c.typ, schemaMark, SchemaPlaceholder)
	if c.notNull {
		s += " NOT NULL"
	}
	if c.hasDef {
		s += " DEFAULT " + strings.ReplaceAll(c.def, schemaMark, SchemaPlaceholder)
	}
	if c.extra != "" {
		s += " (" + c.extra + ")"
	}
	return s
}

// stmtError is a statement's error, quoting the statement.
type stmtError struct {
	stmt string
	err  error
}

func (e *stmtError) Error() string { return abbrev(e.stmt) + ": " + e.err.Error() }
func (e *stmtError) Unwrap() error { return e.err }

// abbrev quotes the start of a statement for an error.
func abbrev(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 80 {
		q = q[:77] + "..."
	}
	return fmt.Sprintf("%q", q)
}

// The statements MigrateSQL knows. An identifier is quoted ("x" or `x`) or
// plain; a table may be qualified by SchemaPlaceholder, by nothing else.
const (
	sqlIdent  = "(\"(?:[^\"]|\"\")+\"|`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_$]*)"
	sqlTable  = `(?:\{\{schema\}\}\.)?` + sqlIdent
	sqlKindRE = `(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?`
)

var (
	sqlCreateTable = regexp.MustCompile(`(?is)^CREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?` + sqlTable + `\s*\(`)
	sqlCreateIndex = regexp.MustCompile(`(?is)^CREATE\s+` + sqlKindRE + `INDEX\s+(?:CONCURRENTLY\s+)?(?:IF\s+NOT\s+EXISTS\s+)?` +
		sqlIdent + `\s+ON\s+(?:ONLY\s+)?` + sqlTable + `[\s(]`)
	sqlAlterTable     = regexp.MustCompile(`(?is)^ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?` + sqlTable + `\s+(.*)$`)
	sqlAddConstraint  = regexp.MustCompile(`(?is)^ADD\s+CONSTRAINT\s+` + sqlIdent + `\s`)
	sqlAddIndex       = regexp.MustCompile(`(?is)^ADD\s+` + sqlKindRE + `(?:INDEX|KEY)\s+` + sqlIdent + `\s*\(`)
	sqlAddOther       = regexp.MustCompile(`(?is)^ADD\s+(?:PRIMARY|UNIQUE|FOREIGN|CHECK|INDEX|KEY|FULLTEXT|SPATIAL|EXCLUDE|CONSTRAINT)\b`)
	sqlAddColumn      = regexp.MustCompile(`(?is)^ADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?` + sqlIdent + `\s`)
	sqlCommentColumn  = regexp.MustCompile(`(?is)^COMMENT\s+ON\s+COLUMN\s+` + sqlTable + `\.` + sqlIdent + `\s+IS\s`)
	sqlCommentTable   = regexp.MustCompile(`(?is)^COMMENT\s+ON\s+TABLE\s+` + sqlTable + `\s+IS\s`)
	sqlCreateTableAny = regexp.MustCompile(`(?is)^CREATE\s+(?:\w+\s+)*TABLE\s`)
)

// parseSQLStmt returns what a MigrateSQL statement acts on, or why it
// cannot be used.
func parseSQLStmt(dialect, q string) (recordedStmt, error) {
	q = strings.TrimRight(strings.TrimSpace(q), "; \t\r\n")
	if q == "" {
		return recordedStmt{}, errors.New("empty")
	}
	if i := topLevelSemicolon(q); i >= 0 {
		return recordedStmt{}, errors.New("one statement per string")
	}
	id := func(s string) string { return sqlIdentName(dialect, s) }
	st := recordedStmt{sql: q}
	if m := sqlCreateTable.FindStringSubmatch(q); m != nil {
		st.table, st.kind = id(m[1]), kindCreateTable
		return st, nil
	}
	if m := sqlCreateIndex.FindStringSubmatch(q); m != nil {
		st.index, st.table, st.kind = id(m[1]), id(m[2]), kindIndex
		return st, nil
	}
	if m := sqlAlterTable.FindStringSubmatch(q); m != nil {
		st.table = id(m[1])
		action := m[2]
		if len(splitTopLevel(action)) > 1 {
			return st, nil // several changes: run at each replay
		}
		switch {
		case sqlAddConstraint.MatchString(action):
			st.kind, st.name = kindAddConstraint, id(sqlAddConstraint.FindStringSubmatch(action)[1])
		case sqlAddIndex.MatchString(action):
			st.kind, st.index = kindIndex, id(sqlAddIndex.FindStringSubmatch(action)[1])
		case sqlAddOther.MatchString(action):
		case sqlAddColumn.MatchString(action):
			st.kind, st.name = kindAddColumn, id(sqlAddColumn.FindStringSubmatch(action)[1])
		}
		return st, nil
	}
	if m := sqlCommentColumn.FindStringSubmatch(q); m != nil {
		st.table = id(m[1])
		return st, nil
	}
	if m := sqlCommentTable.FindStringSubmatch(q); m != nil {
		st.table = id(m[1])
		return st, nil
	}
	if sqlCreateTableAny.MatchString(q) || strings.HasPrefix(strings.ToUpper(q), "ALTER TABLE") ||
		strings.HasPrefix(strings.ToUpper(q), "CREATE INDEX") {
		return recordedStmt{}, fmt.Errorf("name the table without a schema, or with %s", SchemaPlaceholder)
	}
	return recordedStmt{}, errors.New("want CREATE TABLE, CREATE INDEX with a name, ALTER TABLE or COMMENT ON")
}

// sqlIdentName returns the name an identifier of a statement gives: quotes
// removed, and on PostgreSQL folded to lower case when unquoted.
func sqlIdentName(dialect, s string) string {
	switch {
	case len(s) >= 2 && s[0] == '"':
		return strings.ReplaceAll(s[1:len(s)-1], `""`, `"`)
	case len(s) >= 2 && s[0] == '`':
		return strings.ReplaceAll(s[1:len(s)-1], "``", "`")
	case dialect == "postgres":
		return strings.ToLower(s)
	}
	return s
}

// topLevelSemicolon returns the index of the first semicolon of q outside
// quotes, or -1.
func topLevelSemicolon(q string) int {
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else if c == '\\' && quote == '\'' {
				i++
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == ';':
			return i
		}
	}
	return -1
}
