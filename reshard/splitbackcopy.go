package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
)

// backCopy copies one shard back from its schema on a target into the
// monolith's shared tables, as a move's shardCopier copies a shard: the
// change log of the shard's schema (capture), a first copy, both sides
// compared, the change log applied round after round, each row verified
// as it is written (converge), and under the fence the last changes and
// the keys in doubt compared again (finish).
//
// The monolith's tables hold the other shards' rows too. The shard's rows
// there are those whose shard (key % LogicalShards, or their parent's) is
// the shard, and those of no shard (a child whose parent row is missing)
// whose key the shard's schema holds or held: every read and write of the
// copy is restricted to them (guard), so that a key another shard's row
// holds is never overwritten nor deleted, but refused (ErrKeyCollision).
// Rows are written parents first and deleted children first; a parent row
// deleted takes with it its child rows that the shard's schema no longer
// holds (deleteGone), so that no row the schema deleted is left behind in
// the monolith as a child of no shard.
type backCopy struct {
	sp       *splitter
	shard    int
	src      *gorm.DB // the database the shard comes back from
	schema   string   // the shard's schema there
	cols     map[string]columns
	checks   map[string]*rowCheck // by table, once both sides were compared
	progress func(table string, copied int64)
	// token is the token of the shard's state row on the monolith that
	// this run claimed (claimBack): each of its transactions that writes
	// the shard's rows there holds it first (hold); 0 holds nothing.
	token int64
}

// hold reads, in tx, the shard's state row on the monolith under a shared
// lock kept to the end of tx, and returns an error wrapping
// ErrMoveLockLost unless it is still sealed with the token this run
// claimed. A roll-back paused after its last check of its locks, while a
// second run of it took the shard over (claimBack: a new token) or
// finished it (flipped back: unsealed), must not write to the monolith:
// it would write old rows over the ones written there since, or delete
// them (TestRollbackPausedKeepsOffTheMonolithPostgres). The other run
// changes the row before it writes, and waits for tx to end to do it.
func (bc *backCopy) hold(ctx context.Context, tx *sql.Tx) error {
	if bc.token == 0 {
		return nil
	}
	q := "SELECT token, sealed FROM " + bc.sp.q(splitStateTable) + " WHERE shard = " + strconv.Itoa(bc.shard) + forShare(bc.sp.mysql)
	var token int64
	var sealed bool
	err := tx.QueryRowContext(ctx, q).Scan(&token, &sealed)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if err != nil || token != bc.token || !sealed {
		return fmt.Errorf("%w: shard %d's state on the monolith is not this roll-back's any more (token %d, sealed %v; the run's %d): another run has taken it over, or finished it",
			ErrMoveLockLost, bc.shard, token, sealed, bc.token)
	}
	return nil
}

// execHeld runs q on the monolith in a mover's transaction that holds
// the run's claim of the shard first (hold), and returns the rows it
// changed.
func (bc *backCopy) execHeld(ctx context.Context, q string, args []any) (int64, error) {
	var n int64
	err := moverTx(ctx, bc.sp.mono, func(tx *sql.Tx) error {
		if err := bc.hold(ctx, tx); err != nil {
			return err
		}
		r, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = r.RowsAffected()
		return err
	})
	return n, err
}

// backBatch is how many rows the first copy reads and writes at a time.
const backBatch = 1000

func (bc *backCopy) srcTable(t string) string { return quoteTable(bc.src, bc.schema, t) }

// guard is the condition that the monolith's row of table t that ref names
// is the shard's, or of no shard.
func (bc *backCopy) guard(t SplitTable, ref string) string {
	s := strconv.Itoa(bc.shard)
	return "COALESCE(" + bc.sp.rowShard(t, ref, 0) + ", " + s + ") = " + s
}

// mine is a derived table of the monolith's rows of t that guard admits:
// what the verification reads there, by key.
func (bc *backCopy) mine(t SplitTable) string {
	return "(SELECT x.* FROM " + bc.sp.q(t.Name) + " AS x WHERE " + bc.guard(t, "x") + ") AS shardid_back"
}

