package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// DropUnfinishedCopies drops only what a move was building: a copy that
// refuses every writer but a mover, or one with no fence and no row, and
// staging schemas; never a copy with rows that no move accounts for, nor
// an old copy, nor the shard's home.
func TestDropUnfinishedCopies(t *testing.T) {
	db1, db2 := openPostgres(t), openSecondPostgresTB(t)
	const pattern = "shardid_lo_%04d"
	for _, db := range []*gorm.DB{db1, db2} {
		for s := range 4 {
			db.Exec(fmt.Sprintf(`DROP SCHEMA IF EXISTS "`+pattern+`" CASCADE`, s))
		}
	}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db1, db2}, Names: []string{"pg1", "pg2"},
		LogicalShards: 4, SchemaPattern: pattern, Plugin: p, Map: []int{0, 0, 0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	// Shard 1: a copy on pg2 with a row and no fence, made by hand.
	db2.Exec(`CREATE SCHEMA shardid_lo_0001; CREATE TABLE shardid_lo_0001.r_photos (id BIGINT PRIMARY KEY, user_id BIGINT, caption TEXT);
		INSERT INTO shardid_lo_0001.r_photos VALUES (1, 1, 'mine')`)
	// Shard 2: a copy on pg2 with no fence and no row (a move killed
	// before it fenced its target).
	db2.Exec(`CREATE SCHEMA shardid_lo_0002; CREATE TABLE shardid_lo_0002.r_photos (id BIGINT PRIMARY KEY, user_id BIGINT, caption TEXT)`)
	// Shard 3: moved to pg2 and back: pg2 holds its old copy, fenced for good.
	for _, to := range []string{"pg2", "pg1"} {
		if _, err := reshard.MoveShard(ctx, r, nil, 3, to, reshard.MoveOptions{Models: []any{&RPhoto{}}}); err != nil {
			if errors.Is(err, reshard.ErrShardMoved) { // the old copy on pg1 from the first move
				if err := reshard.DropShardCopy(ctx, r, 3, to); err != nil {
					t.Fatal(err)
				}
				_, err = reshard.MoveShard(ctx, r, nil, 3, to, reshard.MoveOptions{Models: []any{&RPhoto{}}})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for s, want := range map[int]reshard.CopyLeft{
		1: {Database: "pg2", Tables: 1},
		2: {Database: "pg2", Tables: 1, Unfinished: true},
		3: {Database: "pg2", Tables: 1, Sealed: true},
	} {
		l, err := reshard.FindLeftovers(ctx, r, s)
		if err != nil || len(l.Copies) != 1 || l.Copies[0] != want || l.Fence != nil || len(l.Capture) > 0 {
			t.Errorf("FindLeftovers(%d) = %+v, %v; want the copy %+v only", s, l, err, want)
		}
		done, err := reshard.DropUnfinishedCopies(ctx, r, s)
		if err != nil || len(done.Copies) != map[bool]int{true: 1}[want.Unfinished] {
			t.Errorf("DropUnfinishedCopies(%d) = %+v, %v", s, done, err)
		}
	}
	var n int64
	db2.Raw("SELECT count(*) FROM shardid_lo_0001.r_photos").Scan(&n)
	if n != 1 {
		t.Errorf("the copy nobody accounts for lost its row: %d rows", n)
	}
	db2.Raw("SELECT count(*) FROM information_schema.schemata WHERE schema_name IN ('shardid_lo_0002', 'shardid_lo_0003')").Scan(&n)
	if n != 1 {
		t.Errorf("%d of the unfinished copy of 2 and the old copy of 3 left, want the old copy only", n)
	}
	if l, err := reshard.FindLeftovers(ctx, r, 0); err != nil || !l.Empty() {
		t.Errorf("FindLeftovers(0) = %+v, %v; want nothing", l, err)
	}
}

// DropUnfinishedCopies never drops the copy a move finished: after a mover
// died between its flip and lifting its target's fence, a router whose map
// still names the sealed old copy sees the new home as a copy that only the
// mover may write, like one a move was still building. Dropping it would
// leave the shard nowhere but on its sealed old copy.
func TestDropUnfinishedCopiesKeepsAFinishedCopy(t *testing.T) {
	db1, db2 := openPostgres(t), openSecondPostgresTB(t)
	newRouter := twoShardRouters(t, "shardid_lf_%04d", []string{"pg1", "pg2"}, db1, db2)
	r, stale := newRouter(), newRouter()
	ctx := context.Background()
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1, Caption: "the shard's row"}).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.MoveShard(ctx, r, nil, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}}); err != nil {
		t.Fatal(err)
	}
	// The mover dies before it lifts its target's fence.
	if _, err := reshard.FenceForMover(ctx, db2, r.Schema(1), []string{"r_photos"}); err != nil {
		t.Fatal(err)
	}
	_, err := reshard.DropUnfinishedCopies(ctx, stale, 1)
	if !errors.Is(err, reshard.ErrShardMoved) {
		t.Errorf("DropUnfinishedCopies from a stale map: %v, want ErrShardMoved", err)
	}
	var n int64
	if err := db2.Raw(`SELECT count(*) FROM "shardid_lf_0001".r_photos`).Scan(&n).Error; err != nil || n != 1 {
		t.Fatalf("the shard's new home after DropUnfinishedCopies: %d rows, %v", n, err)
	}
	if err := reshard.Unfence(ctx, r, 1, []any{&RPhoto{}}); err != nil {
		t.Fatal(err)
	}
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1, Caption: "after Unfence"}).Error; err != nil {
		t.Fatalf("a write on the new home after Unfence: %v", err)
	}
}

