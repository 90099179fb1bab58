package shardid_test

import (
	"fmt"
	"testing"

	"github.com/shardid/shardid"
)

// Three ways to key the same table on PostgreSQL, inserted in one run.
type (
	// BenchPlugin gets its IDs from the plugin, in Go.
	BenchPlugin struct {
		ID      shardid.ID
		UserID  int64 `shardid:"key"`
		Caption string
	}
	// BenchSerial is what a single database would use: a bigserial.
	BenchSerial struct {
		ID      int64
		UserID  int64
		Caption string
	}
	// BenchPLpgSQL gets its IDs from a PL/pgSQL column default, as
	// Instagram did, read back with RETURNING.
	BenchPLpgSQL struct {
		ID      shardid.ID `gorm:"primaryKey;default:(-)"`
		UserID  int64
		Caption string
	}
)

// benchNextID is Instagram's published formula as a PL/pgSQL function, for
// shard 5: (ms since 2011-01-01) << 23 | shard << 10 | nextval % 1024.
const benchNextID = `
CREATE SEQUENCE IF NOT EXISTS bench_pl_seq;
CREATE OR REPLACE FUNCTION bench_next_id(OUT result bigint) LANGUAGE plpgsql AS $$
DECLARE
	epoch_ms bigint := 1293840000000;
	now_ms   bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
BEGIN
	-- <<, | and % share one precedence in PostgreSQL: parenthesize all.
	result := ((now_ms - epoch_ms) << 23) | (5 << 10) | (nextval('bench_pl_seq') % 1024);
END $$;
ALTER TABLE bench_p_lpg_sqls ALTER COLUMN id SET DEFAULT bench_next_id();`

// BenchmarkPostgresInsert compares rows per second into the three tables,
// one row per Create and 1,000 rows per CreateInBatches.
func BenchmarkPostgresInsert(b *testing.B) {
	db := openPostgres(b)
	p, err := shardid.NewPlugin(shardid.PluginConfig{})
	if err != nil {
		b.Fatal(err)
	}
	if err := db.Use(p); err != nil {
		b.Fatal(err)
	}
	fresh(b, db, &BenchPlugin{}, &BenchSerial{}, &BenchPLpgSQL{})
	if err := db.Exec(benchNextID).Error; err != nil {
		b.Fatal(err)
	}
	user := int64(0)
	for _, table := range []struct {
		name string
		one  func() any
		many func(n int) any
	}{
		{"plugin", func() any { user++; return &BenchPlugin{UserID: user, Caption: "c"} },
			func(n int) any {
				return batch(n, func(i int64) BenchPlugin { return BenchPlugin{UserID: i, Caption: "c"} })
			}},
		{"bigserial", func() any { user++; return &BenchSerial{UserID: user, Caption: "c"} },
			func(n int) any {
				return batch(n, func(i int64) BenchSerial { return BenchSerial{UserID: i, Caption: "c"} })
			}},
		{"plpgsql", func() any { user++; return &BenchPLpgSQL{UserID: user, Caption: "c"} },
			func(n int) any {
				return batch(n, func(i int64) BenchPLpgSQL { return BenchPLpgSQL{UserID: i, Caption: "c"} })
			}},
	} {
		b.Run(table.name+"/Create", func(b *testing.B) {
			for b.Loop() {
				if err := db.Create(table.one()).Error; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
		b.Run(table.name+"/CreateInBatches1000", func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				rows := table.many(1000)
				b.StartTimer()
				if err := db.CreateInBatches(rows, 1000).Error; err != nil {
					b.Fatal(fmt.Errorf("%s: %w", table.name, err))
				}
			}
			b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

func batch[T any](n int, mk func(i int64) T) *[]T {
	rows := make([]T, n)
	for i := range rows {
		rows[i] = mk(int64(i))
	}
	return &rows
}
