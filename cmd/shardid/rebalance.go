package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"github.com/spf13/cobra"
	"gorm.io/gorm"
)

func newRebalanceCmd(s *streams) *cobra.Command {
	var f rebalanceFlagSet
	cmd := &cobra.Command{
		Use:   "rebalance --catalog DSN [--by bytes|rows] [--drain NAMES | --fill NAMES] [--save-plan FILE | --plan FILE] [--apply [--drop-copies]] [flags]",
		Short: "plan (and --apply) the moves that even out the databases",
		Long: "rebalance measures every logical shard of the catalog (shardid catalog init) and plans the moves\n" +
			"that even out the databases, or that empty some (--drain) or fill new ones (--fill). It prints\n" +
			"the plan and changes nothing, unless --apply, which makes the moves one by one as shardid move does.",
		Example: "  shardid rebalance --catalog \"$CATALOG\" --fill pg3 --save-plan plan.json\n  shardid rebalance --catalog \"$CATALOG\" --plan plan.json --apply",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			return runRebalance(s, &f, cmd.Flags().Changed)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.catalogDSN, "catalog", "", "the `DSN` of the catalog database (PostgreSQL, or MySQL with user@tcp(...)/db) (required)")
	fs.StringVar(&f.table, "catalog-table", "", "the catalog table `T` (default shardid_shard_map)")
	fs.StringVar(&f.by, "by", "bytes", "what to even out: bytes or rows")
	fs.BoolVar(&f.exact, "exact", false, "count rows exactly (reads every table) instead of the databases' estimates")
	intFlag(fs, &f.maxMoves, "max-moves", 0, "at most this many moves (0: no cap)")
	f.tolerance = 0.05
	fs.Var(floatValue{&f.tolerance}, "tolerance", "how uneven the databases may stay, as a fraction of the mean (0 to 1)")
	fs.StringVar(&f.drain, "drain", "", "comma-separated databases to empty (all their shards move away, none moves onto them)")
	fs.StringVar(&f.fill, "fill", "", "comma-separated databases that are the only ones shards move onto (a new, empty database)")
	fs.StringVar(&f.planIn, "plan", "", "carry out (with --apply) or print the plan saved in this JSON file, instead of planning")
	fs.StringVar(&f.planOut, "save-plan", "", "save the plan to this JSON file, to review it and --apply exactly it later")
	fs.BoolVar(&f.apply, "apply", false, "carry the plan out, move by move (without it: print the plan and change nothing)")
	intFlag(fs, &f.batch, "batch", 5000, "rows per copy statement (with --apply)")
	fs.DurationVar(&f.fenceFor, "fence-for", time.Minute, "how long a source stays fenced if a move dies (with --apply)")
	fs.BoolVar(&f.dropCopies, "drop-copies", false, "drop each moved shard's old copy, --drop-delay after its move (with --apply)")
	fs.DurationVar(&f.dropDelay, "drop-delay", 10*time.Second, "how long routers get to follow the new map before an old copy is dropped (with --drop-copies)")
	completeWords(cmd, "by", "bytes", "rows")
	cmd.MarkFlagFilename("plan", "json")
	cmd.MarkFlagFilename("save-plan", "json")
	return cmd
}

// rebalanceFlagSet holds rebalance's flags.
type rebalanceFlagSet struct {
	catalogDSN, table, by, drain, fill, planIn, planOut string
	exact, apply, dropCopies                            bool
	maxMoves, batch                                     int
	tolerance                                           float64
	fenceFor, dropDelay                                 time.Duration
}

