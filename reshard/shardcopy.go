package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"
)

// shardCopier copies the tables of a shard's schema from src to dst while
// the source takes writes, so that the fence only has to cover the tail:
//
//	capture   the change log and its triggers on the source, before anything is read
//	copy      a snapshot of each table (COPY on PostgreSQL)
//	converge  the copy checked against what it sent (or both sides
//	          compared), and the change log applied, each row verified
//	          as it is written, until little is left (all without a
//	          fence)
//	finish    under the fence: the rest of the change log, and the keys
//	          still in doubt compared again (rowcheck.go)
//	release   the triggers and the change log dropped
type shardCopier struct {
	src, dst *gorm.DB
	schema   string
	tables   []string
	batch    int
	progress func(table string, copied int64)
	// caughtUp, if not nil, hears after each round of catching up how many
	// changes it applied and how many wait in the log (MoveRecord.CaughtUp).
	caughtUp func(applied, backlog int64)

	// fencedTarget says that the target's tables carry a move's fence
	// (a move's do, fenceForMover): on MySQL the copy passes it once per
	// transaction (passFenceMySQL).
	fencedTarget bool
	// hold is the fence that the move's run set on the target: every
	// transaction that writes there holds it first (fenceHold).
	hold fenceHold

	// compareSource: after the copy, compare the source with it as well
	// (MoveOptions.CompareSource).
	compareSource bool
	// comparedSource: converge compared both sides, asked to or because
	// the copy did not verify itself (MoveResult.ComparedSource).
	comparedSource bool

	cols   map[string]columns    // by table
	sent   map[string]bucketSent // by table: what the copy sent
	checks map[string]*rowCheck  // by table, once both sides were compared
}

// changeBatchSize is how many change log entries are applied at a time.
const changeBatchSize = 5000

func newShardCopier(src, dst *gorm.DB, schema string, tables []string, batch int, progress func(string, int64)) *shardCopier {
	return &shardCopier{src: src, dst: dst, schema: schema, tables: tables, batch: batch, progress: progress}
}

// fenceOf is the schema whose fence the copy passes: c.schema if the
// target is fenced, else none ("").
func (c *shardCopier) fenceOf() string {
	if c.fencedTarget {
		return c.schema
	}
	return ""
}

func (c *shardCopier) table(t string) string { return quoteTable(c.src, c.schema, t) }

// capture reads the tables' columns and starts the change log; check (if
// not nil) runs under the lock of the schema's capture (startCapture).
func (c *shardCopier) capture(ctx context.Context, check func(context.Context) error) error {
	c.cols = map[string]columns{}
	for _, t := range c.tables {
		cols, err := tableColumns(ctx, c.src, c.schema, t)
		if err != nil {
			return err
		}
		// A move's rows are hashed by their columns' types, where the
		// target's table (created by now) has the same kind of column:
		// nothing of the hashes outlives the move.
		var on columns
		if cols.types != nil {
			if on, err = tableColumns(ctx, c.dst, c.schema, t); err != nil {
				return fmt.Errorf("shardid: reading %s on the target: %w", c.table(t), err)
			}
		}
		c.cols[t] = cols.byType(on)
	}
	if err := startCapture(ctx, c.src, c.schema, c.tables, check); err != nil {
		return fmt.Errorf("shardid: starting the change log of %s: %w", c.schema, err)
	}
	return nil
}

// copy copies every table, after emptying it on the target. The target is
// fenced for all but the mover (fenceForMover): every write here goes
// through moverTx or its equivalent. On PostgreSQL, the rows go in one
// transaction with the COPY protocol (copyAllPG); on MySQL, in multi-row
// INSERT batches in key order (copyBatches).
func (c *shardCopier) copy(ctx context.Context) (int64, error) {
	c.sent = map[string]bucketSent{}
	if c.dst.Dialector.Name() != "mysql" {
		n, err := c.copyAllPG(ctx)
		if !errors.Is(err, errNotPgx) {
			return n, err
		}
	}
	if err := c.empty(ctx); err != nil {
		return 0, fmt.Errorf("shardid: emptying shard %s on the target: %w", c.schema, err)
	}
	var total int64
	for _, t := range c.tables {
		n, sent, err := copyBatches(ctx, c.src, c.dst, c.hold, c.fenceOf(), c.table(t), c.cols[t], c.batch, c.progressOf(t))
		if err != nil {
			return total, err
		}
		c.sent[t] = sent
		total += n
	}
	return total, nil
}

// progressOf is c.progress for table t, or nil.
func (c *shardCopier) progressOf(t string) func(int64) {
	if c.progress == nil {
		return nil
	}
	return func(n int64) { c.progress(t, n) }
}

