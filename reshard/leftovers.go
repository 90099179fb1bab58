package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// Leftovers is what moves of one logical shard left on a router's databases
// beyond the shard itself: the state of moves that were killed (a move
// stopped by its context cleans up after itself, but for the copy it was
// building on its target), and the old copies of finished moves.
type Leftovers struct {
	Shard  int
	Schema string // the shard's schema (MySQL: database)
	Home   string // the database the router's map names for the shard

	// Moving says that a move of the shard holds its lock now: what
	// Leftovers lists is then that move's work under way.
	Moving bool

	// Capture lists the copies of the shard whose tables still log their
	// writes for a move: a mover killed before it could drop its triggers.
	// On the shard's home every write costs a row more in the change log
	// until Unfence drops them.
	Capture []CaptureLeft

	// Fence is the fence in force on the shard's home, if there is one.
	Fence *FenceLeft

	// Copies are the copies of the shard on databases other than its home:
	// old copies of finished moves (sealed), and copies a move was building
	// when it was killed.
	Copies []CopyLeft

	// Staging lists the staging schemas of the shard on PostgreSQL
	// databases: a move killed while it created the shard's tables on its
	// target.
	Staging []StagingLeft
}

// CaptureLeft is a copy of a shard whose tables log their writes for a move.
type CaptureLeft struct {
	Database  string
	Triggers  []string // the tables with capture triggers
	ChangeLog bool     // the change log table exists
	Changes   int64    // rows in the change log
}

// FenceLeft is a fence in force on a copy of a shard.
type FenceLeft struct {
	Database string
	ForGood  bool    // no end, as a seal or Fence for 0
	Seconds  float64 // how long it is still in force, unless ForGood
	Sealed   bool    // a move fenced its source for good, and did not flip
	// MoverOnly is the fence of a move's target, which only the mover
	// passes: on the shard's home, a move died after its flip and before
	// it let writes through.
	MoverOnly bool
}

// CopyLeft is a copy of a shard on a database other than its home.
type CopyLeft struct {
	Database string
	Sealed   bool // the old copy of a finished move: DropShardCopy drops it
	// Unfinished is a copy a move was building: its tables refuse every
	// writer but a mover (or have no fence yet and no rows).
	// DropUnfinishedCopies drops it.
	Unfinished bool
	Tables     int // the shard's tables found there
}

// StagingLeft is a staging schema of a shard's move on a database.
type StagingLeft struct {
	Database, Schema string
}

// Empty reports whether l lists nothing.
func (l Leftovers) Empty() bool {
	return !l.Moving && len(l.Capture) == 0 && l.Fence == nil && len(l.Copies) == 0 && len(l.Staging) == 0
}

// stagingSchema names the schema a move builds schema in on a PostgreSQL
// target before it renames it (see createTarget).
func stagingSchema(schema string) string {
	h := fnv.New64a()
	h.Write([]byte(schema))
	return "shardid_new_" + strconv.FormatUint(h.Sum64(), 16)
}

// FindLeftovers reads what moves of shard left on r's databases, judged
// against r's map (load the catalog's into r first). It only reads; it
// takes the shard's move lock on its home for a moment to tell a move
// under way (Leftovers.Moving).
func FindLeftovers(ctx context.Context, r *shardid.Router, shard int) (Leftovers, error) {
	if err := checkMove(r, shard); err != nil {
		return Leftovers{}, err
	}
	return findLeftovers(ctx, r, shard, true)
}

