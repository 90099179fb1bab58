package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"github.com/spf13/cobra"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

func newMoveCmd(s *streams) *cobra.Command {
	var f moveFlagSet
	cmd := &cobra.Command{
		Use:   "move --catalog DSN --shard N (--to NAME [--dry-run] | --abort | --drop-copy-on NAME) [flags]",
		Short: "move a logical shard to another database, every ID unchanged",
		Long: "move copies a logical shard to another database of the catalog (shardid catalog init), checks\n" +
			"the copy row by row, fences writes for a moment and flips the catalog, every ID unchanged.\n" +
			"Ctrl-C stops it between two statements and cleans up; --dry-run shows the plan and any\n" +
			"leftovers of earlier moves, --abort removes them.",
		Example: "  shardid move --catalog \"$CATALOG\" --shard 1 --to pg2 --dry-run\n  shardid move --catalog \"$CATALOG\" --shard 1 --to pg2\n" +
			"  shardid move --catalog \"$CATALOG\" --shard 1 --drop-copy-on pg1",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			return runMove(s, &f, cmd.Flags().Changed)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.catalogDSN, "catalog", "", "the `DSN` of the catalog database (PostgreSQL, or MySQL with user@tcp(...)/db) (required)")
	fs.StringVar(&f.table, "catalog-table", "", "the catalog table `T` (default shardid_shard_map)")
	fs.Var(&f.shard, "shard", "the logical shard `N` to move (required)")
	fs.StringVar(&f.to, "to", "", "the name of the database to move it to")
	fs.BoolVar(&f.dryRun, "dry-run", false, "check everything the move would check, print the plan, and change nothing")
	fs.BoolVar(&f.abort, "abort", false, "lift the fence of a move that did not finish, so the shard takes writes again")
	fs.StringVar(&f.dropOn, "drop-copy-on", "", "drop the copy a finished move left on this database")
	fs.DurationVar(&f.fenceFor, "fence-for", time.Minute, "how long the source stays fenced if the move dies")
	intFlag(fs, &f.batch, "batch", 5000, "rows per copy statement")
	fs.BoolVar(&f.compareSource, "compare-source", false, "after the copy, also compare the source with it (a second read of the source), which sees writes that fired no trigger")
	return cmd
}

// moveFlagSet holds move's flags.
type moveFlagSet struct {
	catalogDSN, table, to, dropOn string
	shard                         optInt
	dryRun, abort, compareSource  bool
	fenceFor                      time.Duration
	batch                         int
}

