package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/shardid/shardid/internal/routesql"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// Change capture: while a shard moves, triggers on its tables record the
// primary key of every inserted, updated or deleted row in a change table
// of the shard's own schema (PostgreSQL) or database (MySQL/MariaDB). The
// mover applies a change by re-reading the row's current state from the
// source by its key: if it exists it is written to the target, otherwise
// it is deleted there. Applying is idempotent and the order of changes is
// irrelevant, so a change applied twice, or after a later one, does no
// harm, and a mover that dies between applying changes and deleting them
// from the log loses nothing.
//
// Why triggers and not PostgreSQL's logical replication: triggers work the
// same on PostgreSQL and MySQL/MariaDB; they need no wal_level=logical (a
// server restart on most installations), no replication privilege and no
// replication slot, which, left behind by a mover that died, would hold
// back WAL on the source until someone drops it. Their cost is one more
// row written per row changed on the moving shard, for the time of the
// move only. The trigger and its row commit or roll back with the write.

// changeTable is the change log of a moving shard, in the shard's schema.
const changeTable = routesql.ChangeLogTable

// captureTrigger names the capture trigger of table for event (i, u, d on
// MySQL, which has no trigger for several events), within 64 characters.
func captureTrigger(letter, table string) string {
	return triggerName("shardid_cap_"+letter+"_", table)
}

// triggerName is prefix+table, or, past MySQL's 64 characters, prefix and
// a hash of table.
func triggerName(prefix, table string) string {
	if len(prefix+table) <= 64 {
		return prefix + table
	}
	h := fnv.New64a()
	h.Write([]byte(table))
	return prefix + strconv.FormatUint(h.Sum64(), 16)
}

// quoteTable quotes schema.table for db's dialect. Both names were
// validated against schemaName.
func quoteTable(db *gorm.DB, schema, table string) string {
	if db.Dialector.Name() == "mysql" {
		return "`" + schema + "`.`" + table + "`"
	}
	return `"` + schema + `"."` + table + `"`
}

