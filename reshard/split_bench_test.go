package reshard_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// BenchmarkSplitPostgres splits a monolith of users, photos and comments
// (SHARDID_SPLIT_ROWS rows in all, 1,000,000 by default: 2% users, 18%
// photos, 80% comments, with foreign keys) into SHARDID_SPLIT_SHARDS
// logical shards (2,000) on two databases, in batches of
// SHARDID_SPLIT_BATCH (250), while 4 writers insert, update and delete
// through the map (SHARDID_SPLIT_WRITERS writers, each writing as fast as
// it can, or SHARDID_SPLIT_WRITE_RATE times a second), after a bare COPY of
// the same tables from the monolith to one of the targets with the
// monolith's indexes built after it, the floor, and
// the creation of as many empty schemas as shards, the floor of the
// schemas, then a copy of the same rows into those schemas' tables, the
// floor of the split's copy stage (floor-shard-copy-s, floorShardCopy;
// floorShardCopyMySQL on MariaDB),
// all three measured again beside the same writers writing to the
// monolith (x-loaded-floor-and-ddl: what the machine leaves a copy beside
// them, and loaded-floor-shard-copy-s; under CI=true: 10,000 rows, 40
// shards, batches of 20, unless the variables say otherwise). SHARDID_SPLIT_TOGETHER=1 copies the
// batches together (SplitOptions.CopyTogether). SHARDID_SPLIT_LAYOUT=1
// splits with SplitConfig.Layout, as the guide asks (every row's ID
// checked, the triggers' ID rule on each write). Each database's pool keeps
// SHARDID_SPLIT_IDLE idle sessions (16). A writer refused by a
// fence tries again every millisecond, as hard on the fence as a writer
// can be; SHARDID_SPLIT_BACKOFF=1 makes it retry with shardid.RetryMoving,
// as the docs tell an application to. It logs the plan's warnings. Run it
// once:
//
//	flock /tmp/shardid-db.lock go test -run '^$' -bench BenchmarkSplitPostgres -benchtime 1x ./reshard
func BenchmarkSplitPostgres(b *testing.B) {
	benchSplit(b, func(shards, users int) *splitEnv {
		e := newSplitEnvPG(b, shards, users, 9, 4)
		return e
	}, "INSERT INTO comments (photo_id, body) SELECT 1 + (g %% %d), 'more ' || g FROM generate_series(1, %d) g; ANALYZE comments",
		map[string]string{"users": "(id BIGINT PRIMARY KEY, name TEXT NOT NULL, plan_id BIGINT)",
			"photos":   "(id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, caption TEXT NOT NULL, taken TIMESTAMPTZ NOT NULL)",
			"comments": "(id BIGINT PRIMARY KEY, photo_id BIGINT NOT NULL, body TEXT NOT NULL)"},
		bareCopy)
}

// BenchmarkSplitMariaDB is BenchmarkSplitPostgres on MariaDB: the monolith
// and both targets are databases of the local server, and the floor is
// the copy a user would write by hand without shardid: each table read in
// one query and written with multi-row INSERTs of 1,000 rows, in
// transactions of 20,000. SHARDID_SPLIT_TABLE_CACHE=N sets the server's
// table_definition_cache and table_open_cache to N for the run, as the
// plan's table-cache warning asks, and puts them back after.
//
//	flock /tmp/shardid-db.lock go test -run '^$' -bench BenchmarkSplitMariaDB -benchtime 1x ./reshard
func BenchmarkSplitMariaDB(b *testing.B) {
	benchSplit(b, func(shards, users int) *splitEnv { return newSplitEnvMySQL(b, shards, users, 9, 4) },
		"INSERT INTO comments (photo_id, body) SELECT 1 + (seq %% %d), CONCAT('more ', seq) FROM seq_1_to_%d",
		map[string]string{"users": "(id BIGINT PRIMARY KEY, name VARCHAR(100) NOT NULL, plan_id BIGINT)",
			"photos":   "(id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, caption VARCHAR(100) NOT NULL, taken TIMESTAMP(6) NOT NULL)",
			"comments": "(id BIGINT PRIMARY KEY, photo_id BIGINT NOT NULL, body VARCHAR(100) NOT NULL)"},
		bareCopyMySQL)
}