// children returns the tables that follow t.
func (bc *backCopy) children(t SplitTable) []SplitTable {
	var out []SplitTable
	for _, c := range bc.sp.tables {
		if c.Parent == t.Name {
			out = append(out, c)
		}
	}
	return out
}

// inArgs returns ids as arguments and their placeholders on the monolith.
func (bc *backCopy) inArgs(ids []int64) (string, []any) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return placeholders(bc.sp.mono, 0, len(ids)), args
}

// dropExtras deletes the shard's rows in the monolith whose keys its
// schema does not hold, children first, and returns how many: the rows the
// split left there, sealed since, that the schema deleted before this
// roll-back's change log began (those it deleted since are in the log).
// It reads the monolith's rows of the shard once.
func (bc *backCopy) dropExtras(ctx context.Context) (int64, error) {
	var n int64
	for i := len(bc.sp.tables) - 1; i >= 0; i-- {
		t := bc.sp.tables[i]
		have := map[int64]bool{}
		err := bc.eachSourceKeys(ctx, t.Name, func(ids []int64) error {
			for _, id := range ids {
				have[id] = true
			}
			return nil
		})
		if err != nil {
			return n, err
		}
		from, shard := bc.sp.from(t)
		var there []int64
		q := "SELECT x.id FROM " + from + " WHERE " + shard + " = " + strconv.Itoa(bc.shard)
		if err := bc.sp.mono.WithContext(ctx).Raw(q).Scan(&there).Error; err != nil {
			return n, err
		}
		var extra []int64
		for _, id := range there {
			if !have[id] {
				extra = append(extra, id)
			}
		}
		for lo := 0; lo < len(extra); lo += backBatch {
			in, args := bc.inArgs(extra[lo:min(lo+backBatch, len(extra))])
			q := "DELETE FROM " + bc.sp.q(t.Name) + " AS x WHERE x.id IN (" + in + ") AND " + bc.guard(t, "x")
			if bc.sp.mysql {
				q = "DELETE x FROM " + bc.sp.q(t.Name) + " AS x WHERE x.id IN (" + in + ") AND " + bc.guard(t, "x")
			}
			k, err := bc.execHeld(ctx, q, args)
			n += k
			if err != nil {
				return n, fmt.Errorf("shardid: deleting shard %d's rows of %s from the monolith: %w", bc.shard, t.Name, err)
			}
		}
	}
	return n, nil
}

