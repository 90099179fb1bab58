package reshard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
)

// Rolling a split back: shards that a split flipped out of the monolith go
// back into its shared tables, one at a time, each by a move whose source
// is its schema on its target and whose target is the monolith's rows of
// the shard, sealed there since the split (they refuse every writer but
// the mover): the change log of the schema, a first copy, both sides
// compared, the log applied; a short fence of the schema on its
// database's clock, the last changes, the keys in doubt compared again;
// the schema sealed (the old copy, left for DropSplitCopy), the catalog
// and the map flipped back, and the monolith's seal of the shard lifted.

// RollbackOptions configures RollbackSplit.
type RollbackOptions struct {
	// FenceFor is how long a shard's schema on its target stays fenced if
	// the mover dies before it seals it, by that database's clock; the
	// last changes and the verification must finish within it, or the
	// shard fails with ErrFenceLapsed. If 0, 1m.
	FenceFor time.Duration

	// LockWait is how long to wait for the split's lock on the monolith,
	// and for each shard's move lock on its target, while another session
	// holds them (another operator, or a mover that was killed). If 0,
	// DefaultLockWait; if negative, try once.
	LockWait time.Duration

	// Progress, if not nil, hears the rows of each table of a shard
	// copied back so far.
	Progress func(shard int, table string, copied int64)

	// OnStage, if not nil, is called as a shard reaches each stage:
	// "captured" (its schema's change log started), "copied", "fenced"
	// (its schema on the target refuses writes), "verified", "sealed" (the
	// schema fenced for good), "unsealed" (the monolith takes its writes)
	// and "flipped" (the catalog and the map place it in the monolith).
	OnStage func(shard int, stage string)

	// OnShard, if not nil, hears each shard's result once it is back.
	OnShard func(res RollbackResult)

	// AfterLastBatch lets a roll-back take writes into a monolith that
	// the split's last batch emptied (PostgreSQL): the triggers that
	// refuse every write to its sharded tables since are dropped, as the
	// first shard comes back. Set it only once every router has loaded
	// the catalog's map since the last batch (they follow the catalog, or
	// were restarted): a router with a map from before it would find no
	// row there for the shards still split; the routers' check of a write
	// that changed no row refuses its UPDATE or DELETE, but the same SQL
	// run outside them would succeed having changed nothing. Without it,
	// such a roll-back fails with ErrMonolithEmptied before it changes
	// anything.
	AfterLastBatch bool
}

// RollbackResult says how one shard came back into the monolith.
type RollbackResult struct {
	Shard    int
	From     string        // the database it came back from
	Copied   int64         // rows of the first copy into the monolith
	CopyTime time.Duration // of the first copy
	Fenced   time.Duration // from its schema's fence to the monolith taking its writes
	Version  int64         // the catalog's version after its flip
}

// RollbackSplit returns shards that a split of cfg's monolith flipped onto
// their targets to the monolith's shared tables, one shard at a time,
// while writers keep writing through the map: each shard's rows are
// copied into the monolith's tables from its schema on its target (with a
// change log of the schema, both sides compared and every row verified as
// it is written, as a move does), its schema is fenced for the last
// changes and sealed (its old copy, left for DropSplitCopy), the catalog
// and cfg.Map place it in the monolith again, and the monolith takes its
// writes. It returns the result of each shard it brought back; the shards
// of shards already in the monolith's shared tables are skipped.
//
// It refuses, before it changes anything, what it cannot do safely: a
// shard that no split of this monolith sealed there, one whose schema on
// the database the map names is missing or sealed, one of which another
// database holds a copy (moved since the split: ErrNotSplit), one whose
// schema holds a table or a column the monolith's tables do not, or one
// with a key that a row of another shard holds in the monolith
// (ErrKeyCollision); and, on PostgreSQL, a monolith that the split's last
// batch emptied, unless opts.AfterLastBatch (ErrMonolithEmptied; a
// roll-back stopped part way there is run again with it too). A key taken
// while it copies stops the shard before its fence. cfg.Map must be the
// catalog's (ErrMapDiffers).
//
// It holds the split's lock (a split, a clean-up, an abort or a second
// roll-back wait, then fail with ErrMoveInProgress) and each shard's move
// lock on its target (MoveShard, Fence and Unfence of it wait). A shard
// stopped before its seal (a cancelled context, an error, the mover
// killed) stays on its target, which takes writes again at once (or when
// FenceFor runs out); its change log and the rows copied so far stay, for
// RollbackSplit run again, which goes on from them, or AbortRollback. A
// shard stopped after its seal is finished by RollbackSplit run again.
func RollbackSplit(ctx context.Context, cfg SplitConfig, shards []int, opts RollbackOptions) ([]RollbackResult, error) {
	res, err := rollbackSplit(ctx, cfg, shards, opts)
	return res, canceled(ctx, err)
}

