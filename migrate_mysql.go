package shardid

import (
	"context"
	"database/sql"
	"errors"
	"regexp"
	"strings"
	"sync"

	"github.com/shardid/shardid/internal/dbconn"
)

// migrateMySQL is the fast path of Migrate on MySQL and MariaDB.
type migrateMySQL struct {
	// mariaDB is set when the server is MariaDB, whose
	// information_schema.COLUMNS gives defaults as SQL expressions (MySQL
	// gives them unquoted, so columns are not added from them there).
	mariaDB bool

	// current is the default database of the connection detect ran on.
	current sql.NullString
}

// mysqlWorkers is the number of connections that run one database's DDL:
// DDL autocommits there, one statement at a time, and waits mostly on the
// disk.
const mysqlWorkers = 4

// detect learns which server conn is connected to, and its default
// database.
func (m *migrateMySQL) detect(ctx context.Context, conn *sql.Conn) error {
	var v string
	if err := conn.QueryRowContext(ctx, "SELECT VERSION(), DATABASE()").Scan(&v, &m.current); err != nil {
		return err
	}
	m.mariaDB = strings.Contains(strings.ToLower(v), "mariadb")
	return nil
}

// template creates the database tmpl, runs migrate on conn with tmpl as
// its default database, reads the catalog, and drops tmpl (even when ctx
// is done; on pool when conn cannot). conn's default database is what it
// was again afterwards, when it had one.
func (m *migrateMySQL) template(ctx context.Context, conn *sql.Conn, pool *sql.DB, tmpl string, schemas []string,
	build func(q migrateConn) error) (cat map[string]catSchema, err error) {
	// Not IF NOT EXISTS: what is dropped below must be what was created
	// here.
	if _, err := conn.ExecContext(ctx, "CREATE DATABASE "+mysqlIdent(tmpl)); err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if _, derr := conn.ExecContext(cctx, m.dropSchema(tmpl)); derr != nil {
			// A statement of its own: any connection will do.
			if _, derr = pool.ExecContext(cctx, m.dropSchema(tmpl)); err == nil && derr != nil {
				err = derr
			}
		}
	}()
	err = func() (err error) {
		if _, err := conn.ExecContext(ctx, "USE "+mysqlIdent(tmpl)); err != nil {
			return err
		}
		// Dropping the template resets the default database when there
		// was none before.
		defer func() {
			if m.current.Valid {
				if _, rerr := conn.ExecContext(ctx, "USE "+mysqlIdent(m.current.String)); err == nil {
					err = rerr
				}
			}
		}()
		return build(conn)
	}()
	if err != nil {
		return nil, err
	}
	return m.catalog(ctx, conn, append(schemas[:len(schemas):len(schemas)], tmpl))
}

// replay runs stmts on conn with schema, created if missing, as its
// default database, then passes what schema holds to check. conn's
// default database is what it was again afterwards, when it had one.
func (m *migrateMySQL) replay(ctx context.Context, conn *sql.Conn, schema string, stmts []string, check func(have catSchema) error) (err error) {
	for _, q := range []string{m.createSchema(schema), "USE " + mysqlIdent(schema)} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	defer func() {
		if m.current.Valid {
			if _, rerr := conn.ExecContext(ctx, "USE "+mysqlIdent(m.current.String)); err == nil {
				err = rerr
			}
		}
	}()
	for _, q := range stmts {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return &stmtError{stmt: q, err: err}
		}
	}
	cat, err := m.catalog(ctx, conn, []string{schema})
	if err != nil {
		return err
	}
	return check(cat[schema])
}

func (*migrateMySQL) currentSchema(ctx context.Context, db *sql.DB) (string, error) {
	var s sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&s); err != nil {
		return "", err
	}
	if !s.Valid {
		return "", withDetail(ErrInvalidConfig, "the connection has no default database: unqualified tables have nowhere to go")
	}
	return s.String, nil
}

func (*migrateMySQL) createSchema(schema string) string {
	return "CREATE DATABASE IF NOT EXISTS `" + schema + "`"
}

func (*migrateMySQL) dropSchema(schema string) string {
	return "DROP DATABASE IF EXISTS `" + schema + "`"
}

// catalog reads what exists in schemas.
func (*migrateMySQL) catalog(ctx context.Context, conn querier, schemas []string) (map[string]catSchema, error) {
	in := strings.Repeat("?,", len(schemas))
	in = "(" + in[:len(in)-1] + ")"
	args := make([]any, len(schemas))
	for i, s := range schemas {
		args[i] = s
	}
	queries := [...]string{
		"SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME IN " + in,
		"SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA, " +
			"COLUMN_COMMENT, COLLATION_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA IN " + in,
		"SELECT DISTINCT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA IN " + in,
		"SELECT TABLE_SCHEMA, TABLE_NAME, CONSTRAINT_NAME FROM information_schema.TABLE_CONSTRAINTS WHERE TABLE_SCHEMA IN " + in,
	}
	return readCatalog(ctx, conn, queries, args, func(rows *sql.Rows) (schema, table, name string, c catColumn, err error) {
		var (
			nullable  string
			def, coll sql.NullString
		)
		err = rows.Scan(&schema, &table, &name, &c.typ, &nullable, &def, &c.extra, &c.comment, &coll)
		c.notNull = nullable == "NO"
		c.hasDef, c.def = def.Valid, markSchema(def.String, schema)
		if coll.Valid {
			c.typ += " COLLATE " + coll.String
		}
		return schema, table, name, c, err
	})
}