// copyAllPG is copy on PostgreSQL: one transaction on the target, which
// holds the move's fences (fenceHold), empties the tables with one
// TRUNCATE of them all (which refuses to truncate a table that another
// table's foreign key references unless that table goes too), and then
// pipes each table's COPY TO on the source into its COPY FROM (copyPG),
// FREEZE where the table is a plain one (not partitioned): the rows are
// written frozen and visible, as VACUUM would leave them, so that neither
// the copy's check nor the shard's first queries set their hint bits,
// and no VACUUM has to freeze them later. That needs the table truncated
// by the same transaction; a copy stopped halfway leaves nothing. It
// returns errNotPgx, having done nothing, if the target's driver is not
// pgx's.
func (c *shardCopier) copyAllPG(ctx context.Context) (total int64, err error) {
	all := make([]string, len(c.tables))
	for i, t := range c.tables {
		all[i] = c.table(t)
	}
	err = withPgx(ctx, c.dst, func(dc *pgx.Conn) error {
		tx, err := dc.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := tx.Exec(ctx, moverSettingsPG); err != nil {
			return err
		}
		if err := c.hold.holdPgx(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "TRUNCATE TABLE "+strings.Join(all, ", ")); err != nil {
			return fmt.Errorf("shardid: emptying shard %s on the target: %w", c.schema, err)
		}
		for i, t := range c.tables {
			var plain bool
			if err := tx.QueryRow(ctx, "SELECT relkind = 'r' FROM pg_class WHERE oid = $1::regclass", all[i]).Scan(&plain); err != nil {
				return fmt.Errorf("shardid: looking %s up on the target: %w", all[i], err)
			}
			n, sent, err := copyPG(ctx, c.src, dc, all[i], c.cols[t], plain, c.batch, c.progressOf(t))
			if err != nil {
				return err
			}
			c.sent[t] = sent
			total += n
		}
		return tx.Commit(ctx)
	})
	if err != nil {
		return 0, err
	}
	return total, nil
}

// empty empties the tables on the target, in transactions that hold the
// move's fence there (fenceHold). On PostgreSQL (through a driver other
// than pgx's), one TRUNCATE of them all, as copyAllPG's. On MySQL a
// TRUNCATE would commit the transaction, and the hold with it: a held
// target is emptied with DELETEs of emptyChunk rows, a transaction each,
// which pass the fence once (passFenceMySQL) rather than once a row, and
// cost nothing on a target the move created, empty; one it finds with
// rows (a move run again) takes a transaction a chunk, not one for them
// all.
func (c *shardCopier) empty(ctx context.Context) error {
	if c.dst.Dialector.Name() != "mysql" {
		all := make([]string, len(c.tables))
		for i, t := range c.tables {
			all[i] = c.table(t)
		}
		return moverTx(ctx, c.dst, func(tx *sql.Tx) error {
			if err := c.hold.hold(ctx, tx); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "TRUNCATE TABLE "+strings.Join(all, ", "))
			return err
		})
	}
	for _, t := range c.tables {
		if len(c.hold.schemas) == 0 {
			if err := moverTx(ctx, c.dst, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "TRUNCATE TABLE "+c.table(t))
				return err
			}); err != nil {
				return err
			}
			continue
		}
		for {
			var n int64
			err := moverTx(ctx, c.dst, func(tx *sql.Tx) error {
				if err := c.hold.hold(ctx, tx); err != nil {
					return err
				}
				if c.fencedTarget {
					if err := passFenceMySQL(ctx, tx, c.schema); err != nil {
						return err
					}
				}
				r, err := tx.ExecContext(ctx, "DELETE FROM "+c.table(t)+" ORDER BY id LIMIT "+strconv.Itoa(emptyChunk))
				if err != nil {
					return err
				}
				n, err = r.RowsAffected()
				return err
			})
			if err != nil {
				return err
			}
			if n < int64(emptyChunk) {
				break
			}
		}
	}
	return nil
}

// emptyChunk is how many rows a transaction of empty deletes (MySQL); a
// variable for tests (SetEmptyChunk).
var emptyChunk = 10000