// backPhase is where a shard's roll-back starts.
type backPhase int

const (
	backCopyPhase backPhase = iota // copy it back (first, or run again before its seal)
	backFlipPhase                  // its schema is sealed: flip the catalog and the map
	backLiftPhase                  // flipped: lift the monolith's seal
)

// backShard is one shard to roll back.
type backShard struct {
	shard  int
	from   int // the database it comes back from
	phase  backPhase
	marked bool // a roll-back of it is under way (splitBackTable)
	// seal is, in backFlipPhase, the token of the roll-back's seal of
	// the shard's schema on from, as planned.
	seal int64
}

func rollbackSplit(ctx context.Context, cfg SplitConfig, shards []int, opts RollbackOptions) (_ []RollbackResult, err error) {
	sp, err := newSplitter(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if len(shards) == 0 {
		return nil, withDetail(shardid.ErrInvalidConfig, "roll back: no shards")
	}
	seen := map[int]bool{}
	for _, s := range shards {
		if s < 0 || s >= sp.shards {
			return nil, withDetail(shardid.ErrShardRange, fmt.Sprintf("%d is not in [0, %d)", s, sp.shards))
		}
		if seen[s] {
			return nil, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("roll back: shard %d given twice", s))
		}
		seen[s] = true
	}
	if opts.FenceFor <= 0 {
		opts.FenceFor = time.Minute
	}
	if opts.LockWait == 0 {
		opts.LockWait = DefaultLockWait
	}
	lock, err := lockMove(ctx, sp.mono, sp.schema, opts.LockWait, nil)
	if err != nil {
		return nil, fmt.Errorf("shardid: roll back: %w", err)
	}
	defer lock.release()
	ctx, unwatch := lock.watch(ctx)
	defer unwatch()
	// A lock lost stops the roll-back as a cancellation would, and says
	// so (ErrMoveLockLost); another error stays what it is.
	defer func() {
		if lost := lock.lost(); errors.Is(err, context.Canceled) && lost != nil && !errors.Is(err, ErrMoveLockLost) {
			err = fmt.Errorf("shardid: roll back: %w: %w", lost, err)
		}
	}()
	if p, err := sp.foreignSplitObjectsPG(ctx); err != nil {
		return nil, err
	} else if p != "" {
		return nil, withDetail(ErrMoverPrivileges, "roll back: "+p)
	}
	if err := sp.checkDeclared(ctx, false); err != nil {
		return nil, err
	}
	if err := sp.ensureBackTable(ctx); err != nil {
		return nil, err
	}
	if err := sp.ownSplitObjectsAsTablesPG(ctx); err != nil {
		return nil, fmt.Errorf("shardid: roll back: giving the split's objects on the monolith to the tables' owner: %w", err)
	}
	b := &splitBatch{sp: sp}
	if err := b.readColumns(ctx); err != nil {
		return nil, err
	}
	todo, err := sp.planBack(ctx, slices.Sorted(slices.Values(shards)), b.cols)
	if err != nil {
		return nil, err
	}
	if len(todo) > 0 && !opts.AfterLastBatch {
		emptied, err := sp.refusesEveryWritePG(ctx)
		if err != nil {
			return nil, err
		}
		if emptied {
			return nil, withDetail(ErrMonolithEmptied, fmt.Sprintf("%s refuses every write since; once a roll-back lets writes in, SQL from a process with a map from before the split would update and delete nothing there for the shards still split, and, outside shardid's routers, get no error. "+
				"Set AfterLastBatch (shardid split rollback --after-last-batch) once every router has loaded the catalog's map since the last batch (a roll-back stopped part way is run again with it too, or undone with AbortRollback)", sp.cfg.Monolith))
		}
	}
	var out []RollbackResult
	for _, bs := range todo {
		res, err := sp.rollbackShard(ctx, lock, bs, b.cols, opts)
		if err != nil {
			return out, err
		}
		out = append(out, res)
		if opts.OnShard != nil {
			opts.OnShard(res)
		}
	}
	return out, nil
}