func runMove(ios *streams, f *moveFlagSet, changed func(string) bool) error {
	stdout, stderr := ios.out, ios.err
	catalogDSN, table, shard, to, dryRun, abort, dropOn, fenceFor, batch :=
		&f.catalogDSN, &f.table, f.shard, &f.to, &f.dryRun, &f.abort, &f.dropOn, &f.fenceFor, &f.batch
	if *catalogDSN == "" || !shard.set {
		return badFlag("--catalog and --shard are required")
	}
	if shard.v < 0 {
		return badFlag("--shard %d: want a logical shard, 0 or more", shard.v)
	}
	actions := 0
	for _, on := range []bool{*to != "", *abort, *dropOn != ""} {
		if on {
			actions++
		}
	}
	if actions != 1 {
		return badFlag("give one of --to, --abort and --drop-copy-on")
	}
	if *dryRun && *to == "" {
		return badFlag("--dry-run is for a move: give --to")
	}
	if *to == "" && (changed("batch") || changed("fence-for")) {
		return badFlag("--batch and --fence-for are for a move: give --to")
	}
	if *batch < 1 {
		return badFlag("--batch %d: want 1 row or more", *batch)
	}
	if *fenceFor <= 0 {
		return badFlag("--fence-for %v: want a positive duration", *fenceFor)
	}
	if *table != "" {
		if err := checkName("catalog-table", *table); err != nil {
			return err
		}
	}
	// Ctrl-C (or SIGTERM) stops the command between two statements: a move
	// stopped before its fence for good lifts its fence, drops its change
	// log and the copy it was building, and leaves the shard where it was.
	in := onInterrupt(stderr)
	defer in.stop()
	ctx := in.ctx
	catDB, err := openDSN(dialectOf(*catalogDSN), *catalogDSN)
	if err != nil {
		return fmt.Errorf("--catalog: %w", err)
	}
	defer closeGorm(catDB)
	// Loading a catalog creates its tables when they are missing: look
	// first, so that no run of the command creates them.
	if err := catalogExists(ctx, catDB, *table); err != nil {
		return err
	}
	c := &reshard.Catalog{DB: catDB, Table: *table}
	setup, err := c.LoadSetup(ctx)
	if err != nil {
		return err
	}
	var dbs []*gorm.DB
	var names []string
	defer func() {
		for _, db := range dbs {
			closeGorm(db)
		}
	}()
	for _, d := range setup.Databases {
		db, err := openDSN(d.Dialect, d.DSN)
		if err != nil {
			return fmt.Errorf("database %s: %w", d.Name, err)
		}
		dbs, names = append(dbs, db), append(names, d.Name)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: names,
		LogicalShards: setup.LogicalShards, SchemaPattern: setup.SchemaPattern})
	if err != nil {
		return fmt.Errorf("the catalog's setup: %w", err)
	}
	m, version, err := c.Load(ctx, r)
	if err != nil {
		return err
	}
	if err := r.SetMap(m); err != nil {
		return err
	}
	if shard.v >= int64(r.LogicalShards()) {
		return fmt.Errorf("--shard %d: the catalog has %d logical shards, 0 to %d", shard.v, r.LogicalShards(), r.LogicalShards()-1)
	}
	if setup.SchemaPattern == "" {
		return errors.New("the catalog's setup has no schema pattern: moving a shard needs a schema (MySQL: a database) per logical shard")
	}
	s := int(shard.v)
	from := r.DatabaseName(s)
	for _, named := range []struct{ flag, name string }{{"to", *to}, {"drop-copy-on", *dropOn}} {
		if named.name != "" && indexOf(names, named.name) < 0 {
			return fmt.Errorf("--%s %s: the catalog has no database of that name (it has %s)", named.flag, named.name, strings.Join(names, ", "))
		}
	}
	tables := make([]any, len(setup.Tables))
	for i, t := range setup.Tables {
		tables[i] = t
	}
	switch {
	case *abort:
		if err := reshard.Unfence(ctx, r, s, tables); errors.Is(err, reshard.ErrShardMoved) {
			return fmt.Errorf("%w: a move fenced shard %d on %s for good and did not flip the catalog: finish it (%s --to TARGET)", err, s, from, moveFlags(*table, s))
		} else if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "shard %d on %s takes writes again (no fence, no change log)\n", s, from)
		done, err := reshard.DropUnfinishedCopies(ctx, r, s)
		for _, st := range done.Staging {
			fmt.Fprintf(stdout, "dropped the staging schema %s on %s\n", st.Schema, st.Database)
		}
		for _, c := range done.Copies {
			fmt.Fprintf(stdout, "dropped the unfinished copy of shard %d on %s\n", s, c.Database)
		}
		if err != nil {
			return err
		}
		l, err := reshard.FindLeftovers(ctx, r, s)
		if err != nil {
			return err
		}
		if !l.Empty() {
			printLeftovers(stdout, l, *table)
		}
		return nil
	case *dropOn != "":
		if *dropOn == from {
			return fmt.Errorf("--drop-copy-on %s: shard %d lives on %s: its copy there is not a leftover", *dropOn, s, from)
		}
		l, err := reshard.FindLeftovers(ctx, r, s)
		if err != nil {
			return err
		}
		found := false
		for _, c := range l.Copies {
			found = found || c.Database == *dropOn
		}
		if !found {
			return fmt.Errorf("--drop-copy-on %s: %w: %s holds no schema %s: nothing was dropped", *dropOn, reshard.ErrNoCopy, *dropOn, r.Schema(s))
		}
		if err := reshard.DropShardCopy(ctx, r, s, *dropOn); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "dropped the copy of shard %d on %s\n", s, *dropOn)
		return nil
	}

	// Check what MoveShard checks before it changes anything, so that a
	// dry run fails where the move would.
	if *to == from {
		return fmt.Errorf("--to %s: shard %d already lives on %s", *to, s, from)
	}
	src, dst := dbs[indexOf(names, from)], dbs[indexOf(names, *to)]
	if d1, d2 := src.Dialector.Name(), dst.Dialector.Name(); d1 != d2 {
		return fmt.Errorf("--to %s: a %s database, and shard %d is on %s, a %s database: moves stay within one kind", *to, d2, s, from, d1)
	}
	if len(setup.Tables) == 0 {
		return errors.New("the catalog's setup names no tables to move")
	}
	if sqlDB, err := dst.DB(); err != nil {
		return fmt.Errorf("--to %s: %w", *to, err)
	} else if err := sqlDB.PingContext(ctx); err != nil {
		return fmt.Errorf("--to %s: the database does not answer: %w", *to, err)
	}
	var total int64
	var plan strings.Builder
	for _, t := range setup.Tables {
		var n int64
		if err := src.WithContext(ctx).Table(r.Schema(s) + "." + t).Count(&n).Error; err != nil {
			return fmt.Errorf("shard %d on %s: table %s: %w", s, from, t, err)
		}
		total += n
		fmt.Fprintf(&plan, "  %s.%s: %d rows\n", r.Schema(s), t, n)
	}
	fmt.Fprintf(stdout, "move shard %d (%s) from %s to %s, catalog version %d:\n%s", s, r.Schema(s), from, *to, version, plan.String())
	if *dryRun {
		fmt.Fprintf(stdout, "steps: create the schema and tables on %s; log changes on %s; copy in batches of %d;\n"+
			"compare both sides row by row and apply the logged changes, each verified; fence %s (up to %v);\n"+
			"apply the last changes and compare the rows still in doubt; flip the catalog to version %d. The copy on %s stays, fenced.\n"+
			"dry run: nothing was changed\n",
			*to, from, *batch, from, *fenceFor, version+1, from)
		l, err := reshard.FindLeftovers(ctx, r, s)
		if err != nil {
			return err
		}
		printLeftovers(stdout, l, *table)
		return nil
	}
	in.Leaves(leavesHint(*catalogDSN, *table, s, *to))
	bar := startProgress(stdout, "copying", total) // the copy; changes made meanwhile are applied after it
	// The bar shows the router's figures of the move, what its metrics show.
	stage := ""
	res, err := reshard.MoveShard(ctx, r, c, s, *to, reshard.MoveOptions{Tables: setup.Tables, Batch: *batch, FenceFor: *fenceFor, CompareSource: f.compareSource,
		Progress: func(string, int64) { bar.Set(moveStats(r, s).RowsCopied) },
		OnStage: func(st string) {
			stage = st
			switch st {
			case "sealed":
				// Stopping now would leave the shard refusing writes
				// until the move is run again: finish the flip first.
				in.Hold(fmt.Sprintf("shard %d is fenced for good on %s: flipping the catalog to %s first", s, from, *to))
			case "flipped":
				in.Release()
			}
			stageHook(st, in)
		}})
	bar.Finish()
	in.Release()
	if err != nil {
		if m := moveStats(r, s); m.Stage == "failed" {
			fmt.Fprintf(stdout, "the move failed after %d rows copied; writes were fenced for %v\n", m.RowsCopied, m.Fenced.Round(time.Millisecond))
		}
		switch stage {
		case "sealed":
			return fmt.Errorf("%w\nshard %d is fenced for good on %s and the catalog still names it: run the same move again to finish it", err, s, from)
		case "flipped":
			return err
		}
		if in.Interrupted() {
			fmt.Fprintf(stdout, "interrupted: shard %d stays on %s", s, from)
			switch stage {
			case "fenced", "verified":
				fmt.Fprintf(stdout, "; the move lifted its fence, dropped its change log and its triggers")
			case "created", "copied":
				fmt.Fprintf(stdout, "; the move dropped its change log and its triggers")
			}
			fmt.Fprintln(stdout)
		}
		if stage != "" || ctx.Err() != nil {
			cleanUp(ctx, stdout, r, s, *to, stage != "")
		}
		return err
	}
	printMoved(stdout, res, f.compareSource)
	return nil
}