// TestDropUnfinishedCopiesPausedKeepsARivalsMove: DropUnfinishedCopies
// paused after it found an unfinished copy, while its lock was lost and a
// move took that copy over and finished (the copy is now the shard's home,
// with a row written there since), must not drop it when it resumes.
func TestDropUnfinishedCopiesPausedKeepsARivalsMove(t *testing.T) {
	db1, db2 := openPostgres(t), openSecondPostgresTB(t)
	newRouter := twoShardRouters(t, "shardid_lp_%04d", []string{"pg1", "pg2"}, db1, db2)
	r, mover := newRouter(), newRouter()
	ctx := context.Background()
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1, Caption: "the shard's row"}).Error; err != nil {
		t.Fatal(err)
	}
	// A copy on pg2 with no fence and no row: a move killed before it
	// fenced its target.
	if err := db2.Exec(`CREATE SCHEMA shardid_lp_0001; CREATE TABLE shardid_lp_0001.r_photos (id BIGINT PRIMARY KEY, user_id BIGINT, caption TEXT)`).Error; err != nil {
		t.Fatal(err)
	}
	paused := false
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "drop copies" || paused {
			return
		}
		paused = true
		killMoveLock(t, db1, r.Schema(1))
		if _, err := reshard.MoveShard(pctx, mover, nil, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}}); err != nil {
			t.Errorf("the move, once the clean-up's lock is gone: %v", err)
			return
		}
		if err := mover.ForKey(1).Create(&RPhoto{UserID: 1, Caption: "after the move"}).Error; err != nil {
			t.Errorf("a write to the shard's new home: %v", err)
		}
	})
	done, err := reshard.DropUnfinishedCopies(pctx, r, 1)
	if !paused {
		t.Fatal("DropUnfinishedCopies never reached its drops")
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) || len(done.Copies) > 0 {
		t.Errorf("DropUnfinishedCopies, resumed after the move: %+v, %v; want ErrMoveLockLost and nothing dropped", done, err)
	}
	var n int64
	if err := db2.Raw(`SELECT count(*) FROM "shardid_lp_0001".r_photos`).Scan(&n).Error; err != nil || n != 2 {
		t.Errorf("the shard's new home after DropUnfinishedCopies: %d rows (%v), want 2", n, err)
	}
}