// quoteIdent quotes a column name read from the database's catalog.
func quoteIdent(db *gorm.DB, name string) string {
	if db.Dialector.Name() == "mysql" {
		return "`" + strings.ReplaceAll(name, "`", "``") + "`"
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// startCapture (re)creates the change log of tables of schema on db, empty,
// with its triggers. Once it returns, every write to those tables that a
// later read does not see is recorded: creating a trigger waits for the
// writers under way on its table (PostgreSQL's SHARE ROW EXCLUSIVE lock,
// MySQL's metadata lock), so they are committed, and every later write
// fires it.
//
// It drops the log there was, which may be another run's: a run paused
// after its last check of its lock, while another took the move over,
// would drop the log of that run's copy, whose verification trusts it.
// So the log is dropped and created again under a lock of the schema's
// capture that every startCapture takes (a transaction's advisory lock on
// PostgreSQL, in the transaction that does it all; GET_LOCK on MySQL, on
// the session that runs every statement), and check (if not nil: the
// run's check of its lock) runs once that lock is held: a rival's
// startCapture comes after this one, or this one fails.
func startCapture(ctx context.Context, db *gorm.DB, schema string, tables []string, check func(context.Context) error) error {
	log := quoteTable(db, schema, changeTable)
	if db.Dialector.Name() == "mysql" {
		return startCaptureMySQL(ctx, db, schema, tables, check)
	}
	fn := fmt.Sprintf(`CREATE OR REPLACE FUNCTION "%[1]s".shardid_capture() RETURNS trigger LANGUAGE plpgsql
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF TG_OP = 'TRUNCATE' THEN
		RAISE EXCEPTION 'shardid: table %% cannot be truncated while its shard moves: the change log cannot record it', TG_TABLE_NAME
			USING ERRCODE = '0A000';
	END IF;
	IF TG_OP <> 'INSERT' THEN
		INSERT INTO "%[1]s".%[2]s (tbl, id) VALUES (TG_TABLE_NAME, OLD.id);
	END IF;
	IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.id IS DISTINCT FROM OLD.id) THEN
		INSERT INTO "%[1]s".%[2]s (tbl, id) VALUES (TG_TABLE_NAME, NEW.id);
	END IF;
	RETURN NULL;
END $$`, schema, changeTable)
	return lockedTx(ctx, db, schema, func(tx *gorm.DB) error {
		if err := tx.Exec("SELECT pg_advisory_xact_lock(hashtext(?))", "shardid:capture:"+schema).Error; err != nil {
			return err
		}
		if check != nil {
			if err := check(ctx); err != nil {
				return err
			}
		}
		// The log there was, and its triggers, which go with the function.
		stmts := []string{fmt.Sprintf(`DROP FUNCTION IF EXISTS "%s".shardid_capture() CASCADE`, schema), "DROP TABLE IF EXISTS " + log,
			fmt.Sprintf("CREATE TABLE %s (seq BIGINT GENERATED BY DEFAULT AS IDENTITY (START WITH %d) PRIMARY KEY, tbl TEXT NOT NULL, id BIGINT NOT NULL)",
				log, changeLogStart()), fn}
		for _, t := range tables {
			stmts = append(stmts, fmt.Sprintf(`CREATE TRIGGER shardid_capture AFTER INSERT OR UPDATE OR DELETE ON %s
				FOR EACH ROW EXECUTE FUNCTION "%s".shardid_capture()`, quoteTable(db, schema, t), schema),
				// A TRUNCATE would empty the source behind the change log:
				// refused while the shard moves.
				fmt.Sprintf(`CREATE TRIGGER shardid_capture_truncate BEFORE TRUNCATE ON %s
				FOR EACH STATEMENT EXECUTE FUNCTION "%s".shardid_capture()`, quoteTable(db, schema, t), schema))
		}
		for _, q := range stmts {
			if err := tx.Exec(q).Error; err != nil {
				return err
			}
		}
		return captureOwnedBySchemaOwner(tx, schema)
	})
}

// captureOwnedBySchemaOwner gives the change log and the capture function
// of schema to the schema's owner when a superuser created them: a run by
// the shard's own role after a superuser's run (stopped, killed) keeps
// the log it left, and could not read it ("permission denied for table
// shardid_changes"; found by the fault test). Another role than the owner
// that created them keeps them: the owner's runs, which may drop anything
// in the schema, start a log of their own (captureWhole).
func captureOwnedBySchemaOwner(tx *gorm.DB, schema string) error {
	return ownedBySchemaOwner(tx, schema, changeTable, "shardid_capture", "the change log", true)
}

// changeLogStart is the first seq of a new change log: a random one, so
// that a run that forgets the entries it applied (forgetChanges, by seq)
// after a pause, while another run took the move over and created the log
// again, cannot name that run's entries: they would start at 1 in both.
func changeLogStart() int64 { return 1 + rand.Int64N(1<<61) }

// stopCapture drops the capture triggers of schema on db and the change
// log, if they exist: a move that ends, fails or is aborted leaves no
// trigger that keeps logging writes. Like startCapture, it does so under
// the lock of the schema's capture, and runs check (if not nil: the run's
// check of its lock) once that lock is held: an abort or a clean-up paused
// after its last check, while another run took the move over, must not
// drop that run's log.
func stopCapture(ctx context.Context, db *gorm.DB, schema string, check func(context.Context) error) error {
	if exists, err := schemaExists(ctx, db, schema); err != nil || !exists {
		return err
	}
	if db.Dialector.Name() == "mysql" {
		return withCaptureLockMySQL(ctx, db, schema, check, func(conn *sql.Conn) error {
			return stopCaptureMySQLOn(ctx, conn, db, schema)
		})
	}
	locked := func(f func(tx *gorm.DB) error) error {
		return lockedTx(ctx, db, schema, func(tx *gorm.DB) error {
			if err := tx.Exec("SELECT pg_advisory_xact_lock(hashtext(?))", "shardid:capture:"+schema).Error; err != nil {
				return err
			}
			if check != nil {
				if err := check(ctx); err != nil {
					return err
				}
			}
			return f(tx)
		})
	}
	// First the function made a no-op, which locks no table: if dropping
	// the triggers cannot get its locks (a transaction stays open on the
	// tables), writes are no longer logged all the same.
	hasFn := func(tx *gorm.DB) (bool, error) {
		var fn int64
		err := tx.Raw("SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = ? AND p.proname = 'shardid_capture'", schema).Scan(&fn).Error
		return fn > 0, err
	}
	err := locked(func(tx *gorm.DB) error {
		if ok, err := hasFn(tx); err != nil || !ok {
			return err
		}
		return tx.Exec(fmt.Sprintf(`CREATE OR REPLACE FUNCTION "%s".shardid_capture() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$`, schema)).Error
	})
	if err != nil {
		return err
	}
	// The function's triggers go with it. With neither the function nor
	// the log there, nothing runs: even DROP ... IF EXISTS needs USAGE on
	// the schema, which a role need not have on a schema it never moved.
	return locked(func(tx *gorm.DB) error {
		fn, err := hasFn(tx)
		if err != nil {
			return err
		}
		logged, err := tableExists(ctx, tx, schema, changeTable)
		if err != nil || (!fn && !logged) {
			return err
		}
		return tx.Exec(fmt.Sprintf(`DROP FUNCTION IF EXISTS "%s".shardid_capture() CASCADE; DROP TABLE IF EXISTS %s`,
			schema, quoteTable(db, schema, changeTable))).Error
	})
}

// placeholders returns n placeholders for db's dialect, from the first+1th.
func placeholders(db *gorm.DB, first, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		if db.Dialector.Name() == "mysql" {
			b.WriteByte('?')
		} else {
			b.WriteString("$" + strconv.Itoa(first+i+1))
		}
	}
	return b.String()
}

// sqlDB returns db's pool.
func sqlDB(db *gorm.DB) (*sql.DB, error) { return db.DB() }

// changeBatch is one read of the change log: the keys changed per table,
// and the log entries read.
type changeBatch struct {
	keys map[string][]int64
	seqs []int64
}

// readChanges reads up to limit entries of the change log of schema.
// countChanges returns the number of entries in the change log of schema.
func countChanges(ctx context.Context, db *gorm.DB, schema string) (int64, error) {
	var n int64
	err := db.WithContext(ctx).Raw("SELECT count(*) FROM " + quoteTable(db, schema, changeTable)).Scan(&n).Error
	return n, err
}

func readChanges(ctx context.Context, db *gorm.DB, schema string, limit int) (changeBatch, error) {
	b := changeBatch{keys: map[string][]int64{}}
	// READ COMMITTED (readSession): only committed entries, whose rows
	// are committed with them.
	err := readSession(ctx, db, func(q querier) error {
		rows, err := q.QueryContext(ctx, "SELECT seq, tbl, id FROM "+quoteTable(db, schema, changeTable)+" ORDER BY seq LIMIT "+strconv.Itoa(limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		return b.scan(rows)
	})
	return b, err
}

// scan reads the entries of rows (seq, tbl, id) into b.
func (b *changeBatch) scan(rows *sql.Rows) error {
	seen := map[string]map[int64]bool{}
	for rows.Next() {
		var seq, id int64
		var tbl string
		if err := rows.Scan(&seq, &tbl, &id); err != nil {
			return err
		}
		b.seqs = append(b.seqs, seq)
		if seen[tbl] == nil {
			seen[tbl] = map[int64]bool{}
		}
		if !seen[tbl][id] {
			seen[tbl][id] = true
			b.keys[tbl] = append(b.keys[tbl], id)
		}
	}
	return rows.Err()
}

// pendingKeys returns the keys, by table, that the change log of schema
// holds.
func pendingKeys(ctx context.Context, db *gorm.DB, schema string) (map[string]map[int64]bool, error) {
	return pendingKeysIn(ctx, db, schema, changeTable)
}

// pendingKeysIn is pendingKeys of the change log table of schema.
func pendingKeysIn(ctx context.Context, db *gorm.DB, schema, table string) (map[string]map[int64]bool, error) {
	out := map[string]map[int64]bool{}
	err := readSession(ctx, db, func(q querier) error {
		rows, err := q.QueryContext(ctx, "SELECT DISTINCT tbl, id FROM "+quoteTable(db, schema, table))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var t string
			var id int64
			if err := rows.Scan(&t, &id); err != nil {
				return err
			}
			if out[t] == nil {
				out[t] = map[int64]bool{}
			}
			out[t][id] = true
		}
		return rows.Err()
	})
	return out, err
}

// forgetChanges deletes the entries seqs from the change log of schema.
func forgetChanges(ctx context.Context, db *gorm.DB, schema string, seqs []int64) error {
	return forgetChangesIn(ctx, db, schema, changeTable, seqs)
}

// forgetChangesIn is forgetChanges of the change log table of schema.
func forgetChangesIn(ctx context.Context, db *gorm.DB, schema, table string, seqs []int64) error {
	pool, err := sqlDB(db)
	if err != nil {
		return err
	}
	for len(seqs) > 0 {
		n := min(len(seqs), 1000)
		args := make([]any, n)
		for i, s := range seqs[:n] {
			args[i] = s
		}
		q := "DELETE FROM " + quoteTable(db, schema, table) + " WHERE seq IN (" + placeholders(db, 0, n) + ")"
		if db.Dialector.Name() == "mysql" {
			// Key by key: given a list that covers most of a small change
			// log, InnoDB scans the whole table, and waits for the entry
			// of a writer's transaction not yet committed (which the list
			// never names) for as long as that transaction lasts.
			sel := make([]string, n)
			for i := range sel {
				sel[i] = "SELECT ? AS s"
			}
			q = "DELETE c FROM (" + strings.Join(sel, " UNION ALL ") + ") AS v STRAIGHT_JOIN " +
				quoteTable(db, schema, table) + " AS c ON c.seq = v.s"
		}
		// READ COMMITTED: InnoDB's REPEATABLE READ may lock the gaps of a
		// range of keys, and so wait for a writer's entry not yet
		// committed, or hold back the entries writers add.
		tx, err := pool.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		seqs = seqs[n:]
	}
	return nil
}

// readRowsHashed reads the columns that a copy writes of the rows of table
// with the keys ids through q, and the hash of each (rowHash, over all
// columns).
func readRowsHashed(ctx context.Context, q querier, db *gorm.DB, table string, c columns, ids []int64) ([][]any, map[int64]uint64, error) {
	cols := c.write
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rs, err := q.QueryContext(ctx, "SELECT "+columnList(db, cols)+", "+rowHash(db, c.hashed())+" FROM "+table+" WHERE id IN ("+placeholders(db, 0, len(ids))+")", args...)
	if err != nil {
		return nil, nil, err
	}
	rows, err := scanAll(rs, len(cols)+1)
	if err != nil {
		return nil, nil, err
	}
	hs := make(map[int64]uint64, len(rows))
	for i, row := range rows {
		id, err := asInt64(row[0])
		if err != nil {
			return nil, nil, err
		}
		if hs[id], err = hashOf(row[len(cols)]); err != nil {
			return nil, nil, err
		}
		rows[i] = row[:len(cols)]
	}
	return rows, hs, nil
}

// scanAll reads every row of rows, of n columns each, and closes rows.
func scanAll(rows *sql.Rows, n int) ([][]any, error) {
	defer rows.Close()
	var out [][]any
	for rows.Next() {
		vals := make([]any, n)
		ptrs := make([]any, n)
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		out = append(out, vals)
	}
	return out, rows.Err()
}

func columnList(db *gorm.DB, cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = quoteIdent(db, c)
	}
	return strings.Join(q, ", ")
}

// insertRows inserts rows (values of cols) into table with multi-row
// INSERT statements of at most 60,000 values each, through exec. With
// upsert, a row whose key exists replaces it in place.
func insertRows(ctx context.Context, db *gorm.DB, exec execFunc, table string, cols []string, rows [][]any, upsert bool) error {
	head := "INSERT INTO " + table + " (" + columnList(db, cols) + ") VALUES "
	if db.Dialector.Name() != "mysql" {
		// The source's values, identity columns too.
		head = "INSERT INTO " + table + " (" + columnList(db, cols) + ") OVERRIDING SYSTEM VALUE VALUES "
	}
	tail := ""
	if upsert {
		tail = upsertClause(db, cols)
	}
	return eachInsert(db, head, tail, len(cols), rows, func(q string, args []any, n int) error {
		_, err := exec(ctx, q, args...)
		return err
	})
}

// eachInsert calls f with the statements that insert rows (of width values
// each): head, a list of rows of at most 60,000 values (1,000 rows at
// most), then tail; with each statement's arguments and its row count.
func eachInsert(db *gorm.DB, head, tail string, width int, rows [][]any, f func(q string, args []any, n int) error) error {
	per := max(1, min(1000, 60000/width))
	for len(rows) > 0 {
		n := min(len(rows), per)
		var b strings.Builder
		b.WriteString(head)
		args := make([]any, 0, n*width)
		for i, row := range rows[:n] {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("(" + placeholders(db, len(args), width) + ")")
			args = append(args, row...)
		}
		b.WriteString(tail)
		if err := f(b.String(), args, n); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// upsertClause makes an INSERT of cols (the first is "id") replace the
// columns of a row whose key exists.
func upsertClause(db *gorm.DB, cols []string) string {
	set := make([]string, 0, len(cols))
	for _, c := range cols[1:] {
		q := quoteIdent(db, c)
		if db.Dialector.Name() == "mysql" {
			set = append(set, q+" = VALUES("+q+")")
		} else {
			set = append(set, q+" = EXCLUDED."+q)
		}
	}
	if db.Dialector.Name() == "mysql" {
		if len(set) == 0 {
			return " ON DUPLICATE KEY UPDATE id = id"
		}
		return " ON DUPLICATE KEY UPDATE " + strings.Join(set, ", ")
	}
	if len(set) == 0 {
		return " ON CONFLICT (id) DO NOTHING"
	}
	return " ON CONFLICT (id) DO UPDATE SET " + strings.Join(set, ", ")
}

// isUniqueViolation reports whether err is a duplicate key of a unique
// index: PostgreSQL's SQLSTATE 23505, MySQL's error 1062.
func isUniqueViolation(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "23505"
	}
	return strings.Contains(err.Error(), "Error 1062")
}

// applyKeys brings the rows of table (of schema) with the keys ids on dst
// to their current state on src: it re-reads them from src and, in one
// transaction on dst, deletes those that src no longer has and writes the
// others. On PostgreSQL it writes them in place (an upsert, not a delete
// and an insert, so that a foreign key from another of the shard's tables
// does not trip over a row that was only updated); if two rows swapped the
// values of another unique index, the chunk is applied again as a delete
// and an insert. MySQL deletes and inserts (its mover cascades nowhere,
// and ON DUPLICATE KEY UPDATE would update whichever row holds a
// duplicate of another unique index). If a row of the target outside the
// chunk holds a value of a unique index that a row of the chunk now has
// (a swap whose other half comes in a later chunk), that row is applied
// with the chunk. It is idempotent.
//
// With rc, every row is verified as it is written: in the same
// transaction, its hash on dst after the write must equal its hash on src
// when it was re-read (rowCheck.applied); rc keeps the target's totals.
//
// Each of its transactions on dst holds hold's fences first (fenceHold).
func applyKeys(ctx context.Context, src, dst *gorm.DB, hold fenceHold, schema, table string, c columns, ids []int64, rc *rowCheck) error {
	return applyKeysFrom(ctx, src, dst, hold, "", schema, table, c, ids, rc)
}

// applyKeysFrom is applyKeys reading the source's rows from srcTable, a
// table or a derived table (a split reads a shard's rows of a monolith's
// table), or, if it is empty, from the target's table name on src.
func applyKeysFrom(ctx context.Context, src, dst *gorm.DB, hold fenceHold, srcTable, schema, table string, c columns, ids []int64, rc *rowCheck) error {
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 1000)]
		ids = ids[len(chunk):]
		if err := applyChunk(ctx, src, dst, hold, srcTable, schema, table, c, chunk, rc); err != nil {
			return fmt.Errorf("shardid: applying changed rows of %s: %w", quoteTable(dst, schema, table), err)
		}
	}
	return nil
}