func runRebalance(s *streams, f *rebalanceFlagSet, changed func(string) bool) error {
	stdout := s.out
	catalogDSN, table, by, exact, maxMoves, tolerance, drain, fill, planIn, planOut, apply, batch, fenceFor, dropCopies, dropDelay :=
		&f.catalogDSN, &f.table, &f.by, &f.exact, &f.maxMoves, &f.tolerance, &f.drain, &f.fill, &f.planIn, &f.planOut, &f.apply, &f.batch,
		&f.fenceFor, &f.dropCopies, &f.dropDelay
	if *catalogDSN == "" {
		return badFlag("--catalog is required")
	}
	if *planIn != "" {
		for _, f := range []string{"by", "exact", "max-moves", "tolerance", "drain", "fill", "save-plan"} {
			if changed(f) {
				return badFlag("--%s is for making a plan: --plan %s reads one made already", f, *planIn)
			}
		}
	}
	if *by != "bytes" && *by != "rows" {
		return badFlag("--by %q: want bytes or rows", *by)
	}
	if *maxMoves < 0 {
		return badFlag("--max-moves %d: want 0 (no cap) or more", *maxMoves)
	}
	if !(*tolerance > 0 && *tolerance <= 1) { // NaN too
		return badFlag("--tolerance %v: want a fraction above 0, at most 1", *tolerance)
	}
	for _, f := range []string{"batch", "fence-for", "drop-copies", "drop-delay"} {
		if changed(f) && !*apply {
			return badFlag("--%s is for carrying a plan out: give --apply", f)
		}
	}
	if changed("drop-delay") && !*dropCopies {
		return badFlag("--drop-delay is for --drop-copies")
	}
	if *batch < 1 {
		return badFlag("--batch %d: want 1 row or more", *batch)
	}
	if *fenceFor <= 0 {
		return badFlag("--fence-for %v: want a positive duration", *fenceFor)
	}
	if *dropDelay <= 0 {
		return badFlag("--drop-delay %v: want a positive duration", *dropDelay)
	}
	drains, err := nameList("drain", *drain)
	if err != nil {
		return err
	}
	fills, err := nameList("fill", *fill)
	if err != nil {
		return err
	}
	for _, d := range drains {
		if indexOf(fills, d) >= 0 {
			return badFlag("--drain and --fill both name %s", d)
		}
	}
	if *table != "" {
		if err := checkName("catalog-table", *table); err != nil {
			return err
		}
	}

	// Ctrl-C stops the run between two statements: the move under way
	// leaves its shard where it was and drops the copy it was building, and
	// the command can be run again.
	in := onInterrupt(s.err)
	defer in.stop()
	ctx := in.ctx
	cl, err := loadCatalog(ctx, *catalogDSN, *table)
	if err != nil {
		return err
	}
	defer cl.close()
	r, c, setup := cl.r, cl.c, cl.setup
	names := r.Names()
	for _, l := range []struct {
		flag  string
		names []string
	}{{"drain", drains}, {"fill", fills}} {
		for _, n := range l.names {
			if indexOf(names, n) < 0 {
				return fmt.Errorf("--%s %s: the catalog has no database of that name (it has %s)", l.flag, n, strings.Join(names, ", "))
			}
		}
	}
	if setup.SchemaPattern == "" {
		return errors.New("the catalog's setup has no schema pattern: moving shards needs a schema (MySQL: a database) per logical shard")
	}
	var p reshard.Plan
	if *planIn != "" {
		b, err := os.ReadFile(*planIn)
		if err != nil {
			return fmt.Errorf("--plan: %w", err)
		}
		if p, err = reshard.ParsePlan(b); err != nil {
			return fmt.Errorf("--plan %s: not a plan saved by --save-plan: %w", *planIn, err)
		}
		if p.CatalogVersion == 0 {
			return fmt.Errorf("--plan %s: %w: it records no catalog version (saved by an older shardid): make a new plan (--save-plan FILE)", *planIn, reshard.ErrStalePlan)
		}
		if err := p.Check(r.Map(), names); err != nil {
			return fmt.Errorf("--plan %s, made at catalog version %d (the catalog is at version %d): %w (--save-plan FILE, without --plan)",
				*planIn, p.CatalogVersion, cl.version, err)
		}
		if p.CatalogVersion != cl.version {
			fmt.Fprintf(stdout, "the plan was made at catalog version %d; the catalog is at version %d, and its map still fits the plan\n", p.CatalogVersion, cl.version)
		}
	} else {
		sizes, err := reshard.Sizes(ctx, r, reshard.SizeOptions{Tables: setup.Tables, ExactRows: *exact})
		if err != nil {
			return err
		}
		if p, err = reshard.PlanRebalance(sizes, r.Map(), reshard.PlanOptions{By: reshard.Measure(*by), MaxMoves: *maxMoves,
			Tolerance: *tolerance, Drain: drains, Fill: fills, CatalogVersion: cl.version}); err != nil {
			return err
		}
	}
	if *planOut != "" {
		b, err := json.MarshalIndent(p, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*planOut, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--save-plan: %w", err)
		}
	}
	printPlan(stdout, p, cl.version)
	if !*apply {
		if len(p.Moves) > 0 {
			fmt.Fprintln(stdout, "plan only: nothing was changed (run again with --apply to carry it out)")
		}
		return nil
	}
	if len(p.Moves) == 0 {
		return nil
	}
	if len(setup.Tables) == 0 {
		return errors.New("the catalog's setup names no tables to move")
	}
	var total int64
	for _, mv := range p.Moves {
		total += mv.Rows // the first copy; the changes applied after it are not counted
	}
	bar := startProgress(stdout, "moving", total)
	var (
		base    int64                // rows of the moves before the current one
		last    = map[string]int64{} // rows copied per table in the current pass
		current reshard.PlannedMove
		stage   string
	)
	res, err := p.Apply(ctx, r, c, reshard.ApplyOptions{
		Move:       reshard.MoveOptions{Tables: setup.Tables, Batch: *batch, FenceFor: *fenceFor},
		DropCopies: *dropCopies, DropDelay: *dropDelay,
		Progress: func(ev reshard.ApplyProgress) {
			mv := ev.Move
			switch ev.Stage {
			case "started":
				clear(last)
				current, stage = mv, ""
				in.Leaves(leavesHint(*catalogDSN, *table, mv.Shard, mv.To))
			case "copying":
				last[ev.Table] = ev.Copied
				var done int64
				for _, n := range last {
					done += n
				}
				bar.Set(base + min(done, mv.Rows))
			case "sealed":
				in.Hold(fmt.Sprintf("shard %d is fenced for good on %s: flipping the catalog to %s first", mv.Shard, mv.From, mv.To))
			case "flipped":
				in.Release()
			case "skipped":
				base += mv.Rows
				bar.Set(base)
				bar.Printf("move %d/%d: shard %d is on %s already: skipped\n", ev.Step, ev.Steps, mv.Shard, mv.To)
			case "moved":
				base += mv.Rows
				bar.Set(base)
				bar.Printf("move %d/%d: shard %d %s -> %s done, writes fenced for %v\n", ev.Step, ev.Steps, mv.Shard, mv.From, mv.To,
					ev.Fenced.Round(time.Millisecond))
			case "failed":
				in.Release()
				switch {
				case errors.Is(ev.Err, reshard.ErrCatalogConflict), errors.Is(ev.Err, reshard.ErrStalePlan):
					bar.Printf("move %d/%d: shard %d %s -> %s not made: the shard is no longer on %s\n", ev.Step, ev.Steps, mv.Shard, mv.From, mv.To, mv.From)
				case stage == "sealed":
					bar.Printf("move %d/%d: shard %d %s -> %s failed after %s was fenced for good: run the same command again to finish it\n",
						ev.Step, ev.Steps, mv.Shard, mv.From, mv.To, mv.From)
				default:
					bar.Printf("move %d/%d: shard %d %s -> %s failed; it stays on %s\n", ev.Step, ev.Steps, mv.Shard, mv.From, mv.To, mv.From)
				}
			case "dropped":
				bar.Printf("dropped the old copy of shard %d on %s\n", mv.Shard, mv.From)
			}
			switch ev.Stage {
			case "created", "copied", "fenced", "verified", "sealed", "flipped":
				stage = ev.Stage
				stageHook(ev.Stage, in)
			}
		}})
	bar.Finish()
	if err != nil {
		// A move stopped before its source was fenced for good leaves the
		// copy it was building on its target: drop it.
		if current.To != "" && stage != "sealed" && stage != "flipped" {
			cleanUp(ctx, stdout, r, current.Shard, current.To, stage != "")
		}
		switch {
		case errors.Is(err, reshard.ErrCatalogConflict), errors.Is(err, reshard.ErrStalePlan):
			return fmt.Errorf("%w\nthe moves done stay done; the map changed since the plan was made: make a new plan (--save-plan FILE, without --plan)", err)
		case in.Interrupted():
			return fmt.Errorf("%w\ninterrupted: the moves done stay done; run the same command again to go on (it skips them)", err)
		}
		return fmt.Errorf("%w\nthe moves done stay done; run the same command again to go on (it skips them)", err)
	}
	fmt.Fprintf(stdout, "rebalanced: %d moved, %d found done already", len(res.Moved), len(res.Skipped))
	if *dropCopies {
		fmt.Fprintf(stdout, ", %d old copies dropped\n", len(res.Dropped))
	} else {
		fmt.Fprintln(stdout, "\nthe old copies stay, fenced for good: drop them once every router follows the catalog (--drop-copies, or shardid move --shard N --drop-copy-on NAME)")
	}
	return nil
}

