package reshard_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// seedShard writes n photos to shard of r (users shard, shard+shards, ...)
// and returns them.
func seedShard(t *testing.T, r *shardid.Router, shard, n int) []RPhoto {
	t.Helper()
	var out []RPhoto
	for i := range n {
		ph := RPhoto{UserID: int64(shard + r.LogicalShards()*i), Caption: fmt.Sprint("seed ", shard, "/", i)}
		if err := r.ForKey(ph.UserID).Create(&ph).Error; err != nil {
			t.Fatal(err)
		}
		out = append(out, ph)
	}
	return out
}

// loaded sets r's map from the catalog, as an operator's process would at
// its start, and returns r.
func loaded(t *testing.T, r *shardid.Router, c *reshard.Catalog) *shardid.Router {
	t.Helper()
	m, _, err := c.Load(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetMap(m); err != nil {
		t.Fatal(err)
	}
	return r
}

// meet returns a function that blocks its callers until n of them have
// called it (or a minute has passed).
func meet(t *testing.T, n int) func() {
	var mu sync.Mutex
	all := make(chan struct{})
	return func() {
		mu.Lock()
		if n--; n == 0 {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(time.Minute):
			t.Error("the other mover never reached the meeting point")
		}
	}
}

// moveAtOnce moves shards[i] with routers[i], all at once: every mover
// waits for the others after its verification, so the flips overlap.
func moveAtOnce(t *testing.T, c *reshard.Catalog, routers []*shardid.Router, shards []int, target string, opts reshard.MoveOptions) {
	t.Helper()
	wait := meet(t, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opts
			o.OnStage = func(s string) {
				if s == "verified" {
					wait()
				}
			}
			_, errs[i] = reshard.MoveShard(context.Background(), routers[i], c, shards[i], target, o)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("moving shard %d: %v", shards[i], err)
		}
		if got := routers[i].DatabaseName(shards[i]); got != target {
			t.Errorf("the router that moved shard %d maps it to %s", shards[i], got)
		}
	}
}

// checkMovedAtOnce checks that the catalog maps every shard in shards to
// target, that every seeded row reads back through a router fresh from the
// catalog, and that every old copy refuses writes.
func checkMovedAtOnce(t *testing.T, c *reshard.Catalog, fresh *shardid.Router, old *gorm.DB, shards []int, target string, seeded []RPhoto) {
	t.Helper()
	ctx := context.Background()
	m, _, err := c.Load(ctx, fresh)
	if err != nil {
		t.Fatal(err)
	}
	fresh.SetMap(m)
	for _, s := range shards {
		if got := fresh.DatabaseName(s); got != target {
			t.Errorf("after moves at once the catalog maps shard %d to %s, want %s (map %v)", s, got, target, m)
		}
	}
	for _, ph := range seeded {
		var got RPhoto
		if err := fresh.Get(ctx, &got, ph.ID); err != nil || got.Caption != ph.Caption {
			t.Errorf("photo %v of shard %d after the moves: %+v, %v", ph.ID, ph.ID.Shard(), got, err)
		}
	}
	for _, s := range shards {
		q := fmt.Sprintf("INSERT INTO %s.r_photos (id, user_id, caption) VALUES (7, %d, 'late')", fresh.Schema(s), s)
		if err := old.Exec(q).Error; err == nil {
			t.Errorf("the old copy of shard %d took a write", s)
		}
	}
}

// Two operators move two shards at once, each with a router loaded from
// the catalog; then one process moves two more at once. Every move stays:
// no flip undoes another.
func TestMoveTwoShardsAtOnce(t *testing.T) {
	ownDatabases(t)
	r, c, p := freshMoveSetup(t)
	var seeded []RPhoto
	for s := range 4 {
		seeded = append(seeded, seedShard(t, r, s, 60)...)
	}
	opts := reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 50, FenceFor: 30 * time.Second}
	ra, rb := loaded(t, moveRouter(t, p), c), loaded(t, moveRouter(t, p), c)
	moveAtOnce(t, c, []*shardid.Router{ra, rb}, []int{1, 2}, "pg2", opts)
	// r has not followed those moves: it loads the catalog's map first (a
	// move refuses a router whose map differs from the catalog's).
	loaded(t, r, c)
	moveAtOnce(t, c, []*shardid.Router{r, r}, []int{0, 3}, "pg2", opts)
	if r.DatabaseName(0) != "pg2" || r.DatabaseName(3) != "pg2" {
		t.Errorf("the router that moved shards 0 and 3 at once maps them to %s and %s", r.DatabaseName(0), r.DatabaseName(3))
	}
	checkMovedAtOnce(t, c, moveRouter(t, p), r.Databases()[0], []int{0, 1, 2, 3}, "pg2", seeded)
}

