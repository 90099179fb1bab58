package reshard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"gorm.io/gorm"

	"github.com/shardid/shardid"
)

// CheckSplit checks, reading only, that plan can run with cfg: that it
// was made for cfg's monolith and map (ErrInvalidPlan), refuses nothing,
// and that a split under way on the monolith began with cfg's tables,
// logical shards, schema pattern and catalog table (ErrTablesChanged).
// RunSplit checks the same first; call CheckSplit before saving the map
// of a catalog that holds none yet (Catalog.SaveMap), which a
// configuration naming another catalog than the split's would otherwise
// create.
func CheckSplit(ctx context.Context, cfg SplitConfig, plan *SplitPlan) error {
	if err := plan.check(cfg); err != nil {
		return err
	}
	sp, err := newSplitter(ctx, cfg)
	if err != nil {
		return err
	}
	return sp.checkDeclared(ctx, false)
}

// RunSplit carries plan out, batch by batch (SplitShards), after
// CleanSplit. The first batch it runs creates the empty, fenced schemas
// (MySQL: databases) of the batches after it with its own, at once: a
// schema's tables cost the server a sync of each new index's file, which
// goes quicker before the rows and the writers move to the targets, and
// each later batch copies into those it finds fenced as they were
// created. With opts.CopyTogether (PostgreSQL), the batches left are
// created and copied together, one read of each monolith table for all of
// them, and then fenced, verified, sealed and flipped one at a time (a
// fence holds one batch's rows only; the change log of the others goes on
// meanwhile), and a batch that fails before its seal leaves it and the
// batches after it in the monolith, their copies fenced for the mover.
// RunSplit can be run again after it was stopped or failed, and goes on
// where it stopped (the batches whose shards are split already are
// skipped; a batch sealed but not flipped, or flipped with its targets
// still fenced for the mover, is finished; the others are copied again).
// AbortSplit drops the schemas created ahead with the rest.
// cfg.Map must be the catalog's (Catalog.LoadMap). onBatch, if not nil,
// hears each batch's result (with CopyTogether, CopyTime is the one copy
// of all the batches, and Copied the rows this batch's shards got from
// it).
func RunSplit(ctx context.Context, cfg SplitConfig, plan *SplitPlan, opts SplitOptions, onBatch func(batch int, res SplitResult)) error {
	if err := plan.check(cfg); err != nil {
		return err
	}
	opts.idsChecked = new(bool)
	mono := cfg.Map.DatabaseIndex(cfg.Monolith)
	var (
		group   [][]int    // the batches left to do
		groupTo [][]string // their shards' targets
		index   []int      // their indexes in the plan
	)
	for i, batch := range plan.Batches {
		v := cfg.Map.Load()
		var shards []int
		var to []string
		for _, s := range batch {
			if v.Shared(s) && v.DB(s) == mono || !v.Shared(s) && v.Database(s) == plan.To[s] {
				shards = append(shards, s)
				to = append(to, plan.To[s])
			} else {
				return withDetail(errStaleSplitPlan, fmt.Sprintf("shard %d is on %s (shared: %v), neither in the monolith nor on %s; plan again", s, v.Database(s), v.Shared(s), plan.To[s]))
			}
		}
		// Split already, unless sealed and not flipped, or flipped with
		// its targets still fenced for the mover (a lift that failed):
		// SplitShards finishes it.
		var pending []int
		var pto []string
		for j, s := range shards {
			if v.Shared(s) {
				pending, pto = append(pending, s), append(pto, to[j])
			}
		}
		if len(pending) == 0 {
			for j, s := range shards {
				st, err := readFence(ctx, cfg.DBs[v.DB(s)], v.Schema(s))
				if err != nil {
					return err
				}
				if st.MoverOnly && !st.Sealed {
					pending, pto = append(pending, s), append(pto, to[j])
				}
			}
		}
		if len(pending) == 0 {
			continue
		}
		index = append(index, i)
		group, groupTo = append(group, pending), append(groupTo, pto)
	}
	// A batch at a time, or with CopyTogether the batches left copied
	// together (one read of each monolith table for all of them), then
	// fenced, verified and flipped one by one; on MySQL/MariaDB always a
	// batch at a time: a copy, a comparison or a catch-up over every
	// shard's tables at once overruns the server's table caches at their
	// defaults (table_open_cache 2,000), and every statement then opens
	// its tables again (a split of 2,000 shards had not finished after 15
	// minutes).
	together := opts.CopyTogether && cfg.DBs[mono].Dialector.Name() != "mysql"
	runs := [][]int{} // of indexes into group
	for k := range group {
		if k == 0 || !together {
			runs = append(runs, nil)
		}
		runs[len(runs)-1] = append(runs[len(runs)-1], k)
	}
	// A batch at a time, the first batch creates the later batches'
	// schemas with its own, and each later batch takes those it finds as
	// created (targetsAhead).
	var ahead *targetsAhead
	if len(runs) > 1 {
		ahead = &targetsAhead{to: map[int]int{}}
		for _, run := range runs[1:] {
			for _, k := range run {
				for j, s := range group[k] {
					d := cfg.Map.DatabaseIndex(groupTo[k][j])
					if d < 0 || d == mono {
						return withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("split: shard %d to %q: not another database of the map", s, groupTo[k][j]))
					}
					ahead.shards = append(ahead.shards, s)
					ahead.to[s] = d
				}
			}
		}
	}
	for _, run := range runs {
		var batches [][]int
		var shards []int
		var to []string
		for _, k := range run {
			batches = append(batches, group[k])
			shards = append(shards, group[k]...)
			to = append(to, groupTo[k]...)
		}
		res, err := splitShards(ctx, cfg, shards, to, batches, ahead, opts, func(k int, res SplitResult) {
			if onBatch != nil {
				onBatch(index[run[k]], res)
			}
		})
		if err = canceled(ctx, err); err != nil {
			for _, k := range run {
				if slices.Equal(sortedCopy(group[k]), res.Shards) {
					return fmt.Errorf("batch %d of %d (shards %d to %d): %w", index[k]+1, len(plan.Batches), res.Shards[0], res.Shards[len(res.Shards)-1], err)
				}
			}
			if len(run) == 1 {
				shards := sortedCopy(group[run[0]])
				return fmt.Errorf("batch %d of %d (shards %d to %d): %w", index[run[0]]+1, len(plan.Batches), shards[0], shards[len(shards)-1], err)
			}
			return fmt.Errorf("batches %d to %d of %d, copied together: %w", index[run[0]]+1, index[run[len(run)-1]]+1, len(plan.Batches), err)
		}
		if ahead != nil {
			ahead.shards = nil // created, or left to their batches
		}
	}
	// On PostgreSQL, again what a batch does after its flip, if one
	// stopped there: the foreign keys in every split shard, and the last
	// batch's clean-up of the monolith.
	if cfg.DBs[mono].Dialector.Name() != "mysql" {
		if _, err := CleanSplit(ctx, cfg); err != nil {
			return err
		}
	}
	return nil
}

