package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardid/shardid/reshard"
)

// The roll-backs of the fault test. The fault "rollback" takes shards that
// a split flipped out of the monolith back into its shared tables
// (RollbackSplit) while the writers write to every shard: a whole batch of
// the operator's plan, or one shard of it, from the seed, with one of the
// faults of a split's first run (chooseSplitFault): a roll-back process
// killed or paused at a stage, its lock lost with a second operator who
// aborts the roll-back (AbortRollback) or runs it too, or its context
// cancelled at a stage. The operator then does what the guide says
// (docs/resharding.md, "Stop, resume, abort, roll back"): a roll-back that
// failed is run again until it is done or, one time in four, aborted
// (AbortRollback), which leaves the shards on their targets (one abort in
// three is cut short, its context cancelled after a random time as by
// Ctrl-C, and the roll-back is then run again); once every
// router follows the catalog (chaosCaughtUp), the old copies on the
// targets are dropped (DropSplitCopy) before the next split or roll-back,
// and a later split takes the shards out again. Once the last batch has
// emptied the monolith, the operator says AfterLastBatch only when every
// router has loaded the catalog's map since that batch; before, the
// roll-back is refused (ErrMonolithEmptied). What RollbackSplit refuses (a
// shard moved since its split whose old copy is not dropped yet, that)
// must change nothing; the checker judges every write across all of it,
// as it judges a split.

// chaosRollbackStages are the stages of a shard's roll-back, in order.
var chaosRollbackStages = []string{"captured", "copied", "fenced", "verified", "sealed", "unsealed", "flipped"}

// chaosCaughtUp is how long after a flip every router has loaded the
// catalog's map since: the laggards load it every 10s, and a writer may be
// paused for up to 4.5s (3 TTLs) meanwhile. Old copies are dropped, and a
// roll-back reopens an emptied monolith, no sooner.
const chaosCaughtUp = 16 * time.Second

// splitCopy is the old copy of a shard that a roll-back left on a target.
type splitCopy struct {
	from string    // the database that holds it
	at   time.Time // when the shard was found back in the monolith
}

// rollback rolls back a batch of the plan that is split whole, or one
// shard of it unless whole (both chosen by pick), as p says, with
// splitting (under mu) holding its shards meanwhile, and returns what
// happened.
func (d *splitDriver) rollback(p chaosSplitPlan, pick int, whole bool, mu *sync.Mutex, splitting map[int]bool) []string {
	msgs := d.dropCopies()
	final, err := d.sp.c.loadMap()
	if err != nil {
		return append(msgs, fmt.Sprintf("split rollback: loading the map: %v", err))
	}
	var batches [][]int // the plan's batches split whole
	mu.Lock()
	for _, b := range d.sp.plan.Batches {
		if !slices.ContainsFunc(b, func(s int) bool { return final[s].Shared || splitting[s] }) {
			batches = append(batches, b)
		}
	}
	if len(batches) == 0 {
		mu.Unlock()
		return append(msgs, "split rollback: skipped, no batch is split whole")
	}
	shards := batches[pick%len(batches)]
	if !whole {
		shards = shards[pick%len(shards) : pick%len(shards)+1]
	}
	from := map[int]string{}
	for _, s := range shards {
		from[s] = chaosNames[final[s].DB]
	}
	mu.Unlock()
	defer holdShards(mu, splitting, shards)()
	m, _ := d.sp.rollback(shards, p)
	msgs = append(msgs, m...)
	if final, err := d.sp.c.loadMap(); err == nil {
		for _, s := range shards {
			if final[s].Shared {
				d.copies[s] = splitCopy{from: from[s], at: time.Now()}
			}
		}
	}
	d.recount()
	return msgs
}

