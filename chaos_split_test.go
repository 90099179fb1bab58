package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardmap"
)

// The splits of the fault test. The monolith (chaosMono) holds shards
// 8-15 in its own tables at first; the fault "split" runs a batch of the
// operator's plan (PlanSplit, made at the first split), which takes the
// batch's shards into their schemas on pg1 and pg2 while the writers
// write to every shard, with one of these, from the seed:
//
//   - nothing: the batch runs (RunSplit of the plan's batch);
//   - killed: the batch's first run is a splitter process, killed after a
//     random time, or that dies at a stage (no clean-up at all);
//   - paused: the splitter process stops (SIGSTOP) at a stage for up to
//     8s, longer than its fence (chaosSplitFenceFor) at times, then goes on;
//   - stopped: the splitter process stops (SIGSTOP) after a random time,
//     wherever it is (between a check of its lock and the write after
//     it, at times); meanwhile every session of it is ended (a reaper, a
//     network reset) and a second operator runs the batch to the end,
//     while the writers write to its shards' new home; then it goes on;
//   - lock: the first run loses its split lock at a stage (created to
//     sealed): the server ends the lock's session (terminate), or the run
//     is slow there on connections with idle_session_timeout (idle); a
//     second operator, who loaded the catalog, then aborts the split
//     (AbortSplit) or runs the batch too, while the first waits for it (or
//     not);
//   - cancel: the first run's context is cancelled at a stage (Ctrl-C).
//
// The operator does what the guide says (docs/resharding.md, "Stop,
// resume, abort"): a batch that failed is run again (RunSplit of the same
// plan) until it is done; or, one time in four, aborted (AbortSplit), and
// run again at a later split. The split shards' rows stay in the
// monolith, sealed, until the plan's last batch empties it (its tables
// then refuse every write); once the writers have stopped, the operator
// runs CleanSplit, which finishes a clean-up that failed (and does nothing
// while a shard is left in the monolith). The faults that hit every
// server (restart, freeze) hit the monolith (pg1's server) and the targets
// meanwhile. The checker judges a split shard as it judges a moved one: every
// acknowledged write on the database the catalog names, exactly once;
// nothing written on a copy it does not name (the monolith's rows of a
// split shard, a failed batch's copies); at the end, every shard's home
// takes writes (probeWrites).

// chaosSplitFenceFor is how long a split batch's rows in the monolith stay
// fenced when its mover dies before their seal.
const chaosSplitFenceFor = 5 * time.Second

// chaosSplitTail is the end of the faults, in which no split begins: a
// batch, run again after its faults, takes seconds, which the test would
// wait for at its end.
const chaosSplitTail = 15 * time.Second

// chaosSplitTables are the monolith's sharded tables, as the split
// declares them.
var chaosSplitTables = []reshard.SplitTable{
	{Name: "chaos_as", Key: "user_id"},
	{Name: "chaos_bs", Key: "user_id"},
	{Name: "chaos_cs", Parent: "chaos_as", Via: "a_id"},
}

// chaosSplitStages are the stages of a split batch, in order.
var chaosSplitStages = []string{"created", "copied", "fenced", "verified", "sealed", "flipped"}

// chaosSplitPlan is what the driver chose for a split, from the seed.
type chaosSplitPlan struct {
	killAfter time.Duration // the first run is a splitter process, killed after this long
	stopAfter time.Duration // ... or stopped after this long, its sessions ended, while a rival runs the batch
	killAt    string        // ... or that dies at this stage
	pauseAt   string        // ... or that stops (SIGSTOP) at this stage
	pause     time.Duration // for this long
	// reaped: the paused process's sessions are ended by their server once
	// idle in a transaction for 1s (idle_in_transaction_session_timeout),
	// its move lock's among them, as a DBA's reaper would.
	reaped    bool
	lose      string        // "terminate" or "idle": how the first run loses its lock ("": it does not)
	loseAt    string        // the stage at which it loses it
	rival     string        // what a second operator then does: "abort" or "run"
	rivalWait time.Duration // how long the first run waits for the rival (0: until it is done)
	cancelAt  string        // the first run's context is cancelled at this stage
	abort     bool          // after a failed first run, the operator aborts the batch
	edited    bool          // before it, the batch is run with split.json edited (chosen for splits only)
	// owner: the run is the tables' owner's (chaosOwner), not a
	// superuser's. Every other split and roll-back is, from its first
	// run, faults and all; the runs again after it are the other role's.
	owner bool
}

