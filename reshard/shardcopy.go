package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"

	"gorm.io/gorm"
)

// shardCopier copies the tables of a shard's schema from src to dst while
// the source takes writes, so that the fence only has to cover the tail:
//
//	capture   the change log and its triggers on the source, before anything is read
//	copy      a snapshot of each table (COPY on PostgreSQL)
//	converge  sums by key ranges on both sides, and the change log applied
//	          until little is left (both without a fence)
//	finish    under the fence: the rest of the change log, and the ranges
//	          it touched (or that differed) summed again on both sides
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

	cols   map[string][]string       // by table, "id" first
	ranges map[string]*tableRanges   // by table, once converge began
	dirty  map[string]map[int64]bool // keys applied since the ranges were last summed
}

// changeBatchSize is how many change log entries are applied at a time.
const changeBatchSize = 5000

func newShardCopier(src, dst *gorm.DB, schema string, tables []string, batch int, progress func(string, int64)) *shardCopier {
	return &shardCopier{src: src, dst: dst, schema: schema, tables: tables, batch: batch, progress: progress}
}

func (c *shardCopier) table(t string) string { return quoteTable(c.src, c.schema, t) }

// capture reads the tables' columns and starts the change log.
func (c *shardCopier) capture(ctx context.Context) error {
	c.cols = map[string][]string{}
	for _, t := range c.tables {
		cols, err := tableColumns(ctx, c.src, c.schema, t)
		if err != nil {
			return err
		}
		c.cols[t] = cols
	}
	if err := startCapture(ctx, c.src, c.schema, c.tables); err != nil {
		return fmt.Errorf("shardid: starting the change log of %s: %w", c.schema, err)
	}
	return nil
}

// copy copies every table, after emptying it on the target.
func (c *shardCopier) copy(ctx context.Context) (int64, error) {
	// Empty them all in one statement on PostgreSQL, which refuses to
	// truncate a table that another table's foreign key references unless
	// that table goes too. The target is fenced for all but the mover
	// (fenceForMover): every write here goes through moverTx.
	var stmts []string
	if c.dst.Dialector.Name() == "mysql" {
		for _, t := range c.tables {
			stmts = append(stmts, "TRUNCATE TABLE "+c.table(t))
		}
	} else {
		var all []string
		for _, t := range c.tables {
			all = append(all, c.table(t))
		}
		stmts = append(stmts, "TRUNCATE TABLE "+strings.Join(all, ", "))
	}
	err := moverTx(ctx, c.dst, func(tx *sql.Tx) error {
		for _, q := range stmts {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("shardid: emptying shard %s on the target: %w", c.schema, err)
	}
	var total int64
	for _, t := range c.tables {
		var progress func(int64)
		if c.progress != nil {
			progress = func(n int64) { c.progress(t, n) }
		}
		n, err := copySnapshot(ctx, c.src, c.dst, c.table(t), c.cols[t], c.batch, progress)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

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
			if c.dirty != nil {
				if c.dirty[t] == nil {
					c.dirty[t] = map[int64]bool{}
				}
				for _, id := range b.keys[t] {
					c.dirty[t][id] = true
				}
			}
			if err := applyKeys(ctx, c.src, c.dst, c.table(t), cols, b.keys[t]); err != nil {
				return applied, err
			}
		}
		// Only what was read: entries committed meanwhile stay.
		if err := forgetChanges(ctx, c.src, c.schema, b.seqs); err != nil {
			return applied, fmt.Errorf("shardid: trimming the change log of %s: %w", c.schema, err)
		}
		applied += len(b.seqs)
		if !all && len(b.seqs) < changeBatchSize {
			return applied, nil
		}
	}
}

// pending returns the ranges of each table that are not clean: they
// differed when last summed, or a change was applied to them since.
func (c *shardCopier) pending() (map[string][]int, int) {
	out := map[string][]int{}
	n := 0
	for _, t := range c.tables {
		tr := c.ranges[t]
		set := map[int]bool{}
		for i := range tr.bad {
			set[i] = true
		}
		for id := range c.dirty[t] {
			set[tr.rangeOf(id)] = true
		}
		for i := range set {
			out[t] = append(out[t], i)
		}
		n += len(set)
	}
	return out, n
}

// converge sums both sides by key ranges, then catches up and sums again
// the ranges that are not clean, a few rounds, until few are left: what
// the fence will have to check.
func (c *shardCopier) converge(ctx context.Context) error {
	if _, err := c.catchUp(ctx, false); err != nil {
		return err
	}
	// From here on every applied change marks its range; the sums are
	// taken after every change applied before.
	c.dirty = map[string]map[int64]bool{}
	c.ranges = map[string]*tableRanges{}
	for _, t := range c.tables {
		tr, err := sumTable(ctx, c.src, c.dst, c.table(t), c.cols[t])
		if err != nil {
			return err
		}
		c.ranges[t] = tr
	}
	prev := -1
	for round := 0; ; round++ {
		if _, err := c.catchUp(ctx, false); err != nil {
			return err
		}
		todo, n := c.pending()
		// Until few are left, or the writers dirty ranges as fast as
		// they are checked.
		if n <= 16 || round == 12 || (prev >= 0 && n > prev*9/10) {
			return nil
		}
		prev = n
		if err := c.recheck(ctx, todo); err != nil {
			return err
		}
	}
}

// recheck sums todo again on both sides, after forgetting the changed
// keys: a change applied from now on marks its range again.
func (c *shardCopier) recheck(ctx context.Context, todo map[string][]int) error {
	c.dirty = map[string]map[int64]bool{}
	for _, t := range c.tables {
		if err := c.ranges[t].recheck(ctx, c.src, c.dst, c.table(t), c.cols[t], todo[t]); err != nil {
			return err
		}
	}
	return nil
}

// finish runs under the fence, when no write reaches the source any more:
// it applies the rest of the change log, sums again the ranges that are
// not clean, and returns each table's row count and checksum, equal on
// both sides; or an error naming a range that differs.
func (c *shardCopier) finish(ctx context.Context) ([]TableCheck, error) {
	if _, err := c.catchUp(ctx, true); err != nil {
		return nil, err
	}
	todo, _ := c.pending()
	if err := c.recheck(ctx, todo); err != nil {
		return nil, err
	}
	var out []TableCheck
	for _, t := range c.tables {
		tr := c.ranges[t]
		if len(tr.bad) > 0 {
			bad := make([]int, 0, len(tr.bad))
			for i := range tr.bad {
				bad = append(bad, i)
			}
			sort.Ints(bad)
			return nil, fmt.Errorf("%w: table %s differs in %d key range(s) after the copy, the first %s",
				errCopyDiffers, t, len(bad), tr.describe(bad[0]))
		}
		check := tr.total()
		check.Table = t
		out = append(out, check)
	}
	return out, nil
}

// release drops the change log and its triggers on the source.
func (c *shardCopier) release(ctx context.Context) error {
	return stopCapture(ctx, c.src, c.schema)
}

var errCopyDiffers = fmt.Errorf("shardid: the copies differ")