// applyChunk applies chunk (at most 1000 keys) of table: see applyKeys.
//
// When a row of the chunk now holds a value of a unique index that a row
// of the target outside the chunk still holds, that row is stale: the
// source cannot hold the value twice, so its own change waits in the log.
// It is evicted (deleted on the target in the same transaction, and in
// doubt until its change is applied, see rowCheck.evicted), which frees
// the value for the chunk however long the chain of such rows.
func applyChunk(ctx context.Context, src, dst *gorm.DB, hold fenceHold, srcTable, schema, table string, c columns, chunk []int64, rc *rowCheck) error {
	cols, qt := c.write, quoteTable(dst, schema, table)
	if srcTable == "" {
		srcTable = qt
	}
	upsert := dst.Dialector.Name() != "mysql"
	var evict []int64
	for round := 0; ; round++ {
		var (
			rows           [][]any
			srcH, old, now map[int64]uint64
		)
		err := readSession(ctx, src, func(q querier) (err error) {
			rows, srcH, err = readRowsHashed(ctx, q, src, srcTable, c, chunk)
			return err
		})
		if err != nil {
			return fmt.Errorf("re-reading them: %w", err)
		}
		var gone []any
		for _, id := range chunk {
			if _, ok := srcH[id]; !ok {
				gone = append(gone, id)
			}
		}
		// Through the target's mover-only fence.
		err = moverTx(ctx, dst, func(tx *sql.Tx) (err error) {
			if err := hold.hold(ctx, tx); err != nil {
				return err
			}
			if rc != nil {
				if old, err = keyHashes(ctx, tx, dst, qt, c.hashed(), append(slices.Clone(chunk), evict...)); err != nil {
					return err
				}
			}
			del := gone
			if !upsert {
				del = make([]any, len(chunk))
				for i, id := range chunk {
					del[i] = id
				}
			}
			for _, id := range evict {
				del = append(del, id)
			}
			if len(del) > 0 {
				if _, err := tx.ExecContext(ctx, "DELETE FROM "+qt+" WHERE id IN ("+placeholders(dst, 0, len(del))+")", del...); err != nil {
					return err
				}
			}
			if err := insertRows(ctx, dst, tx.ExecContext, qt, cols, rows, upsert); err != nil {
				return err
			}
			if rc != nil {
				now, err = keyHashes(ctx, tx, dst, qt, c.hashed(), chunk)
			}
			return err
		})
		if err == nil {
			if rc != nil {
				rc.applied(chunk, srcH, old, now)
				rc.evicted(evict, old)
			}
			return nil
		}
		if !isUniqueViolation(err) || round == 3 {
			return err
		}
		more, ferr := conflictingKeys(ctx, dst, schema, table, cols, rows, append(slices.Clone(chunk), evict...))
		switch {
		case ferr != nil:
			return fmt.Errorf("%w (and looking for the rows that hold its values: %v)", err, ferr)
		case len(more) > 0:
			evict = append(evict, more...)
		case upsert:
			// Two rows of the chunk swapped a value: deleted first, then
			// inserted.
			upsert = false
		default:
			return err
		}
	}
}

