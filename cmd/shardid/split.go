package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardmap"
	"github.com/spf13/cobra"
	"gorm.io/gorm"
)

// splitSynopsis is the split command's synopsis.
const splitSynopsis = "(legacy --adopted TIME | plan [--to NAMES] [--batch N] [--out FILE] | run --plan FILE [--fence-for D] [--copy-together] | status | abort | clean |\n" +
	"  rollback --shards LIST [--fence-for D] [--after-last-batch] | drop-copies --shards LIST) --config FILE"

// splitFile is the split command's configuration: the databases (the
// monolith and the targets), the map's shape, and which tables are
// sharded by what. DSNs may hold ${NAME} placeholders, replaced by the
// environment's variables.
type splitFile struct {
	Databases     []reshard.CatalogDatabase
	Monolith      string
	LogicalShards int
	SchemaPattern string
	Tables        []reshard.SplitTable
	Global        []string
	// CatalogTable is the catalog's table on the monolith (default
	// shardid_shard_map).
	CatalogTable string `json:",omitempty"`
	// Layout names the layout the plugin issues IDs in (instagram, ...),
	// and Epoch its epoch if not the layout's: the split then checks
	// that every row's ID finds it in its shard, against the legacy IDs
	// the catalog keeps (reshard.SplitConfig.Layout).
	Layout string `json:",omitempty"`
	Epoch  string `json:",omitempty"`
}

