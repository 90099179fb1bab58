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

// ChangesRows reports whether query is an UPDATE or a DELETE (or a WITH,
// which may be either): the statements whose "no row changed" a router
// checks with Left. Blanks and comments before the first word are skipped.
func ChangesRows(query string) bool {
	w := firstWord(query)
	return strings.EqualFold(w, "UPDATE") || strings.EqualFold(w, "DELETE") || strings.EqualFold(w, "WITH")
}

// ReturnsChanges reports whether query, run for its rows, is an UPDATE or
// a DELETE (... RETURNING): the queries whose rows, when there are none,
// a router checks with Left. Unlike ChangesRows it leaves out WITH, which
// is most often a SELECT: a WITH ... UPDATE ... RETURNING read as rows is
// not checked.
func ReturnsChanges(query string) bool {
	w := firstWord(query)
	return strings.EqualFold(w, "UPDATE") || strings.EqualFold(w, "DELETE")
}

// firstWord returns the first word of query, after blanks, comments and
// opening parentheses.
func firstWord(q string) string {
	i := 0
	for i < len(q) {
		switch c := q[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '(':
			i++
		case strings.HasPrefix(q[i:], "--") || c == '#':
			end := strings.IndexByte(q[i:], '\n')
			if end < 0 {
				return ""
			}
			i += end + 1
		case strings.HasPrefix(q[i:], "/*"):
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				return ""
			}
			i += end + 4
		default:
			j := i
			for j < len(q) && identByte(q[j]) {
				j++
			}
			return q[i:j]
		}
	}
	return ""
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
		sig := SplitSealedFunction + "(integer)"
		v, _, err := one("SELECT CASE WHEN p IS NULL THEN 0 WHEN has_function_privilege(p, 'EXECUTE') THEN 1 ELSE 2 END FROM (SELECT to_regprocedure('" + sig + "') AS p) AS f")
		switch {
		case err != nil:
			return false, err
		case v == 0:
			return false, nil
		case v == 2:
			return false, fmt.Errorf("%w: the role may not execute %s, which a split of this database created: GRANT EXECUTE ON FUNCTION %s TO the role", ErrCannotCheck, sig, sig)
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

// Check is Left as the error of the write that changed no row: nil when
// the database still holds the shard, Gone's error when it does not, and
// CheckFailed's when it cannot tell. schema is "" for a shared shard.
func Check(dialect, schema string, shard int, one OneValue, moving, unchecked error) error {
	shared := schema == ""
	left, err := Left(dialect, schema, shared, shard, one)
	switch {
	case err != nil:
		return CheckFailed(err, moving, unchecked)
	case left:
		return Gone(moving, shard, shared)
	}
	return nil
}
