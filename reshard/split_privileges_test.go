package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/shardid/shardid/shardmap"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// A deployment with no superuser in it: a role that owns the monolith's
// tables (it runs the migrations, and the split) and an application's role
// that may only read and write their rows.

// dbName is the database of e's database i.
func (e *splitEnv) dbName(i int) string {
	var name string
	e.dbs[i].Raw("SELECT current_database()").Scan(&name)
	return name
}

// asRolePG returns a copy of e whose databases, catalog and split
// configuration are opened as role (PostgreSQL), and share e's map.
func (e *splitEnv) asRolePG(t *testing.T, role string) *splitEnv {
	t.Helper()
	c := *e
	c.dsns = nil
	for _, dsn := range e.dsns {
		c.dsns = append(c.dsns, testdb.WithPostgresField(dsn, "user", role))
	}
	c.dbs = openEach(t, "postgres", c.dsns, nil)
	c.cat = &reshard.Catalog{DB: c.dbs[0]}
	c.cfg.DBs, c.cfg.Catalog = c.dbs, c.cat
	return &c
}

// withRolesPG gives every table of e's monolith (the catalog's too) to a
// new role, the owner, which may create schemas on the targets and in the
// monolith's schema, and grants a new role, the application's, SELECT,
// INSERT, UPDATE and DELETE on the sharded tables (and SELECT on the
// catalog, which its routers read). It returns e as each.
func (e *splitEnv) withRolesPG(t *testing.T) (owner, app *splitEnv) {
	t.Helper()
	var create []string
	for i := 1; i < len(e.dbs); i++ {
		create = append(create, "GRANT CREATE ON DATABASE "+e.dbName(i)+" TO %[1]s")
	}
	o := testdb.PostgresRole(t, "splitowner", create...)
	a := testdb.PostgresRole(t, "splitapp")
	var tables []string
	e.dbs[0].Raw("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").Scan(&tables)
	stmts := []string{`GRANT SELECT, INSERT, UPDATE, DELETE ON users, photos, comments TO "` + a + `"`, `GRANT CREATE ON SCHEMA public TO "` + o + `"`}
	for _, tb := range tables {
		stmts = append(stmts, `ALTER TABLE "`+tb+`" OWNER TO "`+o+`"`)
		if strings.HasPrefix(tb, "shardid_") { // the catalog, which routers read
			stmts = append(stmts, `GRANT SELECT ON "`+tb+`" TO "`+a+`"`)
		}
	}
	for _, q := range stmts {
		if err := e.dbs[0].Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	return e.asRolePG(t, o), e.asRolePG(t, a)
}

// TestSplitWithoutSuperuserPostgres splits a monolith as the role that owns
// its tables, not a superuser, while an application's role that may only
// read and write rows writes through the map, then rolls a batch back:
// every acknowledged write is found once, the application's role reads and
// writes every shard's schema on its target (no "permission denied for
// schema"), and the owner owns each copy, the fence's objects with it, as
// it owned the monolith's tables. Before this, the split's last step
// (emptying the monolith) was refused by its own trigger, and the
// application's role could not use a single shard once it was split.
func TestSplitWithoutSuperuserPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const shards, users = 8, 100
	e := newSplitEnvPG(t, shards, users, 3, 2)
	owner, app := e.withRolesPG(t)
	// A database whose new functions PUBLIC may not execute: the split
	// grants its check function to the roles that use the tables.
	if err := e.dbs[0].Exec(`ALTER DEFAULT PRIVILEGES FOR ROLE "` + owner.roleName() + `" REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC`).Error; err != nil {
		t.Fatal(err)
	}
	w := newSplitWriters(app)
	wctx, stop := context.WithCancel(ctx)
	wg := w.run(wctx, 4, users)
	time.Sleep(200 * time.Millisecond)
	plan, err := reshard.PlanSplit(ctx, owner.cfg, []string{"pg_a", "pg_b"}, 4)
	if err != nil {
		stop()
		wg.Wait()
		t.Fatalf("the plan, as the tables' owner: %v", err)
	}
	if err := reshard.RunSplit(ctx, owner.cfg, plan, reshard.SplitOptions{}, nil); err != nil {
		stop()
		wg.Wait()
		t.Fatalf("the split, as the tables' owner: %v", err)
	}
	// The application may call the split's check; PUBLIC may not.
	var may struct{ App, Public bool }
	e.dbs[0].Raw(`SELECT has_function_privilege(?, 'shardid_split_sealed(integer)', 'EXECUTE') AS app,
		EXISTS (SELECT 1 FROM pg_proc p, aclexplode(p.proacl) a WHERE p.proname = 'shardid_split_sealed' AND a.grantee = 0) AS public`, app.roleName()).Scan(&may)
	if !may.App || may.Public {
		t.Errorf("shardid_split_sealed: the application's role may execute it: %v (want true); PUBLIC: %v (want false)", may.App, may.Public)
	}
	// Every shard, as the application: a write to its home.
	v := e.m.Load()
	for s := range shards {
		err := app.dbs[v.DB(s)].Exec(`UPDATE "`+v.Schema(s)+`".users SET name = name WHERE id = ?`, s).Error
		if err != nil {
			t.Errorf("shard %d, as the application's role: %v", s, err)
		}
	}
	// The owners, and nothing more for the application than it had.
	for d := 1; d < len(e.dbs); d++ {
		var wrong []string
		e.dbs[d].Raw(`SELECT n.nspname || '.' || c.relname || ' (' || pg_get_userbyid(c.relowner) || ')' FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname LIKE 'shard\_%' AND pg_get_userbyid(c.relowner) <> ?
			UNION ALL SELECT nspname || ' (' || pg_get_userbyid(nspowner) || ')' FROM pg_namespace WHERE nspname LIKE 'shard\_%' AND pg_get_userbyid(nspowner) <> ?
			UNION ALL SELECT n.nspname || '.' || p.proname || '() (' || pg_get_userbyid(p.proowner) || ')' FROM pg_proc p
			JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname LIKE 'shard\_%' AND pg_get_userbyid(p.proowner) <> ?`,
			owner.roleName(), owner.roleName(), owner.roleName()).Scan(&wrong)
		if len(wrong) > 0 {
			t.Errorf("%s: not the tables' owner's: %v", e.names[d], wrong)
		}
		var extra []string
		e.dbs[d].Raw(`SELECT n.nspname || '.' || c.relname || ' ' || p FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
			unnest(ARRAY['TRUNCATE', 'TRIGGER', 'REFERENCES']) AS p
			WHERE n.nspname LIKE 'shard\_%' AND c.relkind = 'r' AND has_table_privilege(?, c.oid, p)`, app.roleName()).Scan(&extra)
		if len(extra) > 0 {
			t.Errorf("%s: the application's role holds privileges it did not hold on the monolith: %v", e.names[d], extra)
		}
	}
	// A batch rolled back, by the owner, the writers still writing.
	if _, err := reshard.RollbackSplit(ctx, owner.cfg, []int{0, 1}, reshard.RollbackOptions{AfterLastBatch: true}); err != nil {
		stop()
		wg.Wait()
		t.Fatalf("the roll-back, as the tables' owner: %v", err)
	}
	stopWriters(t, w, stop, wg.Wait)
	w.e = e // checked as the superuser, who reads the fences' states too
	w.checkBack(t, []int{0, 1}, w.wantRows(users, 3, 2))
}

