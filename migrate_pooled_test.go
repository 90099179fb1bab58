package shardid_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// migLockName is the name of the migration lock of the database whose
// first shard is schema, as every version of Migrate takes it (with
// hashtextextended(name, 0) on PostgreSQL): old and new processes must
// exclude each other, so it must not change.
func migLockName(schema string) string {
	h := fnv.New64a()
	h.Write([]byte(schema))
	return fmt.Sprintf("shardid:migrate:%016x", h.Sum64())
}

// pooledClients runs, until stop, clients that query and insert into the
// table probe of the public schema by its unqualified name on each of dbs,
// as an application's other processes do through the same pooler; it
// returns how many of their statements failed, and the first failure.
type pooledClients struct {
	wg    sync.WaitGroup
	stop  chan struct{}
	runs  atomic.Int64
	fails atomic.Int64
	mu    sync.Mutex
	first error
}

func startPooledClients(t *testing.T, dbs []*gorm.DB, probe string, perDB int) *pooledClients {
	t.Helper()
	c := &pooledClients{stop: make(chan struct{})}
	for _, db := range dbs {
		for range perDB {
			c.wg.Go(func() {
				for {
					select {
					case <-c.stop:
						return
					default:
					}
					err := db.Transaction(func(tx *gorm.DB) error {
						if err := tx.Exec("INSERT INTO " + probe + " (n) VALUES (1)").Error; err != nil {
							return err
						}
						var n int64
						return tx.Raw("SELECT count(*) FROM " + probe).Scan(&n).Error
					})
					if err == nil {
						var n int64
						err = db.Raw("SELECT count(*) FROM " + probe).Scan(&n).Error
					}
					c.runs.Add(1)
					if err != nil {
						c.fails.Add(1)
						c.mu.Lock()
						if c.first == nil {
							c.first = err
						}
						c.mu.Unlock()
					}
				}
			})
		}
	}
	t.Cleanup(c.end)
	return c
}

func (c *pooledClients) end() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.wg.Wait()
}

// migTables are the tables of migV1 and migV2.
var migTables = []string{"mig_users", "mig_posts", "mig_labels", "mig_post_labels", "mig_tags", "mig_counters"}

// publicMigTables returns the tables of migTables in db's public schema
// (other tests make and drop tables of their own there meanwhile).
func publicMigTables(t *testing.T, db *gorm.DB) []string {
	t.Helper()
	var names []string
	if err := db.Raw("SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename IN ? ORDER BY 1", migTables).
		Scan(&names).Error; err != nil {
		t.Fatal(err)
	}
	return names
}

// noPublicMigTables fails the test if migTables has tables in the public
// schema of dbs, and drops the ones there when it ends: what a Migrate
// whose search_path reached another connection created.
func noPublicMigTables(t *testing.T, dbs []*gorm.DB) {
	t.Helper()
	for i, db := range dbs {
		if got := publicMigTables(t, db); len(got) > 0 {
			t.Fatalf("database %d has the tables %v in public before Migrate", i, got)
		}
	}
	t.Cleanup(func() {
		for _, db := range dbs {
			for _, tb := range migTables {
				db.Exec("DROP TABLE IF EXISTS public." + tb + " CASCADE")
			}
		}
	})
}

// checkServerSessions fails the test unless every server connection of
// the pooler behind db has the default search_path: it opens size
// transactions at once, as many as the pool has server connections, so
// that each runs on a different one, several times over.
func checkServerSessions(t *testing.T, db *gorm.DB, size int) {
	t.Helper()
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := make(map[int64]bool)
	for range 5 {
		txs := make([]*sql.Tx, 0, size)
		for range size {
			tx, err := sqlDB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			txs = append(txs, tx)
			var path string
			var pid int64
			if err := tx.QueryRowContext(ctx, "SELECT current_setting('search_path'), pg_backend_pid()").Scan(&path, &pid); err != nil {
				t.Fatal(err)
			}
			seen[pid] = true
			if path != `"$user", public` {
				t.Errorf("server connection %d has search_path %s, want the default \"$user\", public", pid, path)
			}
		}
		for _, tx := range txs {
			tx.Rollback()
		}
	}
	if len(seen) < size {
		t.Logf("saw %d server connections of %d", len(seen), size)
	}
}

