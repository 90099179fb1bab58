package main

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
)

// Every bad flag of the catalog commands is refused with status 2 and a
// message that names it, before any database is opened (the catalog DSN
// "x" opens nothing).
func TestCatalogBadArguments(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		os.WriteFile(dir+"/"+name, []byte(text), 0o600)
		return dir + "/" + name
	}
	unknownField := write("unknown.json", `{"Databases": [{"Name": "pg1", "Dialect": "postgres", "DSN": "x"}], "LogicalShards": 4, "SchemaPattern": "s_%04d", "Tables": ["t"], "Shards": 4}`)
	twoValues := write("two.json", `{"Databases": [{"Name": "pg1", "Dialect": "postgres", "DSN": "x"}], "LogicalShards": 4, "SchemaPattern": "s_%04d", "Tables": ["t"]} {}`)
	badDialect := write("dialect.json", `{"Databases": [{"Name": "pg1", "Dialect": "oracle", "DSN": "x"}], "LogicalShards": 4, "SchemaPattern": "s_%04d", "Tables": ["t"]}`)
	good := []string{"--catalog", "x", "--database", "pg1=x", "--shards", "4", "--schema-pattern", "s_%04d"}
	with := func(extra ...string) []string {
		args := append(append([]string{"catalog", "init"}, good...), extra...)
		if !slices.Contains(extra, "--tables") {
			args = append(args, "--tables", "t")
		}
		return args
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"catalog"}, "give a subcommand: init, show or set"},
		{[]string{"catalog", "frob"}, `unknown command "frob" (want init, show or set)`},
		{[]string{"catalog", "init", "--database", "pg1=x", "--shards", "4"}, "--catalog is required"},
		{[]string{"catalog", "init", "--catalog", "x", "--database", "pg1=x", "--schema-pattern", "s_%04d", "--tables", "t"}, "--shards is required"},
		{[]string{"catalog", "init", "--catalog", "x", "--shards", "4", "--schema-pattern", "s_%04d", "--tables", "t"}, "no database: give --database NAME=DSN"},
		{with("--database", "pg2"), `--database "pg2": want NAME=DSN`},
		{with("--database", "pg 2=x"), `the name "pg 2"`},
		{with("--database", "host=db2 dbname=app"), "host= starts a DSN: want NAME=DSN"},
		{with("--database", "pg1=y"), "database pg1 is named twice"},
		{with("--shards", "0"), "--shards 0: want a number of logical shards from 1 to 8192"},
		{with("--shards", "8193"), "--shards 8193"},
		{with("--shards", "four"), `invalid argument "four" for "--shards" flag: want an integer`},
		{with("--schema-pattern", "shard"), `schema pattern "shard": want exactly one %d verb`},
		{with("--schema-pattern", "Shard_%d"), `gives the schema "Shard_0": want a lowercase SQL name`},
		{with("--schema-pattern", ""), "no schema pattern: give --schema-pattern"},
		{with("--tables", "t,T"), `table "T": want a lowercase SQL name`},
		{with("--tables", "t,t"), "table t is named twice"},
		{with("--tables", ""), "no tables: give --tables"},
		{with("--all-on", "pg9"), "--all-on pg9: not a database of the setup (it has pg1)"},
		{with("--all-on", "pg1", "--map", "m.json"), "give --all-on or --map, not both"},
		{with("--catalog-table", "T;"), `--catalog-table "T;"`},
		{with("extra"), `unexpected argument "extra"`},
		{with("--from", "f.json"), "give the setup with flags or --from FILE, not both"},
		{[]string{"catalog", "init", "--catalog", "x", "--from", dir + "/none.json"}, "--from: open " + dir + "/none.json: no such file"},
		{[]string{"catalog", "init", "--catalog", "x", "--from", unknownField}, `json: unknown field "Shards"`},
		{[]string{"catalog", "init", "--catalog", "x", "--from", twoValues}, "more than one JSON value"},
		{[]string{"catalog", "init", "--catalog", "x", "--from", badDialect}, `database pg1: dialect "oracle": want postgres or mysql`},
		{[]string{"catalog", "show"}, "--catalog is required"},
		{[]string{"catalog", "show", "--catalog", "x", "more"}, `unexpected argument "more"`},
		{[]string{"catalog", "set", "--catalog", "x"}, "nothing to change: give --database, --remove-database, --tables or --from"},
		{[]string{"catalog", "set", "--catalog", "x", "--database", "pg3=x", "--remove-database", "pg3"}, "--database and --remove-database both name pg3"},
		{[]string{"catalog", "set", "--catalog", "x", "--database", "pg3=x", "--database", "pg3=y"}, "--database pg3 is given twice"},
		{[]string{"catalog", "set", "--catalog", "x", "--from", "f.json", "--tables", "t"}, "give --from FILE alone"},
		{[]string{"catalog", "set", "--catalog", "x", "--tables", "A"}, `--tables "A"`},
	} {
		code, out, errs := shardidCmd(t, "", tc.args...)
		if code != 2 || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("shardid %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out, errs, tc.want)
		}
	}
}

