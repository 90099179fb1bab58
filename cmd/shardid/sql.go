package main

import (
	"fmt"
	"io"

	"github.com/shardid/shardid"
	"github.com/spf13/cobra"
)

func newSQLCmd(s *streams) *cobra.Command {
	var (
		dialect, schema, table, column, layout string
		shard, worker                          optInt
		workerBits                             int
	)
	cmd := &cobra.Command{
		Use:   "sql --schema NAME --shard N [flags]",
		Short: "print the SQL that makes IDs inside PostgreSQL",
		Long: "sql prints the SQL that creates a logical shard's schema (if it does not exist) and its next_id()\n" +
			"function, which makes IDs of the shard inside PostgreSQL; with --table, also the statement that\n" +
			"makes next_id() the default of the table's ID column. Pipe it into psql.",
		Example: "  shardid sql --schema shard_0005 --shard 5 --table photos | psql -d app",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			if dialect != "postgres" {
				return badFlag("--dialect %s: only postgres; MySQL cannot read a generated default back (no RETURNING), so use the Go generator there", dialect)
			}
			if schema == "" || !shard.set {
				return badFlag("--schema and --shard are required")
			}
			if err := checkName("schema", schema); err != nil {
				return err
			}
			l, err := layoutFor(layout, "")
			if err != nil {
				return err
			}
			if workerBits != 0 {
				seqBits := l.Config().SeqBits
				if workerBits < 0 || workerBits >= seqBits {
					return badFlag("--worker-bits %d: want 0 to %d: layout %s has %d sequence bits", workerBits, seqBits-1, l.Name(), seqBits)
				}
				if l, err = l.WithWorkerBits(workerBits); err != nil {
					return badFlag("--worker-bits %d: %v", workerBits, err)
				}
			}
			if err := inRange("shard", shard.v, 0, int64(l.Shards()-1), "a logical shard"); err != nil {
				return err
			}
			// As new does: a layout with worker bits needs the worker
			// id, never a silent 0 that two databases would share.
			if _, err := workerFlag(l, worker); err != nil {
				return err
			}
			if cmd.Flags().Changed("column") && table == "" {
				return badFlag("--column is for --table: give the table too")
			}
			if table != "" {
				if err := checkName("table", table); err != nil {
					return err
				}
				if err := checkName("column", column); err != nil {
					return err
				}
			}
			sql, err := shardid.PostgresNextID(l, schema, int(shard.v), int(worker.v))
			if err != nil {
				return err
			}
			// The schema first, so that the SQL runs in a fresh database.
			sql = fmt.Sprintf("CREATE SCHEMA IF NOT EXISTS \"%s\";\n", schema) + sql
			if table != "" {
				def, err := shardid.PostgresDefault(schema, table, column)
				if err != nil {
					return err
				}
				sql += def + "\n"
			}
			_, err = io.WriteString(s.out, sql)
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dialect, "dialect", "postgres", "the database: postgres")
	fs.StringVar(&schema, "schema", "", "the logical shard's schema, such as shard_0005 (required)")
	fs.Var(&shard, "shard", "the logical shard number `N` (required)")
	fs.StringVar(&table, "table", "", "also make next_id() the default of this table's ID column")
	fs.StringVar(&column, "column", "id", "the ID column, with --table")
	fs.Var(&worker, "worker", "the database's worker id `W`, required by layouts with worker bits")
	fs.StringVar(&layout, "layout", "instagram", "the layout: "+layoutNames())
	intFlag(fs, &workerBits, "worker-bits", 0, "carve this many worker bits out of the layout's sequence")
	completeWords(cmd, "layout", sortedLayouts()...)
	completeWords(cmd, "dialect", "postgres")
	return cmd
}