// mariaMoveSetup builds, over the MariaDB server and one of the test's own,
// routers of 4 logical shards (a database each, all on my1 at first), and a
// catalog on my1 holding that map. newRouter builds another router, as
// another operator's process would.
func mariaMoveSetup(t *testing.T, prefix string) (newRouter func() *shardid.Router, c *reshard.Catalog) {
	t.Helper()
	src := openMySQL(t)
	for s := range 4 {
		src.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS %s_%04d", prefix, s))
	}
	src.Exec(fmt.Sprintf("DROP TABLE IF EXISTS %s_catalog, %s_catalog_version, %s_catalog_setup", prefix, prefix, prefix))
	dst := openMariaDBInstance(t)
	// One plugin for the routers over these *gorm.DB: a database takes
	// one shardid plugin (ErrPluginConflict).
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	newRouter = func() *shardid.Router {
		r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{src, dst}, Names: []string{"my1", "my2"},
			LogicalShards: 4, SchemaPattern: prefix + "_%04d", Plugin: p, Map: []int{0, 0, 0, 0}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := newRouter()
	if err := r.Migrate(context.Background(), &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	c = &reshard.Catalog{DB: src, Table: prefix + "_catalog"}
	if _, err := c.Save(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return newRouter, c
}

// The same on MariaDB: two operators move shards 1 and 2 at once.
func TestMoveTwoShardsAtOnceMariaDB(t *testing.T) {
	newRouter, c := mariaMoveSetup(t, "shardid_m2")
	r := newRouter()
	seeded := append(seedShard(t, r, 1, 60), seedShard(t, r, 2, 60)...)
	ra, rb := loaded(t, newRouter(), c), loaded(t, newRouter(), c)
	moveAtOnce(t, c, []*shardid.Router{ra, rb}, []int{1, 2}, "my2",
		reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 50, FenceFor: 30 * time.Second})
	checkMovedAtOnce(t, c, newRouter(), r.Databases()[0], []int{1, 2}, "my2", seeded)
}

// Two operators move the same shard at once: the second is refused
// cleanly, and so are an abort (Unfence) and a Fence while the first runs.
// Once it is done, an operator still on the old map is refused too, and
// cannot lift the old copy's fence.
func TestMoveSameShardAtOnce(t *testing.T) {
	ownDatabases(t)
	r, c, p := freshMoveSetup(t)
	ctx := context.Background()
	seeded := seedShard(t, r, 1, 80)
	models := []any{&RPhoto{}}
	opts := reshard.MoveOptions{Models: models, Batch: 50, FenceFor: 30 * time.Second}
	rb := loaded(t, moveRouter(t, p), c)

	for _, at := range []string{"copied", "verified"} {
		t.Run("while the first is at "+at, func(t *testing.T) {
			r, rb := r, rb
			if at == "verified" { // the shard goes back to pg1, where its old copy is
				loaded(t, r, c)
				loaded(t, rb, c)
				if _, err := reshard.MoveShard(ctx, r, c, 1, "pg1", opts); !errors.Is(err, reshard.ErrShardMoved) {
					t.Errorf("a move onto the shard's old copy: %v, want ErrShardMoved", err)
				}
				if err := reshard.DropShardCopy(ctx, r, 1, "pg1"); err != nil {
					t.Fatal(err)
				}
			}
			from, to := r.DatabaseName(1), map[string]string{"pg1": "pg2", "pg2": "pg1"}[r.DatabaseName(1)]
			reached, resume := make(chan struct{}), make(chan struct{})
			var res reshard.MoveResult
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				o := opts
				o.OnStage = func(s string) {
					if s == at {
						close(reached)
						<-resume
					}
				}
				res, err = reshard.MoveShard(ctx, r, c, 1, to, o)
			}()
			select {
			case <-reached:
			case <-done:
				t.Fatalf("the first move ended before %s: %v", at, err)
			}
			// Each waits for the lock a little (as for a mover that was
			// killed), then gives up.
			second := opts
			second.LockWait = 300 * time.Millisecond
			if _, err := reshard.MoveShard(ctx, rb, c, 1, to, second); !errors.Is(err, reshard.ErrMoveInProgress) {
				t.Errorf("a second move of the shard at once: %v, want ErrMoveInProgress", err)
			}
			// The deadline bounds the wait for the lock; what comes before
			// the wait (the map, a session) must fit in it on a loaded
			// machine too: in a CI run 300 ms did not.
			short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			defer cancel()
			if err := reshard.Unfence(short, rb, 1, models); !errors.Is(err, reshard.ErrMoveInProgress) {
				t.Errorf("an abort during the move: %v, want ErrMoveInProgress", err)
			}
			short, cancel = context.WithTimeout(ctx, 1500*time.Millisecond)
			defer cancel()
			if err := reshard.Fence(short, rb, 1, models, time.Second); !errors.Is(err, reshard.ErrMoveInProgress) {
				t.Errorf("a fence during the move: %v, want ErrMoveInProgress", err)
			}
			close(resume)
			<-done
			if err != nil {
				t.Fatalf("the first move: %v", err)
			}
			t.Logf("moved %+v", res)
			// rb still maps shard 1 to from: it is refused, and cannot lift
			// or replace the old copy's fence.
			if _, err := reshard.MoveShard(ctx, rb, c, 1, to, opts); !errors.Is(err, reshard.ErrCatalogConflict) {
				t.Errorf("a move by an operator on the old map: %v, want ErrCatalogConflict", err)
			}
			if err := reshard.Unfence(ctx, rb, 1, models); !errors.Is(err, reshard.ErrShardMoved) {
				t.Errorf("an abort by an operator on the old map: %v, want ErrShardMoved", err)
			}
			if err := reshard.Fence(ctx, rb, 1, models, time.Millisecond); !errors.Is(err, reshard.ErrShardMoved) {
				t.Errorf("a short fence on the old copy: %v, want ErrShardMoved", err)
			}
			time.Sleep(50 * time.Millisecond)
			if err := rb.ForKey(1).Create(&RPhoto{UserID: 1}).Error; !errors.Is(err, shardid.ErrShardMoving) {
				t.Errorf("a write through the old map to the old copy on %s: %v, want ErrShardMoving", from, err)
			}
			fresh := loaded(t, moveRouter(t, p), c)
			if fresh.DatabaseName(1) != to {
				t.Fatalf("the catalog maps shard 1 to %s, want %s", fresh.DatabaseName(1), to)
			}
			for _, ph := range seeded {
				var got RPhoto
				if err := fresh.Get(ctx, &got, ph.ID); err != nil {
					t.Errorf("photo %v: %v", ph.ID, err)
				}
			}
		})
	}
}

// A mover stopped (SIGSTOP) longer than its fence, while a router writes to
// the shard's source once the fence ran out: continued, the move must not
// flip, since the write is not on the target; it fails with ErrFenceLapsed,
// the write stays where the map says, and the move run again completes.
func TestMoveFenceLapsesWhileMoverStopped(t *testing.T) {
	ownDatabases(t)
	r, c, _ := freshMoveSetup(t)
	ctx := context.Background()
	seedShard(t, r, 1, 300)
	cmd := helperProcess(t, "mover", "SHARDID_STOP_AT=verified")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "stopping" {
		t.Fatalf("the mover said %q", lines.Text())
	}
	// Wait until it is stopped, then past its 2s fence.
	for range 100 {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "T" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(2500 * time.Millisecond)
	late := RPhoto{UserID: 1, Caption: "written while the mover was stopped"}
	// Bounded: a mover stopped holding a lock must fail the test, not hang it.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.ForKey(1).WithContext(wctx).Create(&late).Error; err != nil {
		cmd.Process.Kill()
		t.Fatalf("a write once the fence ran out: %v", err)
	}
	cmd.Process.Signal(syscall.SIGCONT)
	var said []string
	for lines.Scan() {
		said = append(said, lines.Text())
	}
	cmd.Wait()
	if len(said) == 0 || !strings.HasPrefix(said[len(said)-1], "finished lapsed=true") {
		t.Fatalf("the mover, continued after its fence ran out, said %q; want a failure with ErrFenceLapsed", said)
	}
	m, _, err := c.Load(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if m[1] != 0 {
		t.Fatalf("the move flipped shard 1 to database %d though its fence lapsed", m[1])
	}
	var got RPhoto
	if err := r.Get(ctx, &got, late.ID); err != nil {
		t.Fatalf("the write made while the fence was down: %v", err)
	}
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1}).Error; err != nil {
		t.Errorf("the source after the lapsed move: %v", err)
	}
	if _, err := reshard.MoveShard(ctx, r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 200}); err != nil {
		t.Fatal(err)
	}
	if err := r.Get(ctx, &got, late.ID); err != nil || r.DatabaseName(1) != "pg2" {
		t.Errorf("after the move run again: shard 1 on %s, the late write: %v", r.DatabaseName(1), err)
	}
}