// findLeftovers is FindLeftovers; tryLock false skips the move lock (the
// caller holds it).
func findLeftovers(ctx context.Context, r *shardid.Router, shard int, tryLock bool) (Leftovers, error) {
	schema := r.Schema(shard)
	home := dbOf(r, shard)
	names, dbs := r.Names(), r.Databases()
	l := Leftovers{Shard: shard, Schema: schema, Home: names[home]}
	if tryLock {
		lock, err := tryMoveLock(ctx, dbs[home], schema)
		switch {
		case errors.Is(err, ErrMoveInProgress):
			l.Moving = true
		case err != nil:
			return l, fmt.Errorf("shardid: shard %d on %s: %w", shard, names[home], err)
		default:
			lock.release()
		}
	}
	for d, db := range dbs {
		fail := func(err error) (Leftovers, error) {
			return l, fmt.Errorf("shardid: leftovers of shard %d on %s: %w", shard, names[d], err)
		}
		if db.Dialector.Name() == "postgres" {
			st := stagingSchema(schema)
			if ok, err := schemaExists(ctx, db, st); err != nil {
				return fail(err)
			} else if ok {
				l.Staging = append(l.Staging, StagingLeft{Database: names[d], Schema: st})
			}
		}
		ok, err := schemaExists(ctx, db, schema)
		if err != nil {
			return fail(err)
		}
		if !ok {
			continue
		}
		capt, err := captureLeft(ctx, db, schema)
		if err != nil {
			return fail(err)
		}
		if capt != nil {
			capt.Database = names[d]
			l.Capture = append(l.Capture, *capt)
		}
		fence, err := fenceLeft(ctx, db, schema)
		if err != nil {
			return fail(err)
		}
		if d == home {
			if fence != nil {
				fence.Database = names[d]
				l.Fence = fence
			}
			continue
		}
		tables, err := shardTables(ctx, db, schema)
		if err != nil {
			return fail(err)
		}
		c := CopyLeft{Database: names[d], Tables: len(tables)}
		switch {
		case fence != nil && fence.Sealed:
			c.Sealed = true
		case fence != nil && fence.MoverOnly:
			c.Unfinished = true
		case fence == nil:
			// No fence in force: a copy a move was creating (its fence
			// not set yet, so it holds no rows), or a copy nobody
			// accounts for, left alone.
			// A fence table without its state row (a crash between
			// the two, or a clean-up's mark that failed) is no fence.
			seen, err := seeTarget(ctx, db, schema, false)
			if err != nil {
				return fail(err)
			}
			hasFence := seen.fenced
			empty, err := tablesEmpty(ctx, db, schema, tables)
			if err != nil {
				return fail(err)
			}
			c.Unfinished = empty && (!hasFence || len(tables) == 0)
		}
		l.Copies = append(l.Copies, c)
	}
	return l, nil
}