// TestDropUnfinishedCopiesPausedKeepsARivalsMoveMariaDB is
// TestDropUnfinishedCopiesPausedKeepsARivalsMove on MariaDB, where the
// copy is dropped by a DROP DATABASE after the transaction that checks
// it: paused between the two, while its lock is lost and another
// operator moves the shard there, it must not drop the shard's new home.
// The copy has no fence (a move killed before it fenced its target): the
// check gives it one, marked as being dropped, and the move refuses it.
// Run again, the clean-up drops it, and the move then goes through.
func TestDropUnfinishedCopiesPausedKeepsARivalsMoveMariaDB(t *testing.T) {
	newRouter, c := mariaMoveSetup(t, "shardid_mdu")
	r := loaded(t, newRouter(), c)
	ctx := context.Background()
	seeded := seedShard(t, r, 1, 20)
	dst := r.Databases()[1]
	// A copy on my2 with no fence and no row: a move killed before it
	// fenced its target.
	for _, q := range []string{"CREATE DATABASE shardid_mdu_0001", "CREATE TABLE shardid_mdu_0001.r_photos (id BIGINT PRIMARY KEY, user_id BIGINT, caption VARCHAR(100))"} {
		if err := dst.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	opts := reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 50, FenceFor: 20 * time.Second}
	var rival error
	paused := false
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "drop database" || paused {
			return
		}
		paused = true
		killMoveLock(t, r.Databases()[0], r.Schema(1))
		_, rival = reshard.MoveShard(pctx, loaded(t, newRouter(), c), c, 1, "my2", opts)
	})
	done, err := reshard.DropUnfinishedCopies(pctx, r, 1)
	if !paused {
		t.Fatal("DropUnfinishedCopies never reached its DROP DATABASE")
	}
	if rival == nil {
		var n int64
		err := dst.Raw("SELECT count(*) FROM shardid_mdu_0001.r_photos").Scan(&n).Error
		t.Fatalf("the move to a copy being dropped went through; the shard's new home after the clean-up resumed: %d rows (%v), want %d", n, err, len(seeded))
	}
	if !errors.Is(rival, reshard.ErrMoveInProgress) {
		t.Errorf("the move to a copy being dropped: %v, want ErrMoveInProgress", rival)
	}
	if err != nil || len(done.Copies) != 1 {
		t.Errorf("DropUnfinishedCopies, resumed: %+v, %v; want the copy dropped", done, err)
	}
	// The mark of a clean-up stopped before its drop: run again, it drops
	// the copy it marked.
	for _, q := range []string{"CREATE DATABASE shardid_mdu_0001", "CREATE TABLE shardid_mdu_0001.r_photos (id BIGINT PRIMARY KEY, user_id BIGINT, caption VARCHAR(100))"} {
		if err := dst.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	dieAt(t, "drop database", func(ctx context.Context) { reshard.DropUnfinishedCopies(ctx, r, 1) })
	if _, err := reshard.MoveShard(ctx, loaded(t, newRouter(), c), c, 1, "my2", opts); !errors.Is(err, reshard.ErrMoveInProgress) {
		t.Errorf("the move to a copy a stopped clean-up marked: %v, want ErrMoveInProgress", err)
	}
	if done, err := reshard.DropUnfinishedCopies(ctx, r, 1); err != nil || len(done.Copies) != 1 {
		t.Fatalf("DropUnfinishedCopies run again: %+v, %v; want the marked copy dropped", done, err)
	}
	// A mark that failed after its table was made (its transaction
	// rolled back), or a move cut short before its fence table got its
	// mover_only column: a fence table without its state row is still no
	// fence, and the copy is still one to drop.
	for _, q := range []string{"CREATE DATABASE shardid_mdu_0001", "CREATE TABLE shardid_mdu_0001.r_photos (id BIGINT PRIMARY KEY, user_id BIGINT, caption VARCHAR(100))",
		"CREATE TABLE shardid_mdu_0001.shardid_fence_state (id INT PRIMARY KEY, fenced_until DATETIME(6) NOT NULL, token BIGINT NOT NULL, sealed BOOLEAN NOT NULL)"} {
		if err := dst.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	if done, err := reshard.DropUnfinishedCopies(ctx, r, 1); err != nil || len(done.Copies) != 1 {
		t.Fatalf("DropUnfinishedCopies of a copy with an empty fence table: %+v, %v; want it dropped", done, err)
	}
	if _, err := reshard.MoveShard(ctx, loaded(t, newRouter(), c), c, 1, "my2", opts); err != nil {
		t.Fatalf("the move, once the copy is dropped: %v", err)
	}
	var n int64
	if err := dst.Raw("SELECT count(*) FROM shardid_mdu_0001.r_photos").Scan(&n).Error; err != nil || n != int64(len(seeded)) {
		t.Errorf("the shard's new home: %d rows (%v), want %d", n, err, len(seeded))
	}

	// A clean-up paused there again, with the shard on my2 and a copy
	// left on my1, its sessions ended by the server (its lock's and the
	// one that holds the copy's lock to its drop), while another
	// clean-up drops the copy and a move makes the shard's home there:
	// resumed, it cannot drop the new home.
	src := r.Databases()[0]
	r = loaded(t, newRouter(), c)
	if err := reshard.DropShardCopy(ctx, r, 1, "my1"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"CREATE DATABASE shardid_mdu_0001", "CREATE TABLE shardid_mdu_0001.r_photos (id BIGINT PRIMARY KEY, user_id BIGINT, caption VARCHAR(100))"} {
		if err := src.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	paused = false
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "drop database" || paused {
			return
		}
		paused = true
		killMoveLock(t, dst, r.Schema(1))
		killNamedLockMySQL(t, src, "shardid_drop:shardid_mdu_0001")
		// And the session that holds the home's fence, found unsealed,
		// to the drop's end (holdUnsealed): it keeps a move's fence of
		// the home waiting while it lives.
		killOpenTransactionsMySQL(t, dst)
		if done, err := reshard.DropUnfinishedCopies(pctx, loaded(t, newRouter(), c), 1); err != nil || len(done.Copies) != 1 {
			t.Errorf("the second clean-up: %+v, %v; want the copy dropped", done, err)
		}
		if _, err := reshard.MoveShard(pctx, loaded(t, newRouter(), c), c, 1, "my1", opts); err != nil {
			t.Errorf("the move, once the second clean-up dropped the copy: %v", err)
		}
	})
	if _, err := reshard.DropUnfinishedCopies(pctx, r, 1); err == nil {
		t.Error("the first clean-up, resumed after its sessions ended: no error")
	}
	if !paused {
		t.Fatal("the first clean-up never reached its DROP DATABASE")
	}
	if err := src.Raw("SELECT count(*) FROM shardid_mdu_0001.r_photos").Scan(&n).Error; err != nil || n != int64(len(seeded)) {
		t.Errorf("the shard's new home after the first clean-up resumed: %d rows (%v), want %d", n, err, len(seeded))
	}
}