func (m *migrateMySQL) addColumn(table, name string, c catColumn) ([]string, bool) {
	if !m.mariaDB || c.extra != "" || strings.Contains(c.def, schemaMark) || strings.Contains(c.comment, `\`) {
		return nil, false // auto_increment, generated, ON UPDATE, ...
	}
	q := "ALTER TABLE `" + table + "` ADD COLUMN " + mysqlIdent(name) + " " + c.typ
	if c.notNull {
		q += " NOT NULL"
	} else {
		q += " NULL"
	}
	if c.hasDef {
		q += " DEFAULT " + c.def
	}
	if c.comment != "" {
		q += " COMMENT " + mysqlLiteral(c.comment)
	}
	return []string{q}, true
}

// The forms of GORM's DDL on MySQL, with an unqualified table.
var (
	mysqlCreateTable = regexp.MustCompile("^CREATE TABLE `([^`.]+)` \\(")
	mysqlCreateIndex = regexp.MustCompile("^CREATE (?:UNIQUE |FULLTEXT |SPATIAL )?INDEX `([^`]+)` ON `([^`.]+)`")
	mysqlAlterTable  = regexp.MustCompile("^ALTER TABLE `([^`.]+)` ")
)

func (*migrateMySQL) parse(stmt string) (table, index string, ok bool) {
	if m := mysqlCreateTable.FindStringSubmatch(stmt); m != nil {
		return m[1], "", true
	}
	if m := mysqlCreateIndex.FindStringSubmatch(stmt); m != nil {
		return m[2], m[1], true
	}
	if m := mysqlAlterTable.FindStringSubmatch(stmt); m != nil {
		return m[1], "", true
	}
	return "", "", false
}

// mysqlInlineIndex is an index declared inside GORM's CREATE TABLE on
// MySQL: "[UNIQUE ]INDEX `name` (`col`,...)[ COMMENT '...'][ option]".
var mysqlInlineIndex = regexp.MustCompile("^((?:UNIQUE |FULLTEXT |SPATIAL )?)INDEX `([^`]+)` (\\(.*)$")

// inlineIndexes returns, for each index declared inside the recorded CREATE
// TABLE stmt, the CREATE INDEX that GORM's CreateIndex would run for it on
// an existing table.
func (*migrateMySQL) inlineIndexes(table, stmt string) []recordedStmt {
	if !mysqlCreateTable.MatchString(stmt) {
		return nil
	}
	var out []recordedStmt
	for _, item := range splitTopLevel(stmt[strings.IndexByte(stmt, '(')+1 : strings.LastIndexByte(stmt, ')')]) {
		if m := mysqlInlineIndex.FindStringSubmatch(item); m != nil {
			out = append(out, recordedStmt{
				sql:   "CREATE " + m[1] + "INDEX `" + m[2] + "` ON `" + table + "` " + m[3],
				table: table, index: m[2], derived: true,
			})
		}
	}
	return out
}

// splitTopLevel splits s at the commas outside parentheses, quotes and
// backquotes.
func splitTopLevel(s string) []string {
	var (
		items []string
		depth int
		quote byte
		start int
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0 // a doubled quote closes and reopens
			} else if c == '\\' && quote == '\'' {
				i++
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			items = append(items, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	return append(items, strings.TrimSpace(s[start:]))
}

// apply runs the actions on conn and up to mysqlWorkers-1 more
// connections of db, as many as its pool allows, each switching to a
// shard's database with USE and back to its own at the end.
func (m *migrateMySQL) apply(ctx context.Context, conn *sql.Conn, db *sql.DB, acts []shardAction, held func() error, done func(n int)) error {
	if len(acts) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex // protects next and first
		next  int
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	take := func() (shardAction, error) {
		if err := held(); err != nil {
			return shardAction{}, err
		}
		mu.Lock()
		defer mu.Unlock()
		if next == len(acts) || first != nil {
			return shardAction{}, errNoMore
		}
		next++
		return acts[next-1], nil
	}
	workers := min(mysqlWorkers, len(acts))
	if limit := db.Stats().MaxOpenConnections; limit > 0 {
		workers = max(min(workers, limit-1), 1) // the migration lock holds one
	}
	for w := range workers {
		wg.Go(func() {
			if w == 0 {
				if err := m.run(ctx, conn, take, done); err != nil {
					fail(err)
				}
				return
			}
			extra, err := db.Conn(ctx)
			if err != nil {
				fail(err)
				return
			}
			err = m.run(ctx, extra, take, done)
			if err != nil || !m.current.Valid {
				// A connection in doubt, or without a database to go
				// back to, does not return to the pool.
				dbconn.Discard(extra)
			}
			extra.Close()
			if err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	return first
}

// errNoMore is take's error when every action is taken, or another worker
// failed.
var errNoMore = errors.New("no more actions")

// run runs actions from take on conn until there are none, then makes the
// connection's default database what it was.
func (m *migrateMySQL) run(ctx context.Context, conn *sql.Conn, take func() (shardAction, error), done func(n int)) (err error) {
	defer func() {
		if m.current.Valid && err == nil {
			_, err = conn.ExecContext(ctx, "USE "+mysqlIdent(m.current.String))
		}
	}()
	for {
		a, err := take()
		if errors.Is(err, errNoMore) {
			return nil
		}
		if err != nil {
			return err
		}
		stmts := append([]string{m.createSchema(a.schema), "USE " + mysqlIdent(a.schema)}, a.stmts...)
		for _, q := range stmts {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return &ShardError{Shard: a.shard, Err: err}
			}
		}
		done(1)
	}
}

// mysqlIdent quotes a MySQL identifier.
func mysqlIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// mysqlLiteral quotes a MySQL string literal without backslashes, which
// NO_BACKSLASH_ESCAPES would read differently.
func mysqlLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
