package reshard_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// A move writes the shard's rows on the PostgreSQL target frozen (COPY
// FREEZE, in the transaction that empties the tables): every page of each
// table is all-visible once it has moved, so that no VACUUM has to freeze
// them later and index-only scans work at once. Two tables, one with a
// foreign key to the other, which the TRUNCATE must empty together.
func TestMoveCopiesRowsFrozen(t *testing.T) {
	ownDatabases(t)
	src, dst := openPostgres(t), openSecondPostgresTB(t)
	const schema = "shardid_frz_0001"
	r := routerOverTwo(t, src, dst, []string{"pg1", "pg2"}, "shardid_frz_%04d", "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	const rows = 20000
	for _, q := range []string{
		"CREATE SCHEMA " + schema,
		"CREATE TABLE " + schema + ".parents (id bigint PRIMARY KEY, name text NOT NULL)",
		"CREATE TABLE " + schema + ".kids (id bigint PRIMARY KEY, parent_id bigint NOT NULL REFERENCES " + schema + ".parents (id), note text)",
		fmt.Sprintf("INSERT INTO %s.parents SELECT g, 'parent ' || g FROM generate_series(1, %d) g", schema, rows),
		fmt.Sprintf("INSERT INTO %s.kids SELECT g, 1 + g %% %d, repeat('k', g %% 50) FROM generate_series(1, %d) g", schema, rows, rows),
	} {
		if err := src.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	res, err := reshard.MoveShard(context.Background(), r, nil, 1, "pg2", reshard.MoveOptions{Tables: []string{"parents", "kids"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Copied != 2*rows {
		t.Errorf("copied %d rows, want %d", res.Copied, 2*rows)
	}
	for _, table := range []string{"parents", "kids"} {
		var got struct {
			Rows                    int64
			RelPages, RelAllVisible int64
		}
		// The move's ANALYZE counted the all-visible pages.
		if err := dst.Raw("SELECT (SELECT count(*) FROM "+schema+"."+table+") AS rows, relpages AS rel_pages, relallvisible AS rel_all_visible FROM pg_class WHERE oid = ?::regclass",
			schema+"."+table).Scan(&got).Error; err != nil {
			t.Fatal(err)
		}
		if got.Rows != rows {
			t.Errorf("%s: %d rows on the target, want %d", table, got.Rows, rows)
		}
		if got.RelPages == 0 || got.RelAllVisible != got.RelPages {
			t.Errorf("%s: %d of its %d pages all-visible on the target: the copy did not freeze its rows", table, got.RelAllVisible, got.RelPages)
		}
	}
}

// A table partitioned on the target (created there by the application's
// own migrations before the move) cannot take COPY FREEZE: the move copies
// into it without, and its rows land in their partitions. The source's
// table is partitioned too, and read through its parent.
func TestMoveCopiesIntoAPartitionedTable(t *testing.T) {
	ownDatabases(t)
	src, dst := openPostgres(t), openSecondPostgresTB(t)
	const schema = "shardid_prt_0001"
	r := routerOverTwo(t, src, dst, []string{"pg1", "pg2"}, "shardid_prt_%04d", "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	const rows = 3000
	for _, db := range []*gorm.DB{src, dst} {
		for _, q := range []string{
			"CREATE SCHEMA " + schema,
			"CREATE TABLE " + schema + ".events (id bigint PRIMARY KEY, what text NOT NULL) PARTITION BY RANGE (id)",
			"CREATE TABLE " + schema + ".events_lo PARTITION OF " + schema + ".events FOR VALUES FROM (MINVALUE) TO (1000)",
			"CREATE TABLE " + schema + ".events_hi PARTITION OF " + schema + ".events FOR VALUES FROM (1000) TO (MAXVALUE)",
		} {
			if err := db.Exec(q).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := src.Exec(fmt.Sprintf("INSERT INTO %s.events SELECT g, 'event ' || g FROM generate_series(1, %d) g", schema, rows)).Error; err != nil {
		t.Fatal(err)
	}
	res, err := reshard.MoveShard(context.Background(), r, nil, 1, "pg2", reshard.MoveOptions{Tables: []string{"events"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Copied != rows {
		t.Errorf("copied %d rows, want %d", res.Copied, rows)
	}
	var got struct{ Lo, Hi, Sum int64 }
	if err := dst.Raw("SELECT (SELECT count(*) FROM " + schema + ".events_lo) AS lo, (SELECT count(*) FROM " + schema + ".events_hi) AS hi," +
		" (SELECT sum(id) FROM " + schema + ".events WHERE what = 'event ' || id) AS sum").Scan(&got).Error; err != nil {
		t.Fatal(err)
	}
	if got.Lo != 999 || got.Hi != rows-999 || got.Sum != rows*(rows+1)/2 {
		t.Errorf("on the target: %d rows in events_lo (want 999), %d in events_hi (want %d), ids summing to %d (want %d)",
			got.Lo, got.Hi, rows-999, got.Sum, rows*(rows+1)/2)
	}
}

// routerOverTwo returns a router over src and dst, named names, of 2
// logical shards in schemas pattern, both on src, after running drop (the
// statement that drops shard 1's schema) on both; it runs drop on both
// again when the test ends.
func routerOverTwo(t *testing.T, src, dst *gorm.DB, names []string, pattern, drop string) *shardid.Router {
	t.Helper()
	for _, db := range []*gorm.DB{src, dst} {
		db.Exec(drop)
	}
	t.Cleanup(func() {
		for _, db := range []*gorm.DB{src, dst} {
			db.Exec(drop)
		}
	})
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{src, dst}, Names: names,
		LogicalShards: 2, SchemaPattern: pattern, Plugin: p, Map: []int{0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}