// planBack checks every shard of shards (ascending) before anything
// changes, and returns those to roll back with where each starts.
func (sp *splitter) planBack(ctx context.Context, shards []int, cols map[string]columns) ([]backShard, error) {
	cfg, names := sp.cfg, sp.cfg.Map.Databases()
	p := cfg.Map.Load().Placements()
	if cfg.Catalog != nil {
		cp, _, err := cfg.Catalog.loadPlacements(ctx, names, sp.shards)
		if err != nil {
			return nil, err
		}
		for _, s := range shards {
			if cp[s] != p[s] {
				return nil, withDetail(ErrMapDiffers, fmt.Sprintf("the catalog places shard %d on %s (shared: %v), the map on %s (shared: %v): load the catalog's map first (Catalog.LoadMap; the command loads it as it starts: run it again)",
					s, names[cp[s].DB], cp[s].Shared, names[p[s].DB], p[s].Shared))
			}
		}
	}
	state, err := sp.readSplitState(ctx, nil)
	if err != nil {
		return nil, err
	}
	verified, err := sp.readVerified(ctx, shards)
	if err != nil {
		return nil, err
	}
	marks, err := sp.readBackMarks(ctx)
	if err != nil {
		return nil, err
	}
	ids := identities{}
	var todo []backShard
	for _, s := range shards {
		pl, m := p[s], marks[s]
		bs := backShard{shard: s, from: pl.DB, marked: m.Source != ""}
		notSplit := func(why string) error {
			return withDetail(ErrNotSplit, fmt.Sprintf("shard %d: %s", s, why))
		}
		switch {
		case pl.Shared && pl.DB == sp.monoIdx:
			if !bs.marked {
				continue // in the monolith already
			}
			bs.from, bs.phase = cfg.Map.DatabaseIndex(m.Source), backLiftPhase
			if bs.from < 0 {
				return nil, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("the roll-back of shard %d came from %q, which the map does not know", s, m.Source))
			}
			todo = append(todo, bs)
			continue
		case pl.Shared || pl.DB == sp.monoIdx:
			return nil, notSplit(fmt.Sprintf("the map places it on %s (shared: %v), not in a schema of its own on another database", names[pl.DB], pl.Shared))
		case bs.marked && m.Source != names[pl.DB]:
			return nil, notSplit(fmt.Sprintf("its roll-back began from %s, and the map now places it on %s: it was moved since (AbortRollback)", m.Source, names[pl.DB]))
		}
		src, schema := cfg.DBs[pl.DB], cfg.Map.SchemaOf(s)
		token, sealed, ok, err := fenceToken(ctx, src, schema)
		if err != nil {
			return nil, err
		}
		_, isVerified := verified[s]
		switch {
		case !ok:
			return nil, notSplit(fmt.Sprintf("%s holds no copy of it in %s", names[pl.DB], schema))
		case sealed && bs.marked && m.Token > 0 && token == m.Token+1:
			// Sealed by this roll-back (which may have lifted the
			// monolith's seal too): the flip is left to do. While the
			// monolith's seal stands, the run compares both sides first
			// (backCopy.reconcile): their tables must match.
			if state[s].Sealed {
				if err := sp.checkBackTables(ctx, s, src, schema, names[pl.DB], cols); err != nil {
					return nil, err
				}
			}
			bs.phase, bs.seal = backFlipPhase, token
			todo = append(todo, bs)
			continue
		case !state[s].Sealed:
			return nil, notSplit("the monolith's split state does not hold it sealed: it never left this monolith by a split")
		case !bs.marked && !isVerified:
			return nil, notSplit("the monolith's split state holds no verification of it: it was not sealed by a split")
		case sealed:
			return nil, notSplit(fmt.Sprintf("its copy on %s is fenced for good: it was moved away from there", names[pl.DB]))
		}
		for d, db := range cfg.DBs {
			if d == sp.monoIdx || d == pl.DB {
				continue
			}
			// On MySQL the shard's database is the server's: two names of
			// one server see the same.
			if same, err := ids.same(ctx, cfg.DBs, d, pl.DB); err != nil {
				return nil, err
			} else if same {
				continue
			}
			if there, err := schemaExists(ctx, db, schema); err != nil {
				return nil, err
			} else if there {
				return nil, notSplit(fmt.Sprintf("%s holds a copy of it too (%s): it was moved since the split, or a move of it is under way; "+
					"drop an old copy first (DropShardCopy)", names[d], schema))
			}
		}
		if err := sp.checkBackTables(ctx, s, src, schema, names[pl.DB], cols); err != nil {
			return nil, err
		}
		bc := &backCopy{sp: sp, shard: s, src: src, schema: schema, cols: cols}
		if err := bc.checkKeys(ctx, !bs.marked); err != nil {
			return nil, err
		}
		todo = append(todo, bs)
	}
	return todo, nil
}

