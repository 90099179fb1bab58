package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardid/shardid/reshard"
)

// shardList parses --shards: "all", or shards and ranges separated by
// commas ("0-15,20"), each in [0, n).
func shardList(v string, n int) ([]int, error) {
	if strings.TrimSpace(v) == "all" {
		return allShardNumbers(n), nil
	}
	var out []int
	for _, part := range strings.Split(v, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a > b {
			return nil, badFlag("--shards %q: want shards and ranges such as 0-15,20, or all", v)
		}
		if a < 0 || b >= n {
			return nil, badFlag("--shards %q: the map has %d logical shards, 0 to %d", v, n, n-1)
		}
		for s := a; s <= b; s++ {
			if slices.Contains(out, s) {
				return nil, badFlag("--shards %q: shard %d is named twice", v, s)
			}
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out, nil
}

// splitRollback rolls shards back into the monolith with a line per shard.
func splitRollback(ctx context.Context, w io.Writer, env *splitEnv, in *interrupt, shards []int, fenceFor time.Duration, afterLast bool, config, list string) error {
	if env.noMap {
		return fmt.Errorf("the catalog holds no map: nothing was split from %s", env.cfg.Monolith)
	}
	in.Leaves(`A shard stopped at once may stay fenced on its target until --fence-for runs out; run "shardid split status --config ` + config + `", then run the roll-back again or abort.`)
	defer in.Release()
	start := time.Now()
	var from []string
	var copied int64
	res, err := reshard.RollbackSplit(ctx, env.cfg, shards, reshard.RollbackOptions{
		FenceFor:       fenceFor,
		AfterLastBatch: afterLast,
		OnStage: func(s int, stage string) {
			switch stage {
			case "sealed":
				in.Hold(fmt.Sprintf("shard %d is fenced for good on its target: flipping it back to %s first", s, env.cfg.Monolith))
			case "flipped":
				in.Release()
			}
		},
		OnShard: func(r reshard.RollbackResult) {
			if !slices.Contains(from, r.From) {
				from = append(from, r.From)
			}
			copied += r.Copied
			fmt.Fprintf(w, "shard %d back from %s: %d rows copied in %v, fenced %v, catalog version %d\n",
				r.Shard, r.From, r.Copied, r.CopyTime.Round(time.Millisecond), r.Fenced.Round(time.Millisecond), r.Version)
		},
	})
	if err != nil {
		return err
	}
	if len(res) == 0 {
		fmt.Fprintf(w, "nothing to roll back: shards %s are in %s already\n", shardRange(shards), env.cfg.Monolith)
		return nil
	}
	slices.Sort(from)
	fmt.Fprintf(w, "rolled back %d shard(s) in %v: %d rows copied; their old copies stay on %s, fenced for good: drop them with\n  shardid split drop-copies --config %s --shards %s\n",
		len(res), time.Since(start).Round(time.Millisecond), copied, strings.Join(from, ", "), config, list)
	return nil
}

// splitDropCopies drops the old copies that roll-backs left of shards
// (those the map places in the monolith) on the other databases.
func splitDropCopies(ctx context.Context, w io.Writer, env *splitEnv, shards []int) error {
	v := env.cfg.Map.Load()
	mono := env.cfg.Map.DatabaseIndex(env.cfg.Monolith)
	var dropped []int
	for _, s := range shards {
		if !v.Shared(s) || v.DB(s) != mono {
			continue // still split: its schema is its home
		}
		for _, name := range env.cfg.Map.Databases() {
			if name == env.cfg.Monolith {
				continue
			}
			err := reshard.DropSplitCopy(ctx, env.cfg, s, name)
			if errors.Is(err, reshard.ErrNoCopy) {
				continue
			}
			if err != nil {
				return err
			}
			if !slices.Contains(dropped, s) {
				dropped = append(dropped, s)
			}
		}
	}
	fmt.Fprintf(w, "dropped the old copies of %d shard(s) %s\n", len(dropped), shardRange(dropped))
	return nil
}

// abortRollback undoes the roll-backs stopped before their flip, and says
// so when there were any.
func abortRollback(ctx context.Context, w io.Writer, env *splitEnv) error {
	res, err := reshard.AbortRollback(ctx, env.cfg)
	if err != nil {
		return err
	}
	if len(res.Undone) > 0 {
		fmt.Fprintf(w, "aborted the roll-back of %d shard(s) %s: they stay on their targets; their rows in %s stay there, sealed, for the split's clean-up (%d rows of no shard deleted)\n",
			len(res.Undone), shardRange(res.Undone), env.cfg.Monolith, res.Deleted)
	}
	if len(res.Finished) > 0 {
		fmt.Fprintf(w, "%d shard(s) %s were rolled back already: %s takes their writes\n", len(res.Finished), shardRange(res.Finished), env.cfg.Monolith)
	}
	return nil
}