// roleName is the role e's first database is opened as.
func (e *splitEnv) roleName() string {
	var r string
	e.dbs[0].Raw("SELECT current_user").Scan(&r)
	return r
}

// TestSplitRefusesAMoverWithoutPrivilegesPostgres: run by the application's
// role (rows only), the plan refuses, naming each privilege it lacks and
// the GRANT, and a batch run anyway changes nothing; a role that uses the
// sharded tables and may not connect to a target is refused too, and once
// granted, the plan passes.
func TestSplitRefusesAMoverWithoutPrivilegesPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	owner, app := e.withRolesPG(t)
	p, err := reshard.PlanSplit(ctx, app.cfg, []string{"pg_a", "pg_b"}, 2)
	if !errors.Is(err, reshard.ErrMoverPrivileges) || p == nil {
		t.Fatalf("the plan, as a role that may only read and write rows: %v, want ErrMoverPrivileges", err)
	}
	var got []string
	for _, r := range p.Refusals {
		if r.Kind == "privileges" {
			got = append(got, r.Table+": "+r.Detail)
		}
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{"lacks TRIGGER, TRUNCATE on table \"public\".\"users\"", "GRANT CREATE ON SCHEMA public",
		"GRANT CREATE ON DATABASE " + e.dbName(1), "GRANT CREATE ON DATABASE " + e.dbName(2), "run the split as " + owner.roleName()} {
		if !strings.Contains(all, want) {
			t.Errorf("the plan's refusals do not name %q:\n%s", want, all)
		}
	}
	_, err = reshard.SplitShards(ctx, app.cfg, []int{0}, []string{"pg_a"}, reshard.SplitOptions{})
	if !errors.Is(err, reshard.ErrMoverPrivileges) {
		t.Fatalf("a batch run anyway: %v, want ErrMoverPrivileges", err)
	}
	var state, schemas int64
	e.dbs[0].Raw("SELECT count(*) FROM pg_class WHERE relname LIKE 'shardid\\_split%'").Scan(&state)
	e.dbs[1].Raw("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'shard\\_%'").Scan(&schemas)
	if state != 0 || schemas != 0 {
		t.Errorf("the refused batch left %d objects of the split on the monolith, %d schemas on the target", state, schemas)
	}
	// The application's role may not connect to pg_b.
	db := e.dbName(2)
	e.dbs[0].Exec("REVOKE CONNECT ON DATABASE " + db + " FROM PUBLIC")
	_, err = reshard.PlanSplit(ctx, owner.cfg, []string{"pg_a", "pg_b"}, 2)
	want := fmt.Sprintf("role %s owns, reads or writes the monolith's sharded tables, and may not connect to database %s", app.roleName(), db)
	if !errors.Is(err, reshard.ErrMoverPrivileges) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "GRANT CONNECT ON DATABASE") {
		t.Fatalf("the plan with a user of the tables that may not connect to a target: %v, want ErrMoverPrivileges naming %q", err, want)
	}
	for _, r := range []string{owner.roleName(), app.roleName()} {
		e.dbs[0].Exec(`GRANT CONNECT ON DATABASE ` + db + ` TO "` + r + `"`)
	}
	if _, err := reshard.PlanSplit(ctx, owner.cfg, []string{"pg_a", "pg_b"}, 2); err != nil {
		t.Fatalf("the plan once granted: %v", err)
	}
}