// benchSplit is the body of the split benchmarks: newEnv makes the
// monolith (users users, 9 photos each, 4 comments a photo), topUp (a
// format of the photos and the rows to add) adds comments up to the rows
// asked for, floorDefs are the floor's tables, and floorCopy copies a table
// into one of them.
func benchSplit(b *testing.B, newEnv func(shards, users int) *splitEnv, topUp string, floorDefs map[string]string,
	floorCopy func(ctx context.Context, src, dst *gorm.DB, table, dstTable string) error) {
	rows, shards, batch := 1_000_000, 2000, 250
	if os.Getenv("CI") == "true" {
		// CI runs every benchmark once, to see that it works: a small
		// monolith, not the measured one.
		rows, shards, batch = 10_000, 40, 20
	}
	rows = envInt("SHARDID_SPLIT_ROWS", rows)
	shards = envInt("SHARDID_SPLIT_SHARDS", shards)
	batch = envInt("SHARDID_SPLIT_BATCH", batch)
	writers := 4 // SHARDID_SPLIT_WRITERS: how many writers write through the map meanwhile
	if v, err := strconv.Atoi(os.Getenv("SHARDID_SPLIT_WRITERS")); err == nil && v >= 0 {
		writers = v
	}
	users := rows / 50
	e := newEnv(shards, users) // 2% + 18% + 72%: comments topped up below
	// SHARDID_SPLIT_IDLE=N: each database's pool keeps N idle sessions,
	// 16 by default, as the shardid command's pools do and the docs tell
	// a program to (SplitConfig.DBs). database/sql keeps 2 unless told
	// (SHARDID_SPLIT_IDLE=2), and closes the others as they come back: a
	// new session, a new server process with cold caches, for most of the
	// split's and the writers' transactions beyond two at once.
	if n := envInt("SHARDID_SPLIT_IDLE", 16); n > 0 {
		for _, db := range e.dbs {
			sqlDB, err := db.DB()
			if err != nil {
				b.Fatal(err)
			}
			sqlDB.SetMaxIdleConns(n)
		}
	}
	ctx := context.Background()
	extra := rows - users - users*9 - users*9*4
	if err := e.dbs[0].Exec(fmt.Sprintf(topUp, users*9, extra)).Error; err != nil {
		b.Fatal(err)
	}
	var total int64
	e.dbs[0].Raw("SELECT (SELECT count(*) FROM users) + (SELECT count(*) FROM photos) + (SELECT count(*) FROM comments)").Scan(&total)
	mysql := e.dbs[0].Dialector.Name() == "mysql"
	if !mysql {
		// A monolith as it is in production: its rows read before and
		// vacuumed, and its pages written out. Freshly inserted rows are
		// rewritten by the first read of them (hint bits), and the bulk
		// insert's checkpoint would come during the floor's copy: both
		// would slow the floor, not the split, which reads the rows after
		// it.
		for _, q := range []string{"VACUUM ANALYZE users, photos, comments", "CHECKPOINT"} {
			if err := e.dbs[0].Exec(q).Error; err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		// The floor: a bare copy of the same rows between the same
		// databases, in the same run.
		floorCopyOnce := func() time.Duration {
			floorTable := func(t string) string {
				if mysql {
					return "floor_" + t
				}
				return "floor." + t
			}
			if !mysql {
				if err := e.dbs[1].Exec("CREATE SCHEMA floor").Error; err != nil {
					b.Fatal(err)
				}
			}
			for _, t := range []string{"users", "photos", "comments"} {
				if err := e.dbs[1].Exec("CREATE TABLE " + floorTable(t) + " " + floorDefs[t]).Error; err != nil {
					b.Fatal(err)
				}
			}
			start := time.Now()
			for _, t := range []string{"users", "photos", "comments"} {
				if err := floorCopy(ctx, e.dbs[0], e.dbs[1], t, floorTable(t)); err != nil {
					b.Fatal(err)
				}
			}
			// Index builds included: the monolith's indexes but the
			// primary keys, built once the rows are in, as a bare copy
			// would.
			for _, ix := range []string{"CREATE INDEX floor_pu ON " + floorTable("photos") + " (user_id)",
				"CREATE INDEX floor_cp ON " + floorTable("comments") + " (photo_id)"} {
				if err := e.dbs[1].Exec(ix).Error; err != nil {
					b.Fatal(err)
				}
			}
			took := time.Since(start)
			if mysql {
				e.dbs[1].Exec("DROP TABLE floor_users, floor_photos, floor_comments")
			} else {
				e.dbs[1].Exec("DROP SCHEMA floor CASCADE")
			}
			return took
		}
		floor := floorCopyOnce()
		// The floor of the schemas: as many schemas (databases on MySQL)
		// as shards, with the floor's tables and the monolith's indexes,
		// half on each target at once, in transactions of 50 (MySQL: a
		// statement at a time), and no rows: what no split can do
		// without.
		ddl, shardCopy := floorSchemas(b, e, shards, floorDefs, true)

		// The floors again, while the same writers as the split's write
		// to the monolith through the map: what the machine left a copy
		// beside them. The writers' writes are checked with the split's.
		w := newSplitWriters(e)
		// SHARDID_SPLIT_LAYOUT=1 splits with SplitConfig.Layout, as the
		// guide asks: the monolith's IDs recorded as legacy first (not
		// timed), every row's ID checked by the plan, each run and each
		// batch, the triggers' ID rule on every write, and the writers'
		// new photos and comments given IDs of the layout.
		cfg := e.cfg
		if os.Getenv("SHARDID_SPLIT_LAYOUT") == "1" {
			cfg = withLayout(b, e)
			gen, err := shardid.NewGenerator(cfg.Layout)
			if err != nil {
				b.Fatal(err)
			}
			w.gen = gen
		}
		// SHARDID_SPLIT_WRITE_RATE: writes a second per writer (0, the
		// default: as fast as they can).
		if v, err := strconv.Atoi(os.Getenv("SHARDID_SPLIT_WRITE_RATE")); err == nil && v > 0 {
			w.pace = time.Second / time.Duration(v)
		}
		w.backoff = os.Getenv("SHARDID_SPLIT_BACKOFF") == "1"
		var loadedFloor, loadedDDL, loadedShardCopy time.Duration
		if writers > 0 {
			lctx, lstop := context.WithCancel(ctx)
			lwg := w.run(lctx, writers, int64(users))
			loadedFloor = floorCopyOnce()
			loadedDDL, loadedShardCopy = floorSchemas(b, e, shards, floorDefs, true)
			lstop()
			lwg.Wait()
			w.stall, w.stallAt, w.stallOn, w.ops = 0, time.Time{}, "", 0
		}

		plan, err := reshard.PlanSplit(ctx, cfg, []string{e.names[1], e.names[2]}, batch)
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range plan.Warnings {
			b.Logf("the plan warns: %s", w)
		}
		// SHARDID_SPLIT_TABLE_CACHE (MySQL): the server's
		// table_definition_cache and table_open_cache for the run, as the
		// plan's table-cache warning says to set them; put back after.
		if n := envInt("SHARDID_SPLIT_TABLE_CACHE", 0); mysql && n > 0 {
			var def, open int
			e.dbs[0].Raw("SELECT @@table_definition_cache").Scan(&def)
			e.dbs[0].Raw("SELECT @@table_open_cache").Scan(&open)
			if err := e.dbs[0].Exec(fmt.Sprintf("SET GLOBAL table_definition_cache = %d, table_open_cache = %d", n, n)).Error; err != nil {
				b.Fatal(err)
			}
			defer e.dbs[0].Exec(fmt.Sprintf("SET GLOBAL table_definition_cache = %d, table_open_cache = %d", def, open))
			b.Logf("table_definition_cache and table_open_cache %d for the run (were %d and %d)", n, def, open)
		}
		wctx, stop := context.WithCancel(ctx)
		wg := w.run(wctx, writers, int64(users))
		var copied int64
		var copyTime, maxFence time.Duration
		// Where the time goes: each stage's time since the one before,
		// summed over the batches ("created": from the batch's start).
		stages := map[string]time.Duration{}
		var order []string
		last := time.Now()
		// timeline: when each batch reached each stage, to place the
		// longest stall.
		type reached struct {
			at    time.Time
			stage string
		}
		var timeline []reached
		onStage := func(s string) {
			if _, ok := stages[s]; !ok {
				order = append(order, s)
			}
			stages[s] += time.Since(last)
			last = time.Now()
			timeline = append(timeline, reached{last, s})
		}
		// SHARDID_SPLIT_FENCE_STEPS=1: where each batch's fence goes, from
		// the run's own points (the stages and the test hooks between
		// them), logged per batch.
		steps := newFenceSteps(os.Getenv("SHARDID_SPLIT_FENCE_STEPS") == "1")
		onStage = steps.wrap(onStage)
		start := time.Now()
		opts := reshard.SplitOptions{OnStage: onStage, CopyTogether: os.Getenv("SHARDID_SPLIT_TOGETHER") == "1"}
		err = reshard.RunSplit(steps.context(ctx), cfg, plan, opts, func(i int, res reshard.SplitResult) {
			copied += res.Copied
			if opts.CopyTogether {
				copyTime = max(copyTime, res.CopyTime) // each batch reports the one copy
			} else {
				copyTime += res.CopyTime
			}
			maxFence = max(maxFence, res.Fenced)
			steps.batch(i, res.Fenced)
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
		if mysql { // the operator's step, not timed
			if _, err := reshard.CleanSplit(ctx, cfg); err != nil {
				b.Fatal(err)
			}
		}
		created := stages["created"]
		b.ReportMetric(ddl.Seconds(), "floor-ddl-s")
		b.ReportMetric(split.Seconds()/(floor+ddl).Seconds(), "x-floor-and-ddl")
		b.ReportMetric(float64(total)/floor.Seconds(), "floor-rows/s")
		b.ReportMetric(float64(total)/split.Seconds(), "split-rows/s")
		b.ReportMetric(float64(copied)/copyTime.Seconds(), "copy-rows/s")
		b.ReportMetric(split.Seconds()/floor.Seconds(), "x-floor")
		b.ReportMetric(created.Seconds(), "create-s")
		b.ReportMetric((split-created).Seconds()/floor.Seconds(), "x-floor-but-create")
		b.ReportMetric(float64(w.stall.Milliseconds()), "max-stall-ms")
		b.ReportMetric(float64(maxFence.Milliseconds()), "max-fence-ms")
		b.ReportMetric(float64(w.ops), "writes")
		b.ReportMetric(shardCopy.Seconds(), "floor-shard-copy-s")
		b.Logf("the floor of the copy into the shards' tables: %v to write the same rows into the %d floor schemas' tables (their bulk copy: %v); the split's copy stage is %.1fx it",
			shardCopy, shards, floor, copyTime.Seconds()/shardCopy.Seconds())
		b.Logf("%d rows, %d shards in batches of %d: floor %v (copy) + %v (schemas), split %v (copy %v), longest stall %v, longest fence %v, %d writes",
			total, shards, batch, floor, ddl, split, copyTime, w.stall, maxFence, w.ops)
		if writers > 0 {
			b.ReportMetric(split.Seconds()/(loadedFloor+loadedDDL).Seconds(), "x-loaded-floor-and-ddl")
			b.ReportMetric(loadedShardCopy.Seconds(), "loaded-floor-shard-copy-s")
			b.Logf("the floors beside the %d writers: %v (copy) + %v (schemas); the split is %.1fx them",
				writers, loadedFloor, loadedDDL, split.Seconds()/(loadedFloor+loadedDDL).Seconds())
			b.Logf("the floor of the copy into the shards' tables beside the %d writers: %v; the split's copy stage is %.1fx it",
				writers, loadedShardCopy, copyTime.Seconds()/loadedShardCopy.Seconds())
			// The layout's floor beside the writers: the schemas and the
			// rows written into their tables, without the split's reads,
			// routing, change log and checks.
			layout := loadedDDL + loadedShardCopy
			b.Logf("the layout's floor beside the writers (schemas + their tables filled): %v, %.1fx the bulk copy beside them; the split is %.1fx it",
				layout, layout.Seconds()/loadedFloor.Seconds(), split.Seconds()/layout.Seconds())
		}
		var spent []string
		for _, s := range order {
			spent = append(spent, fmt.Sprintf("%s %v", s, stages[s].Round(time.Millisecond)))
		}
		b.Logf("time to each stage, over all batches: %s", strings.Join(spent, ", "))
		if !w.stallAt.IsZero() {
			before := "the split's start"
			for _, r := range timeline {
				if r.at.After(w.stallAt) {
					break
				}
				before = fmt.Sprintf("%q of a batch at +%v", r.stage, r.at.Sub(start).Round(time.Millisecond))
			}
			b.Logf("the longest stall, %v, a write to %s from +%v, after %s", w.stall.Round(time.Millisecond), w.stallOn,
				w.stallAt.Sub(start).Round(time.Millisecond), before)
		}
		// Every acknowledged write where it belongs, once; the monolith's
		// sharded tables empty.
		w.check(b, nil)
	}
}

// fenceSteps records when a split's batch reaches each point of its fence
// (stages, and the run's test hooks), for SHARDID_SPLIT_FENCE_STEPS.
type fenceSteps struct {
	on   bool
	mu   sync.Mutex
	at   []fenceStep
	last time.Time // the previous batch's end
}

type fenceStep struct {
	name string
	at   time.Time
}

func newFenceSteps(on bool) *fenceSteps {
	return &fenceSteps{on: on, last: time.Now()}
}

// context returns ctx, with the run's points recorded when f is on.
func (f *fenceSteps) context(ctx context.Context) context.Context {
	if !f.on {
		return ctx
	}
	return reshard.WithRunPause(ctx, f.record)
}

func (f *fenceSteps) record(name string) {
	f.mu.Lock()
	f.at = append(f.at, fenceStep{name, time.Now()})
	f.mu.Unlock()
}

func (f *fenceSteps) wrap(onStage func(string)) func(string) {
	if !f.on {
		return onStage
	}
	return func(s string) { f.record(s); onStage(s) }
}

// batch prints batch i's fence, fenced long in all: the set (the fence's
// own transaction, found as what is left), then the time between each
// point and the next from "fenced" on, and forgets the points.
func (f *fenceSteps) batch(i int, fenced time.Duration) {
	if !f.on {
		return
	}
	f.mu.Lock()
	at := f.at
	f.at = nil
	f.mu.Unlock()
	from := -1
	for k, s := range at {
		if s.name == "fenced" {
			from = k
		}
	}
	if from < 0 {
		return
	}
	end := len(at) - 1
	for k := from; k < len(at); k++ {
		if at[k].name == "flipped" {
			end = k
		}
	}
	// Before the fence: each point since the batch began (the previous
	// batch's end), for where "created" and "copied" go.
	var before []string
	for k := range from + 1 {
		since := f.last
		if k > 0 {
			since = at[k-1].at
		}
		if !since.IsZero() {
			before = append(before, fmt.Sprintf("%s %v", at[k].name, at[k].at.Sub(since).Round(time.Millisecond)))
		}
	}
	if len(before) > 0 {
		fmt.Fprintf(os.Stderr, "batch %d before its fence: %s\n", i, strings.Join(before, ", "))
	}
	f.last = time.Now()
	var parts []string
	window := at[end].at.Sub(at[from].at)
	parts = append(parts, fmt.Sprintf("set %v", (fenced-window).Round(time.Millisecond)))
	for k := from + 1; k <= end; k++ {
		parts = append(parts, fmt.Sprintf("%s %v", at[k].name, at[k].at.Sub(at[k-1].at).Round(time.Millisecond)))
	}
	// To stderr: a benchmark's log keeps its first lines only.
	fmt.Fprintf(os.Stderr, "batch %d fenced %v: %s\n", i, fenced.Round(time.Millisecond), strings.Join(parts, ", "))
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
	return withPgxConn(ctx, src, func(sc *pgx.Conn) error {
		return withPgxConn(ctx, dst, func(dc *pgx.Conn) error {
			pr, pw := io.Pipe()
			done := make(chan error, 1)
			go func() {
				// Buffered, as psql's pipe is: COPY TO writes each row
				// to its writer, and COPY FROM sends what each read
				// returns as a message of its own: unbuffered, a write
				// to the server's socket per row (up to 5x slower).
				w := bufio.NewWriterSize(pw, 1<<20)
				_, err := sc.PgConn().CopyTo(ctx, w, "COPY "+table+" TO STDOUT")
				if err == nil {
					err = w.Flush()
				}
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

// bareCopyMySQL copies table on src into dstTable on dst as a user would
// by hand: one query reading every row, written with multi-row INSERTs of
// 1,000 rows in transactions of 20,000.
func bareCopyMySQL(ctx context.Context, src, dst *gorm.DB, table, dstTable string) error {
	rows, err := src.WithContext(ctx).Raw("SELECT * FROM " + table).Rows()
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	tx := dst.WithContext(ctx).Begin()
	n, inTx := 0, 0
	var batch []any
	insert := func() error {
		if len(batch) == 0 {
			return nil
		}
		row := "(" + strings.TrimSuffix(strings.Repeat("?,", len(cols)), ",") + ")"
		q := "INSERT INTO " + dstTable + " VALUES " + strings.TrimSuffix(strings.Repeat(row+",", len(batch)/len(cols)), ",")
		err := tx.Exec(q, batch...).Error
		batch = batch[:0]
		return err
	}
	for rows.Next() {
		v, err := scanValues(rows, len(cols))
		if err != nil {
			tx.Rollback()
			return err
		}
		batch = append(batch, v...)
		n++
		inTx++
		if n%1000 == 0 {
			if err := insert(); err != nil {
				tx.Rollback()
				return err
			}
		}
		if inTx == 20000 {
			if err := tx.Commit().Error; err != nil {
				return err
			}
			tx, inTx = dst.WithContext(ctx).Begin(), 0
		}
	}
	if err := rows.Err(); err != nil {
		tx.Rollback()
		return err
	}
	if err := insert(); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit().Error
}

// scanValues scans the current row of rows, of n columns, as the driver
// gives them.
func scanValues(rows *sql.Rows, n int) ([]any, error) {
	v := make([]any, n)
	p := make([]any, n)
	for i := range v {
		p[i] = &v[i]
	}
	return v, rows.Scan(p...)
}

// floorSchemas creates shards schemas (MySQL: databases) of the floor's
// tables with an index on photos.user_id and comments.photo_id, half on
// each target at once, and returns how long it took; it drops them after.
// With fill, before it drops them it copies the monolith's rows into them
// (floorShardCopy, floorShardCopyMySQL) and returns how long that took
// too.
func floorSchemas(b *testing.B, e *splitEnv, shards int, defs map[string]string, fill bool) (ddl, filled time.Duration) {
	mysql := e.dbs[0].Dialector.Name() == "mysql"
	name := func(s int) string { return fmt.Sprintf("floor_ddl_%d_%04d", os.Getpid(), s) }
	script := func(s int) []string {
		n := name(s)
		q := func(t string) string { return `"` + n + `"."` + t + `"` }
		out := []string{`CREATE SCHEMA "` + n + `"`}
		if mysql {
			q = func(t string) string { return "`" + n + "`.`" + t + "`" }
			out = []string{"CREATE DATABASE `" + n + "`"}
		}
		for _, t := range []string{"users", "photos", "comments"} {
			out = append(out, "CREATE TABLE "+q(t)+" "+defs[t])
		}
		return append(out, "CREATE INDEX floor_pu ON "+q("photos")+" (user_id)", "CREATE INDEX floor_cp ON "+q("comments")+" (photo_id)")
	}
	start := time.Now()
	errs := make(chan error, 2)
	for half := range 2 {
		go func() {
			db := e.dbs[1+half]
			for lo := half; lo < shards; lo += 100 {
				var stmts []string
				for s := lo; s < min(lo+100, shards); s += 2 {
					stmts = append(stmts, script(s)...)
				}
				var err error
				if mysql {
					for _, q := range stmts {
						if err = db.Exec(q).Error; err != nil {
							break
						}
					}
				} else {
					err = db.Transaction(func(tx *gorm.DB) error { return tx.Exec(strings.Join(stmts, ";\n")).Error })
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	ddl = time.Since(start)
	if fill {
		var err error
		if mysql {
			filled, err = floorShardCopyMySQL(context.Background(), e, shards, name)
		} else {
			filled, err = floorShardCopy(context.Background(), e, shards, name)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	for s := range shards {
		if mysql {
			e.dbs[1+s%2].Exec("DROP DATABASE `" + name(s) + "`")
		} else {
			e.dbs[1+s%2].Exec(`DROP SCHEMA "` + name(s) + `" CASCADE`)
		}
	}
	if filled > 0 && !mysql {
		// The fill's writes flushed now, not by a checkpoint during the
		// split.
		for _, db := range e.dbs[1:] {
			if err := db.Exec("CHECKPOINT").Error; err != nil {
				b.Fatal(err)
			}
		}
	}
	return ddl, filled
}

// floorShardCopy copies the monolith's rows into the floor's schemas
// (name(s), on target 1 + s%2), each row of a table into the schema of its
// id modulo shards: the floor of a split's copy stage, which writes the
// same rows into as many small tables with their indexes. Each table is
// read whole with one COPY TO STDOUT, then written, as the split writes,
// by COPY FROM STDIN into each schema's table, two sessions of each
// target at once, in transactions of 64 schemas. Only the writes are
// timed: what the servers spend to fill small tables, against the floor's
// bulk copy into three.
func floorShardCopy(ctx context.Context, e *splitEnv, shards int, name func(int) string) (time.Duration, error) {
	var took time.Duration
	for _, t := range []string{"users", "photos", "comments"} {
		per := make([][]byte, shards)
		var buf bytes.Buffer
		err := withPgxConn(ctx, e.dbs[0], func(c *pgx.Conn) error {
			_, err := c.PgConn().CopyTo(ctx, &buf, "COPY (SELECT id % "+strconv.Itoa(shards)+", * FROM "+t+") TO STDOUT")
			return err
		})
		if err != nil {
			return 0, err
		}
		for line := range bytes.Lines(buf.Bytes()) {
			k, row, ok := bytes.Cut(line, []byte("\t"))
			s, err := strconv.Atoi(string(k))
			if !ok || err != nil {
				return 0, fmt.Errorf("a row of %s without its shard: %.60q", t, line)
			}
			per[s] = append(per[s], row...)
		}
		spent, err := fillShards(shards, func(d int, chunk []int) error {
			return withPgxConn(ctx, e.dbs[1+d], func(c *pgx.Conn) error {
				return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
					for _, s := range chunk {
						if len(per[s]) == 0 {
							continue
						}
						q := `COPY "` + name(s) + `".` + t + " FROM STDIN"
						if _, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(per[s]), q); err != nil {
							return err
						}
					}
					return nil
				})
			})
		})
		if err != nil {
			return 0, err
		}
		took += spent
	}
	return took, nil
}

// floorShardCopyMySQL is floorShardCopy on MySQL/MariaDB, written as a
// split writes there and as the floor's bulk copy does (bareCopyMySQL):
// each table read whole with one query, then multi-row INSERTs of up to
// 1,000 rows into each database's table, two sessions of each target at
// once, in transactions of 64 databases. Only the writes are timed.
func floorShardCopyMySQL(ctx context.Context, e *splitEnv, shards int, name func(int) string) (time.Duration, error) {
	var took time.Duration
	for _, t := range []string{"users", "photos", "comments"} {
		rows, err := e.dbs[0].WithContext(ctx).Raw("SELECT id % " + strconv.Itoa(shards) + ", " + t + ".* FROM " + t).Rows()
		if err != nil {
			return 0, err
		}
		cols, err := rows.Columns()
		if err != nil {
			rows.Close()
			return 0, err
		}
		width := len(cols) - 1
		per := make([][]any, shards) // each shard's values, row after row
		for rows.Next() {
			v, err := scanValues(rows, len(cols))
			if err != nil {
				rows.Close()
				return 0, err
			}
			key := fmt.Sprint(v[0])
			if raw, ok := v[0].([]byte); ok {
				key = string(raw)
			}
			k, err := strconv.Atoi(key)
			if err != nil || k < 0 || k >= shards {
				rows.Close()
				return 0, fmt.Errorf("a row of %s without its shard: %v", t, v[0])
			}
			per[k] = append(per[k], v[1:]...)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, err
		}
		row := "(" + strings.TrimSuffix(strings.Repeat("?,", width), ",") + ")"
		spent, err := fillShards(shards, func(d int, chunk []int) error {
			return e.dbs[1+d].WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				for _, s := range chunk {
					for vals := per[s]; len(vals) > 0; {
						n := min(len(vals)/width, 1000)
						q := "INSERT INTO `" + name(s) + "`.`" + t + "` VALUES " + strings.TrimSuffix(strings.Repeat(row+",", n), ",")
						if err := tx.Exec(q, vals[:n*width]...).Error; err != nil {
							return err
						}
						vals = vals[n*width:]
					}
				}
				return nil
			})
		})
		if err != nil {
			return 0, err
		}
		took += spent
	}
	return took, nil
}

// fillShards writes the floor schemas' share of a table through write,
// which writes a chunk of up to 64 shards (ascending) to target 1 + d in
// one transaction: two sessions of each target at once, as the split's
// copy lanes, each shard on target 1 + s%2. It returns how long the
// writes took, and the first error.
func fillShards(shards int, write func(d int, chunk []int) error) (time.Duration, error) {
	const lanes = 2
	start := time.Now()
	errs := make(chan error, 2*lanes)
	for g := range 2 * lanes {
		go func() {
			d, lane := g%2, g/2
			var mine []int
			for s := d; s < shards; s += 2 {
				if (s/2)%lanes == lane {
					mine = append(mine, s)
				}
			}
			for lo := 0; lo < len(mine); lo += 64 {
				if err := write(d, mine[lo:min(lo+64, len(mine))]); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range 2 * lanes {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return time.Since(start), first
}

// withPgxConn runs f on a session of db's pool, as pgx sees it.
func withPgxConn(ctx context.Context, db *gorm.DB, f func(*pgx.Conn) error) error {
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
