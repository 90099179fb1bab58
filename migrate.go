package shardid

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"
)

// MigrateProgress reports how far Migrate has come.
type MigrateProgress struct {
	// Done is the number of units finished so far over all databases:
	// logical shards with a SchemaPattern, databases without one. It grows
	// with every call.
	Done int

	// Total is the number of units: the router's logical shards with a
	// SchemaPattern, its databases without one.
	Total int

	// Database names the database whose units were just counted.
	Database string

	// Altered is the number of logical shards, over all databases, that
	// needed DDL so far: created, or given tables, columns or indexes.
	Altered int

	// AutoMigrated is the number of logical shards, over all databases,
	// that the fast path could not bring up to date and that went through
	// GORM's AutoMigrate instead (a changed column type, a missing
	// constraint, ...). It is included in Altered.
	AutoMigrated int
}

// MigrateOptions configures MigrateWith. The zero value is what Migrate
// uses.
type MigrateOptions struct {
	// Progress, if not nil, is called as units are done, from one goroutine
	// at a time, with Done larger on each call than on the one before. The
	// other databases' migrations wait while it runs: keep it short.
	Progress func(MigrateProgress)
}

// Migrate prepares every database for models. It is shorthand for
// MigrateWith(ctx, MigrateOptions{}, models...).
func (r *Router) Migrate(ctx context.Context, models ...any) error {
	return r.MigrateWith(ctx, MigrateOptions{}, models...)
}

// MigrateWith prepares every database for models, the physical databases in
// parallel, reporting progress to opts.Progress.
//
// Without a SchemaPattern, it runs GORM's AutoMigrate once per database.
//
// With one, every logical shard's schema (PostgreSQL) or database (MySQL)
// must end as GORM's AutoMigrate inside it would leave it, and it does,
// fast: on each physical database, AutoMigrate runs once in a scratch
// template schema while the statements it executes are recorded; one set of
// catalog queries then reads the tables, columns, indexes and constraints of
// the template and of every shard; each shard gets only the DDL it lacks
// (the recorded statements for a missing schema or table, ALTER TABLE ... ADD
// for a missing column, the recorded CREATE INDEX for a missing index),
// batched in transactions of many shards on PostgreSQL and spread over a few
// connections on MySQL. A shard whose difference is not an addition (a
// column whose type, default or nullability differs, a missing constraint,
// on MySQL a missing index) goes through AutoMigrate inside its schema
// instead, as every shard did before: correct, and slower. Columns, indexes
// and tables a shard has beyond the models are left alone, as AutoMigrate
// leaves them.
//
// Concurrent Migrates of the same shards (every process of an application
// at its start) take turns on each database through an advisory lock
// (pg_advisory_lock, MySQL's GET_LOCK).
//
// An error names the database, and the logical shard when there is one
// (*ShardError). When ctx is cancelled or its deadline passes, the error
// wraps ctx.Err(), so errors.Is(err, context.Canceled) holds even when the
// driver reports a closed connection. Shards finished before stay migrated;
// a shard's batch that was interrupted is rolled back on PostgreSQL.
func (r *Router) MigrateWith(ctx context.Context, opts MigrateOptions, models ...any) error {
	t := r.table.Load()
	work, cancel := context.WithCancel(ctx)
	defer cancel()

	rep := &migrateReporter{fn: opts.Progress}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	if r.schemas == nil {
		rep.total = len(r.dbs)
		for d, db := range r.dbs {
			wg.Go(func() {
				if err := db.WithContext(work).AutoMigrate(models...); err != nil {
					fail(&ShardError{Shard: -1, Database: r.names[d], Err: withContextErr(work, err)})
					return
				}
				rep.add(r.names[d], 1, 0, 0)
			})
		}
	} else {
		rep.total = r.shards
		perDB := make([][]int, len(r.dbs))
		for s := range r.schemas {
			perDB[t.dbOf[s]] = append(perDB[t.dbOf[s]], s)
		}
		for d, shards := range perDB {
			if len(shards) == 0 {
				continue
			}
			wg.Go(func() {
				if err := r.migrateDatabase(work, d, shards, models, rep); err != nil {
					fail(err)
				}
			})
		}
	}
	wg.Wait()
	if first == nil {
		return nil
	}
	// The caller's cancellation explains every failure that follows it.
	if cerr := ctx.Err(); cerr != nil && !errors.Is(first, cerr) {
		return fmt.Errorf("shardid: migrate interrupted: %w: %w", cerr, first)
	}
	return first
}

