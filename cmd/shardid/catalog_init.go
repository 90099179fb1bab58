package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/shardid/shardid/reshard"
	"github.com/spf13/cobra"
)

func newCatalogInitCmd(s *streams) *cobra.Command {
	var (
		cf            catalogFlags
		sf            setupFlags
		allOn, mapOpt string
	)
	cmd := &cobra.Command{
		Use:   "init --catalog DSN (--database NAME=DSN... --shards N --schema-pattern P --tables T,... | --from FILE) [--all-on NAME | --map FILE] [flags]",
		Short: "create the catalog: its setup and its first map",
		Long: "init creates the catalog's tables in the --catalog database, stores the setup (the databases,\n" +
			"the number of logical shards, the schema pattern and the tables of a shard) and the first map:\n" +
			"every shard on --all-on NAME, the map of --map FILE ({\"pg1\": [\"0-7\"], \"pg2\": [\"8-15\"]}), or\n" +
			"else the databases in turn, in even ranges. It opens every database first, and refuses a map\n" +
			"that puts a shard on a database without its schema while another database holds it.\n" +
			"It refuses a DSN with a literal password: write ${NAME} for it, read from the environment of\n" +
			"whoever loads the catalog, or leave it out (~/.pgpass). It refuses a catalog that holds a setup\n" +
			"or a map already: change one with shardid catalog set.",
		Example: "  # after shardid demo --postgres \"$PG1\" --shards 16 --keep\n" +
			"  shardid catalog init --catalog \"$PG1\" --database pg1=\"$PG1\" --database pg2=\"$PG2\" \\\n" +
			"      --shards 16 --schema-pattern demo_%04d --tables demo_photos,demo_comments --all-on pg1",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			if err := cf.check(); err != nil {
				return err
			}
			setup, err := sf.setup(cmd)
			if err != nil {
				return err
			}
			if allOn != "" && mapOpt != "" {
				return badFlag("give --all-on or --map, not both")
			}
			if allOn != "" && !slices.ContainsFunc(setup.Databases, func(d reshard.CatalogDatabase) bool { return d.Name == allOn }) {
				return badFlag("--all-on %s: not a database of the setup (it has %s)", allOn, strings.Join(dbNames(setup), ", "))
			}
			return catalogInit(cmd.Context(), s, &cf, setup, allOn, mapOpt)
		},
	}
	fs := cmd.Flags()
	cf.define(fs)
	sf.defineDatabases(fs)
	intFlag(fs, &sf.shards, "shards", 0, "the number `N` of logical shards")
	fs.StringVar(&sf.pattern, "schema-pattern", "", "the schema `P` of each logical shard (on MySQL its database), with one %d verb, such as shard_%04d")
	fs.StringVar(&allOn, "all-on", "", "put every logical shard on the database `NAME` (as shardid demo leaves them)")
	fs.StringVar(&mapOpt, "map", "", "the first map, from this JSON `FILE`: {\"pg1\": [\"0-7\"], \"pg2\": [\"8-15\"]}")
	cmd.MarkFlagFilename("from", "json")
	cmd.MarkFlagFilename("map", "json")
	return cmd
}

// setup returns the setup the flags (or --from) give, checked.
func (f *setupFlags) setup(cmd *cobra.Command) (reshard.CatalogSetup, error) {
	changed := cmd.Flags().Changed
	if f.from != "" {
		for _, n := range []string{"database", "shards", "schema-pattern", "tables"} {
			if changed(n) {
				return reshard.CatalogSetup{}, badFlag("--%s: give the setup with flags or --from FILE, not both", n)
			}
		}
		setup, err := readSetupFile(f.from)
		if err != nil {
			return setup, err
		}
		return setup, checkSetup(setup, "--from "+f.from)
	}
	setup := reshard.CatalogSetup{LogicalShards: f.shards, SchemaPattern: f.pattern, Tables: f.tables}
	for _, v := range f.databases {
		d, err := parseDatabase(v)
		if err != nil {
			return setup, err
		}
		setup.Databases = append(setup.Databases, d)
	}
	if !changed("shards") {
		return setup, badFlag("--shards is required: the number of logical shards")
	}
	if err := inRange("shards", int64(f.shards), 1, 8192, "a number of logical shards"); err != nil {
		return setup, err
	}
	if err := checkSetup(setup, "the flags"); err != nil {
		return setup, usageError{strings.TrimPrefix(err.Error(), "the flags: ")}
	}
	return setup, nil
}

func dbNames(setup reshard.CatalogSetup) []string {
	var names []string
	for _, d := range setup.Databases {
		names = append(names, d.Name)
	}
	return names
}

func catalogInit(ctx context.Context, s *streams, cf *catalogFlags, setup reshard.CatalogSetup, allOn, mapFile string) (err error) {
	db, c, err := openCatalog(cf)
	if err != nil {
		return err
	}
	defer closeGorm(db)
	table := cf.tableName()
	st, err := readCatalog(ctx, db, c, table)
	if err != nil {
		return err
	}
	if st.version > 0 || st.setup != "" || len(st.rows) > 0 {
		return fmt.Errorf("--catalog: the catalog %s exists already (version %d): see it with shardid catalog show, change its setup with shardid catalog set", table, st.version)
	}
	if err := c.SaveSetup(ctx, setup); err != nil {
		return setupRefused(err)
	}
	// Whatever fails from now on, the catalog is left as it was found:
	// no tables, or empty ones.
	defer func() {
		if err == nil {
			return
		}
		uctx := context.WithoutCancel(ctx)
		if !st.tables {
			db.WithContext(uctx).Exec(fmt.Sprintf("DROP TABLE IF EXISTS %[1]s, %[1]s_version, %[1]s_setup", table))
		} else {
			db.WithContext(uctx).Exec("DELETE FROM " + table + "_setup")
		}
	}()
	var m []int
	if allOn != "" {
		m = make([]int, setup.LogicalShards)
		for i := range m {
			m[i] = slices.Index(dbNames(setup), allOn)
		}
	}
	cr, err := openSetup(ctx, c, m)
	if err != nil {
		return err
	}
	defer cr.close()
	if mapFile != "" {
		if err := reshard.LoadMapFile(cr.r, mapFile); err != nil {
			return usageError{fmt.Sprintf("--map %v", err)}
		}
	}
	if err := reshard.CheckDatabases(ctx, cr.r); err != nil {
		return err
	}
	none, err := checkMapFindsShards(ctx, cr.r)
	if err != nil {
		return err
	}
	version, err := c.Save(ctx, cr.r)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.out, "created the catalog %s: version %d\n", table, version)
	if none > 0 {
		fmt.Fprintf(s.out, "%d of %d logical shards have no schema on any database yet (the application's migration creates them)\n", none, setup.LogicalShards)
	}
	st, err = readCatalog(ctx, db, c, table)
	if err != nil {
		return err
	}
	return printCatalog(s.out, table, st)
}

// setupRefused makes SaveSetup's refusal of a flag's value (a literal
// password, a malformed placeholder) a wrong command line.
func setupRefused(err error) error {
	if errors.Is(err, reshard.ErrSecretInDSN) || errors.Is(err, reshard.ErrInvalidCatalog) {
		return usageError{err.Error()}
	}
	return err
}
