package reshard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// BenchmarkMoveShard moves one shard of N rows from one database to
// another per op, on PostgreSQL (two databases of one server) and on
// MariaDB (the test server to one of the benchmark's own), while 4
// writers insert, update and delete rows of that shard through the
// mover's router, and reports:
//
//	fenced-ms   MoveResult.Fenced, from the fence to the flip
//	stall-ms    the longest a write of a writer waited (blocked, or
//	            retrying ErrShardMoving) before it went through
//	copy-rows/s the first copy (COPY on PostgreSQL), rows per second
//	rows/s      the shard's rows over the whole move
//	x-floor     the whole move over a bare copy of the shard's rows,
//	            run alone just before it (moveFloor)
//	x-loaded-floor  the same over the bare copy run again beside the
//	            writers, just before the move
//
// N is 100,000, or each of the comma-separated $SHARDID_BENCH_MOVE_ROWS.
// The README's figures:
//
//	SHARDID_BENCH_MOVE_ROWS=100000,1000000 go test -run '^$' -bench MoveShard -benchtime 1x ./reshard
func BenchmarkMoveShard(b *testing.B) {
	sizes := []int{100000}
	if v := os.Getenv("SHARDID_BENCH_MOVE_ROWS"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("SHARDID_BENCH_MOVE_ROWS=%q: want row counts", v)
			}
			sizes = append(sizes, n)
		}
	}
	b.Run("postgres", func(b *testing.B) {
		for _, rows := range sizes {
			b.Run(fmt.Sprint(rows), func(b *testing.B) {
				benchMove(b, rows, func() (*shardid.Router, []int64) {
					r := moveRouterB(b, movePlugin(b, 0))
					for _, db := range r.Databases() {
						db.Exec("DROP SCHEMA IF EXISTS shardid_mv_0001 CASCADE")
					}
					if err := r.Migrate(context.Background(), &RPhoto{}); err != nil {
						b.Fatal(err)
					}
					return r, seedCopy(b, r.Databases()[0], "shardid_mv_0001", rows)
				})
			})
		}
	})
	b.Run("mariadb", func(b *testing.B) {
		// A server of the benchmark's own, with a buffer pool for a shard
		// of a million rows, for every size.
		dst := openMariaDBInstance(b, "--innodb-buffer-pool-size=512M")
		p := movePlugin(b, 0) // dst keeps it from one size to the next
		for _, rows := range sizes {
			b.Run(fmt.Sprint(rows), func(b *testing.B) {
				benchMove(b, rows, func() (*shardid.Router, []int64) {
					src := openMySQLTB(b)
					r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{src, dst}, Names: []string{"my1", "pg2"},
						LogicalShards: moveShards, SchemaPattern: "shardid_mv_%04d", Plugin: p, Map: make([]int, moveShards)})
					if err != nil {
						b.Fatal(err)
					}
					for _, db := range r.Databases() {
						db.Exec("DROP DATABASE IF EXISTS shardid_mv_0001")
					}
					if err := r.Migrate(context.Background(), &RPhoto{}); err != nil {
						b.Fatal(err)
					}
					return r, seedInserts(b, src, "shardid_mv_0001", rows)
				})
			})
		}
	})
}

// moveBenchWriters is how many goroutines write to the moving shard.
const moveBenchWriters = 4

// benchMove runs the moves of BenchmarkMoveShard, from a router and
// a shard 1 of rows rows (their IDs) that setup makes for each.
func benchMove(b *testing.B, rows int, setup func() (*shardid.Router, []int64)) {
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		r, seeded := setup()
		// Each database's pool keeps 16 idle sessions, as the split
		// benchmark's and the shardid command's do: database/sql keeps
		// 2 and closes the others as they come back, and the writers
		// and the mover would open a new session, a new server process,
		// for most of their transactions beyond two at once.
		for _, db := range r.Databases() {
			sqlDB, err := db.DB()
			if err != nil {
				b.Fatal(err)
			}
			sqlDB.SetMaxIdleConns(16)
		}
		floor := moveFloor(b, r)
		rngs := make([]*rand.Rand, moveBenchWriters)
		for w := range rngs {
			rngs[w] = rand.New(rand.NewPCG(1, uint64(w)))
		}
		stop := runWriters(b, moveBenchWriters, func(w, i int) error {
			switch i % 3 {
			case 0:
				return r.ForKey(int64(1 + moveShards*i)).Create(&RPhoto{UserID: int64(1 + moveShards*i), Caption: "new"}).Error
			case 1:
				return r.ForShard(1).Model(&RPhoto{}).Where("id = ?", seeded[rngs[w].IntN(len(seeded))]).Update("caption", "updated").Error
			default:
				return r.ForShard(1).Where("id = ?", seeded[rngs[w].IntN(len(seeded))]).Delete(&RPhoto{}).Error
			}
		})
		time.Sleep(200 * time.Millisecond)
		// The floor again beside the same writers: what the machine
		// leaves a copy of these rows while they write.
		loadedFloor := moveFloor(b, r)
		b.StartTimer()
		start := time.Now()
		var stages []string
		last := time.Now()
		onStage := func(s string) {
			stages = append(stages, fmt.Sprintf("%s +%v", s, time.Since(last).Round(time.Millisecond)))
			last = time.Now()
		}
		res, err := reshard.MoveShard(ctx, r, nil, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 5000, OnStage: onStage})
		took := time.Since(start)
		b.StopTimer()
		time.Sleep(200 * time.Millisecond)
		seen := stop()
		if err != nil {
			b.Fatal(err)
		}
		if res.Copied < int64(rows)*9/10 {
			b.Fatalf("copied %d rows of %d", res.Copied, rows)
		}
		b.ReportMetric(float64(res.Fenced.Microseconds())/1000, "fenced-ms")
		b.ReportMetric(float64(seen.stall.Microseconds())/1000, "stall-ms")
		b.ReportMetric(float64(res.Copied)/res.CopyTime.Seconds(), "copy-rows/s")
		b.ReportMetric(float64(rows)/took.Seconds(), "rows/s")
		b.ReportMetric(took.Seconds()/floor.Seconds(), "x-floor")
		b.ReportMetric(took.Seconds()/loadedFloor.Seconds(), "x-loaded-floor")
		b.Logf("%d rows: moved in %v (a bare copy of them just before: %v, beside the writers: %v), fenced %v, writer's longest stall %v (from +%v) over %d writes; stages: %s",
			rows, took, floor, loadedFloor, res.Fenced, seen.stall, seen.stallAt.Sub(start).Round(time.Millisecond), seen.ops, strings.Join(stages, ", "))
		b.StartTimer()
	}
}

