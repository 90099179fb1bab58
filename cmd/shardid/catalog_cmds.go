package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/shardid/shardid/reshard"
	"github.com/spf13/cobra"
	"gorm.io/gorm"
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

func newCatalogShowCmd(s *streams) *cobra.Command {
	var (
		cf     catalogFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "show --catalog DSN [--json] [flags]",
		Short: "print the catalog: its version, setup and map",
		Long: "show prints the catalog's version, its setup (DSNs as stored, with their ${NAME} placeholders,\n" +
			"any literal password masked) and which logical shards each database holds. It only reads,\n" +
			"and opens no database but the catalog's.",
		Example: "  shardid catalog show --catalog \"$CATALOG\"\n  shardid catalog show --catalog \"$CATALOG\" --json",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			if err := cf.check(); err != nil {
				return err
			}
			db, c, err := openCatalog(&cf)
			if err != nil {
				return err
			}
			defer closeGorm(db)
			ctx := cmd.Context()
			if err := catalogExists(ctx, db, cf.table); err != nil {
				return err
			}
			st, err := readCatalog(ctx, db, c, cf.tableName())
			if err != nil {
				return err
			}
			if asJSON {
				return printCatalogJSON(s.out, cf.tableName(), st)
			}
			return printCatalog(s.out, cf.tableName(), st)
		},
	}
	cf.define(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print it as JSON: {\"catalog\", \"version\", \"setup\", \"map\"}, the setup as --from reads it, the map as --map reads it")
	return cmd
}

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

// shardRanges writes sorted shards as ranges: 0, 2-5, 9.
func shardRanges(shards []int) []string {
	shards = slices.Sorted(slices.Values(shards))
	var out []string
	for i := 0; i < len(shards); {
		j := i
		for j+1 < len(shards) && shards[j+1] == shards[j]+1 {
			j++
		}
		if i == j {
			out = append(out, fmt.Sprint(shards[i]))
		} else {
			out = append(out, fmt.Sprintf("%d-%d", shards[i], shards[j]))
		}
		i = j + 1
	}
	return out
}

// printCatalog prints what the catalog holds.
func printCatalog(w io.Writer, table string, st catalogState) error {
	setup, err := parseStoredSetup(st.setup)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "catalog %s: version %d; %d logical shards in schemas %s; tables %s\n",
		table, st.version, setup.LogicalShards, setup.SchemaPattern, strings.Join(setup.Tables, ", "))
	held := map[string][]int{}
	for _, row := range st.rows {
		held[row.DBName] = append(held[row.DBName], row.Shard)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "database\tdialect\tshards\tDSN")
	for _, d := range setup.Databases {
		which := "none"
		if len(held[d.Name]) > 0 {
			which = fmt.Sprintf("%d: %s", len(held[d.Name]), strings.Join(shardRanges(held[d.Name]), ", "))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Name, d.Dialect, which, maskDSN(d.DSN))
		delete(held, d.Name)
	}
	for _, n := range slices.Sorted(maps.Keys(held)) {
		fmt.Fprintf(tw, "%s\t?\t%d: %s\t(not in the setup)\n", n, len(held[n]), strings.Join(shardRanges(held[n]), ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.rows) == 0 {
		fmt.Fprintln(w, "no map yet")
	}
	return nil
}

// printCatalogJSON prints what the catalog holds as one JSON object.
func printCatalogJSON(w io.Writer, table string, st catalogState) error {
	setup, err := parseStoredSetup(st.setup)
	if err != nil {
		return err
	}
	for i := range setup.Databases {
		setup.Databases[i].DSN = maskDSN(setup.Databases[i].DSN)
	}
	held := map[string][]int{}
	for _, row := range st.rows {
		held[row.DBName] = append(held[row.DBName], row.Shard)
	}
	m := map[string][]string{}
	for n, shards := range held {
		m[n] = shardRanges(shards)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Catalog string               `json:"catalog"`
		Version int64                `json:"version"`
		Setup   reshard.CatalogSetup `json:"setup"`
		Map     map[string][]string  `json:"map"`
	}{table, st.version, setup, m})
}

// The forms of a literal password in a DSN: a URL's user:password@, libpq's
// password=..., MySQL's user:password@tcp(...).
var (
	urlPassword   = regexp.MustCompile(`^([a-z][a-z0-9+.-]*://[^:/@]*:)(.*)(@[^@]*)$`)
	kwPassword    = regexp.MustCompile(`(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']\S*)`)
	mysqlPassword = regexp.MustCompile(`^([^:/@()]*:)(.*)(@(?:tcp|unix)\(.*)$`)
	onePlacehold  = regexp.MustCompile(`^'?\$\{[A-Za-z_][A-Za-z0-9_]*\}'?$`)
)

// maskDSN replaces a literal password in dsn with xxxxx; a ${NAME}
// placeholder stays.
func maskDSN(dsn string) string {
	for _, re := range []*regexp.Regexp{urlPassword, mysqlPassword} {
		if m := re.FindStringSubmatch(dsn); m != nil {
			if m[2] == "" || onePlacehold.MatchString(m[2]) {
				return dsn
			}
			return m[1] + "xxxxx" + m[3]
		}
	}
	return kwPassword.ReplaceAllStringFunc(dsn, func(s string) string {
		m := kwPassword.FindStringSubmatch(s)
		if onePlacehold.MatchString(m[2]) {
			return s
		}
		return m[1] + "xxxxx"
	})
}