// CleanSplit finishes what the batches of a split do after their flips:
// on PostgreSQL it adds the monolith's foreign keys to every split shard
// that lacks them (a batch stopped after its flip), and, once no shard is
// left in the monolith (every shard split and flipped), it empties the
// monolith's sharded tables and returns the rows it deleted: each shard's
// rows of a table only if they add up to what its batch verified under
// its fence. Until then it deletes nothing: the split shards' rows stay on
// the monolith, sealed, where they refuse the writes of a router whose map
// is stale.
//
// On PostgreSQL the last batch of a split cleans the monolith itself
// (RunSplit, SplitShards), and triggers then refuse every write to those
// tables; CleanSplit finishes a clean-up that failed. On MySQL/MariaDB,
// which has no statement triggers, an UPDATE or DELETE that finds no row
// is refused only by the routers' check of a write that changed no row,
// not when it comes from SQL run outside them: run CleanSplit once no
// process can still route with a map from before the split (every router
// follows the catalog, or was restarted since the last batch). While a roll-back (RollbackSplit) is
// under way it only adds the foreign keys: the monolith holds that shard's
// rows the roll-back copied.
func CleanSplit(ctx context.Context, cfg SplitConfig) (int64, error) {
	sp, err := newSplitter(ctx, cfg)
	if err != nil {
		return 0, err
	}
	lock, err := lockMove(ctx, sp.mono, sp.schema, DefaultLockWait, nil)
	if err != nil {
		return 0, fmt.Errorf("shardid: split: %w", err)
	}
	defer lock.release()
	if err := sp.checkDeclared(ctx, false); err != nil {
		return 0, err
	}
	if !sp.mysql {
		b, err := sp.splitSoFar(ctx)
		if err != nil {
			return 0, err
		}
		if b != nil {
			if err := b.addForeignKeysPG(ctx); err != nil {
				return 0, err
			}
		}
	}
	return sp.cleanMonolith(ctx, lock)
}

