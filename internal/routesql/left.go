package routesql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// A router whose map is stale sends a shard's writes to the database that
// held the shard before a split or a move. An INSERT is refused there, and
// so is an UPDATE or a DELETE of a row that is still there (sealed or
// fenced: the triggers of package reshard raise FenceMessage). But a row
// written on the shard's new home after the flip has no copy on the old
// one, so an UPDATE or a DELETE of it there matches no row and fires no
// row trigger: without a check it would report "0 rows changed" and the
// write would be lost without an error. PostgreSQL's fence of a moved
// shard's schema is a statement trigger, which fires for no row too; a
// split monolith's tables, shared by every shard, and MySQL, which has no
// statement triggers, need the router to ask after such a write whether
// the database still holds the shard.

// SplitSealedFunction is the function a split of a PostgreSQL monolith
// (package reshard) creates in the monolith's schema: given a logical
// shard, it reports whether the split sealed that shard's rows there. It
// runs as its owner (SECURITY DEFINER), so a role that may only read and
// write rows can call it without reading SplitStateTable.
const SplitSealedFunction = "shardid_split_sealed"

// ChangesRows reports whether query is an UPDATE, a DELETE or a MERGE
// (or a WITH, which may be any): the statements whose "no row changed" a
// router checks with Left. Blanks, parentheses, comments (mysql: MySQL's
// or MariaDB's, else PostgreSQL's, which nest) before the first word are
// skipped.
func ChangesRows(query string, mysql bool) bool {
	w := firstWord(query, mysql)
	return writes(w) || strings.EqualFold(w, "WITH")
}

// writes reports whether w, a statement's first word, is that of a
// statement that changes rows the way Left checks: UPDATE, DELETE or
// MERGE (PostgreSQL 15: its WHEN MATCHED clauses update or delete).
func writes(w string) bool {
	return strings.EqualFold(w, "UPDATE") || strings.EqualFold(w, "DELETE") || strings.EqualFold(w, "MERGE")
}

// ReturnsChanges reports whether query, run for its rows, may change rows
// the way a router checks with Left: an UPDATE, a DELETE or a MERGE (...
// RETURNING), or a WITH that holds one (WITH u AS (UPDATE ... RETURNING
// id) SELECT id FROM u), as Modifies tells (mysql: the text is MySQL's or
// MariaDB's, with # comments, backslash escapes and "..." strings). A
// WITH ... SELECT that only reads is left out: a stale router's read that
// finds nothing is an empty result, not a refusal.
func ReturnsChanges(query string, mysql bool) bool {
	w := firstWord(query, mysql)
	return writes(w) || strings.EqualFold(w, "WITH") && Modifies(query, mysql)
}

// ModifyingWith reports whether query is a WITH whose statements change
// rows (Modifies). How many rows they changed does not show in its result
// (its command tag is its last statement's, its rows what that returns:
// SELECT count(*) FROM u returns a row either way), so a router checks
// such a write whatever it returned.
func ModifyingWith(query string, mysql bool) bool {
	return strings.EqualFold(firstWord(query, mysql), "WITH") && Modifies(query, mysql)
}

// Modifies reports whether query holds the word UPDATE, DELETE or MERGE
// outside strings, quoted names and comments, other than the UPDATE of a
// locking clause (FOR UPDATE, FOR NO KEY UPDATE): a WITH whose statements
// change rows (ReturnsChanges). A string, a quoted name or a comment left
// open at the end of query counts as a write: what it swallowed may have
// been one. A column named so (quoted) is not a write; one named so
// unquoted is taken for one, which costs a check, not a lost write.
func Modifies(query string, mysql bool) bool {
	var prev2, prev, w string
	for i := 0; i < len(query); prev2, prev = prev, w {
		var open bool
		w, i, open = nextWord(query, i, mysql)
		switch {
		case open:
			return true
		case strings.EqualFold(w, "UPDATE"):
			if !strings.EqualFold(prev, "FOR") && !(strings.EqualFold(prev, "KEY") && strings.EqualFold(prev2, "NO")) {
				return true
			}
		case writes(w):
			return true
		}
	}
	return false
}

// firstWord returns the first word of query, after blanks, parentheses,
// and comments (mysql: MySQL's, else PostgreSQL's).
func firstWord(q string, mysql bool) string {
	w, _, _ := nextWord(q, 0, mysql)
	return w
}

// ErrCannotCheck is the cause Left returns when the database does not let
// the router's role ask whether it still holds the shard.
var ErrCannotCheck = errors.New("the write changed no row and the router cannot check that the database still holds the shard")

// OneValue runs query with args on the connection that ran the write (in
// its transaction, if any) and returns the integer of the first column of
// its first row; found is false when it returns no row.
type OneValue func(query string, args ...any) (v int64, found bool, err error)