// newSplitCmd is the split command: shardid split ACTION --config FILE ...
func newSplitCmd(s *streams) *cobra.Command {
	var f splitFlags
	cmd := &cobra.Command{
		Use:   "split (legacy|plan|run|status|abort|clean|rollback|drop-copies) --config FILE [flags]",
		Short: "split a monolith into logical shards on other databases, online",
		Long: "split distributes the sharded tables of a database from before the shards (a monolith) into\n" +
			"logical shards on other databases while the application writes through the router: legacy records\n" +
			"where each row whose ID is older than shardid belongs, so that its ID still finds it, plan checks\n" +
			"what would move and writes a plan file, run carries it out a batch at a time (run it again to\n" +
			"resume), status tells where it is, abort lifts an unfinished batch's fence and drops its copies\n" +
			"(and undoes a roll-back stopped before the monolith took its writes), clean empties the\n" +
			"monolith's sharded tables once every shard is split (MySQL: run it once every process follows\n" +
			"the catalog; PostgreSQL: the last batch does it), rollback returns split shards to the\n" +
			"monolith (run it again to resume), drop-copies drops the old copies a roll-back left.",
		Example: "  shardid split legacy --config split.json --adopted 2026-11-20T00:00:00Z\n" +
			"  shardid split plan --config split.json --batch 100 --out split-plan.json\n" +
			"  shardid split run --config split.json --plan split-plan.json\n  shardid split status --config split.json\n" +
			"  shardid split rollback --config split.json --shards all",
		ValidArgs: []cobra.Completion{"legacy", "plan", "run", "status", "abort", "clean", "rollback", "drop-copies"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || !slices.Contains([]string{"legacy", "plan", "run", "status", "abort", "clean", "rollback", "drop-copies"}, args[0]) {
				return badFlag("give one action: legacy, plan, run, status, abort, clean, rollback or drop-copies (shardid split %s)", splitSynopsis)
			}
			return runSplit(s, args[0], &f, cmd.Flags().Changed)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.config, "config", "", "the split's configuration `FILE` (JSON: Databases, Monolith, LogicalShards, SchemaPattern, Tables, Global, Layout) (required)")
	fs.StringVar(&f.adopted, "adopted", "", "legacy: when the plugin began issuing IDs, an RFC 3339 `TIME` (earlier is safe, later is not) (required)")
	fs.StringVar(&f.to, "to", "", "plan: the target databases, comma-separated (default: every database but the monolith)")
	intFlag(fs, &f.batch, "batch", 100, "plan: logical shards per step")
	fs.StringVar(&f.out, "out", "split-plan.json", "plan: where to write the plan")
	fs.StringVar(&f.plan, "plan", "", "run: the plan `FILE` that plan wrote (required)")
	fs.DurationVar(&f.fenceFor, "fence-for", time.Minute, "run, rollback: how long a batch's rows (a shard's schema) stay fenced if the mover dies")
	fs.StringVar(&f.shards, "shards", "", "rollback, drop-copies: the logical shards, a `LIST` such as 0-15,20, or all (required)")
	fs.BoolVar(&f.together, "copy-together", false, "run: copy the batches left together, one read of each monolith table, then fence them one by one (PostgreSQL; for a monolith larger than memory with few writes)")
	fs.BoolVar(&f.afterLast, "after-last-batch", false, "rollback: let writes into a monolith the last batch emptied (PostgreSQL; MySQL needs no flag), once every router has loaded the catalog's map since")
	return cmd
}

// splitFlags holds split's flags.
type splitFlags struct {
	config, to, out, plan string
	adopted               string
	shards                string
	batch                 int
	fenceFor              time.Duration
	afterLast             bool
	together              bool
}

// runSplit runs split's action with flags f; changed tells which flags the
// command line gave.
func runSplit(ios *streams, action string, f *splitFlags, changed func(string) bool) error {
	stdout, stderr := ios.out, ios.err
	config, to, batch, out, planFile, fenceFor := &f.config, &f.to, &f.batch, &f.out, &f.plan, &f.fenceFor
	if *config == "" {
		return badFlag("--config is required")
	}
	for _, name := range []string{"to", "batch", "out"} {
		if changed(name) && action != "plan" {
			return badFlag("--%s is for plan", name)
		}
	}
	if changed("adopted") != (action == "legacy") {
		if changed("adopted") {
			return badFlag("--adopted is for legacy")
		}
		if action == "legacy" {
			return badFlag("legacy needs --adopted: when the plugin began issuing IDs (RFC 3339)")
		}
	}
	var adopted time.Time
	if action == "legacy" {
		var err error
		if adopted, err = time.Parse(time.RFC3339Nano, f.adopted); err != nil {
			return badFlag("--adopted %q: want an RFC 3339 time, such as 2026-11-20T00:00:00Z", f.adopted)
		}
	}
	if changed("plan") && action != "run" {
		return badFlag("--plan is for run")
	}
	if changed("after-last-batch") && action != "rollback" {
		return badFlag("--after-last-batch is for rollback")
	}
	if changed("copy-together") && action != "run" {
		return badFlag("--copy-together is for run")
	}
	if changed("fence-for") && action != "run" && action != "rollback" {
		return badFlag("--fence-for is for run and rollback")
	}
	if changed("shards") != (action == "rollback" || action == "drop-copies") {
		if changed("shards") {
			return badFlag("--shards is for rollback and drop-copies")
		}
		return badFlag("%s needs --shards: the logical shards, as 0-15,20 or all", action)
	}
	if action == "run" && *planFile == "" {
		return badFlag("run needs --plan, the file plan wrote")
	}
	if *batch < 1 {
		return badFlag("--batch %d: want 1 shard or more", *batch)
	}
	if *fenceFor <= 0 {
		return badFlag("--fence-for %v: want a positive duration", *fenceFor)
	}
	in := onInterrupt(stderr)
	defer in.stop()
	ctx := in.ctx
	env, err := openSplit(ctx, *config)
	if err != nil {
		return err
	}
	defer env.close()
	switch action {
	case "legacy":
		return splitLegacy(ctx, stdout, env, adopted)
	case "plan":
		targets := slices.DeleteFunc(env.cfg.Map.Databases(), func(n string) bool { return n == env.cfg.Monolith })
		if *to != "" {
			if targets, err = nameList("to", *to); err != nil {
				return err
			}
		}
		return splitPlan(ctx, stdout, env, targets, *batch, *out, *config)
	case "run":
		data, err := os.ReadFile(*planFile)
		if err != nil {
			return fmt.Errorf("--plan: %w", err)
		}
		plan, err := reshard.ParseSplitPlan(data)
		if err != nil {
			return fmt.Errorf("--plan %s: %w", *planFile, err)
		}
		in.Leaves("A batch stopped at once may leave its rows fenced on the monolith until --fence-for runs out, or, once it is sealed there, until the plan runs again; run \"shardid split status --config " + *config + "\", then run the plan again or abort.")
		return splitRun(ctx, stdout, env, in, plan, *fenceFor, f.together)
	case "status":
		return splitStatus(ctx, stdout, env)
	case "rollback", "drop-copies":
		shards, err := shardList(f.shards, env.cfg.Map.LogicalShards())
		if err != nil {
			return err
		}
		if action == "drop-copies" {
			return splitDropCopies(ctx, stdout, env, shards)
		}
		return splitRollback(ctx, stdout, env, in, shards, *fenceFor, f.afterLast, *config, f.shards)
	case "clean":
		n, err := reshard.CleanSplit(ctx, env.cfg)
		if err != nil {
			return err
		}
		st, err := reshard.ReadSplitStatus(ctx, env.cfg)
		if err != nil {
			return err
		}
		if st.Shared > 0 {
			fmt.Fprintf(stdout, "%d shard(s) still in %s: its split rows stay there, sealed, until every shard is split\n", st.Shared, env.cfg.Monolith)
			return nil
		}
		fmt.Fprintf(stdout, "%s cleaned: %d split row(s) deleted\n", env.cfg.Monolith, n)
		return nil
	default:
		res, err := reshard.AbortSplit(ctx, env.cfg)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "aborted: %d shard(s) take writes on %s again %s, %d copy(ies) dropped from the targets %s\n",
			len(res.Unfenced), env.cfg.Monolith, shardRange(res.Unfenced), len(res.Dropped), shardRange(res.Dropped))
		return abortRollback(ctx, stdout, env)
	}
}

