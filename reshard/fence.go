package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/shardid/shardid/internal/routesql"
	"strconv"
	"strings"
	"time"

	"math/rand/v2"

	"github.com/jackc/pgx/v5"
	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// fenceTable is the table, in the schema (PostgreSQL) or database (MySQL)
// of a fenced logical shard, whose one row says until when the shard's
// tables refuse writes, by the database's clock, and which fence that is
// (token, bumped by every change), and whether a move sealed it (fenced the
// shard's old copy for good). The triggers read it: they are created
// once and never dropped while a shard moves, so changing the fence (from
// a move's temporary fence to the old copy's fence for good) is one update
// of a row, with no moment without a fence.
const fenceTable = routesql.FenceStateTable

// ensureFence creates what the fence needs on tables of schema, where it
// is missing: the state row (unfenced), the trigger function (PostgreSQL)
// and a trigger per table and event. Creating a trigger waits for the
// writers under way on its table; once it exists, every write reads the
// state row under a shared lock, held to the end of its transaction.
func ensureFence(ctx context.Context, db *gorm.DB, schema string, tables []string) error {
	return ensureFenceIn(ctx, db, schema, schema, tables)
}

// ensureFenceIn is ensureFence on schema in, a staging schema on
// PostgreSQL that will be renamed final: the trigger function reads the
// state row of final, by name, once it runs.
func ensureFenceIn(ctx context.Context, db *gorm.DB, in, final string, tables []string) error {
	if db.Dialector.Name() == "mysql" {
		return ensureFenceMySQL(ctx, db, in, tables)
	}
	return lockedTx(ctx, db, in, func(tx *gorm.DB) error { return ensureFencePG(tx, in, final, tables) })
}

// ensureFencePG is ensureFenceIn on PostgreSQL, in transaction tx.
func ensureFencePG(tx *gorm.DB, in, final string, tables []string) error {
	schema := in
	for _, q := range fenceStatementsPG(in, final) {
		if err := tx.Exec(q).Error; err != nil {
			return err
		}
	}
	if err := fenceOwnedBySchemaOwner(tx, schema); err != nil {
		return err
	}
	for _, t := range tables {
		q := fmt.Sprintf(`"%s"."%s"`, schema, t)
		var n int64
		if err := tx.Raw("SELECT count(*) FROM pg_trigger WHERE tgrelid = ?::regclass AND tgname = 'shardid_fence'", q).Scan(&n).Error; err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		if err := tx.Exec(fenceTriggerPG(schema, t)).Error; err != nil {
			return err
		}
	}
	return nil
}

