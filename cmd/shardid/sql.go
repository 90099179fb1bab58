package main

import (
	"io"

	"github.com/shardid/shardid"
)

func runSQL(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("sql", "--dialect postgres --schema NAME --shard N [--table T [--column C]] [--worker W] [--layout L [--worker-bits B]]", stderr)
	dialect := fs.String("dialect", "postgres", "the database: postgres")
	schema := fs.String("schema", "", "the logical shard's schema, such as shard_0005 (required)")
	var shard optInt
	fs.Var(&shard, "shard", "the logical shard number `N` (required)")
	table := fs.String("table", "", "also make next_id() the default of this table's ID column")
	column := fs.String("column", "id", "the ID column, with --table")
	worker := fs.Int("worker", 0, "the database's worker id, for layouts with worker bits")
	layout := fs.String("layout", "instagram", "the layout: "+layoutNames())
	workerBits := fs.Int("worker-bits", 0, "carve this many worker bits out of the layout's sequence")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *dialect != "postgres" {
		return badFlag("--dialect %s: only postgres; MySQL cannot read a generated default back (no RETURNING), so use the Go generator there", *dialect)
	}
	if *schema == "" || !shard.set {
		return badFlag("--schema and --shard are required")
	}
	if err := checkName("schema", *schema); err != nil {
		return err
	}
	l, err := layoutFor(*layout, "")
	if err != nil {
		return err
	}
	if *workerBits != 0 {
		seqBits := l.Config().SeqBits
		if *workerBits < 0 || *workerBits >= seqBits {
			return badFlag("--worker-bits %d: want 0 to %d: layout %s has %d sequence bits", *workerBits, seqBits-1, l.Name(), seqBits)
		}
		if l, err = l.WithWorkerBits(*workerBits); err != nil {
			return badFlag("--worker-bits %d: %v", *workerBits, err)
		}
	}
	if err := inRange("shard", shard.v, 0, int64(l.Shards()-1), "a logical shard"); err != nil {
		return err
	}
	if err := inRange("worker", int64(*worker), 0, int64(l.Workers()-1), "a worker id of layout "+l.Name()); err != nil {
		return err
	}
	set := given(fs)
	if set["column"] && *table == "" {
		return badFlag("--column is for --table: give the table too")
	}
	if *table != "" {
		if err := checkName("table", *table); err != nil {
			return err
		}
		if err := checkName("column", *column); err != nil {
			return err
		}
	}
	sql, err := shardid.PostgresNextID(l, *schema, int(shard.v), *worker)
	if err != nil {
		return err
	}
	if *table != "" {
		def, err := shardid.PostgresDefault(*schema, *table, *column)
		if err != nil {
			return err
		}
		sql += def + "\n"
	}
	_, err = io.WriteString(stdout, sql)
	return err
}