// AbortResult says what AbortSplit undid.
type AbortResult struct {
	Unfenced []int // shards whose state on the monolith was reset (moving, fenced or sealed before a flip)
	Dropped  []int // shards whose copy on a target was dropped
}

// AbortSplit undoes the batch of a split that was stopped or failed before
// its flip: the monolith stays the home of every shard it still holds
// (the catalog's, if cfg has one, or cfg.Map's), its rows take writes again
// (their fences and seals lifted), the change log stops, and the copies of
// those shards on the targets, never flipped (still fenced for the mover),
// are dropped. Shards already flipped stay split. It waits for the split's
// lock (a split under way must be stopped first: ErrMoveInProgress).
func AbortSplit(ctx context.Context, cfg SplitConfig) (AbortResult, error) {
	var res AbortResult
	sp, err := newSplitter(ctx, cfg)
	if err != nil {
		return res, err
	}
	lock, err := lockMove(ctx, sp.mono, sp.schema, DefaultLockWait, nil)
	if err != nil {
		return res, fmt.Errorf("shardid: split: %w", err)
	}
	defer lock.release()
	// Another modulus would take other shards for those still in the
	// monolith (other declarations do not matter here).
	if err := sp.checkModulus(ctx); err != nil {
		return res, err
	}
	p := cfg.Map.Load().Placements()
	var version int64 // the catalog's, as p was read
	if cfg.Catalog != nil {
		if p, version, err = cfg.Catalog.loadPlacements(ctx, cfg.Map.Databases(), sp.shards); err != nil {
			return res, err
		}
	}
	var home []int // shards the monolith still holds
	for s, pl := range p {
		if pl.Shared && pl.DB == sp.monoIdx {
			home = append(home, s)
		}
	}
	state, err := sp.readSplitState(ctx, nil)
	if err != nil {
		return res, err
	}
	var reset []int
	for _, s := range home {
		if st, ok := state[s]; ok && (st.Moving || st.Live || st.Sealed) {
			reset = append(reset, s)
		}
	}
	if len(reset) > 0 {
		if err := lock.ensure(ctx, "lifting the split's fences"); err != nil {
			return res, err
		}
		pauseAt(ctx, "abort lift")
		// As read, under the lock: a run of the batch that took the
		// lock while this abort was paused has changed their tokens
		// (sealed, flipped), and its shards are left alone. The lock is
		// asked again once the rows are held, as stopChangeLog does.
		tokens := map[int]int64{}
		sealed := false
		for _, s := range reset {
			tokens[s] = state[s].Token
			sealed = sealed || state[s].Sealed
		}
		// A run of the batch that sealed it and lost its lock may be
		// about to flip the catalog: the catalog's version, as read with
		// the placements, claimed first, so that its flip fails from
		// here on (flipShared), and this abort fails if it flipped since.
		if sealed && cfg.Catalog != nil {
			if err := cfg.Catalog.claimVersion(ctx, version); err != nil {
				return res, fmt.Errorf("shardid: split: %w (see shardid split status, then run the abort again)", err)
			}
		}
		err := lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
			cur, err := sp.lockStates(tx, reset)
			if err != nil {
				return err
			}
			if err := lock.ensure(ctx, "lifting the split's fences"); err != nil {
				return err
			}
			// A shard whose state changed since it was read (a run of
			// the batch that lost its lock sealed it meanwhile) fails the
			// abort: lifting the others and dropping its copy would leave
			// it sealed on the monolith with no copy to flip to.
			for _, c := range cur {
				if c.Token != tokens[c.Shard] {
					return withDetail(ErrMoveInProgress, fmt.Sprintf("the split's state of shard %d changed while the abort read it (a run of its batch went on): see shardid split status, then run the abort again", c.Shard))
				}
			}
			return sp.liftShardsTx(tx, reset, tokens, true, true)
		})
		if err != nil {
			return res, err
		}
		res.Unfenced = reset
	}
	if state != nil {
		if err := sp.stopChangeLog(ctx, lock, nil); err != nil {
			return res, err
		}
	}
	// The copies left on the targets, fenced for the mover: never live.
	dropped, err := sp.dropUnflippedCopies(ctx, lock, home, nil)
	if err != nil {
		return res, err
	}
	res.Dropped = append(res.Dropped, dropped...)
	slices.Sort(res.Dropped)
	// Nothing under way any more: the next run may declare the tables
	// otherwise.
	// With them, the triggers' ID rule (SplitConfig.Layout) ends: it
	// refuses only while the split's tables are declared.
	if err := sp.forgetDeclared(ctx, lock); err != nil {
		return res, err
	}
	return res, nil
}