// conflictingKeys returns the keys of the rows of table on db, not among
// except, that hold a value of one of its unique indexes (but the primary
// key) that one of rows (values of cols) holds.
func conflictingKeys(ctx context.Context, db *gorm.DB, schema, table string, cols []string, rows [][]any, except []int64) ([]int64, error) {
	idx, err := uniqueIndexes(ctx, db, schema, table)
	if err != nil {
		return nil, err
	}
	seen := map[int64]bool{}
	for _, id := range except {
		seen[id] = true
	}
	var out []int64
	for _, u := range idx {
		pos := make([]int, len(u.cols))
		ok := len(rows) > 0
		for i, col := range u.cols {
			if pos[i] = slices.Index(cols, col); pos[i] < 0 {
				ok = false // a generated column: not one the mover writes
			}
		}
		if !ok {
			continue
		}
		// A prefix index (MySQL) compares the prefix.
		key := make([]string, len(u.cols))
		for i, col := range u.cols {
			key[i] = quoteIdent(db, col)
			if u.prefix[i] > 0 {
				key[i] = fmt.Sprintf("LEFT(%s, %d)", key[i], u.prefix[i])
			}
		}
		var args []any
		tuples := make([]string, 0, len(rows))
		for _, row := range rows {
			vals := make([]string, len(u.cols))
			for i, p := range pos {
				vals[i] = placeholders(db, len(args), 1)
				if u.prefix[i] > 0 {
					vals[i] = fmt.Sprintf("LEFT(%s, %d)", vals[i], u.prefix[i])
				}
				args = append(args, row[p])
			}
			tuples = append(tuples, "("+strings.Join(vals, ", ")+")")
		}
		q := "SELECT id FROM " + quoteTable(db, schema, table) + " WHERE (" + strings.Join(key, ", ") + ") IN (" + strings.Join(tuples, ", ") + ")"
		if u.where != "" {
			q += " AND (" + u.where + ")" // a partial index: its rows only
		}
		var ids []int64
		err := readSession(ctx, db, func(qr querier) error {
			rs, err := qr.QueryContext(ctx, q, args...)
			if err != nil {
				return err
			}
			defer rs.Close()
			for rs.Next() {
				var id int64
				if err := rs.Scan(&id); err != nil {
					return err
				}
				ids = append(ids, id)
			}
			return rs.Err()
		})
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	return out, nil
}

// uniqueIndex is a unique index's key columns, the length of the prefix
// each is indexed by (MySQL; 0: all of it), and the predicate of a
// partial index (PostgreSQL).
type uniqueIndex struct {
	cols   []string
	prefix []int
	where  string
}

// uniqueIndexes returns the unique indexes of table but its primary key,
// on plain columns (no expressions).
func uniqueIndexes(ctx context.Context, db *gorm.DB, schema, table string) ([]uniqueIndex, error) {
	var found []struct {
		Idx, Col string
		Prefix   int
		Pred     string
	}
	q := `SELECT ic.relname AS idx, a.attname AS col, 0 AS prefix, coalesce(pg_get_expr(i.indpred, i.indrelid), '') AS pred
		FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_class ic ON ic.oid = i.indexrelid
		CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
		WHERE n.nspname = ? AND c.relname = ? AND i.indisunique AND NOT i.indisprimary
		AND i.indexprs IS NULL AND k.ord <= i.indnkeyatts
		ORDER BY ic.relname, k.ord`
	if db.Dialector.Name() == "mysql" {
		q = "SELECT INDEX_NAME AS idx, coalesce(COLUMN_NAME, '') AS col, coalesce(SUB_PART, 0) AS prefix, '' AS pred FROM information_schema.STATISTICS" +
			" WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0 AND INDEX_NAME <> 'PRIMARY'" +
			" ORDER BY INDEX_NAME, SEQ_IN_INDEX"
	}
	if err := db.WithContext(ctx).Raw(q, schema, table).Scan(&found).Error; err != nil {
		return nil, err
	}
	var out []uniqueIndex
	for i, f := range found {
		if i == 0 || f.Idx != found[i-1].Idx {
			out = append(out, uniqueIndex{where: f.Pred})
		}
		u := &out[len(out)-1]
		u.cols = append(u.cols, f.Col)
		u.prefix = append(u.prefix, f.Prefix)
	}
	// MySQL: an index on an expression has a column without a name.
	return slices.DeleteFunc(out, func(u uniqueIndex) bool { return slices.Contains(u.cols, "") }), nil
}

// pgKeyAction spells, as SQL does, the action of a foreign key in
// pg_constraint's confdeltype or confupdtype (the column for its %s).
const pgKeyAction = `CASE %s WHEN 'c' THEN 'CASCADE' WHEN 'n' THEN 'SET NULL' WHEN 'd' THEN 'SET DEFAULT' WHEN 'r' THEN 'RESTRICT' ELSE 'NO ACTION' END`

// checkCascades refuses to move tables of which one has a foreign key with
// a cascading action (CASCADE, SET NULL, SET DEFAULT) where the cascade
// would escape the change log or the verification. MySQL and MariaDB fire
// no trigger for the rows a cascade changes, so the change log would miss
// them on the source. On PostgreSQL the source's cascades are logged, and
// a superuser mover's writes cascade nowhere on the target
// (session_replication_role = replica); another role's would, behind the
// verification's back (a child row deleted on the target with the parent
// row that a change rewrites).
func checkCascades(ctx context.Context, src, dst *gorm.DB, schema string, tables []string) error {
	type cascade struct {
		Table, Constraint, OnDelete, OnUpdate string
	}
	var found []cascade
	var why string
	if src.Dialector.Name() == "mysql" {
		err := src.WithContext(ctx).Raw(`SELECT TABLE_NAME AS `+"`table`"+`, CONSTRAINT_NAME AS `+"`constraint`"+`, DELETE_RULE AS on_delete, UPDATE_RULE AS on_update
			FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME IN ?
			AND (DELETE_RULE NOT IN ('RESTRICT', 'NO ACTION') OR UPDATE_RULE NOT IN ('RESTRICT', 'NO ACTION'))
			ORDER BY TABLE_NAME, CONSTRAINT_NAME`, schema, tables).Scan(&found).Error
		if err != nil {
			return err
		}
		why = "MySQL fires no trigger for the rows a cascade changes, so a move cannot capture them; " +
			"make the key RESTRICT or NO ACTION (and delete the child rows yourself) before the move"
	} else {
		var super string
		if err := dst.WithContext(ctx).Raw("SELECT current_setting('is_superuser')").Scan(&super).Error; err != nil {
			return err
		}
		if super == "on" {
			return nil
		}
		err := src.WithContext(ctx).Raw(`SELECT c.relname AS table, con.conname AS constraint,
			`+fmt.Sprintf(pgKeyAction, "con.confdeltype")+` AS on_delete, `+fmt.Sprintf(pgKeyAction, "con.confupdtype")+` AS on_update
			FROM pg_constraint con JOIN pg_class c ON con.conrelid = c.oid JOIN pg_namespace n ON c.relnamespace = n.oid
			WHERE con.contype = 'f' AND n.nspname = ? AND c.relname IN ?
			AND (con.confdeltype IN ('c', 'n', 'd') OR con.confupdtype IN ('c', 'n', 'd'))
			ORDER BY c.relname, con.conname`, schema, tables).Scan(&found).Error
		if err != nil {
			return err
		}
		why = "the mover is not a superuser, so its writes on the target would cascade behind the verification; " +
			"move as a superuser (whose writes cascade nowhere), or make the key RESTRICT or NO ACTION"
	}
	if len(found) > 0 {
		f := found[0]
		return withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("%s.%s has foreign key %s with ON DELETE %s ON UPDATE %s: %s",
			schema, f.Table, f.Constraint, f.OnDelete, f.OnUpdate, why))
	}
	return nil
}

