package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
)

const rbShards = 12

// RbItem is the table of the rebalancing tests.
type RbItem struct {
	ID     shardid.ID
	UserID int64 `shardid:"key"`
	Body   string
}

var rbLayout, _ = shardid.Instagram.WithWorkerBits(2)

func rbPlugin(t testing.TB, worker int) *shardid.Plugin {
	t.Helper()
	return layoutPlugin(t, rbLayout, rbShards, worker)
}

// rbDatabases opens three PostgreSQL databases: test, shardid_test2 and
// shardid_rebal3 (created when missing), each on connections of its own.
func rbDatabases(t testing.TB) []*gorm.DB {
	t.Helper()
	first := openPostgres(t)
	openSecondPostgresTB(t)
	var n int64
	first.Raw("SELECT count(*) FROM pg_database WHERE datname = 'shardid_rebal3'").Scan(&n)
	if n == 0 {
		if err := first.Exec("CREATE DATABASE shardid_rebal3").Error; err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
	}
	dsn := envOr("SHARDID_TEST_POSTGRES_DSN", defaultPostgresDSN)
	dbs := []*gorm.DB{first}
	for _, name := range []string{"shardid_test2", "shardid_rebal3"} {
		db, err := gorm.Open(postgres.Open(testdb.WithPostgresField(dsn, "dbname", name)), gormConfig())
		if err != nil {
			t.Fatal(err)
		}
		closeAtEnd(t, db)
		dbs = append(dbs, db)
	}
	return dbs
}

// rbRouter builds a router over dbs with the test's schema pattern.
func rbRouter(t testing.TB, dbs []*gorm.DB, p *shardid.Plugin, m []int) *shardid.Router {
	t.Helper()
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: []string{"pg1", "pg2", "pg3"},
		LogicalShards: rbShards, SchemaPattern: "shardid_rb_%04d", Plugin: p, Map: m})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rbSetup drops what earlier runs left, puts shards 0-5 on pg1 and 6-11 on
// pg2 (pg3 is new and empty), migrates, writes 20*s+5 rows to shard s, and
// saves the map in a fresh catalog on pg1.
func rbSetup(t *testing.T) (*shardid.Router, *reshard.Catalog, []*gorm.DB) {
	t.Helper()
	dbs := rbDatabases(t)
	for _, db := range dbs {
		for s := range rbShards {
			if err := db.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS shardid_rb_%04d CASCADE", s)).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	dbs[0].Exec("DROP TABLE IF EXISTS shardid_rb_catalog, shardid_rb_catalog_version, shardid_rb_catalog_setup")
	m := make([]int, rbShards)
	for s := range m {
		m[s] = s * 2 / rbShards
	}
	r := rbRouter(t, dbs, rbPlugin(t, 0), m)
	ctx := context.Background()
	if err := r.Migrate(ctx, &RbItem{}); err != nil {
		t.Fatal(err)
	}
	for s := range rbShards {
		items := make([]RbItem, 20*s+5)
		for i := range items {
			items[i] = RbItem{UserID: int64(s + rbShards*i), Body: strings.Repeat("x", 100)}
		}
		if err := r.ForShard(s).CreateInBatches(&items, 500).Error; err != nil {
			t.Fatal(err)
		}
	}
	c := &reshard.Catalog{DB: dbs[0], Table: "shardid_rb_catalog"}
	if _, err := c.Save(ctx, r); err != nil {
		t.Fatal(err)
	}
	return r, c, dbs
}

// countStatements counts the statements run through db's Raw, Row and Query
// processors.
func countStatements(t *testing.T, db *gorm.DB) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	name := fmt.Sprintf("test:count_%p", &n)
	count := func(*gorm.DB) { n.Add(1) }
	cb := db.Callback()
	if err := cb.Raw().Before("gorm:raw").Register(name, count); err != nil {
		t.Fatal(err)
	}
	if err := cb.Row().Before("gorm:row").Register(name, count); err != nil {
		t.Fatal(err)
	}
	if err := cb.Query().Before("gorm:query").Register(name, count); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cb.Raw().Remove(name); cb.Row().Remove(name); cb.Query().Remove(name) })
	return &n
}

