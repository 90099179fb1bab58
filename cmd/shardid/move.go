package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardid/shardid"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

func runMove(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("move", "--catalog DSN --shard N --to NAME [--dry-run] [--abort] [--drop-copy-on NAME]", stderr)
	catalogDSN := fs.String("catalog", "", "the DSN of the catalog database (PostgreSQL, or MySQL with user@tcp(...)/db) (required)")
	table := fs.String("catalog-table", "", "the catalog table (default shardid_shard_map)")
	shard := fs.Int("shard", -1, "the logical shard to move (required)")
	to := fs.String("to", "", "the name of the database to move it to (required, unless --abort or --drop-copy-on)")
	dryRun := fs.Bool("dry-run", false, "print the plan and change nothing")
	abort := fs.Bool("abort", false, "lift the fence of a move that did not finish, so the shard takes writes again")
	dropOn := fs.String("drop-copy-on", "", "drop the copy a finished move left on this database")
	fenceFor := fs.Duration("fence-for", time.Minute, "how long the source stays fenced if the move dies")
	batch := fs.Int("batch", 5000, "rows per copy statement")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *catalogDSN == "" || *shard < 0 || (*to == "" && !*abort && *dropOn == "") {
		fmt.Fprintln(stderr, "shardid move: --catalog, --shard and --to are required")
		return errFlags
	}
	ctx := context.Background()
	catDB, err := openDSN(dialectOf(*catalogDSN), *catalogDSN)
	if err != nil {
		return err
	}
	c := &shardid.Catalog{DB: catDB, Table: *table}
	setup, err := c.LoadSetup(ctx)
	if err != nil {
		return err
	}
	var dbs []*gorm.DB
	var names []string
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
		return err
	}
	m, version, err := c.Load(ctx, r)
	if err != nil {
		return err
	}
	if err := r.SetMap(m); err != nil {
		return err
	}
	tables := make([]any, len(setup.Tables))
	for i, t := range setup.Tables {
		tables[i] = t
	}
	switch {
	case *abort:
		if err := r.Unfence(ctx, *shard, tables); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "shard %d on %s takes writes again\n", *shard, r.DatabaseName(*shard))
		return nil
	case *dropOn != "":
		if err := r.DropShardCopy(ctx, *shard, *dropOn); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "dropped the copy of shard %d on %s\n", *shard, *dropOn)
		return nil
	}

	from := r.DatabaseName(*shard)
	if from == "" {
		return fmt.Errorf("--shard %d: the catalog has %d shards", *shard, r.LogicalShards())
	}
	src := dbs[indexOf(names, from)]
	var total int64
	var plan strings.Builder
	for _, t := range setup.Tables {
		var n int64
		if err := src.WithContext(ctx).Table(r.Schema(*shard) + "." + t).Count(&n).Error; err != nil {
			return err
		}
		total += n
		fmt.Fprintf(&plan, "  %s.%s: %d rows\n", r.Schema(*shard), t, n)
	}
	fmt.Fprintf(stdout, "move shard %d (%s) from %s to %s, catalog version %d:\n%s", *shard, r.Schema(*shard), from, *to, version, plan.String())
	if *dryRun {
		fmt.Fprintf(stdout, "steps: create the schema and tables on %s; copy in batches of %d; fence %s (up to %v);\n"+
			"copy again and verify counts and checksums; flip the catalog to version %d. The copy on %s stays, fenced.\n",
			*to, *batch, from, *fenceFor, version+1, from)
		return nil
	}
	bar := startProgress(stdout, "copying", 2*total) // a first copy, and one after the fence
	last := map[string]int64{}                       // rows copied per table in the current pass
	res, err := r.MoveShard(ctx, c, *shard, *to, shardid.MoveOptions{Tables: setup.Tables, Batch: *batch, FenceFor: *fenceFor,
		Progress: func(table string, copied int64) {
			d := copied - last[table]
			if d < 0 { // the copy after the fence starts again
				d = copied
			}
			last[table] = copied
			bar.Add(int(d))
		}})
	bar.Finish()
	if err != nil {
		return err
	}
	for _, t := range res.Tables {
		fmt.Fprintf(stdout, "  %s: %d rows, checksum %016x on both sides\n", t.Table, t.Rows, t.Checksum)
	}
	fmt.Fprintf(stdout, "moved shard %d to %s (catalog version %d); writes were fenced for %v\n",
		*shard, *to, res.Version, res.Fenced.Round(time.Millisecond))
	return nil
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

func openDSN(dialect, dsn string) (*gorm.DB, error) {
	cfg := &gorm.Config{Logger: logger.Discard}
	if dialect == "mysql" {
		return gorm.Open(mysql.Open(dsn), cfg)
	}
	return gorm.Open(postgres.Open(dsn), cfg)
}