// dropCopies drops the old copies that roll-backs left (DropSplitCopy), as
// the guide says, once every router follows the catalog: it waits for
// that, then returns what it did. A copy it could not drop stays for the
// next time.
func (d *splitDriver) dropCopies() []string {
	var msgs []string
	for _, s := range slices.Sorted(maps.Keys(d.copies)) {
		cp := d.copies[s]
		if wait := time.Until(cp.at.Add(chaosCaughtUp)); wait > 0 {
			time.Sleep(wait)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cfg, err := d.sp.c.splitConfig(ctx, d.sp.c.dbs)
		if err == nil {
			err = reshard.DropSplitCopy(ctx, cfg, s, cp.from)
		}
		cancel()
		switch {
		case err == nil || errors.Is(err, reshard.ErrNoCopy):
			delete(d.copies, s)
			d.sp.count("split copies dropped")
			msgs = append(msgs, fmt.Sprintf("split rollback: DropSplitCopy of shard %d on %s: %v", s, cp.from, err))
		default:
			d.sp.count("split copies not dropped")
			msgs = append(msgs, fmt.Sprintf("split rollback: DropSplitCopy of shard %d on %s: %v (again later)", s, cp.from, err))
		}
	}
	return msgs
}

// rollback rolls shards back into the monolith as the operator would, with
// what p says befalls its first run, and returns what happened and
// whether the shards ended back in the monolith.
func (sp *chaosSplitter) rollback(shards []int, p chaosSplitPlan) ([]string, bool) {
	c := sp.c
	name := fmt.Sprintf("rollback of the split of shards %v", shards)
	var msgs []string
	note := func(format string, args ...any) {
		m := fmt.Sprintf(format, args...)
		c.note("split: %s", m)
		msgs = append(msgs, m)
	}
	p.owner = sp.nextOwner()
	again := chaosSplitPlan{owner: !p.owner}
	c.note("%s begins (plan: %+v)", name, p)
	failed, emptied := false, false
	switch {
	case p.killAfter > 0 || p.killAt != "" || p.pauseAt != "":
		m := c.rollbackProcess(shards, sp.afterLastBatch(), p)
		note("%s", m)
		sp.judgeOwner(p, m)
		failed = !strings.Contains(m, "rollback <nil>") || strings.Contains(m, reshard.ErrMonolithEmptied.Error())
		emptied = strings.Contains(m, reshard.ErrMonolithEmptied.Error())
	default:
		rivals, err := sp.rollbackOnce(shards, p)
		for _, m := range rivals {
			note("%s", m)
		}
		sp.judgeOwner(p, fmt.Sprint(err))
		switch {
		case errors.Is(err, reshard.ErrMonolithEmptied):
			// Refused, nothing changed: the operator waits until every
			// router has loaded the catalog's map since the last batch,
			// and says so (AfterLastBatch), as the guide says.
			note("%s: refused: %v", name, err)
			sp.count("split rollback refused: monolith emptied")
			failed, emptied = true, true
		case errors.Is(err, reshard.ErrRollbackRefused):
			// Refused before it changed anything: the checker judges that.
			note("%s: refused: %v", name, err)
			sp.count("split rollback refused")
			return msgs, false
		case err != nil:
			note("%s: the first run failed: %v", name, err)
			sp.count("split rollback runs failed")
			failed = true
		default:
			note("%s: done", name)
		}
	}
	for try := 0; try < 10; try++ {
		back, err := sp.back(shards)
		if err == nil && back {
			sp.count("split rollbacks done")
			return msgs, true
		}
		if err == nil && failed && p.abort && try == 0 && !emptied {
			// The operator gives up on the roll-back: the shards stay
			// on their targets (or, if it went past the point where the
			// monolith took their writes, it is run again). One time in
			// three the abort is cut short (Ctrl-C) after a random time,
			// wherever it is, and the roll-back is run again.
			var cut time.Duration
			if sp.own.IntN(3) == 0 {
				cut = time.Duration(20+sp.own.IntN(1500)) * time.Millisecond
				sp.count("split rollback abort cut short")
			}
			res, err := sp.abortRollback(cut)
			note("%s: AbortRollback (cut short after %v): %+v, %v", name, cut, res, err)
			sp.count("split rollback aborted")
			if err == nil {
				return msgs, false
			}
		}
		if emptied {
			time.Sleep(time.Until(sp.lastDone.Add(chaosCaughtUp)))
			emptied = false
		}
		if err == nil {
			_, err = sp.rollbackOnce(shards, again)
			sp.judgeOwner(again, fmt.Sprint(err))
			sp.count("split rollback runs again")
			if err == nil {
				note("%s: run again (run %d): done", name, try+2)
				sp.count("split rollbacks done")
				return msgs, true
			}
			note("%s: run again (run %d): %v", name, try+2, err)
			failed = true
			emptied = errors.Is(err, reshard.ErrMonolithEmptied)
		}
		time.Sleep(time.Second)
	}
	note("%s: not done after 10 runs", name)
	return msgs, false
}

// back reports whether the catalog places every shard of shards in the
// monolith's shared tables.
func (sp *chaosSplitter) back(shards []int) (bool, error) {
	final, err := sp.c.loadMap()
	if err != nil {
		return false, err
	}
	for _, s := range shards {
		if !final[s].Shared {
			return false, nil
		}
	}
	return true, nil
}

// rollbackOnce runs RollbackSplit of shards once, as p says (runFaulted),
// a rival aborting the roll-back or running it too.
func (sp *chaosSplitter) rollbackOnce(shards []int, p chaosSplitPlan) ([]string, error) {
	name := fmt.Sprintf("rollback of the split of shards %v", shards)
	return sp.runFaulted(name, p, func(ctx context.Context, cfg reshard.SplitConfig, onStage func(string)) error {
		_, err := reshard.RollbackSplit(ctx, cfg, shards, reshard.RollbackOptions{FenceFor: chaosSplitFenceFor,
			AfterLastBatch: sp.afterLastBatch(), OnStage: func(_ int, stage string) { onStage(stage) }})
		return err
	}, func() string { return sp.rollbackRival(shards, p.rival) })
}

// afterLastBatch is what the operator says of RollbackOptions.AfterLastBatch:
// that every router has loaded the catalog's map since the last batch
// that was split.
func (sp *chaosSplitter) afterLastBatch() bool {
	return time.Since(sp.lastDone) > chaosCaughtUp
}

// rollbackRival is a second operator, with a map loaded from the catalog,
// who aborts the roll-back (AbortRollback) or runs it too, once, while the
// first may have lost its lock. Either must be refused (ErrMoveInProgress)
// while the first holds it; it waits 5s for the lock at most.
func (sp *chaosSplitter) rollbackRival(shards []int, kind string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg, err := sp.c.splitConfig(ctx, sp.c.dbs)
	if err != nil {
		return fmt.Sprintf("rival %s of the rollback of the split of shards %v: %v", kind, shards, err)
	}
	switch kind {
	case "abort":
		var res reshard.RollbackAbortResult
		if res, err = reshard.AbortRollback(ctx, cfg); err == nil {
			return fmt.Sprintf("rival abort of the rollback of the split of shards %v: done (%+v): the split's lock was lost", shards, res)
		}
	default:
		_, err = reshard.RollbackSplit(ctx, cfg, shards, reshard.RollbackOptions{FenceFor: chaosSplitFenceFor, AfterLastBatch: sp.afterLastBatch()})
	}
	if err != nil {
		return fmt.Sprintf("rival %s of the rollback of the split of shards %v: %v", kind, shards, err)
	}
	return fmt.Sprintf("rival %s of the rollback of the split of shards %v: done (the split's lock was lost)", kind, shards)
}

// abortRollback runs AbortRollback, with a map loaded from the catalog,
// its context cancelled after cut unless cut is 0.
func (sp *chaosSplitter) abortRollback(cut time.Duration) (reshard.RollbackAbortResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if cut > 0 {
		stop := time.AfterFunc(cut, cancel)
		defer stop.Stop()
	}
	cfg, err := sp.c.splitConfig(ctx, sp.c.dbs)
	if err != nil {
		return reshard.RollbackAbortResult{}, err
	}
	return reshard.AbortRollback(ctx, cfg)
}