// splitEnv is an opened split configuration.
type splitEnv struct {
	cfg      reshard.SplitConfig
	dbs      []*gorm.DB
	version  int64
	noMap    bool // the catalog holds no map yet: cfg.Map is the monolith's, all shared
	catTable string
}

func (e *splitEnv) close() {
	for _, db := range e.dbs {
		closeGorm(db)
	}
}

// openSplit reads the configuration, opens its databases and loads the
// catalog's map (or, when the catalog holds none, the monolith's: every
// shard shared on it).
func openSplit(ctx context.Context, path string) (*splitEnv, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var f splitFile
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	e := &splitEnv{catTable: f.CatalogTable}
	var layout shardid.Layout
	if f.Layout != "" || f.Epoch != "" {
		if f.Layout == "" {
			return nil, fmt.Errorf("--config %s: an Epoch without a Layout", path)
		}
		if layout, err = layoutFor(f.Layout, f.Epoch); err != nil {
			return nil, fmt.Errorf("--config %s: %w", path, err)
		}
	}
	var names []string
	for _, d := range f.Databases {
		var missing string
		dsn := os.Expand(d.DSN, func(k string) string {
			v, ok := os.LookupEnv(k)
			if !ok {
				missing = k
			}
			return v
		})
		if missing != "" {
			return nil, fmt.Errorf("--config: database %s: the DSN's variable %s is not set", d.Name, missing)
		}
		db, err := openDSN(d.Dialect, dsn)
		if err != nil {
			e.close()
			return nil, fmt.Errorf("database %s: %w", d.Name, err)
		}
		e.dbs, names = append(e.dbs, db), append(names, d.Name)
	}
	mono := slices.Index(names, f.Monolith)
	if mono < 0 {
		e.close()
		return nil, fmt.Errorf("--config: the monolith %q is not one of the databases %q", f.Monolith, names)
	}
	shards := f.LogicalShards
	if shards == 0 {
		shards = shardmap.DefaultLogicalShards
	}
	m, err := shardmap.New(shardmap.Config{Databases: names, LogicalShards: shards, SchemaPattern: f.SchemaPattern,
		Assign: slices.Repeat([]int{mono}, shards), Shared: allShardNumbers(shards)})
	if err != nil {
		e.close()
		return nil, fmt.Errorf("--config: %w", err)
	}
	cat := &reshard.Catalog{DB: e.dbs[mono], Table: f.CatalogTable}
	if err := catalogExists(ctx, cat.DB, f.CatalogTable); err == nil {
		if e.version, err = cat.LoadMap(ctx, m); err != nil {
			e.close()
			return nil, err
		}
	} else {
		e.noMap = true
	}
	e.cfg = reshard.SplitConfig{Map: m, DBs: e.dbs, Monolith: f.Monolith, Tables: f.Tables, Global: f.Global, Catalog: cat, Layout: layout}
	return e, nil
}

