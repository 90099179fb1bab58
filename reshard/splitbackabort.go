package reshard

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// RollbackAbortResult says what AbortRollback did.
type RollbackAbortResult struct {
	// Undone are the shards whose roll-back was undone: they stay on their
	// targets, which take their writes, and their rows in the monolith
	// stay there, sealed, as the split left its own.
	Undone []int
	// Finished are the shards whose roll-back was flipped before it
	// stopped: already in the monolith, which now takes their writes.
	Finished []int
	// Deleted counts the rows deleted from the monolith: the roll-back's
	// copies of rows of no shard (their parent missing).
	Deleted int64
}

// AbortRollback undoes the roll-backs of cfg's monolith that were stopped
// before their flip (RollbackSplit): each shard stays on its target, whose
// fence (a seal too, if the roll-back sealed it) is lifted and whose change
// log is dropped. The shard's rows in the monolith, which the roll-back
// wrote over the split's, stay there, sealed (a router whose map is from
// before the split is refused there, where it would update or delete no
// row and be told it succeeded), and the monolith's split state verifies
// them anew, for the split's clean-up; the roll-back's copies of rows of no
// shard whose keys the shard's schema holds are deleted. A roll-back stopped after
// the monolith took the shard's writes cannot be undone so (ErrShardMoved:
// run RollbackSplit again), and one stopped after its flip is finished.
// It waits for the split's lock (ErrMoveInProgress while a roll-back runs).
func AbortRollback(ctx context.Context, cfg SplitConfig) (RollbackAbortResult, error) {
	var res RollbackAbortResult
	sp, err := newSplitter(ctx, cfg)
	if err != nil {
		return res, err
	}
	lock, err := lockMove(ctx, sp.mono, sp.schema, DefaultLockWait, nil)
	if err != nil {
		return res, fmt.Errorf("shardid: abort roll-back: %w", err)
	}
	defer lock.release()
	if err := sp.checkDeclared(ctx, false); err != nil {
		return res, err
	}
	marks, err := sp.readBackMarks(ctx)
	if err != nil || len(marks) == 0 {
		return res, err
	}
	b := &splitBatch{sp: sp}
	if err := b.readColumns(ctx); err != nil {
		return res, err
	}
	p := cfg.Map.Load().Placements()
	if cfg.Catalog != nil {
		if p, _, err = cfg.Catalog.loadPlacements(ctx, cfg.Map.Databases(), sp.shards); err != nil {
			return res, err
		}
	}
	for _, s := range slices.Sorted(maps.Keys(marks)) {
		m := marks[s]
		from := cfg.Map.DatabaseIndex(m.Source)
		if from < 0 {
			return res, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("the roll-back of shard %d came from %q, which the map does not know", s, m.Source))
		}
		if p[s].Shared && p[s].DB == sp.monoIdx {
			if _, err := sp.flipBack(ctx, lock, s, from, func(string) {}); err != nil {
				return res, fmt.Errorf("shardid: abort roll-back of shard %d (flipped already): %w", s, err)
			}
			res.Finished = append(res.Finished, s)
			continue
		}
		n, err := sp.abortBack(ctx, lock, s, from, m, !p[s].Shared && p[s].DB == from, b.cols)
		res.Deleted += n
		if err != nil {
			return res, fmt.Errorf("shardid: abort roll-back of shard %d: %w", s, err)
		}
		res.Undone = append(res.Undone, s)
	}
	return res, nil
}

