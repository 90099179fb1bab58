package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
)

// The roll-back's change log and verification: shardCopier's, with the
// monolith's side read and written through backCopy's guard.

// capture starts the change log of the shard's schema on its target
// (startCapture), unless keep and a whole one is there already: a
// roll-back run again after it was stopped goes on with the log it left,
// which holds every write since its first copy began. check runs under
// the capture's lock (startCapture).
func (bc *backCopy) capture(ctx context.Context, keep bool, check func(context.Context) error) error {
	tables := bc.sp.tableNames()
	if keep {
		whole, err := captureWhole(ctx, bc.src, bc.schema, tables)
		if err != nil || whole {
			return err
		}
	}
	if err := startCapture(ctx, bc.src, bc.schema, tables, check); err != nil {
		return fmt.Errorf("shardid: starting the change log of %s: %w", bc.schema, err)
	}
	return nil
}

// catchUp applies the change log until a read of it finds fewer than
// changeBatchSize entries (or none, if all), and returns how many entries
// it applied.
func (bc *backCopy) catchUp(ctx context.Context, all bool) (int, error) {
	applied := 0
	for {
		b, err := readChanges(ctx, bc.src, bc.schema, changeBatchSize)
		if err != nil {
			return applied, fmt.Errorf("shardid: reading the change log of %s: %w", bc.schema, err)
		}
		if len(b.seqs) == 0 {
			return applied, nil
		}
		if err := bc.apply(ctx, b.keys); err != nil {
			return applied, err
		}
		// Only what was read: entries committed meanwhile stay.
		if err := forgetChanges(ctx, bc.src, bc.schema, b.seqs); err != nil {
			return applied, fmt.Errorf("shardid: trimming the change log of %s: %w", bc.schema, err)
		}
		applied += len(b.seqs)
		if !all && len(b.seqs) < changeBatchSize {
			return applied, nil
		}
	}
}

// apply brings the monolith's rows of keys (by table) to their state on
// the source, re-read now: the rows gone from the source deleted, children
// first (deleteGone), then the others written, parents first (upsert).
func (bc *backCopy) apply(ctx context.Context, keys map[string][]int64) error {
	type read struct {
		rows [][]any
		srcH map[int64]uint64
	}
	present := map[string][]read{}
	gone := map[string][]int64{}
	for table, ids := range keys {
		c, ok := bc.cols[table]
		if !ok {
			return fmt.Errorf("shardid: the change log of %s names table %q, not one of the split's", bc.schema, table)
		}
		for lo := 0; lo < len(ids); lo += backBatch {
			chunk := ids[lo:min(lo+backBatch, len(ids))]
			var r read
			err := readSession(ctx, bc.src, func(q querier) (err error) {
				r.rows, r.srcH, err = readRowsHashed(ctx, q, bc.src, bc.srcTable(table), c, chunk)
				return err
			})
			if err != nil {
				return fmt.Errorf("shardid: re-reading changed rows of %s: %w", bc.srcTable(table), err)
			}
			for _, id := range chunk {
				if _, ok := r.srcH[id]; !ok {
					gone[table] = append(gone[table], id)
				}
			}
			if len(r.rows) > 0 {
				present[table] = append(present[table], r)
			}
		}
	}
	for i := len(bc.sp.tables) - 1; i >= 0; i-- {
		t := bc.sp.tables[i]
		for lo := 0; lo < len(gone[t.Name]); lo += backBatch {
			chunk := gone[t.Name][lo:min(lo+backBatch, len(gone[t.Name]))]
			var done []deleted
			err := moverTx(ctx, bc.sp.mono, func(tx *sql.Tx) error {
				done = done[:0]
				if err := bc.hold(ctx, tx); err != nil {
					return err
				}
				return bc.deleteGone(ctx, tx, t, chunk, &done)
			})
			if err != nil {
				return fmt.Errorf("shardid: deleting shard %d's rows of %s from the monolith: %w", bc.shard, t.Name, err)
			}
			for _, d := range done {
				if rc := bc.checks[d.table]; rc != nil {
					rc.applied(d.ids, nil, d.old, nil)
				}
			}
		}
	}
	for _, t := range bc.sp.tables {
		for _, r := range present[t.Name] {
			if err := bc.upsert(ctx, t, r.rows, r.srcH, bc.checks[t.Name]); err != nil {
				return err
			}
		}
	}
	return nil
}