// catchUp applies the change log until a read of it finds fewer than
// changeBatchSize entries (or none, if all), and returns how many entries
// it applied.
func (c *shardCopier) catchUp(ctx context.Context, all bool) (applied int, err error) {
	if c.caughtUp != nil {
		defer func() {
			if err != nil {
				return
			}
			// The backlog is only a figure for operators: a failure to
			// count it fails nothing.
			if n, cerr := countChanges(ctx, c.src, c.schema); cerr == nil {
				c.caughtUp(int64(applied), n)
			}
		}()
	}
	for {
		b, err := readChanges(ctx, c.src, c.schema, changeBatchSize)
		if err != nil {
			return applied, fmt.Errorf("shardid: reading the change log of %s: %w", c.schema, err)
		}
		if len(b.seqs) == 0 {
			return applied, nil
		}
		tables := make([]string, 0, len(b.keys))
		for t := range b.keys {
			tables = append(tables, t)
		}
		sort.Strings(tables)
		for _, t := range tables {
			cols, ok := c.cols[t]
			if !ok {
				return applied, fmt.Errorf("shardid: the change log of %s names table %q, not one of the move's", c.schema, t)
			}
			if err := applyKeys(ctx, c.src, c.dst, c.hold, c.schema, t, cols, b.keys[t], c.checks[t]); err != nil {
				return applied, err
			}
		}
		// Only what was read: entries committed meanwhile stay. (A log
		// made again by another run since starts at another seq.)
		pauseAt(ctx, "move forget")
		if err := forgetChanges(ctx, c.src, c.schema, b.seqs); err != nil {
			return applied, fmt.Errorf("shardid: trimming the change log of %s: %w", c.schema, err)
		}
		applied += len(b.seqs)
		if !all && len(b.seqs) < changeBatchSize {
			return applied, nil
		}
	}
}

// smallBacklog is how many change log entries converge leaves for the
// fence at most, unless the writers outpace the mover.
const smallBacklog = 256

// converge checks the copy (verifySent), or compares both sides, then
// applies the change log, round after round, until a round finds little in
// it: what the fence will have to apply. On PostgreSQL the new rows'
// statistics are gathered meanwhile (analyze).
func (c *shardCopier) converge(ctx context.Context) (err error) {
	if c.dst.Dialector.Name() != "mysql" {
		wait := c.analyze(ctx)
		defer func() {
			if aerr := wait(err != nil); err == nil {
				err = aerr
			}
		}()
	}
	verified := false
	if !c.compareSource {
		// The first round of the change log is applied while the target
		// is read as the copy left it: each change verified as it is
		// written, into checks of their own that start from nothing,
		// and to which the copy's sums are added once they are verified.
		delta := map[string]*rowCheck{}
		for _, t := range c.tables {
			delta[t] = &rowCheck{table: c.table(t), suspect: map[int64]string{}}
		}
		c.checks = delta
		base, err := c.verifySent(ctx, func(ctx context.Context) error {
			_, err := c.catchUp(ctx, false)
			return err
		})
		if err != nil {
			return err
		}
		if verified = base != nil; verified {
			for t, rc := range delta {
				rc.rows += base[t].rows
				rc.sum += base[t].sum
			}
		} else {
			c.checks = nil
		}
	}
	if !verified {
		c.comparedSource = true
		if _, err := c.catchUp(ctx, false); err != nil {
			return err
		}
		// From here on every change is verified as it is applied; the
		// comparison sees every change applied before.
		checks := map[string]*rowCheck{}
		for _, t := range c.tables {
			rc, err := compareByBuckets(ctx, c.src, c.dst, c.table(t), c.cols[t].hashed())
			if err != nil {
				return err
			}
			checks[t] = rc
		}
		c.checks = checks
	}
	prev := -1
	for round := 0; ; round++ {
		n, err := c.catchUp(ctx, false)
		if err != nil {
			return err
		}
		if round == 0 {
			// Keys that differed in the comparison and that no change
			// explains: compared again now, so that a copy that really
			// differs fails before the fence.
			for _, t := range c.tables {
				if err := c.checks[t].recheck(ctx, c.src, c.dst, c.cols[t].hashed()); err != nil {
					return err
				}
			}
			continue
		}
		// Until little is left, or the writers write as fast as the
		// mover applies.
		if n <= smallBacklog || round >= 20 || (round >= 4 && n >= prev) {
			return c.unexplained(ctx)
		}
		prev = n
	}
}

// analyze gathers the statistics of the copied tables on the target
// (PostgreSQL's ANALYZE, which reads a sample of a table's rows, not all
// of them) on a session of its own, now rather than when autovacuum comes
// by: the verification's lookups by key, and the shard's queries once it
// has moved, are planned with them. It returns at once; wait waits for it
// and returns its error, or stops it first if stop.
func (c *shardCopier) analyze(ctx context.Context) (wait func(stop bool) error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		for _, t := range c.tables {
			if err := c.dst.WithContext(ctx).Exec("ANALYZE " + c.table(t)).Error; err != nil {
				done <- fmt.Errorf("shardid: analyzing %s on the target: %w", c.table(t), err)
				return
			}
		}
		done <- nil
	}()
	return func(stop bool) error {
		if stop {
			cancel()
		}
		err := <-done
		cancel()
		return err
	}
}