// fenceStatementsPG are the statements that create the fence's state row
// (unfenced) and trigger function of schema in, to be renamed final, where
// missing: ensureFencePG's, before the triggers.
func fenceStatementsPG(in, final string) []string {
	schema := in
	return []string{
		"SELECT pg_advisory_xact_lock(hashtext('shardid:fence:" + schema + "'))",
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS "%s".%s (id INT PRIMARY KEY, fenced_until TIMESTAMPTZ NOT NULL, token BIGINT NOT NULL, sealed BOOLEAN NOT NULL)`, schema, fenceTable),
		fmt.Sprintf(`ALTER TABLE "%s".%s ADD COLUMN IF NOT EXISTS mover_only BOOLEAN NOT NULL DEFAULT FALSE`, schema, fenceTable),
		fmt.Sprintf(`INSERT INTO "%s".%s (id, fenced_until, token, sealed) VALUES (1, '-infinity', %d, FALSE) ON CONFLICT (id) DO NOTHING`, schema, fenceTable, newFenceToken()),
		fenceFunctionPG(schema, final),
	}
}

// newFenceToken is the token of a fence's new state row: a random one,
// not 0 or 1, so that a schema dropped and created again (an abort, then
// another run) does not give its new fence the token of the old one,
// which a run paused meanwhile still holds (fenceHold compares tokens for
// equality only).
func newFenceToken() int64 { return 1<<40 + rand.Int64N(1<<60) }

// freshMoverFencePG are the statements that give a schema created in the
// same transaction, which no other session can see yet, its fence, fenced
// for the mover with token (fenceForMover's): the state ensureFencePG and
// fenceForMoverTx leave, in fewer statements, with no lock to take.
func freshMoverFencePG(schema string, tables []string, token int64) []string {
	out := []string{
		fmt.Sprintf(`CREATE TABLE "%s".%s (id INT PRIMARY KEY, fenced_until TIMESTAMPTZ NOT NULL, token BIGINT NOT NULL, sealed BOOLEAN NOT NULL, mover_only BOOLEAN NOT NULL DEFAULT FALSE)`, schema, fenceTable),
		fmt.Sprintf(`INSERT INTO "%s".%s (id, fenced_until, token, sealed, mover_only) VALUES (1, 'infinity', %d, FALSE, TRUE)`, schema, fenceTable, token),
		fenceFunctionPG(schema, schema),
	}
	for _, t := range tables {
		out = append(out, fenceTriggerPG(schema, t))
	}
	return out
}

// fenceFunctionPG is the statement that creates (or replaces) the fence's
// trigger function of schema in, reading the state of schema final.
func fenceFunctionPG(in, final string) string {
	return fmt.Sprintf(`CREATE OR REPLACE FUNCTION "%[1]s".shardid_fence() RETURNS trigger LANGUAGE plpgsql
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE u timestamptz; m boolean;
BEGIN
	SELECT fenced_until, mover_only INTO u, m FROM "%[4]s".%[2]s WHERE id = 1 FOR SHARE;
	IF u > clock_timestamp() AND NOT (m AND coalesce(current_setting('shardid.mover', true), '') = 'on') THEN
		RAISE EXCEPTION '%[3]s' USING ERRCODE = '55000';
	END IF;
	RETURN NULL;
END $$`, in, fenceTable, shardid.FenceMessage, final)
}

// fenceTriggerPG is the statement that creates the fence's trigger on
// table of schema.
func fenceTriggerPG(schema, table string) string {
	return fmt.Sprintf(`CREATE TRIGGER shardid_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON "%s"."%s"
			FOR EACH STATEMENT EXECUTE FUNCTION "%s".shardid_fence()`, schema, table, schema)
}

// fenceOwnedBySchemaOwner gives the fence's state table and trigger
// function of schema to the schema's owner when another role (a superuser
// who fenced the shard by hand) created them: only an owner may alter
// them, and the function runs as its owner, so a fence owned by a role
// other than the shard's would block every later move by the shard's own
// roles ("must be owner of table shardid_fence_state").
func fenceOwnedBySchemaOwner(tx *gorm.DB, schema string) error {
	return ownedBySchemaOwner(tx, schema, fenceTable, "shardid_fence", "the fence", false)
}

// ownedBySchemaOwner gives table and function (no arguments) of schema to
// the schema's owner when another role owns table, and names them what
// in its error. With superOnly, only a superuser gives them; another role
// leaves them as they are.
func ownedBySchemaOwner(tx *gorm.DB, schema, table, function, what string, superOnly bool) error {
	var o struct {
		Schema, Owner string
		Super         bool
	}
	err := tx.Raw(`SELECT pg_get_userbyid(n.nspowner) AS schema, pg_get_userbyid(c.relowner) AS owner, current_setting('is_superuser') = 'on' AS super
		FROM pg_namespace n JOIN pg_class c ON c.relnamespace = n.oid WHERE n.nspname = ? AND c.relname = ?`, schema, table).Scan(&o).Error
	if err != nil || o.Schema == o.Owner || o.Schema == "" || (superOnly && !o.Super) {
		return err
	}
	owner := `"` + strings.ReplaceAll(o.Schema, `"`, `""`) + `"`
	for _, q := range []string{
		fmt.Sprintf(`ALTER TABLE "%s".%s OWNER TO %s`, schema, table, owner),
		fmt.Sprintf(`ALTER FUNCTION "%s".%s() OWNER TO %s`, schema, function, owner),
	} {
		if err := tx.Exec(q).Error; err != nil {
			return fmt.Errorf("giving %s of %s to its owner %s: %w", what, schema, o.Schema, err)
		}
	}
	return nil
}

// mysqlFenceEvents are MySQL's row trigger events, by the letter in the
// trigger's name: MySQL has no statement triggers.
var mysqlFenceEvents = [...]struct{ letter, event string }{{"i", "INSERT"}, {"u", "UPDATE"}, {"d", "DELETE"}}

// fenceTriggerMySQL is the statement that creates the fence's trigger
// name for event on table of schema.
//
// A MySQL trigger runs for each row, and its read of the fence's state
// costs several times the write of a small row. A mover writing many rows
// reads the state once per transaction instead (passFenceMySQL), with the
// same lock and the same test, and then names the schema in
// @shardid_fence_checked: the trigger skips its read for a mover's session
// that names its schema. That path is all a mover's copy runs, a row at a
// time, so it is kept short: two null-safe comparisons, and the variables
// declared only on the other path. By hand, an INSERT ... SELECT of
// 1,000,000 rows took 2.0 s into a bare table, 4.1 s through the trigger
// with both tests wrapped in COALESCE and the variables declared for
// every row, 3.7 s through this one.
func fenceTriggerMySQL(schema, table, name, event string) string {
	return fmt.Sprintf("CREATE TRIGGER `%[1]s`.`%[2]s` BEFORE %[3]s ON `%[1]s`.`%[4]s` FOR EACH ROW "+
		"IF NOT (@shardid_mover <=> 1 AND @shardid_fence_checked <=> '%[1]s') THEN BEGIN "+
		"DECLARE u DATETIME(6); DECLARE m BOOLEAN; "+
		"SELECT fenced_until, mover_only INTO u, m FROM `%[1]s`.`%[5]s` WHERE id = 1 LOCK IN SHARE MODE; "+
		"IF u > UTC_TIMESTAMP(6) AND NOT (m AND @shardid_mover <=> 1) THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '%[6]s'; END IF; "+
		"END; END IF",
		schema, name, event, table, fenceTable, shardid.FenceMessage)
}

// fenceTriggerNameMySQL names the fence's trigger of table for event (i,
// u, d), within MySQL's 64 characters: a table of more than 48 gets a
// hash of its name.
func fenceTriggerNameMySQL(letter, table string) string {
	return triggerName("shardid_fence_"+letter+"_", table)
}

// fenceTriggerMark is in the body of every fence trigger fenceTriggerMySQL
// creates; ensureFenceMySQL replaces one without it.
const fenceTriggerMark = "@shardid_fence_checked"

// passFenceMySQL does in tx, a mover's transaction on a MySQL session of
// moverSession, what schema's fence triggers do for each row: it takes the
// shared lock on the fence's state, which it keeps to the end of tx, so
// that the fence cannot change before tx ends, and refuses, as the
// triggers would, if the fence holds off the mover too. Then it tells the
// triggers of schema that tx has been checked (@shardid_fence_checked), so
// that they skip their read for the writes of tx that follow.
//
// The caller runs it again in every transaction, and before writing to
// another schema; moverSession clears the mark before the session goes
// back to the pool.
func passFenceMySQL(ctx context.Context, tx *sql.Tx, schema string) error {
	var refused bool
	err := tx.QueryRowContext(ctx, fmt.Sprintf("SELECT fenced_until > UTC_TIMESTAMP(6) AND NOT mover_only FROM `%s`.`%s` WHERE id = 1 LOCK IN SHARE MODE", schema, fenceTable)).Scan(&refused)
	if err != nil {
		return fmt.Errorf("shardid: reading the fence of %s: %w", schema, err)
	}
	if refused {
		return fmt.Errorf("%w: %s: %s", shardid.ErrShardMoving, schema, shardid.FenceMessage)
	}
	_, err = tx.ExecContext(ctx, "SET @shardid_fence_checked = ?", schema)
	return err
}

// fenceTableMySQL is the definition of the fence's state table, as it
// follows CREATE TABLE name.
const fenceTableMySQL = " (id INT PRIMARY KEY, fenced_until DATETIME(6) NOT NULL, token BIGINT NOT NULL, sealed BOOLEAN NOT NULL, mover_only BOOLEAN NOT NULL DEFAULT FALSE) ENGINE=InnoDB"

// ensureMoverOnlyMySQL adds the mover_only column to schema's fence table
// on db (MySQL) where it lacks it: a table an older version made, or one
// whose creation was cut short between the table and the column.
func ensureMoverOnlyMySQL(ctx context.Context, db *gorm.DB, schema string) error {
	hasCol, err := columnExists(ctx, db, schema, fenceTable, "mover_only")
	if err != nil || hasCol {
		return err
	}
	err = db.WithContext(ctx).Exec(fmt.Sprintf("ALTER TABLE `%s`.`%s` ADD COLUMN mover_only BOOLEAN NOT NULL DEFAULT FALSE", schema, fenceTable)).Error
	if err != nil && !strings.Contains(err.Error(), "Duplicate column") {
		return err
	}
	return nil
}

func ensureFenceMySQL(ctx context.Context, db *gorm.DB, schema string, tables []string) error {
	_, err := ensureFenceMySQLAs(ctx, db, schema, tables)
	return err
}

// ensureFenceMySQLAs is ensureFenceMySQL, and returns the token of the
// state row if it inserted it, or 0 if the row was there.
func ensureFenceMySQLAs(ctx context.Context, db *gorm.DB, schema string, tables []string) (inserted int64, err error) {
	exec := func(q string, args ...any) error { return db.WithContext(ctx).Exec(q, args...).Error }
	if err := exec(fmt.Sprintf("CREATE TABLE IF NOT EXISTS `%s`.`%s`", schema, fenceTable) + fenceTableMySQL); err != nil {
		return 0, err
	}
	if err := ensureMoverOnlyMySQL(ctx, db, schema); err != nil {
		return 0, err
	}
	tok := newFenceToken()
	ins := db.WithContext(ctx).Exec(fmt.Sprintf("INSERT IGNORE INTO `%s`.`%s` (id, fenced_until, token, sealed) VALUES (1, '1000-01-01', %d, FALSE)", schema, fenceTable, tok))
	if ins.Error != nil {
		return 0, ins.Error
	}
	if ins.RowsAffected == 1 {
		inserted = tok
	}
	var have []struct {
		Name string `gorm:"column:name"`
		Body string `gorm:"column:body"`
	}
	if err := db.WithContext(ctx).Raw("SELECT TRIGGER_NAME AS name, ACTION_STATEMENT AS body FROM information_schema.TRIGGERS WHERE "+triggersOfSchema, schema).Scan(&have).Error; err != nil {
		return 0, err
	}
	bodies := map[string]string{}
	for _, h := range have {
		bodies[h.Name] = h.Body
	}
	var stmts []string
	for _, t := range tables {
		for _, ev := range mysqlFenceEvents {
			name := fenceTriggerNameMySQL(ev.letter, t)
			body, ok := bodies[name]
			if ok && strings.Contains(body, fenceTriggerMark) {
				continue
			}
			if ok { // a trigger of an older version: its expiry written in, no mover's bypass, or a read for each of a mover's rows
				stmts = append(stmts, fmt.Sprintf("DROP TRIGGER IF EXISTS `%s`.`%s`", schema, name))
			}
			stmts = append(stmts, fenceTriggerMySQL(schema, t, name, ev.event))
		}
	}
	if len(stmts) == 0 {
		return inserted, nil
	}
	// With the tables locked, as for the capture's triggers
	// (withTablesLocked): a write racing the creation of a trigger that
	// reads another table fails on MariaDB.
	return inserted, withTablesLocked(ctx, db, schema, tables, func(conn *sql.Conn) error {
		for _, q := range stmts {
			if _, err := conn.ExecContext(ctx, q); err != nil && !strings.Contains(err.Error(), "already exists") {
				return err
			}
		}
		return nil
	})
}

// setFence fences tables of schema for d from now by the database's clock
// (for good when d is 0) and returns the fence's token. It first waits for
// the writers under way on those tables (PostgreSQL: a SHARE ROW EXCLUSIVE
// lock; MySQL: the state row's exclusive lock, which waits for the shared
// locks writers hold), so every write before it is committed and every
// write after it sees the fence. It refuses, with ErrShardMoved, to replace
// a move's seal, unless overSeal (a move run again over a source whose
// catalog entry it checked): then the seal must still carry claimed, the
// token this run's claimSeal gave it (ErrMoveLockLost otherwise: a run
// that took the seal over since, while this one was paused, owns it).
//
// It also returns when its last try began (tries that timed out waiting
// for a writer's lock held nobody back for long, see lockedTx): when
// writes began to wait for the fence.
func setFence(ctx context.Context, db *gorm.DB, schema string, tables []string, d time.Duration, overSeal bool, claimed int64) (int64, time.Time, error) {
	var token int64
	var began time.Time
	err := lockedTx(ctx, db, schema, func(tx *gorm.DB) error {
		began = timeNow()
		var cur struct {
			Token  int64 `gorm:"column:token"`
			Sealed bool  `gorm:"column:sealed"`
		}
		st := fmt.Sprintf(`"%s".%s`, schema, fenceTable)
		if db.Dialector.Name() == "mysql" {
			st = fmt.Sprintf("`%s`.`%s`", schema, fenceTable)
		} else if err := lockTables(tx, schema, tables); err != nil {
			return err
		}
		// On MySQL this waits for the writers; then a new statement reads
		// the clock (a statement's UTC_TIMESTAMP is its start).
		if err := tx.Raw("SELECT token, sealed FROM " + st + " WHERE id = 1 FOR UPDATE").Scan(&cur).Error; err != nil {
			return err
		}
		if cur.Sealed && !overSeal {
			return ErrShardMoved
		}
		if cur.Sealed && cur.Token != claimed {
			return fmt.Errorf("%w: the seal of %s carries token %d, not this run's claim %d: another run took it over", ErrMoveLockLost, schema, cur.Token, claimed)
		}
		until := "'infinity'"
		switch {
		case db.Dialector.Name() == "mysql" && d > 0:
			until = "UTC_TIMESTAMP(6) + INTERVAL " + strconv.FormatInt(d.Microseconds(), 10) + " MICROSECOND"
		case db.Dialector.Name() == "mysql":
			until = "'9999-12-31 23:59:59'"
		case d > 0:
			until = "clock_timestamp() + " + strconv.FormatInt(d.Microseconds(), 10) + " * interval '1 microsecond'"
		}
		token = cur.Token + 1
		if cur.Sealed {
			// Over a seal (a move run again): the source refuses every
			// write since that seal, and keeps refusing them, sealed, so
			// that whatever reads the fence meanwhile (DropUnfinishedCopies,
			// DropShardCopy, Unfence) still finds the shard's home sealed
			// and its copy the move's; only the token is this run's.
			return tx.Exec("UPDATE "+st+" SET token = ? WHERE id = 1", token).Error
		}
		return tx.Exec("UPDATE "+st+" SET fenced_until = "+until+", token = ?, sealed = FALSE, mover_only = FALSE WHERE id = 1", token).Error
	})
	return token, began, err
}

// claimSeal makes the seal of schema on db (a move's source, sealed by a
// move that did not flip) this run's: with the fence's row held, it must
// still be sealed, check (the run's check of its lock) must pass, and the
// token changes. A run that sealed it and is about to flip the catalog
// holds the row under a shared lock and flips only while the token is
// its seal's (holdSeal, sealedAs): either its flip is committed before
// this claim is granted, and the caller, reading the catalog after it,
// finds it changed, or this claim is, and that flip is refused.
func claimSeal(ctx context.Context, db *gorm.DB, schema string, check func(context.Context) error) (int64, error) {
	var claimed int64
	err := lockedTx(ctx, db, schema, func(tx *gorm.DB) error {
		var cur []struct {
			Token  int64
			Sealed bool
		}
		if err := tx.Raw("SELECT token, sealed FROM " + quoteTable(db, schema, fenceTable) + " WHERE id = 1 FOR UPDATE").Scan(&cur).Error; err != nil {
			return err
		}
		if len(cur) != 1 || !cur[0].Sealed {
			return fmt.Errorf("%w: the seal of %s changed since the move began: another run took it over", ErrMoveLockLost, schema)
		}
		if err := check(ctx); err != nil {
			return err
		}
		claimed = cur[0].Token + 1
		return tx.Exec("UPDATE " + quoteTable(db, schema, fenceTable) + " SET token = token + 1 WHERE id = 1").Error
	})
	return claimed, err
}

// holdSeal runs f in a transaction on db that holds the fence's row of
// schema under a shared lock, once it found it sealed with token (the
// run's own seal); ErrMoveLockLost, f not run, otherwise: another run of
// the move took the seal over (claimSeal) and is rebuilding the copy.
func holdSeal(ctx context.Context, db *gorm.DB, schema string, token int64, f func() error) error {
	return lockedTx(ctx, db, schema, func(tx *gorm.DB) error {
		if err := sealedAs(tx, schema, token, "another run of the move took it over"); err != nil {
			return err
		}
		return f()
	})
}

// sealedAs reads, in tx, the fence's row of schema under a shared lock,
// kept to the end of tx, and returns ErrMoveLockLost (saying why, if not)
// unless it is sealed with token.
func sealedAs(tx *gorm.DB, schema string, token int64, why string) error {
	q := "SELECT token, sealed FROM " + quoteTable(tx, schema, fenceTable) + " WHERE id = 1" + forShare(tx.Dialector.Name() == "mysql")
	var cur []struct {
		Token  int64
		Sealed bool
	}
	if err := tx.Raw(q).Scan(&cur).Error; err != nil {
		return err
	}
	if len(cur) != 1 || !cur[0].Sealed || cur[0].Token != token {
		return fmt.Errorf("%w: the seal of %s is not this run's any more (%+v, its seal's token %d): %s", ErrMoveLockLost, schema, cur, token, why)
	}
	return nil
}

// lockTables takes a SHARE ROW EXCLUSIVE lock on tables of schema until the
// end of tx: it waits for the writers under way and holds back new ones.
// The queue is fair, so a stream of writers cannot starve it.
func lockTables(tx *gorm.DB, schema string, tables []string) error {
	qs := make([]string, len(tables))
	for i, t := range tables {
		qs[i] = fmt.Sprintf(`"%s"."%s"`, schema, t)
	}
	return tx.Exec("LOCK TABLE " + strings.Join(qs, ", ") + " IN SHARE ROW EXCLUSIVE MODE").Error
}

// sealFence turns the fence with token into a fence for good, if it has
// been in force without a break since it was set: the token is unchanged
// (nobody lifted or replaced it) and it has not run out by the database's
// clock. Otherwise it changes nothing and returns ErrFenceLapsed. check
// (the run's check of its lock) is called with the fence's row held, and
// its error returned: a run paused after its last check, whose lock a
// rival took meanwhile, must not seal the shard's home under the rival,
// which may be dropping the copy it made (DropUnfinishedCopies reads the
// fence under a shared lock, and so waits for a seal under way).
func sealFence(ctx context.Context, db *gorm.DB, schema string, tables []string, token int64, check func(context.Context) error) error {
	var got struct {
		Token int64 `gorm:"column:token"`
		Live  bool  `gorm:"column:live"`
	}
	err := lockedTx(ctx, db, schema, func(tx *gorm.DB) error {
		if db.Dialector.Name() == "mysql" {
			st := fmt.Sprintf("`%s`.`%s`", schema, fenceTable)
			q := "SELECT token, fenced_until > UTC_TIMESTAMP(6) AS live FROM " + st + " WHERE id = 1 FOR UPDATE"
			// The first read waits for the lock; the second judges the
			// time once it is held.
			if err := tx.Raw(q).Scan(&got).Error; err != nil {
				return err
			}
			if err := tx.Raw(q).Scan(&got).Error; err != nil {
				return err
			}
			if got.Token != token || !got.Live {
				return errFenceLapsed
			}
			if err := check(ctx); err != nil {
				return err
			}
			pauseAt(ctx, "seal held")
			return tx.Exec("UPDATE " + st + " SET fenced_until = '9999-12-31 23:59:59', token = token + 1, sealed = TRUE, mover_only = FALSE WHERE id = 1").Error
		}
		// Asked before the tables' lock too: a run that lost its lock
		// must not hold back the writers behind that lock while it
		// waits for the fence's row.
		if err := check(ctx); err != nil {
			return err
		}
		if err := lockTables(tx, schema, tables); err != nil {
			return err
		}
		st := fmt.Sprintf(`"%s".%s`, schema, fenceTable)
		if err := tx.Raw("SELECT token, fenced_until > clock_timestamp() AS live FROM " + st + " WHERE id = 1 FOR UPDATE").Scan(&got).Error; err != nil {
			return err
		}
		if got.Token != token || !got.Live {
			return errFenceLapsed
		}
		if err := check(ctx); err != nil {
			return err
		}
		pauseAt(ctx, "seal held")
		return tx.Exec("UPDATE " + st + " SET fenced_until = 'infinity', token = token + 1, sealed = TRUE, mover_only = FALSE WHERE id = 1").Error
	})
	if errors.Is(err, errFenceLapsed) {
		why := "it ran out by the database's clock"
		if got.Token != token {
			why = "it was lifted or replaced (abort, or another Fence)"
		}
		return withDetail(ErrFenceLapsed, why)
	}
	return err
}

var errFenceLapsed = errors.New("fence lapsed")

// liftFence lets writes through to the tables of schema again. With a token
// above 0 it lifts only that fence (a move lifting its own, and not one
// set since by someone else) and reports whether it did. With token 0 it
// lifts any fence but a move's seal, for which it returns ErrShardMoved.
func liftFence(ctx context.Context, db *gorm.DB, schema string, tables []string, token int64) (bool, error) {
	mysql := db.Dialector.Name() == "mysql"
	exists, err := tableExists(ctx, db, schema, fenceTable)
	if err != nil {
		return false, err
	}
	if mysql {
		// Fences of an older version were triggers with their expiry
		// written in: drop them.
		for _, t := range tables {
			for _, ev := range mysqlFenceEvents {
				name := fenceTriggerNameMySQL(ev.letter, t)
				var body string
				if err := db.WithContext(ctx).Raw("SELECT ACTION_STATEMENT FROM information_schema.TRIGGERS WHERE "+triggersOfSchema+" AND TRIGGER_NAME = ?", schema, name).Scan(&body).Error; err != nil {
					return false, err
				}
				if body != "" && !strings.Contains(body, fenceTable) {
					if err := db.WithContext(ctx).Exec(fmt.Sprintf("DROP TRIGGER IF EXISTS `%s`.`%s`", schema, name)).Error; err != nil {
						return false, err
					}
				}
			}
		}
	}
	if !exists {
		return false, nil
	}
	st, open := fmt.Sprintf(`"%s".%s`, schema, fenceTable), "'-infinity'"
	if mysql {
		st, open = fmt.Sprintf("`%s`.`%s`", schema, fenceTable), "'1000-01-01'"
	}
	lifted := false
	err = lockedTx(ctx, db, schema, func(tx *gorm.DB) error {
		lifted = false
		var cur struct {
			Token  int64 `gorm:"column:token"`
			Sealed bool  `gorm:"column:sealed"`
		}
		if err := tx.Raw("SELECT token, sealed FROM " + st + " WHERE id = 1 FOR UPDATE").Scan(&cur).Error; err != nil {
			return err
		}
		switch {
		case token > 0 && cur.Token != token:
			return nil // not our fence any more
		case token == 0 && cur.Sealed:
			return ErrShardMoved
		}
		lifted = true
		return tx.Exec("UPDATE " + st + " SET fenced_until = " + open + ", token = token + 1, mover_only = FALSE WHERE id = 1").Error
	})
	return lifted, err
}

// isSealed reports whether db holds a copy of schema that a move fenced
// for good: an old copy.
func isSealed(ctx context.Context, db *gorm.DB, schema string) (bool, error) {
	if ok, err := tableExists(ctx, db, schema, fenceTable); err != nil || !ok {
		return false, err
	}
	st := fmt.Sprintf(`"%s".%s`, schema, fenceTable)
	if db.Dialector.Name() == "mysql" {
		st = fmt.Sprintf("`%s`.`%s`", schema, fenceTable)
	}
	var sealed bool
	err := db.WithContext(ctx).Raw("SELECT sealed FROM " + st + " WHERE id = 1").Scan(&sealed).Error
	return sealed, err
}

// fenceForMover fences the tables of schema on db, a move's target, for
// every writer but the mover (moverTx), until liftFence: a router that
// missed moves of the shard must not write into a copy the move is
// building, whose later passes would overwrite or delete its rows. Like
// setFence, it first waits for the writers under way. It returns the
// fence's token.
func fenceForMover(ctx context.Context, db *gorm.DB, schema string, tables []string) (int64, error) {
	var token int64
	err := lockedTx(ctx, db, schema, func(tx *gorm.DB) (err error) {
		token, err = fenceForMoverTx(tx, schema, tables)
		return err
	})
	return token, err
}

// fenceForMoverTx is fenceForMover in transaction tx.
func fenceForMoverTx(tx *gorm.DB, schema string, tables []string) (int64, error) {
	var token int64
	st, until := fmt.Sprintf(`"%s".%s`, schema, fenceTable), "'infinity'"
	if tx.Dialector.Name() == "mysql" {
		st, until = fmt.Sprintf("`%s`.`%s`", schema, fenceTable), "'9999-12-31 23:59:59'"
	} else if err := lockTables(tx, schema, tables); err != nil {
		return 0, err
	}
	if err := tx.Raw("SELECT token FROM " + st + " WHERE id = 1 FOR UPDATE").Scan(&token).Error; err != nil {
		return 0, err
	}
	token++
	err := tx.Exec("UPDATE "+st+" SET fenced_until = "+until+", token = ?, sealed = FALSE, mover_only = TRUE WHERE id = 1", token).Error
	return token, err
}

// moverTx runs f in a transaction on a session of db that a mover-only
// fence (fenceForMover) lets through, and commits it if f returns nil.
// PostgreSQL: the setting shardid.mover, local to the transaction.
// MySQL: the session's @shardid_mover, cleared before the session goes
// back to the pool (or the session is dropped if that fails).
func moverTx(ctx context.Context, db *gorm.DB, f func(tx *sql.Tx) error) error {
	return moverSession(ctx, db, func(conn *sql.Conn, settings string) error {
		return txOn(ctx, conn, nil, settings, f)
	})
}

// moverSession runs f on one session of db set up as moverTx's are: each
// transaction f begins on conn must first run settings (if not empty) to
// be let through a mover-only fence. The session is reset before it goes
// back to the pool, or dropped if that fails.
func moverSession(ctx context.Context, db *gorm.DB, f func(conn *sql.Conn, settings string) error) error {
	pool, err := db.DB()
	if err != nil {
		return err
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if db.Dialector.Name() == "mysql" {
		// The mover copies rows whose references the source already
		// checked, table by table and change by change: in an order that
		// a foreign key between two of the shard's tables would refuse.
		// Its session reads and writes TIMESTAMPs in UTC, as the source's
		// (readSession) do.
		return withSessionVars(ctx, conn, "SET @shardid_fkc = @@session.foreign_key_checks, @shardid_tz = @@session.time_zone,"+
			" @shardid_mover = 1, @shardid_fence_checked = NULL, FOREIGN_KEY_CHECKS = 0, time_zone = '+00:00'",
			"SET FOREIGN_KEY_CHECKS = @shardid_fkc, time_zone = @shardid_tz, @shardid_mover = NULL, @shardid_fence_checked = NULL, @shardid_fkc = NULL, @shardid_tz = NULL",
			func() error { return f(conn, "") })
	}
	return f(conn, moverSettingsPG)
}

// txOn runs f in a transaction (of opts) on conn, after settings (if
// any), and commits it if f returns nil.
func txOn(ctx context.Context, conn *sql.Conn, opts *sql.TxOptions, settings string, f func(tx *sql.Tx) error) error {
	tx, err := conn.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if settings != "" {
		if _, err := tx.ExecContext(ctx, settings); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// moverSettingsPG lets a transaction through the target's mover-only fence
// and, where the role may (a superuser), skips foreign-key checks for it
// (session_replication_role): the mover copies rows whose references the
// source already checked, in an order a foreign key between two of the
// shard's tables could refuse. It also sets the transaction up to read,
// write and hash values as the source's sessions do (hashSettingsColsPG).
// Every setting is the transaction's own (set_config's is_local): nothing
// stays on the session. The server's timeouts stay as they are: a mover's
// writes hold locks that the application may wait for.
const moverSettingsPG = "SELECT set_config('shardid.mover', 'on', true)," +
	" CASE WHEN current_setting('is_superuser') = 'on' THEN set_config('session_replication_role', 'replica', true) END, " +
	hashSettingsColsPG

// fenceHold is what a mover's run holds on a target: the fences it set on
// schemas there, by their tokens. Each of the run's transactions that
// writes to the target holds them first (hold): it reads them under a
// shared lock kept to its end, and refuses, with an error wrapping
// ErrMoveLockLost, unless each is still the run's. A run paused after it
// last found its lock held (its keep-alive has not seen it lost yet) while
// another run took the shard over, or finished it, must not write to the
// target: it would empty or overwrite that run's copy, or the rows the
// application wrote there since the flip
// (TestSplitPausedRunKeepsOffItsRivalsTargetsPostgres,
// TestMovePausedRunKeepsOffItsRivalsTargetPostgres). The other run
// changes the fences (their tokens) before it writes, and waits for the
// transaction to end to do it; a lift changes them too. The zero value
// holds none.
type fenceHold struct {
	mysql   bool
	on      string // the target's name, for errors
	schemas []string
	tokens  []int64
}

// hold holds h's fences in tx.
func (h fenceHold) hold(ctx context.Context, tx *sql.Tx) error {
	return h.holdWith(func(q string) (map[int]int64, error) {
		rows, err := tx.QueryContext(ctx, q)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		got, err := scanTokens(rows.Next, rows.Scan)
		if err == nil {
			err = rows.Err()
		}
		return got, err
	})
}

// holdPgx is hold in a pgx transaction.
func (h fenceHold) holdPgx(ctx context.Context, tx pgx.Tx) error {
	return h.holdWith(func(q string) (map[int]int64, error) {
		rows, err := tx.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		got, err := scanTokens(rows.Next, rows.Scan)
		if err == nil {
			err = rows.Err()
		}
		return got, err
	})
}

// holdWith is hold, with query running a query in the transaction: one
// per 200 schemas.
func (h fenceHold) holdWith(query func(q string) (map[int]int64, error)) error {
	for lo := 0; lo < len(h.schemas); lo += 200 {
		hi := min(lo+200, len(h.schemas))
		schemas, want := h.schemas[lo:hi], h.tokens[lo:hi]
		got, err := query(holdFencesQuery(h.mysql, schemas))
		if err != nil && noSuchTable(err) {
			// Dropped since the run fenced it: by an abort, once the
			// run's lock was lost.
			return fmt.Errorf("%w: a fence of %s to %s on %s is gone (%w): another run has dropped the target", ErrMoveLockLost, schemas[0], schemas[len(schemas)-1], h.on, err)
		}
		if err != nil {
			return fmt.Errorf("shardid: reading the fences of %s to %s on %s: %w", schemas[0], schemas[len(schemas)-1], h.on, err)
		}
		for i, sc := range schemas {
			tok, ok := got[i]
			if !ok {
				return fmt.Errorf("%w: the fence of %s on %s is gone: another run has taken the shard over", ErrMoveLockLost, sc, h.on)
			}
			if tok != want[i] {
				return fmt.Errorf("%w: the fence of %s on %s is not this run's any more (token %d, the run's %d): another run has taken the shard over, or finished it",
					ErrMoveLockLost, sc, h.on, tok, want[i])
			}
		}
	}
	return nil
}

// scanTokens reads the rows (index, token) of holdFencesQuery's query.
func scanTokens(next func() bool, scan func(...any) error) (map[int]int64, error) {
	got := map[int]int64{}
	for next() {
		var i int
		var tok int64
		if err := scan(&i, &tok); err != nil {
			return nil, err
		}
		got[i] = tok
	}
	return got, nil
}

// holdFencesQuery is the query that reads the fence's token of each of
// schemas (index, token) under a shared lock kept to the end of its
// transaction.
func holdFencesQuery(mysql bool, schemas []string) string {
	return fenceTokensQuery(mysql, schemas, true)
}

// fenceTokensQuery is the query that reads the fence's token of each of
// schemas (index, token), under a shared lock if lock.
func fenceTokensQuery(mysql bool, schemas []string, lock bool) string {
	parts := make([]string, len(schemas))
	for i, sc := range schemas {
		switch {
		case mysql && lock:
			parts[i] = fmt.Sprintf("(SELECT %d AS i, token FROM `%s`.`%s` WHERE id = 1 LOCK IN SHARE MODE)", i, sc, fenceTable)
		case mysql:
			parts[i] = fmt.Sprintf("(SELECT %d AS i, token FROM `%s`.`%s` WHERE id = 1)", i, sc, fenceTable)
		case lock:
			parts[i] = fmt.Sprintf(`SELECT * FROM (SELECT %d AS i, token FROM "%s".%s WHERE id = 1 FOR SHARE) f%d`, i, sc, fenceTable, i)
		default:
			parts[i] = fmt.Sprintf(`SELECT %d AS i, token FROM "%s".%s WHERE id = 1`, i, sc, fenceTable)
		}
	}
	return strings.Join(parts, " UNION ALL ")
}