// seedCopy writes n rows of shard 1 into schema.r_photos on db with COPY,
// with IDs of two hours ago (so none collides with a new one), and returns
// their IDs.
func seedCopy(b *testing.B, db *gorm.DB, schema string, n int) []int64 {
	b.Helper()
	ids := seedIDs(b, n)
	pool, err := db.DB()
	if err != nil {
		b.Fatal(err)
	}
	conn, err := pool.Conn(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		src := pgx.CopyFromSlice(n, func(i int) ([]any, error) {
			return []any{ids[i], int64(1 + moveShards*i), "a photo caption of some length"}, nil
		})
		_, err := dc.(*stdlib.Conn).Conn().CopyFrom(context.Background(), pgx.Identifier{schema, "r_photos"}, []string{"id", "user_id", "caption"}, src)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return ids
}

// seedInserts writes n rows of shard 1 into schema.r_photos on db (MySQL)
// with multi-row INSERTs, as seedCopy does, and returns their IDs.
func seedInserts(b *testing.B, db *gorm.DB, schema string, n int) []int64 {
	b.Helper()
	ids := seedIDs(b, n)
	for lo := 0; lo < n; lo += 5000 {
		hi := min(n, lo+5000)
		var q strings.Builder
		q.WriteString("INSERT INTO `" + schema + "`.r_photos (id, user_id, caption) VALUES ")
		for i := lo; i < hi; i++ {
			if i > lo {
				q.WriteByte(',')
			}
			fmt.Fprintf(&q, "(%d, %d, 'a photo caption of some length')", ids[i], 1+moveShards*i)
		}
		if err := db.Exec(q.String()).Error; err != nil {
			b.Fatal(err)
		}
	}
	return ids
}

// seedIDs returns n IDs of shard 1 from two hours ago, so that none
// collides with a new one.
func seedIDs(b *testing.B, n int) []int64 {
	ids := make([]int64, n)
	t0 := time.Now().Add(-2 * time.Hour)
	per := moveLayout.SeqPerUnit()
	for i := range ids {
		id, err := moveLayout.Compose(shardid.Parts{Time: t0.Add(time.Duration(i/per) * time.Millisecond), Shard: 1, Worker: 3, Seq: i % per})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = int64(id)
	}
	return ids
}

// moveFloor copies shard 1's table of r from its database to the other
// one, into a table of its own, as bareCopy (PostgreSQL: COPY TO piped
// into COPY FROM) or bareCopyMySQL would, with no writers, and returns how
// long it took: the floor a move is compared with. On PostgreSQL the
// shard's table is vacuumed and checkpointed first, untimed.
func moveFloor(b *testing.B, r *shardid.Router) time.Duration {
	src, dst := r.Databases()[0], r.Databases()[1]
	ctx := context.Background()
	schema := "shardid_floor"
	if dst.Dialector.Name() == "mysql" {
		dst.Exec("DROP DATABASE IF EXISTS " + schema)
		if err := dst.Exec("CREATE DATABASE " + schema).Error; err != nil {
			b.Fatal(err)
		}
		defer dst.Exec("DROP DATABASE IF EXISTS " + schema)
	} else {
		dst.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE")
		if err := dst.Exec("CREATE SCHEMA " + schema).Error; err != nil {
			b.Fatal(err)
		}
		defer dst.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE")
	}
	if err := dst.Table(schema + ".r_photos").AutoMigrate(&RPhoto{}); err != nil {
		b.Fatal(err)
	}
	from := r.Schema(1) + ".r_photos"
	if src.Dialector.Name() != "mysql" {
		// The shard's rows settled, as the split benchmark's monolith:
		// the first read of freshly written rows rewrites their pages
		// (hint bits), which would slow the floor, not the move after it.
		for _, q := range []string{"VACUUM ANALYZE " + from, "CHECKPOINT"} {
			if err := src.Exec(q).Error; err != nil {
				b.Fatal(err)
			}
		}
	}
	start := time.Now()
	var err error
	if dst.Dialector.Name() == "mysql" {
		err = bareCopyMySQL(ctx, src, dst, from, schema+".r_photos")
	} else {
		err = bareCopy(ctx, src, dst, from, schema+".r_photos")
	}
	if err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}