// Sizes finds every copy of every shard, live and left over, with one
// statement per database (two with exact counts), and its rows and bytes.
func TestSizesPostgres(t *testing.T) {
	r, _, dbs := rbSetup(t)
	ctx := context.Background()
	// A leftover: a copy of shard 1 on pg3, as a failed move leaves.
	if err := dbs[2].Exec("CREATE SCHEMA shardid_rb_0001; CREATE TABLE shardid_rb_0001.rb_items (id bigint PRIMARY KEY, user_id bigint, body text)").Error; err != nil {
		t.Fatal(err)
	}
	var counts []*atomic.Int64
	for _, db := range dbs {
		counts = append(counts, countStatements(t, db))
	}
	sz, err := reshard.Sizes(ctx, r, reshard.SizeOptions{ExactRows: true})
	if err != nil {
		t.Fatal(err)
	}
	for d, n := range counts {
		if n.Load() != 2 {
			t.Errorf("Sizes with exact rows ran %d statements on %s, want 2", n.Load(), r.Names()[d])
		}
	}
	if len(sz.Copies) != rbShards+1 || !sz.ExactRows || !slices.Equal(sz.Databases, r.Names()) || sz.LogicalShards != rbShards {
		t.Fatalf("Sizes = %+v", sz)
	}
	for s := range rbShards {
		c, ok := sz.Of(s, r.DatabaseName(s))
		if !ok || c.Rows != int64(20*s+5) || c.Tables != 1 || c.Bytes <= 0 {
			t.Errorf("shard %d on %s: %+v, %v; want %d rows in 1 table", s, r.DatabaseName(s), c, ok, 20*s+5)
		}
	}
	if c, ok := sz.Of(1, "pg3"); !ok || c.Rows != 0 || c.Tables != 1 {
		t.Errorf("the leftover copy of shard 1 on pg3: %+v, %v", c, ok)
	}
	if _, ok := sz.Of(1, "pg2"); ok {
		t.Error("a copy of shard 1 on pg2, which has none")
	}
	big, _ := sz.Of(11, "pg2")
	small, _ := sz.Of(0, "pg1")
	if big.Bytes <= small.Bytes {
		t.Errorf("shard 11 (%d rows) takes %d bytes, shard 0 (%d rows) %d", big.Rows, big.Bytes, small.Rows, small.Bytes)
	}

	// Estimates: one statement per database.
	for _, n := range counts {
		n.Store(0)
	}
	est, err := reshard.Sizes(ctx, r, reshard.SizeOptions{Tables: []string{"rb_items"}})
	if err != nil {
		t.Fatal(err)
	}
	for d, n := range counts {
		if n.Load() != 1 {
			t.Errorf("Sizes ran %d statements on %s, want 1", n.Load(), r.Names()[d])
		}
	}
	for i, c := range est.Copies {
		if c.Bytes != sz.Copies[i].Bytes || c.Shard != sz.Copies[i].Shard || c.Rows < 0 {
			t.Errorf("estimated %+v, exact %+v", c, sz.Copies[i])
		}
	}
	// Only the tables asked for.
	if none, err := reshard.Sizes(ctx, r, reshard.SizeOptions{Tables: []string{"nothing_here"}}); err != nil || none.Copies[0].Tables != 0 || none.Copies[0].Bytes != 0 {
		t.Errorf("Sizes of a table no shard has: %+v, %v", none.Copies[0], err)
	}
	if _, err := reshard.Sizes(ctx, r, reshard.SizeOptions{Tables: []string{"x; DROP"}}); !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Errorf("a bad table name: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := reshard.Sizes(cancelled, r, reshard.SizeOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Sizes with a cancelled context: %v", err)
	}
}