// printMoved prints what a move did: that it compared both sides, unless
// asked to (compareAsked), each table's check, and the new map's version.
func printMoved(w io.Writer, res reshard.MoveResult, compareAsked bool) {
	if res.ComparedSource && !compareAsked {
		fmt.Fprintln(w, "  the copy's sums differed from the target's: the move compared both sides, reading the source again (slower, not less safe)")
	}
	for _, t := range res.Tables {
		fmt.Fprintf(w, "  %s: %d rows, checksum %016x on both sides\n", t.Table, t.Rows, t.Checksum)
	}
	fmt.Fprintf(w, "moved shard %d to %s (catalog version %d); writes were fenced for %v\n",
		res.Shard, res.To, res.Version, res.Fenced.Round(time.Millisecond))
}

func indexOf(names []string, n string) int {
	for i, x := range names {
		if x == n {
			return i
		}
	}
	return -1
}

// dialectOf guesses a DSN's dialect: MySQL DSNs name a protocol, as in
// user@tcp(host:3306)/db.
func dialectOf(dsn string) string {
	if strings.Contains(dsn, "@tcp(") || strings.Contains(dsn, "@unix(") {
		return "mysql"
	}
	return "postgres"
}

// idleSessions is how many idle sessions a command keeps in each of its
// pools. database/sql keeps 2 and closes the others as they come back, and
// a split or a move uses up to 4 sessions of a database at once: each
// session closed is a new one later, a new server process whose caches
// know none of the shards' tables. On machine E, 4 writers beside a split
// of 2,000 shards, pools of 16 idle sessions took the longest fence from
// 0.60 to 0.98 s down to 0.29 s (docs/resharding.md, "What it costs").
const idleSessions = 16