// chooseSplit picks, from rng, what befalls a split, and counts it.
func chooseSplit(rng *rand.Rand, counts map[string]int) chaosSplitPlan {
	p := chooseSplitFault(rng, counts, "split", chaosSplitStages)
	if rng.IntN(4) == 0 {
		p.edited = true
		counts["split config edited"]++
	}
	return p
}

// edited runs the batch of plan as an operator who edited split.json
// would, in turn (from their count, not a draw of the seed's): chaos_bs
// keyed by its id, not its user_id; another CatalogTable, whose map no
// router follows; another SchemaPattern, under which the shards split so
// far are not found. While a batch of the monolith is split, every step
// must refuse it (ErrTablesChanged) and change nothing (the checker then
// finds every write where it belongs), an abort too for the catalog and
// the pattern (it would lift, and drop, by another catalog's placements
// or other schemas), and no other catalog's table may be created;
// anything else is reported to fail. Before that, nothing is run: a
// first run's configuration is the operator's to choose.
func (sp *chaosSplitter) edited(plan *reshard.SplitPlan, fail func(kind, msg string)) string {
	final, err := sp.c.loadMap()
	if err != nil {
		return fmt.Sprintf("split with split.json edited: skipped: %v", err)
	}
	if !slices.ContainsFunc(final[8:16], func(p shardmap.Placement) bool { return !p.Shared }) {
		return "split with split.json edited: skipped, no shard is split"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := sp.c.splitConfig(ctx, sp.c.dbs)
	if err != nil {
		return fmt.Sprintf("split with split.json edited: skipped: %v", err)
	}
	const otherCatalog = "chaos_other_map"
	field := []string{"Tables", "CatalogTable", "SchemaPattern"}[sp.edits%3]
	sp.edits++
	switch field {
	case "Tables":
		cfg.Tables = slices.Clone(cfg.Tables)
		cfg.Tables[1].Key = "id"
	case "CatalogTable":
		cfg.Catalog = &reshard.Catalog{DB: cfg.Catalog.DB, Table: otherCatalog}
	case "SchemaPattern":
		var assign, shared []int
		for s, p := range final {
			assign = append(assign, p.DB)
			if p.Shared {
				shared = append(shared, s)
			}
		}
		m, err := shardmap.New(shardmap.Config{Databases: chaosNames, LogicalShards: chaosShards, SchemaPattern: "chaosx_%04d", Assign: assign, Shared: shared})
		if err != nil {
			return fmt.Sprintf("split with split.json edited (%s): skipped: %v", field, err)
		}
		cfg.Map = m
	}
	shards := plan.Batches[0]
	to := make([]string, len(shards))
	for i, s := range shards {
		to[i] = plan.To[s]
	}
	_, err = reshard.SplitShards(ctx, cfg, shards, to, reshard.SplitOptions{FenceFor: chaosSplitFenceFor})
	_, cerr := reshard.CleanSplit(ctx, cfg)
	aerr := reshard.ErrTablesChanged // not asked of an edit of Tables: an abort does not follow them
	var ares reshard.AbortResult
	if field != "Tables" {
		ares, aerr = reshard.AbortSplit(ctx, cfg)
	}
	msg := fmt.Sprintf("split of shards %v with split.json edited (%s): %v; CleanSplit: %v; AbortSplit: %v", shards, field, err, cerr, aerr)
	var made int64
	if field == "CatalogTable" {
		if qerr := cfg.Catalog.DB.WithContext(ctx).Raw("SELECT count(*) FROM information_schema.tables WHERE table_name LIKE ?", otherCatalog+"%").Scan(&made).Error; qerr != nil {
			msg += fmt.Sprintf("; looking for %s: %v", otherCatalog, qerr)
		}
	}
	// A server restarting may stop it before its check: an error that
	// is not a refusal, then, is no violation, but a success is.
	switch {
	case err == nil || cerr == nil || aerr == nil:
		fail("config-edited", msg+fmt.Sprintf(": not refused (abort: %+v)", ares))
	case made > 0:
		fail("config-edited", msg+": a refused step created the catalog "+otherCatalog)
	case errors.Is(err, reshard.ErrTablesChanged) && errors.Is(cerr, reshard.ErrTablesChanged) && errors.Is(aerr, reshard.ErrTablesChanged):
		sp.count("split config edited refused")
	default:
		sp.count("split config edited failed otherwise")
	}
	return msg
}

// chooseSplitFault picks, from rng, what befalls the first run of what (a
// split, a roll-back), whose stages are stages, and counts it under what.
func chooseSplitFault(rng *rand.Rand, counts map[string]int, what string, stages []string) chaosSplitPlan {
	var p chaosSplitPlan
	stage := func(stages []string) string { return stages[rng.IntN(len(stages))] }
	switch rng.IntN(6) {
	case 0:
	case 1:
		if rng.IntN(2) == 0 {
			p.killAfter = time.Duration(200+rng.IntN(4000)) * time.Millisecond
			// A split stopped instead of killed, from the time's parity,
			// not a draw of its own: a seed picks the faults it picked
			// before this choice existed.
			if what == "split" && p.killAfter/time.Millisecond%2 == 1 {
				p.stopAfter, p.killAfter = p.killAfter, 0
				counts[what+" stopped, its sessions ended, a rival ran it"]++
			} else {
				counts[what+" killed"]++
			}
		} else {
			p.killAt = stage(stages)
			counts[what+" killed at "+p.killAt]++
		}
	case 2:
		p.pauseAt = stage(stages)
		p.pause = time.Duration(1000+rng.IntN(7000)) * time.Millisecond
		counts[what+" paused at "+p.pauseAt]++
		// From the pause's parity, not a draw of its own: a seed picks the
		// faults it picked before this choice existed.
		if p.pause/time.Millisecond%2 == 1 {
			p.reaped = true
			counts[what+" paused, idle transactions reaped"]++
		}
	case 3, 4:
		p.lose = []string{"terminate", "idle"}[rng.IntN(2)]
		p.loseAt = stage(stages[:5])
		p.rival = []string{"abort", "run"}[rng.IntN(2)]
		if w := rng.IntN(4); w > 0 {
			p.rivalWait = time.Duration(w) * 500 * time.Millisecond
		}
		counts[what+" lock "+p.lose]++
		counts[what+" rival "+p.rival]++
	case 5:
		p.cancelAt = stage(stages)
		counts[what+" cancelled at "+p.cancelAt]++
	}
	p.abort = rng.IntN(4) == 0
	return p
}

// chaosSplitter is the operator of the splits of one run: the plan, made
// at the first split, and the batch under way. It is not safe for
// concurrent use: one split runs at a time.
type chaosSplitter struct {
	c       *chaosCluster
	batch   int      // shards a batch (from the seed)
	targets []string // the plan's targets, in order (from the seed)
	plan    *reshard.SplitPlan
	count   func(string)
	flipped bool // a batch was found split
	ops     int  // splits and roll-backs begun: even ones begin as chaosOwner
	nexts   int  // plans made by next: every other one holds two batches
	twos    int  // runs of two batches: every other one copies them together
	edits   int  // split.json edited: which field, from their count
	// fail reports a violation: a run as the tables' owner refused for a
	// privilege that the guide does not ask of a mover.
	fail func(kind, msg string)

	// own draws the operator's choices added after the faults' stream was
	// fixed, from the seed in a stream of their own, so that a seed still
	// picks the faults it picked before them.
	own *rand.Rand

	// lastDone is when a batch was last found split: the routers have
	// all loaded the catalog's map since chaosCaughtUp after it.
	lastDone time.Time
}

// config returns the split's configuration over dbs (as chaosNames), on a
// map loaded from the catalog, as the guide says.
func (c *chaosCluster) splitConfig(ctx context.Context, dbs []*gorm.DB) (reshard.SplitConfig, error) {
	m := chaosMap()
	if _, err := c.catalog.LoadMap(ctx, m); err != nil {
		return reshard.SplitConfig{}, fmt.Errorf("loading the catalog: %w", err)
	}
	return reshard.SplitConfig{Map: m, DBs: dbs, Monolith: chaosNames[chaosMono], Tables: chaosSplitTables, Catalog: c.catalog, Layout: chaosLayout}, nil
}

// next returns the plan of the next batch to split: the shards still in
// the monolith of the first batch of the operator's plan that has any (all
// of it, or those a roll-back brought back), as a plan of its own (a step
// of the plan run alone), unless skip says one of them must wait (its old
// copy from a roll-back is not dropped yet). It makes the plan first,
// once. It returns nil when no batch is left to split.
func (sp *chaosSplitter) next(skip func(int) bool) (*reshard.SplitPlan, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	for try := 0; sp.plan == nil && try < 10; try++ {
		var cfg reshard.SplitConfig
		if cfg, err = sp.c.splitConfig(ctx, sp.c.dbs); err == nil {
			sp.plan, err = reshard.PlanSplit(ctx, cfg, sp.targets, sp.batch)
		}
		if errors.Is(err, reshard.ErrSplitRefused) {
			return nil, err // never: the test's monolith can be split
		}
		if err != nil {
			sp.plan = nil
			time.Sleep(time.Second)
		}
	}
	if sp.plan == nil {
		return nil, fmt.Errorf("planning the split: %w", err)
	}
	final, err := sp.c.loadMap()
	for try := 0; err != nil && try < 10; try++ { // a server restarting
		time.Sleep(time.Second)
		final, err = sp.c.loadMap()
	}
	if err != nil {
		return nil, err
	}
	// One batch, or every other time two (from their count, not a draw
	// of the seed's): RunSplit copies them together (CopyTogether) and
	// fences them one by one, or every other such run goes a batch at a
	// time, the first batch creating the second's schemas (runOnce).
	sp.nexts++
	want := 1 + sp.nexts%2
	var one *reshard.SplitPlan
	for _, b := range sp.plan.Batches {
		var shared []int // all of b, or the shards of b that a roll-back brought back
		for _, s := range b {
			if final[s].Shared {
				shared = append(shared, s)
			}
		}
		if len(shared) == 0 || slices.ContainsFunc(shared, skip) {
			continue
		}
		if one == nil {
			p := *sp.plan
			p.Batches, p.To = nil, map[int]string{}
			one = &p
		}
		one.Batches = append(one.Batches, shared)
		for _, s := range shared {
			one.To[s] = sp.plan.To[s]
		}
		if len(one.Batches) == want {
			break
		}
	}
	return one, nil
}

// planShards returns the shards of plan's batches, in order.
func planShards(plan *reshard.SplitPlan) []int {
	var out []int
	for _, b := range plan.Batches {
		out = append(out, b...)
	}
	slices.Sort(out)
	return out
}

// split runs the batch of plan as the operator would, with what p says
// befalls its first run, and returns what happened and whether the batch
// ended split.
func (sp *chaosSplitter) split(plan *reshard.SplitPlan, p chaosSplitPlan) ([]string, bool) {
	c := sp.c
	shards := planShards(plan)
	name := fmt.Sprintf("split of shards %v", shards)
	var msgs []string
	note := func(format string, args ...any) {
		m := fmt.Sprintf(format, args...)
		c.note("split: %s", m)
		msgs = append(msgs, m)
	}
	p.owner = sp.nextOwner()
	again := chaosSplitPlan{owner: !p.owner}
	c.note("split of shards %v begins (plan: %+v)", shards, p)
	failed := false
	switch {
	case p.killAfter > 0 || p.killAt != "" || p.pauseAt != "" || p.stopAfter > 0:
		m := c.splitterProcess(plan, p, func() string { return sp.rivalFor(plan, "run", time.Minute) })
		note("%s", m)
		sp.judgeOwner(p, m)
		// Judged by what the process said: a paused run may have failed
		// too (its fence lapsed, its sessions reaped).
		failed = !strings.Contains(m, "split <nil>")
	default:
		rivals, err := sp.runOnce(plan, p)
		for _, m := range rivals {
			note("%s", m)
		}
		sp.judgeOwner(p, fmt.Sprint(err))
		if err != nil {
			note("%s: the first run failed: %v", name, err)
			sp.count("split runs failed")
			failed = true
		} else {
			note("%s: done", name)
		}
	}
	for try := 0; try < 10; try++ {
		done, err := sp.done(shards)
		if err == nil && done {
			// A run that died after its flip leaves the monolith's rows:
			// the plan run again cleans them up (CleanSplit).
			if failed {
				_, err := sp.runOnce(plan, again)
				sp.judgeOwner(again, fmt.Sprint(err))
				if err != nil {
					note("%s: run again to clean up: %v", name, err)
				}
			}
			sp.count("split batches done")
			sp.lastDone = time.Now()
			sp.flipped = true
			return msgs, true
		}
		if err == nil && failed && p.abort && try == 0 {
			// The operator gives up on the batch for now: the guide's
			// abort, and the batch is run again at a later split.
			res, err := sp.abort()
			note("%s: AbortSplit: %+v, %v", name, res, err)
			sp.count("split aborted")
			if err == nil {
				return msgs, false
			}
		}
		if err == nil {
			_, err = sp.runOnce(plan, again)
			sp.judgeOwner(again, fmt.Sprint(err))
			sp.count("split runs again")
			if err == nil {
				note("%s: run again (run %d): done", name, try+2)
				sp.count("split batches done")
				sp.lastDone = time.Now()
				sp.flipped = true
				return msgs, true
			}
			note("%s: run again (run %d): %v", name, try+2, err)
			failed = true
		}
		time.Sleep(time.Second)
	}
	note("%s: not done after 10 runs", name)
	return msgs, false
}

// done reports whether the catalog places every shard of shards on its
// target (split).
func (sp *chaosSplitter) done(shards []int) (bool, error) {
	final, err := sp.c.loadMap()
	if err != nil {
		return false, err
	}
	for _, s := range shards {
		if final[s].Shared {
			return false, nil
		}
	}
	return true, nil
}

// clean runs CleanSplit, with a map loaded from the catalog, if a batch
// was split, and returns what it did ("" if nothing).
func (sp *chaosSplitter) clean() string {
	if !sp.flipped {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := sp.c.splitConfig(ctx, sp.c.dbs)
	var n int64
	if err == nil {
		n, err = reshard.CleanSplit(ctx, cfg)
	}
	if err != nil {
		sp.count("split clean failed")
		return fmt.Sprintf("split: CleanSplit: %v", err)
	}
	if n > 0 {
		sp.count("split cleaned")
	}
	return fmt.Sprintf("split: CleanSplit: %d rows deleted from the monolith", n)
}

// abort runs AbortSplit, with a map loaded from the catalog.
func (sp *chaosSplitter) abort() (reshard.AbortResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := sp.c.splitConfig(ctx, sp.c.dbs)
	if err != nil {
		return reshard.AbortResult{}, err
	}
	return reshard.AbortSplit(ctx, cfg)
}

// nextOwner reports whether the split or roll-back about to begin begins
// as the tables' owner: every other one does, from their count (not a draw
// of the seed's: a seed picks the faults it picked before this existed).
func (sp *chaosSplitter) nextOwner() bool {
	sp.ops++
	return sp.ops%2 == 0
}

// judgeOwner reports a run as the tables' owner (p.owner) whose outcome
// out (its error, or its process's output) is a privilege refusal: the
// test grants the owner what the guide's "Roles and privileges" asks of a
// mover, so none may be missing, whatever befell the run.
func (sp *chaosSplitter) judgeOwner(p chaosSplitPlan, out string) {
	if !p.owner {
		return
	}
	sp.count("split and rollback runs as the tables' owner")
	// The split's own clean-up, refused by its own trigger (seed 340: a
	// monolith of a part of the shards).
	if strings.Contains(out, "cannot be truncated while its monolith is split") {
		sp.fail("owner-clean-up-refused", "a run as the tables' owner "+chaosOwner+": "+out)
		return
	}
	for _, sign := range []string{"permission denied", "SQLSTATE 42501", "must be owner", reshard.ErrMoverPrivileges.Error()} {
		if strings.Contains(out, sign) {
			sp.fail("owner-privileges", "a run as the tables' owner "+chaosOwner+": "+out)
			return
		}
	}
}

// runOnce runs the plan once (RunSplit), as p says: losing its lock at a
// stage, with a rival, or cancelled at a stage. It returns the run's
// error and what the rival met.
func (sp *chaosSplitter) runOnce(plan *reshard.SplitPlan, p chaosSplitPlan) ([]string, error) {
	name := fmt.Sprintf("split of shards %v", planShards(plan))
	return sp.runFaulted(name, p, func(ctx context.Context, cfg reshard.SplitConfig, onStage func(string)) error {
		// A plan of two batches copies them together every other run;
		// the other runs go a batch at a time, the first creating the
		// second's schemas ahead.
		together := false
		if len(plan.Batches) > 1 {
			sp.twos++
			together = sp.twos%2 == 1
		}
		opts := reshard.SplitOptions{FenceFor: chaosSplitFenceFor, OnStage: onStage, CopyTogether: together}
		return reshard.RunSplit(ctx, cfg, plan, opts, nil)
	}, func() string { return sp.rival(plan, p.rival) })
}

// runFaulted runs run once (name says what it is), as p says: on
// connections with idle_session_timeout if it is to lose its lock so;
// cancelled at p.cancelAt; or, at p.loseAt, its lock lost (its session
// terminated, or idle past the timeout) and rival started, whose report
// it waits for p.rivalWait at most (0: until it is done). It returns
// run's error and what the rival met.
func (sp *chaosSplitter) runFaulted(name string, p chaosSplitPlan, run func(ctx context.Context, cfg reshard.SplitConfig, onStage func(string)) error, rival func() string) ([]string, error) {
	c := sp.c
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dbs := c.dbs
	// The tables' owner's run (its rival, if any, a superuser's).
	owner := p.owner
	if owner {
		c.note("%s: run as the tables' owner %s", name, chaosOwner)
	}
	if p.lose == "idle" || owner {
		var own []*gorm.DB
		for _, dsn := range []string{c.pg1.DSN(), c.pg2.DSN(), c.monoDSN()} {
			if owner {
				dsn = testdb.WithPostgresField(dsn, "user", chaosOwner)
			}
			if p.lose == "idle" {
				dsn += " idle_session_timeout=1000"
			}
			db, err := gorm.Open(postgres.Open(dsn), gormConfig())
			if err != nil {
				return nil, err
			}
			sqlDB, _ := db.DB()
			sqlDB.SetConnMaxIdleTime(300 * time.Millisecond)
			defer sqlDB.Close()
			own = append(own, db)
		}
		dbs = own
	}
	cfg, err := c.splitConfig(ctx, dbs)
	if err != nil {
		return nil, err
	}
	var (
		rivals   []string
		rivalMsg = make(chan string, 1)
		rivalRan bool
	)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	onStage := func(stage string) {
		switch {
		case stage == p.cancelAt:
			c.note("%s: cancelled at %s", name, stage)
			rcancel()
		case stage == p.loseAt && p.lose != "" && !rivalRan:
			rivalRan = true
			switch p.lose {
			case "terminate":
				n := c.terminateLockHolders(chaosMono)
				if n == 0 {
					sp.count("split lock not found")
				}
				c.note("%s at %s: terminated %d sessions holding advisory locks on pg1's server", name, stage, n)
			case "idle":
				time.Sleep(1500 * time.Millisecond)
				c.note("%s at %s: it slept past idle_session_timeout", name, stage)
			}
			go func() { rivalMsg <- rival() }()
			if p.rivalWait == 0 {
				rivals = append(rivals, <-rivalMsg)
				return
			}
			select {
			case m := <-rivalMsg:
				rivals = append(rivals, m)
			case <-time.After(p.rivalWait):
			}
		}
	}
	err = run(rctx, cfg, onStage)
	if rivalRan && len(rivals) == 0 {
		rivals = append(rivals, <-rivalMsg)
	}
	return rivals, err
}

// rival is a second operator, with a map loaded from the catalog, who
// aborts the split (AbortSplit) or runs the batch too, once, while the
// first may have lost its lock. Either must be refused (ErrMoveInProgress)
// while the first holds it; it waits 5s for the lock at most.
func (sp *chaosSplitter) rival(plan *reshard.SplitPlan, kind string) string {
	return sp.rivalFor(plan, kind, 5*time.Second)
}

// rivalFor is rival, given timeout for the whole of it.
func (sp *chaosSplitter) rivalFor(plan *reshard.SplitPlan, kind string, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cfg, err := sp.c.splitConfig(ctx, sp.c.dbs)
	if err != nil {
		return fmt.Sprintf("rival %s of the split of shards %v: %v", kind, planShards(plan), err)
	}
	switch kind {
	case "abort":
		var res reshard.AbortResult
		res, err = reshard.AbortSplit(ctx, cfg)
		if err == nil {
			return fmt.Sprintf("rival abort of the split of shards %v: done (%+v): the split's lock was lost", planShards(plan), res)
		}
	default:
		err = reshard.RunSplit(ctx, cfg, plan, reshard.SplitOptions{FenceFor: chaosSplitFenceFor}, nil)
	}
	if err != nil {
		return fmt.Sprintf("rival %s of the split of shards %v: %v", kind, planShards(plan), err)
	}
	return fmt.Sprintf("rival %s of the split of shards %v: done (the split's lock was lost)", kind, planShards(plan))
}