// RowQuerier is what a database/sql pool, a transaction and a GORM
// connection pool share for OneOn.
type RowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// OneOn is the OneValue of q, a database/sql pool or transaction (or a
// GORM connection pool over one), under ctx.
func OneOn(ctx context.Context, q RowQuerier) OneValue {
	return func(query string, args ...any) (int64, bool, error) {
		var n int64
		err := q.QueryRowContext(ctx, query, args...).Scan(&n)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return n, err == nil, err
	}
}

// Left reports whether, after an UPDATE or a DELETE routed to shard on a
// database of dialect ("postgres" or "mysql") changed no row, that
// database had given the shard up: a split sealed its rows there (shared,
// the shard's rows in the database's own tables), or a move fenced its
// schema (MySQL: PostgreSQL's fence refuses the statement itself; on
// MySQL a 0-row write is so refused during a move's fence too, as every
// other write is). The write is then to be routed again, with the map of
// the moment: report it as the fence's refusal. schema is the shard's
// schema (MySQL: database), "" when shared. A database that never held a
// split or a move answers false at the cost of one query.
//
// The state is read with a locking read, in the write's transaction if it
// has one: a
// seal made after the transaction's snapshot (REPEATABLE READ, MySQL's
// default) is seen, or waited for, not missed. On PostgreSQL at REPEATABLE
// READ or SERIALIZABLE, such a seal fails the transaction with a
// serialization error instead, which is as loud.
//
// The PostgreSQL check cannot fail a transaction otherwise: it calls
// SplitSealedFunction only once a first query found it, and callable. A
// role that may not call it gets ErrCannotCheck, as does a MySQL role that
// may not read the state (MySQL and MariaDB answer a table the role has no
// right on as denied, whether it exists or not), rather than a "0 rows
// changed" the router cannot vouch for.
func Left(dialect, schema string, shared bool, shard int, one OneValue) (bool, error) {
	switch {
	case dialect == "postgres" && shared:
		v, _, err := one(SplitFunctionProbe)
		switch {
		case err != nil:
			return false, err
		case v == splitNoFunction:
			return false, nil
		case v == splitFunctionDenied:
			return false, errFunctionDenied
		}
		v, _, err = one("SELECT CASE WHEN "+SplitSealedFunction+"($1) THEN 1 ELSE 0 END", shard)
		return v == 1, err
	case dialect == "mysql" && shared:
		return leftMySQL(one, SplitStateTable, "the database of the monolith's tables",
			"SELECT CASE WHEN sealed THEN 1 ELSE 0 END FROM "+SplitStateTable+" WHERE shard = ? LOCK IN SHARE MODE", shard)
	case dialect == "mysql" && schema != "":
		return leftMySQL(one, FenceStateTable, "the shard's database "+schema,
			"SELECT CASE WHEN fenced_until > UTC_TIMESTAMP(6) THEN 1 ELSE 0 END FROM `"+schema+"`."+FenceStateTable+" WHERE id = 1 LOCK IN SHARE MODE")
	}
	return false, nil
}

// SplitFunctionProbe is the query that tells whether a PostgreSQL database
// has SplitSealedFunction and whether the role may call it:
// splitNoFunction, splitFunctionCallable or splitFunctionDenied.
const SplitFunctionProbe = "SELECT CASE WHEN p IS NULL THEN 0 WHEN has_function_privilege(p, 'EXECUTE') THEN 1 ELSE 2 END FROM (SELECT to_regprocedure('" + SplitSealedFunction + "(integer)') AS p) AS f"

// The answers of SplitFunctionProbe.
const (
	splitNoFunction       = 0
	splitFunctionCallable = 1
	splitFunctionDenied   = 2
)

// errFunctionDenied is the cause of a check that the role may not run.
var errFunctionDenied = fmt.Errorf("%w: the role may not execute %s(integer), which a split of this database created: GRANT EXECUTE ON FUNCTION %[2]s(integer) TO the role", ErrCannotCheck, SplitSealedFunction)

// A batch (pgx's SendBatch) holds its connection until it is closed, so
// the check of its writes cannot run after each one on that connection:
// it rides in the batch instead, a query after each write. Which query
// depends on what SplitFunctionProbe answered (probe) just before the
// batch was sent: a query that calls a function that does not exist
// would fail the batch.

// BatchCheck returns the query (and its arguments) to send in a batch
// right after a write of shard (shared, on a PostgreSQL database), given
// what SplitFunctionProbe answered before the batch: SplitSealedFunction's
// answer when it was callable, the probe again when not. The shard is an
// argument, so that a statement cache holds one query, not one a shard.
func BatchCheck(probe int64, shard int) (string, []any) {
	if probe == splitFunctionCallable {
		return "SELECT CASE WHEN " + SplitSealedFunction + "($1::integer) THEN 1 ELSE 0 END", []any{shard}
	}
	return SplitFunctionProbe, nil
}