// startCaptureMySQL creates the change log and its triggers on MySQL and
// MariaDB. The triggers are created under LOCK TABLES ... WRITE on a
// session of their own: MariaDB fails a write that opens its table while a
// trigger that uses another table is being created ("Table ... doesn't
// exist"), and the lock keeps writes out for those few milliseconds.
func startCaptureMySQL(ctx context.Context, db *gorm.DB, schema string, tables []string, check func(context.Context) error) error {
	log := quoteTable(db, schema, changeTable)
	return withCaptureLockMySQL(ctx, db, schema, check, func(conn *sql.Conn) error {
		if err := stopCaptureMySQLOn(ctx, conn, db, schema); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("CREATE TABLE %s (seq BIGINT AUTO_INCREMENT PRIMARY KEY, tbl VARCHAR(64) NOT NULL, id BIGINT NOT NULL) ENGINE=InnoDB AUTO_INCREMENT=%d",
			log, changeLogStart())); err != nil {
			return err
		}
		return withTablesLockedOn(ctx, conn, db, schema, tables, func() error {
			return createCaptureTriggersMySQL(ctx, conn, db, schema, tables)
		})
	})
}

// withCaptureLockMySQL runs f on one session of db that holds the lock of
// schema's capture (GET_LOCK), after check (if not nil): every statement
// of f on that session, so that if the session ends, the lock goes with
// it, and so does every statement after.
func withCaptureLockMySQL(ctx context.Context, db *gorm.DB, schema string, check func(context.Context) error, f func(conn *sql.Conn) error) error {
	return withNamedLockMySQL(ctx, db, "shardid_capture:", schema, "the change log of "+schema, check, f)
}