// abortBack undoes the roll-back of shard s from database from, which is
// still the shard's home if home, and returns the rows it deleted from the
// monolith.
func (sp *splitter) abortBack(ctx context.Context, lock *moveLock, s, from int, m backMark, home bool, cols map[string]columns) (int64, error) {
	src, schema := sp.cfg.DBs[from], sp.cfg.Map.SchemaOf(s)
	slock, err := lockMove(ctx, src, schema, DefaultLockWait, nil)
	if err != nil {
		return 0, err
	}
	defer slock.release()
	ensure := func(step string) error {
		if err := lock.ensure(ctx, step); err != nil {
			return err
		}
		return slock.ensure(ctx, step)
	}
	bc := &backCopy{sp: sp, shard: s, src: src, schema: schema, cols: cols}
	_, _, ok, err := fenceToken(ctx, src, schema)
	if err != nil {
		return 0, err
	}
	state, err := sp.readSplitState(ctx, []int{s})
	if err != nil {
		return 0, err
	}
	if !state[s].Sealed {
		// Past its seal, the monolith took the shard's writes: only the
		// roll-back run again finishes it.
		return 0, withDetail(ErrShardMoved, "the monolith takes its writes already: run the roll-back again to finish it")
	}
	// The monolith's rows of the shard stay, sealed, as the split left
	// its own there: a router whose map is from before the split finds
	// them and is refused, where, deleted, it would find no row to update
	// or delete and be told it succeeded. What the split verified of them
	// becomes what they hold now (the roll-back wrote over them), so that
	// the split's clean-up deletes them. Only the copies of rows of no
	// shard (their parent missing) go: a stale router reaches none.
	//
	// The shard's state row is this abort's from here (claimBack, its
	// locks checked with the row held): each of its writes to the
	// monolith holds it, so that an abort paused after its last check,
	// while another run finished the roll-back (the monolith the shard's
	// home again), deletes nothing there when it resumes.
	if bc.token, err = sp.claimBack(ctx, s, func(context.Context) error {
		return ensure("deleting the roll-back's rows of no shard from the monolith")
	}); err != nil {
		return 0, err
	}
	var n int64
	if home && ok {
		pauseAt(ctx, "abort orphans")
		k, err := bc.emptyOrphans(ctx)
		n += k
		if err != nil {
			return n, err
		}
		if err := ensure("lifting the roll-back's fence"); err != nil {
			return n, err
		}
		pauseAt(ctx, "abort unseal")
		// The roll-back's fence or seal of the schema lifted, as found
		// with its row held and this abort's claim standing: the schema
		// is the shard's home again, as it was. A run of the roll-back
		// paused before its seal may seal it after this abort read it
		// outside (and its seal then stayed, the shard refusing every
		// write on its only home); a second run flips without changing
		// the seal, and the schema is then an old copy, which must stay
		// sealed (the claim is gone by then).
		claimed := func(ctx context.Context) error {
			if err := bc.stillClaimed(ctx, m); err != nil {
				return err
			}
			return ensure("lifting the roll-back's fence")
		}
		if err := undoBackFence(ctx, src, schema, m.Token, claimed); err != nil {
			return n, err
		}
		if err := stopCapture(ctx, src, schema, func(context.Context) error { return ensure("dropping the roll-back's change log") }); err != nil {
			return n, err
		}
	}
	if err := lock.ensure(ctx, "restoring the split's state"); err != nil {
		return n, err
	}
	verified, err := sp.shardSums(ctx, s, cols)
	if err != nil {
		return n, err
	}
	if err := lock.ensure(ctx, "restoring the split's state"); err != nil {
		return n, err
	}
	return n, sp.unmarkBack(ctx, s, verified, m, bc.token)
}

// shardSums returns what the monolith's tables hold of shard s, as a
// split verifies it (shardCheck by table, as JSON): the rows, and the sum
// of their hashes over cols.
func (sp *splitter) shardSums(ctx context.Context, s int, cols map[string]columns) (string, error) {
	m := map[string]shardCheck{}
	for _, t := range sp.tables {
		var c shardCheck
		err := sp.eachRowHash(ctx, t, []int{s}, cols[t.Name].all, func(_ int64, _ int, h uint64) {
			c.Rows++
			c.Sum += h
		})
		if err != nil {
			return "", fmt.Errorf("shardid: summing shard %d's rows of %s in the monolith: %w", s, t.Name, err)
		}
		c.Cols = checkCols(cols[t.Name].all)
		m[t.Name] = c
	}
	j, err := json.Marshal(m)
	return string(j), err
}

