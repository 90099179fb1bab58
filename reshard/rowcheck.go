package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"

	"gorm.io/gorm"
)

// Verification by key. Once the first copy is done, both copies of a table
// are read once in key order, side by side, and compared row by row by a
// 64-bit hash of each row computed by the database: the keys that differ
// are suspect. From then on every change the mover applies is verified as
// it is applied: in the target's transaction, the row's hash after the
// write must equal its hash on the source when it was re-read; a key that
// does not is suspect too. Under the fence, after the last changes, only
// the suspect keys are compared again: never the whole shard, and never
// more than the keys written since the last round before the fence.
//
// That is sound because a key that is not suspect was equal on both sides
// at its last comparison (the scan, or the apply that re-read it), every
// write to the source after that re-read is in the change log and so
// applied (and verified) again, and every write to the target is the mover
// applying a logged change. The target's row count and hash sum are kept
// through every write of the mover (the hashes of the rows it replaces and
// of those it writes), so the result's TableCheck costs no second scan.

// rowCheck is what the verification knows of one table.
type rowCheck struct {
	table   string           // quoted
	src     string           // the source's table or derived table, if not table
	rows    int64            // the target's rows, since the scan
	sum     uint64           // the sum of the hashes of the target's rows
	suspect map[int64]string // keys not known equal on both sides, with why
}

// hashSettingsPG makes a PostgreSQL transaction print values, and so hash
// rows, alike on both sides whatever the servers' and roles' defaults: a
// timestamptz prints in the session's time zone, dates in its DateStyle.
// It is for reads, and lifts statement_timeout for them: a scan of a
// shard's or a monolith's tables, or their sums, takes as long as the data
// is large, and a cap that a DBA set for the application's queries would
// end it every time (TestSplitThroughAStatementTimeoutPostgres). Every
// setting is the transaction's own (set_config's is_local).
const hashSettingsPG = "SELECT " + hashSettingsColsPG + ", set_config('statement_timeout', '0', true)"

const hashSettingsColsPG = "set_config('TimeZone', 'UTC', true), set_config('DateStyle', 'ISO, MDY', true)," +
	" set_config('IntervalStyle', 'postgres', true), set_config('extra_float_digits', '3', true)," +
	" set_config('bytea_output', 'hex', true), set_config('lc_monetary', 'C', true)"

// hashSettingsMySQL and hashRestoreMySQL do the same for a MySQL session
// (TIMESTAMP values are read and written in its time zone) and restore it.
const (
	hashSettingsMySQL = "SET @shardid_tz = @@session.time_zone, time_zone = '+00:00'"
	hashRestoreMySQL  = "SET time_zone = @shardid_tz, @shardid_tz = NULL"
)

// querier is a session or a transaction.
type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
}

// readSession runs f in a read-only READ COMMITTED transaction on a
// session of db set up to hash rows alike on both sides (hashSettingsPG,
// hashSettingsMySQL). READ COMMITTED whatever the server's default: a
// READ UNCOMMITTED re-read could copy a row whose writer then rolls back,
// and its change log entry with it.
func readSession(ctx context.Context, db *gorm.DB, f func(q querier) error) error {
	return readConn(ctx, db, func(conn *sql.Conn, settings string) error {
		return txOn(ctx, conn, readCommitted, settings, func(tx *sql.Tx) error { return f(tx) })
	})
}