// withNamedLockMySQL runs f on one session of db that holds the named
// lock prefix+schema (GET_LOCK; a hash of schema where the name would pass
// MySQL's 64 characters), after check (if not nil); what names the lock's
// object in ErrLockWait.
func withNamedLockMySQL(ctx context.Context, db *gorm.DB, prefix, schema, what string, check func(context.Context) error, f func(conn *sql.Conn) error) error {
	pool, err := sqlDB(db)
	if err != nil {
		return err
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	name := prefix + schema
	if len(name) > 64 { // MySQL's limit
		h := fnv.New64a()
		h.Write([]byte(schema))
		name = prefix + strconv.FormatUint(h.Sum64(), 16)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", name, int(maxLockRetry.Seconds())).Scan(&got); err != nil {
		return err
	}
	if got.Int64 != 1 {
		return fmt.Errorf("%w: %s: another run holds its lock (%s)", ErrLockWait, what, name)
	}
	defer func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", name); err != nil {
			dropConn(conn)
		}
	}()
	if check != nil {
		if err := check(ctx); err != nil {
			return err
		}
	}
	return f(conn)
}

// execTablesLocked runs stmts in order on a session of db (MySQL) that
// holds tables of schema locked (withTablesLocked).
func execTablesLocked(ctx context.Context, db *gorm.DB, schema string, tables, stmts []string) error {
	return withTablesLocked(ctx, db, schema, tables, func(conn *sql.Conn) error {
		for _, q := range stmts {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
}

// withTablesLocked runs f on a session of db (MySQL) that holds LOCK
// TABLES ... WRITE on tables of schema and on the change log and the
// fence's state table where they exist (the triggers read them): MariaDB
// fails a write that opens its table while a trigger that uses another
// table is being created ("Table ... doesn't exist"), and the lock keeps
// writes out for those few milliseconds.
func withTablesLocked(ctx context.Context, db *gorm.DB, schema string, tables []string, f func(conn *sql.Conn) error) error {
	pool, err := sqlDB(db)
	if err != nil {
		return err
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return withTablesLockedOn(ctx, conn, db, schema, tables, func() error { return f(conn) })
}

// withTablesLockedOn is withTablesLocked on the session conn.
func withTablesLockedOn(ctx context.Context, conn *sql.Conn, db *gorm.DB, schema string, tables []string, f func() error) error {
	var have []string
	q := "SELECT table_name FROM information_schema.tables WHERE table_schema = ? AND table_name IN (?, ?)"
	if err := onConn(ctx, db, conn).Raw(q, schema, changeTable, fenceTable).Scan(&have).Error; err != nil {
		return err
	}
	var locks []string
	for _, t := range append(have, tables...) {
		locks = append(locks, quoteTable(db, schema, t)+" WRITE")
	}
	// A pending LOCK TABLES holds back every writer queued behind it: it
	// waits lockWait at most (lock_wait_timeout counts seconds), and is
	// tried again (retryLocks).
	return withSessionVars(ctx, conn, "SET @shardid_lwt = @@session.lock_wait_timeout, lock_wait_timeout = 1",
		"SET lock_wait_timeout = @shardid_lwt, @shardid_lwt = NULL", func() error {
			defer func() {
				if _, err := conn.ExecContext(context.WithoutCancel(ctx), "UNLOCK TABLES"); err != nil {
					dropConn(conn) // the session ends, and its locks
				}
			}()
			err := retryLocks(ctx, nil, func() error {
				_, err := conn.ExecContext(ctx, "LOCK TABLES "+strings.Join(locks, ", "))
				return err
			})
			if err != nil {
				return err
			}
			return f()
		})
}

// createCaptureTriggersMySQL creates the capture triggers of tables, on a
// session that holds their locks (withTablesLocked).
func createCaptureTriggersMySQL(ctx context.Context, conn *sql.Conn, db *gorm.DB, schema string, tables []string) error {
	log := quoteTable(db, schema, changeTable)
	for _, t := range tables {
		on := quoteTable(db, schema, t)
		add := func(key string) string {
			return "INSERT INTO " + log + " (tbl, id) VALUES ('" + t + "', " + key + ");"
		}
		stmts := []string{
			fmt.Sprintf("CREATE TRIGGER `%s`.`%s` AFTER INSERT ON %s FOR EACH ROW %s", schema, captureTrigger("i", t), on, add("NEW.id")),
			fmt.Sprintf("CREATE TRIGGER `%s`.`%s` AFTER UPDATE ON %s FOR EACH ROW BEGIN %s IF NEW.id <> OLD.id THEN %s END IF; END",
				schema, captureTrigger("u", t), on, add("OLD.id"), add("NEW.id")),
			fmt.Sprintf("CREATE TRIGGER `%s`.`%s` AFTER DELETE ON %s FOR EACH ROW %s", schema, captureTrigger("d", t), on, add("OLD.id")),
		}
		for _, q := range stmts {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return err
			}
		}
	}
	return nil
}

// onConn is db, in ctx, with every statement on the session conn.
func onConn(ctx context.Context, db *gorm.DB, conn *sql.Conn) *gorm.DB {
	tx := db.Session(&gorm.Session{NewDB: true, Context: ctx})
	tx.Statement.ConnPool = conn
	return tx
}

// triggersOfSchema is the condition on information_schema.TRIGGERS that
// picks a schema's triggers, its value the schema: by EVENT_OBJECT_SCHEMA,
// their tables' schema and theirs, which MariaDB and MySQL look a schema
// up by. Filtered by TRIGGER_SCHEMA they open every table of the server
// ("Scanned all databases"): 1.7–2.5 s a read beside 2,000 shards'
// 8,000 tables, at every batch of a split.
const triggersOfSchema = "EVENT_OBJECT_SCHEMA = ?"

// stopCaptureMySQLOn is stopCapture on MySQL, every statement on conn.
func stopCaptureMySQLOn(ctx context.Context, conn *sql.Conn, db *gorm.DB, schema string) error {
	var found []struct{ Name, Table string }
	q := "SELECT TRIGGER_NAME AS name, EVENT_OBJECT_TABLE AS `table` FROM information_schema.TRIGGERS WHERE " + triggersOfSchema + " AND TRIGGER_NAME LIKE 'shardid\\_cap\\_%'"
	if err := onConn(ctx, db, conn).Raw(q, schema).Scan(&found).Error; err != nil {
		return err
	}
	if len(found) > 0 {
		var tables []string
		for _, f := range found {
			if !slices.Contains(tables, f.Table) {
				tables = append(tables, f.Table)
			}
		}
		// With the tables locked, as when they were created.
		err := withTablesLockedOn(ctx, conn, db, schema, tables, func() error {
			for _, f := range found {
				if _, err := conn.ExecContext(ctx, fmt.Sprintf("DROP TRIGGER IF EXISTS `%s`.`%s`", schema, f.Name)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	_, err := conn.ExecContext(ctx, "DROP TABLE IF EXISTS "+quoteTable(db, schema, changeTable))
	return err
}