// DropUnfinishedCopies drops what killed or stopped moves of shard left on
// databases other than its home: the copies a move was building
// (CopyLeft.Unfinished) and the staging schemas, and returns what it
// dropped. It leaves the old copies of finished moves (DropShardCopy drops
// them) and copies nobody accounts for. It holds the shard's move lock on
// its home meanwhile, so it returns ErrMoveInProgress while a move of the
// shard runs, and never drops the copy a move is building. Judged against
// r's map: load the catalog's into r first. A map that shows itself stale
// (its home holds no copy of the shard, or another database holds one
// that takes writes: a move from there may be building the copies that
// look unfinished) fails it with ErrShardMoved, nothing dropped.
func DropUnfinishedCopies(ctx context.Context, r *shardid.Router, shard int) (Leftovers, error) {
	if err := checkMove(r, shard); err != nil {
		return Leftovers{}, err
	}
	schema, home := r.Schema(shard), dbOf(r, shard)
	names, dbs := r.Names(), r.Databases()
	done := Leftovers{Shard: shard, Schema: schema, Home: names[home]}
	lock, err := tryMoveLock(ctx, dbs[home], schema)
	if err != nil {
		return done, fmt.Errorf("shardid: shard %d on %s: %w", shard, names[home], err)
	}
	defer lock.release()
	l, err := findLeftovers(ctx, r, shard, false)
	if err != nil {
		return done, err
	}
	if err := l.checkHome(ctx, dbs[home], shard); err != nil {
		return done, err
	}
	// Each copy to drop as found under the lock: dropped only if it is
	// still so (dropCopyAsSeen).
	seen := map[string]targetSeen{}
	// The home's tables: those whose copies a drop of a copy clears of
	// the files MariaDB may leave (dropDatabaseMySQL); PostgreSQL's
	// drops need none.
	var tables []string
	if dbs[home].Dialector.Name() == "mysql" {
		if tables, err = baseTables(ctx, dbs[home], schema); err != nil {
			return done, err
		}
	}
	for _, c := range l.Copies {
		if c.Unfinished {
			if seen[c.Database], err = seeTarget(ctx, dbs[slices.Index(names, c.Database)], schema, false); err != nil {
				return done, err
			}
		}
	}
	if err := lock.ensure(ctx, "dropping the unfinished copies"); err != nil {
		return done, err
	}
	pauseAt(ctx, "drop copies")
	for _, s := range l.Staging {
		db := dbs[slices.Index(names, s.Database)]
		if err := db.WithContext(ctx).Exec(`DROP SCHEMA IF EXISTS "` + s.Schema + `" CASCADE`).Error; err != nil {
			return done, fmt.Errorf("shardid: dropping %s on %s: %w", s.Schema, s.Database, err)
		}
		done.Staging = append(done.Staging, s)
	}
	for _, c := range l.Copies {
		if !c.Unfinished {
			continue
		}
		// Dropped with the home's fence held unsealed (holdUnsealed): a
		// move paused after its last check of its lock may be sealing the
		// home, and this copy is then the only one that can take the
		// shard's writes.
		err := holdUnsealed(ctx, dbs[home], schema, lock, "dropping the unfinished copy on "+c.Database, func() error {
			db := dbs[slices.Index(names, c.Database)]
			if err := dropCopyAsSeen(ctx, db, schema, tables, seen[c.Database], lock, "dropping the unfinished copy on "+c.Database); err != nil {
				return fmt.Errorf("shardid: dropping the unfinished copy of shard %d on %s: %w", shard, c.Database, err)
			}
			return nil
		})
		if errors.Is(err, errHomeSealed) {
			// The move sealed the home and built this copy in full: it
			// died before its flip, or after it and before it let writes
			// through on the copy, which is then the shard's home and r's
			// map is stale. Either way the copy holds the shard.
			dropped := "nothing was dropped"
			if len(done.Staging) > 0 {
				dropped = fmt.Sprintf("only the %d staging schema(s) were dropped", len(done.Staging))
			}
			return done, withDetail(ErrShardMoved, fmt.Sprintf("shard %d: %s holds a sealed copy and %s the copy a move finished: "+
				"re-run the move with the catalog to finish it (or, if the catalog names %s, Unfence the shard there); %s",
				shard, names[home], c.Database, c.Database, dropped))
		}
		if err != nil {
			return done, err
		}
		done.Copies = append(done.Copies, c)
	}
	return done, nil
}

var errHomeSealed = errors.New("the home is sealed")