// TestDropUnfinishedCopiesFromAStaleMapKeepsARunningMove: a router whose
// map still names the shard's first home (moved from there, its old copy
// dropped since) cleans up while a move of the shard from its real home
// builds its copy on a third database. The clean-up locks the home its map
// names, which nobody holds, and saw the move's copy as unfinished: it
// dropped it under the move, which then failed. It must refuse, nothing
// dropped, and the move must finish.
func TestDropUnfinishedCopiesFromAStaleMapKeepsARunningMove(t *testing.T) {
	db1, db2 := openPostgres(t), openSecondPostgresTB(t)
	testdb.OpenSQL(t, "postgres", "shardid_test3") // created when missing
	db3, err := gorm.Open(postgres.Open(testdb.SQLDSN("postgres", "shardid_test3")), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, db3)
	newRouter := twoShardRouters(t, "shardid_ls_%04d", []string{"pg1", "pg2", "pg3"}, db1, db2, db3)
	r, stale := newRouter(), newRouter()
	ctx := context.Background()
	opts := reshard.MoveOptions{Models: []any{&RPhoto{}}}
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1, Caption: "the shard's row"}).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.MoveShard(ctx, r, nil, 1, "pg2", opts); err != nil {
		t.Fatal(err)
	}
	if err := reshard.DropShardCopy(ctx, r, 1, "pg1"); err != nil {
		t.Fatal(err)
	}
	paused := false
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "move copy" || paused {
			return
		}
		paused = true
		// Twice: with no copy of the shard on the home the map names,
		// then with an empty one there, as the stale router's Migrate
		// (a deploy with the old map) creates it.
		for i := range 2 {
			if i == 1 {
				if err := stale.Migrate(ctx, &RPhoto{}); err != nil {
					t.Error(err)
				}
			}
			done, err := reshard.DropUnfinishedCopies(pctx, stale, 1)
			t.Logf("the clean-up from the stale map: %v", err)
			if !errors.Is(err, reshard.ErrShardMoved) || len(done.Copies)+len(done.Staging) > 0 {
				t.Errorf("DropUnfinishedCopies from a stale map, a move of the shard under way: %+v, %v; want ErrShardMoved and nothing dropped", done, err)
			}
		}
	})
	_, err = reshard.MoveShard(pctx, r, nil, 1, "pg3", opts)
	if !paused {
		t.Fatal("the move never reached its copy")
	}
	if err != nil {
		t.Fatalf("the move: %v", err)
	}
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1, Caption: "after the move"}).Error; err != nil {
		t.Fatalf("a write to the shard's new home: %v", err)
	}
	var n int64
	if err := db3.Raw(`SELECT count(*) FROM "shardid_ls_0001".r_photos`).Scan(&n).Error; err != nil || n != 2 {
		t.Errorf("the shard's new home on pg3: %d rows (%v), want 2", n, err)
	}

	// Then back to pg2 (its old copy dropped first), paused before its
	// flip: pg3, its source, is sealed, pg2's copy is fenced for the
	// mover, and pg1 holds the stale router's empty schema, with no
	// fence. The clean-up dropped pg2's copy, finished and about to be
	// flipped to; the catalog then named a database with no copy.
	if err := reshard.DropShardCopy(ctx, r, 1, "pg2"); err != nil {
		t.Fatal(err)
	}
	paused = false
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "move flip" || paused {
			return
		}
		paused = true
		done, err := reshard.DropUnfinishedCopies(pctx, stale, 1)
		t.Logf("the clean-up from the stale map, the move at its flip: %v", err)
		if !errors.Is(err, reshard.ErrShardMoved) || len(done.Copies)+len(done.Staging) > 0 {
			t.Errorf("DropUnfinishedCopies from a stale map, a move of the shard at its flip: %+v, %v; want ErrShardMoved and nothing dropped", done, err)
		}
	})
	if _, err := reshard.MoveShard(pctx, r, nil, 1, "pg2", opts); err != nil {
		t.Fatalf("the move back to pg2: %v", err)
	}
	if !paused {
		t.Fatal("the move back never reached its flip")
	}
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1, Caption: "after the move back"}).Error; err != nil {
		t.Fatalf("a write to the shard's home on pg2: %v", err)
	}
	if err := db2.Raw(`SELECT count(*) FROM "shardid_ls_0001".r_photos`).Scan(&n).Error; err != nil || n != 3 {
		t.Errorf("the shard's home on pg2: %d rows (%v), want 3", n, err)
	}
}