// verifySent checks that each table on the target holds what the copy
// sent of it: as many rows, and the same sum of their hashes, computed by
// the target (tableSum) in one snapshot, taken before beside starts (on
// a goroutine of its own): beside may write to the target meanwhile, the
// sums are of the copy as it was. If so, it returns the sums, a
// verification set up with no key in doubt: the copy verified itself
// with one read of the target, and none of the source. Every write to the
// source after a row was read is in the change log, applied and verified
// from then on. It returns nil if a sum differs (the caller then compares
// both sides, bucket by bucket of keys). It returns when beside has
// returned, with its error; beside runs whatever the outcome, unless the
// target could not be read at all.
func (c *shardCopier) verifySent(ctx context.Context, beside func(context.Context) error) (map[string]sentRows, error) {
	want := map[string]sentRows{}
	for _, t := range c.tables {
		sent, ok := c.sent[t]
		if !ok || sent == nil {
			// Not copied, or copied without a hash of every row.
			return nil, beside(ctx)
		}
		var w sentRows
		for _, v := range sent {
			w.rows += v.rows
			w.sum += v.sum
		}
		want[t] = w
	}
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var done chan error
	got := map[string]sentRows{}
	err := readConn(ctx, c.dst, func(conn *sql.Conn, settings string) error {
		return txOn(ctx, conn, snapshotRead, settings, func(tx *sql.Tx) error {
			// The snapshot: taken by the transaction's first read of a
			// table (InnoDB's at its first read of one of its tables).
			rows, err := tx.QueryContext(ctx, "SELECT 1 FROM "+c.table(c.tables[0])+" LIMIT 1")
			if err != nil {
				return err
			}
			if err := rows.Close(); err != nil {
				return err
			}
			done = make(chan error, 1)
			go func() { done <- beside(bctx) }()
			for _, t := range c.tables {
				s, err := tableSumOn(ctx, tx, c.dst, c.table(t), c.cols[t].hashed())
				if err != nil {
					return fmt.Errorf("shardid: verifying the copy of %s: %w", c.table(t), err)
				}
				got[t] = s
			}
			return nil
		})
	})
	if done == nil {
		return nil, err
	}
	if err != nil {
		cancel()
	}
	if berr := <-done; err == nil {
		err = berr
	}
	if err != nil {
		return nil, err
	}
	for t, w := range want {
		if got[t] != w {
			return nil, nil
		}
	}
	return got, nil
}

// snapshotRead is verifySent's transaction: one snapshot for all its
// reads.
var snapshotRead = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}

// unexplained compares the keys in doubt again and fails with
// ErrCopyDiffers if one still differs with no change of it waiting in the
// log: the copies differ, and the fence would only fail later.
func (c *shardCopier) unexplained(ctx context.Context) error {
	var pending map[string]map[int64]bool
	for _, t := range c.tables {
		rc := c.checks[t]
		if err := rc.recheck(ctx, c.src, c.dst, c.cols[t].hashed()); err != nil {
			return err
		}
		if len(rc.suspect) == 0 {
			continue
		}
		if pending == nil {
			var err error
			if pending, err = pendingKeys(ctx, c.src, c.schema); err != nil {
				return fmt.Errorf("shardid: reading the change log of %s: %w", c.schema, err)
			}
		}
		for id, why := range rc.suspect {
			if !pending[t][id] {
				return c.withCopyDiffers(ctx, t, fmt.Errorf("%w: table %s, id %d (%s), before the fence", ErrCopyDiffers, t, id, why))
			}
		}
	}
	return nil
}

// finish runs under the fence, when no write reaches the source any more:
// it applies the rest of the change log (verifying every row it writes),
// compares the keys still in doubt again, and returns each table's row
// count and checksum, equal on both sides; or an error naming a key that
// differs.
func (c *shardCopier) finish(ctx context.Context) ([]TableCheck, error) {
	if _, err := c.catchUp(ctx, true); err != nil {
		return nil, err
	}
	var out []TableCheck
	for _, t := range c.tables {
		rc := c.checks[t]
		if err := rc.recheck(ctx, c.src, c.dst, c.cols[t].hashed()); err != nil {
			return nil, err
		}
		if len(rc.suspect) > 0 {
			id, why := rc.firstSuspect()
			return nil, c.withCopyDiffers(ctx, t, fmt.Errorf("%w: table %s differs in %d row(s) after the copy, the first with id %d (%s)",
				ErrCopyDiffers, t, len(rc.suspect), id, why))
		}
		out = append(out, TableCheck{Table: t, Rows: rc.rows, Checksum: rc.sum})
	}
	return out, nil
}

// release drops the change log and its triggers on the source; check (if
// not nil) runs under the capture's lock (stopCapture).
func (c *shardCopier) release(ctx context.Context, check func(context.Context) error) error {
	return stopCapture(ctx, c.src, c.schema, check)
}
