package shardid

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardid/shardid/internal/dbconn"
	"github.com/shardid/shardid/internal/sqllock"
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
	// constraint, ...). It is included in Altered. For MigrateSQL, it is
	// the number of shards whose statements were replayed one by one.
	AutoMigrated int
}

// MigrateOptions configures MigrateWith. The zero value is what Migrate
// uses.
type MigrateOptions struct {
	// Progress, if not nil, is called as units are done, from one goroutine
	// at a time, with Done larger on each call than on the one before. The
	// other databases' migrations wait while it runs: keep it short.
	Progress func(MigrateProgress)

	// LockWait is how long Migrate waits for a database's migration lock
	// while another Migrate of the same shards holds it, before it fails
	// with ErrMigrateLocked. If LockWait is 0, DefaultMigrateLockWait is
	// used; if it is negative, Migrate tries once and does not wait. The
	// context's deadline, when sooner, ends the wait too.
	LockWait time.Duration
}

// DefaultMigrateLockWait is how long Migrate waits for another Migrate of
// the same shards when MigrateOptions.LockWait is 0: long enough for a
// first run over thousands of shards, bounded so that a stuck holder is
// reported rather than waited for forever.
const DefaultMigrateLockWait = 5 * time.Minute

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
// at its start) take turns on each database through a lock (a
// transaction-level advisory lock on PostgreSQL, GET_LOCK on MySQL), held
// on a connection of its own: a Migrate waits for it at most
// opts.LockWait, then fails with ErrMigrateLocked, naming the holder. With
// one connection holding the lock and another doing the work, each
// database's pool must allow two connections at least
// (ErrMigratePoolTooSmall); on MySQL, up to four share the DDL when the
// pool allows. A waiting Migrate holds no connection between its tries.
// If the lock's session ends meanwhile (a server timeout, a restart),
// Migrate stops before its next step with ErrMigrateLockLost.
//
// Nothing Migrate does leaves state on a pooled connection, so it is safe
// through PgBouncer in transaction mode: on PostgreSQL the template's
// AutoMigrate and the catalog queries run in one transaction that is rolled
// back (the template never exists for another session), and each batch of
// shards, and each shard that goes through AutoMigrate, runs in a
// transaction of its own with SET LOCAL search_path.
//
// An error names the database, and the logical shard when there is one
// (*ShardError). When ctx is cancelled or its deadline passes, the error
// wraps ctx.Err(), so errors.Is(err, context.Canceled) holds even when the
// driver reports a closed connection. Shards finished before stay migrated;
// a shard's batch that was interrupted is rolled back on PostgreSQL.
func (r *Router) MigrateWith(ctx context.Context, opts MigrateOptions, models ...any) error {
	t := r.smap.Load()
	// ownTables migrates database d's own tables, unqualified, with GORM's
	// AutoMigrate.
	ownTables := func(d int) migrateJob {
		return func(work context.Context, rep *migrateReporter) error {
			if err := r.dbs[d].WithContext(work).AutoMigrate(models...); err != nil {
				return &ShardError{Shard: -1, Database: r.names[d], Err: withContextErr(work, err)}
			}
			rep.add(r.names[d], 1, 0, 0)
			return nil
		}
	}
	var jobs []migrateJob
	if r.schemas == nil {
		for d := range r.dbs {
			jobs = append(jobs, ownTables(d))
		}
		return runMigration(ctx, jobs, opts, len(r.dbs))
	}
	// A shard in a schema of its own gets its tables there; a database
	// that holds shared shards (a database from before the shards) gets
	// them in its own tables, once.
	total := 0
	targets := make([]migrateTarget, len(r.dbs))
	shared := make([]bool, len(r.dbs))
	for s := range r.schemas {
		d := t.DB(s)
		if t.Shared(s) {
			if !shared[d] {
				shared[d] = true
				total++
				jobs = append(jobs, ownTables(d))
			}
			continue
		}
		targets[d].shards = append(targets[d].shards, s)
		targets[d].schemas = append(targets[d].schemas, r.schemas[s])
		total++
	}
	for d, db := range r.dbs {
		tg := targets[d]
		if len(tg.shards) == 0 {
			continue
		}
		tg.name, tg.pattern = r.names[d], r.pattern
		tg.dialect = db.Dialector.Name()
		tg.src = &gormSource{db: db, models: models}
		var err error
		if tg.db, err = db.DB(); err != nil {
			return &ShardError{Shard: -1, Database: tg.name, Err: err}
		}
		jobs = append(jobs, tg.job(opts))
	}
	return runMigration(ctx, jobs, opts, total)
}

