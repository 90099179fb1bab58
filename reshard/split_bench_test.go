package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// BenchmarkSplitPostgres splits a monolith of users, photos and comments
// (SHARDID_SPLIT_ROWS rows in all, 1,000,000 by default: 2% users, 18%
// photos, 80% comments, with foreign keys) into SHARDID_SPLIT_SHARDS
// logical shards (2,000) on two databases, in batches of
// SHARDID_SPLIT_BATCH (250), while 4 writers insert, update and delete
// through the map, after a bare COPY of the same tables from the monolith
// to one of the targets, the floor (under CI=true: 20,000 rows, 100 shards,
// batches of 50, unless the variables say otherwise). Run it once:
//
//	flock /tmp/shardid-db.lock go test -run '^$' -bench BenchmarkSplitPostgres -benchtime 1x ./reshard
func BenchmarkSplitPostgres(b *testing.B) {
	rows, shards, batch := 1_000_000, 2000, 250
	if os.Getenv("CI") == "true" {
		// CI runs every benchmark once, to see that it works: a small
		// monolith, not the measured one.
		rows, shards, batch = 20_000, 100, 50
	}
	rows = envInt("SHARDID_SPLIT_ROWS", rows)
	shards = envInt("SHARDID_SPLIT_SHARDS", shards)
	batch = envInt("SHARDID_SPLIT_BATCH", batch)
	users := rows / 50
	e := newSplitEnvPG(b, shards, users, 9, 4) // 2% + 18% + 72%: comments topped up below
	ctx := context.Background()
	extra := rows - users - users*9 - users*9*4
	if err := e.dbs[0].Exec(fmt.Sprintf("INSERT INTO comments (photo_id, body) SELECT 1 + (g %% %d), 'more ' || g FROM generate_series(1, %d) g; ANALYZE comments", users*9, extra)).Error; err != nil {
		b.Fatal(err)
	}
	var total int64
	e.dbs[0].Raw("SELECT (SELECT count(*) FROM users) + (SELECT count(*) FROM photos) + (SELECT count(*) FROM comments)").Scan(&total)
	b.ResetTimer()
	for range b.N {
		// The floor: a bare COPY of the same rows between the same
		// databases, in the same run.
		if err := e.dbs[1].Exec("CREATE SCHEMA floor").Error; err != nil {
			b.Fatal(err)
		}
		for _, t := range []string{"users", "photos", "comments"} {
			def := map[string]string{"users": "(id BIGINT PRIMARY KEY, name TEXT NOT NULL, plan_id BIGINT)",
				"photos":   "(id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, caption TEXT NOT NULL, taken TIMESTAMPTZ NOT NULL)",
				"comments": "(id BIGINT PRIMARY KEY, photo_id BIGINT NOT NULL, body TEXT NOT NULL)"}[t]
			if err := e.dbs[1].Exec("CREATE TABLE floor." + t + " " + def).Error; err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		for _, t := range []string{"users", "photos", "comments"} {
			if err := bareCopy(ctx, e.dbs[0], e.dbs[1], t, "floor."+t); err != nil {
				b.Fatal(err)
			}
		}
		floor := time.Since(start)
		e.dbs[1].Exec("DROP SCHEMA floor CASCADE")

		plan, err := reshard.PlanSplit(ctx, e.cfg, []string{"pg_a", "pg_b"}, batch)
		if err != nil {
			b.Fatal(err)
		}
		w := newSplitWriters(e)
		wctx, stop := context.WithCancel(ctx)
		wg := w.run(wctx, 4, int64(users))
		var copied int64
		var copyTime, maxFence time.Duration
		// Where the time goes: each stage's time since the one before,
		// summed over the batches ("begun": from the batch's start).
		stages := map[string]time.Duration{}
		var order []string
		last := time.Now()
		onStage := func(s string) {
			if _, ok := stages[s]; !ok {
				order = append(order, s)
			}
			stages[s] += time.Since(last)
			last = time.Now()
		}
		start = time.Now()
		err = reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{OnStage: onStage}, func(i int, res reshard.SplitResult) {
			copied += res.Copied
			copyTime += res.CopyTime
			maxFence = max(maxFence, res.Fenced)
			last = time.Now()
		})
		split := time.Since(start)
		stop()
		wg.Wait()
		if err != nil {
			b.Fatal(err)
		}
		for _, err := range w.errs {
			if !errors.Is(err, context.Canceled) {
				b.Error(err)
			}
		}
		b.ReportMetric(float64(total)/floor.Seconds(), "floor-rows/s")
		b.ReportMetric(float64(total)/split.Seconds(), "split-rows/s")
		b.ReportMetric(float64(copied)/copyTime.Seconds(), "copy-rows/s")
		b.ReportMetric(split.Seconds()/floor.Seconds(), "x-floor")
		b.ReportMetric(float64(w.stall.Milliseconds()), "max-stall-ms")
		b.ReportMetric(float64(maxFence.Milliseconds()), "max-fence-ms")
		b.ReportMetric(float64(w.ops), "writes")
		b.Logf("%d rows, %d shards in batches of %d: floor %v, split %v (copy %v), longest stall %v, longest fence %v, %d writes",
			total, shards, batch, floor, split, copyTime, w.stall, maxFence, w.ops)
		var spent []string
		for _, s := range order {
			spent = append(spent, fmt.Sprintf("%s %v", s, stages[s].Round(time.Millisecond)))
		}
		b.Logf("time to each stage, over all batches: %s", strings.Join(spent, ", "))
	}
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

// bareCopy pipes COPY table TO STDOUT on src into COPY dstTable FROM STDIN
// on dst.
func bareCopy(ctx context.Context, src, dst *gorm.DB, table, dstTable string) error {
	conn := func(db *gorm.DB, f func(*pgx.Conn) error) error {
		sqlDB, err := db.DB()
		if err != nil {
			return err
		}
		c, err := sqlDB.Conn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Raw(func(dc any) error { return f(dc.(*stdlib.Conn).Conn()) })
	}
	return conn(src, func(sc *pgx.Conn) error {
		return conn(dst, func(dc *pgx.Conn) error {
			pr, pw := io.Pipe()
			done := make(chan error, 1)
			go func() {
				_, err := sc.PgConn().CopyTo(ctx, pw, "COPY "+table+" TO STDOUT")
				pw.CloseWithError(err)
				done <- err
			}()
			_, err := dc.PgConn().CopyFrom(ctx, pr, "COPY "+dstTable+" FROM STDIN")
			pr.CloseWithError(io.ErrClosedPipe)
			if rerr := <-done; err == nil {
				err = rerr
			}
			return err
		})
	})
}