// BatchVerdict is Check for a write of shard in a batch: v is what
// BatchCheck(probe, shard) answered after it, zero whether the write is
// known to have changed no row (else: a WITH whose result does not tell,
// judged as Check judges it with zero false). A function that appeared between the
// probe and the batch (a split of the database began meanwhile) could not
// be asked: a write that changed no row is unchecked, to be run again.
func BatchVerdict(probe, v int64, shard int, zero bool, moving, unchecked error) error {
	switch {
	case probe == splitFunctionCallable && v == 1:
		return Gone(moving, shard, true)
	case !zero, probe == splitFunctionCallable, v == splitNoFunction:
		return nil
	case v == splitFunctionDenied:
		return fmt.Errorf("%w: %w", unchecked, errFunctionDenied)
	}
	return fmt.Errorf("%w: %w: a split of the database began while the batch was sent: run the write again", unchecked, ErrCannotCheck)
}

// leftMySQL runs q with args, whose table is table in where: a table that
// does not exist (no split, no move ever) holds the shard; a table the
// role may not read is ErrCannotCheck. A failed query does not end a
// MySQL transaction.
func leftMySQL(one OneValue, table, where, q string, args ...any) (bool, error) {
	v, found, err := one(q, args...)
	if err != nil {
		msg := err.Error()
		switch {
		case strings.Contains(msg, table+"' doesn't exist"):
			return false, nil
		case strings.Contains(msg, "command denied"):
			return false, fmt.Errorf("%w: GRANT SELECT (MySQL 8: and UPDATE or LOCK TABLES, for a locking read) on %s (or on the whole database: the table does not exist until a split or a move creates it) TO the role: %w", ErrCannotCheck, table+" in "+where, err)
		}
		return false, err
	}
	return found && v == 1, nil
}

// Gone is the error of a write that Left found on a database that had
// given its shard up: moving (shardid.ErrShardMoving), retryable, with
// what happened to the shard there.
func Gone(moving error, shard int, shared bool) error {
	why := "a move fenced its schema there"
	if shared {
		why = "a split sealed its rows there"
	}
	return &classified{kind: moving, err: fmt.Errorf("the write changed no row on a database that no longer holds shard %d (%s): route it again with the current map", shard, why)}
}

// CheckFailed is the error of a write whose check (Left) failed with err:
// unchecked (shardid.ErrUncheckedWrite) with err, or moving
// (shardid.ErrShardMoving) when err is PostgreSQL's serialization failure
// (SQLSTATE 40001): at REPEATABLE READ or SERIALIZABLE, the split's state
// of the shard changed after the transaction's snapshot, and the
// transaction, failed, is to be run again with the map of the moment.
func CheckFailed(err, moving, unchecked error) error {
	var s sqlStater
	if errors.As(err, &s) && s.SQLState() == "40001" {
		return &classified{kind: moving, err: fmt.Errorf("the split's state of the shard changed after the transaction's snapshot: %w", err)}
	}
	return fmt.Errorf("%w: %w", unchecked, err)
}

// Check is Left as the error of a routed write: nil when the database
// still holds the shard, Gone's error when it does not. zero says the
// write is known to have changed no row; then a check that cannot tell
// gives CheckFailed's error. Otherwise (a WITH whose result does not tell
// whether it changed rows, checked in its transaction: SealOnly) only a
// database that had given the shard up fails it, and a serialization
// failure, which failed the transaction; a check that cannot run leaves
// such a write as it was, since it may have changed rows and an error
// would have it run again. schema is "" for a shared shard.
func Check(dialect, schema string, shard int, zero bool, one OneValue, moving, unchecked error) error {
	shared := schema == ""
	left, err := Left(dialect, schema, shared, shard, one)
	switch {
	case err != nil:
		if e := CheckFailed(err, moving, unchecked); zero || errors.Is(e, moving) {
			return e
		}
		return nil
	case left:
		return Gone(moving, shard, shared)
	}
	return nil
}

// SealOnly reports whether a routed write of query whose result shows
// rows (or a count) is checked all the same, as Check with zero false: a
// WITH whose statements change rows (ModifyingWith), whose result does not
// tell whether they did, on PostgreSQL (mysql false: MySQL counts a WITH
// ... UPDATE's own rows), in its transaction (inTx). There it is sound: a
// row the write changed holds its shard's state until the transaction
// ends (the split's triggers read it FOR SHARE), so a seal seen after the
// write was made before it, and then the write changed no row of the
// shard. Outside a transaction the write has committed before the check,
// a seal may have come since, and failing it would have it run again.
func SealOnly(query string, mysql, inTx bool) bool {
	return inTx && !mysql && ModifyingWith(query, false)
}