func allShardNumbers(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// splitPlan makes the plan, prints it and writes it to out.
func splitPlan(ctx context.Context, w io.Writer, env *splitEnv, targets []string, batch int, out, config string) error {
	p, err := reshard.PlanSplit(ctx, env.cfg, targets, batch)
	if p == nil {
		return err
	}
	fmt.Fprintf(w, "split of %s (schema %s) into %d logical shards (%s) on %s\n", p.Monolith, p.Schema, p.LogicalShards, p.SchemaPattern, strings.Join(targets, ", "))
	if env.noMap {
		fmt.Fprintln(w, "the catalog holds no map yet: every shard is in the monolith (run saves that map first)")
	}
	fmt.Fprintf(w, "%d shard(s) to split in %d batch(es) of up to %d; %d split already\n", len(p.To), len(p.Batches), batch, p.LogicalShards-len(p.To))
	var total int64
	fmt.Fprintf(w, "\n  %-24s %12s\n", "table", "rows")
	for _, t := range p.Tables {
		how := "by " + t.Key
		if t.Parent != "" {
			how = "by its " + t.Parent + " (" + t.Via + ")"
		}
		fmt.Fprintf(w, "  %-24s %12d  %s\n", t.Name, p.Rows[t.Name], how)
		total += p.Rows[t.Name]
	}
	for _, g := range p.Global {
		fmt.Fprintf(w, "  %-24s %12s  global: stays on %s\n", g, "-", p.Monolith)
	}
	fmt.Fprintf(w, "\n  %-24s %8s %12s\n", "database", "shards", "rows")
	for _, t := range targets {
		n := 0
		for _, d := range p.To {
			if d == t {
				n++
			}
		}
		fmt.Fprintf(w, "  %-24s %8d %12d\n", t, n, p.RowsPerDB[t])
	}
	if len(p.ShardRows) > 0 {
		lo, hi := int64(-1), int64(0)
		for s := range p.To {
			n := p.ShardRows[s]
			if lo < 0 || n < lo {
				lo = n
			}
			hi = max(hi, n)
		}
		fmt.Fprintf(w, "\nrows per shard: min %d, max %d, mean %d\n", lo, hi, total/int64(len(p.To)))
	}
	est := p.Estimate.Round(time.Second)
	if p.Estimate < 10*time.Second {
		est = p.Estimate.Round(100 * time.Millisecond)
	}
	fmt.Fprintf(w, "estimated time: %v (%d rows at %d rows/s, %v per shard's schema)\n", est, total, p.RowsPerSecond, p.PerShard)
	if len(p.Warnings) > 0 {
		fmt.Fprintf(w, "\nWARNING: the plan runs, but (%d warning(s)):\n", len(p.Warnings))
		for _, x := range p.Warnings {
			fmt.Fprintf(w, "  %-18s %s: %s\n", x.Kind, x.Database, x.Detail)
		}
	}
	if len(p.Refusals) > 0 {
		fmt.Fprintf(w, "\nREFUSED: the monolith cannot be split safely (%d problem(s)):\n", len(p.Refusals))
		for _, r := range p.Refusals {
			fmt.Fprintf(w, "  %-18s %s: %s", r.Kind, r.Table, r.Detail)
			if len(r.IDs) > 0 {
				fmt.Fprintf(w, " (ids %s)", joinInts(r.IDs))
			}
			fmt.Fprintln(w)
		}
		return errReported
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	fmt.Fprintf(w, "\nplan written to %s: review it, then run\n  shardid split run --config %s --plan %s\n", out, config, out)
	return nil
}

func joinInts(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}

// splitRun carries the plan out with a line per batch.
func splitRun(ctx context.Context, w io.Writer, env *splitEnv, in *interrupt, p *reshard.SplitPlan, fenceFor time.Duration, together bool) error {
	// Nothing is written before the plan and the split under way (if
	// any) are found to be the configuration's: a catalog of another name
	// saved here would take the routers' map nowhere.
	if err := reshard.CheckSplit(ctx, env.cfg, p); err != nil {
		return err
	}
	if env.noMap {
		st, err := reshard.ReadSplitStatus(ctx, env.cfg)
		if err != nil {
			return err
		}
		if under := slices.Concat(st.Sealed, st.Fenced, st.Moving, st.RollingBack); len(under) > 0 {
			slices.Sort(under)
			return fmt.Errorf("the catalog (table %s on %s) holds no map, yet a split of %s is under way (shards %s): it began with another catalog; "+
				"name that one in the configuration (CatalogTable)", catalogTableName(env.cfg.Catalog), env.cfg.Monolith, env.cfg.Monolith, shardRange(slices.Compact(under)))
		}
		v, err := env.cfg.Catalog.SaveMap(ctx, env.cfg.Map)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "saved the monolith's map in the catalog: version %d, every shard shared on %s\n", v, env.cfg.Monolith)
	}
	var total int64
	for _, n := range p.Rows {
		total += n
	}
	defer in.Release()
	bar := startProgress(w, "rows copied", total)
	var done, before, copied int64
	cur := map[string]int64{}
	start := time.Now()
	stageAt := start
	// A batch at a time; with --copy-together (PostgreSQL), the batches
	// left copied together (one read of each table), then fenced and
	// flipped one by one.
	opts := reshard.SplitOptions{FenceFor: fenceFor, CopyTogether: together, Progress: func(table string, n int64) {
		cur[table] = n
		copied = 0
		for _, v := range cur {
			copied += v
		}
		bar.Set(before + copied)
	}, OnStage: func(stage string) {
		// From a batch's seal to its end (the flip, the foreign keys on
		// its targets), stopping would leave its shards refusing writes,
		// or their keys missing, until the plan runs again: a first
		// Ctrl-C waits for the batch (released as it is reported).
		if stage == "sealed" {
			in.Hold(fmt.Sprintf("the batch is sealed on %s: flipping the catalog first", env.cfg.Monolith))
		}
		stageHook(stage, in)
		if !together {
			return
		}
		switch stage {
		case "created":
			bar.Printf("created the shards' tables on the targets in %v\n", time.Since(stageAt).Round(time.Millisecond))
			stageAt, copied = time.Now(), 0
			clear(cur)
		case "copied":
			bar.Printf("copied %d rows in %v\n", copied, time.Since(stageAt).Round(time.Millisecond))
			before += copied
		case "cleaned", "flipped":
			stageAt = time.Now()
		}
	}}
	err := reshard.RunSplit(ctx, env.cfg, p, opts, func(i int, res reshard.SplitResult) {
		done += res.Copied
		var to []string
		for _, s := range res.Shards {
			if !slices.Contains(to, p.To[s]) {
				to = append(to, p.To[s])
			}
		}
		copied := ""
		if !together {
			copied = " copied in " + res.CopyTime.Round(time.Millisecond).String()
			before += res.Copied
			clear(cur)
		}
		switch {
		case res.Resumed && res.Version == 0:
			bar.Printf("batch %d/%d: shards %s to %s: split already, by an earlier or another run (nothing copied or flipped)\n",
				i+1, len(p.Batches), shardRange(res.Shards), strings.Join(to, ", "))
		case res.Resumed:
			bar.Printf("batch %d/%d: shards %s to %s: sealed by an earlier run, flipped now (nothing copied), catalog version %d\n",
				i+1, len(p.Batches), shardRange(res.Shards), strings.Join(to, ", "), res.Version)
		default:
			bar.Printf("batch %d/%d: shards %s to %s: %d rows%s, fenced %v, catalog version %d\n",
				i+1, len(p.Batches), shardRange(res.Shards), strings.Join(to, ", "), res.Copied, copied,
				res.Fenced.Round(time.Millisecond), res.Version)
		}
		if res.Deleted > 0 {
			bar.Printf("every shard is split: %d rows deleted from %s, whose sharded tables now refuse writes\n", res.Deleted, p.Monolith)
		}
		in.Release()
	})
	bar.Finish()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "split done in %v: %d rows in %d batch(es)\n", time.Since(start).Round(time.Millisecond), done, len(p.Batches))
	if st, err := reshard.ReadSplitStatus(ctx, env.cfg); err == nil && st.Shared == 0 && st.RowsLeft != nil {
		left := int64(0)
		for _, n := range st.RowsLeft {
			left += n
		}
		if left > 0 {
			fmt.Fprintf(w, "the split rows stay on %s, sealed, refusing the writes of routers with a stale map: once every process follows the catalog, run\n  shardid split clean --config CONFIG\n", p.Monolith)
		}
	}
	return nil
}