// checkBackTables returns ErrRollbackRefused unless schema on src holds the
// split's tables, each with the monolith's columns, and no other; and
// refuses foreign keys whose cascades the roll-back could not follow
// (checkCascades): on MySQL those of the schema, on PostgreSQL those of
// the monolith, where the mover writes.
func (sp *splitter) checkBackTables(ctx context.Context, shard int, src *gorm.DB, schema, name string, cols map[string]columns) error {
	have, err := baseTables(ctx, src, schema)
	if err != nil {
		return err
	}
	var want []string
	for _, t := range sp.tables {
		want = append(want, t.Name)
	}
	for _, t := range have {
		if !slices.Contains(want, t) {
			return withDetail(ErrRollbackRefused, fmt.Sprintf("shard %d: %s.%s on %s is not one of the split's tables: the monolith has no place for its rows", shard, schema, t, name))
		}
	}
	for _, t := range want {
		c, err := tableColumns(ctx, src, schema, t)
		if err != nil {
			return fmt.Errorf("shardid: roll back shard %d: %s.%s on %s: %w", shard, schema, t, name, err)
		}
		a, b := slices.Sorted(slices.Values(c.all)), slices.Sorted(slices.Values(cols[t].all))
		if !slices.Equal(a, b) {
			return withDetail(ErrRollbackRefused, fmt.Sprintf("shard %d: %s.%s on %s has the columns %q, the monolith's %s %q: migrate one like the other first",
				shard, schema, t, name, a, t, b))
		}
	}
	if sp.mysql {
		return checkCascades(ctx, src, sp.mono, schema, want)
	}
	return checkCascades(ctx, sp.mono, sp.mono, sp.schema, want)
}

// fenceToken returns the token of the fence of schema on db and whether it
// is sealed; ok is false when there is no fence table (no copy).
func fenceToken(ctx context.Context, db *gorm.DB, schema string) (token int64, sealed, ok bool, err error) {
	if ok, err = tableExists(ctx, db, schema, fenceTable); err != nil || !ok {
		return 0, false, ok, err
	}
	var row struct {
		Token  int64
		Sealed bool
	}
	err = db.WithContext(ctx).Raw("SELECT token, sealed FROM " + quoteTable(db, schema, fenceTable) + " WHERE id = 1").Scan(&row).Error
	return row.Token, row.Sealed, true, err
}