// SplitStatus is where a split stands.
type SplitStatus struct {
	Shared  int // shards still in the monolith
	Split   int // shards on their targets
	Moving  []int
	Fenced  []int // fenced now on the monolith, not sealed
	Sealed  []int // sealed on the monolith (split, or flip pending)
	Pending []int // sealed but still shared in the map: the flip is left to do
	Backlog int64 // entries in the split's change log
	// RowsLeft counts the rows of each sharded table still in the
	// monolith (those of shards split but not deleted yet included).
	RowsLeft map[string]int64
	// Running is set while a split (or abort, or clean-up) holds the
	// split's lock, with who holds it.
	Running string
	// RollingBack are the shards whose roll-back (RollbackSplit) stopped
	// before it finished: run it again, or AbortRollback.
	RollingBack []int
}

// ReadSplitStatus reports where the split of cfg's monolith stands, by
// cfg.Map, the split's state on the monolith and its change log. It only
// reads (and tries the split's lock once, to tell whether a split runs).
func ReadSplitStatus(ctx context.Context, cfg SplitConfig) (SplitStatus, error) {
	st := SplitStatus{RowsLeft: map[string]int64{}}
	sp, err := newSplitter(ctx, cfg)
	if err != nil {
		return st, err
	}
	v := cfg.Map.Load()
	for s := range sp.shards {
		if v.Shared(s) && v.DB(s) == sp.monoIdx {
			st.Shared++
		} else {
			st.Split++
		}
	}
	state, err := sp.readSplitState(ctx, nil)
	if err != nil {
		return st, err
	}
	back, err := sp.rollingBack(ctx)
	if err != nil {
		return st, err
	}
	st.RollingBack = slices.Sorted(maps.Keys(back))
	for _, s := range sortedShards(state) {
		if s < 0 {
			continue
		}
		x := state[s]
		switch {
		case x.Sealed:
			st.Sealed = append(st.Sealed, s)
			if v.Shared(s) && !back[s] {
				st.Pending = append(st.Pending, s)
			}
		case x.Live:
			st.Fenced = append(st.Fenced, s)
		}
		if x.Moving {
			st.Moving = append(st.Moving, s)
		}
	}
	if state != nil {
		if err := sp.mono.WithContext(ctx).Raw("SELECT count(*) FROM " + sp.q(splitChangeTable)).Scan(&st.Backlog).Error; err != nil {
			return st, err
		}
	}
	for _, t := range sp.tables {
		var n int64
		if err := sp.mono.WithContext(ctx).Raw("SELECT count(*) FROM " + sp.q(t.Name)).Scan(&n).Error; err != nil {
			return st, err
		}
		st.RowsLeft[t.Name] = n
	}
	lock, err := lockMove(ctx, sp.mono, sp.schema, -1, nil)
	if errors.Is(err, ErrMoveInProgress) {
		st.Running = err.Error()
	} else if err != nil {
		return st, err
	} else {
		lock.release()
	}
	return st, nil
}