// migrateResult returns first, the first error of a migration, wrapping
// the caller's cancellation, which explains every failure that follows it.
func migrateResult(ctx context.Context, first error) error {
	if first == nil {
		return nil
	}
	if cerr := contextDone(ctx); cerr != nil && !errors.Is(first, cerr) {
		return fmt.Errorf("shardid: migrate interrupted: %w: %w", cerr, first)
	}
	return first
}

// migrateTarget is one physical database's part of a migration by
// schemas: the engine that Router.MigrateWith and MigrateSQL share.
type migrateTarget struct {
	name    string  // the database's name, for errors and progress
	db      *sql.DB // nil when the database has no units
	dialect string  // "postgres" or "mysql"
	pattern string  // SchemaPattern, for the template's name

	// shards are the units to migrate, in step with schemas: a logical
	// shard, or -1 for the database's own tables, whose schema is "" here
	// (the connection's current schema, or database on MySQL).
	shards  []int
	schemas []string

	src migrateSource
}

// migrateSource is what the shards are brought to: GORM models, or SQL
// statements.
type migrateSource interface {
	// build makes the template in q's current schema, tmpl, and returns
	// the statements to replay in the shards, usable false when they
	// cannot be.
	build(ctx context.Context, dl migrateDialect, q migrateConn, tmpl string) (recorded []recordedStmt, usable bool, err error)
	// bind returns a recorded statement as it runs in schema.
	bind(stmt, schema string) string
	// slow brings schema, whose tables are have, to want on ctrl, when
	// replaying additions cannot.
	slow(ctx context.Context, dl migrateDialect, ctrl *sql.Conn, schema string, have, want catSchema, recorded []recordedStmt) error
}

// migrateConn is what statements run on: a *sql.Conn, or a *sql.Tx.
type migrateConn interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// migrateJob is one database's part of a migration: it reports its
// units to rep, and returns an error that names the database.
type migrateJob func(ctx context.Context, rep *migrateReporter) error

// job returns the migration of tg.
func (tg migrateTarget) job(opts MigrateOptions) migrateJob {
	return func(ctx context.Context, rep *migrateReporter) error { return migrateDatabase(ctx, tg, opts, rep) }
}

// runMigration runs jobs in parallel, reporting to opts.Progress; total is
// the number of units over all of them. The first error cancels the
// others.
func runMigration(ctx context.Context, jobs []migrateJob, opts MigrateOptions, total int) error {
	work, cancel := context.WithCancel(ctx)
	defer cancel()
	rep := &migrateReporter{fn: opts.Progress, total: total}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, job := range jobs {
		wg.Go(func() {
			if err := job(work, rep); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
			}
		})
	}
	wg.Wait()
	return migrateResult(ctx, first)
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
	if cerr := contextDone(ctx); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	return err
}

// contextDone is ctx.Err(), or context.DeadlineExceeded once ctx's
// deadline has passed: a driver that dials with the deadline (MySQL's)
// fails with "i/o timeout" as it passes, before ctx's own timer ends it,
// and that failure is the deadline's.
func contextDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// cleanupTimeout bounds the statements that clean up after Migrate, which
// run even when its context is done.
const cleanupTimeout = 30 * time.Second