// compare compares both sides by the source's keys, read in key order
// (the monolith's rows by key, through guard), and so starts the
// verification: the keys that differ are suspect. Rows of the shard in the
// monolith whose keys the source does not hold can only have been written
// by the roll-back itself, which deletes them as their change comes.
func (bc *backCopy) compare(ctx context.Context) error {
	checks := map[string]*rowCheck{}
	for _, t := range bc.sp.tables {
		c := bc.cols[t.Name]
		rc := &rowCheck{table: bc.mine(t), src: bc.srcTable(t.Name), suspect: map[int64]string{}}
		keys := make(chan []keyHash, 4)
		scan := make(chan error, 1)
		sctx, cancel := context.WithCancel(ctx)
		go func() { scan <- scanOrdered(sctx, bc.src, bc.srcTable(t.Name), textHashed(c.all), keys) }()
		var err error
		for b := range keys {
			if err != nil {
				continue // drain: the scan stops once cancelled
			}
			ids := make([]int64, len(b))
			for i, k := range b {
				ids[i] = k.id
			}
			var have map[int64]uint64
			err = readSession(ctx, bc.sp.mono, func(q querier) (err error) {
				have, err = keyHashes(ctx, q, bc.sp.mono, rc.table, textHashed(c.all), ids)
				return err
			})
			if err != nil {
				cancel()
				continue
			}
			for _, k := range b {
				h, ok := have[k.id]
				switch {
				case !ok:
					rc.suspect[k.id] = "missing on the target"
				case h != k.h:
					rc.suspect[k.id] = "different on the target"
				}
			}
		}
		serr := <-scan
		cancel()
		if err == nil {
			err = serr
		}
		if err != nil {
			return fmt.Errorf("shardid: comparing shard %d's %s with the monolith's: %w", bc.shard, t.Name, err)
		}
		checks[t.Name] = rc
	}
	bc.checks = checks
	return nil
}

// converge compares both sides, then applies the change log, round after
// round, until a round finds little in it (as shardCopier.converge).
func (bc *backCopy) converge(ctx context.Context) error {
	if _, err := bc.catchUp(ctx, false); err != nil {
		return err
	}
	if err := bc.compare(ctx); err != nil {
		return err
	}
	prev := -1
	for round := 0; ; round++ {
		n, err := bc.catchUp(ctx, false)
		if err != nil {
			return err
		}
		if round == 0 {
			if err := bc.recheck(ctx); err != nil {
				return err
			}
			continue
		}
		if n <= smallBacklog || round >= 20 || (round >= 4 && n >= prev) {
			return bc.unexplained(ctx)
		}
		prev = n
	}
}

// recheck compares the keys in doubt again.
func (bc *backCopy) recheck(ctx context.Context) error {
	for _, t := range bc.sp.tables {
		if err := bc.checks[t.Name].recheck(ctx, bc.src, bc.sp.mono, textHashed(bc.cols[t.Name].all)); err != nil {
			return err
		}
	}
	return nil
}

// unexplained fails with ErrCopyDiffers if a key still differs with no
// change of it waiting in the log, before the fence.
func (bc *backCopy) unexplained(ctx context.Context) error {
	if err := bc.recheck(ctx); err != nil {
		return err
	}
	var pending map[string]map[int64]bool
	for _, t := range bc.sp.tables {
		rc := bc.checks[t.Name]
		if len(rc.suspect) == 0 {
			continue
		}
		if pending == nil {
			var err error
			if pending, err = pendingKeys(ctx, bc.src, bc.schema); err != nil {
				return fmt.Errorf("shardid: reading the change log of %s: %w", bc.schema, err)
			}
		}
		ids := make([]int64, 0, len(rc.suspect))
		for id := range rc.suspect {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			if !pending[t.Name][id] {
				return fmt.Errorf("%w: table %s of shard %d, id %d (%s), before the fence", ErrCopyDiffers, t.Name, bc.shard, id, rc.suspect[id])
			}
		}
	}
	return nil
}