// migrateReporter serializes progress callbacks and keeps the counts.
type migrateReporter struct {
	fn    func(MigrateProgress)
	total int

	mu           sync.Mutex // protects the counts and serializes fn
	done         int
	altered      int
	autoMigrated int
}

// add counts n more units done on database, altered of them with DDL and
// auto of them through AutoMigrate, and reports it.
func (p *migrateReporter) add(database string, n, altered, auto int) {
	if n == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	p.altered += altered
	p.autoMigrated += auto
	if p.fn != nil {
		p.fn(MigrateProgress{Done: p.done, Total: p.total, Database: database,
			Altered: p.altered, AutoMigrated: p.autoMigrated})
	}
}

// withContextErr makes err wrap ctx's error when ctx is done: a driver
// interrupted by a cancellation often reports only a closed connection.
func withContextErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	return err
}

// cleanupTimeout bounds the statements that clean up after Migrate, which
// run even when its context is done.
const cleanupTimeout = 30 * time.Second

// migrateDialect is what the fast path needs from a database.
type migrateDialect interface {
	// lock takes the migration lock called name on conn and returns its
	// release.
	lock(ctx context.Context, conn *sql.Conn, name string) (func() error, error)
	// createSchema returns the statement creating schema if it is missing.
	createSchema(schema string) string
	// dropSchema returns the statement dropping schema and all it holds.
	dropSchema(schema string) string
	// catalog reads what exists in schemas.
	catalog(ctx context.Context, conn *sql.Conn, schemas []string) (map[string]catSchema, error)
	// addColumn returns the statements adding column c, as the template has
	// it, to table, or false when that is not a plain addition.
	addColumn(table, name string, c catColumn) ([]string, bool)
	// parse returns the table (and index) a recorded statement acts on.
	parse(stmt string) (table, index string, ok bool)
	// apply runs the actions' statements in the shards, on conn and, if
	// it helps, other connections of db.
	apply(ctx context.Context, conn *sql.Conn, db *sql.DB, acts []shardAction, done func(n int)) error
}

// catSchema is what one schema holds: its tables by name. A missing schema
// is a nil catSchema.
// readCatalog runs the four catalog queries of a dialect with args, in
// this order: the schemas that exist (one column), then their columns
// (each row read by scanColumn), indexes and constraints (schema, table,
// name), and gathers what they return by schema and table.
func readCatalog(ctx context.Context, conn *sql.Conn, queries [4]string, args []any,
	scanColumn func(*sql.Rows) (schema, table, name string, c catColumn, err error)) (map[string]catSchema, error) {
	cat := make(map[string]catSchema)
	table := func(schema, name string) *catTable {
		s := cat[schema]
		if s == nil {
			s = make(catSchema)
			cat[schema] = s
		}
		t := s[name]
		if t == nil {
			t = &catTable{cols: map[string]catColumn{}, indexes: map[string]bool{}, cons: map[string]bool{}}
			s[name] = t
		}
		return t
	}
	for i, q := range queries {
		if err := func() error {
			rows, err := conn.QueryContext(ctx, q, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var schema, tname, name string
				var c catColumn
				switch i {
				case 0:
					err = rows.Scan(&schema)
					if err == nil && cat[schema] == nil {
						cat[schema] = make(catSchema)
					}
				case 1:
					if schema, tname, name, c, err = scanColumn(rows); err == nil {
						table(schema, tname).cols[name] = c
					}
				case 2:
					err = rows.Scan(&schema, &tname, &name)
					table(schema, tname).indexes[name] = true
				case 3:
					err = rows.Scan(&schema, &tname, &name)
					table(schema, tname).cons[name] = true
				}
				if err != nil {
					return err
				}
			}
			return rows.Err()
		}(); err != nil {
			return nil, err
		}
	}
	return cat, nil
}

type catSchema map[string]*catTable

// catTable is one table's columns, and the names of its indexes and
// constraints.
type catTable struct {
	cols    map[string]catColumn
	indexes map[string]bool
	cons    map[string]bool
}

// catColumn is a column as the catalog describes it. Names of objects in
// the column's own schema are replaced by schemaMark, so that columns of two
// schemas compare equal.
type catColumn struct {
	typ     string
	notNull bool
	hasDef  bool
	def     string
	extra   string // identity, generated, auto_increment, on update
	comment string
}

// schemaMark stands for a column's own schema in catColumn's strings.
const schemaMark = "\x00"

// shardAction is the work for one logical shard.
type shardAction struct {
	shard  int
	schema string
	stmts  []string // run with schema as the current schema
}