// twoShardRouters drops the schemas of pattern's two shards on dbs (named
// names) and returns a function that makes a router of them over dbs,
// both shards on the first: each call a router of its own, whose map
// goes stale when another moves a shard.
func twoShardRouters(t *testing.T, pattern string, names []string, dbs ...*gorm.DB) func() *shardid.Router {
	t.Helper()
	for _, db := range dbs {
		for s := range 2 {
			db.Exec(fmt.Sprintf(`DROP SCHEMA IF EXISTS "`+pattern+`" CASCADE`, s))
		}
	}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2})
	return func() *shardid.Router {
		r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: names,
			LogicalShards: 2, SchemaPattern: pattern, Plugin: p, Map: []int{0, 0}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}

// A copy whose first DROP DATABASE failed on a trigger file MariaDB left
// behind (<table>.TRG-, see dropDatabaseMySQL) keeps nothing but that
// file: the drop removed its tables first. Run again, DropShardCopy and
// DropUnfinishedCopies clear the file through the home's tables, which
// they name to the drop, and drop the copy.
func TestDropCopiesClearATriggerCopyLeftByAFailedDropMariaDB(t *testing.T) {
	newRouter, c := mariaMoveSetup(t, "shardid_mdt")
	ctx := context.Background()
	seedShard(t, loaded(t, newRouter(), c), 1, 20)
	src, dst := newRouter().Databases()[0], newRouter().Databases()[1]
	// strand leaves database name on db as a failed drop leaves it: no
	// table, and r_photos.TRG- in its directory.
	strand := func(db *gorm.DB, name string) {
		t.Helper()
		reshard.WriteDataFileMySQL(t, db, name, "r_photos.TRG-")
		if err := db.Exec("DROP DATABASE `" + name + "`").Error; err == nil || !strings.Contains(err.Error(), "Error 1010") {
			t.Fatalf("DROP DATABASE %s with r_photos.TRG- in its directory: %v, want error 1010", name, err)
		}
		var n int64
		if err := db.Raw("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", name).Scan(&n).Error; err != nil || n != 0 {
			t.Fatalf("tables left in %s by the failed drop: %d (%v), want 0", name, n, err)
		}
	}
	gone := func(db *gorm.DB, name string) {
		t.Helper()
		var n int64
		if err := db.Raw("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n).Error; err != nil || n != 0 {
			t.Fatalf("database %s after the drop: %d (%v), want none", name, n, err)
		}
	}

	// A killed move's target on my2, the shard's home my1.
	if err := dst.Exec("CREATE DATABASE shardid_mdt_0001").Error; err != nil {
		t.Fatal(err)
	}
	strand(dst, "shardid_mdt_0001")
	done, err := reshard.DropUnfinishedCopies(ctx, loaded(t, newRouter(), c), 1)
	if err != nil || len(done.Copies) != 1 {
		t.Fatalf("DropUnfinishedCopies of a copy that holds a trigger file only: %+v, %v; want it dropped", done, err)
	}
	gone(dst, "shardid_mdt_0001")

	// The shard moved to my2, its old copy on my1 left by a failed drop.
	opts := reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 50, FenceFor: 20 * time.Second}
	if _, err := reshard.MoveShard(ctx, loaded(t, newRouter(), c), c, 1, "my2", opts); err != nil {
		t.Fatal(err)
	}
	strand(src, "shardid_mdt_0001")
	if err := reshard.DropShardCopy(ctx, loaded(t, newRouter(), c), 1, "my1"); err != nil {
		t.Fatalf("DropShardCopy of a copy that holds a trigger file only: %v", err)
	}
	gone(src, "shardid_mdt_0001")
}