// checkHome refuses, with ErrShardMoved, a clean-up that has something to
// drop and a reason to doubt that l's home is the shard's home: the home
// holds no copy of the shard, another database holds one that takes
// writes, or one holds a sealed copy (a move's source) while the home
// has no fence (it was never a move's target). Both are what a stale map shows once the shard moved on from
// the home it names: a move from its real home holds its lock there, not
// on the home this clean-up locked, and the copy (or staging schema) that
// move is building would look unfinished.
func (l Leftovers) checkHome(ctx context.Context, home *gorm.DB, shard int) error {
	drop := len(l.Staging) > 0
	for _, c := range l.Copies {
		drop = drop || c.Unfinished
	}
	if !drop {
		return nil
	}
	ok, err := schemaExists(ctx, home, l.Schema)
	if err != nil {
		return err
	}
	if !ok {
		return withDetail(ErrShardMoved, fmt.Sprintf("shard %d: the map places it on %s, which holds no copy of it: the map is stale (load the catalog's into the router), "+
			"or the shard was never created there; nothing was dropped", shard, l.Home))
	}
	fenced, err := tableExists(ctx, home, l.Schema, fenceTable)
	if err != nil {
		return err
	}
	for _, c := range l.Copies {
		if !c.Sealed && !c.Unfinished {
			return withDetail(ErrShardMoved, fmt.Sprintf("shard %d: %s holds a copy of it that takes writes, beside %s, its home by the map: the map may be stale "+
				"(load the catalog's into the router), and a move from that copy may be building the copies to drop; if the map is current, "+
				"that copy is nobody's (drop it by hand first); nothing was dropped", shard, c.Database, l.Home))
		}
		// A sealed copy is a move's source: that move made its target
		// (the home, by a current map) with a fence. A home without one
		// is a schema made since by a stale map's Migrate, and the
		// sealed copy's move, under way, is flipping to a copy that
		// looks unfinished.
		if c.Sealed && !fenced {
			return withDetail(ErrShardMoved, fmt.Sprintf("shard %d: %s holds a sealed copy of it, but %s, its home by the map, was never a move's target (no fence): "+
				"the map is stale (load the catalog's into the router), and a move from %s may be flipping to the copies to drop; nothing was dropped",
				shard, c.Database, l.Home, c.Database))
		}
	}
	return nil
}

// holdUnsealed runs f in a transaction on db that holds the fence's row of
// schema under a shared lock, once it found it not sealed and lock (asked
// with the row held) still held; errHomeSealed, f not run, if it is
// sealed. A move's seal (sealFence) waits for the row, and then finds its
// lock lost; with no fence table, f runs after the lock's check.
func holdUnsealed(ctx context.Context, db *gorm.DB, schema string, lock *moveLock, step string, f func() error) error {
	ok, err := tableExists(ctx, db, schema, fenceTable)
	if err != nil {
		return err
	}
	if !ok {
		if err := lock.ensure(ctx, step); err != nil {
			return err
		}
		return f()
	}
	q := "SELECT sealed FROM " + quoteTable(db, schema, fenceTable) + " WHERE id = 1" + forShare(db.Dialector.Name() == "mysql")
	return lockedTx(ctx, db, schema, func(tx *gorm.DB) error {
		var sealed []bool
		if err := tx.Raw(q).Scan(&sealed).Error; err != nil {
			return err
		}
		if err := lock.ensure(ctx, step); err != nil {
			return err
		}
		if len(sealed) == 1 && sealed[0] {
			return errHomeSealed
		}
		return f()
	})
}

// tryMoveLock takes the move lock of schema on db, without waiting:
// ErrMoveInProgress while a move of the shard holds it.
func tryMoveLock(ctx context.Context, db *gorm.DB, schema string) (*moveLock, error) {
	return lockMove(ctx, db, schema, -1, nil)
}

func schemaExists(ctx context.Context, db *gorm.DB, schema string) (bool, error) {
	// pg_namespace on PostgreSQL: information_schema hides a schema from
	// a role without privileges on it.
	q := "SELECT count(*) FROM pg_namespace WHERE nspname = ?"
	if db.Dialector.Name() == "mysql" {
		q = "SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?"
	}
	var n int64
	err := db.WithContext(ctx).Raw(q, schema).Scan(&n).Error
	return n > 0, err
}

// tableExists reports whether schema on db holds a table (or a view)
// named table. On PostgreSQL it reads pg_class, which shows every table
// to every role: information_schema hides one that the role has no
// privilege on, and a move's or a split's check that found a fence
// missing where another role's fence stands would go wrong. On
// MySQL/MariaDB information_schema is all there is, and it hides such a
// table too.
func tableExists(ctx context.Context, db *gorm.DB, schema, table string) (bool, error) {
	q := `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = ? AND c.relname = ? AND c.relkind IN ('r', 'p', 'v', 'm', 'f')`
	if db.Dialector.Name() == "mysql" {
		q = "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?"
	}
	var n int64
	err := db.WithContext(ctx).Raw(q, schema, table).Scan(&n).Error
	return n > 0, err
}