// emptyOrphans deletes the monolith's rows of no shard whose keys the
// shard's schema holds: the roll-back's copies of its rows whose parent is
// missing. Children first, each transaction holding the abort's claim of
// the shard (backCopy.hold).
func (bc *backCopy) emptyOrphans(ctx context.Context) (int64, error) {
	var n int64
	for i := len(bc.sp.tables) - 1; i >= 0; i-- {
		t := bc.sp.tables[i]
		err := bc.eachSourceKeys(ctx, t.Name, func(ids []int64) error {
			in, args := bc.inArgs(ids)
			q := "DELETE FROM " + bc.sp.q(t.Name) + " AS x WHERE x.id IN (" + in + ") AND " + bc.sp.rowShard(t, "x", 0) + " IS NULL"
			if bc.sp.mysql {
				q = "DELETE x FROM " + bc.sp.q(t.Name) + " AS x WHERE x.id IN (" + in + ") AND " + bc.sp.rowShard(t, "x", 0) + " IS NULL"
			}
			k, err := bc.execHeld(ctx, q, args)
			n += k
			return err
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// undoBackFence lifts the fence of schema on db that a roll-back set and
// recorded as token (0: none recorded), sealed (token+1) or not, if check
// (called with the fence's row held) passes; a fence it did not set stays,
// and a seal it did not set fails with ErrMoveInProgress.
func undoBackFence(ctx context.Context, db *gorm.DB, schema string, token int64, check func(context.Context) error) error {
	if token == 0 {
		// Never recorded: a run that set a fence and stopped before
		// its record lets it run out (FenceFor), and can no longer
		// seal it (it records the token holding its claim first).
		return nil
	}
	open := "'-infinity'"
	if db.Dialector.Name() == "mysql" {
		open = "'1000-01-01'"
	}
	return lockedTx(ctx, db, schema, func(tx *gorm.DB) error {
		var cur []struct {
			Token  int64
			Sealed bool
		}
		if err := tx.Raw("SELECT token, sealed FROM " + quoteTable(db, schema, fenceTable) + " WHERE id = 1 FOR UPDATE").Scan(&cur).Error; err != nil {
			return err
		}
		if err := check(ctx); err != nil {
			return err
		}
		switch {
		case len(cur) != 1:
			return nil // no fence
		case cur[0].Sealed && cur[0].Token != token+1:
			return withDetail(ErrMoveInProgress, fmt.Sprintf("%s is sealed (token %d), and not by the roll-back (its fence's token %d): see shardid split status", schema, cur[0].Token, token))
		case !cur[0].Sealed && cur[0].Token != token:
			return nil // lifted already, or not the roll-back's
		}
		return tx.Exec("UPDATE " + quoteTable(db, schema, fenceTable) + " SET fenced_until = " + open + ", token = token + 1, sealed = FALSE, mover_only = FALSE WHERE id = 1").Error
	})
}

// sealedAsSeen returns an error wrapping ErrMoveLockLost unless schema on
// db is sealed with token, read under a shared lock (unsealBack's row).
func sealedAsSeen(ctx context.Context, db *gorm.DB, schema string, token int64) error {
	return lockedTx(ctx, db, schema, func(tx *gorm.DB) error {
		return sealedAs(tx, schema, token, "an abort of the roll-back unsealed it")
	})
}

// stillClaimed returns an error wrapping ErrMoveLockLost unless the
// shard's state row on the monolith still carries this run's claim
// (claimBack's token), sealed, and its roll-back's record is still m.
func (bc *backCopy) stillClaimed(ctx context.Context, m backMark) error {
	var st []struct {
		Token  int64
		Sealed bool
	}
	db := bc.sp.mono.WithContext(ctx)
	if err := db.Raw("SELECT token, sealed FROM "+bc.sp.q(splitStateTable)+" WHERE shard = ?", bc.shard).Scan(&st).Error; err != nil {
		return err
	}
	var cur []backMark
	if err := db.Raw("SELECT shard, source, verified, token FROM "+bc.sp.q(splitBackTable)+" WHERE shard = ?", bc.shard).Scan(&cur).Error; err != nil {
		return err
	}
	if len(st) != 1 || st[0].Token != bc.token || !st[0].Sealed || len(cur) != 1 || cur[0].Source != m.Source || cur[0].Token != m.Token {
		return fmt.Errorf("%w: shard %d's roll-back is not this abort's any more: another run has taken it over, or finished it", ErrMoveLockLost, bc.shard)
	}
	return nil
}

// DropSplitCopy drops the copy of shard left on the database named from by
// RollbackSplit: the shard's schema there, sealed since the shard went
// back into the monolith's shared tables. It refuses (ErrCopyNotMoved)
// unless the catalog (or cfg.Map) places the shard in the monolith, which
// takes its writes, no roll-back of it is under way, and the copy is
// sealed and holds only the split's tables; ErrNoCopy if there is none.
// It waits for the split's lock and the shard's move lock on from.
func DropSplitCopy(ctx context.Context, cfg SplitConfig, shard int, from string) error {
	sp, err := newSplitter(ctx, cfg)
	if err != nil {
		return err
	}
	if shard < 0 || shard >= sp.shards {
		return withDetail(shardid.ErrShardRange, fmt.Sprintf("%d is not in [0, %d)", shard, sp.shards))
	}
	d := cfg.Map.DatabaseIndex(from)
	if d < 0 || d == sp.monoIdx {
		return withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("drop the split copy of shard %d on %q: not another database of the map", shard, from))
	}
	refuse := func(why string) error {
		return withDetail(ErrCopyNotMoved, fmt.Sprintf("the copy of shard %d on %s: %s", shard, from, why))
	}
	lock, err := lockMove(ctx, sp.mono, sp.schema, DefaultLockWait, nil)
	if err != nil {
		return fmt.Errorf("shardid: drop the split copy of shard %d: %w", shard, err)
	}
	defer lock.release()
	p := cfg.Map.Load().Placements()
	if cfg.Catalog != nil {
		if p, _, err = cfg.Catalog.loadPlacements(ctx, cfg.Map.Databases(), sp.shards); err != nil {
			return err
		}
	}
	if !p[shard].Shared || p[shard].DB != sp.monoIdx {
		return refuse("the shard is not in the monolith's shared tables: the copy may be its home")
	}
	marks, err := sp.readBackMarks(ctx)
	if err != nil {
		return err
	}
	state, err := sp.readSplitState(ctx, []int{shard})
	if err != nil {
		return err
	}
	if _, ok := marks[shard]; ok || state[shard].Sealed {
		return refuse("the monolith does not take its writes yet (a split or a roll-back of it is under way)")
	}
	db, schema := cfg.DBs[d], cfg.Map.SchemaOf(shard)
	slock, err := lockMove(ctx, db, schema, DefaultLockWait, nil)
	if err != nil {
		return err
	}
	defer slock.release()
	// Dropped only as found here, the locks held (dropCopyAsSeen): a run
	// paused after its checks, while another dropped the copy and split
	// the shard onto that database again, must not drop its new home.
	seen, err := seeTarget(ctx, db, schema, false)
	if err != nil {
		return err
	}
	_, sealed, ok, err := fenceToken(ctx, db, schema)
	if err != nil {
		return err
	}
	if !ok {
		if there, err := schemaExists(ctx, db, schema); err != nil || !there {
			if err == nil {
				err = withDetail(ErrNoCopy, fmt.Sprintf("%s holds no copy of shard %d", from, shard))
			}
			return err
		}
		return refuse("it has no fence: not a copy a split or a move made")
	}
	if !sealed {
		return refuse("it is not fenced for good")
	}
	have, err := baseTables(ctx, db, schema)
	if err != nil {
		return err
	}
	for _, t := range have {
		if _, ok := sp.byName[t]; !ok {
			return refuse("it holds " + t + ", which is not one of the split's tables")
		}
	}
	step := "dropping the copy of shard " + strconv.Itoa(shard) + " on " + from
	if err := lock.ensure(ctx, step); err != nil {
		return err
	}
	pauseAt(ctx, "drop split copy")
	return dropCopyAsSeen(ctx, db, schema, sp.tableNames(), seen, slock, step)
}