// flipBack lets the monolith take the writes of shard s, copied back and
// whose schema on from is sealed (no writer reaches it there), then places
// the shard in the monolith's shared tables in the catalog (only if it
// still places it on from) and in the map. The monolith's seal goes first:
// from then on no tool of the split takes the shard for one that a batch
// sealed and did not flip (SplitShards run again would flip it out again),
// and an abort no longer applies (AbortRollback refuses it).
func (sp *splitter) flipBack(ctx context.Context, lock *moveLock, s, from int, stage func(string)) (int64, error) {
	names := sp.cfg.Map.Databases()
	if err := lock.ensure(ctx, "lifting the monolith's seal"); err != nil {
		return 0, err
	}
	// One transaction: the monolith's refusal of every write (if the last
	// batch emptied it) goes with the shard's seal, never without it, so
	// that an abort of this roll-back never finds the refusal gone and the
	// shard still sealed.
	emptied, err := sp.refusesEveryWritePG(ctx)
	if err != nil {
		return 0, err
	}
	pauseAt(ctx, "flip back")
	var mark backMark // the roll-back's record, as the lift found it
	err = lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
		if emptied {
			// The function's triggers go with it (the tables locked
			// first, then the state rows, as the clean-up takes them).
			if err := tx.Exec(`DROP FUNCTION IF EXISTS "` + sp.schema + `".` + splitDoneFunction + "() CASCADE").Error; err != nil {
				return fmt.Errorf("letting the monolith take writes again: %w", err)
			}
		}
		// The lock checked with the shard's state row held (FOR UPDATE),
		// and the roll-back's record still there, from the same
		// database: a run paused before this transaction (or one that
		// lost its lock and took it back since, with its plan read
		// before), while another finished the roll-back and split the
		// shard again (sealed anew, its home on a target), must not
		// unseal the monolith's old rows of it, where a router whose map
		// is stale would write and be lost.
		if _, err := sp.lockStates(tx, []int{s}); err != nil {
			return err
		}
		var rec []backMark
		if err := tx.Raw("SELECT shard, source, verified, token FROM "+sp.q(splitBackTable)+" WHERE shard = ?", s).Scan(&rec).Error; err != nil {
			return err
		}
		if len(rec) != 1 || rec[0].Source != names[from] {
			return fmt.Errorf("%w: the roll-back of shard %d from %s is no longer recorded (%+v): another run finished it", ErrMoveLockLost, s, names[from], rec)
		}
		mark = rec[0]
		if err := lock.ensure(ctx, "lifting the monolith's seal"); err != nil {
			return err
		}
		return sp.liftShardsTx(tx, []int{s}, nil, true, true)
	})
	if err != nil {
		return 0, fmt.Errorf("letting the monolith take its writes: %w", err)
	}
	stage("unsealed")
	var version int64
	if c := sp.cfg.Catalog; c != nil {
		// Read before the lock is asked, flipped only at that version:
		// a run paused here, while another finished the roll-back and
		// split the shard again onto the same database, must not place
		// it back in the monolith. A version moved by anything else, the
		// lock held all along, is read again (retryFlip).
		err := retryFlip(lock, func() error {
			p, was, err := c.loadPlacements(ctx, names, sp.shards)
			if err != nil {
				return err
			}
			if p[s].Shared && p[s].DB == sp.monoIdx {
				return nil
			}
			if err := lock.ensure(ctx, "flipping the catalog back"); err != nil {
				return err
			}
			pauseAt(ctx, "unflip back")
			version, err = c.unflipShared(ctx, s, names[from], sp.cfg.Monolith, was)
			return err
		})
		if err != nil {
			return 0, err
		}
	}
	err = sp.cfg.Map.Update(func(p []shardmap.Placement) error {
		p[s] = shardmap.Placement{DB: sp.monoIdx, Shared: true}
		return nil
	})
	if err != nil {
		return version, err
	}
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if !lock.reclaim(cctx) {
		return version, fmt.Errorf("the shard is back in the catalog, but its roll-back is still recorded (run the roll-back again): %w", ErrMoveLockLost)
	}
	return version, sp.forgetBack(cctx, s, mark)
}

// forgetBack deletes the roll-back's record of shard s, flipped back, if
// it is still m and the shard's state row unsealed (the monolith takes
// its writes): a run that took its lock back after a pause must not
// delete the record of a later roll-back of the shard, split again since.
func (sp *splitter) forgetBack(ctx context.Context, s int, m backMark) error {
	return lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
		st, err := sp.lockStates(tx, []int{s})
		if err != nil {
			return err
		}
		if len(st) == 1 && st[0].Sealed {
			return nil // sealed again: another roll-back's record, if any
		}
		return tx.Exec("DELETE FROM "+sp.q(splitBackTable)+" WHERE shard = ? AND source = ? AND token = ?", s, m.Source, m.Token).Error
	})
}