// The same pause in-process on MariaDB: the fence, judged by MariaDB's
// clock, runs out while the mover sleeps; the move fails with
// ErrFenceLapsed and does not flip.
func TestMoveFenceLapsesMariaDB(t *testing.T) {
	newRouter, c := mariaMoveSetup(t, "shardid_mlr")
	r := loaded(t, newRouter(), c)
	seedShard(t, r, 1, 100)
	other := loaded(t, newRouter(), c)
	var late RPhoto
	_, err := reshard.MoveShard(context.Background(), r, c, 1, "my2", reshard.MoveOptions{Tables: []string{"r_photos"}, FenceFor: time.Second,
		OnStage: func(s string) {
			if s != "verified" {
				return
			}
			time.Sleep(1500 * time.Millisecond) // paused past the fence
			late = RPhoto{UserID: 1, Caption: "late"}
			if err := other.ForKey(1).Create(&late).Error; err != nil {
				t.Errorf("a write once the fence ran out: %v", err)
			}
		}})
	if !errors.Is(err, reshard.ErrFenceLapsed) {
		t.Fatalf("a move paused past its fence: %v, want ErrFenceLapsed", err)
	}
	if r.DatabaseName(1) != "my1" || loaded(t, newRouter(), c).DatabaseName(1) != "my1" {
		t.Errorf("the lapsed move flipped shard 1")
	}
	var got RPhoto
	if err := r.Get(context.Background(), &got, late.ID); err != nil {
		t.Errorf("the late write: %v", err)
	}
}

