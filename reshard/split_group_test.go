package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardid/shardid/internal/sqllock"
	"github.com/shardid/shardid/reshard"
)

// TestRunSplitStoppedInALaterBatchPostgres: RunSplit with CopyTogether
// copies every batch together and fences them one by one. Stopped in the second batch, before
// its seal (its lock lost) and, run again, after it (its flip refused):
// the batches before it stay split, the batch and those after it stay in
// the monolith taking writes (their change log stopped, nothing left
// moving), or sealed for the flip the next run finishes; and RunSplit run
// again finishes the split with every row where it belongs.
func TestRunSplitStoppedInALaterBatchPostgres(t *testing.T) {
	t.Parallel()
	testRunSplitStoppedInALaterBatch(t, newSplitEnvPG(t, 4, 20, 2, 2))
}

// TestRunSplitStoppedInALaterBatchMariaDB is
// TestRunSplitStoppedInALaterBatchPostgres on MariaDB.
func TestRunSplitStoppedInALaterBatchMariaDB(t *testing.T) {
	t.Parallel()
	testRunSplitStoppedInALaterBatch(t, newSplitEnvMySQL(t, 4, 20, 2, 2))
}

func testRunSplitStoppedInALaterBatch(t *testing.T, e *splitEnv) {
	ctx := context.Background()
	mono := e.dbs[0]
	plan, err := reshard.PlanSplit(ctx, e.cfg, e.names[1:], 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Batches) != 4 {
		t.Fatalf("a plan of %d batches, want 4 of one shard", len(plan.Batches))
	}
	first, second := plan.Batches[0][0], plan.Batches[1][0]
	status := func() reshard.SplitStatus {
		t.Helper()
		st, err := reshard.ReadSplitStatus(ctx, e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// 1. The second batch's lock lost before its seal.
	seals := 0
	pctx := reshard.WithRunPause(ctx, func(at string) {
		if at == "split seal" {
			if seals++; seals == 2 {
				killMoveLock(t, mono, monoSchema(mono))
			}
		}
	})
	var done []int
	err = reshard.RunSplit(pctx, e.cfg, plan, reshard.SplitOptions{CopyTogether: true}, func(k int, _ reshard.SplitResult) { done = append(done, k) })
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Fatalf("RunSplit, its lock lost in the second batch: %v, want ErrMoveLockLost", err)
	}
	t.Logf("stopped: %v", err)
	if len(done) != 1 || done[0] != 0 {
		t.Errorf("batches reported done: %v, want the first only", done)
	}
	v := e.m.Load()
	if v.Shared(first) {
		t.Errorf("shard %d, the first batch's, is still in the monolith", first)
	}
	for _, batch := range plan.Batches[1:] {
		s := batch[0]
		if !v.Shared(s) {
			t.Errorf("shard %d left the monolith, its batch stopped", s)
		}
		// User 4+s is of shard s: the monolith takes its writes.
		if res := mono.Exec("UPDATE users SET name = 'after the stop' WHERE id = ?", 4+s); res.Error != nil || res.RowsAffected != 1 {
			t.Errorf("a write to shard %d on the monolith after the stop: %v, %d rows", s, res.Error, res.RowsAffected)
		}
	}
	if st := status(); len(st.Moving) > 0 || st.Backlog != 0 || len(st.Sealed) != 1 {
		t.Errorf("after the stop: moving %v, %d entries in the change log, sealed %v; want none moving or logged, the first batch sealed", st.Moving, st.Backlog, st.Sealed)
	}

	// 2. Run again: the second batch's flip refused after its seal.
	if _, err := e.cat.LoadMap(ctx, e.m); err != nil {
		t.Fatal(err)
	}
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at == "split flip" {
			if err := reshard.BumpCatalogVersion(pctx, e.cat); err != nil {
				t.Error(err)
			}
		}
	})
	err = reshard.RunSplit(pctx, e.cfg, plan, reshard.SplitOptions{CopyTogether: true}, nil)
	if !errors.Is(err, reshard.ErrCatalogConflict) {
		t.Fatalf("RunSplit run again, its second batch's flip refused: %v, want ErrCatalogConflict", err)
	}
	t.Logf("stopped again: %v", err)
	if st := status(); len(st.Moving) > 1 || st.Backlog != 0 || len(st.Pending) != 1 || st.Pending[0] != second {
		t.Errorf("after the refused flip: moving %v, %d entries in the change log, flips pending %v; want only shard %d's flip pending, nothing else logged",
			st.Moving, st.Backlog, st.Pending, second)
	}
	if err := mono.Exec("UPDATE users SET name = 'sealed' WHERE id = ?", 4+second).Error; !isFenced(err) {
		t.Errorf("a write to shard %d, sealed, its flip refused: %v, want it refused", second, err)
	}
	for _, batch := range plan.Batches[2:] {
		s := batch[0]
		if res := mono.Exec("UPDATE users SET name = 'after the second stop' WHERE id = ?", 4+s); res.Error != nil || res.RowsAffected != 1 {
			t.Errorf("a write to shard %d on the monolith after the second stop: %v, %d rows", s, res.Error, res.RowsAffected)
		}
	}

	// 3. Run again: it finishes.
	if _, err := e.cat.LoadMap(ctx, e.m); err != nil {
		t.Fatal(err)
	}
	if err := reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{CopyTogether: true}, nil); err != nil {
		t.Fatalf("RunSplit run a third time: %v", err)
	}
	if _, err := reshard.CleanSplit(ctx, e.cfg); err != nil {
		t.Fatal(err)
	}
	v = e.m.Load()
	for s := range 4 {
		if v.Shared(s) {
			t.Errorf("shard %d is still in the monolith", s)
		}
	}
	for _, batch := range plan.Batches[1:] {
		s := batch[0]
		want := "after the second stop"
		if s == second {
			want = "after the stop"
		}
		db, users := e.table(4+int64(s), "users")
		var got []string
		if err := db.Raw("SELECT name FROM "+users+" WHERE id = ?", 4+s).Scan(&got).Error; err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("user %d on its target: %q (%v), want %q once", 4+s, got, err, want)
		}
	}
	var left int64
	if err := mono.Raw("SELECT count(*) FROM users").Scan(&left).Error; err != nil || left != 0 {
		t.Errorf("the monolith holds %d users (%v) after the split, want 0", left, err)
	}
	var total int64
	for s := range 4 {
		db, users := e.table(int64(s), "users")
		var n int64
		if err := db.Raw("SELECT count(*) FROM " + users).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != 20 {
		t.Errorf("%d users on the targets, want the monolith's 20", total)
	}
}

