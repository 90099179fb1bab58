package main

import (
	"fmt"
	"io"

	"github.com/shardid/shardid"
)

func runSQL(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("sql", "--dialect postgres --schema NAME --shard N [--table T] [--column C] [--worker W] [--layout L]", stderr)
	dialect := fs.String("dialect", "postgres", "the database: postgres")
	schema := fs.String("schema", "", "the logical shard's schema, such as shard_0005 (required)")
	shard := fs.Int("shard", -1, "the logical shard number (required)")
	table := fs.String("table", "", "also make next_id() the default of this table's ID column")
	column := fs.String("column", "id", "the ID column, with --table")
	worker := fs.Int("worker", 0, "the database's worker id, for layouts with worker bits")
	layout := fs.String("layout", "instagram", "the layout: "+layoutNames())
	workerBits := fs.Int("worker-bits", 0, "carve this many worker bits out of the sequence (instagram)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dialect != "postgres" {
		return fmt.Errorf("--dialect %s: only postgres; MySQL cannot read a generated default back (no RETURNING), so use the Go generator there", *dialect)
	}
	if *schema == "" || *shard < 0 {
		fmt.Fprintln(stderr, "shardid sql: --schema and --shard are required")
		return errFlags
	}
	l, err := layoutFor(*layout, "")
	if err != nil {
		return err
	}
	if *workerBits > 0 {
		if l, err = l.WithWorkerBits(*workerBits); err != nil {
			return err
		}
	}
	sql, err := shardid.PostgresNextID(l, *schema, *shard, *worker)
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