// TestSplitRefusesTriggersWithoutSuperBinlogMariaDB: on a MariaDB with
// binary logging, a mover without SUPER may not create the split's
// triggers; the plan refuses, naming both fixes, and a batch run anyway
// changes nothing. Once log_bin_trust_function_creators is set, the same
// mover (no SUPER, all privileges on the monolith's and the shards'
// databases) splits the monolith.
func TestSplitRefusesTriggersWithoutSuperBinlogMariaDB(t *testing.T) {
	ctx := context.Background()
	inst := startMariaDBInstance(t, "--log-bin=mariadb-bin", "--server-id=9")
	t.Setenv("SHARDID_TEST_MYSQL_DSN", inst.DSN("test"))
	e := newSplitEnvMySQL(t, 4, 20, 2, 2)
	mover, names := e.asMoverMySQL(t, "splitmover")
	p, err := reshard.PlanSplit(ctx, mover.cfg, []string{"my_a", "my_b"}, 2)
	if !errors.Is(err, reshard.ErrMoverPrivileges) || !strings.Contains(err.Error(), "SUPER") || !strings.Contains(err.Error(), "log_bin_trust_function_creators") {
		t.Fatalf("the plan on a server with binary logging, by a mover without SUPER: %v, want ErrMoverPrivileges naming both fixes", err)
	}
	_, err = reshard.SplitShards(ctx, mover.cfg, p.Batches[0], []string{p.To[p.Batches[0][0]], p.To[p.Batches[0][1]]}, reshard.SplitOptions{})
	if !errors.Is(err, reshard.ErrMoverPrivileges) {
		t.Fatalf("a batch run anyway: %v, want ErrMoverPrivileges", err)
	}
	var n int64
	e.dbs[0].Raw("SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name LIKE 'shardid\\_split%'", names[0]).Scan(&n)
	var trig int64
	e.dbs[0].Raw("SELECT count(*) FROM information_schema.triggers WHERE trigger_schema = ?", names[0]).Scan(&trig)
	if n != 0 || trig != 0 {
		t.Errorf("the refused batch left %d tables and %d triggers of the split on the monolith", n, trig)
	}
	if err := e.dbs[0].Exec("SET GLOBAL log_bin_trust_function_creators = 1").Error; err != nil {
		t.Fatal(err)
	}
	p, err = reshard.PlanSplit(ctx, mover.cfg, []string{"my_a", "my_b"}, 2)
	if err != nil {
		t.Fatalf("the plan once log_bin_trust_function_creators = 1: %v", err)
	}
	if err := reshard.RunSplit(ctx, mover.cfg, p, reshard.SplitOptions{}, nil); err != nil {
		t.Fatalf("the split by a mover without SUPER: %v", err)
	}
	if _, err := reshard.CleanSplit(ctx, mover.cfg); err != nil {
		t.Fatal(err)
	}
	w := newSplitWriters(e)
	w.check(t, map[string]int64{"users": 20, "photos": 40, "comments": 80})
}