// schemasWithTable returns those of schemas on db that hold a table
// named table, read as tableExists reads one.
func schemasWithTable(ctx context.Context, db *gorm.DB, schemas []string, table string) ([]string, error) {
	q := `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname IN ? AND c.relname = ? AND c.relkind IN ('r', 'p', 'v', 'm', 'f')`
	if db.Dialector.Name() == "mysql" {
		q = "SELECT table_schema FROM information_schema.tables WHERE table_schema IN ? AND table_name = ?"
	}
	var found []string
	err := db.WithContext(ctx).Raw(q, schemas, table).Scan(&found).Error
	return found, err
}

// columnExists reports whether table of schema on db has a column named
// column: from pg_attribute on PostgreSQL, which shows it to every role,
// as tableExists does.
func columnExists(ctx context.Context, db *gorm.DB, schema, table, column string) (bool, error) {
	q := `SELECT count(*) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = ? AND c.relname = ? AND a.attname = ? AND a.attnum > 0 AND NOT a.attisdropped`
	if db.Dialector.Name() == "mysql" {
		q = "SELECT count(*) FROM information_schema.columns WHERE table_schema = ? AND table_name = ? AND column_name = ?"
	}
	var n int64
	err := db.WithContext(ctx).Raw(q, schema, table, column).Scan(&n).Error
	return n > 0, err
}

// shardTables returns the base tables of schema but shardid's own.
func shardTables(ctx context.Context, db *gorm.DB, schema string) ([]string, error) {
	var names []string
	// pg_class, which shows a table of another role (tableExists).
	q := `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = ? AND c.relkind IN ('r', 'p') AND c.relname <> ? AND c.relname <> ? ORDER BY 1`
	if db.Dialector.Name() == "mysql" {
		q = "SELECT table_name FROM information_schema.tables WHERE table_schema = ? AND table_type = 'BASE TABLE' AND table_name <> ? AND table_name <> ? ORDER BY table_name"
	}
	err := db.WithContext(ctx).Raw(q, schema, fenceTable, changeTable).Scan(&names).Error
	return names, err
}

// tablesEmpty reports whether tables of schema hold no row.
func tablesEmpty(ctx context.Context, db *gorm.DB, schema string, tables []string) (bool, error) {
	for _, t := range tables {
		var n int64
		if err := db.WithContext(ctx).Raw("SELECT count(*) FROM (SELECT 1 FROM " + quoteTable(db, schema, t) + " LIMIT 1) x").Scan(&n).Error; err != nil {
			return false, err
		}
		if n > 0 {
			return false, nil
		}
	}
	return true, nil
}

