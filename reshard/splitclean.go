package reshard

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/shardid/shardid"
)

// A split leaves each batch's rows on the monolith, sealed, until no
// shard is left there: a router whose map is stale sends a split shard's
// writes to the monolith, where an UPDATE or DELETE of rows that were
// deleted would find nothing and report success. The sealed rows refuse
// them instead. Once every shard is split, the monolith's sharded tables
// are emptied (cleanMonolith), every shard's rows only if they add up to
// what its batch verified under its fence; on PostgreSQL, triggers on each
// table then refuse every write of a stale router, rows or none.

// splitDoneFunction is the trigger function that refuses the writes to a
// monolith's sharded table once every shard of it is split.
const splitDoneFunction = "shardid_split_done"

// holdsShared reports whether the map still places a shard in the
// monolith's shared tables.
func (sp *splitter) holdsShared() bool {
	v := sp.cfg.Map.Load()
	for s := range v.LogicalShards() {
		if v.Shared(s) && v.DB(s) == sp.monoIdx {
			return true
		}
	}
	return false
}

// cleanMonolith empties the monolith's sharded tables once no shard is
// left there, lock held: the rows of the shards a split sealed (and
// flipped), each shard's rows of a table only if they add up to what its
// batch verified. It returns the rows deleted.
func (sp *splitter) cleanMonolith(ctx context.Context, lock *moveLock) (int64, error) {
	if sp.holdsShared() {
		return 0, nil
	}
	// A roll-back under way copies its shard's rows into the monolith:
	// they stay until it is finished or aborted (CleanSplit then).
	if back, err := sp.rollingBack(ctx); err != nil || len(back) > 0 {
		return 0, err
	}
	b, err := sp.splitSoFar(ctx)
	if err != nil || b == nil {
		return 0, err
	}
	if err := lock.ensure(ctx, "deleting the split's rows from the monolith"); err != nil {
		return 0, err
	}
	// A table the split did not copy may reference the rows it deletes:
	// they would take its rows with them (ON DELETE CASCADE) or leave
	// them pointing at nothing.
	if err := sp.checkStructure(ctx, "clean-up"); err != nil {
		return 0, err
	}
	if sp.mysql {
		return sp.deleteCopied(ctx, b, lock)
	}
	return sp.truncateSplit(ctx, b, lock)
}