// migrateDialect is what the fast path needs from a database.
type migrateDialect interface {
	// template creates the scratch template schema tmpl, runs build on
	// conn (PostgreSQL: a transaction on it) with tmpl as the current
	// schema, reads the catalog of schemas and tmpl, and removes tmpl.
	// pool is conn's database.
	template(ctx context.Context, conn *sql.Conn, pool *sql.DB, tmpl string, schemas []string,
		build func(q migrateConn) error) (map[string]catSchema, error)
	// addColumn returns the statements adding column c, as the template has
	// it, to table, or false when that is not a plain addition.
	addColumn(table, name string, c catColumn) ([]string, bool)
	// parse returns the table (and index) a recorded statement acts on.
	parse(stmt string) (table, index string, ok bool)
	// apply runs the actions' statements in the shards, on conn and, if
	// it helps, other connections of db, calling held before each shard or
	// batch and stopping at its error.
	apply(ctx context.Context, conn *sql.Conn, db *sql.DB, acts []shardAction, held func() error, done func(n int)) error
	// replay runs stmts one by one on conn with schema, created if
	// missing, as the current schema, then reads schema's tables and
	// passes them to check; on PostgreSQL it all runs in one transaction,
	// committed only when check returns nil.
	replay(ctx context.Context, conn *sql.Conn, schema string, stmts []string, check func(have catSchema) error) error
	// currentSchema returns the schema (MySQL: database) that unqualified
	// names on db resolve to.
	currentSchema(ctx context.Context, db *sql.DB) (string, error)
}

// querier runs queries: a *sql.Conn, or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// catSchema is what one schema holds: its tables by name. A missing schema
// is a nil catSchema.
// readCatalog runs the four catalog queries of a dialect with args, in
// this order: the schemas that exist (one column), then their columns
// (each row read by scanColumn), indexes and constraints (schema, table,
// name), and gathers what they return by schema and table.
func readCatalog(ctx context.Context, conn querier, queries [4]string, args []any,
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

	// kind is what the statement creates, as far as MigrateSQL's replay
	// needs to know, and name the column or constraint it adds.
	kind stmtKind
	name string
}

// stmtKind tells MigrateSQL's replay which statements a table that exists
// may already reflect.
type stmtKind uint8

const (
	kindOther         stmtKind = iota // run on every replay
	kindCreateTable                   // done when the table exists
	kindIndex                         // done when the index exists
	kindAddColumn                     // done when the column exists
	kindAddConstraint                 // done when the constraint exists
)

// newMigrateDialect returns the fast path of the dialect called name.
func newMigrateDialect(name string) (migrateDialect, error) {
	switch name {
	case "postgres":
		return migratePostgres{}, nil
	case "mysql":
		return &migrateMySQL{}, nil
	}
	return nil, withDetail(ErrInvalidConfig, fmt.Sprintf("schemas per shard need PostgreSQL or MySQL, not %s", name))
}