// recordedStmt is a statement the template's AutoMigrate executed, and the
// table (and index) it acts on.
type recordedStmt struct {
	sql, table, index string

	// derived is set on a CREATE INDEX made from an index that AutoMigrate
	// declared inside its CREATE TABLE (MySQL): it serves an existing table
	// that lacks the index, never a new one.
	derived bool
}

// migrateDatabase migrates shards, all of them on database d.
func (r *Router) migrateDatabase(ctx context.Context, d int, shards []int, models []any, rep *migrateReporter) (rerr error) {
	db := r.dbs[d].WithContext(ctx)
	name := r.names[d]
	bad := func(shard int, err error) error {
		return &ShardError{Shard: shard, Database: name, Err: withContextErr(ctx, err)}
	}
	var dl migrateDialect
	switch db.Dialector.Name() {
	case "postgres":
		dl = migratePostgres{}
	case "mysql":
		dl = &migrateMySQL{}
	default:
		return bad(shards[0], withDetail(ErrInvalidConfig,
			fmt.Sprintf("schemas per shard need PostgreSQL or MySQL, not %s", db.Dialector.Name())))
	}
	sqlDB, err := db.DB()
	if err != nil {
		return bad(-1, err)
	}
	// One connection holds the migration lock and does the work, so that a
	// pool of one connection suffices; on MySQL, more connections help
	// when the pool has them.
	ctrl, err := sqlDB.Conn(ctx)
	if err != nil {
		return bad(-1, err)
	}
	var (
		unlock func() error
		tmpl   string
		reuse  = true // ctrl may go back to the pool
	)
	defer func() {
		if rerr != nil {
			reuse = false // its search_path or database may be a shard's
		}
		// Clean up even when ctx is done.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if tmpl != "" {
			if _, err := ctrl.ExecContext(cctx, dl.dropSchema(tmpl)); err != nil {
				reuse = false
			}
		}
		if unlock != nil && unlock() != nil {
			reuse = false // it may still hold the lock
		}
		if !reuse {
			_ = ctrl.Raw(func(any) error { return driver.ErrBadConn })
		}
		ctrl.Close()
		if !reuse && tmpl != "" {
			_, _ = sqlDB.ExecContext(cctx, dl.dropSchema(tmpl))
		}
	}()
	if m, ok := dl.(*migrateMySQL); ok {
		if err := m.detect(ctx, ctrl); err != nil {
			return bad(-1, err)
		}
		// Without a default database to go back to, ctrl cannot be
		// reset after USE.
		reuse = m.current.Valid
	}
	if unlock, err = dl.lock(ctx, ctrl, migrateLockName(r.schemas[shards[0]])); err != nil {
		return bad(-1, err)
	}
	if tmpl, err = templateName(); err != nil {
		return bad(-1, err)
	}
	onCtrl := db.Session(&gorm.Session{NewDB: true, Context: ctx})
	onCtrl.Statement.ConnPool = ctrl
	recorded, usable, err := recordTemplate(onCtrl, dl, tmpl, models)
	if err != nil {
		return bad(-1, fmt.Errorf("shardid: migrating the template schema %s: %w", tmpl, err))
	}

	schemas := make([]string, 0, len(shards)+1)
	for _, s := range shards {
		schemas = append(schemas, r.schemas[s])
	}
	cat, err := dl.catalog(ctx, ctrl, append(schemas, tmpl))
	if err != nil {
		return bad(-1, err)
	}
	want := cat[tmpl]

	var acts []shardAction
	var slow []int
	for _, s := range shards {
		stmts, fast := planShard(dl, cat[r.schemas[s]], want, recorded, usable)
		switch {
		case !fast:
			slow = append(slow, s)
		case len(stmts) > 0:
			acts = append(acts, shardAction{shard: s, schema: r.schemas[s], stmts: stmts})
		}
	}
	rep.add(name, len(shards)-len(acts)-len(slow), 0, 0)
	if err := dl.apply(ctx, ctrl, sqlDB, acts, func(n int) { rep.add(name, n, n, 0) }); err != nil {
		var se *ShardError
		if errors.As(err, &se) {
			se.Database = name
			se.Err = withContextErr(ctx, se.Err)
			return se
		}
		return bad(-1, err)
	}
	for _, s := range slow {
		if err := ctx.Err(); err != nil {
			return bad(s, err)
		}
		if err := migrateIn(onCtrl, r.schemas[s], models); err != nil {
			return bad(s, err)
		}
		rep.add(name, 1, 1, 1)
	}
	return nil
}

