package reshard_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/shardid/shardid/reshard"
)

// BenchmarkMoveShard moves one shard of $SHARDID_BENCH_MOVE_ROWS rows
// (100,000 by default) from one PostgreSQL database to the other per op, and
// reports rows copied per second. The README's figure is for 1,000,000:
//
//	SHARDID_BENCH_MOVE_ROWS=1000000 go test -run '^$' -bench MoveShard -benchtime 1x
func BenchmarkMoveShard(b *testing.B) {
	rows := 100000
	if v, err := strconv.Atoi(os.Getenv("SHARDID_BENCH_MOVE_ROWS")); err == nil && v > 0 {
		rows = v
	}
	p := movePlugin(b, 0)
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		r := moveRouterB(b, p)
		for _, db := range r.Databases() {
			db.Exec("DROP SCHEMA IF EXISTS shardid_mv_0001 CASCADE")
		}
		if err := r.Migrate(ctx, &RPhoto{}); err != nil {
			b.Fatal(err)
		}
		batch := make([]RPhoto, 0, 5000)
		for i := range rows {
			batch = append(batch, RPhoto{UserID: int64(1 + moveShards*i), Caption: "a photo caption of some length"})
			if len(batch) == cap(batch) || i == rows-1 {
				if err := r.ForShard(1).Create(&batch).Error; err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		b.StartTimer()
		res, err := reshard.MoveShard(ctx, r, nil, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 5000})
		if err != nil {
			b.Fatal(err)
		}
		if res.Tables[0].Rows != int64(rows) {
			b.Fatalf("moved %d rows, want %d", res.Tables[0].Rows, rows)
		}
		b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
		b.ReportMetric(res.Fenced.Seconds(), "fenced-s")
	}
}
