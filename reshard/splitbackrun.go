package reshard

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// rollbackShard rolls shard bs back into the monolith, under the split's
// lock, from where it stands (bs.phase).
func (sp *splitter) rollbackShard(ctx context.Context, lock *moveLock, bs backShard, cols map[string]columns, opts RollbackOptions) (res RollbackResult, err error) {
	names := sp.cfg.Map.Databases()
	s := bs.shard
	res = RollbackResult{Shard: s, From: names[bs.from]}
	stage := func(st string) {
		if opts.OnStage != nil {
			opts.OnStage(s, st)
		}
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("shardid: roll back shard %d from %s: %w", s, names[bs.from], err)
		}
	}()
	if bs.phase == backLiftPhase {
		// Flipped before the mover stopped: the monolith's seal is left.
		if res.Version, err = sp.flipBack(ctx, lock, s, bs.from, stage); err != nil {
			return res, err
		}
		stage("flipped")
		return res, nil
	}
	src, schema := sp.cfg.DBs[bs.from], sp.cfg.Map.SchemaOf(s)
	tables := sp.tableNames()
	// The shard's move lock on its target: no move, Fence or Unfence of
	// it meanwhile.
	slock, err := lockMove(ctx, src, schema, opts.LockWait, nil)
	if err != nil {
		return res, err
	}
	defer slock.release()
	ctx, unwatch := slock.watch(ctx)
	defer unwatch()
	defer func() {
		if lost := slock.lost(); errors.Is(err, context.Canceled) && lost != nil && !errors.Is(err, ErrMoveLockLost) {
			err = fmt.Errorf("shardid: roll back shard %d: the lock of its schema %s on its target: %w: %w", s, schema, lost, err)
		}
	}()
	ensure := func(step string) error {
		if err := lock.ensure(ctx, step); err != nil {
			return err
		}
		return slock.ensure(ctx, step)
	}
	// Under the shard's lock, where the catalog places it: a move of it
	// that finished since the checks changed it.
	if c := sp.cfg.Catalog; c != nil {
		p, _, err := c.loadPlacements(ctx, names, sp.shards)
		if err != nil {
			return res, err
		}
		if p[s].Shared || p[s].DB != bs.from {
			return res, withDetail(ErrNotSplit, fmt.Sprintf("the catalog now places it on %s (shared: %v): it was moved meanwhile", names[p[s].DB], p[s].Shared))
		}
	}
	if bs.phase == backFlipPhase {
		// The roll-back taken (claimBack), then its seal of the schema
		// read again under a lock: an abort of it that checked its claim
		// before this one (and unseals the schema, the shard's home
		// again) has unsealed it by then, and this run must not flip; one
		// that checks after finds this claim, and unseals nothing
		// (AbortRollback).
		// (A run that died after it let the monolith take the shard's
		// writes left its state row unsealed: no abort takes it then.)
		st, err := sp.readSplitState(ctx, []int{s})
		if err != nil {
			return res, err
		}
		var bc *backCopy
		if st[s].Sealed {
			bc = &backCopy{sp: sp, shard: s, src: src, schema: schema, cols: cols}
			if bc.token, err = sp.claimBack(ctx, s, func(context.Context) error { return ensure("taking the roll-back") }); err != nil {
				return res, err
			}
		}
		if err := sealedAsSeen(ctx, src, schema, bs.seal); err != nil {
			return res, err
		}
		if bc != nil {
			// The monolith, which takes no writes of the shard yet, made
			// to hold what the sealed schema holds before the flip: an
			// abort of the roll-back that died after it deleted the
			// roll-back's copies of rows of no shard (their parent
			// missing in the monolith) and before it unsealed the
			// schema leaves them in the schema only.
			if err := ensure("comparing the monolith with the sealed schema"); err != nil {
				return res, err
			}
			if err := bc.reconcile(ctx); err != nil {
				return res, err
			}
		}
		return sp.finishBack(ctx, lock, slock, bs, res, time.Time{}, stage)
	}
	bc := &backCopy{sp: sp, shard: s, src: src, schema: schema, cols: cols}
	if opts.Progress != nil {
		bc.progress = func(table string, n int64) { opts.Progress(s, table, n) }
	}

	// The shard's rows on the monolith, this run's to write (claimBack).
	if bc.token, err = sp.claimBack(ctx, s, func(context.Context) error { return ensure("taking the roll-back") }); err != nil {
		return res, err
	}
	// 1. The roll-back recorded: from here on the monolith's rows of the
	// shard are the roll-back's. Those the split left there (sealed, so
	// that a router whose map is stale is refused) stay, to be written
	// over: the shard's rows never leave the monolith.
	if !bs.marked {
		if err := ensure("recording the roll-back"); err != nil {
			return res, err
		}
		if err := sp.markBack(ctx, s, names[bs.from]); err != nil {
			return res, err
		}
	}
	// 2. The change log of the shard's schema, before anything is read;
	// a roll-back run again goes on with the log it left.
	if err := ensure("starting the change log"); err != nil {
		return res, err
	}
	// Run again after its change log was dropped (Unfence drops it), it
	// starts a new one and copies over what it copied before, as over the
	// split's rows: the copy overwrites every row the schema holds, and
	// dropExtras deletes those it no longer holds. The monolith's rows of
	// the shard are never emptied: sealed, they refuse a router whose map
	// is from before the split, which would find none to update or delete
	// and be told it succeeded.
	// Checked again under the capture's lock (startCapture).
	if err := bc.capture(ctx, bs.marked, func(context.Context) error { return ensure("starting the change log") }); err != nil {
		return res, err
	}
	stage("captured")
	// 3. The first copy, over the rows the split left and what a stopped
	// run copied; then the rows of the shard the schema no longer holds
	// deleted.
	if err := ensure("copying into the monolith"); err != nil {
		return res, err
	}
	pauseAt(ctx, "rollback copy")
	start := timeNow()
	if res.Copied, err = bc.copy(ctx); err != nil {
		return res, err
	}
	if _, err := bc.dropExtras(ctx); err != nil {
		return res, err
	}
	res.CopyTime = timeNow().Sub(start)
	stage("copied")
	// 4. Both sides compared, the change log applied until little is left.
	if err := ensure("applying changes to the monolith"); err != nil {
		return res, err
	}
	if err := bc.converge(ctx); err != nil {
		return res, err
	}
	// 5. The fence of the shard's schema, by its database's clock.
	if err := ensure("fencing the shard's schema"); err != nil {
		return res, err
	}
	token, fenced, err := setFence(ctx, src, schema, tables, opts.FenceFor, false, 0)
	if err != nil {
		return res, fmt.Errorf("fencing %s: %w", schema, err)
	}
	sealed := false
	defer func() {
		if !sealed {
			// The schema is still the shard's home: writes go through
			// again at once, unless the fence is no longer ours.
			cctx, cancel := cleanupContext(ctx)
			defer cancel()
			if slock.reclaim(cctx) {
				_, _ = liftFence(cctx, src, schema, tables, token)
			}
		}
	}()
	stage("fenced")
	pauseAt(ctx, "rollback token")
	// The fence's token recorded, holding this run's claim: a run of the
	// roll-back paused here, whose claim another run has taken meanwhile,
	// must not write its token over that run's, by which a run again
	// tells the roll-back's seal of the schema from a move's.
	if _, err := bc.execHeld(ctx, fmt.Sprintf("UPDATE %s SET token = %d WHERE shard = %d", sp.q(splitBackTable), token, s), nil); err != nil {
		return res, err
	}
	// 6. The last changes, and the keys in doubt compared again.
	if err := ensure("applying the last changes"); err != nil {
		return res, err
	}
	if err := bc.finish(ctx); err != nil {
		return res, err
	}
	stage("verified")
	// 7. The schema fenced for good, only if the fence held all along.
	if err := ensure("sealing the shard's schema"); err != nil {
		return res, fmt.Errorf("%w; the map is not flipped", err)
	}
	pauseAt(ctx, "rollback seal")
	if err := sealFence(ctx, src, schema, tables, token, func(ctx context.Context) error { return ensure("sealing the shard's schema") }); err != nil {
		return res, fmt.Errorf("%w; the map is not flipped", err)
	}
	sealed = true
	stage("sealed")
	return sp.finishBack(ctx, lock, slock, bs, res, fenced, stage)
}

// finishBack flips the catalog and the map back for a shard copied back
// and whose schema is sealed, lets the monolith take its writes, and drops
// the schema's change log.
func (sp *splitter) finishBack(ctx context.Context, lock, slock *moveLock, bs backShard, res RollbackResult, fenced time.Time, stage func(string)) (RollbackResult, error) {
	src, schema := sp.cfg.DBs[bs.from], sp.cfg.Map.SchemaOf(bs.shard)
	v, err := sp.flipBack(ctx, lock, bs.shard, bs.from, stage)
	if err != nil {
		return res, fmt.Errorf("it is copied back and its schema on %s sealed, but not flipped (run the roll-back again to finish it): %w", res.From, err)
	}
	res.Version = v
	if !fenced.IsZero() {
		res.Fenced = timeNow().Sub(fenced)
	}
	stage("flipped")
	// The sealed schema takes no writes: its change log only goes. A
	// failure here leaves it to DropSplitCopy, which drops the schema.
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if slock.reclaim(cctx) {
		_ = stopCapture(cctx, src, schema, func(ctx context.Context) error { return slock.ensure(ctx, "dropping the change log") })
	}
	return res, nil
}