// readConn runs f on one session of db set up as readSession's are: each
// transaction f begins on conn must first run settings (if not empty).
// The session is reset before it goes back to the pool, or dropped if
// that fails.
func readConn(ctx context.Context, db *gorm.DB, f func(conn *sql.Conn, settings string) error) error {
	pool, err := sqlDB(db)
	if err != nil {
		return err
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if db.Dialector.Name() == "mysql" {
		set, restore, err := readVarsMySQL(ctx, conn)
		if err != nil {
			return err
		}
		return withSessionVars(ctx, conn, set, restore, func() error { return f(conn, "") })
	}
	return f(conn, hashSettingsPG)
}

// readVarsMySQL returns the statements that set a MySQL session up for a
// read (hashSettingsMySQL) and restore it. A read also lifts the server's
// cap on a statement's time, which a DBA set for the application's queries
// and would end a scan of a large table every time: MariaDB's
// max_statement_time, MySQL's max_execution_time (which caps reads only).
func readVarsMySQL(ctx context.Context, conn *sql.Conn) (set, restore string, err error) {
	var v string
	if err := conn.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return "", "", err
	}
	cap := "max_execution_time"
	if strings.Contains(v, "MariaDB") {
		cap = "max_statement_time"
	}
	return hashSettingsMySQL + ", @shardid_cap = @@session." + cap + ", " + cap + " = 0",
		hashRestoreMySQL + ", " + cap + " = @shardid_cap, @shardid_cap = NULL", nil
}

// readCommitted is readSession's transaction.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: true}

// hashKind is how rowHash hashes a column on PostgreSQL.
type hashKind uint8

const (
	// hashInRecord: in the row's text, as record_out prints the columns
	// that are hashed this way (ROW(...)::text).
	hashInRecord hashKind = iota
	// hashInt: an integer column, with hashint8extended of its value and
	// of its high 32 bits.
	hashInt
	// hashText: a text or varchar column, with hashtextextended, its bytes
	// compared as they are (COLLATE "C").
	hashText
)

// hashCols are the columns that a row's hash covers (rowHash), in order,
// and how each is hashed on PostgreSQL: kinds is nil (every column in the
// row's text, what a split hashes with) or holds one kind a column.
type hashCols struct {
	names []string
	kinds []hashKind
}

// textHashed is the hash of cols in the row's text.
func textHashed(cols []string) hashCols { return hashCols{names: cols} }

// rowHash is the SQL expression of a row's 64-bit hash, over cols.
//
// On PostgreSQL, with kinds, each integer and text column is hashed by its
// type's own hash function, seeded by its place i (1 for the first), an
// integer's high 32 bits hashed again with the seed -i, a NULL standing
// for the seed i itself, and the others in the row's text, as without
// kinds: the terms are XORed. A type's hash function reads the
// value as it is stored, where the row's text calls each column's output
// function and then hashes the text: on a table of integers and text, a
// third of the server's CPU (docs/resharding.md).
func rowHash(db *gorm.DB, cols hashCols) string {
	if db.Dialector.Name() == "mysql" {
		q := make([]string, len(cols.names))
		for i, c := range cols.names {
			// As bytes: columns of different collations cannot be
			// concatenated as text.
			q[i] = "CAST(QUOTE(" + quoteIdent(db, c) + ") AS BINARY)"
		}
		return "CAST(CONV(LEFT(MD5(CONCAT_WS(',', " + strings.Join(q, ", ") + ")), 16), 16, 10) AS UNSIGNED)"
	}
	if cols.kinds == nil {
		return "hashtextextended(ROW(" + columnList(db, cols.names) + ")::text, 0)"
	}
	var terms, rec []string
	for i, c := range cols.names {
		seed := strconv.Itoa(i + 1)
		switch cols.kinds[i] {
		case hashInt:
			// hashint8extended folds a bigint's halves into one word
			// before it hashes it: the high half hashed too pins the
			// value down (1 and 2^32 would hash alike otherwise).
			q := quoteIdent(db, c)
			terms = append(terms, "coalesce(hashint8extended("+q+", "+seed+") # hashint8extended("+q+"::int8 >> 32, -"+seed+"), "+seed+")")
		case hashText:
			terms = append(terms, "coalesce(hashtextextended("+quoteIdent(db, c)+" COLLATE \"C\", "+seed+"), "+seed+")")
		default:
			rec = append(rec, c)
		}
	}
	if len(rec) > 0 {
		terms = append(terms, "hashtextextended(ROW("+columnList(db, rec)+")::text, 0)")
	}
	return "(" + strings.Join(terms, " # ") + ")"
}

