package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
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

const moveShards = 8

// moveLayout has worker bits: the move tests write to one shard from
// several processes, each with a worker id of its own.
var moveLayout, _ = shardid.Instagram.WithWorkerBits(2)

// createRetrying creates ph through r, retrying while its shard is fenced
// for a move, and returns how many times it had to retry.
func createRetrying(r *shardid.Router, ph *RPhoto) (int, error) {
	for retries := 0; ; retries++ {
		err := r.ForKey(ph.UserID).Create(ph).Error
		if !errors.Is(err, shardid.ErrShardMoving) {
			return retries, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func movePlugin(t testing.TB, worker int) *shardid.Plugin {
	t.Helper()
	return layoutPlugin(t, moveLayout, moveShards, worker)
}

// layoutPlugin returns a plugin of shards logical shards whose generator
// has layout and worker id worker.
func layoutPlugin(t testing.TB, layout shardid.Layout, shards, worker int) *shardid.Plugin {
	t.Helper()
	g, err := shardid.NewGenerator(layout, shardid.WithWorker(worker))
	if err != nil {
		t.Fatal(err)
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{Generator: g, LogicalShards: shards})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// helperMoveWriter is a process with its own router, following the
// catalog, that writes photos to shards 3 and 1 (retrying ErrShardMoving)
// until its standard input closes, and then writes the IDs it got
// acknowledged to $SHARDID_OUT.
func helperMoveWriter(t *testing.T) {
	worker, _ := strconv.Atoi(os.Getenv("SHARDID_WORKER"))
	p := movePlugin(t, worker)
	r := moveRouterB(t, p)
	c := &reshard.Catalog{DB: r.Databases()[0], Table: "shardid_mv_catalog"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := reshard.Follow(ctx, r, c, 50*time.Millisecond, nil); err != nil {
		fmt.Println("error", err)
		return
	}
	stop := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stop) }()
	var acked []string
	for i := 0; ; i++ {
		select {
		case <-stop:
			os.WriteFile(os.Getenv("SHARDID_OUT"), []byte(strings.Join(acked, "\n")), 0o644)
			return
		default:
		}
		user := int64(3 + moveShards*(i%5))
		if i%4 == 0 {
			user = 1
		}
		ph := RPhoto{UserID: user, Caption: "from a process"}
		if _, err := createRetrying(r, &ph); err != nil {
			fmt.Println("error", err)
			return
		}
		acked = append(acked, ph.ID.String())
	}
}

// moveRouter builds a router over the two PostgreSQL databases, opening
// its own connections, as another process would.
func moveRouter(t *testing.T, p *shardid.Plugin) *shardid.Router { return moveRouterB(t, p) }

func moveRouterB(t testing.TB, p *shardid.Plugin) *shardid.Router {
	t.Helper()
	a := openPostgres(t)
	openSecondPostgresTB(t) // creates the database when needed
	b, err := gorm.Open(postgres.Open(postgresDSN(t, 1)), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, b)
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{a, b}, Names: []string{"pg1", "pg2"},
		LogicalShards: moveShards, SchemaPattern: "shardid_mv_%04d", Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func freshMoveSetup(t *testing.T) (*shardid.Router, *reshard.Catalog, *shardid.Plugin) {
	t.Helper()
	p := movePlugin(t, 0)
	r := moveRouter(t, p)
	for _, db := range r.Databases() {
		for s := range moveShards {
			db.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS shardid_mv_%04d CASCADE", s))
		}
	}
	r.Databases()[0].Exec("DROP TABLE IF EXISTS shardid_mv_catalog, shardid_mv_catalog_version")
	if err := r.Migrate(context.Background(), &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	c := &reshard.Catalog{DB: r.Databases()[0], Table: "shardid_mv_catalog"}
	if _, err := c.Save(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return r, c, p
}

// Shard 3 moves from pg1 to pg2 while writers on two routers keep writing
// to it and to other shards: every acknowledged write ends on the target,
// nothing lands on the source after the fence, every row is found by its
// unchanged ID, and the other router follows the catalog.
func TestMoveShardUnderLoad(t *testing.T) {
	ownDatabases(t)
	if testing.Short() {
		t.Skip("a move under load takes seconds")
	}
	r, c, p := freshMoveSetup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r2 := moveRouter(t, p)
	if err := reshard.Follow(ctx, r2, c, 50*time.Millisecond, func(err error) { t.Error(err) }); err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		acked   []RPhoto
		retries int
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := range 6 {
		router := r
		if w >= 4 {
			router = r2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				user := int64(3 + moveShards*(i%5)) // shard 3 mostly
				if i%4 == 0 {
					user = int64(1 + moveShards*w) // shard 1, not moving
				}
				ph := RPhoto{UserID: user, Caption: fmt.Sprint(w, "/", i)}
				n, err := createRetrying(router, &ph)
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				mu.Lock()
				retries += n
				mu.Unlock()
				// Read it back at once, through the same router, while the
				// move goes on.
				var got RPhoto
				if err := router.Get(ctx, &got, ph.ID); err != nil || got.Caption != ph.Caption {
					t.Errorf("writer %d: reading back %v during the move: %+v, %v", w, ph.ID, got, err)
				}
				mu.Lock()
				acked = append(acked, ph)
				mu.Unlock()
			}
		}()
	}
	// Two processes with routers of their own write too.
	type proc struct {
		stdin io.Closer
		wait  func() error
		out   string
	}
	var procs []proc
	for i := range 2 {
		out := fmt.Sprintf("%s/writer%d", t.TempDir(), i)
		cmd := helperProcess(t, "movewriter", "SHARDID_OUT="+out, "SHARDID_WORKER="+strconv.Itoa(i+1))
		in, _ := cmd.StdinPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, proc{in, cmd.Wait, out})
	}
	time.Sleep(500 * time.Millisecond)
	res, err := reshard.MoveShard(ctx, r, c, 3, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 200, FenceFor: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	fromProcs := 0
	for _, p := range procs {
		p.stdin.Close()
		p.wait()
		b, err := os.ReadFile(p.out)
		if err != nil {
			t.Fatalf("a writer process reported nothing: %v", err)
		}
		for _, line := range strings.Fields(string(b)) {
			id := shardid.MustParse(line)
			acked = append(acked, RPhoto{ID: id, Caption: "from a process"})
			fromProcs++
		}
	}
	if fromProcs == 0 {
		t.Error("the writer processes acknowledged nothing")
	}
	t.Logf("moved %+v; %d writes acknowledged, %d retried during the move", res, len(acked), retries)

	if r.DatabaseName(3) != "pg2" || r2.DatabaseName(3) != "pg2" || r2.DatabaseName(1) != "pg1" {
		t.Fatalf("after the move: shard 3 on %s (and %s on the follower), shard 1 on %s", r.DatabaseName(3), r2.DatabaseName(3), r2.DatabaseName(1))
	}
	var onTarget, onSource []shardid.ID
	r.Databases()[1].Table("shardid_mv_0003.r_photos").Order("id").Pluck("id", &onTarget)
	r.Databases()[0].Table("shardid_mv_0003.r_photos").Order("id").Pluck("id", &onSource)
	for _, id := range onSource {
		if _, ok := slices.BinarySearch(onTarget, id); !ok {
			t.Errorf("row %v is on the source but not on the target", id)
		}
	}
	// Every acknowledged row, read by its ID through the follower, 8 at a time.
	moved := 0
	for _, ph := range acked {
		if ph.ID.Shard() == 3 {
			moved++
			if _, ok := slices.BinarySearch(onTarget, ph.ID); !ok {
				t.Errorf("acknowledged photo %v of shard 3 is not on the target", ph.ID)
			}
		}
	}
	jobs := make(chan RPhoto)
	var readers sync.WaitGroup
	for range 8 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for ph := range jobs {
				var got RPhoto
				if err := r2.Get(ctx, &got, ph.ID); err != nil || got.Caption != ph.Caption {
					t.Errorf("acknowledged photo %v: %+v, %v", ph.ID, got, err)
				}
			}
		}()
	}
	for _, ph := range acked {
		jobs <- ph
	}
	close(jobs)
	readers.Wait()
	if moved == 0 || len(onTarget) != moved {
		t.Errorf("the target holds %d rows of shard 3, %d were acknowledged", len(onTarget), moved)
	}
	// The old copy refuses writes for good, and is dropped on request.
	err = r.Databases()[0].Exec("INSERT INTO shardid_mv_0003.r_photos (id, user_id, caption) VALUES (1, 3, 'late')").Error
	if err == nil {
		t.Error("the old copy accepted a write after the move")
	}
	if err := reshard.DropShardCopy(ctx, r, 3, "pg2"); !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Errorf("dropping the live copy: %v, want a refusal", err)
	}
	if err := reshard.DropShardCopy(ctx, r, 3, "pg1"); err != nil {
		t.Errorf("dropping the old copy: %v", err)
	}
}

// A fence refuses writes with ErrShardMoving, only on its shard, and lifts
// by itself when its time runs out (a move that died) or with Unfence (an
// abort).
func TestFenceTimesOutAndUnfence(t *testing.T) {
	ownDatabases(t)
	r, _, _ := freshMoveSetup(t)
	ctx := context.Background()
	if err := reshard.Fence(ctx, r, 2, []any{&RPhoto{}}, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := r.ForKey(2).Create(&RPhoto{UserID: 2}).Error; !errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("a write to the fenced shard: %v, want ErrShardMoving", err)
	}
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1}).Error; err != nil {
		t.Errorf("another shard: %v", err)
	}
	time.Sleep(600 * time.Millisecond)
	if err := r.ForKey(2).Create(&RPhoto{UserID: 2}).Error; err != nil {
		t.Errorf("after the fence ran out: %v", err)
	}
	if err := reshard.Fence(ctx, r, 2, []any{&RPhoto{}}, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.ForKey(2).Create(&RPhoto{UserID: 2}).Error; !errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("under a fence for good: %v, want ErrShardMoving", err)
	}
	if err := reshard.Unfence(ctx, r, 2, []any{&RPhoto{}}); err != nil {
		t.Fatal(err)
	}
	if err := r.ForKey(2).Create(&RPhoto{UserID: 2}).Error; err != nil {
		t.Errorf("after Unfence: %v", err)
	}
}