// TestSplitRefusesUsersWithoutTheShardsMariaDB: MySQL grants name
// databases, and a split cannot carry them, so a user that may read or
// write the monolith's sharded tables (by table, or by database) and may
// not on the shards' databases would be denied every write to a shard
// once it is split. The plan refuses, naming the GRANT of a pattern that
// covers the shards, and a batch run anyway changes nothing; once the
// GRANTs it names are run, the split runs and the user writes to every
// shard.
func TestSplitRefusesUsersWithoutTheShardsMariaDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvMySQL(t, 4, 20, 2, 2)
	var mono string
	e.dbs[0].Raw("SELECT DATABASE()").Scan(&mono)
	app := testdb.MySQLUser(t, e.dbs[0], "splitapp", "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+mono+"`.users TO %[1]s",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON `"+mono+"`.photos TO %[1]s", "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+mono+"`.comments TO %[1]s")
	reader := testdb.MySQLUser(t, e.dbs[0], "splitreader", "GRANT SELECT ON `"+mono+"`.* TO %[1]s")
	pattern := strings.TrimSuffix(e.shardsPatternMySQL(), "%") // the GRANT as run, its % single
	fixes := []string{"GRANT DELETE, INSERT, SELECT, UPDATE ON `" + pattern + "`.* TO '" + app + "'@'%'",
		"GRANT SELECT ON `" + pattern + "`.* TO '" + reader + "'@'%'"}
	_, err := reshard.PlanSplit(ctx, e.cfg, []string{"my_a", "my_b"}, 2)
	for _, fix := range fixes {
		if !errors.Is(err, reshard.ErrMoverPrivileges) || !strings.Contains(fmt.Sprint(err), fix) {
			t.Errorf("the plan with a user of the sharded tables that may not use the shards' databases: %v, want ErrMoverPrivileges naming %q", err, fix)
		}
	}
	_, err = reshard.SplitShards(ctx, e.cfg, []int{0}, []string{"my_a"}, reshard.SplitOptions{})
	if !errors.Is(err, reshard.ErrMoverPrivileges) {
		t.Fatalf("a batch run anyway: %v, want ErrMoverPrivileges", err)
	}
	var n int64
	e.dbs[0].Raw("SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?", e.m.SchemaOf(0)).Scan(&n)
	if n != 0 {
		t.Errorf("the refused batch created %s", e.m.SchemaOf(0))
	}
	for _, fix := range fixes {
		if err := e.dbs[0].Exec(fix).Error; err != nil {
			t.Fatalf("the fix the plan names, %s: %v", fix, err)
		}
	}
	p, err := reshard.PlanSplit(ctx, e.cfg, []string{"my_a", "my_b"}, 2)
	if err != nil {
		t.Fatalf("the plan once granted: %v", err)
	}
	if err := reshard.RunSplit(ctx, e.cfg, p, reshard.SplitOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	// The split granted the application's user SELECT on its state, which
	// its routers read after a write that changed no row.
	var sealed []bool
	if err := testdb.OpenMySQLUser(t, e.dsns[0], app).Raw("SELECT sealed FROM `" + mono + "`.shardid_split_state WHERE shard = 0").Scan(&sealed).Error; err != nil || len(sealed) != 1 {
		t.Errorf("the application's user reading the split's state: %v, %v", sealed, err)
	}
	v := e.m.Load()
	for s := range 4 {
		dsn := e.dsns[v.DB(s)] // without its database, which the user may not use
		dsn = dsn[:strings.Index(dsn, ")/")+2] + dsn[strings.Index(dsn, "?"):]
		db := testdb.OpenMySQLUser(t, dsn, app)
		if err := db.Exec("UPDATE `"+v.Schema(s)+"`.users SET name = name WHERE id = ?", s).Error; err != nil {
			t.Errorf("shard %d, as the application's user: %v", s, err)
		}
	}
}

// TestSplitRefusesWhatItCannotCarryPostgres: the plan refuses sharded
// tables of two owners (a shard's schema has one, and a role that is not a
// superuser may not give a table in it to another), a table with
// row-level security (its policies are not carried: the copies would show
// every row), and tables owned by a superuser when the mover is not one,
// without telling it to join the superuser's role. Meanwhile a role that
// uses the sharded tables and may not connect to a target is refused even
// when it owns them.
func TestSplitRefusesWhatItCannotCarryPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	// The tables still the superuser's; the mover may do all else.
	var create []string
	for i := 1; i < len(e.dbs); i++ {
		create = append(create, "GRANT CREATE ON DATABASE "+e.dbName(i)+" TO %[1]s")
	}
	mover := testdb.PostgresRole(t, "splitmover", create...)
	if err := e.dbs[0].Exec(`GRANT ALL ON ALL TABLES IN SCHEMA public TO "` + mover + `"; GRANT CREATE ON SCHEMA public TO "` + mover + `"`).Error; err != nil {
		t.Fatal(err)
	}
	m := e.asRolePG(t, mover)
	_, err := reshard.PlanSplit(ctx, m.cfg, []string{"pg_a", "pg_b"}, 2)
	if !errors.Is(err, reshard.ErrMoverPrivileges) || !strings.Contains(err.Error(), "role postgres, a superuser, owns the monolith's sharded tables") ||
		!strings.Contains(err.Error(), "run the split as a superuser") || strings.Contains(err.Error(), "GRANT postgres") {
		t.Errorf("the plan of tables owned by a superuser, by a mover that is not one: %v, want ErrMoverPrivileges telling to run it as a superuser", err)
	}
	// Two owners, and row-level security: refused for any mover.
	other := testdb.PostgresRole(t, "splitother")
	for _, q := range []string{`ALTER TABLE comments OWNER TO "` + other + `"`, "ALTER TABLE users ENABLE ROW LEVEL SECURITY"} {
		if err := e.dbs[0].Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	_, err = reshard.PlanSplit(ctx, e.cfg, []string{"pg_a", "pg_b"}, 2)
	for _, want := range []string{"the sharded tables belong to several roles, postgres (users, photos), " + other + " (comments)",
		`table "public"."users" has row-level security`} {
		if !errors.Is(err, reshard.ErrMoverPrivileges) || !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("the plan: %v, want ErrMoverPrivileges naming %q", err, want)
		}
	}
	_, err = reshard.SplitShards(ctx, e.cfg, []int{0}, []string{"pg_a"}, reshard.SplitOptions{})
	if !errors.Is(err, reshard.ErrMoverPrivileges) {
		t.Errorf("a batch run anyway: %v, want ErrMoverPrivileges", err)
	}
	// Fixed: one owner, no row security; the owner may not connect to
	// pg_b, which it must to use its copies.
	for _, q := range []string{`ALTER TABLE users OWNER TO "` + other + `"`, `ALTER TABLE photos OWNER TO "` + other + `"`,
		"ALTER TABLE users DISABLE ROW LEVEL SECURITY", "REVOKE CONNECT ON DATABASE " + e.dbName(2) + " FROM PUBLIC"} {
		if err := e.dbs[0].Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	_, err = reshard.PlanSplit(ctx, e.cfg, []string{"pg_a", "pg_b"}, 2)
	if want := "role " + other + " owns, reads or writes the monolith's sharded tables, and may not connect to database " + e.dbName(2); !errors.Is(err, reshard.ErrMoverPrivileges) || !strings.Contains(err.Error(), want) {
		t.Errorf("the plan: %v, want ErrMoverPrivileges naming %q", err, want)
	}
}

// TestSplitGivesTheCopiesTheirOwnerPostgres: split by a superuser, the
// copies belong to the role that owns the monolith's tables, though that
// role may not create schemas on the targets (ALTER SCHEMA ... OWNER asks
// that of the mover, not of the new owner), and a role granted privileges
// on columns only gets them on the copies' columns.
func TestSplitGivesTheCopiesTheirOwnerPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	owner := testdb.PostgresRole(t, "splitowner")
	reporter := testdb.PostgresRole(t, "splitreporter")
	// A role whose quoted name holds a space and capitals, granted with
	// the grant option: carried as it is.
	auditor := testdb.PostgresRole(t, "split Auditor")
	var tables []string
	e.dbs[0].Raw("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").Scan(&tables)
	stmts := []string{`GRANT SELECT (id, name), UPDATE (name) ON users TO "` + reporter + `"`,
		`GRANT SELECT ON users, photos TO "` + auditor + `"`, `GRANT UPDATE (name) ON users TO "` + auditor + `" WITH GRANT OPTION`}
	for _, tb := range tables {
		if !strings.HasPrefix(tb, "shardid_") {
			stmts = append(stmts, `ALTER TABLE "`+tb+`" OWNER TO "`+owner+`"`)
		}
	}
	for _, q := range stmts {
		if err := e.dbs[0].Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	plan, err := reshard.PlanSplit(ctx, e.cfg, []string{"pg_a", "pg_b"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	v := e.m.Load()
	rep := e.asRolePG(t, reporter)
	for s := range 4 {
		var owners []string
		e.dbs[v.DB(s)].Raw(`SELECT DISTINCT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = ?
			UNION SELECT DISTINCT pg_get_userbyid(c.relowner) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ?`,
			v.Schema(s), v.Schema(s)).Scan(&owners)
		if len(owners) != 1 || owners[0] != owner {
			t.Errorf("shard %d: its schema and tables belong to %v, want %s alone", s, owners, owner)
		}
		db, tbl := rep.dbs[v.DB(s)], `"`+v.Schema(s)+`".users`
		if err := db.Exec("UPDATE "+tbl+" SET name = name WHERE id = ?", s).Error; err != nil {
			t.Errorf("shard %d: the reporter's update of a column it may update: %v", s, err)
		}
		if err := db.Exec("SELECT id, name FROM " + tbl).Error; err != nil {
			t.Errorf("shard %d: the reporter's read of the columns it may read: %v", s, err)
		}
		if err := db.Exec("SELECT plan_id FROM " + tbl).Error; err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("shard %d: the reporter's read of a column it may not read: %v, want permission denied", s, err)
		}
		var may struct{ Usage, Read, Update, Other bool }
		e.dbs[v.DB(s)].Raw(`SELECT has_schema_privilege($1, $2, 'USAGE') AS usage, has_table_privilege($1, $3, 'SELECT') AS read,
			has_column_privilege($1, $3, 'name', 'UPDATE WITH GRANT OPTION') AS update, has_table_privilege($1, $3, 'DELETE') AS other`,
			auditor, v.Schema(s), tbl).Scan(&may)
		if !may.Usage || !may.Read || !may.Update || may.Other {
			t.Errorf("shard %d: %q may use its schema %v, read users %v, update its name with the grant option %v, delete %v; want true, true, true, false",
				s, auditor, may.Usage, may.Read, may.Update, may.Other)
		}
	}
}

// TestSplitTruncateRefusedUntilEverythingIsSealedPostgres: the split's
// trigger lets the mover's TRUNCATE through (the last batch empties the
// monolith with one, and a mover that is not a superuser cannot quiet the
// trigger), but only once every shard is sealed: before, a session that
// sets the mover's flag is refused like any other.
func TestSplitTruncateRefusedUntilEverythingIsSealedPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	err := e.dbs[0].Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("SELECT set_config('shardid.mover', 'on', true)").Error; err != nil {
			return err
		}
		return tx.Exec("TRUNCATE users, photos, comments").Error
	})
	if err == nil || !strings.Contains(err.Error(), "cannot be truncated while its monolith is split") {
		t.Fatalf("a TRUNCATE with the mover's flag while shards 2 and 3 are in the monolith: %v, want the split's refusal", err)
	}
	var n int64
	e.dbs[0].Raw("SELECT count(*) FROM users").Scan(&n)
	if n != 20 {
		t.Errorf("the monolith holds %d users, want 20", n)
	}
}