// migrateDatabase migrates tg's units, all of them on one database.
func migrateDatabase(ctx context.Context, tg migrateTarget, opts MigrateOptions, rep *migrateReporter) (rerr error) {
	sqlDB, name := tg.db, tg.name
	bad := func(shard int, err error) error {
		return &ShardError{Shard: shard, Database: name, Err: withContextErr(ctx, err)}
	}
	dl, err := newMigrateDialect(tg.dialect)
	if err != nil {
		return bad(tg.shards[0], err)
	}
	schemas := slices.Clone(tg.schemas)
	for i, s := range schemas {
		if s == "" {
			if schemas[i], err = dl.currentSchema(ctx, sqlDB); err != nil {
				return bad(-1, err)
			}
		}
	}
	// One connection holds the lock, another does the work: with a pool
	// of one, the second would never come.
	if sqlDB.Stats().MaxOpenConnections == 1 {
		return bad(-1, withDetail(ErrMigratePoolTooSmall,
			"its pool allows one open connection (SetMaxOpenConns(1)); one holds the migration lock, another does the work: allow two or more"))
	}
	lock, err := migrateLock(ctx, sqlDB, tg.dialect, schemas[0], opts.LockWait)
	if err != nil {
		return bad(-1, err)
	}
	// Released last, after ctrl's clean-up. Its error says the lock was
	// lost at some point: held reports that before each step, and a step
	// that succeeded is done whoever held the lock.
	defer lock.Release()
	held := func() error {
		select {
		case <-lock.Lost():
			return fmt.Errorf("%w: %w", ErrMigrateLockLost, lock.Check(ctx))
		default:
			return nil
		}
	}

	ctrl, err := sqlDB.Conn(ctx)
	if err != nil {
		return bad(-1, err)
	}
	reuse := true // ctrl may go back to the pool
	defer func() {
		if rerr != nil {
			reuse = false // on MySQL, its default database may be a shard's
		}
		if !reuse {
			dbconn.Discard(ctrl)
		}
		ctrl.Close()
	}()
	if m, ok := dl.(*migrateMySQL); ok {
		if err := m.detect(ctx, ctrl); err != nil {
			return bad(-1, err)
		}
		// Without a default database to go back to, ctrl cannot be
		// reset after USE.
		reuse = m.current.Valid
	}
	tmpl, err := templateName(tg.pattern)
	if err != nil {
		return bad(-1, err)
	}
	if err := held(); err != nil {
		return bad(-1, err)
	}
	var (
		recorded []recordedStmt
		usable   bool
	)
	cat, err := dl.template(ctx, ctrl, sqlDB, tmpl, schemas, func(q migrateConn) (err error) {
		recorded, usable, err = tg.src.build(ctx, dl, q, tmpl)
		return err
	})
	if err != nil {
		return bad(-1, fmt.Errorf("shardid: migrating the template schema %s: %w", tmpl, err))
	}
	want := cat[tmpl]

	var acts []shardAction
	var slow []int // indexes in tg.shards
	for i, s := range tg.shards {
		stmts, fast := planShard(dl, cat[schemas[i]], want, recorded, usable)
		switch {
		case !fast:
			slow = append(slow, i)
		case len(stmts) > 0:
			for j, q := range stmts {
				stmts[j] = tg.src.bind(q, schemas[i])
			}
			acts = append(acts, shardAction{shard: s, schema: schemas[i], stmts: stmts})
		}
	}
	rep.add(name, len(tg.shards)-len(acts)-len(slow), 0, 0)
	if err := dl.apply(ctx, ctrl, sqlDB, acts, held, func(n int) { rep.add(name, n, n, 0) }); err != nil {
		var se *ShardError
		if errors.As(err, &se) {
			se.Database = name
			se.Err = withContextErr(ctx, se.Err)
			return se
		}
		return bad(-1, err)
	}
	for _, i := range slow {
		s := tg.shards[i]
		if err := ctx.Err(); err != nil {
			return bad(s, err)
		}
		if err := held(); err != nil {
			return bad(s, err)
		}
		if err := tg.src.slow(ctx, dl, ctrl, schemas[i], cat[schemas[i]], want, recorded); err != nil {
			return bad(s, err)
		}
		rep.add(name, 1, 1, 1)
	}
	return nil
}

// gormSource is a migration to GORM models.
type gormSource struct {
	db     *gorm.DB
	models []any
}

// build runs AutoMigrate of the models on q, recording its DDL.
func (g *gormSource) build(ctx context.Context, dl migrateDialect, q migrateConn, tmpl string) ([]recordedStmt, bool, error) {
	rec := &recordingPool{ConnPool: q}
	// A new Session has a Statement of its own.
	mtx := g.db.Session(&gorm.Session{NewDB: true, Context: ctx})
	mtx.Statement.ConnPool = rec
	if err := mtx.AutoMigrate(g.models...); err != nil {
		return nil, false, err
	}
	recorded, usable := recordedStmts(dl, tmpl, rec)
	return recorded, usable, nil
}

func (*gormSource) bind(stmt, _ string) string { return stmt }