// The source goes down right after the verification, so the old copy
// cannot be fenced for good. Whatever the move did, the map and the fence
// must agree once the source is back and the temporary fence has run out:
// if the catalog names the target, the old copy must refuse writes; if it
// names the source, the source is the shard's home.
func TestMoveSourceDownBeforeTheSeal(t *testing.T) {
	ownDatabases(t)
	pg := startPostgresInstance(t)
	main := openPostgres(t)
	for s := range 4 {
		main.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS shardid_msd_%04d CASCADE", s))
	}
	main.Exec("DROP TABLE IF EXISTS shardid_msd_catalog, shardid_msd_catalog_version")
	src, err := gorm.Open(postgres.Open(pg.DSN()), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, src)
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{src, main}, Names: []string{"src", "dst"},
		LogicalShards: 4, SchemaPattern: "shardid_msd_%04d", Plugin: p, Map: []int{0, 0, 0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	c := &reshard.Catalog{DB: main, Table: "shardid_msd_catalog"} // the catalog stays up
	if _, err := c.Save(ctx, r); err != nil {
		t.Fatal(err)
	}
	seedShard(t, r, 1, 40)
	const fenceFor = 4 * time.Second
	var downAt time.Time
	_, err = reshard.MoveShard(ctx, r, c, 1, "dst", reshard.MoveOptions{Models: []any{&RPhoto{}}, FenceFor: fenceFor,
		OnStage: func(s string) {
			if s == "verified" {
				downAt = time.Now()
				pg.Stop()
			}
		}})
	t.Logf("the move with its source down: %v", err)
	if downAt.IsZero() {
		t.Fatalf("the move failed before its verification: %v", err)
	}
	pg.Start()
	time.Sleep(time.Until(downAt.Add(fenceFor + time.Second))) // the temporary fence has run out
	m, _, err := c.Load(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	for range 10 { // the pool holds connections the restart broke
		werr = src.Exec("INSERT INTO shardid_msd_0001.r_photos (id, user_id, caption) VALUES (99, 1, 'stale router')").Error
		if werr == nil || strings.Contains(werr.Error(), "fenced") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	switch m[1] {
	case 1: // flipped
		if werr == nil {
			t.Errorf("the catalog names the target, and the old copy took a write after the temporary fence ran out")
		}
	case 0:
		if werr != nil {
			t.Errorf("the catalog names the source, which refuses writes: %v", werr)
		}
	}
}

// A move with a catalog that holds no map is refused before it changes
// anything: it could fence the source for good and then not flip.
func TestMoveWithAnEmptyCatalog(t *testing.T) {
	ownDatabases(t)
	r, c, _ := freshMoveSetup(t)
	r.Databases()[0].Exec("DROP TABLE IF EXISTS shardid_mv_catalog, shardid_mv_catalog_version")
	_, err := reshard.MoveShard(context.Background(), r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}})
	if !errors.Is(err, reshard.ErrInvalidCatalog) {
		t.Errorf("a move with an empty catalog: %v, want ErrInvalidCatalog", err)
	}
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1}).Error; err != nil || r.DatabaseName(1) != "pg1" {
		t.Errorf("after the refused move: shard 1 on %s, a write: %v", r.DatabaseName(1), err)
	}
}