// snapshot is everything a plan must leave alone: the schemas and tables on
// every database and the catalog's rows.
func snapshot(t *testing.T, dbs []*gorm.DB) []string {
	t.Helper()
	var out []string
	for d, db := range dbs {
		var rows []string
		if err := db.Raw(`SELECT table_schema || '.' || table_name FROM information_schema.tables
			WHERE table_schema LIKE 'shardid_rb%' OR table_name LIKE 'shardid_rb_catalog%' ORDER BY 1`).Scan(&rows).Error; err != nil {
			t.Fatal(err)
		}
		var schemas []string
		db.Raw("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'shardid_rb%' ORDER BY 1").Scan(&schemas)
		out = append(out, fmt.Sprint(d, rows, schemas))
	}
	for _, q := range []string{
		"SELECT shard || '=' || db_name FROM shardid_rb_catalog ORDER BY shard",
		"SELECT id || ':' || version FROM shardid_rb_catalog_version",
		"SELECT setup FROM shardid_rb_catalog_setup",
	} {
		var rows []string
		if err := dbs[0].Raw(q).Scan(&rows).Error; err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.Join(rows, ","))
	}
	return out
}

// Measuring and planning change nothing anywhere: not a schema, not a
// table, not the catalog.
func TestPlanChangesNothing(t *testing.T) {
	r, c, dbs := rbSetup(t)
	ctx := context.Background()
	if err := c.SaveSetup(ctx, reshard.CatalogSetup{LogicalShards: rbShards, SchemaPattern: "shardid_rb_%04d", Tables: []string{"rb_items"}}); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dbs)
	version, _ := c.Version(ctx)
	for _, opts := range []reshard.SizeOptions{{}, {ExactRows: true}, {Tables: []string{"rb_items"}}} {
		sz, err := reshard.Sizes(ctx, r, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, po := range []reshard.PlanOptions{{}, {By: reshard.ByRows}, {Drain: []string{"pg1"}}, {Fill: []string{"pg3"}}} {
			p, err := reshard.PlanRebalance(sz, r.Map(), po)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Moves) == 0 && (opts.ExactRows || po.By != reshard.ByRows) { // estimates may not have seen the rows yet
				t.Errorf("%+v: no moves planned onto the empty pg3", po)
			}
		}
	}
	if after := snapshot(t, dbs); !reflect.DeepEqual(before, after) {
		t.Errorf("planning changed something:\nbefore %v\nafter  %v", before, after)
	}
	if v, _ := c.Version(ctx); v != version || r.DatabaseName(0) != "pg1" || r.DatabaseName(11) != "pg2" {
		t.Errorf("planning changed the catalog (version %d, was %d) or the map", v, version)
	}
}

// rbCheckRows checks that every row of ids is found through r, on the
// database r's map names, and that each shard's table on its database
// holds exactly want[s] rows.
func rbCheckRows(t *testing.T, r *shardid.Router, dbs []*gorm.DB, ids []shardid.ID, want map[int]int64) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		var got RbItem
		if err := r.Get(ctx, &got, id); err != nil {
			t.Errorf("row %v: %v", id, err)
		}
	}
	for s := range rbShards {
		d := slices.Index(r.Names(), r.DatabaseName(s))
		var n int64
		if err := dbs[d].Table(r.Schema(s) + ".rb_items").Count(&n).Error; err != nil {
			t.Errorf("shard %d on %s: %v", s, r.DatabaseName(s), err)
		}
		if n != want[s] {
			t.Errorf("shard %d on %s holds %d rows, want %d", s, r.DatabaseName(s), n, want[s])
		}
	}
}