// catalog init refuses a DSN with a literal password, as SaveSetup does,
// and writes nothing; a ${NAME} placeholder is stored as it is, expanded
// from the environment to open the database, and shown as it is.
func TestCatalogPasswords(t *testing.T) {
	dsn1, db1 := freshPostgres(t)
	dsn2, _ := freshPostgres(t)
	args := []string{"catalog", "init", "--catalog", dsn1, "--database", "pg1=" + dsn1, "--shards", "2", "--schema-pattern", "pw_%04d", "--tables", "t"}
	for _, dsn := range []string{dsn2 + " password=secret", strings.Replace(dsn2, "host=127.0.0.1", "host='127.0.0.1' password='s3 cret'", 1)} {
		code, out, errs := shardidCmd(t, "", append(args, "--database", "pg2="+dsn)...)
		if code != 2 || out != "" || !strings.Contains(errs, "a DSN in the catalog's setup carries a literal password") ||
			!strings.Contains(errs, "database pg2") || strings.Contains(errs, "secret") && !strings.Contains(errs, "--database") {
			t.Errorf("init with a password: exit %d, %q, %q", code, out, errs)
		}
		if missing, err := missingCatalogTable(context.Background(), db1, ""); err != nil || missing == "" {
			t.Errorf("a refused init created the catalog's tables (%v)", err)
		}
	}
	// The test server trusts its clients: any password opens it.
	t.Setenv("SHARDID_CLI_PG2_PASSWORD", "from the environment")
	code, out, errs := shardidCmd(t, "", append(args, "--database", "pg2="+dsn2+" password=${SHARDID_CLI_PG2_PASSWORD}")...)
	if code != 0 || !strings.Contains(out, "password=${SHARDID_CLI_PG2_PASSWORD}") {
		t.Fatalf("init with a placeholder: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, _ := shardidCmd(t, "", "catalog", "show", "--catalog", dsn1); code != 0 || !strings.Contains(out, "password=${SHARDID_CLI_PG2_PASSWORD}") || strings.Contains(out, "from the environment") {
		t.Errorf("show:\n%s", out)
	}
	// A password a program stored (Catalog.AllowPasswords) is masked.
	c := &reshard.Catalog{DB: db1, AllowPasswords: true}
	if err := c.SaveSetup(context.Background(), reshard.CatalogSetup{Databases: []reshard.CatalogDatabase{
		{Name: "pg1", Dialect: "postgres", DSN: dsn1 + " password=hunter2"}, {Name: "pg2", Dialect: "postgres", DSN: dsn2}},
		LogicalShards: 2, SchemaPattern: "pw_%04d", Tables: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	for _, extra := range [][]string{nil, {"--json"}} {
		code, out, _ := shardidCmd(t, "", append([]string{"catalog", "show", "--catalog", dsn1}, extra...)...)
		if code != 0 || strings.Contains(out, "hunter2") || !strings.Contains(out, "password=xxxxx") {
			t.Errorf("show %v with a stored password:\n%s", extra, out)
		}
	}
}

// maskDSN masks a literal password in every form the drivers read, and
// leaves placeholders and DSNs without a password as they are.
func TestMaskDSN(t *testing.T) {
	for in, want := range map[string]string{
		"host=db user=app password=s3cret dbname=app":       "host=db user=app password=xxxxx dbname=app",
		"host=db password='a b\\' c' dbname=app":            "host=db password=xxxxx dbname=app",
		"host=db password=${PG_PW} dbname=app":              "host=db password=${PG_PW} dbname=app",
		"host=db user=app dbname=app":                       "host=db user=app dbname=app",
		"postgres://app:s3cret@db:5432/app?sslmode=disable": "postgres://app:xxxxx@db:5432/app?sslmode=disable",
		"postgres://app:p@ss@db/app":                        "postgres://app:xxxxx@db/app",
		"postgres://app:${PG_PW}@db/app":                    "postgres://app:${PG_PW}@db/app",
		"postgres://app@db/app":                             "postgres://app@db/app",
		"app:s3cret@tcp(db:3306)/app?parseTime=true":        "app:xxxxx@tcp(db:3306)/app?parseTime=true",
		"app:p@ss@tcp(db:3306)/app":                         "app:xxxxx@tcp(db:3306)/app",
		"app:${MY_PW}@tcp(db:3306)/app":                     "app:${MY_PW}@tcp(db:3306)/app",
		"root@tcp(127.0.0.1:3306)/test?parseTime=true":      "root@tcp(127.0.0.1:3306)/test?parseTime=true",
		"app:s3cret@unix(/var/run/mysqld/mysqld.sock)/app":  "app:xxxxx@unix(/var/run/mysqld/mysqld.sock)/app",
	} {
		if got := maskDSN(in); got != want {
			t.Errorf("maskDSN(%q) = %q, want %q", in, got, want)
		}
	}
}

// catalog set adds a database, gives one a new DSN, replaces the tables
// and removes a database that holds no shard; it refuses to remove one
// that holds shards, to change the number of shards or the schema
// pattern, and a database that does not answer, leaving the setup as it
// was.
func TestCatalogSet(t *testing.T) {
	dsn1, _ := freshPostgres(t)
	dsn2, _ := freshPostgres(t)
	dsn3, _ := freshPostgres(t)
	base := []string{"--catalog", dsn1, "--catalog-table", "set_catalog"}
	cmd := func(args ...string) (int, string, string) {
		t.Helper()
		code, out, errs := shardidCmd(t, "", append(append([]string{"catalog"}, args[0]), append(base, args[1:]...)...)...)
		t.Logf("$ shardid catalog %s ...\n%s%s", args[0], out, errs)
		return code, out, errs
	}
	if code, _, errs := cmd("set", "--tables", "t"); code != 1 || !strings.Contains(errs, "no catalog there: table set_catalog does not exist (create it with shardid catalog init") {
		t.Fatalf("set before init: %d %s", code, errs)
	}
	if code, _, errs := cmd("init", "--database", "pg1="+dsn1, "--database", "pg2="+dsn2, "--shards", "4", "--schema-pattern", "set_%04d", "--tables", "t"); code != 0 {
		t.Fatalf("init: %d %s", code, errs)
	}
	code, out, errs := cmd("set", "--database", "pg3="+dsn3, "--tables", "t,u")
	if code != 0 || !strings.Contains(out, "changed the setup of catalog set_catalog (its map is unchanged, version 1)") ||
		!strings.Contains(squash(out), "tables t, u") || !strings.Contains(squash(out), "pg3 postgres none "+dsn3) {
		t.Errorf("set --database pg3 --tables t,u: %d\n%s\n%s", code, out, errs)
	}
	if code, _, errs := cmd("set", "--remove-database", "pg1"); code != 1 || !strings.Contains(errs, "database pg1 holds logical shards 0-1: it must stay in the setup; move them away first") {
		t.Errorf("removing pg1: %d %s", code, errs)
	}
	if code, _, errs := cmd("set", "--remove-database", "pg9"); code != 2 || !strings.Contains(errs, "--remove-database pg9: not a database of the setup (it has pg1, pg2, pg3)") {
		t.Errorf("removing pg9: %d %s", code, errs)
	}
	before := showCatalog(t, dsn1)
	// pg3 given the DSN of a port nothing listens on: refused, unchanged.
	bad := testdb.WithPostgresField(testdb.WithPostgresField(dsn3, "port", "1"), "connect_timeout", "2")
	if code, out, errs := cmd("set", "--database", "pg3="+bad); code != 1 || !strings.Contains(errs, "database pg3") || !strings.Contains(out, "stays as it was") {
		t.Errorf("a database that does not answer: %d\n%s\n%s", code, out, errs)
	}
	// pg2 given pg1's DSN: one database under two names, refused.
	if code, _, errs := cmd("set", "--database", "pg2="+dsn1); code != 1 || !strings.Contains(errs, "are one database") {
		t.Errorf("two names for one database: %d %s", code, errs)
	}
	if after := showCatalog(t, dsn1); after != before {
		t.Errorf("refused changes changed the catalog:\n%s\n%s", before, after)
	}
	if code, out, _ := cmd("set", "--remove-database", "pg3"); code != 0 || strings.Contains(out, "pg3") {
		t.Errorf("removing pg3: %d\n%s", code, out)
	}
	if code, out, _ := cmd("set", "--tables", "t,u"); code != 0 || !strings.Contains(out, "the setup of catalog set_catalog is unchanged") {
		t.Errorf("a change to nothing: %d\n%s", code, out)
	}
	file := t.TempDir() + "/setup.json"
	os.WriteFile(file, []byte(`{"Databases": [{"Name": "pg1", "Dialect": "postgres", "DSN": "`+dsn1+`"}, {"Name": "pg2", "Dialect": "postgres", "DSN": "`+dsn2+`"}],
		"LogicalShards": 8, "SchemaPattern": "set_%04d", "Tables": ["t"]}`), 0o600)
	if code, _, errs := cmd("set", "--from", file); code != 2 || !strings.Contains(errs, "--from: 8 logical shards in schemas set_%04d, and the catalog has 4 in set_%04d") {
		t.Errorf("--from with another number of shards: %d %s", code, errs)
	}
	os.WriteFile(file, []byte(`{"Databases": [{"Name": "pg1", "Dialect": "postgres", "DSN": "`+dsn1+`"}, {"Name": "pg2", "Dialect": "postgres", "DSN": "`+dsn2+`"}],
		"LogicalShards": 4, "SchemaPattern": "set_%04d", "Tables": ["v"]}`), 0o600)
	if code, out, errs := cmd("set", "--from", file); code != 0 || !strings.Contains(out, "tables v\n") {
		t.Errorf("--from: %d\n%s\n%s", code, out, errs)
	}
}

func showCatalog(t *testing.T, dsn string) string {
	t.Helper()
	code, out, errs := shardidCmd(t, "", "catalog", "show", "--catalog", dsn, "--catalog-table", "set_catalog", "--json")
	if code != 0 {
		t.Fatalf("show: %d %s", code, errs)
	}
	return out
}