func sortedShards(m map[int]splitState) []int {
	out := make([]int, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// dropUnflippedCopies drops the copies of shards (shards the monolith
// still holds) that a split left on the databases other than the
// monolith and keep[shard] (-1 or absent: every other database): their
// schemas fenced for the mover and not sealed, never flipped, which only
// a mover writes, and a mover takes the split's lock (held: lock) first.
// A batch drops those of an earlier plan that sent its shards elsewhere
// (created ahead of their batch, or a batch stopped before its seal); an
// abort drops them all. It returns the shards whose copies it dropped.
//
// Two databases of the map may be one server (MySQL's databases per
// shard are seen through every connection to it) or one database: a
// schema found through another database that holds the fence of the
// one kept (the same random token) is the kept one, seen twice, and
// stays.
func (sp *splitter) dropUnflippedCopies(ctx context.Context, lock *moveLock, shards []int, keep map[int]int) ([]int, error) {
	var out []int
	kept := map[int]int64{} // a kept schema's fence token, where it has one
	byKeep := map[int][]string{}
	for _, s := range shards {
		if k, ok := keep[s]; ok && k >= 0 {
			byKeep[k] = append(byKeep[k], sp.cfg.Map.SchemaOf(s))
		}
	}
	for k, names := range byKeep {
		toks, err := sp.fenceTokensOf(ctx, sp.cfg.DBs[k], names)
		if err != nil {
			return out, err
		}
		for _, s := range shards {
			if tok, ok := toks[sp.cfg.Map.SchemaOf(s)]; ok && keep[s] == k {
				kept[s] = tok
			}
		}
	}
	for d, db := range sp.cfg.DBs {
		if d == sp.monoIdx {
			continue
		}
		schemas := map[string]int{}
		var names []string
		for _, s := range shards {
			if k, ok := keep[s]; ok && k == d {
				continue
			}
			schemas[sp.cfg.Map.SchemaOf(s)] = s
			names = append(names, sp.cfg.Map.SchemaOf(s))
		}
		if len(names) == 0 {
			continue
		}
		toks, err := sp.fenceTokensOf(ctx, db, names)
		if err != nil {
			return out, err
		}
		for _, sc := range names {
			tok, ok := toks[sc]
			if !ok {
				continue // none there
			}
			if want, ok := kept[schemas[sc]]; ok && tok == want {
				continue // the kept schema, through another database of the map
			}
			st, err := readFence(ctx, db, sc)
			if err != nil {
				return out, err
			}
			if !st.MoverOnly || st.Sealed {
				continue // not a copy under way: left alone
			}
			// Dropped only as found, the lock held: a run of the batch
			// that took the lock while this one was paused may have
			// flipped the copy since (dropCopyAsSeen).
			seen, err := seeTarget(ctx, db, sc, false)
			if err != nil {
				return out, err
			}
			if err := lock.ensure(ctx, "dropping a split's copy"); err != nil {
				return out, err
			}
			if err := dropCopyAsSeen(ctx, db, sc, sp.tableNames(), seen, lock, "dropping a split's copy"); err != nil {
				return out, err
			}
			if !slices.Contains(out, schemas[sc]) {
				out = append(out, schemas[sc])
			}
		}
	}
	return out, nil
}

// fenceTokensOf returns the fence token of each of schemas on db that has
// a fence table, in one read of each 200.
func (sp *splitter) fenceTokensOf(ctx context.Context, db *gorm.DB, schemas []string) (map[string]int64, error) {
	out := map[string]int64{}
	fenced, err := schemasWithTable(ctx, db, schemas, fenceTable)
	if err != nil {
		return nil, err
	}
	for lo := 0; lo < len(fenced); lo += 200 {
		chunk := fenced[lo:min(lo+200, len(fenced))]
		var rows []struct{ I, Token int64 }
		if err := db.WithContext(ctx).Raw(fenceTokensQuery(sp.mysql, chunk, false)).Scan(&rows).Error; err != nil {
			return nil, err
		}
		for _, r := range rows {
			out[chunk[r.I]] = r.Token
		}
	}
	return out, nil
}