// slow runs AutoMigrate of the models inside schema.
func (g *gormSource) slow(ctx context.Context, _ migrateDialect, ctrl *sql.Conn, schema string, _, _ catSchema, _ []recordedStmt) error {
	onCtrl := g.db.Session(&gorm.Session{NewDB: true, Context: ctx})
	onCtrl.Statement.ConnPool = ctrl
	return migrateIn(onCtrl, schema, g.models)
}

// migrateLock takes the migration lock of the database whose first shard's
// schema is first, waiting at most wait (see MigrateOptions.LockWait).
//
// It tries once at a time, each try on a connection (on PostgreSQL, in a
// transaction) that goes back to the pool when the lock is held: a waiting
// Migrate holds no connection between tries, so that waiters cannot take,
// from the pool or from a pooler behind it, the connection the holder
// needs to finish.
func migrateLock(ctx context.Context, db *sql.DB, dialect, first string, wait time.Duration) (*sqllock.Lock, error) {
	switch {
	case wait == 0:
		wait = DefaultMigrateLockWait
	case wait < 0:
		wait = 0
	}
	// The key is the one the session-level pg_advisory_lock and GET_LOCK
	// of older versions took: old and new processes exclude each other.
	key := sqllock.Key{Name: migrateLockName(first)}
	deadline := time.Now().Add(wait)
	pause := 20 * time.Millisecond
	for {
		lock, err := sqllock.Acquire(ctx, db, dialect, key, sqllock.Options{})
		if err == nil || !errors.Is(err, sqllock.ErrHeld) {
			return lock, err
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return nil, fmt.Errorf("%w (waited %v): %w", ErrMigrateLocked, wait, err)
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: %w: %w", ErrMigrateLocked, ctx.Err(), err)
		case <-t.C:
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// migrateLockName names the migration lock of the database whose first
// shard is schema: the same in every process with the same map.
func migrateLockName(schema string) string {
	h := fnv.New64a()
	h.Write([]byte(schema))
	return fmt.Sprintf("shardid:migrate:%016x", h.Sum64())
}

// templateName returns a fresh name for a scratch template schema of a
// router whose SchemaPattern is pattern: the pattern with its number
// replaced by "tmpl_" and random hex ("app_%04d" gives app_tmpl_3f9a...),
// so that a grant that covers the shards by the literal parts of their
// names (MySQL's GRANT ... ON `app\_%`.*) covers the template too. When
// that name is not a valid one (too long), it is shardid_tmpl_ and the
// hex.
func templateName(pattern string) (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	mark := "tmpl_" + hex.EncodeToString(b[:])
	if i := strings.IndexByte(pattern, '%'); i >= 0 {
		if j := strings.IndexByte(pattern[i:], 'd'); j >= 0 {
			if name := pattern[:i] + mark + pattern[i+j+1:]; schemaName.MatchString(name) {
				return name, nil
			}
		}
	}
	return "shardid_" + mark, nil
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

// recordedStmts returns the statements rec recorded while AutoMigrate ran
// in the template schema tmpl, with the tables (and indexes) they act on.
// usable is false when a statement cannot be replayed in another schema
// (it names a schema, takes arguments, or has a form the fast path does
// not know).
func recordedStmts(dl migrateDialect, tmpl string, rec *recordingPool) (recorded []recordedStmt, usable bool) {
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
	return append(recorded, derived...), usable
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
	query = dedupConstraints(query)
	res, err := p.ConnPool.ExecContext(ctx, query, args...)
	if err == nil {
		p.stmts = append(p.stmts, query)
		p.args = p.args || len(args) > 0

	}
	return res, err
}

// dedupConstraints returns a CREATE TABLE of GORM's without the
// constraints it declares more than once, identically.
//
// GORM's schema cache gives a model a back-reference for every parent type
// that has many (or one) of it, and CreateTable declares the foreign key of
// each: two Go types of one table with the same has-many (a model and its
// next release, FKPhoto and FKPhotoV2, both with Comments) make a CREATE
// TABLE that declares the same constraint twice, which the server refuses
// (PostgreSQL: constraint "fk_photos_comments" already exists). On existing
// tables AutoMigrate checks each constraint before adding it, so that
// AutoMigrate of the live tables succeeds while the template, always a
// fresh schema, failed (issue #24).
func dedupConstraints(q string) string {
	if !strings.HasPrefix(q, "CREATE TABLE ") {
		return q
	}
	open := strings.IndexByte(q, '(')
	end := closingParen(q, open)
	if open < 0 || end < 0 {
		return q
	}
	items := splitTopLevel(q[open+1 : end])
	seen := make(map[string]bool)
	kept := items[:0]
	for _, it := range items {
		if strings.HasPrefix(it, "CONSTRAINT ") {
			if seen[it] {
				continue
			}
			seen[it] = true
		}
		kept = append(kept, it)
	}
	if len(kept) == len(items) {
		return q
	}
	return q[:open+1] + strings.Join(kept, ",") + q[end:]
}

// closingParen returns the index of the parenthesis that closes the one at
// open in s, outside quotes, or -1.
func closingParen(s string, open int) int {
	if open < 0 {
		return -1
	}
	depth := 0
	var quote byte
	for i := open; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else if c == '\\' && quote == '\'' {
				i++
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// dedupPool returns pool with the CREATE TABLEs it executes passed through
// dedupConstraints, keeping what GORM looks for in it: a transaction's
// Commit and Rollback, a connection's BeginTx.
func dedupPool(pool gorm.ConnPool) gorm.ConnPool {
	switch p := pool.(type) {
	case *sql.Tx:
		return &dedupTx{p}
	case *sql.Conn:
		return &dedupConn{p}
	}
	return pool
}

type dedupTx struct{ *sql.Tx }

func (p *dedupTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return p.Tx.ExecContext(ctx, dedupConstraints(query), args...)
}

type dedupConn struct{ *sql.Conn }

func (p *dedupConn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return p.Conn.ExecContext(ctx, dedupConstraints(query), args...)
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
						dbconn.Discard(conn)
					}
				}()
			}
		}
		return migrateIn(tx, schema, models)
	})
}