// splitSoFar returns the shards split from the monolith so far (sealed
// there, on their targets in the map) as a batch, with its columns read;
// nil if there are none.
func (sp *splitter) splitSoFar(ctx context.Context) (*splitBatch, error) {
	state, err := sp.readSplitState(ctx, nil)
	if err != nil || state == nil {
		return nil, err
	}
	v := sp.cfg.Map.Load()
	b := &splitBatch{sp: sp, to: map[int]int{}}
	for s, st := range state {
		if s >= 0 && st.Sealed && !v.Shared(s) {
			b.to[s] = v.DB(s)
			b.shards = append(b.shards, s)
		}
	}
	if len(b.shards) == 0 {
		return nil, nil
	}
	slices.Sort(b.shards)
	if err := b.readColumns(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// truncateSplit is cleanMonolith on PostgreSQL: in one transaction, with
// the sharded tables locked, each table's rows summed by shard, compared
// with what every shard's batch verified (read in the same transaction,
// the shards' state rows held and the lock checked with them held:
// holdVerified), and with the table's own row count, so that no row of no
// shard hides; then all the tables emptied at once and their writes
// refused from then on (splitDoneFunction).
func (sp *splitter) truncateSplit(ctx context.Context, b *splitBatch, lock *moveLock) (int64, error) {
	pauseAt(ctx, "clean monolith")
	tables := make([]string, len(sp.tables))
	for i, t := range sp.tables {
		tables[i] = sp.q(t.Name)
	}
	var deleted int64
	// The lock waits lockWait at a time (lockedTx's way), so that a long
	// reader of the monolith does not queue every other session behind
	// this one.
	err := retryLocks(ctx, nil, func() error {
		deleted = 0
		return moverTx(ctx, sp.mono, func(tx *sql.Tx) error {
			return sp.truncateInTx(ctx, tx, b, tables, lock, &deleted)
		})
	})
	if err != nil {
		return 0, err
	}
	// splitDoneFunction, just made: the tables' owner's too.
	if err := sp.ownSplitObjectsAsTablesPG(ctx); err != nil {
		return deleted, fmt.Errorf("the monolith is emptied, but giving the split's objects to the tables' owner: %w", err)
	}
	return deleted, nil
}

// truncateInTx is truncateSplit's transaction, tx; it adds the rows it
// deletes to deleted.
func (sp *splitter) truncateInTx(ctx context.Context, tx *sql.Tx, b *splitBatch, tables []string, lock *moveLock, deleted *int64) error {
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", lockWait.Milliseconds())); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "LOCK TABLE "+strings.Join(tables, ", ")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		return err
	}
	verified, err := sp.holdVerified(ctx, tx, b.shards, lock)
	if err != nil {
		return err
	}
	var kept []string
	for _, t := range sp.tables {
		var total int64
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM "+sp.q(t.Name)).Scan(&total); err != nil {
			return err
		}
		// Each shard's rows summed over the columns its batch verified
		// them over (a migration between two batches adds one to the
		// later ones'): a read of the table for each set of columns, the
		// first over the table's own, which also counts every row.
		sets, setOf, err := sp.hashSets(t, b, verified)
		if err != nil {
			return err
		}
		from, shard := sp.from(t)
		have := map[int]shardCheck{}
		var counted int64
		for i, cols := range sets {
			key := checkCols(cols)
			if gone := missingColumns(cols, b.cols[t.Name].all); len(gone) > 0 {
				var of []string
				for _, s := range b.shards {
					if setOf[s] == key {
						of = append(of, strconv.Itoa(s))
					}
				}
				kept = append(kept, fmt.Sprintf("shards %s of %s (verified over column(s) %s, which it no longer has)", strings.Join(of, ", "), t.Name, strings.Join(gone, ", ")))
				continue
			}
			rows, err := tx.QueryContext(ctx, "SELECT shardid_s, count(*), coalesce(sum("+rowHash(sp.mono, textHashed(cols))+"), 0)::text FROM"+
				" (SELECT x.*, "+shard+" AS shardid_s FROM "+from+") AS r GROUP BY 1")
			if err != nil {
				return err
			}
			for rows.Next() {
				var s sql.NullInt64
				var c shardCheck
				var sum string
				if err := rows.Scan(&s, &c.Rows, &sum); err != nil {
					rows.Close()
					return err
				}
				if c.Sum, err = sumOf(sum); err != nil {
					rows.Close()
					return err
				}
				if i == 0 {
					counted += c.Rows
					if !s.Valid {
						kept = append(kept, fmt.Sprintf("%d row(s) of %s of no shard", c.Rows, t.Name))
						continue
					}
				}
				if own, ok := setOf[int(s.Int64)]; s.Valid && (own == key || !ok && i == 0) {
					have[int(s.Int64)] = c
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		if counted != total {
			kept = append(kept, fmt.Sprintf("%d row(s) of %s whose parent is missing", total-counted, t.Name))
		}
		for s, c := range have {
			if want, ok := verified[s][t.Name]; !ok || !want.sameSums(c) {
				kept = append(kept, fmt.Sprintf("shard %d of %s (%d rows, verified %d)", s, t.Name, c.Rows, want.Rows))
			}
		}
		*deleted += total
	}
	if len(kept) > 0 {
		slices.Sort(kept)
		return fmt.Errorf("%w: every row kept on the monolith, not as verified under the fences: %s", ErrCopyDiffers, strings.Join(kept, "; "))
	}
	if _, err := tx.ExecContext(ctx, "TRUNCATE TABLE "+strings.Join(tables, ", ")); err != nil {
		return fmt.Errorf("emptying %s on the monolith: %w", strings.Join(tables, ", "), err)
	}
	return sp.refuseWritesPG(ctx, tx)
}

// refuseWritesPG creates, in tx, the triggers that refuse every write to
// the monolith's sharded tables once every shard is split (the mover's
// aside), with the fence's message: a stale router's writes fail with
// shardid.ErrShardMoving, as they do on a moved shard's old copy.
func (sp *splitter) refuseWritesPG(ctx context.Context, tx *sql.Tx) error {
	fn := fmt.Sprintf(`CREATE OR REPLACE FUNCTION "%[1]s".%[2]s() RETURNS trigger LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF coalesce(current_setting('shardid.mover', true), '') <> 'on' THEN
		RAISE EXCEPTION '%[3]s' USING ERRCODE = '55000',
			DETAIL = 'every logical shard of this table was split onto its own database: load the catalog''s map';
	END IF;
	RETURN NULL;
END $$`, sp.schema, splitDoneFunction, shardid.FenceMessage)
	stmts := []string{fn}
	for _, t := range sp.tables {
		stmts = append(stmts, "DROP TRIGGER IF EXISTS "+splitDoneFunction+" ON "+sp.q(t.Name),
			"CREATE TRIGGER "+splitDoneFunction+" BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON "+sp.q(t.Name)+
				` FOR EACH STATEMENT EXECUTE FUNCTION "`+sp.schema+`".`+splitDoneFunction+"()")
	}
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// deleteCopied is cleanMonolith on MySQL: it deletes the rows of the
// batch's shards, sealed, from the monolith, table by table, children
// first: a shard's rows of a table only
// when they add up, row count and sum of the rows' hashes, to what the
// batch verified equal on both sides under its fence and stored with the
// seal (a sealed shard's rows on the monolith cannot change since; its
// copy on the target can, as it takes writes). A shard whose rows do not
// add up keeps them, and the function fails naming it.
//
// Each table's deletion holds the shards' state rows and checks the lock
// with them held (holdVerified): a run paused between its reads and its
// deletion, while another rolled a shard back into the monolith, deletes
// nothing of the shard's home there.
func (sp *splitter) deleteCopied(ctx context.Context, b *splitBatch, lock *moveLock) (int64, error) {
	state, err := sp.readVerified(ctx, b.shards)
	if err != nil {
		return 0, err
	}
	pauseAt(ctx, "clean monolith")
	var deleted int64
	var kept []string
	for i := len(sp.tables) - 1; i >= 0; i-- {
		t := sp.tables[i]
		ids := map[int][]any{}
		have := map[int]shardCheck{}
		// Each shard's rows hashed over the columns its batch verified
		// them over (truncateInTx's way).
		sets, setOf, err := sp.hashSets(t, b, state)
		if err != nil {
			return deleted, err
		}
		var gone []int // the shards verified over a column the table lost
		for i, cols := range sets {
			key := checkCols(cols)
			var of []int
			for _, s := range b.shards {
				if own, ok := setOf[s]; own == key || !ok && i == 0 {
					of = append(of, s)
				}
			}
			if len(of) == 0 {
				continue
			}
			if missing := missingColumns(cols, b.cols[t.Name].all); len(missing) > 0 {
				for _, s := range of {
					kept = append(kept, fmt.Sprintf("shard %d of %s (verified over column(s) %s, which it no longer has)", s, t.Name, strings.Join(missing, ", ")))
				}
				gone = append(gone, of...)
				continue
			}
			err := sp.eachRowHash(ctx, t, of, cols, func(id int64, s int, h uint64) {
				ids[s] = append(ids[s], id)
				c := have[s]
				c.Rows++
				c.Sum += h
				have[s] = c
			})
			if err != nil {
				return deleted, err
			}
		}
		for _, s := range gone {
			delete(ids, s)
		}
		for _, s := range b.shards {
			if slices.Contains(gone, s) {
				continue
			}
			want, ok := state[s][t.Name]
			if !ok || !want.sameSums(have[s]) {
				if have[s].Rows > 0 || !ok {
					kept = append(kept, fmt.Sprintf("shard %d of %s (%d rows, verified %d)", s, t.Name, have[s].Rows, want.Rows))
				}
				delete(ids, s)
			}
		}
		// The rows of the shards that add up, in one statement: sealed,
		// they are the rows just read.
		var good []int
		for _, s := range b.shards {
			if _, ok := ids[s]; ok {
				good = append(good, s)
			}
		}
		if len(good) > 0 {
			from, shard := sp.from(t)
			q := "DELETE FROM " + sp.q(t.Name) + " WHERE id IN (SELECT id FROM (SELECT x.id FROM " + from + " WHERE " + shard + " " + inList(good) + ") AS d)"
			err := moverTx(ctx, sp.mono, func(tx *sql.Tx) error {
				now, err := sp.holdVerified(ctx, tx, good, lock)
				if err != nil {
					return err
				}
				for _, s := range good {
					if !maps.Equal(now[s], state[s]) {
						return fmt.Errorf("%w: what the split verified of shard %d changed since this run read it: another run has been at it", ErrMoveLockLost, s)
					}
				}
				res, err := tx.ExecContext(ctx, q)
				if err != nil {
					return err
				}
				n, _ := res.RowsAffected()
				deleted += n
				return nil
			})
			if err != nil {
				return deleted, err
			}
		}
	}
	if len(kept) > 0 {
		return deleted, fmt.Errorf("%w: rows kept on the monolith, not as verified under the fence: %s", ErrCopyDiffers, strings.Join(kept, "; "))
	}
	return deleted, nil
}

// verifiedRow is a shard's seal in the split's state table.
type verifiedRow struct {
	Shard    int
	Sealed   bool
	Verified *string
}

// readVerified returns what the seal of each of shards stored: its tables'
// verified rows and checksums.
func (sp *splitter) readVerified(ctx context.Context, shards []int) (map[int]map[string]shardCheck, error) {
	var rows []verifiedRow
	if err := sp.mono.WithContext(ctx).Raw("SELECT shard, sealed, verified FROM " + sp.q(splitStateTable) + " WHERE shard " + inList(shards)).Scan(&rows).Error; err != nil {
		return nil, err
	}
	return verifiedOf(rows)
}

// holdVerified is readVerified in tx, on the monolith, the state rows of
// shards held (shared) until tx ends, and the lock checked with them held:
// no roll-back takes one of the shards before tx ends (markBack updates
// its row). Every one of shards must still be sealed with a verification;
// one that is not was taken by another run while this one was paused
// after its last check of its lock (ErrMoveLockLost).
func (sp *splitter) holdVerified(ctx context.Context, tx *sql.Tx, shards []int, lock *moveLock) (map[int]map[string]shardCheck, error) {
	q := "SELECT shard, sealed, verified FROM " + sp.q(splitStateTable) + " WHERE shard " + inList(shards) + " FOR SHARE"
	if sp.mysql {
		q = strings.TrimSuffix(q, "FOR SHARE") + "LOCK IN SHARE MODE"
	}
	rs, err := tx.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	var rows []verifiedRow
	for rs.Next() {
		var r verifiedRow
		var v sql.NullString
		if err := rs.Scan(&r.Shard, &r.Sealed, &v); err != nil {
			rs.Close()
			return nil, err
		}
		if v.Valid {
			r.Verified = &v.String
		}
		rows = append(rows, r)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, err
	}
	out, err := verifiedOf(rows)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		if r.Sealed && r.Verified == nil {
			return nil, withDetail(ErrMoveInProgress, fmt.Sprintf("shard %d is being rolled back (RollbackSplit): finish the roll-back or abort it (AbortRollback), then run CleanSplit", r.Shard))
		}
	}
	for _, s := range shards {
		if _, ok := out[s]; !ok {
			return nil, fmt.Errorf("%w: shard %d is no longer sealed on the monolith by the split (a roll-back took it since this run read it): another run has been at it", ErrMoveLockLost, s)
		}
	}
	if err := lock.ensure(ctx, "deleting the split's rows from the monolith"); err != nil {
		return nil, err
	}
	return out, nil
}

// verifiedOf decodes the seals of rows; a row not sealed by a split (no
// verification) is left out.
func verifiedOf(rows []verifiedRow) (map[int]map[string]shardCheck, error) {
	out := map[int]map[string]shardCheck{}
	for _, r := range rows {
		if !r.Sealed || r.Verified == nil {
			continue // never deleted: not sealed by a split
		}
		m := map[string]shardCheck{}
		if err := json.Unmarshal([]byte(*r.Verified), &m); err != nil {
			return nil, fmt.Errorf("shardid: the split's state of shard %d: %w", r.Shard, err)
		}
		out[r.Shard] = m
	}
	return out, nil
}

// hashSets returns the sets of columns the rows of t of b's shards were
// verified over (verified, each shard's seal), the table's own columns
// first, and the set of each shard (checkCols of it) that has a seal.
func (sp *splitter) hashSets(t SplitTable, b *splitBatch, verified map[int]map[string]shardCheck) (sets [][]string, setOf map[int]string, err error) {
	own := b.cols[t.Name].all
	sets = [][]string{own}
	seen := map[string]bool{checkCols(own): true}
	setOf = map[int]string{}
	for _, s := range b.shards {
		c, ok := verified[s][t.Name]
		if !ok {
			continue
		}
		cols, err := c.hashedOver(own)
		if err != nil {
			return nil, nil, fmt.Errorf("%w (shard %d, table %s)", err, s, t.Name)
		}
		k := checkCols(cols)
		setOf[s] = k
		if !seen[k] {
			seen[k] = true
			sets = append(sets, cols)
		}
	}
	return sets, setOf, nil
}

// missingColumns returns the columns of cols that have does not hold.
func missingColumns(cols, have []string) []string {
	var gone []string
	for _, c := range cols {
		if !slices.Contains(have, c) {
			gone = append(gone, c)
		}
	}
	return gone
}

// eachRowHash calls f with the key, the shard and the hash (rowHash over
// cols) of every row of t on the monolith in shards, in one read.
func (sp *splitter) eachRowHash(ctx context.Context, t SplitTable, shards []int, cols []string, f func(id int64, shard int, h uint64)) error {
	return readSession(ctx, sp.mono, func(qr querier) error {
		rows, err := qr.QueryContext(ctx, "SELECT id, shardid_s, "+rowHash(sp.mono, textHashed(cols))+" FROM "+sp.rel(t, shards))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var s int
			var h any
			if err := rows.Scan(&id, &s, &h); err != nil {
				return err
			}
			hv, err := hashOf(h)
			if err != nil {
				return err
			}
			f(id, s, hv)
		}
		return rows.Err()
	})
}
