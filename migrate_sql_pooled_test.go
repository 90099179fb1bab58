package shardid_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
)

// TestMigrateSQLThroughPgBouncer runs MigrateSQL from database/sql pools
// (pgx, no GORM) through PgBouncer in transaction mode while other clients
// of the same user run unqualified statements on a table of the public
// schema: new shards, an added column, a changed type that every shard
// replays, a run with nothing to do. Their statements never fail, no
// server connection keeps a search_path or a migration lock, no template
// is left, and the shards end as the plain DDL leaves a schema.
func TestMigrateSQLThroughPgBouncer(t *testing.T) {
	direct := []*gorm.DB{openPostgres(t), openSecondPostgres(t)}
	const poolSize = 3
	b := testdb.StartPgBouncer(t, testdb.PgBouncerOptions{PoolSize: poolSize, Databases: []string{testdb.PostgresDatabase(), "shardid_test2"}})
	const probe = "migsqlpool_probe"
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
	const prefix, shards = "migsqlpool", 8
	dropMigSchemas(t, direct, prefix)
	t.Cleanup(func() { dropMigSchemas(t, direct, prefix) })
	var dbs []*sql.DB
	for _, name := range []string{testdb.PostgresDatabase(), "shardid_test2"} {
		db, err := sql.Open("pgx", b.SimpleDSN(name, "postgres"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		dbs = append(dbs, db)
	}
	m, err := shardmap.New(shardmap.Config{Databases: []string{"one", "two"}, LogicalShards: shards, SchemaPattern: prefix + "_%02d"})
	if err != nil {
		t.Fatal(err)
	}
	s := &sqlSetup{dialect: "postgres", gdbs: direct, dbs: dbs, m: m}

	clients := startPooledClients(t, []*gorm.DB{b.Open(testdb.PostgresDatabase(), "postgres"), b.Open("shardid_test2", "postgres")}, probe, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	migrate := func(ddl []string, altered, replayed int) {
		t.Helper()
		var p progressLog
		if err := shardid.MigrateSQL(ctx, dbs, m, shardid.MigrateOptions{Progress: p.report, LockWait: 30 * time.Second}, ddl...); err != nil {
			t.Fatalf("MigrateSQL through PgBouncer: %v", err)
		}
		if got := p.last(t, shards); got.Altered != altered || got.AutoMigrated != replayed {
			t.Errorf("MigrateSQL: %+v, want %d shards altered, %d replayed", got, altered, replayed)
		}
	}
	migrate(sqlRelease("postgres", 1), shards, 0)
	migrate(sqlRelease("postgres", 2), shards, 0)
	migrate(sqlRelease("postgres", 3), shards, shards)
	migrate(sqlRelease("postgres", 3), 0, 0)
	time.Sleep(200 * time.Millisecond) // the clients go on a while
	clients.end()

	if n := clients.fails.Load(); n > 0 {
		t.Errorf("%d of %d client transactions failed during MigrateSQL; the first: %v", n, clients.runs.Load(), clients.first)
	}
	t.Logf("%d client transactions ran during MigrateSQL", clients.runs.Load())
	ref := prefix + "_ref"
	plainSQL(t, direct[0], ref, sqlRelease("postgres", 3))
	s.sameAs(t, ref)
	for _, name := range []string{testdb.PostgresDatabase(), "shardid_test2"} {
		checkServerSessions(t, b.Open(name, "postgres"), poolSize)
	}
	for i, db := range direct {
		first := m.SchemaOf(m.Load().ShardsOn(i)[0])
		var held []string
		if err := db.Raw(`SELECT pid::text FROM pg_locks WHERE locktype = 'advisory'
			AND classid::bigint = ((hashtextextended(?, 0) >> 32) & 4294967295)
			AND objid::bigint = (hashtextextended(?, 0) & 4294967295)`,
			first, first).Scan(&held).Error; err != nil {
			t.Fatal(err)
		}
		if len(held) > 0 {
			t.Errorf("database %d: the migration lock is still held by %v", i, held)
		}
		var tmpl []string
		if err := db.Raw(`SELECT nspname FROM pg_namespace WHERE nspname LIKE 'migsqlpool\_tmpl\_%'`).Scan(&tmpl).Error; err != nil {
			t.Fatal(err)
		}
		if len(tmpl) > 0 {
			t.Errorf("database %d: template schemas left behind: %v", i, tmpl)
		}
	}
}