// hashOf converts a scanned hash: PostgreSQL's is a signed bigint, MySQL's
// an unsigned one.
func hashOf(v any) (uint64, error) {
	switch x := v.(type) {
	case int64:
		return uint64(x), nil
	case uint64:
		return x, nil
	case []byte:
		return strconv.ParseUint(string(x), 10, 64)
	case string:
		return strconv.ParseUint(x, 10, 64)
	}
	return 0, fmt.Errorf("a row hash of type %T", v)
}

// sumOf converts a sum of row hashes that the database computed exactly
// (a numeric, as text) into the sum modulo 2^64 that rowCheck keeps: the
// sum of signed hashes too (PostgreSQL's).
func sumOf(total string) (uint64, error) {
	v, ok := new(big.Int).SetString(total, 10)
	if !ok {
		return 0, fmt.Errorf("a hash sum that is not a number: %q", total)
	}
	return v.And(v, maxUint64).Uint64(), nil
}

// maxUint64 is 2^64-1: a mask for the two's complement of a big.Int.
var maxUint64 = new(big.Int).SetUint64(^uint64(0))

// keyHashes returns the hashes of the rows of table with the keys ids, read
// through q (a readSession, or the mover's transaction, set up alike).
func keyHashes(ctx context.Context, q querier, db *gorm.DB, table string, cols hashCols, ids []int64) (map[int64]uint64, error) {
	out := make(map[int64]uint64, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), 1000)
		args := make([]any, n)
		for i, id := range ids[:n] {
			args[i] = id
		}
		rows, err := q.QueryContext(ctx, "SELECT id, "+rowHash(db, cols)+" FROM "+table+" WHERE id IN ("+placeholders(db, 0, n)+")", args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id int64
			var h any
			if err := rows.Scan(&id, &h); err != nil {
				rows.Close()
				return nil, err
			}
			if out[id], err = hashOf(h); err != nil {
				rows.Close()
				return nil, err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		ids = ids[n:]
	}
	return out, nil
}

// keyHash is a row's key and hash.
type keyHash struct {
	id int64
	h  uint64
}