// migrateLockName names the migration lock of the database whose first
// shard is schema: the same in every process with the same map.
func migrateLockName(schema string) string {
	h := fnv.New64a()
	h.Write([]byte(schema))
	return fmt.Sprintf("shardid:migrate:%016x", h.Sum64())
}

// templateName returns a fresh name for a scratch template schema.
func templateName() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "shardid_tmpl_" + hex.EncodeToString(b[:]), nil
}

// planShard returns the statements that bring have (a shard's schema, nil
// if missing; apply creates it) to want (the template), or fast false when that takes more
// than additions and the shard must go through AutoMigrate.
func planShard(dl migrateDialect, have, want catSchema, recorded []recordedStmt, usable bool) (stmts []string, fast bool) {
	if !usable {
		return nil, false
	}
	fresh := true
	for t := range want {
		if have[t] != nil {
			fresh = false
			break
		}
	}
	if fresh {
		for _, st := range recorded {
			if !st.derived {
				stmts = append(stmts, st.sql)
			}
		}
		return stmts, true
	}
	// Tables first, in the order AutoMigrate created them, so that
	// foreign keys find what they reference.
	for _, st := range recorded {
		if have[st.table] == nil && !st.derived {
			stmts = append(stmts, st.sql)
		}
	}
	byIndex := make(map[string]string)
	for _, st := range recorded {
		if st.index != "" {
			byIndex[st.table+"\x00"+st.index] = st.sql
		}
	}
	for _, tname := range sortedKeys(want) {
		wt, ht := want[tname], have[tname]
		if ht == nil {
			continue
		}
		for _, cname := range sortedKeys(wt.cols) {
			wc := wt.cols[cname]
			hc, ok := ht.cols[cname]
			if ok {
				if hc != wc {
					return nil, false
				}
				continue
			}
			add, ok := dl.addColumn(tname, cname, wc)
			if !ok {
				return nil, false
			}
			stmts = append(stmts, add...)
		}
		for c := range wt.cons {
			if !ht.cons[c] {
				return nil, false
			}
		}
		for _, iname := range sortedKeys(wt.indexes) {
			if ht.indexes[iname] {
				continue
			}
			q, ok := byIndex[tname+"\x00"+iname]
			if !ok {
				return nil, false
			}
			stmts = append(stmts, q)
		}
	}
	return stmts, true
}

// recordTemplate creates schema tmpl on db, which is bound to one
// connection, runs AutoMigrate of models inside it and returns the statements AutoMigrate executed. usable is
// false when a statement cannot be replayed in another schema (it names a
// schema, takes arguments, or has a form the fast path does not know).
func recordTemplate(db *gorm.DB, dl migrateDialect, tmpl string, models []any) (recorded []recordedStmt, usable bool, err error) {
	if err := db.Exec(dl.createSchema(tmpl)).Error; err != nil {
		return nil, false, err
	}
	rec := &recordingPool{ConnPool: db.Statement.ConnPool}
	err = func() (err error) {
		q := db.Statement.Quote(tmpl)
		switch db.Dialector.Name() {
		case "postgres":
			if err := db.Exec("SET search_path TO " + q).Error; err != nil {
				return err
			}
			defer func() {
				if rerr := db.Exec("RESET search_path").Error; err == nil {
					err = rerr
				}
			}()
		case "mysql":
			// Dropping the template resets the default database when
			// there was none before.
			if err := db.Exec("USE " + q).Error; err != nil {
				return err
			}
			defer func() {
				if cur := dl.(*migrateMySQL).current; cur.Valid {
					if rerr := db.Exec("USE " + mysqlIdent(cur.String)).Error; err == nil {
						err = rerr
					}
				}
			}()
		}
		// A new Session has a Statement of its own.
		mtx := db.Session(&gorm.Session{NewDB: true, Context: db.Statement.Context})
		mtx.Statement.ConnPool = rec
		return mtx.AutoMigrate(models...)
	}()
	if err != nil {
		return nil, false, err
	}
	usable = !rec.args
	var derived []recordedStmt
	for _, q := range rec.stmts {
		table, index, ok := dl.parse(q)
		if !ok || containsWord(q, tmpl) {
			usable = false
		}
		recorded = append(recorded, recordedStmt{sql: q, table: table, index: index})
		if in, ok := dl.(interface {
			inlineIndexes(table, stmt string) []recordedStmt
		}); ok && index == "" {
			derived = append(derived, in.inlineIndexes(table, q)...)
		}
	}
	recorded = append(recorded, derived...)
	return recorded, usable, nil
}