// A target that is down fails the move cleanly: the map is unchanged and
// the source keeps taking writes. Run again once the target is up, the move
// completes, over what the failed attempt left.
func TestMoveToATargetThatIsDown(t *testing.T) {
	ownDatabases(t)
	pg := startPostgresInstance(t)
	src := openPostgres(t)
	for s := range 4 {
		src.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS shardid_mvd_%04d CASCADE", s))
	}
	dst, err := gorm.Open(postgres.Open(pg.DSN()), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, dst)
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{src, dst}, Names: []string{"src", "dst"},
		LogicalShards: 4, SchemaPattern: "shardid_mvd_%04d", Plugin: p, Map: []int{0, 0, 0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	for u := range int64(40) {
		if err := r.ForKey(u).Create(&RPhoto{UserID: u}).Error; err != nil {
			t.Fatal(err)
		}
	}
	pg.Stop()
	if _, err := reshard.MoveShard(ctx, r, nil, 1, "dst", reshard.MoveOptions{Models: []any{&RPhoto{}}}); err == nil {
		t.Fatal("a move to a stopped database succeeded")
	}
	if r.DatabaseName(1) != "src" {
		t.Errorf("after the failed move shard 1 is on %s", r.DatabaseName(1))
	}
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1}).Error; err != nil {
		t.Errorf("the source after the failed move: %v", err)
	}
	pg.Start()
	var res reshard.MoveResult
	for try := 0; try < 5; try++ { // the pool may hold connections the restart broke
		if res, err = reshard.MoveShard(ctx, r, nil, 1, "dst", reshard.MoveOptions{Models: []any{&RPhoto{}}}); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if r.DatabaseName(1) != "dst" || len(res.Tables) != 1 || res.Tables[0].Rows != 11 {
		t.Errorf("the retried move: %+v, shard 1 on %s", res, r.DatabaseName(1))
	}
}

