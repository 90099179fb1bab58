package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gorm.io/gorm"
)

func newCatalogCmd(s *streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "catalog init|show|set",
		Short: "create, show and change the catalog that move and rebalance read",
		Long: "A catalog is three tables in one database (PostgreSQL or MySQL/MariaDB): the shard map, its\n" +
			"version, and the setup (the databases with their DSNs, the number of logical shards, the schema\n" +
			"pattern and the tables of a shard). Routers follow its map; shardid move and rebalance build\n" +
			"everything from it. No literal password is stored: write ${NAME} for it (read from the\n" +
			"environment of whoever loads the catalog) or leave it out (~/.pgpass).",
		Example: "  shardid catalog init --catalog \"$CATALOG\" --database pg1=\"$CATALOG\" --database pg2='host=db2 user=app dbname=app' \\\n" +
			"      --shards 16 --schema-pattern demo_%04d --tables demo_photos,demo_comments --all-on pg1\n" +
			"  shardid catalog show --catalog \"$CATALOG\"\n" +
			"  shardid catalog set --catalog \"$CATALOG\" --database pg3='host=db3 user=app password=${PG3_PASSWORD} dbname=app'",
		// A subcommand is required: without one (or with an unknown one)
		// the command line is wrong.
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return badFlag("give a subcommand: init, show or set")
			}
			return badFlag("unknown command %q (want init, show or set)", args[0])
		},
	}
	cmd.AddCommand(newCatalogInitCmd(s), newCatalogShowCmd(s), newCatalogSetCmd(s))
	return cmd
}

// catalogFlags are the flags that name the catalog, common to the catalog
// subcommands.
type catalogFlags struct {
	dsn, table string
}

func (f *catalogFlags) define(fs *pflag.FlagSet) {
	fs.StringVar(&f.dsn, "catalog", "", "the `DSN` of the catalog database (PostgreSQL, or MySQL with user@tcp(...)/db) (required)")
	fs.StringVar(&f.table, "catalog-table", "", "the catalog table `T` (default shardid_shard_map)")
}

func (f *catalogFlags) check() error {
	if f.dsn == "" {
		return badFlag("--catalog is required")
	}
	if f.table != "" {
		return checkName("catalog-table", f.table)
	}
	return nil
}

// tableName is the catalog's table, with its default.
func (f *catalogFlags) tableName() string {
	if f.table == "" {
		return "shardid_shard_map"
	}
	return f.table
}

// setupFlags are the flags that make or change a setup.
type setupFlags struct {
	databases []string // NAME=DSN
	shards    int
	pattern   string
	tables    []string
	from      string
}

func (f *setupFlags) defineDatabases(fs *pflag.FlagSet) {
	fs.StringArrayVar(&f.databases, "database", nil, "a database as `NAME=DSN` (repeat the flag for each); a MySQL DSN names its protocol, user@tcp(host:3306)/db")
	fs.StringSliceVar(&f.tables, "tables", nil, "the tables of every logical shard, as `T1,T2`, in the order to move them")
	fs.StringVar(&f.from, "from", "", "read the setup from this JSON `FILE` (the \"setup\" of shardid catalog show --json) instead of the flags")
}