// openDSN opens a database of dialect for a command: a pool that keeps
// idleSessions idle sessions, each for 5 minutes at most.
func openDSN(dialect, dsn string) (*gorm.DB, error) {
	cfg := &gorm.Config{Logger: logger.Discard}
	open := postgres.Open
	if dialect == "mysql" {
		open = mysql.Open
	}
	db, err := gorm.Open(open(dsn), cfg)
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxIdleConns(idleSessions)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
}

// catalogExists returns an error unless the catalog's tables exist. It only
// reads.
func catalogExists(ctx context.Context, db *gorm.DB, table string) error {
	missing, err := missingCatalogTable(ctx, db, table)
	if err != nil {
		return err
	}
	if missing != "" {
		return fmt.Errorf("--catalog: no catalog there: table %s does not exist (create it with shardid catalog init, or a program with reshard.Catalog.Save and SaveSetup)", missing)
	}
	return nil
}

// missingCatalogTable returns the first of the catalog's tables that does
// not exist, or "". It only reads.
func missingCatalogTable(ctx context.Context, db *gorm.DB, table string) (string, error) {
	if table == "" {
		table = "shardid_shard_map"
	}
	for _, t := range []string{table, table + "_version", table + "_setup"} {
		var n int64
		q := "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?"
		if db.Dialector.Name() == "postgres" {
			q = "SELECT count(*) FROM (SELECT to_regclass(?) AS t) r WHERE t IS NOT NULL"
		}
		if err := db.WithContext(ctx).Raw(q, t).Scan(&n).Error; err != nil {
			return "", fmt.Errorf("--catalog: %w", err)
		}
		if n == 0 {
			return t, nil
		}
	}
	return "", nil
}

func closeGorm(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.Close()
	}
}