// TestRunSplitManyShardsAtOncePostgres splits 1,000 shards in 4 batches,
// copied together (CopyTogether): every transaction of the copy, its sums and its
// catch-up must hold a bounded number of shards' tables. One transaction
// over each target's 500 shards (its tables, indexes and TOAST tables,
// each locked to its end) ran the server's lock table out
// (max_locks_per_transaction times max_connections, shared by every
// session) in the benchmark's split of 2,000 shards: ERROR: out of shared
// memory, for the application's writes too. The test samples pg_locks on
// the targets from the end of the schemas' creation (whose transactions
// of 50 schemas are bounded apart) to the end, and fails if a session
// held more than 1,000 locks there (the most now: a foreign keys'
// validation of 64 shards, 768; before, a copy lane of 250 shards held
// 1,502).
//
// It runs alone, not in parallel: its transactions lock hundreds of objects each, a
// large part of the server's shared lock table (64 slots a connection by
// default), which the other tests' splits would then run out of.
func TestRunSplitManyShardsAtOncePostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 1,000 schemas")
	}
	e := newSplitEnvPG(t, 1000, 2000, 2, 2)
	ctx := context.Background()
	plan, err := reshard.PlanSplit(ctx, e.cfg, e.names[1:], 250)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	most, at := int64(0), ""
	created := make(chan struct{})
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		select {
		case <-created:
		case <-stop:
			return
		}
		for {
			for d := 1; d <= 2; d++ {
				var rows []struct {
					Pid   int
					N     int64
					Query string
				}
				q := "SELECT l.pid, count(*) AS n, max(a.query) AS query FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND l.pid <> pg_backend_pid() GROUP BY l.pid"
				if err := e.dbs[d].Raw(q).Scan(&rows).Error; err != nil {
					continue
				}
				mu.Lock()
				for _, r := range rows {
					if r.N > most {
						most, at = r.N, e.names[d]+", "+r.Query[:min(len(r.Query), 200)]
					}
				}
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	batches := 0
	err = reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{CopyTogether: true, OnStage: func(st string) {
		if st == "created" {
			close(created)
		}
	}}, func(int, reshard.SplitResult) { batches++ })
	close(stop)
	<-sampled
	if err != nil {
		t.Fatalf("RunSplit of 1,000 shards: %v", err)
	}
	t.Logf("the most locks a session held on a target after the schemas were created: %d (%s)", most, at)
	if most > 1000 {
		t.Errorf("a session held %d locks on %s: a transaction over too many shards' tables", most, at)
	}
	if batches != 4 {
		t.Errorf("%d batches, want 4", batches)
	}
	v := e.m.Load()
	for s := range 1000 {
		if v.Shared(s) {
			t.Fatalf("shard %d is still in the monolith", s)
		}
	}
	want := map[string]int64{"users": 2000, "photos": 4000, "comments": 8000}
	got := map[string]int64{}
	for d := 1; d <= 2; d++ {
		for tbl := range want {
			var n int64
			q := "SELECT coalesce(sum((xpath('/row/n/text()', query_to_xml('SELECT count(*) AS n FROM ' || quote_ident(nspname) || '." + tbl + "', false, true, '')))[1]::text::bigint), 0) FROM pg_namespace WHERE nspname ~ '^shard_[0-9]{4}$'"
			if err := e.dbs[d].Raw(q).Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			got[tbl] += n
		}
	}
	for tbl, n := range want {
		if got[tbl] != n {
			t.Errorf("%s: %d rows on the targets, want %d", tbl, got[tbl], n)
		}
	}
}