// Shards 0-3 live on pg1, 4-7 on pg2.

// A move killed in the middle of its copy (its context cancelled) leaves the
// map on the source and the source writable; run again, it completes.
func TestMoveInterruptedMidCopy(t *testing.T) {
	ownDatabases(t)
	r, c, _ := freshMoveSetup(t)
	for i := range int64(3000) {
		if err := r.ForKey(1 + moveShards*i).Create(&RPhoto{UserID: 1 + moveShards*i}).Error; err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, err := reshard.MoveShard(ctx, r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 100,
		Progress: func(_ string, copied int64) {
			if copied >= 1000 {
				cancel() // killed mid-copy
			}
		}})
	if err == nil {
		t.Fatal("the cancelled move succeeded")
	}
	if r.DatabaseName(1) != "pg1" {
		t.Errorf("after the interrupted move shard 1 is on %s", r.DatabaseName(1))
	}
	if v, _ := c.Version(context.Background()); v != 1 {
		t.Errorf("the catalog moved to version %d", v)
	}
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1}).Error; err != nil {
		t.Errorf("the source after the interrupted move: %v", err)
	}
	res, err := reshard.MoveShard(context.Background(), r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 500})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tables[0].Rows != 3001 || r.DatabaseName(1) != "pg2" || res.Version != 2 {
		t.Errorf("the second move: %+v", res)
	}
}

