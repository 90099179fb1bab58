package main

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/shardid/shardid/reshard"
	"github.com/spf13/cobra"
	"gorm.io/gorm"
)

func newCatalogSetCmd(s *streams) *cobra.Command {
	var (
		cf     catalogFlags
		sf     setupFlags
		remove []string
	)
	cmd := &cobra.Command{
		Use:   "set --catalog DSN ([--database NAME=DSN]... [--remove-database NAME]... [--tables T,...] | --from FILE) [flags]",
		Short: "change the catalog's setup: add, change or remove databases, set the tables",
		Long: "set changes the setup the catalog holds: --database adds a database, or gives one a new DSN;\n" +
			"--remove-database removes one that holds no shard; --tables replaces the tables of a shard;\n" +
			"--from FILE replaces the whole setup. The number of logical shards and the schema pattern\n" +
			"stay: the map depends on them. The map is not changed (move shards with shardid move or\n" +
			"rebalance). Every database of the new setup must answer, and every shard's schema must be\n" +
			"where the map says; otherwise the setup stays as it was. Processes that loaded the setup\n" +
			"before keep theirs until they load it again.",
		Example: "  shardid catalog set --catalog \"$CATALOG\" --database pg3='host=db3 user=app password=${PG3_PASSWORD} dbname=app'\n" +
			"  shardid catalog set --catalog \"$CATALOG\" --remove-database pg1",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			if err := cf.check(); err != nil {
				return err
			}
			changed := cmd.Flags().Changed
			if !changed("database") && !changed("remove-database") && !changed("tables") && !changed("from") {
				return badFlag("nothing to change: give --database, --remove-database, --tables or --from")
			}
			if sf.from != "" && (changed("database") || changed("remove-database") || changed("tables")) {
				return badFlag("give --from FILE alone: it replaces the whole setup")
			}
			var add []reshard.CatalogDatabase
			for _, v := range sf.databases {
				d, err := parseDatabase(v)
				if err != nil {
					return err
				}
				if slices.ContainsFunc(add, func(a reshard.CatalogDatabase) bool { return a.Name == d.Name }) {
					return badFlag("--database %s is given twice", d.Name)
				}
				add = append(add, d)
			}
			for _, n := range remove {
				if slices.ContainsFunc(add, func(a reshard.CatalogDatabase) bool { return a.Name == n }) {
					return badFlag("--database and --remove-database both name %s", n)
				}
			}
			if changed("tables") {
				for i, t := range sf.tables {
					if err := checkName("tables", t); err != nil {
						return err
					}
					if slices.Contains(sf.tables[:i], t) {
						return badFlag("--tables: %s is named twice", t)
					}
				}
			}
			var from *reshard.CatalogSetup
			if sf.from != "" {
				setup, err := readSetupFile(sf.from)
				if err != nil {
					return err
				}
				if err := checkSetup(setup, "--from "+sf.from); err != nil {
					return err
				}
				from = &setup
			}
			return catalogSet(cmd.Context(), s, &cf, add, remove, sf.tables, from)
		},
	}
	fs := cmd.Flags()
	cf.define(fs)
	sf.defineDatabases(fs)
	fs.StringArrayVar(&remove, "remove-database", nil, "remove the database `NAME` from the setup (it must hold no shard)")
	cmd.MarkFlagFilename("from", "json")
	return cmd
}

func catalogSet(ctx context.Context, s *streams, cf *catalogFlags, add []reshard.CatalogDatabase, remove, tables []string,
	from *reshard.CatalogSetup) (err error) {
	db, c, err := openCatalog(cf)
	if err != nil {
		return err
	}
	defer closeGorm(db)
	table := cf.tableName()
	if err := catalogExists(ctx, db, cf.table); err != nil {
		return err
	}
	st, err := readCatalog(ctx, db, c, table)
	if err != nil {
		return err
	}
	old, err := parseStoredSetup(st.setup)
	if err != nil {
		return err
	}
	next := old
	next.Databases = slices.Clone(old.Databases)
	switch {
	case from != nil:
		if from.LogicalShards != old.LogicalShards || from.SchemaPattern != old.SchemaPattern {
			return badFlag("--from: %d logical shards in schemas %s, and the catalog has %d in %s: the map depends on them; they cannot change",
				from.LogicalShards, from.SchemaPattern, old.LogicalShards, old.SchemaPattern)
		}
		next = *from
	default:
		for _, d := range add {
			if i := slices.IndexFunc(next.Databases, func(o reshard.CatalogDatabase) bool { return o.Name == d.Name }); i >= 0 {
				next.Databases[i] = d
			} else {
				next.Databases = append(next.Databases, d)
			}
		}
		for _, n := range remove {
			i := slices.IndexFunc(next.Databases, func(o reshard.CatalogDatabase) bool { return o.Name == n })
			if i < 0 {
				return badFlag("--remove-database %s: not a database of the setup (it has %s)", n, strings.Join(dbNames(old), ", "))
			}
			next.Databases = slices.Delete(next.Databases, i, i+1)
		}
		if tables != nil {
			next.Tables = tables
		}
	}
	// Every database the map names stays.
	held := map[string][]int{}
	for _, row := range st.rows {
		held[row.DBName] = append(held[row.DBName], row.Shard)
	}
	for _, n := range slices.Sorted(maps.Keys(held)) {
		if !slices.Contains(dbNames(next), n) {
			return fmt.Errorf("database %s holds logical shards %s: it must stay in the setup; move them away first (shardid rebalance --drain %s --apply)",
				n, strings.Join(shardRanges(held[n]), ", "), n)
		}
	}
	if reflect.DeepEqual(old, next) {
		fmt.Fprintf(s.out, "the setup of catalog %s is unchanged\n", table)
		return nil
	}
	if err := c.SaveSetup(ctx, next); err != nil {
		return setupRefused(err)
	}
	defer func() {
		if err == nil {
			return
		}
		// Put the setup back as it was stored.
		db.WithContext(context.WithoutCancel(ctx)).Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec("DELETE FROM " + table + "_setup").Error; err != nil {
				return err
			}
			return tx.Exec("INSERT INTO "+table+"_setup (id, setup) VALUES (1, ?)", st.setup).Error
		})
		fmt.Fprintf(s.out, "the setup of catalog %s stays as it was\n", table)
	}()
	cr, err := openSetup(ctx, c, nil)
	if err != nil {
		return err
	}
	defer cr.close()
	if st.version > 0 {
		m, _, err := c.Load(ctx, cr.r)
		if err != nil {
			return err
		}
		if err := cr.r.SetMap(m); err != nil {
			return err
		}
		if _, err := checkMapFindsShards(ctx, cr.r); err != nil {
			return err
		}
	}
	if err := reshard.CheckDatabases(ctx, cr.r); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "changed the setup of catalog %s (its map is unchanged, version %d)\n", table, st.version)
	if st, err = readCatalog(ctx, db, c, table); err != nil {
		return err
	}
	return printCatalog(s.out, table, st)
}