// copy writes every row of the shard's schema into the monolith, parents
// first, backBatch rows at a time in key order, and returns how many (the
// rows copied again below not counted twice).
//
// Each table is read after the one before it, while the application
// writes: a photo inserted on the source once the photos were read, and a
// comment of it inserted before the comments are read, reach the
// comments' copy without their parent, and the monolith's foreign key
// refuses them. The change log holds both writes, but applies them only
// after the copy. So a chunk refused by a foreign key has the tables
// before its own copied again (the rows written since included), and is
// written again, up to backFKTries times; a key still missing then is
// the error it was.
func (bc *backCopy) copy(ctx context.Context) (int64, error) {
	var total int64
	for i, t := range bc.sp.tables {
		pauseAt(ctx, "rollback copy "+t.Name)
		n, err := bc.copyTable(ctx, t, func(rows [][]any) error {
			for tries := 0; ; tries++ {
				err := bc.upsert(ctx, t, rows, nil, nil)
				if err == nil || i == 0 || tries == backFKTries || !isForeignKeyViolation(err) {
					return err
				}
				for _, p := range bc.sp.tables[:i] {
					if _, err := bc.copyTable(ctx, p, func(rows [][]any) error { return bc.upsert(ctx, p, rows, nil, nil) }); err != nil {
						return err
					}
				}
			}
		})
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// backFKTries is how many times copy copies a chunk's parent tables again
// for a chunk that a foreign key refuses.
const backFKTries = 3

// copyTable reads every row of table t of the shard's schema, backBatch
// rows at a time in key order, gives each chunk to write, and returns how
// many rows it wrote.
func (bc *backCopy) copyTable(ctx context.Context, t SplitTable, write func(rows [][]any) error) (int64, error) {
	c := bc.cols[t.Name]
	sel := "SELECT " + columnList(bc.src, c.write) + " FROM " + bc.srcTable(t.Name)
	var n int64
	var after any
	for {
		q, args := sel+" ORDER BY id LIMIT "+strconv.Itoa(backBatch), []any(nil)
		if after != nil {
			q, args = sel+" WHERE id > "+placeholders(bc.src, 0, 1)+" ORDER BY id LIMIT "+strconv.Itoa(backBatch), []any{after}
		}
		var rows [][]any
		err := readSession(ctx, bc.src, func(qr querier) error {
			rs, err := qr.QueryContext(ctx, q, args...)
			if err != nil {
				return err
			}
			rows, err = scanAll(rs, len(c.write))
			return err
		})
		if err != nil {
			return n, fmt.Errorf("shardid: reading %s: %w", bc.srcTable(t.Name), err)
		}
		if len(rows) == 0 {
			return n, nil
		}
		if err := write(rows); err != nil {
			return n, err
		}
		n += int64(len(rows))
		if bc.progress != nil {
			bc.progress(t.Name, n)
		}
		if after, err = asInt64(rows[len(rows)-1][0]); err != nil {
			return n, err
		}
	}
}

// isForeignKeyViolation reports whether err is a row refused by a foreign
// key for a parent row that is missing: PostgreSQL's SQLSTATE 23503, MySQL's
// error 1452.
func isForeignKeyViolation(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "23503"
	}
	return strings.Contains(err.Error(), "Error 1452")
}

// upsert writes rows (values of the columns the copy writes) of table t
// into the monolith, over the shard's rows of the same keys, in one
// transaction let through the monolith's seal of the shard. A key that a
// row of another shard holds fails with ErrKeyCollision, whatever the
// moment it was written there. With rc, every row is verified as it is
// written (rowCheck.applied, srcH their hashes on the source).
//
// On PostgreSQL the rows are written in place (an upsert whose update
// only takes the shard's rows), as applyChunk does; MySQL deletes the
// shard's rows of those keys and inserts. A unique value that a row of
// the shard outside rows holds (a swap whose other half is still in the
// log) evicts that row, as applyChunk does; one that a row of another
// shard holds is a collision.
func (bc *backCopy) upsert(ctx context.Context, t SplitTable, rows [][]any, srcH map[int64]uint64, rc *rowCheck) error {
	c := bc.cols[t.Name]
	ids := make([]int64, len(rows))
	for i, r := range rows {
		id, err := asInt64(r[0])
		if err != nil {
			return err
		}
		ids[i] = id
	}
	inPlace := !bc.sp.mysql
	var evict []int64
	for round := 0; ; round++ {
		var old, now map[int64]uint64
		err := moverTx(ctx, bc.sp.mono, func(tx *sql.Tx) (err error) {
			if err := bc.hold(ctx, tx); err != nil {
				return err
			}
			if err := bc.checkTaken(ctx, tx, t, ids); err != nil {
				return err
			}
			if rc != nil {
				if old, err = keyHashes(ctx, tx, bc.sp.mono, bc.mine(t), textHashed(c.all), append(slices.Clone(ids), evict...)); err != nil {
					return err
				}
			}
			del := slices.Clone(evict)
			if !inPlace {
				del = append(del, ids...)
			}
			if err := bc.deleteKeys(ctx, tx, t, del); err != nil {
				return err
			}
			if err := bc.insert(ctx, tx, t, c.write, rows, inPlace); err != nil {
				return err
			}
			if rc != nil {
				now, err = keyHashes(ctx, tx, bc.sp.mono, bc.mine(t), textHashed(c.all), ids)
			}
			return err
		})
		if err == nil {
			if rc != nil {
				rc.applied(ids, srcH, old, now)
				rc.evicted(evict, old)
			}
			return nil
		}
		if !isUniqueViolation(err) || errors.Is(err, ErrKeyCollision) || round == 3 {
			return fmt.Errorf("shardid: writing shard %d's rows of %s into the monolith: %w", bc.shard, t.Name, err)
		}
		// A key another shard's row took since checkTaken (MySQL: the
		// primary key's violation).
		if terr := moverTx(ctx, bc.sp.mono, func(tx *sql.Tx) error { return bc.checkTaken(ctx, tx, t, ids) }); terr != nil {
			return fmt.Errorf("shardid: writing shard %d's rows of %s into the monolith: %w", bc.shard, t.Name, terr)
		}
		more, ferr := conflictingKeys(ctx, bc.sp.mono, bc.sp.schema, t.Name, c.write, rows, append(slices.Clone(ids), evict...))
		if ferr != nil {
			return fmt.Errorf("shardid: writing shard %d's rows of %s into the monolith: %w (and looking for the rows that hold its values: %w)", bc.shard, t.Name, err, ferr)
		}
		if len(more) > 0 {
			// Only the shard's own rows may give a value up.
			var others []struct {
				ID    int64
				Shard *int
			}
			in, args := bc.inArgs(more)
			q := "SELECT x.id AS id, " + bc.sp.rowShard(t, "x", 0) + " AS shard FROM " + bc.sp.q(t.Name) + " AS x WHERE x.id IN (" + in + ") AND NOT (" + bc.guard(t, "x") + ") ORDER BY x.id"
			if err := bc.sp.mono.WithContext(ctx).Raw(q, args...).Scan(&others).Error; err != nil {
				return err
			}
			if len(others) > 0 {
				return withDetail(ErrKeyCollision, fmt.Sprintf("a row of shard %d's %s has a unique value that %s id %d of shard %s holds in the monolith (%s)",
					bc.shard, t.Name, t.Name, others[0].ID, shardName(others[0].Shard), err.Error()))
			}
			evict = append(evict, more...)
			continue
		}
		if !inPlace {
			return fmt.Errorf("shardid: writing shard %d's rows of %s into the monolith: %w", bc.shard, t.Name, err)
		}
		inPlace = false // two rows of the chunk swapped a value
	}
}

// deleteKeys deletes the shard's rows of t with keys ids in tx.
func (bc *backCopy) deleteKeys(ctx context.Context, tx *sql.Tx, t SplitTable, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	in, args := bc.inArgs(ids)
	q := "DELETE FROM " + bc.sp.q(t.Name) + " AS x WHERE x.id IN (" + in + ") AND " + bc.guard(t, "x")
	if bc.sp.mysql {
		q = "DELETE x FROM " + bc.sp.q(t.Name) + " AS x WHERE x.id IN (" + in + ") AND " + bc.guard(t, "x")
	}
	_, err := tx.ExecContext(ctx, q, args...)
	return err
}

// insert inserts rows (values of cols) into the monolith's table t in tx.
// In place (PostgreSQL), a row whose key exists replaces it only if it is
// the shard's; if one is not, it fails with ErrKeyCollision.
func (bc *backCopy) insert(ctx context.Context, tx *sql.Tx, t SplitTable, cols []string, rows [][]any, inPlace bool) error {
	db := bc.sp.mono
	head := "INSERT INTO " + bc.sp.q(t.Name) + " (" + columnList(db, cols) + ") VALUES "
	tail := ""
	if !bc.sp.mysql {
		head = "INSERT INTO " + bc.sp.q(t.Name) + " AS x (" + columnList(db, cols) + ") OVERRIDING SYSTEM VALUE VALUES "
	}
	if inPlace {
		set := make([]string, 0, len(cols))
		for _, c := range cols[1:] {
			set = append(set, quoteIdent(db, c)+" = EXCLUDED."+quoteIdent(db, c))
		}
		if len(set) == 0 {
			set = append(set, "id = EXCLUDED.id")
		}
		tail = " ON CONFLICT (id) DO UPDATE SET " + strings.Join(set, ", ") + " WHERE " + bc.guard(t, "x")
	}
	return eachInsert(db, head, tail, len(cols), rows, func(q string, args []any, n int) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		if k, err := res.RowsAffected(); err == nil && inPlace && k < int64(n) {
			// The update skipped a row that is not the shard's: taken by
			// another shard's row since checkTaken.
			return withDetail(ErrKeyCollision, fmt.Sprintf("%d of shard %d's rows of %s have keys that rows of other shards took in the monolith meanwhile", int64(n)-k, bc.shard, t.Name))
		}
		return nil
	})
}