// recordingPool passes statements on to its ConnPool and records the ones
// executed with ExecContext: AutoMigrate's DDL.
type recordingPool struct {
	gorm.ConnPool
	stmts []string
	args  bool // a statement had arguments
}

// ExecContext implements gorm.ConnPool.
func (p *recordingPool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := p.ConnPool.ExecContext(ctx, query, args...)
	if err == nil {
		p.stmts = append(p.stmts, query)
		p.args = p.args || len(args) > 0

	}
	return res, err
}

// migrateShard creates schema on db and migrates models inside it with
// GORM's AutoMigrate, on a connection of its own.
func migrateShard(ctx context.Context, db *gorm.DB, schema string, models []any) error {
	return db.WithContext(ctx).Connection(func(tx *gorm.DB) error {
		if tx.Dialector.Name() == "mysql" {
			var current sql.NullString
			if err := tx.Statement.ConnPool.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&current); err != nil {
				return err
			}
			if !current.Valid {
				// No default database to go back to: the connection
				// does not return to the pool.
				defer func() {
					if conn, ok := tx.Statement.ConnPool.(*sql.Conn); ok {
						_ = conn.Raw(func(any) error { return driver.ErrBadConn })
					}
				}()
			}
		}
		return migrateIn(tx, schema, models)
	})
}

// migrateIn creates schema on tx, which is bound to one connection, and
// migrates models inside it with GORM's AutoMigrate.
//
// AutoMigrate runs with the connection's search_path (PostgreSQL) or
// default database (MySQL) set to that schema, so join tables and indexes
// land there too; the connection is reset afterwards (on MySQL, when it had
// a default database).
func migrateIn(tx *gorm.DB, schema string, models []any) (err error) {
	// schema matched schemaName in NewRouter: it needs no escaping, and is
	// quoted all the same.
	q := tx.Statement.Quote(schema)
	switch tx.Dialector.Name() {
	case "postgres":
		if err := tx.Exec("CREATE SCHEMA IF NOT EXISTS " + q).Error; err != nil {
			return err
		}
		if err := tx.Exec("SET search_path TO " + q).Error; err != nil {
			return err
		}
		defer func() {
			if rerr := tx.Exec("RESET search_path").Error; err == nil {
				err = rerr
			}
		}()
	case "mysql":
		var current sql.NullString
		if err := tx.Statement.ConnPool.QueryRowContext(tx.Statement.Context, "SELECT DATABASE()").Scan(&current); err != nil {
			return err
		}
		if err := tx.Exec("CREATE DATABASE IF NOT EXISTS " + q).Error; err != nil {
			return err
		}
		if err := tx.Exec("USE " + q).Error; err != nil {
			return err
		}
		defer func() {
			if !current.Valid {
				return
			}
			if rerr := tx.Exec("USE " + tx.Statement.Quote(current.String)).Error; err == nil {
				err = rerr
			}
		}()
	default:
		return withDetail(ErrInvalidConfig, fmt.Sprintf("schemas per shard need PostgreSQL or MySQL, not %s", tx.Dialector.Name()))
	}
	// A new Session, so that nothing of the statements above carries over.
	return tx.Session(&gorm.Session{NewDB: true, Context: tx.Statement.Context}).AutoMigrate(models...)
}

// sortedKeys returns m's keys in order, so that statements come in the
// same order at every run.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// containsWord reports whether s contains word not as part of a longer
// identifier.
func containsWord(s, word string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], word)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(word)
		if (j == 0 || !isIdentByte(s[j-1])) && (end == len(s) || !isIdentByte(s[end])) {
			return true
		}
		i = j + 1
	}
}

// markSchema replaces schema where it qualifies a name in s ("shard_0001."
// or "\"shard_0001\".") by schemaMark.
func markSchema(s, schema string) string {
	for _, q := range []string{`"` + schema + `".`, "`" + schema + "`.", schema + "."} {
		var b strings.Builder
		for i := 0; ; {
			j := strings.Index(s[i:], q)
			if j < 0 {
				b.WriteString(s[i:])
				break
			}
			j += i
			if j > 0 && isIdentByte(s[j-1]) {
				b.WriteString(s[i : j+1])
				i = j + 1
				continue
			}
			b.WriteString(s[i:j])
			b.WriteString(schemaMark + ".")
			i = j + len(q)
		}
		s = b.String()
	}
	return s
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
