package reshard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// An autovacuum that holds its lock on a shard's table for long (a slow,
// throttled vacuum): PostgreSQL would cancel it for a lock wait longer
// than deadlock_timeout, which the move's 500 ms waits never reach; the
// move cancels it itself, and goes on, holding writers back 500 ms a try.
func TestMoveCancelsAutovacuum(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL of its own")
	}
	inst := startPostgresInstance(t)
	ctx := context.Background()
	admin, err := gorm.Open(postgres.Open(inst.DSN()), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, admin)
	for _, q := range []string{
		// Autovacuum at once, and slow: it keeps its lock for long.
		"ALTER SYSTEM SET autovacuum_naptime = 1",
		"ALTER SYSTEM SET autovacuum_vacuum_cost_delay = 100",
		"ALTER SYSTEM SET autovacuum_vacuum_cost_limit = 1",
		"SELECT pg_reload_conf()",
		"CREATE DATABASE second",
	} {
		if err := admin.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	second, err := gorm.Open(postgres.Open(strings.Replace(inst.DSN(), "dbname=postgres", "dbname=second", 1)), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, second)
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{admin, second}, Names: []string{"pg1", "pg2"},
		LogicalShards: moveShards, SchemaPattern: "shardid_av_%04d", Plugin: movePlugin(t, 0), Map: make([]int, moveShards)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"ALTER TABLE shardid_av_0001.r_photos SET (autovacuum_vacuum_threshold = 0, autovacuum_vacuum_scale_factor = 0, autovacuum_analyze_threshold = 1000000000)",
		"INSERT INTO shardid_av_0001.r_photos (id, user_id, caption) SELECT g, 1, repeat('x', 200) FROM generate_series(1, 200000) g",
		"DELETE FROM shardid_av_0001.r_photos WHERE id % 2 = 0",
	} {
		if err := admin.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	// Until an autovacuum works on the table.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int64
		admin.Raw("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker' AND query LIKE '%shardid_av_0001.r_photos%'").Scan(&n)
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no autovacuum of the table within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop := runWriters(t, 1, func(_, i int) error {
		u := int64(1 + moveShards*i)
		return r.ForKey(u).Create(&RPhoto{UserID: u, Caption: "w"}).Error
	})
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	res, err := reshard.MoveShard(mctx, r, nil, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}})
	took := time.Since(start)
	stall := stop().stall
	if err != nil {
		t.Fatalf("move beside an autovacuum: %v (after %v)", err, took)
	}
	t.Logf("moved %d rows in %v beside an autovacuum, fenced %v; the writer's longest stall %v", res.Tables[0].Rows, took, res.Fenced, stall)
	if took > 20*time.Second {
		t.Errorf("the move took %v: it waited for the autovacuum", took)
	}
	if stall > 2*time.Second {
		t.Errorf("a writer waited %v", stall)
	}
}