// A move whose final copy fails after the fence (the target refuses a row,
// as a full disk would) lifts the fence at once and leaves the map alone.
func TestMoveFailingAfterTheFence(t *testing.T) {
	ownDatabases(t)
	r, c, _ := freshMoveSetup(t)
	var first shardid.ID
	for i := range int64(50) {
		ph := RPhoto{UserID: 2 + moveShards*i}
		if err := r.ForKey(ph.UserID).Create(&ph).Error; err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = ph.ID
		}
	}
	// The target refuses the caption "doomed". The first row gets it after
	// the first copy has passed it, so only the copy after the fence meets it.
	if err := r.Databases()[1].Exec(`CREATE SCHEMA IF NOT EXISTS shardid_mv_0002;
		CREATE TABLE IF NOT EXISTS shardid_mv_0002.r_photos (id bigint PRIMARY KEY, user_id bigint, caption text CHECK (caption <> 'doomed'))`).Error; err != nil {
		t.Fatal(err)
	}
	calls := 0
	_, err := reshard.MoveShard(context.Background(), r, c, 2, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 10,
		Progress: func(string, int64) {
			calls++
			if calls == 3 { // first copy, rows 21-30: row 1 is behind it
				if err := r.ForKey(2).Model(&RPhoto{}).Where("id = ?", first).Update("caption", "doomed").Error; err != nil {
					t.Error(err)
				}
			}
		}})
	if err == nil {
		t.Fatal("the move succeeded though the target refused a row")
	}
	if calls < 5 { // the first copy reports its 5 batches; the failing batch reports nothing
		t.Fatalf("the move failed after %d batches, before its copy after the fence: %v", calls, err)
	}
	if r.DatabaseName(2) != "pg1" {
		t.Errorf("shard 2 is on %s after the failed move", r.DatabaseName(2))
	}
	if err := r.ForKey(2).Create(&RPhoto{UserID: 2}).Error; err != nil {
		t.Errorf("the source right after the failed move: %v (the fence should be lifted)", err)
	}
}