// TestSplitSealedBatchFinishesDespiteAPrivilegeCheckPostgres: a batch
// sealed before its flip failed takes no writes until it is run again,
// which must not be refused for a privilege the rest does not need (a
// role that uses the tables, no longer allowed to connect to a target).
func TestSplitSealedBatchFinishesDespiteAPrivilegeCheckPostgres(t *testing.T) {
	t.Parallel()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	app := testdb.PostgresRole(t, "splitapp")
	if err := e.dbs[0].Exec(`GRANT SELECT, INSERT, UPDATE, DELETE ON users, photos, comments TO "` + app + `"`).Error; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, err := reshard.SplitShards(ctx, e.cfg, []int{0}, []string{"pg_a"}, reshard.SplitOptions{OnStage: func(s string) {
		if s == "sealed" {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the batch stopped once sealed: %v", err)
	}
	if err := e.dbs[0].Exec("REVOKE CONNECT ON DATABASE " + e.dbName(1) + " FROM PUBLIC").Error; err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.SplitShards(context.Background(), e.cfg, []int{0}, []string{"pg_a"}, reshard.SplitOptions{}); err != nil {
		t.Fatalf("the sealed batch run again: %v", err)
	}
	if v := e.m.Load(); v.Shared(0) || v.DB(0) != 1 {
		t.Errorf("shard 0 on %d (shared %v), want on pg_a", v.DB(0), v.Shared(0))
	}
	// A batch that has not begun is refused.
	_, err = reshard.SplitShards(context.Background(), e.cfg, []int{1}, []string{"pg_a"}, reshard.SplitOptions{})
	if !errors.Is(err, reshard.ErrMoverPrivileges) {
		t.Errorf("a new batch: %v, want ErrMoverPrivileges", err)
	}
}

// TestSplitWarnsWhenItCannotSeeGrantsMariaDB: a mover that may not read the
// mysql database does not see other users' privileges, so the plan cannot
// check them: it says so (a warning naming the GRANT to check), rather than
// finding no user to check.
func TestSplitWarnsWhenItCannotSeeGrantsMariaDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvMySQL(t, 4, 20, 2, 2)
	mover, names := e.asMoverMySQL(t, "splitblind", "GRANT SELECT ON mysql.db TO %[1]s")
	testdb.MySQLUser(t, e.dbs[0], "splitapp", "GRANT SELECT ON `"+names[0]+"`.users TO %[1]s")
	p, err := reshard.PlanSplit(ctx, mover.cfg, []string{"my_a", "my_b"}, 2)
	if err != nil {
		t.Fatalf("the plan by a mover that cannot see other users' grants: %v", err)
	}
	found := false
	for _, w := range p.Warnings {
		found = found || w.Kind == "privileges" && strings.Contains(w.Detail, "may not read other users' privileges") && strings.Contains(w.Detail, "GRANT SELECT, INSERT, UPDATE, DELETE ON `")
	}
	if !found {
		t.Errorf("the plan's warnings %v: none says it could not check other users' privileges", p.Warnings)
	}
	// As root, who sees them, the same plan is refused.
	if _, err := reshard.PlanSplit(ctx, e.cfg, []string{"my_a", "my_b"}, 2); !errors.Is(err, reshard.ErrMoverPrivileges) {
		t.Errorf("the plan by root: %v, want ErrMoverPrivileges for the user of users", err)
	}
}

// asMoverMySQL creates a user of the test's own, name, with all privileges
// on e's databases and on its shards' (a pattern), and grants, and returns
// e as that user, and the names of e's databases.
func (e *splitEnv) asMoverMySQL(t *testing.T, name string, grants ...string) (*splitEnv, []string) {
	t.Helper()
	var names []string
	for i := range e.dbs {
		var n string
		e.dbs[i].Raw("SELECT DATABASE()").Scan(&n)
		names = append(names, n)
	}
	grants = append(grants, "GRANT ALL PRIVILEGES ON `"+e.shardsPatternMySQL()+"`.* TO %[1]s")
	for _, n := range names {
		grants = append(grants, "GRANT ALL PRIVILEGES ON `"+n+"`.* TO %[1]s")
	}
	user := testdb.MySQLUser(t, e.dbs[0], name, grants...)
	mover := *e
	mover.dbs = nil
	for _, dsn := range e.dsns {
		mover.dbs = append(mover.dbs, testdb.OpenMySQLUser(t, dsn, user))
	}
	mover.cfg.DBs, mover.cfg.Catalog = mover.dbs, &reshard.Catalog{DB: mover.dbs[0]}
	return &mover, names
}

// TestSplitAbortWithoutSuperuserPostgres: the tables' owner, not a
// superuser, stops a batch after its copy and aborts it: the copies it
// gave the owner are dropped, the monolith takes writes again, and the
// batch then splits as the owner.
func TestSplitAbortWithoutSuperuserPostgres(t *testing.T) {
	t.Parallel()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	owner, app := e.withRolesPG(t)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := reshard.SplitShards(ctx, owner.cfg, []int{0, 1}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{OnStage: func(s string) {
		if s == "copied" {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the batch stopped after its copy: %v", err)
	}
	res, err := reshard.AbortSplit(context.Background(), owner.cfg)
	if err != nil || len(res.Dropped) != 2 {
		t.Fatalf("the abort, as the owner: %+v, %v; want shards 0 and 1's copies dropped", res, err)
	}
	for d := 1; d < 3; d++ {
		var n int64
		e.dbs[d].Raw("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'shard\\_%'").Scan(&n)
		if n != 0 {
			t.Errorf("%s: %d shard schemas left after the abort", e.names[d], n)
		}
	}
	if err := app.dbs[0].Exec("UPDATE users SET name = name WHERE id = 4").Error; err != nil {
		t.Errorf("the application's write to shard 0 in the monolith after the abort: %v", err)
	}
	if _, err := reshard.SplitShards(context.Background(), owner.cfg, []int{0, 1}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{}); err != nil {
		t.Fatalf("the batch run again, as the owner: %v", err)
	}
}

// TestSplitWarnsWhenItCannotGrantTheStateMariaDB: a user of the sharded
// tables must read the split's state (its routers do, after a write that
// changed no row); the split grants it when it may, and a mover without
// the grant option is warned of it, with the GRANT to run.
func TestSplitWarnsWhenItCannotGrantTheStateMariaDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvMySQL(t, 4, 20, 2, 2)
	mover, names := e.asMoverMySQL(t, "splitnogrant", "GRANT SELECT ON mysql.* TO %[1]s")
	app := testdb.MySQLUser(t, e.dbs[0], "splitapp", "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+names[0]+"`.users TO %[1]s",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON `"+e.shardsPatternMySQL()+"`.* TO %[1]s")
	p, err := reshard.PlanSplit(ctx, mover.cfg, []string{"my_a", "my_b"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := "GRANT SELECT ON `" + names[0] + "`.`shardid_split_state` TO '" + app + "'@'%'"
	found := false
	for _, w := range p.Warnings {
		found = found || w.Kind == "privileges" && strings.Contains(w.Detail, "the mover may not grant it") && strings.Contains(w.Detail, want)
	}
	if !found {
		t.Errorf("the plan's warnings %v: none names %q", p.Warnings, want)
	}
	// As root, who may grant, no such warning.
	p, err = reshard.PlanSplit(ctx, e.cfg, []string{"my_a", "my_b"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range p.Warnings {
		if w.Kind == "privileges" {
			t.Errorf("the plan as root: %v", w)
		}
	}
}

// TestSplitGoesOnUnderAnotherRolePostgres: a split begun by a superuser
// goes on, batch by batch and in a roll-back, as the role that owns the
// tables (two operators, or one who learned that no superuser is needed):
// the superuser's runs give the split's own objects on the monolith to the
// tables' owner. Objects that a run before that left to a role the mover
// may not act as are refused, naming the fix.
func TestSplitGoesOnUnderAnotherRolePostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvPG(t, 6, 30, 2, 2)
	owner, _ := e.withRolesPG(t)
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.SplitShards(ctx, owner.cfg, []int{2, 3}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{}); err != nil {
		t.Fatalf("a batch run by the tables' owner after a superuser's: %v", err)
	}
	if _, err := reshard.RollbackSplit(ctx, owner.cfg, []int{0}, reshard.RollbackOptions{}); err != nil {
		t.Fatalf("a roll-back by the tables' owner: %v", err)
	}
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{4, 5}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.SplitShards(ctx, owner.cfg, []int{0}, []string{"pg_b"}, reshard.SplitOptions{}); err != nil {
		t.Fatalf("the last batch, by the tables' owner: %v", err)
	}
	// A split object that an earlier run left to the superuser (as an
	// earlier version did) is refused, naming the fix.
	if err := e.dbs[0].Exec("ALTER TABLE shardid_split_state OWNER TO postgres").Error; err != nil {
		t.Fatal(err)
	}
	_, err := reshard.RollbackSplit(ctx, owner.cfg, []int{1}, reshard.RollbackOptions{AfterLastBatch: true})
	if !errors.Is(err, reshard.ErrMoverPrivileges) || !strings.Contains(err.Error(), "shardid_split_state") || !strings.Contains(err.Error(), "run this one as postgres or a superuser") {
		t.Fatalf("a roll-back by the owner of a split whose state the superuser kept: %v, want ErrMoverPrivileges naming it", err)
	}
}

// shardsPatternMySQL is the grant pattern (MySQL) of e's shards'
// databases, with its % doubled, for testdb.MySQLUser's grants.
func (e *splitEnv) shardsPatternMySQL() string {
	return strings.ReplaceAll(strings.TrimSuffix(e.m.SchemaPattern(), "%04d"), "_", `\_`) + "%%"
}

// TestSplitCountsRolesMariaDB: the plan counts the privileges a user holds
// through its default role (and the roles that role holds), and a role's
// through the roles granted to it, as the server does at login. A user
// whose shard grants come by its default role passes (it was refused,
// told to GRANT what it had); one that holds the role but must SET ROLE
// to use it (which a pooled session does not keep) is refused, and so is
// one whose default role was revoked; a role that uses the monolith's
// tables and holds no grant on the shards is refused by name, with the
// users that hold it, until a role granted to it does. Once split, the user
// with the default role writes every shard.
func TestSplitCountsRolesMariaDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvMySQL(t, 4, 20, 2, 2)
	var mono string
	e.dbs[0].Raw("SELECT DATABASE()").Scan(&mono)
	pattern := strings.TrimSuffix(e.shardsPatternMySQL(), "%") // the GRANT as run, its % single
	suffix := strconv.Itoa(int(time.Now().UnixNano() % 1_000_000))
	shardsRole, monoRole := "split_shards_rw_"+suffix, "split_mono_rw_"+suffix
	monoGrants := "GRANT SELECT, INSERT, UPDATE, DELETE ON `" + mono + "`.users TO %[1]s"
	for _, q := range []string{"CREATE ROLE " + shardsRole, "CREATE ROLE " + monoRole,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON `" + pattern + "`.* TO " + shardsRole,
		fmt.Sprintf(monoGrants, monoRole)} {
		if err := e.dbs[0].Exec(q).Error; err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { e.dbs[0].Exec("DROP ROLE IF EXISTS " + shardsRole + ", " + monoRole) })
	// app: the monolith's table by a grant of its own, the shards by its
	// default role. unset: the same role, not its default. revoked: the
	// same role, its default, revoked since (MariaDB keeps the default).
	// viaRole: the monolith's table by its default role, which holds no
	// shard grant.
	app := testdb.MySQLUser(t, e.dbs[0], "splitroleapp", monoGrants, "GRANT "+shardsRole+" TO %[1]s", "SET DEFAULT ROLE "+shardsRole+" FOR %[1]s")
	unset := testdb.MySQLUser(t, e.dbs[0], "splitroleunset", monoGrants, "GRANT "+shardsRole+" TO %[1]s")
	revoked := testdb.MySQLUser(t, e.dbs[0], "splitrolerevoked", monoGrants, "GRANT "+shardsRole+" TO %[1]s", "SET DEFAULT ROLE "+shardsRole+" FOR %[1]s",
		"REVOKE "+shardsRole+" FROM %[1]s")
	viaRole := testdb.MySQLUser(t, e.dbs[0], "splitroleuser", "GRANT "+monoRole+" TO %[1]s", "SET DEFAULT ROLE "+monoRole+" FOR %[1]s")
	_, err := reshard.PlanSplit(ctx, e.cfg, []string{"my_a", "my_b"}, 2)
	refusal := func(who string) string {
		return "GRANT DELETE, INSERT, SELECT, UPDATE ON `" + pattern + "`.* TO " + who
	}
	for _, who := range []string{"'" + unset + "'@'%'", "'" + revoked + "'@'%'", monoRole, "'" + viaRole + "'@'%'"} {
		if !errors.Is(err, reshard.ErrMoverPrivileges) || !strings.Contains(err.Error(), refusal(who)) {
			t.Errorf("the plan: %v, want ErrMoverPrivileges naming %s", err, refusal(who))
		}
	}
	if !strings.Contains(fmt.Sprint(err), "role "+monoRole) {
		t.Errorf("the plan: %v, want it to name role %s as a role", err, monoRole)
	}
	if strings.Contains(fmt.Sprint(err), app) {
		t.Errorf("the plan refuses %s, whose default role may use the shards: %v", app, err)
	}
	// The role of the monolith's user holds the shards' role; the other
	// users take it as their default, or again.
	for _, q := range []string{"GRANT " + shardsRole + " TO " + monoRole, "SET DEFAULT ROLE " + shardsRole + " FOR '" + unset + "'@'%'",
		"GRANT " + shardsRole + " TO '" + revoked + "'@'%'"} {
		if err := e.dbs[0].Exec(q).Error; err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	p, err := reshard.PlanSplit(ctx, e.cfg, []string{"my_a", "my_b"}, 2)
	if err != nil {
		t.Fatalf("the plan once the roles hold the shards' grants: %v", err)
	}
	if err := reshard.RunSplit(ctx, e.cfg, p, reshard.SplitOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	v := e.m.Load()
	for s := range 4 {
		dsn := e.dsns[v.DB(s)] // without its database, which the user may not use
		dsn = dsn[:strings.Index(dsn, ")/")+2] + dsn[strings.Index(dsn, "?"):]
		if err := testdb.OpenMySQLUser(t, dsn, app).Exec("UPDATE `"+v.Schema(s)+"`.users SET name = name WHERE id = ?", s).Error; err != nil {
			t.Errorf("shard %d, as %s by its default role: %v", s, app, err)
		}
	}
}

// TestSplitOfAPartOfTheShardsWithoutSuperuserPostgres: a monolith that
// holds some of the logical shards only (the others live in schemas of
// their own already), split by the tables' owner. The split's trigger let
// the last batch's TRUNCATE through only once every shard's state was
// sealed, those of the shards the monolith never held too: the last batch
// was refused its clean-up ("cannot be truncated while its monolith is
// split"; the fault test, seed 340).
func TestSplitOfAPartOfTheShardsWithoutSuperuserPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	// Shards 2 and 3 are not the monolith's: their rows go, and the map
	// places them on the targets.
	for _, q := range []string{
		"DELETE FROM comments WHERE photo_id IN (SELECT id FROM photos WHERE user_id % 4 IN (2, 3))",
		"DELETE FROM photos WHERE user_id % 4 IN (2, 3)",
		"DELETE FROM users WHERE id % 4 IN (2, 3)",
	} {
		if err := e.dbs[0].Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	m, err := shardmap.New(shardmap.Config{Databases: e.names, LogicalShards: 4, SchemaPattern: "shard_%04d",
		Assign: []int{0, 0, 1, 2}, Shared: []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	e.m, e.cfg.Map = m, m
	e.cat = &reshard.Catalog{DB: e.dbs[0], Table: "partial_catalog"}
	e.cfg.Catalog = e.cat
	if _, err := e.cat.SaveMap(ctx, m); err != nil {
		t.Fatal(err)
	}
	owner, _ := e.withRolesPG(t)
	owner.cat = &reshard.Catalog{DB: owner.dbs[0], Table: "partial_catalog"}
	owner.cfg.Catalog = owner.cat
	res, err := reshard.SplitShards(ctx, owner.cfg, []int{0, 1}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{})
	if err != nil {
		t.Fatalf("the last batch, as the tables' owner: %v", err)
	}
	var left int64
	e.dbs[0].Raw("SELECT (SELECT count(*) FROM users) + (SELECT count(*) FROM photos) + (SELECT count(*) FROM comments)").Scan(&left)
	if left != 0 || res.Deleted == 0 {
		t.Errorf("the monolith holds %d rows after its last batch (%d deleted), want none", left, res.Deleted)
	}
}