// captureLeft returns the capture triggers and change log of schema on db,
// or nil if there are none.
func captureLeft(ctx context.Context, db *gorm.DB, schema string) (*CaptureLeft, error) {
	var tables []string
	q := `SELECT DISTINCT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = ? AND t.tgname LIKE 'shardid\_capture%' ORDER BY 1`
	if db.Dialector.Name() == "mysql" {
		q = "SELECT DISTINCT EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS WHERE " + triggersOfSchema + " AND TRIGGER_NAME LIKE 'shardid\\_cap\\_%' ORDER BY 1"
	}
	if err := db.WithContext(ctx).Raw(q, schema).Scan(&tables).Error; err != nil {
		return nil, err
	}
	logged, err := tableExists(ctx, db, schema, changeTable)
	if err != nil {
		return nil, err
	}
	if len(tables) == 0 && !logged {
		return nil, nil
	}
	c := &CaptureLeft{Triggers: tables, ChangeLog: logged}
	if logged {
		if c.Changes, err = countChanges(ctx, db, schema); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// fenceLeft returns the fence in force on schema's tables on db, or nil.
func fenceLeft(ctx context.Context, db *gorm.DB, schema string) (*FenceLeft, error) {
	if ok, err := tableExists(ctx, db, schema, fenceTable); err != nil || !ok {
		return nil, err
	}
	// A fence made by an older version has no mover_only column.
	hasMover, err := columnExists(ctx, db, schema, fenceTable, "mover_only")
	if err != nil {
		return nil, err
	}
	mover := "mover_only"
	if !hasMover {
		mover = "FALSE AS mover_only"
	}
	q := `SELECT fenced_until > clock_timestamp() AS live, fenced_until = 'infinity' AS for_good, sealed, ` + mover + `,
		CASE WHEN fenced_until > clock_timestamp() AND fenced_until <> 'infinity'
			THEN EXTRACT(EPOCH FROM fenced_until - clock_timestamp())::float8 ELSE 0 END AS seconds
		FROM "` + schema + `".` + fenceTable + ` WHERE id = 1`
	if db.Dialector.Name() == "mysql" {
		q = "SELECT fenced_until > UTC_TIMESTAMP(6) AS live, fenced_until >= '9999-12-31' AS for_good, sealed, " + mover + "," +
			" GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), fenced_until), 0) / 1e6 AS seconds" +
			" FROM `" + schema + "`.`" + fenceTable + "` WHERE id = 1"
	}
	var row struct {
		Live, ForGood, Sealed, MoverOnly bool
		Seconds                          float64
	}
	if err := db.WithContext(ctx).Raw(q).Scan(&row).Error; err != nil {
		return nil, err
	}
	if !row.Live && !row.Sealed {
		return nil, nil
	}
	f := &FenceLeft{ForGood: row.ForGood || row.Sealed, Sealed: row.Sealed, MoverOnly: row.MoverOnly}
	if !f.ForGood {
		f.Seconds = row.Seconds
	}
	return f, nil
}

// dropCopyAsSeen drops schema on db, a copy found as seen, if it is still
// so and lock still held (step names the step for ErrMoveLockLost): a
// clean-up paused after it found the copy, while its lock was lost and a
// move took the copy over and finished (the copy is then the shard's
// home, its fence changed), must not drop it. On PostgreSQL the check and
// the drop are one transaction. A copy gone by then is not dropped again:
// a database of that name made since is another run's.
func dropCopyAsSeen(ctx context.Context, db *gorm.DB, schema string, tables []string, seen targetSeen, lock *moveLock, step string) error {
	if db.Dialector.Name() == "mysql" {
		return dropCopyAsSeenMySQL(ctx, db, schema, tables, seen, lock, step)
	}
	return lockedTx(ctx, db, schema, func(tx *gorm.DB) error {
		if err := checkCopyAsSeen(ctx, tx, schema, seen, lock, step); err != nil {
			return err
		}
		return tx.Exec(`DROP SCHEMA IF EXISTS "` + schema + `" CASCADE`).Error
	})
}

// checkCopyAsSeen reads, in tx, schema's fence under FOR UPDATE, and
// returns an error unless it is as seen, and lock still held.
func checkCopyAsSeen(ctx context.Context, tx *gorm.DB, schema string, seen targetSeen, lock *moveLock, step string) error {
	now, err := seeTarget(ctx, tx, schema, true)
	if err != nil {
		return err
	}
	if now != seen {
		// Changed: another run's now. (As seen, a copy that a clean-up
		// stopped before its drop marked is dropped: this is that
		// clean-up run again, or another after it died.)
		if err := seen.unchanged(now, schema); err != nil {
			return err
		}
	}
	return lock.ensure(ctx, step)
}

// dropCopyAsSeenMySQL is dropCopyAsSeen on MySQL, whose DROP DATABASE
// commits on its own: every statement on one session that holds a named
// lock of the copy (GET_LOCK) from its check to its drop. The transaction
// that checks marks the copy's fence as being dropped (droppingToken), a
// copy with no fence too: a move that begins meanwhile refuses it. If the
// server ends the session while the run is paused between its check and
// its drop, the drop cannot run (its session is gone) and the lock is
// free: another clean-up drops the copy, and a move may then make it the
// shard's home. While the session lives, another clean-up waits for the
// lock.
func dropCopyAsSeenMySQL(ctx context.Context, db *gorm.DB, schema string, tables []string, seen targetSeen, lock *moveLock, step string) error {
	if !seen.exists {
		return nil
	}
	return withNamedLockMySQL(ctx, db, "shardid_drop:", schema, "dropping the copy "+schema, nil, func(conn *sql.Conn) error {
		g := onConn(ctx, db, conn)
		if !seen.fenced {
			// The mark's table, where there is none (DDL: before the
			// transaction); with no row it is still no fence.
			if err := g.Exec("CREATE TABLE IF NOT EXISTS " + quoteTable(db, schema, fenceTable) + fenceTableMySQL).Error; err != nil {
				return err
			}
		}
		// The mark sets mover_only, which a table made by an older
		// version lacks.
		if err := ensureMoverOnlyMySQL(ctx, g, schema); err != nil {
			return err
		}
		err := retryLocks(ctx, nil, func() error {
			return lockedTxOnce(ctx, conn, g, func(tx *gorm.DB) error {
				if err := checkCopyAsSeen(ctx, tx, schema, seen, lock, step); err != nil {
					return err
				}
				mark := "UPDATE " + quoteTable(db, schema, fenceTable) + " SET token = ?, mover_only = TRUE, sealed = FALSE, fenced_until = '9999-12-31 23:59:59' WHERE id = 1"
				if !seen.fenced {
					mark = "INSERT INTO " + quoteTable(db, schema, fenceTable) + " (id, fenced_until, token, sealed, mover_only) VALUES (1, '9999-12-31 23:59:59', ?, FALSE, TRUE)"
				}
				return tx.Exec(mark, droppingToken).Error
			})
		})
		if err != nil {
			return err
		}
		pauseAt(ctx, "drop database")
		return dropDatabaseMySQL(g, schema, tables, func() error { return lock.ensure(ctx, step) })
	})
}

// dropDatabaseMySQL drops the database schema (MySQL) through db (a
// session, a transaction or a pool), curing on the way a file that
// MariaDB leaves behind.
//
// A CREATE TRIGGER on a table that has triggers first copies the table's
// trigger file to "<table>.TRG-", and deletes the copy at its end through
// an entry of the server's DDL log that it skips while the statement's
// own entry is active; that entry is released just before, and another
// session's DDL can take its slot in between (MariaDB 10.6 and later;
// sql_trigger.cc, ddl_log.cc). Copies were left, the server knowing
// nothing of them, in 29 to 34 of a benchmark's 2,000 shard databases,
// whose fence triggers are created four sessions at a time, and in one
// database in a few hundred of the tests'. DROP DATABASE then drops the
// tables but fails with error 1010 ("Directory not empty") and leaves the
// database.
//
// The cure needs no access to the server's files, which a managed server
// does not give: a CREATE TRIGGER on a table of that name that already has
// one copies the table's trigger file over the stale copy, then deletes
// it. On error 1010 for a directory not empty, each table the database
// held gets a stand-in with two triggers (clearTriggerCopiesMySQL), and
// the database is dropped again, up to dropAttemptsMySQL times in all: the
// cure's own CREATE TRIGGER can meet the same race. Before each cure,
// check (if not nil) must pass: the caller's lock still held. Once begun,
// a cure and its drop run to their end whatever ctx does (within
// cureTimeoutMySQL), and a cure that fails is followed by one more drop:
// no stand-in outlives it. A file of another kind still fails, naming the
// fix.
//
// The tables are those schema holds, and known: the tables the caller
// knows the database may have held, for a database whose tables an
// earlier DROP DATABASE dropped before it failed; but the move's own
// (isInternalTable), which have no triggers.
func dropDatabaseMySQL(db *gorm.DB, schema string, known []string, check func() error) error {
	var tables []string
	if err := db.Raw("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE'", schema).Scan(&tables).Error; err != nil {
		return err
	}
	for _, t := range known {
		if !slices.Contains(tables, t) {
			tables = append(tables, t)
		}
	}
	tables = slices.DeleteFunc(tables, isInternalTable)
	slices.Sort(tables)
	drop := "DROP DATABASE IF EXISTS " + quoteIdent(db, schema)
	err := db.Exec(drop).Error
	for try := 1; try < dropAttemptsMySQL && dirNotEmptyMySQL(err); try++ {
		if check != nil {
			if cerr := check(); cerr != nil {
				return fmt.Errorf("%w: a file the server does not know of is left in database %s's directory (MariaDB's <table>.TRG-, which shardid clears), and it stopped before clearing it: %w", err, schema, cerr)
			}
		}
		parent := db.Statement.Context
		if parent == nil {
			parent = context.Background()
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), cureTimeoutMySQL)
		cure := db.WithContext(ctx)
		cerr := clearTriggerCopiesMySQL(cure, schema, tables)
		derr := cure.Exec(drop).Error
		cancel()
		if cerr != nil {
			if derr == nil {
				return nil // the stand-ins made before the failure cleared it
			}
			return fmt.Errorf("%w: a file the server does not know of is left in database %s's directory, and clearing the <table>.TRG- files MariaDB leaves failed: %w; remove the file from the server's data directory, then run again", derr, schema, cerr)
		}
		err = derr
	}
	if dirNotEmptyMySQL(err) {
		return fmt.Errorf("%w: a file the server does not know of is left in database %s's directory, not a <table>.TRG- of its tables (%s), which shardid clears: remove it from the server's data directory, then run again", err, schema, strings.Join(tables, ", "))
	}
	return err
}

// cureTimeoutMySQL bounds a cure of dropDatabaseMySQL and its drop, which
// run on once begun: a few statements on an idle database.
const cureTimeoutMySQL = 30 * time.Second

// dropAttemptsMySQL is how many times dropDatabaseMySQL drops a database
// that a file left behind keeps.
const dropAttemptsMySQL = 3

// dirNotEmptyMySQL reports whether err is MySQL's error 1010 for a
// database's directory not empty once its tables are dropped (errno 39 on
// Linux, 66 on BSDs and macOS), not for another reason (errno 13, a
// permission; 16, busy).
func dirNotEmptyMySQL(err error) bool {
	if err == nil {
		return false
	}
	m := err.Error()
	return strings.Contains(m, "Error 1010") &&
		(strings.Contains(m, "Directory not empty") || strings.Contains(m, "errno: 39") || strings.Contains(m, "errno: 66"))
}

// clearTriggerCopiesMySQL clears the "<table>.TRG-" copies that MariaDB may
// have left in schema's directory for tables, the tables schema held
// before a DROP DATABASE that dropped them and failed: each gets a
// stand-in with two triggers, the second of which copies the stand-in's
// trigger file over the stale copy and deletes it (dropDatabaseMySQL). The
// stand-ins go with the database.
func clearTriggerCopiesMySQL(db *gorm.DB, schema string, tables []string) error {
	for i, t := range tables {
		table := quoteIdent(db, schema) + "." + quoteIdent(db, t)
		stmts := []string{"CREATE TABLE IF NOT EXISTS " + table + " (shardid_stand_in INT)"}
		for _, event := range []string{"INSERT", "DELETE"} {
			name := quoteIdent(db, schema) + "." + quoteIdent(db, fmt.Sprintf("shardid_clear_%d_%s", i, strings.ToLower(event)))
			stmts = append(stmts, "CREATE TRIGGER "+name+" BEFORE "+event+" ON "+table+" FOR EACH ROW SET @shardid_clear = 1")
		}
		for _, q := range stmts {
			if err := db.Exec(q).Error; err != nil {
				return fmt.Errorf("%s: %w", t, err)
			}
		}
	}
	return nil
}