// checkNoMigrateLocks fails the test if a migration lock of r's shards is
// still held on direct's server: through a pooler, a session lock unlocked
// on another server connection stays held by the one it was taken on.
func checkNoMigrateLocks(t *testing.T, direct *gorm.DB, r *shardid.Router) {
	t.Helper()
	for s := range r.LogicalShards() {
		var pids []int64
		err := direct.Raw(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
			AND classid::bigint = ((hashtextextended(?, 0) >> 32) & 4294967295)
			AND objid::bigint = (hashtextextended(?, 0) & 4294967295)`,
			migLockName(r.Schema(s)), migLockName(r.Schema(s))).Scan(&pids).Error
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) > 0 {
			t.Errorf("the migration lock of %s is still held by server process %v", r.Schema(s), pids)
		}
	}
}

// TestMigrateThroughPgBouncer migrates, as a superuser and as a role that
// may only create schemas, through PgBouncer in transaction mode while
// other clients of the same user run unqualified statements on a table of
// the public schema: new shards, added columns, and a shard that goes
// through AutoMigrate. Their statements never fail, nothing lands in
// public, no server connection keeps a search_path or a lock, and the
// shards end as AutoMigrate leaves a schema.
func TestMigrateThroughPgBouncer(t *testing.T) {
	direct := []*gorm.DB{openPostgres(t), openSecondPostgres(t)}
	const poolSize = 3
	b := testdb.StartPgBouncer(t, testdb.PgBouncerOptions{PoolSize: poolSize, Databases: []string{testdb.PostgresDatabase(), "shardid_test2"}})
	const probe = "migpool_probe"
	for _, db := range direct {
		if err := db.Exec("DROP TABLE IF EXISTS public." + probe + "; CREATE TABLE public." + probe + " (n int)").Error; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, db := range direct {
			db.Exec("DROP TABLE IF EXISTS public." + probe)
		}
	})
	role := testdb.PostgresRole(t, "migrator",
		"GRANT CREATE ON DATABASE "+testdb.PostgresDatabase()+" TO %[1]s", "GRANT CREATE ON DATABASE shardid_test2 TO %[1]s",
		"GRANT SELECT, INSERT ON public."+probe+" TO %[1]s")
	if err := direct[1].Exec(`GRANT SELECT, INSERT ON public.` + probe + ` TO "` + role + `"`).Error; err != nil {
		t.Fatal(err)
	}
	b.AddUser(role)

	for _, tc := range []struct{ name, user string }{{"superuser", "postgres"}, {"role", role}} {
		t.Run(tc.name, func(t *testing.T) {
			user := tc.user
			dbs := []*gorm.DB{b.Open(testdb.PostgresDatabase(), user), b.Open("shardid_test2", user)}
			noPublicMigTables(t, direct)
			const shards = 8
			dropMigSchemas(t, direct, "migpool")
			t.Cleanup(func() { dropMigSchemas(t, direct, "migpool") })
			r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, LogicalShards: shards, SchemaPattern: "migpool_%02d"})
			if err != nil {
				t.Fatal(err)
			}
			ref := "migpool_ref"
			plainMigrate(t, direct[0], ref, migV1...)
			plainMigrate(t, direct[0], ref, migV2...)

			clients := startPooledClients(t, []*gorm.DB{b.Open(testdb.PostgresDatabase(), user), b.Open("shardid_test2", user)}, probe, 2)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			migrate := func(models []any, altered, auto int) {
				t.Helper()
				var p progressLog
				if err := r.MigrateWith(ctx, shardid.MigrateOptions{Progress: p.report, LockWait: 30 * time.Second}, models...); err != nil {
					t.Fatalf("Migrate through PgBouncer: %v", err)
				}
				if m := p.last(t, shards); m.Altered != altered || m.AutoMigrated != auto {
					t.Errorf("Migrate: %+v, want %d shards altered, %d through AutoMigrate", m, altered, auto)
				}
			}
			migrate(migV1, shards, 0)
			migrate(migV2, shards, 0)
			// A changed column type: the shard goes through AutoMigrate.
			if err := direct[r.Map()[2]].Exec(`ALTER TABLE "` + r.Schema(2) + `".mig_posts ALTER COLUMN body TYPE varchar(10)`).Error; err != nil {
				t.Fatal(err)
			}
			migrate(migV2, 1, 1)
			migrate(migV2, 0, 0)
			// MigrateSchema, which package reshard uses for a new shard.
			if err := shardid.MigrateSchema(ctx, dbs[1], "migpool_extra", migV2...); err != nil {
				t.Fatalf("MigrateSchema through PgBouncer: %v", err)
			}
			time.Sleep(200 * time.Millisecond) // the clients go on a while
			clients.end()

			if n := clients.fails.Load(); n > 0 {
				t.Errorf("%d of %d client transactions failed during Migrate; the first: %v", n, clients.runs.Load(), clients.first)
			}
			t.Logf("%d client transactions ran during Migrate", clients.runs.Load())
			for i, db := range direct {
				if got := publicMigTables(t, db); len(got) > 0 {
					t.Errorf("database %d: Migrate created the tables %v in public", i, got)
				}
			}
			sameSchemas(t, r, ref)
			for _, db := range dbs {
				checkServerSessions(t, db, poolSize)
			}
			checkNoMigrateLocks(t, direct[0], r)
			checkNoMigrateLocks(t, direct[1], r)
			for _, db := range direct {
				var tmpl []string
				if err := db.Raw("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'migpool\\_tmpl\\_%' OR nspname LIKE 'shardid\\_tmpl\\_%'").Scan(&tmpl).Error; err != nil {
					t.Fatal(err)
				}
				if len(tmpl) > 0 {
					t.Errorf("template schemas left behind: %v", tmpl)
				}
			}
		})
	}
}

// TestMigrateConcurrentThroughPgBouncer runs two Migrates of the same
// shards at once, through PgBouncer in transaction mode, from two pools as
// two processes would: both succeed, and they take turns on each
// database, so that every shard is altered by one of them only.
func TestMigrateConcurrentThroughPgBouncer(t *testing.T) {
	direct := []*gorm.DB{openPostgres(t), openSecondPostgres(t)}
	const poolSize = 2
	b := testdb.StartPgBouncer(t, testdb.PgBouncerOptions{PoolSize: poolSize, Databases: []string{testdb.PostgresDatabase(), "shardid_test2"}})
	noPublicMigTables(t, direct)
	const shards = 8
	routers := make([]*shardid.Router, 2)
	for i := range routers {
		dbs := []*gorm.DB{b.Open(testdb.PostgresDatabase(), "postgres"), b.Open("shardid_test2", "postgres")}
		if i == 0 {
			routers[i] = migRouter(t, dbs, "migpair", shards)
			continue
		}
		r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, LogicalShards: shards, SchemaPattern: "migpair_%02d"})
		if err != nil {
			t.Fatal(err)
		}
		routers[i] = r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for round, models := range [][]any{migV1, migV2} {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		logs := make([]progressLog, 2)
		for i, r := range routers {
			wg.Go(func() {
				errs[i] = r.MigrateWith(ctx, shardid.MigrateOptions{Progress: logs[i].report, LockWait: time.Minute}, models...)
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		altered := 0
		for i := range logs {
			m := logs[i].last(t, shards)
			altered += m.Altered
			if m.AutoMigrated != 0 {
				t.Errorf("round %d, Migrate %d: %+v, want no shard through AutoMigrate", round, i, m)
			}
		}
		if altered != shards {
			t.Errorf("round %d: the two Migrates altered %d shards in all, want %d: each shard once", round, altered, shards)
		}
	}
	ref := "migpair_ref"
	plainMigrate(t, direct[0], ref, migV1...)
	plainMigrate(t, direct[0], ref, migV2...)
	sameSchemas(t, routers[0], ref)
	for i, db := range direct {
		if got := publicMigTables(t, db); len(got) > 0 {
			t.Errorf("database %d: Migrate created the tables %v in public", i, got)
		}
	}
	checkNoMigrateLocks(t, direct[0], routers[0])
	checkNoMigrateLocks(t, direct[1], routers[0])
	for _, db := range routers[0].Databases() {
		checkServerSessions(t, db, poolSize)
	}
}

// TestMigrateLockHolder holds the migration lock of a database as another
// process's Migrate would (as older versions take it: a session lock on
// PostgreSQL, GET_LOCK on MySQL), and expects Migrate to give up after
// MigrateOptions.LockWait with ErrMigrateLocked, naming the holder, rather
// than to wait for ever; once the holder is gone, Migrate succeeds.
func TestMigrateLockHolder(t *testing.T) {
	for _, d := range migDialects {
		t.Run(d.name, func(t *testing.T) {
			dbs := d.open(t)
			r := migRouter(t, dbs, "migheld", 4)
			holderDB := dbs[r.Map()[0]]
			sqlDB, err := holderDB.DB()
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			conn, err := sqlDB.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var who int64
			name := migLockName(r.Schema(0))
			if d.name == "postgres" {
				if _, err := conn.ExecContext(ctx, "SET application_name = 'migheld-holder'"); err != nil {
					t.Fatal(err)
				}
				if err := conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&who); err != nil {
					t.Fatal(err)
				}
				if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(hashtextextended($1, 0))", name); err != nil {
					t.Fatal(err)
				}
				defer conn.ExecContext(ctx, "SELECT pg_advisory_unlock_all(); RESET application_name")
			} else {
				if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&who); err != nil {
					t.Fatal(err)
				}
				var got int
				if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 5)", name).Scan(&got); err != nil || got != 1 {
					t.Fatalf("GET_LOCK = %d, %v", got, err)
				}
				defer conn.ExecContext(ctx, "SELECT RELEASE_LOCK(?)", name)
			}

			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			start := time.Now()
			err = r.MigrateWith(wctx, shardid.MigrateOptions{LockWait: time.Second}, migV1...)
			took := time.Since(start)
			var se *shardid.ShardError
			if !errors.Is(err, shardid.ErrMigrateLocked) || !errors.As(err, &se) {
				t.Fatalf("Migrate behind a held lock = %v after %v, want ErrMigrateLocked in a *ShardError", err, took)
			}
			if took > 10*time.Second {
				t.Errorf("Migrate gave up after %v, want about its LockWait of 1s", took)
			}
			holder := fmt.Sprintf("process %d", who)
			if d.name != "postgres" {
				holder = fmt.Sprintf("connection %d", who)
			}
			if !strings.Contains(err.Error(), holder) {
				t.Errorf("Migrate = %v, want the holder (%s) named", err, holder)
			}
			t.Logf("Migrate behind a held lock, after %v: %v", took, err)

			if d.name == "postgres" {
				_, err = conn.ExecContext(ctx, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", name)
			} else {
				_, err = conn.ExecContext(ctx, "SELECT RELEASE_LOCK(?)", name)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := r.MigrateWith(wctx, shardid.MigrateOptions{LockWait: time.Second}, migV1...); err != nil {
				t.Fatalf("Migrate once the lock is free: %v", err)
			}
		})
	}
}

// TestMigrateMariaDBShardGrants migrates as a MariaDB user whose grants
// cover only the shards' names (`shmig\_%`.*, no default database): the
// scratch template is named after the shards, so the grant covers it too.
func TestMigrateMariaDBShardGrants(t *testing.T) {
	root := openMySQL(t)
	user := fmt.Sprintf("shardid_mig_%d", os.Getpid())
	root.Exec("DROP USER IF EXISTS '" + user + "'@'%'")
	for _, q := range []string{
		"CREATE USER '" + user + "'@'%'",
		"GRANT ALL ON `shmig\\_%`.* TO '" + user + "'@'%'",
	} {
		if err := root.Exec(q).Error; err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { root.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	dsn := testdb.EnvOr("SHARDID_TEST_MYSQL_DSN", defaultMySQLDSN)
	at := strings.Index(dsn, "@")
	slash := strings.Index(dsn, "/")
	q := strings.Index(dsn, "?")
	if at < 0 || slash < at || q < slash {
		t.Skipf("cannot rewrite the MySQL DSN %q for another user", dsn)
	}
	userDSN := user + dsn[at:slash+1] + dsn[q:]
	open := func() *gorm.DB {
		db, err := gorm.Open(mysql.Open(userDSN), testdb.GormConfig())
		if err == nil {
			err = testdb.Ping(db)
		}
		if err != nil {
			t.Fatalf("open as %s: %v", user, err)
		}
		closeAtEnd(t, db)
		return db
	}
	dbs := []*gorm.DB{open(), open()}
	const shards = 6
	dropMigSchemas(t, []*gorm.DB{root}, "shmig")
	t.Cleanup(func() { dropMigSchemas(t, []*gorm.DB{root}, "shmig") })
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, LogicalShards: shards, SchemaPattern: "shmig_%02d"})
	if err != nil {
		t.Fatal(err)
	}
	ref := "shmig_ref"
	plainMigrate(t, root, ref, migV1...)
	plainMigrate(t, root, ref, migV2...)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, models := range [][]any{migV1, migV2} {
		if err := r.Migrate(ctx, models...); err != nil {
			t.Fatalf("Migrate as %s, granted only `shmig\\_%%`.*: %v", user, err)
		}
	}
	// A changed column type: the shard goes through AutoMigrate.
	if err := root.Exec("ALTER TABLE `" + r.Schema(2) + "`.mig_posts MODIFY body varchar(10)").Error; err != nil {
		t.Fatal(err)
	}
	var p progressLog
	if err := r.MigrateWith(ctx, shardid.MigrateOptions{Progress: p.report}, migV2...); err != nil {
		t.Fatalf("Migrate as %s through AutoMigrate: %v", user, err)
	}
	if m := p.last(t, shards); m.AutoMigrated != 1 {
		t.Errorf("%+v, want one shard through AutoMigrate", m)
	}
	sameSchemas(t, r, ref)
	var left []string
	if err := root.Raw(`SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'shmig\_tmpl\_%'`).Scan(&left).Error; err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("template databases left behind: %v", left)
	}
}

// TestMigrateLockLost ends the session that holds a Migrate's lock while
// the Migrate waits on a table, and expects it to stop before its next
// shard with ErrMigrateLockLost: another Migrate may have the lock by then.
func TestMigrateLockLost(t *testing.T) {
	for _, d := range migDialects {
		t.Run(d.name, func(t *testing.T) {
			dbs := d.open(t)
			r := migRouter(t, dbs, "miglost", 8)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := r.Migrate(ctx, migV1...); err != nil {
				t.Fatal(err)
			}
			// Two shards of one database with a changed column type: they
			// go through AutoMigrate, one after the other.
			db := dbs[r.Map()[0]]
			var slow []int
			for s := range r.LogicalShards() {
				if r.Map()[s] == r.Map()[0] && len(slow) < 2 {
					slow = append(slow, s)
				}
			}
			for _, s := range slow {
				q := `ALTER TABLE "` + r.Schema(s) + `".mig_posts ALTER COLUMN body TYPE varchar(10)`
				if d.name != "postgres" {
					q = "ALTER TABLE `" + r.Schema(s) + "`.mig_posts MODIFY body varchar(10)"
				}
				if err := db.Exec(q).Error; err != nil {
					t.Fatal(err)
				}
			}
			sqlDB, err := db.DB()
			if err != nil {
				t.Fatal(err)
			}
			conn, err := sqlDB.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			unlock := "ROLLBACK"
			if d.name == "postgres" {
				if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
					t.Fatal(err)
				}
				if _, err := conn.ExecContext(ctx, `LOCK TABLE "`+r.Schema(slow[0])+`".mig_posts IN ACCESS EXCLUSIVE MODE`); err != nil {
					t.Fatal(err)
				}
			} else {
				unlock = "UNLOCK TABLES"
				if _, err := conn.ExecContext(ctx, "LOCK TABLES `"+r.Schema(slow[0])+"`.mig_posts WRITE"); err != nil {
					t.Fatal(err)
				}
			}
			defer conn.ExecContext(context.Background(), unlock)

			done := make(chan error, 1)
			go func() { done <- r.Migrate(ctx, migV2...) }()
			// The lock's session: end it as a server timeout or a
			// restart of the pooler would.
			name := migLockName(r.Schema(0))
			var holder int64
			for deadline := time.Now().Add(20 * time.Second); holder == 0; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("Migrate never took its lock")
				}
				var err error
				if d.name == "postgres" {
					err = db.Raw(`SELECT COALESCE(max(pid), 0) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
						AND classid::bigint = ((hashtextextended(?, 0) >> 32) & 4294967295)
						AND objid::bigint = (hashtextextended(?, 0) & 4294967295)`, name, name).Scan(&holder).Error
				} else {
					err = db.Raw("SELECT COALESCE(IS_USED_LOCK(?), 0)", name).Scan(&holder).Error
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			// Migrate reaches the locked table, and waits there.
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("Migrate never reached the locked table")
				}
				var waiting int64
				var err error
				if d.name == "postgres" {
					err = db.Raw(`SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = ?::regclass`,
						`"`+r.Schema(slow[0])+`".mig_posts`).Scan(&waiting).Error
				} else {
					err = db.Raw(`SELECT count(*) FROM information_schema.PROCESSLIST WHERE STATE LIKE 'Waiting for % metadata lock%' AND INFO LIKE ?`,
						"%miglost\\_%").Scan(&waiting).Error
				}
				if err != nil {
					t.Fatal(err)
				}
				if waiting > 0 {
					break
				}
			}
			kill := "SELECT pg_terminate_backend(?)"
			if d.name != "postgres" {
				kill = "KILL ?"
			}
			if err := db.Exec(kill, holder).Error; err != nil {
				t.Fatal(err)
			}
			// The keep-alive finds the session gone within its period.
			time.Sleep(sqllockKeepAlive + time.Second)
			if _, err := conn.ExecContext(ctx, unlock); err != nil {
				t.Fatal(err)
			}
			err = <-done
			var se *shardid.ShardError
			if !errors.Is(err, shardid.ErrMigrateLockLost) || !errors.As(err, &se) || se.Shard != slow[1] {
				t.Fatalf("Migrate whose lock session ended = %v, want ErrMigrateLockLost in a *ShardError for shard %d", err, slow[1])
			}
			t.Logf("Migrate whose lock session ended: %v", err)
			if err := r.Migrate(ctx, migV2...); err != nil {
				t.Fatalf("Migrate again: %v", err)
			}
		})
	}
}

// sqllockKeepAlive is internal/sqllock's DefaultKeepAlive: how soon a
// lock's holder learns that its session ended.
const sqllockKeepAlive = 5 * time.Second