// splitStatus prints where the split stands.
func splitStatus(ctx context.Context, w io.Writer, env *splitEnv) error {
	st, err := reshard.ReadSplitStatus(ctx, env.cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%d shard(s) in %s, %d split (catalog version %d)\n", st.Shared, env.cfg.Monolith, st.Split, env.version)
	if st.Running != "" {
		fmt.Fprintf(w, "a split is running: %s\n", st.Running)
	}
	if len(st.Moving) > 0 {
		fmt.Fprintf(w, "moving: %s (change log: %d entries)\n", shardRange(st.Moving), st.Backlog)
	}
	if len(st.Fenced) > 0 {
		fmt.Fprintf(w, "fenced on %s: %s\n", env.cfg.Monolith, shardRange(st.Fenced))
	}
	if len(st.Pending) > 0 {
		fmt.Fprintf(w, "sealed, flip pending (run the plan again to finish, or abort): %s\n", shardRange(st.Pending))
	}
	if len(st.RollingBack) > 0 {
		fmt.Fprintf(w, "rolling back (run the roll-back again to finish, or abort): %s\n", shardRange(st.RollingBack))
	}
	for _, t := range env.cfg.Tables {
		fmt.Fprintf(w, "  %-24s %12d rows left in %s\n", t.Name, st.RowsLeft[t.Name], env.cfg.Monolith)
	}
	return nil
}

// shardRange prints shards compactly: 0-249, 300, 302-310.
func shardRange(shards []int) string {
	if len(shards) == 0 {
		return "(none)"
	}
	var parts []string
	for i := 0; i < len(shards); {
		j := i
		for j+1 < len(shards) && shards[j+1] == shards[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", shards[i], shards[j]))
		} else {
			parts = append(parts, fmt.Sprint(shards[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// catalogTableName is the table of cat, as the configuration names it.
func catalogTableName(cat *reshard.Catalog) string {
	if cat.Table == "" {
		return "shardid_shard_map"
	}
	return cat.Table
}
