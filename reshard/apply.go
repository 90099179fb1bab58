package reshard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shardid/shardid"
)

// ApplyOptions configures Plan.Apply.
type ApplyOptions struct {
	// Move configures every move: Models or Tables (one is required),
	// Batch and FenceFor. Its Progress and OnStage, if set, are called
	// too.
	Move MoveOptions

	// Progress, if not nil, is called on the goroutine running Apply as
	// each move starts, reaches each stage, copies a batch and ends.
	Progress func(ApplyProgress)

	// DropCopies drops the old copy each move leaves on its source, once
	// DropDelay has passed since the move's flip (Apply waits for the last
	// one before it returns), and the copy of a shard the plan moves onto
	// a database that holds an old copy of it. A router still on the old
	// map reads the old copy, and its writes there fail with the
	// retryable ErrShardMoving; once the copy is dropped they fail with
	// the database's "no such table" instead: give every router time to
	// follow the catalog.
	DropCopies bool

	// DropDelay is how long after a move its old copy is dropped, with
	// DropCopies. If 0, 10s.
	DropDelay time.Duration
}

// ApplyProgress is what Plan.Apply reports as it goes.
type ApplyProgress struct {
	Step  int // the move's place in the plan, from 1
	Steps int // the number of moves in the plan
	Move  PlannedMove

	// Stage is "started"; then MoveShard's stages ("created", "copied",
	// "fenced", "verified", "sealed", "flipped"), with "copying" after
	// every batch; then "moved" or "failed". "skipped" is a move found
	// done already (the shard is on its target), and "dropped" an old
	// copy dropped (DropCopies).
	Stage string

	Table  string        // with "copying": the table being copied
	Copied int64         // with "copying": its rows copied so far in this pass
	Fenced time.Duration // with "moved": how long writes to the shard were fenced
	Err    error         // with "failed"
}

// ApplyResult says what Plan.Apply did.
type ApplyResult struct {
	Moved   []MoveResult  // the moves made, in order
	Skipped []PlannedMove // the moves found done already
	Dropped []PlannedMove // the moves whose old copy was dropped
}