// finish runs under the fence of the shard's schema: the rest of the
// change log, and the keys in doubt compared again; ErrCopyDiffers if one
// still differs. (The roll-back reads the monolith's rows by the shard's
// keys only, so it keeps no totals: rowCheck's rows and sum go unused.)
func (bc *backCopy) finish(ctx context.Context) error {
	if _, err := bc.catchUp(ctx, true); err != nil {
		return err
	}
	return bc.finishChecks(ctx)
}

// finishChecks compares the keys in doubt again; ErrCopyDiffers if one
// still differs.
func (bc *backCopy) finishChecks(ctx context.Context) error {
	if err := bc.recheck(ctx); err != nil {
		return err
	}
	for _, t := range bc.sp.tables {
		rc := bc.checks[t.Name]
		if len(rc.suspect) > 0 {
			id, why := rc.firstSuspect()
			return fmt.Errorf("%w: table %s of shard %d differs in %d row(s) after the copy back, the first with id %d (%s)",
				ErrCopyDiffers, t.Name, bc.shard, len(rc.suspect), id, why)
		}
	}
	return nil
}

// deleted is what deleteGone deleted of a table, for the verification.
type deleted struct {
	table string
	ids   []int64
	old   map[int64]uint64
}

// deleteGone deletes the shard's rows of t with keys ids (gone from the
// source) in tx, children first: with each, its child rows in the monolith
// that the source no longer holds either. A child row the source still
// holds stays, as the child of no shard it is there too.
func (bc *backCopy) deleteGone(ctx context.Context, tx *sql.Tx, t SplitTable, ids []int64, done *[]deleted) error {
	if len(ids) == 0 {
		return nil
	}
	for _, c := range bc.children(t) {
		var kids []int64
		for lo := 0; lo < len(ids); lo += backBatch {
			in, args := bc.inArgs(ids[lo:min(lo+backBatch, len(ids))])
			rows, err := tx.QueryContext(ctx, "SELECT x.id FROM "+bc.sp.q(c.Name)+" AS x WHERE "+bc.sp.col("x", c.Via)+" IN ("+in+") AND "+bc.guard(c, "x"), args...)
			if err != nil {
				return err
			}
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				kids = append(kids, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		var gone []int64
		for lo := 0; lo < len(kids); lo += backBatch {
			chunk := kids[lo:min(lo+backBatch, len(kids))]
			var have []int64
			if err := bc.src.WithContext(ctx).Raw("SELECT id FROM "+bc.srcTable(c.Name)+" WHERE id IN ?", chunk).Scan(&have).Error; err != nil {
				return err
			}
			for _, id := range chunk {
				if !slices.Contains(have, id) {
					gone = append(gone, id)
				}
			}
		}
		if err := bc.deleteGone(ctx, tx, c, gone, done); err != nil {
			return err
		}
	}
	for lo := 0; lo < len(ids); lo += backBatch {
		chunk := ids[lo:min(lo+backBatch, len(ids))]
		old, err := keyHashes(ctx, tx, bc.sp.mono, bc.mine(t), textHashed(bc.cols[t.Name].all), chunk)
		if err != nil {
			return err
		}
		if err := bc.deleteKeys(ctx, tx, t, chunk); err != nil {
			return err
		}
		*done = append(*done, deleted{t.Name, chunk, old})
	}
	return nil
}

// reconcile brings the monolith's rows of the shard to what the shard's
// schema holds, which its seal keeps from changing: both sides compared,
// the keys that differ written again (apply) and compared once more;
// ErrCopyDiffers if one still differs. The rows of the shard that the
// schema does not hold are left: an abort never adds one. It reads the
// whole shard on both sides while both refuse its writes: that is the
// price of a roll-back run again after its seal (which already left the
// shard refusing writes until it ran again), not of a roll-back.
func (bc *backCopy) reconcile(ctx context.Context) error {
	if err := bc.compare(ctx); err != nil {
		return err
	}
	keys := map[string][]int64{}
	for _, t := range bc.sp.tables {
		for id := range bc.checks[t.Name].suspect {
			keys[t.Name] = append(keys[t.Name], id)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	if err := bc.apply(ctx, keys); err != nil {
		return err
	}
	return bc.finishChecks(ctx)
}