// dbName is what the command accepts as a database's name in the map.
var dbName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$`)

// parseDatabase parses --database NAME=DSN.
func parseDatabase(v string) (reshard.CatalogDatabase, error) {
	name, dsn, ok := strings.Cut(v, "=")
	if !ok || dsn == "" {
		return reshard.CatalogDatabase{}, badFlag("--database %q: want NAME=DSN, such as pg2='host=db2 user=app dbname=app'", v)
	}
	if !dbName.MatchString(name) {
		return reshard.CatalogDatabase{}, badFlag("--database %q: the name %q: want letters, digits, _ . or -, at most 63, such as pg2", v, name)
	}
	switch name {
	case "host", "hostaddr", "port", "user", "dbname", "password", "sslmode":
		return reshard.CatalogDatabase{}, badFlag("--database %q: %s= starts a DSN: want NAME=DSN, such as pg2='%s'", v, name, v)
	}
	return reshard.CatalogDatabase{Name: name, Dialect: dialectOf(dsn), DSN: dsn}, nil
}

// readSetupFile reads a setup from a JSON file, strictly.
func readSetupFile(path string) (reshard.CatalogSetup, error) {
	var setup reshard.CatalogSetup
	b, err := os.ReadFile(path)
	if err != nil {
		return setup, badFlag("--from: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&setup); err != nil {
		return setup, badFlag("--from %s: not a catalog setup: %v (want {\"Databases\": [{\"Name\": ..., \"Dialect\": ..., \"DSN\": ...}], \"LogicalShards\": N, \"SchemaPattern\": ..., \"Tables\": [...]})", path, err)
	}
	if dec.More() {
		return setup, badFlag("--from %s: more than one JSON value", path)
	}
	return setup, nil
}

// checkSetup refuses a setup that move and rebalance could not use, before
// any database is opened.
func checkSetup(setup reshard.CatalogSetup, where string) error {
	if len(setup.Databases) == 0 {
		return badFlag("%s: no database: give --database NAME=DSN, one for each", where)
	}
	var names []string
	for _, d := range setup.Databases {
		switch {
		case !dbName.MatchString(d.Name):
			return badFlag("%s: database name %q: want letters, digits, _ . or -, at most 63", where, d.Name)
		case slices.Contains(names, d.Name):
			return badFlag("%s: database %s is named twice", where, d.Name)
		case d.DSN == "":
			return badFlag("%s: database %s has no DSN", where, d.Name)
		case d.Dialect != "postgres" && d.Dialect != "mysql":
			return badFlag("%s: database %s: dialect %q: want postgres or mysql", where, d.Name, d.Dialect)
		}
		names = append(names, d.Name)
	}
	if setup.LogicalShards < 1 || setup.LogicalShards > shardid.Instagram.Shards() {
		return badFlag("%s: %d logical shards: want a number of logical shards from 1 to %d", where, setup.LogicalShards, shardid.Instagram.Shards())
	}
	if err := checkPattern(setup.SchemaPattern, setup.LogicalShards); err != nil {
		return badFlag("%s: %v", where, err)
	}
	if len(setup.Tables) == 0 {
		return badFlag("%s: no tables: give --tables, the tables of every logical shard", where)
	}
	for i, t := range setup.Tables {
		if !sqlName.MatchString(t) {
			return badFlag("%s: table %q: want a lowercase SQL name, %s", where, t, sqlName)
		}
		if slices.Contains(setup.Tables[:i], t) {
			return badFlag("%s: table %s is named twice", where, t)
		}
	}
	return nil
}

// intVerb is the verb a schema pattern has: %d, %04d.
var intVerb = regexp.MustCompile(`%0?[1-9]?d`)

// checkPattern refuses a schema pattern the router would refuse: one %d
// verb, distinct schema names shardid accepts.
func checkPattern(p string, shards int) error {
	if p == "" {
		return errors.New("no schema pattern: give --schema-pattern, such as shard_%04d (moves need a schema, on MySQL a database, per logical shard)")
	}
	if strings.Count(p, "%") != 1 || !intVerb.MatchString(p) {
		return fmt.Errorf("schema pattern %q: want exactly one %%d verb, such as shard_%%04d", p)
	}
	first, last := fmt.Sprintf(p, 0), fmt.Sprintf(p, shards-1)
	for _, n := range []string{first, last} {
		if !sqlName.MatchString(n) {
			return fmt.Errorf("schema pattern %q gives the schema %q: want a lowercase SQL name, %s", p, n, sqlName)
		}
	}
	return nil
}

// openCatalog opens the catalog's database.
func openCatalog(f *catalogFlags) (*gorm.DB, *reshard.Catalog, error) {
	db, err := openDSN(dialectOf(f.dsn), f.dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("--catalog: %w", err)
	}
	return db, &reshard.Catalog{DB: db, Table: f.table}, nil
}

// catalogState is what a catalog holds, read as stored: the setup with its
// ${NAME} placeholders, not expanded.
type catalogState struct {
	tables  bool   // its tables exist
	version int64  // 0: no map
	setup   string // the setup's JSON, "" for none
	rows    []struct {
		Shard  int
		DBName string
	}
}

// readCatalog reads what the catalog holds; it only reads.
func readCatalog(ctx context.Context, db *gorm.DB, c *reshard.Catalog, table string) (catalogState, error) {
	var st catalogState
	if missing, err := missingCatalogTable(ctx, db, c.Table); err != nil || missing != "" {
		return st, err
	}
	st.tables = true
	v, err := c.Version(ctx)
	if err != nil {
		return st, err
	}
	st.version = v
	db = db.WithContext(ctx)
	if err := db.Raw("SELECT setup FROM " + table + "_setup WHERE id = 1").Scan(&st.setup).Error; err != nil {
		return st, err
	}
	if err := db.Raw("SELECT shard, db_name FROM " + table + " ORDER BY shard").Scan(&st.rows).Error; err != nil {
		return st, err
	}
	return st, nil
}

// parseStoredSetup decodes the setup as the catalog stores it.
func parseStoredSetup(text string) (reshard.CatalogSetup, error) {
	var setup reshard.CatalogSetup
	if text == "" {
		return setup, errors.New("the catalog has no setup: create it with shardid catalog init")
	}
	if err := json.Unmarshal([]byte(text), &setup); err != nil {
		return setup, fmt.Errorf("the catalog's setup: %w", err)
	}
	return setup, nil
}

// openSetup opens every database of the setup the catalog holds (its DSNs
// expanded), and a router over them with map m (nil: the router's even
// split). It changes nothing.
func openSetup(ctx context.Context, c *reshard.Catalog, m []int) (*catalogRouter, error) {
	cr := &catalogRouter{c: c}
	setup, err := c.LoadSetup(ctx)
	if err != nil {
		return nil, err
	}
	cr.setup = setup
	var names []string
	for _, d := range setup.Databases {
		db, err := openDSN(d.Dialect, d.DSN)
		if err != nil {
			cr.close()
			return nil, fmt.Errorf("database %s: %w", d.Name, err)
		}
		cr.dbs = append(cr.dbs, db)
		names = append(names, d.Name)
	}
	cr.r, err = shardid.NewRouter(shardid.RouterConfig{Databases: cr.dbs, Names: names,
		LogicalShards: setup.LogicalShards, SchemaPattern: setup.SchemaPattern, Map: m})
	if err != nil {
		cr.close()
		return nil, fmt.Errorf("the setup: %w", err)
	}
	return cr, nil
}

// findSchemas returns, for each logical shard of r, the indexes of the
// databases that hold its schema (on MySQL, its database).
func findSchemas(ctx context.Context, r *shardid.Router) ([][]int, error) {
	found := make([][]int, r.LogicalShards())
	index := map[string]int{}
	for s := range r.LogicalShards() {
		index[r.Schema(s)] = s
	}
	for d, db := range r.Databases() {
		q := "SELECT schema_name FROM information_schema.schemata"
		if db.Dialector.Name() == "postgres" {
			q = "SELECT nspname FROM pg_namespace" // every schema, not only those the role may use
		}
		var schemas []string
		if err := db.WithContext(ctx).Raw(q).Scan(&schemas).Error; err != nil {
			return nil, fmt.Errorf("database %s: listing its schemas: %w", r.Names()[d], err)
		}
		for _, sc := range schemas {
			if s, ok := index[sc]; ok {
				found[s] = append(found[s], d)
			}
		}
	}
	return found, nil
}

// checkMapFindsShards refuses a map that puts a shard on a database that
// lacks its schema while another database holds it: routers would write
// the shard's rows where nobody reads them. It returns how many shards
// have no schema anywhere yet.
func checkMapFindsShards(ctx context.Context, r *shardid.Router) (int, error) {
	found, err := findSchemas(ctx, r)
	if err != nil {
		return 0, err
	}
	names, m := r.Names(), r.Map()
	var wrong []string
	none := 0
	for s, ds := range found {
		switch {
		case len(ds) == 0:
			none++
		case !slices.Contains(ds, m[s]):
			var on []string
			for _, d := range ds {
				on = append(on, names[d])
			}
			wrong = append(wrong, fmt.Sprintf("shard %d (%s) is on %s, not on %s", s, r.Schema(s), strings.Join(on, " and "), names[m[s]]))
		}
	}
	if len(wrong) > 3 {
		wrong = append(wrong[:3], fmt.Sprintf("and %d more", len(wrong)-3))
	}
	if len(wrong) > 0 {
		return none, fmt.Errorf("the map does not say where the shards are: %s; give --all-on NAME or --map FILE", strings.Join(wrong, "; "))
	}
	return none, nil
}