// Apply carries out p on r, move by move, each with MoveShard, and returns
// at the first move that fails. Before each move it reads where the shard
// lives (from the catalog c, loading its map into r when r is behind it;
// from r when c is nil): a shard already on its target is skipped, one on
// the plan's source is moved, and one found anywhere else stops the run
// with ErrCatalogConflict (the map changed since the plan: plan again).
// A plan with a Map is first checked whole against the map (Plan.Check):
// ErrStalePlan, and no move made, when it no longer fits.
//
// An interrupted Apply (a cancelled context, a failed move, a dead
// process) can be run again with the same plan, or a new plan made from
// fresh sizes: a move that did not finish left its shard on the source,
// writable, as MoveShard guarantees, and the moves that finished are
// skipped.
func (p Plan) Apply(ctx context.Context, r *shardid.Router, c *Catalog, opts ApplyOptions) (ApplyResult, error) {
	var res ApplyResult
	names := r.Names()
	for _, mv := range p.Moves {
		if mv.Shard < 0 || mv.Shard >= r.LogicalShards() {
			return res, withDetail(shardid.ErrShardRange, fmt.Sprintf("shard %d is not in [0, %d)", mv.Shard, r.LogicalShards()))
		}
		if !slices.Contains(names, mv.From) || !slices.Contains(names, mv.To) || mv.From == mv.To {
			return res, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("the plan moves shard %d from %q to %q: not two databases of the router (%v)", mv.Shard, mv.From, mv.To, names))
		}
	}
	if len(p.Moves) > 0 && len(opts.Move.Models) == 0 && len(opts.Move.Tables) == 0 {
		return res, withDetail(shardid.ErrInvalidConfig, "ApplyOptions.Move has neither Models nor Tables")
	}
	if len(p.Moves) > 0 {
		if err := CheckDatabases(ctx, r); err != nil {
			return res, err
		}
	}
	// The whole plan against the map now, before any move: a plan made
	// from an older map would move shards to where they no longer even
	// out anything, and fail only at the first move it cannot make.
	if p.Map != nil {
		m := r.Map()
		if c != nil {
			var err error
			if m, _, err = c.Load(ctx, r); err != nil {
				return res, err
			}
		}
		if err := p.Check(m, names); err != nil {
			return res, err
		}
	}
	if opts.DropDelay <= 0 {
		opts.DropDelay = 10 * time.Second
	}
	report := func(ev ApplyProgress) {
		if opts.Progress != nil {
			opts.Progress(ev)
		}
	}
	type drop struct {
		mv  PlannedMove
		due time.Time
	}
	var drops []drop
	dropDue := func(all bool) error {
		for len(drops) > 0 {
			d := drops[0]
			if wait := time.Until(d.due); wait > 0 {
				if !all {
					return nil
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(wait):
				}
			}
			if err := DropShardCopy(ctx, r, d.mv.Shard, d.mv.From); err != nil {
				return fmt.Errorf("shardid: dropping the old copy of shard %d on %s: %w", d.mv.Shard, d.mv.From, err)
			}
			res.Dropped = append(res.Dropped, d.mv)
			report(ApplyProgress{Steps: len(p.Moves), Move: d.mv, Stage: "dropped"})
			drops = drops[1:]
		}
		return nil
	}
	for i, mv := range p.Moves {
		ev := ApplyProgress{Step: i + 1, Steps: len(p.Moves), Move: mv}
		fail := func(err error) (ApplyResult, error) {
			if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
				err = fmt.Errorf("%w: %w", ctxErr, err)
			}
			ev.Stage, ev.Err = "failed", err
			report(ev)
			return res, fmt.Errorf("shardid: rebalancing, move %d of %d (shard %d from %s to %s): %w", i+1, len(p.Moves), mv.Shard, mv.From, mv.To, err)
		}
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		where, err := currentHome(ctx, r, c, mv.Shard)
		if err != nil {
			return fail(err)
		}
		switch where {
		case mv.To:
			res.Skipped = append(res.Skipped, mv)
			ev.Stage = "skipped"
			report(ev)
			if opts.DropCopies {
				drops = append(drops, drop{mv, time.Now().Add(opts.DropDelay)})
			}
			continue
		case mv.From:
		default:
			return fail(&catalogConflict{fmt.Sprintf("shard %d is on %s, not on %s: plan again", mv.Shard, where, mv.From)})
		}
		ev.Stage = "started"
		report(ev)
		mo := opts.Move
		mo.Progress = func(table string, copied int64) {
			if opts.Move.Progress != nil {
				opts.Move.Progress(table, copied)
			}
			e := ev
			e.Stage, e.Table, e.Copied = "copying", table, copied
			report(e)
		}
		mo.OnStage = func(stage string) {
			if opts.Move.OnStage != nil {
				opts.Move.OnStage(stage)
			}
			e := ev
			e.Stage = stage
			report(e)
		}
		mr, err := MoveShard(ctx, r, c, mv.Shard, mv.To, mo)
		if errors.Is(err, ErrShardMoved) && opts.DropCopies {
			// The target holds an old copy of the shard, from a move away
			// from it: the map names the source, so it is a leftover.
			if derr := DropShardCopy(ctx, r, mv.Shard, mv.To); derr != nil {
				return fail(errors.Join(err, derr))
			}
			mr, err = MoveShard(ctx, r, c, mv.Shard, mv.To, mo)
		}
		if err != nil {
			return fail(err)
		}
		res.Moved = append(res.Moved, mr)
		ev.Stage, ev.Fenced = "moved", mr.Fenced
		report(ev)
		if opts.DropCopies {
			drops = append(drops, drop{mv, time.Now().Add(opts.DropDelay)})
			if err := dropDue(false); err != nil {
				return res, err
			}
		}
	}
	if err := dropDue(true); err != nil {
		return res, fmt.Errorf("shardid: rebalancing: %w", err)
	}
	return res, nil
}

// currentHome returns the name of the database that holds shard now: the
// catalog's answer, loaded into r when r is behind it, or r's without a
// catalog.
func currentHome(ctx context.Context, r *shardid.Router, c *Catalog, shard int) (string, error) {
	if c == nil {
		return r.DatabaseName(shard), nil
	}
	m, _, err := c.Load(ctx, r)
	if err != nil {
		return "", err
	}
	if !slices.Equal(m, r.Map()) {
		if err := r.SetMap(m); err != nil {
			return "", err
		}
	}
	return r.Names()[m[shard]], nil
}