// scanOrdered streams the key and hash of every row of table on db, in key
// order, to out in slices, and closes out.
func scanOrdered(ctx context.Context, db *gorm.DB, table string, cols hashCols, out chan<- []keyHash) error {
	defer close(out)
	return readSession(ctx, db, func(q querier) error {
		rows, err := q.QueryContext(ctx, "SELECT id, "+rowHash(db, cols)+" FROM "+table+" ORDER BY id")
		if err != nil {
			return err
		}
		defer rows.Close()
		buf := make([]keyHash, 0, 1024)
		for rows.Next() {
			var k keyHash
			var h any
			if err := rows.Scan(&k.id, &h); err != nil {
				return err
			}
			if k.h, err = hashOf(h); err != nil {
				return err
			}
			if buf = append(buf, k); len(buf) == cap(buf) {
				select {
				case out <- buf:
				case <-ctx.Done():
					return ctx.Err()
				}
				buf = make([]keyHash, 0, 1024)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(buf) > 0 {
			select {
			case out <- buf:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
}

// compareTable reads table on src and dst at once, in key order, and
// returns what the verification knows after it: the target's row count and
// hash sum, and the keys that differ (present on one side only, or with
// different hashes).
func compareTable(ctx context.Context, src, dst *gorm.DB, table string, cols hashCols) (*rowCheck, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		ch   [2]chan []keyHash
		errs [2]chan error
	)
	for side, db := range []*gorm.DB{src, dst} {
		ch[side], errs[side] = make(chan []keyHash, 4), make(chan error, 1)
		go func() {
			err := scanOrdered(ctx, db, table, cols, ch[side])
			if err != nil {
				cancel() // the other side stops too
			}
			errs[side] <- err
		}()
	}
	rc := &rowCheck{table: table, suspect: map[int64]string{}}
	// next returns the next key and hash of side, or ok false at its end.
	var bufs [2][]keyHash
	next := func(side int) (keyHash, bool) {
		for len(bufs[side]) == 0 {
			b, ok := <-ch[side]
			if !ok {
				return keyHash{}, false
			}
			bufs[side] = b
		}
		k := bufs[side][0]
		bufs[side] = bufs[side][1:]
		return k, true
	}
	a, aok := next(0)
	b, bok := next(1)
	for aok || bok {
		switch {
		case bok && (!aok || b.id < a.id):
			rc.rows++
			rc.sum += b.h
			rc.suspect[b.id] = "only on the target"
			b, bok = next(1)
		case aok && (!bok || a.id < b.id):
			rc.suspect[a.id] = "missing on the target"
			a, aok = next(0)
		default:
			rc.rows++
			rc.sum += b.h
			if a.h != b.h {
				rc.suspect[a.id] = "different on the target"
			}
			a, aok = next(0)
			b, bok = next(1)
		}
	}
	// The error that stopped the comparison, not the other side's
	// cancellation.
	var first error
	for side, name := range []string{"source", "target"} {
		if err := <-errs[side]; err != nil && (first == nil || errors.Is(first, context.Canceled)) {
			first = fmt.Errorf("shardid: reading %s on the %s: %w", table, name, err)
		}
	}
	if first != nil {
		return nil, first
	}
	return rc, nil
}

// recheck compares the suspect keys again on both sides and forgets those
// that are equal now.
func (rc *rowCheck) recheck(ctx context.Context, src, dst *gorm.DB, cols hashCols) error {
	if len(rc.suspect) == 0 {
		return nil
	}
	ids := make([]int64, 0, len(rc.suspect))
	for id := range rc.suspect {
		ids = append(ids, id)
	}
	var hs [2]map[int64]uint64
	errs := make(chan error, 2)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // an error on one side stops the other
	tables := [2]string{rc.table, rc.table}
	if rc.src != "" {
		tables[0] = rc.src
	}
	for side, db := range []*gorm.DB{src, dst} {
		go func() {
			errs <- readSession(ctx, db, func(q querier) (err error) {
				hs[side], err = keyHashes(ctx, q, db, tables[side], cols, ids)
				return err
			})
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			return fmt.Errorf("shardid: comparing changed rows of %s: %w", rc.table, err)
		}
	}
	for _, id := range ids {
		a, aok := hs[0][id]
		b, bok := hs[1][id]
		switch {
		case aok == bok && a == b:
			delete(rc.suspect, id)
		case !bok:
			rc.suspect[id] = "missing on the target"
		case !aok:
			rc.suspect[id] = "only on the target"
		default:
			rc.suspect[id] = "different on the target"
		}
	}
	return nil
}

// applied takes in what an apply of ids learnt: the source's hashes when
// it re-read them (srcH), the target's before (old) and after (now) its
// write. Keys whose hashes now match are no longer suspect.
func (rc *rowCheck) applied(ids []int64, srcH, old, now map[int64]uint64) {
	for _, id := range ids {
		if h, ok := old[id]; ok {
			rc.rows--
			rc.sum -= h
		}
		b, bok := now[id]
		if bok {
			rc.rows++
			rc.sum += b
		}
		a, aok := srcH[id]
		switch {
		case aok == bok && a == b:
			delete(rc.suspect, id)
		case !bok:
			rc.suspect[id] = "missing on the target after it was applied"
		case !aok:
			rc.suspect[id] = "left on the target after it was applied"
		default:
			rc.suspect[id] = "different on the target after it was applied"
		}
	}
}

// evicted takes in the rows that an apply deleted on the target because
// they held a unique value that a row it wrote now has (applyChunk): with
// their hashes before (old), they leave the totals, and are in doubt until
// their own change, waiting in the log, is applied.
func (rc *rowCheck) evicted(ids []int64, old map[int64]uint64) {
	for _, id := range ids {
		if h, ok := old[id]; ok {
			rc.rows--
			rc.sum -= h
		}
		rc.suspect[id] = "taken off the target for a unique value another row took"
	}
}

// firstSuspect returns the smallest suspect key and why, for an error.
func (rc *rowCheck) firstSuspect() (int64, string) {
	ids := make([]int64, 0, len(rc.suspect))
	for id := range rc.suspect {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids[0], rc.suspect[ids[0]]
}