// MariaDB to MariaDB, a database per shard: the same move, under writes.
func TestMoveShardMariaDB(t *testing.T) {
	src := openMySQL(t)
	for s := range 4 {
		src.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS shardid_mm_%04d", s))
	}
	dst := openMariaDBInstance(t)
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{src, dst}, Names: []string{"my1", "my2"},
		LogicalShards: 4, SchemaPattern: "shardid_mm_%04d", Plugin: p, Map: []int{0, 0, 0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		acked   []shardid.ID
		retries int
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				user := int64(1 + 4*(i%7) + w) // shards 1 and 2
				ph := RPhoto{UserID: user}
				n, err := createRetrying(r, &ph)
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				mu.Lock()
				retries += n
				mu.Unlock()
				mu.Lock()
				acked = append(acked, ph.ID)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	// A session taken before the move, used after it.
	held := r.ForShard(1)
	// By table name: the definition comes from SHOW CREATE TABLE on the source.
	res, err := reshard.MoveShard(ctx, r, nil, 1, "my2", reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 100})
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("moved %+v; %d acknowledged, %d retried", res, len(acked), retries)
	var onTarget []shardid.ID
	dst.Table("shardid_mm_0001.r_photos").Order("id").Pluck("id", &onTarget)
	for _, id := range acked {
		var got RPhoto
		if err := r.Get(ctx, &got, id); err != nil {
			t.Fatalf("acknowledged %v: %v", id, err)
		}
		if _, ok := slices.BinarySearch(onTarget, id); id.Shard() == 1 && !ok {
			t.Errorf("acknowledged %v of shard 1 is not on the target", id)
		}
	}
	if err := src.Exec("INSERT INTO shardid_mm_0001.r_photos (id, user_id) VALUES (1, 1)").Error; err == nil {
		t.Error("the old copy accepted a write")
	}
	// A router with the map of before the move: its update and delete of a
	// photo written on the target after the flip reach the old copy, where
	// the photo never was. MySQL has no statement triggers: the router
	// asks the old copy's fence and refuses, rather than report 0 rows.
	staleR, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{src, dst}, Names: []string{"my1", "my2"},
		LogicalShards: 4, SchemaPattern: "shardid_mm_%04d", Plugin: p, Map: []int{0, 0, 0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	late := RPhoto{UserID: 1}
	if err := r.ForKey(1).Create(&late).Error; err != nil {
		t.Fatal(err)
	}
	if err := staleR.ForKey(1).Model(&late).Update("user_id", 5).Error; !errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("a stale router's update of a photo written after the move: %v; want ErrShardMoving", err)
	}
	if err := staleR.ForKey(1).Exec("DELETE FROM {{schema}}.r_photos WHERE id = ?", late.ID).Error; !errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("a stale router's delete of a photo written after the move: %v; want ErrShardMoving", err)
	}
	if res := staleR.ForKey(2).Exec("DELETE FROM {{schema}}.r_photos WHERE id = 1"); res.Error != nil || res.RowsAffected != 0 {
		t.Errorf("a delete of no row of shard 2, which did not move: %d rows, %v; want 0 and no error", res.RowsAffected, res.Error)
	}
	if err := r.Get(ctx, &RPhoto{}, late.ID); err != nil {
		t.Errorf("the photo written after the move: %v", err)
	}
	// The held session's update runs on the target, and so does its check
	// of a write that changed no row: not on the source's sealed copy,
	// which would refuse it for good.
	if res := held.Model(&RPhoto{ID: late.ID + 1}).Update("user_id", 5); res.Error != nil || res.RowsAffected != 0 {
		t.Errorf("a session taken before the move: an update of no row after it: %d rows, %v; want 0 and no error", res.RowsAffected, res.Error)
	}
	if res := held.Model(&RPhoto{ID: late.ID}).Update("user_id", 9); res.Error != nil || res.RowsAffected != 1 {
		t.Errorf("a session taken before the move: an update of the photo after it: %d rows, %v; want 1", res.RowsAffected, res.Error)
	}
	if err := reshard.DropShardCopy(ctx, r, 1, "my1"); err != nil {
		t.Error(err)
	}
}

// A router following the catalog on PostgreSQL hears of a new map through
// LISTEN/NOTIFY, long before its polling interval.
func TestFollowListens(t *testing.T) {
	ownDatabases(t)
	r, c, p := freshMoveSetup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r2 := moveRouter(t, p)
	if err := reshard.Follow(ctx, r2, c, time.Hour, func(err error) { t.Error(err) }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let it LISTEN
	m := r.Map()
	m[0] = 1
	if err := r.SetMap(m); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Overwrite(ctx, r); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for r2.DatabaseName(0) != "pg2" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if r2.DatabaseName(0) != "pg2" {
		t.Errorf("the follower still routes shard 0 to %s, 3s after the save", r2.DatabaseName(0))
	}
}

// helperMover runs a move of shard 1 to pg2 and dies (os.Exit, as a kill:
// no deferred clean-up runs) at the stage named by $SHARDID_DIE_AT.
// With $SHARDID_MOVER_PORT, it moves a shard of poolPattern, reaching
// PostgreSQL at that port (a PgBouncer, a proxy).
func helperMover(t *testing.T) {
	r := moveRouterB(t, movePlugin(t, 3))
	c := &reshard.Catalog{DB: r.Databases()[0], Table: "shardid_mv_catalog"}
	if port := os.Getenv("SHARDID_MOVER_PORT"); port != "" {
		r = helperPooledRouter(t, port, movePlugin(t, 2))
		c = &reshard.Catalog{DB: r.Databases()[0], Table: "shardid_mvl_catalog"}
	}
	m, _, err := c.Load(context.Background(), r)
	if err != nil {
		fmt.Println("error", err)
		return
	}
	r.SetMap(m)
	die, stop := os.Getenv("SHARDID_DIE_AT"), os.Getenv("SHARDID_STOP_AT")
	batches := 0
	_, err = reshard.MoveShard(context.Background(), r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 100,
		FenceFor: 2 * time.Second,
		Progress: func(string, int64) {
			if batches++; die == "mid-copy" && batches == 5 {
				os.Exit(3)
			}
		},
		OnStage: func(s string) {
			if s == die {
				os.Exit(3)
			}
			if s == stop { // paused, as by a GC pause or a stopped VM
				fmt.Println("stopping")
				// Signal this very thread: the stop takes effect as the
				// signal call returns, before the move goes on. A signal
				// to the process may be taken by another thread, and this
				// one could run on into the next stage (taking the
				// table lock of the seal) before the group stops.
				runtime.LockOSThread()
				syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
				runtime.UnlockOSThread()
			}
		}})
	fmt.Printf("finished lapsed=%v %v\n", errors.Is(err, reshard.ErrFenceLapsed), err)
}