// nameList splits a comma-separated list of database names.
func nameList(flagName, v string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	var out []string
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			return nil, badFlag("--%s %q: an empty database name", flagName, v)
		}
		if indexOf(out, n) >= 0 {
			return nil, badFlag("--%s %q: %s is named twice", flagName, v, n)
		}
		out = append(out, n)
	}
	return out, nil
}

// printPlan prints the moves of p and the load of every database before and
// after them.
func printPlan(w io.Writer, p reshard.Plan, version int64) {
	tolerance := p.Tolerance
	rows := "rows (estimated)"
	if p.ExactRows {
		rows = "rows"
	}
	fmt.Fprintf(w, "rebalancing by %s, catalog version %d: %d moves\n", p.By, version, len(p.Moves))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(p.Moves) > 0 {
		fmt.Fprintln(tw, "shard\tfrom\tto\tbytes\trows\t")
		for _, mv := range p.Moves {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t\n", mv.Shard, mv.From, mv.To, humanBytes(mv.Bytes), mv.Rows)
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	fmt.Fprintf(tw, "database\tshards\tbytes\t%s\t\tshards after\tbytes after\trows after\t\n", rows)
	for d := range p.Before {
		b, a := p.Before[d], p.After[d]
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t->\t%d\t%s\t%d\t\n", b.Database, b.Shards, humanBytes(b.Bytes), b.Rows, a.Shards, humanBytes(a.Bytes), a.Rows)
	}
	tw.Flush()
	if p.Balanced {
		fmt.Fprintf(w, "balanced: within %g%% of the mean %s after the moves\n", tolerance*100, p.By)
	} else {
		fmt.Fprintf(w, "not balanced within %g%% after the moves (capped by --max-moves, or shards too large to move without overshooting)\n", tolerance*100)
	}
}

// humanBytes formats n in binary units: 512 B, 1.5 KiB, 20.0 MiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// catalogRouter is a router built from a catalog's setup, with its map.
type catalogRouter struct {
	r       *shardid.Router
	c       *reshard.Catalog
	setup   reshard.CatalogSetup
	version int64
	dbs     []*gorm.DB
}

func (cr *catalogRouter) close() {
	for _, db := range cr.dbs {
		closeGorm(db)
	}
}

// loadCatalog opens the catalog at dsn, the databases its setup names, and
// a router over them with the catalog's map. It changes nothing.
func loadCatalog(ctx context.Context, dsn, table string) (*catalogRouter, error) {
	catDB, err := openDSN(dialectOf(dsn), dsn)
	if err != nil {
		return nil, fmt.Errorf("--catalog: %w", err)
	}
	cr := &catalogRouter{dbs: []*gorm.DB{catDB}}
	fail := func(err error) (*catalogRouter, error) { cr.close(); return nil, err }
	// Loading a catalog creates its tables when they are missing: look
	// first, so that no run of the command creates them.
	if err := catalogExists(ctx, catDB, table); err != nil {
		return fail(err)
	}
	cr.c = &reshard.Catalog{DB: catDB, Table: table}
	if cr.setup, err = cr.c.LoadSetup(ctx); err != nil {
		return fail(err)
	}
	var dbs []*gorm.DB
	var names []string
	for _, d := range cr.setup.Databases {
		db, err := openDSN(d.Dialect, d.DSN)
		if err != nil {
			return fail(fmt.Errorf("database %s: %w", d.Name, err))
		}
		cr.dbs = append(cr.dbs, db)
		dbs, names = append(dbs, db), append(names, d.Name)
	}
	if cr.r, err = shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: names,
		LogicalShards: cr.setup.LogicalShards, SchemaPattern: cr.setup.SchemaPattern}); err != nil {
		return fail(fmt.Errorf("the catalog's setup: %w", err))
	}
	m, version, err := cr.c.Load(ctx, cr.r)
	if err != nil {
		return fail(err)
	}
	if err := cr.r.SetMap(m); err != nil {
		return fail(err)
	}
	// Two names for one database would count its shards twice, and a move
	// between them would delete the shard.
	if err := reshard.CheckDatabases(ctx, cr.r); err != nil {
		return fail(err)
	}
	cr.version = version
	return cr, nil
}