// migrateIn creates schema on tx, which is bound to one connection, and
// migrates models inside it with GORM's AutoMigrate, so that join tables
// and indexes land there too.
//
// On PostgreSQL it all runs in one transaction, with SET LOCAL
// search_path: nothing of it outlives the transaction on the connection
// (which a pooler may give another client next), and an interrupted one
// is rolled back. On MySQL, whose DDL is not transactional, it runs with
// the connection's default database set to schema by USE, and set back
// afterwards when it had one.
func migrateIn(tx *gorm.DB, schema string, models []any) (err error) {
	ctx := tx.Statement.Context
	switch tx.Dialector.Name() {
	case "postgres":
		conn, ok := tx.Statement.ConnPool.(gorm.TxBeginner)
		if !ok {
			return fmt.Errorf("shardid: cannot begin a transaction on %T", tx.Statement.ConnPool)
		}
		stx, in, err := pgBeginIn(ctx, tx, conn, schema)
		if err != nil {
			return err
		}
		defer stx.Rollback() // after Commit, sql.ErrTxDone
		in.Statement.ConnPool = dedupPool(stx)
		if err := in.AutoMigrate(models...); err != nil {
			return err
		}
		return stx.Commit()
	case "mysql":
		// schema matched schemaName in NewRouter: it needs no escaping,
		// and is quoted all the same.
		q := mysqlIdent(schema)
		var current sql.NullString
		if err := tx.Statement.ConnPool.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&current); err != nil {
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
			if rerr := tx.Exec("USE " + mysqlIdent(current.String)).Error; err == nil {
				err = rerr
			}
		}()
		// A new Session, so that nothing of the statements above carries over.
		in := tx.Session(&gorm.Session{NewDB: true, Context: ctx})
		in.Statement.ConnPool = dedupPool(tx.Statement.ConnPool)
		return in.AutoMigrate(models...)
	default:
		return withDetail(ErrInvalidConfig, fmt.Sprintf("schemas per shard need PostgreSQL or MySQL, not %s", tx.Dialector.Name()))
	}
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