// Apply cancelled in the middle of its second move: the shard stays where
// it was and takes writes; the same plan run again skips the move done and
// finishes, with every row where the map says.
func TestRebalanceApplyInterrupted(t *testing.T) {
	r, c, dbs := rbSetup(t)
	ctx := context.Background()
	sz, err := reshard.Sizes(ctx, r, reshard.SizeOptions{ExactRows: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := reshard.PlanRebalance(sz, r.Map(), reshard.PlanOptions{By: reshard.ByRows})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Moves) < 3 {
		t.Fatalf("the plan has %d moves, the test wants 3 or more: %+v", len(p.Moves), p)
	}
	want := map[int]int64{}
	var ids []shardid.ID
	for s := range rbShards {
		want[s] = int64(20*s + 5)
		var some []shardid.ID
		r.ForShard(s).Model(&RbItem{}).Order("id").Pluck("id", &some)
		ids = append(ids, some...)
	}

	cctx, cancel := context.WithCancel(ctx)
	var events []string
	_, err = p.Apply(cctx, r, c, reshard.ApplyOptions{Move: reshard.MoveOptions{Models: []any{&RbItem{}}, Batch: 10},
		Progress: func(ev reshard.ApplyProgress) {
			events = append(events, fmt.Sprintf("%d %s", ev.Step, ev.Stage))
			if ev.Step == 2 && ev.Stage == "copying" && ev.Copied >= 20 {
				cancel() // killed in the middle of the second move's copy
			}
		}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled Apply: %v, want context.Canceled", err)
	}
	if !slices.Contains(events, "1 moved") || !slices.Contains(events, "2 failed") || slices.Contains(events, "3 started") {
		t.Errorf("events of the cancelled Apply: %v", events)
	}
	m, _, err := c.Load(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	first, second := p.Moves[0], p.Moves[1]
	if r.Names()[m[first.Shard]] != first.To || r.Names()[m[second.Shard]] != second.From {
		t.Fatalf("after the cancel the catalog maps shard %d to %s and %d to %s", first.Shard, r.Names()[m[first.Shard]], second.Shard, r.Names()[m[second.Shard]])
	}
	// The shard of the interrupted move takes writes where it is.
	extra := RbItem{UserID: int64(second.Shard), Body: "during"}
	if err := r.ForShard(second.Shard).Create(&extra).Error; err != nil {
		t.Fatalf("a write to shard %d after the interrupted move: %v", second.Shard, err)
	}
	ids = append(ids, extra.ID)
	want[second.Shard]++

	// Run again, the same plan, with a router of its own that has never
	// seen the catalog's new map (as a new process would).
	orig := make([]int, rbShards)
	for s := range orig {
		orig[s] = s * 2 / rbShards
	}
	r2 := rbRouter(t, dbs, nil, orig)
	var stages []string
	res, err := p.Apply(ctx, r2, c, reshard.ApplyOptions{Move: reshard.MoveOptions{Models: []any{&RbItem{}}},
		Progress: func(ev reshard.ApplyProgress) {
			if ev.Stage == "skipped" || ev.Stage == "moved" {
				stages = append(stages, fmt.Sprintf("%d %s", ev.Step, ev.Stage))
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Skipped) != 1 || res.Skipped[0] != first || len(res.Moved) != len(p.Moves)-1 || stages[0] != "1 skipped" {
		t.Errorf("the re-run: skipped %+v, moved %d, stages %v", res.Skipped, len(res.Moved), stages)
	}
	for _, mv := range p.Moves {
		if r2.DatabaseName(mv.Shard) != mv.To {
			t.Errorf("shard %d is on %s after the plan, want %s", mv.Shard, r2.DatabaseName(mv.Shard), mv.To)
		}
	}
	rbCheckRows(t, r2, dbs, ids, want)
	// A third run has nothing left to do.
	res, err = p.Apply(ctx, r2, c, reshard.ApplyOptions{Move: reshard.MoveOptions{Models: []any{&RbItem{}}}})
	if err != nil || len(res.Moved) != 0 || len(res.Skipped) != len(p.Moves) {
		t.Errorf("a third run: %+v, %v", res, err)
	}
	// A plan made before someone moved a shard elsewhere stops there.
	var others []string // the databases shard first.Shard is not on
	for _, n := range r2.Names() {
		if n != first.To {
			others = append(others, n)
		}
	}
	stale := reshard.Plan{Moves: []reshard.PlannedMove{{Shard: first.Shard, From: others[0], To: others[1]}}}
	if _, err := stale.Apply(ctx, r2, c, reshard.ApplyOptions{Move: reshard.MoveOptions{Models: []any{&RbItem{}}}}); !errors.Is(err, reshard.ErrCatalogConflict) {
		t.Errorf("a stale plan: %v, want ErrCatalogConflict", err)
	}
	// Nothing to move the tables by.
	if _, err := p.Apply(ctx, r2, c, reshard.ApplyOptions{}); !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Errorf("Apply without models or tables: %v", err)
	}
	// A plan that does not fit the router.
	for _, bad := range []reshard.PlannedMove{{Shard: rbShards, From: "pg1", To: "pg2"}, {Shard: 0, From: "pg1", To: "pg9"}, {Shard: 0, From: "pg1", To: "pg1"}} {
		if _, err := (reshard.Plan{Moves: []reshard.PlannedMove{bad}}).Apply(ctx, r2, c, reshard.ApplyOptions{}); !errors.Is(err, shardid.ErrInvalidConfig) && !errors.Is(err, shardid.ErrShardRange) {
			t.Errorf("applying %+v: %v", bad, err)
		}
	}
}

// Growing, the documented way: two databases full of shards, writers on
// every shard through routers that follow the catalog, a new empty database
// added, rebalanced onto. No writer fails for good, every acknowledged row
// is found where the map says, and the old copies are dropped.
func TestRebalanceGrowUnderWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("moves shards under load")
	}
	r, c, dbs := rbSetup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu      sync.Mutex
		acked   []shardid.ID
		retries atomic.Int64
		wg      sync.WaitGroup
		stop    = make(chan struct{})
	)
	for w := range 3 {
		// Each writer has a router of its own, following the catalog, as
		// another process would.
		wr := rbRouter(t, rbDatabases(t), rbPlugin(t, w+1), nil)
		if err := reshard.Follow(ctx, wr, c, 50*time.Millisecond, func(err error) { t.Error(err) }); err != nil {
			t.Fatal(err)
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
				it := RbItem{UserID: int64(w*7 + i), Body: "w"}
				for {
					err := wr.ForKey(it.UserID).Create(&it).Error
					if err == nil {
						break
					}
					if !errors.Is(err, shardid.ErrShardMoving) {
						t.Errorf("writer %d: %v", w, err)
						return
					}
					retries.Add(1)
					time.Sleep(5 * time.Millisecond)
				}
				mu.Lock()
				acked = append(acked, it.ID)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	sz, err := reshard.Sizes(ctx, r, reshard.SizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := reshard.PlanRebalance(sz, r.Map(), reshard.PlanOptions{Tolerance: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Moves) < 2 {
		t.Fatalf("plan: %+v", p)
	}
	res, err := p.Apply(ctx, r, c, reshard.ApplyOptions{Move: reshard.MoveOptions{Models: []any{&RbItem{}}, Batch: 50},
		DropCopies: true, DropDelay: 2 * time.Second})
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d moves, %d rows acknowledged, %d writes retried, %d old copies dropped", len(res.Moved), len(acked), retries.Load(), len(res.Dropped))
	if len(res.Moved) != len(p.Moves) || len(res.Dropped) != len(p.Moves) {
		t.Errorf("moved %d, dropped %d, of %d", len(res.Moved), len(res.Dropped), len(p.Moves))
	}
	onPG3 := 0
	for s := range rbShards {
		if r.DatabaseName(s) == "pg3" {
			onPG3++
		}
	}
	if onPG3 == 0 {
		t.Error("no shard on the new database")
	}
	// Every acknowledged row, through a router that loads the catalog.
	fresh := rbRouter(t, dbs, nil, nil)
	m, _, err := c.Load(ctx, fresh)
	if err != nil {
		t.Fatal(err)
	}
	fresh.SetMap(m)
	for _, id := range acked {
		var got RbItem
		if err := fresh.Get(ctx, &got, id); err != nil {
			t.Errorf("acknowledged row %v (shard %d): %v", id, id.Shard(), err)
		}
	}
	// The old copies are gone; every shard is on one database only.
	after, err := reshard.Sizes(ctx, fresh, reshard.SizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Copies) != rbShards {
		t.Errorf("%d copies of %d shards after dropping the old ones: %+v", len(after.Copies), rbShards, after.Copies)
	}
}

// On MariaDB, a database per shard: sizes from information_schema, one
// statement (two with exact counts) for the whole server.
func TestSizesMariaDB(t *testing.T) {
	db := openMySQL(t)
	const shards = 4
	for s := range shards {
		db.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS shardid_rbm_%04d", s))
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}, Names: []string{"my1"},
		LogicalShards: shards, SchemaPattern: "shardid_rbm_%04d"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Migrate(ctx, &RbItem{}); err != nil {
		t.Fatal(err)
	}
	db.Exec("DROP DATABASE IF EXISTS shardid_rbm_0003") // a shard without its database
	for s := range 3 {
		items := make([]RbItem, 100*s+1)
		for i := range items {
			items[i] = RbItem{ID: shardid.ID(i + 1), UserID: int64(s), Body: strings.Repeat("y", 200)}
		}
		if err := r.ForShard(s).CreateInBatches(&items, 200).Error; err != nil {
			t.Fatal(err)
		}
	}
	n := countStatements(t, db)
	sz, err := reshard.Sizes(ctx, r, reshard.SizeOptions{ExactRows: true, Tables: []string{"rb_items"}})
	if err != nil {
		t.Fatal(err)
	}
	if n.Load() != 2 {
		t.Errorf("Sizes with exact rows ran %d statements, want 2", n.Load())
	}
	if len(sz.Copies) != 3 {
		t.Fatalf("Sizes found %d copies, want 3 (shard 3 has no database): %+v", len(sz.Copies), sz.Copies)
	}
	for s, c := range sz.Copies {
		if c.Shard != s || c.Database != "my1" || c.Rows != int64(100*s+1) || c.Tables != 1 || c.Bytes <= 0 {
			t.Errorf("copy %d: %+v, want shard %d with %d rows", s, c, s, 100*s+1)
		}
	}
	n.Store(0)
	if _, err := reshard.Sizes(ctx, r, reshard.SizeOptions{}); err != nil || n.Load() != 1 {
		t.Errorf("Sizes: %d statements, %v; want 1", n.Load(), err)
	}
}

// Growing on MariaDB, a database per shard: four shards on one server,
// writers on all of them, rebalanced onto a second, empty server (one of
// the test's own). No writer fails for good; every acknowledged row is
// found where the catalog says.
func TestRebalanceGrowMariaDB(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a MariaDB and moves shards under load")
	}
	const shards = 4
	src := openMySQL(t)
	for s := range shards {
		src.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS shardid_rbg_%04d", s))
	}
	src.Exec("DROP TABLE IF EXISTS shardid_rbg_catalog, shardid_rbg_catalog_version, shardid_rbg_catalog_setup")
	dst := openMariaDBInstance(t)
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: shards})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{src, dst}, Names: []string{"my1", "my2"},
		LogicalShards: shards, SchemaPattern: "shardid_rbg_%04d", Plugin: p, Map: make([]int, shards)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Migrate(ctx, &RbItem{}); err != nil {
		t.Fatal(err)
	}
	c := &reshard.Catalog{DB: src, Table: "shardid_rbg_catalog"}
	if _, err := c.Save(ctx, r); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		acked []shardid.ID
		wg    sync.WaitGroup
		stop  = make(chan struct{})
	)
	for s := range int64(shards) {
		for i := range 100 * (s + 1) {
			it := RbItem{UserID: s + shards*i}
			if err := r.ForKey(it.UserID).Create(&it).Error; err != nil {
				t.Fatal(err)
			}
			acked = append(acked, it.ID)
		}
	}
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
				it := RbItem{UserID: int64(w + 2*i)}
				for {
					err := r.ForKey(it.UserID).Create(&it).Error
					if err == nil {
						break
					}
					if !errors.Is(err, shardid.ErrShardMoving) {
						t.Errorf("writer %d: %v", w, err)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
				mu.Lock()
				acked = append(acked, it.ID)
				mu.Unlock()
			}
		}()
	}
	sz, err := reshard.Sizes(ctx, r, reshard.SizeOptions{ExactRows: true})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := reshard.PlanRebalance(sz, r.Map(), reshard.PlanOptions{By: reshard.ByRows, Tolerance: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Moves) == 0 {
		t.Fatalf("no moves: %+v", plan)
	}
	res, err := plan.Apply(ctx, r, c, reshard.ApplyOptions{Move: reshard.MoveOptions{Tables: []string{"rb_items"}, Batch: 50}})
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan %+v: %d moved, %d rows acknowledged", plan.Moves, len(res.Moved), len(acked))
	m, _, err := c.Load(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(m, 1) {
		t.Errorf("nothing on my2: %v", m)
	}
	for _, id := range acked {
		var got RbItem
		if err := r.Get(ctx, &got, id); err != nil {
			t.Errorf("acknowledged row %v: %v", id, err)
		}
	}
}