// A move killed at each stage, then aborted or run again: no row lost,
// none duplicated, the map consistent.
func TestMoveKilledAtEachStage(t *testing.T) {
	ownDatabases(t)
	if testing.Short() {
		t.Skip("kills a mover at five stages")
	}
	for _, tc := range []struct {
		stage   string
		flipped bool // the catalog already names the target
		fenced  bool // the source refuses writes until the fence runs out
	}{
		{"created", false, false},
		{"mid-copy", false, false},
		{"fenced", false, true},
		{"verified", false, true},
		{"sealed", false, true}, // fenced for good, not flipped: abort or run again
		{"flipped", true, true},
	} {
		t.Run(tc.stage, func(t *testing.T) {
			r, c, _ := freshMoveSetup(t)
			ctx := context.Background()
			for i := range int64(1000) {
				if err := r.ForKey(1 + moveShards*i).Create(&RPhoto{UserID: 1 + moveShards*i}).Error; err != nil {
					t.Fatal(err)
				}
			}
			cmd := helperProcess(t, "mover", "SHARDID_DIE_AT="+tc.stage)
			out, _ := cmd.Output() // stderr goes to the test's
			if cmd.ProcessState.ExitCode() != 3 {
				t.Fatalf("the mover did not die at %s: %s", tc.stage, out)
			}
			m, _, err := c.Load(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if (m[1] == 1) != tc.flipped {
				t.Fatalf("killed at %s, the catalog maps shard 1 to database %d", tc.stage, m[1])
			}
			r.SetMap(m)
			err = r.ForKey(1).Create(&RPhoto{UserID: 1}).Error
			if !tc.flipped && tc.fenced != errors.Is(err, shardid.ErrShardMoving) {
				t.Errorf("killed at %s, a write to the source: %v", tc.stage, err)
			}
			if tc.flipped {
				if err != nil {
					t.Errorf("killed after the flip, a write to the target: %v", err)
				}
				// Nothing to resume: drop the old copy.
				if err := reshard.DropShardCopy(ctx, r, 1, "pg1"); err != nil {
					t.Error(err)
				}
				return
			}
			if tc.stage == "sealed" {
				// The old copy is fenced for good: no abort, the move is
				// run again to finish.
				if err := reshard.Unfence(ctx, r, 1, []any{&RPhoto{}}); !errors.Is(err, reshard.ErrShardMoved) {
					t.Fatalf("aborting a move killed after its seal: %v, want ErrShardMoved", err)
				}
			} else { // abort, as shardid move --abort does
				if err := reshard.Unfence(ctx, r, 1, []any{&RPhoto{}}); err != nil {
					t.Fatal(err)
				}
				// The abort leaves nothing logging writes on the source.
				noCapture(t, r.Databases()[0], "shardid_mv_0001")
			}
			var before int64
			r.ForShard(1).Model(&RPhoto{}).Count(&before)
			res, err := reshard.MoveShard(ctx, r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 200})
			if err != nil {
				t.Fatalf("the move run again: %v", err)
			}
			if res.Tables[0].Rows != before || r.DatabaseName(1) != "pg2" {
				t.Errorf("run again after a kill at %s: %+v, want %d rows", tc.stage, res, before)
			}
			noCapture(t, r.Databases()[0], "shardid_mv_0001")
		})
	}
}

// noCapture fails t if schema on db holds a move's change log or one of
// its triggers.
func noCapture(t *testing.T, db *gorm.DB, schema string) {
	t.Helper()
	var n int64
	db.Raw("SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = 'shardid_changes'", schema).Scan(&n)
	if n != 0 {
		t.Errorf("the change log of %s is left on the source", schema)
	}
	db.Raw("SELECT count(*) FROM information_schema.triggers WHERE trigger_schema = ? AND trigger_name LIKE 'shardid_cap%'", schema).Scan(&n)
	if n != 0 {
		t.Errorf("%d capture triggers of %s are left on the source", n, schema)
	}
}