// TestRunSplitCascadeInALaterBatchPostgres: a comment deleted by its
// photo's ON DELETE CASCADE is logged with no known shard (its photo is
// gone when its trigger looks its shard up). A photo of the second batch
// deleted while the first batch, copied with it (CopyTogether), is sealed
// and not yet flipped must take its comments with it on the target too:
// the entries of no known shard are logged for the batches left, not
// only until the first seal.
func TestRunSplitCascadeInALaterBatchPostgres(t *testing.T) {
	t.Parallel()
	for _, together := range []bool{false, true} {
		t.Run(fmt.Sprint("together ", together), func(t *testing.T) {
			ctx := context.Background()
			e := newSplitEnvPG(t, 4, 20, 2, 2)
			mono := e.dbs[0]
			if err := mono.Exec(`ALTER TABLE comments DROP CONSTRAINT comments_photo_id_fkey,
				ADD CONSTRAINT comments_photo_id_fkey FOREIGN KEY (photo_id) REFERENCES photos(id) ON DELETE CASCADE`).Error; err != nil {
				t.Fatal(err)
			}
			plan, err := reshard.PlanSplit(ctx, e.cfg, e.names[1:], 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(plan.Batches) != 2 {
				t.Fatalf("a plan of %d batches, want 2", len(plan.Batches))
			}
			later := plan.Batches[1][0]
			// A photo of shard later with comments: user 4+later's.
			var photo int64
			if err := mono.Raw("SELECT p.id FROM photos p WHERE p.user_id = ? AND EXISTS (SELECT 1 FROM comments c WHERE c.photo_id = p.id) ORDER BY p.id LIMIT 1", 4+later).Scan(&photo).Error; err != nil || photo == 0 {
				t.Fatalf("no photo of user %d with comments: %v", 4+later, err)
			}
			var comments []int64
			if err := mono.Raw("SELECT id FROM comments WHERE photo_id = ?", photo).Scan(&comments).Error; err != nil {
				t.Fatal(err)
			}
			deleted := false
			pctx := reshard.WithRunPause(ctx, func(at string) {
				// The first batch sealed, before its flip: the second
				// batch's shards take writes on the monolith.
				if at == "split flip" && !deleted {
					deleted = true
					if res := mono.Exec("DELETE FROM photos WHERE id = ?", photo); res.Error != nil || res.RowsAffected != 1 {
						t.Errorf("deleting photo %d: %v, %d rows", photo, res.Error, res.RowsAffected)
					}
				}
			})
			if err := reshard.RunSplit(pctx, e.cfg, plan, reshard.SplitOptions{CopyTogether: together}, nil); err != nil {
				t.Fatal(err)
			}
			if !deleted {
				t.Fatal("the run never paused before a flip")
			}
			db, tbl := e.table(4+int64(later), "comments")
			var left int64
			if err := db.Raw("SELECT count(*) FROM "+tbl+" WHERE id IN ?", comments).Scan(&left).Error; err != nil {
				t.Fatal(err)
			}
			if left != 0 {
				t.Errorf("%d of the %d comments of photo %d, deleted with it on the monolith, are on shard %d's target", left, len(comments), photo, later)
			}
			db, tbl = e.table(4+int64(later), "photos")
			if err := db.Raw("SELECT count(*) FROM "+tbl+" WHERE id = ?", photo).Scan(&left).Error; err != nil || left != 0 {
				t.Errorf("photo %d, deleted on the monolith, on shard %d's target: %d (%v)", photo, later, left, err)
			}
		})
	}
}

// TestSplitFinishingASealedBatchEndsALeftChangeLogPostgres: a run of
// batches copied together whose process dies after the second batch's
// seal (its lock lost, then held by another session, so its clean-up
// never runs) leaves the later batches' shards, and the rows of no known
// shard, logged. Finishing the sealed batch alone (SplitShards of its
// shards) must end that logging: no run uses it, and the next run starts
// its own.
func TestSplitFinishingASealedBatchEndsALeftChangeLogPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	mono := e.dbs[0]
	plan, err := reshard.PlanSplit(ctx, e.cfg, e.names[1:], 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Batches) != 4 {
		t.Fatalf("a plan of %d batches, want 4", len(plan.Batches))
	}
	pool, err := mono.DB()
	if err != nil {
		t.Fatal(err)
	}
	var rival *sqllock.Lock
	flips := 0
	pctx := reshard.WithRunPause(ctx, func(at string) {
		if at == "split flip" {
			if flips++; flips == 2 {
				// The process "dies": its lock's session ends, and
				// another session takes the lock before it can reclaim it.
				killMoveLock(t, mono, monoSchema(mono))
				var err error
				if rival, err = sqllock.Acquire(ctx, pool, "postgres", sqllock.Key{Class: "shardid:move", Name: "shardid_move:" + monoSchema(mono)}, sqllock.Options{}); err != nil {
					t.Errorf("taking the split's lock: %v", err)
				}
			}
		}
	})
	err = reshard.RunSplit(pctx, e.cfg, plan, reshard.SplitOptions{CopyTogether: true}, nil)
	if err == nil {
		t.Fatal("RunSplit, its lock lost after the second seal: no error")
	}
	if rival == nil {
		t.Fatal("the run never reached its second flip")
	}
	var logged []int
	if err := mono.Raw("SELECT shard FROM shardid_split_state WHERE moving ORDER BY shard").Scan(&logged).Error; err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(logged, -1) {
		t.Fatalf("after the run died: logged %v, want the rows of no known shard (-1) among them: the test's premise", logged)
	}
	rival.Release()
	if _, err := e.cat.LoadMap(ctx, e.m); err != nil {
		t.Fatal(err)
	}
	second := plan.Batches[1]
	to := make([]string, len(second))
	for i, s := range second {
		to[i] = plan.To[s]
	}
	if _, err := reshard.SplitShards(ctx, e.cfg, second, to, reshard.SplitOptions{}); err != nil {
		t.Fatalf("finishing the sealed batch: %v", err)
	}
	logged = nil // Scan leaves a slice as it is when no row comes
	if err := mono.Raw("SELECT shard FROM shardid_split_state WHERE moving ORDER BY shard").Scan(&logged).Error; err != nil {
		t.Fatal(err)
	}
	var backlog int64
	if err := mono.Raw("SELECT count(*) FROM shardid_split_changes").Scan(&backlog).Error; err != nil {
		t.Fatal(err)
	}
	if len(logged) > 0 || backlog > 0 {
		t.Errorf("after the sealed batch was finished: logged %v, %d entries in the change log; want none", logged, backlog)
	}
	// The rest of the plan still splits.
	if err := reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{CopyTogether: true}, nil); err != nil {
		t.Fatalf("the plan run again: %v", err)
	}
	v := e.m.Load()
	for s := range 4 {
		if v.Shared(s) {
			t.Errorf("shard %d is still in the monolith", s)
		}
	}
}
