package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/shardid/shardid"
	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"
)

// countOn returns how many PlgGetPhoto rows db holds with user_id key.
func countOn(t *testing.T, db *gorm.DB, key int64) int64 {
	t.Helper()
	var n int64
	if err := db.Model(&PlgGetPhoto{}).Where("user_id = ?", key).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// A *gorm.DB kept from ForShard across SetMap follows the map on its next
// statement: creates, reads, updates, deletes, Exec, Raw and transactions
// run on the shard's new database, and errors name it.
func TestKeptSessionFollowsSetMap(t *testing.T) {
	a, b := openSQLite(t), openSQLite(t)
	r := twoDBRouter(t, a, b) // shard 2 on b ("other")
	kept := r.ForShard(2)
	if err := r.SetMap([]int{0, 0, 0, 1}); err != nil { // shard 2 onto a ("main")
		t.Fatal(err)
	}
	ph := PlgGetPhoto{UserID: 2, Caption: "after"}
	if err := kept.Create(&ph).Error; err != nil {
		t.Fatalf("a create through a session kept across SetMap: %v", err)
	}
	if on := [2]int64{countOn(t, a, 2), countOn(t, b, 2)}; on != [2]int64{1, 0} {
		t.Fatalf("rows of shard 2: %d on the new database, %d on the old; want 1, 0", on[0], on[1])
	}
	var got PlgGetPhoto
	if err := kept.First(&got, ph.ID).Error; err != nil || got.Caption != "after" {
		t.Errorf("a read through the kept session: %+v, %v", got, err)
	}
	if err := kept.Model(&got).Update("caption", "updated").Error; err != nil {
		t.Errorf("an update: %v", err)
	}
	var caption string
	if err := kept.Raw("SELECT caption FROM plg_get_photos WHERE id = ?", ph.ID).Scan(&caption).Error; err != nil || caption != "updated" {
		t.Errorf("Raw after the update: %q, %v", caption, err)
	}
	if err := kept.Exec("UPDATE plg_get_photos SET caption = 'exec' WHERE id = ?", ph.ID).Error; err != nil {
		t.Errorf("Exec: %v", err)
	}
	a.Model(&PlgGetPhoto{}).Where("id = ?", ph.ID).Pluck("caption", &caption)
	if caption != "exec" {
		t.Errorf("the new database's row says %q after Exec through the kept session, want exec", caption)
	}
	// A transaction begun through the kept session runs on the new database.
	err := kept.Transaction(func(tx *gorm.DB) error { return tx.Create(&PlgGetPhoto{UserID: 2, Caption: "tx"}).Error })
	if err != nil {
		t.Errorf("a transaction through the kept session: %v", err)
	}
	if on := [2]int64{countOn(t, a, 2), countOn(t, b, 2)}; on != [2]int64{2, 0} {
		t.Errorf("rows of shard 2 after the transaction: %d new, %d old; want 2, 0", on[0], on[1])
	}
	// Errors name the database the statement ran on: the new one.
	var se *shardid.ShardError
	err = kept.First(&got, shardid.ID(1)).Error
	if !errors.Is(err, gorm.ErrRecordNotFound) || !errors.As(err, &se) || se.Database != "main" || se.Shard != 2 {
		t.Errorf("a missing row through the kept session: %v, want ErrRecordNotFound in a ShardError of shard 2 on main", err)
	}
	if err := kept.Delete(&PlgGetPhoto{}, ph.ID).Error; err != nil || countOn(t, a, 2) != 1 {
		t.Errorf("a delete through the kept session: %v, %d rows left, want 1", err, countOn(t, a, 2))
	}
	// And back: the same session follows every change.
	if err := r.SetMap([]int{0, 0, 1, 1}); err != nil {
		t.Fatal(err)
	}
	if err := kept.Create(&PlgGetPhoto{UserID: 2, Caption: "back"}).Error; err != nil || countOn(t, b, 2) != 1 {
		t.Errorf("after the map changed back: %v, %d rows on the old database, want 1", err, countOn(t, b, 2))
	}
}

// A transaction open when the map changes stays on its database: it cannot
// move mid-way. A create in it of a row of the shard that moved away is
// refused with the retryable ErrShardMoving; nothing is written.
func TestKeptSessionOpenTransactionStays(t *testing.T) {
	a, b := openSQLite(t), openSQLite(t)
	r := twoDBRouter(t, a, b)
	tx := r.ForShard(2).Begin() // on b
	if tx.Error != nil {
		t.Fatal(tx.Error)
	}
	defer tx.Rollback()
	if err := r.SetMap([]int{0, 0, 0, 1}); err != nil {
		t.Fatal(err)
	}
	err := tx.Create(&PlgGetPhoto{UserID: 2}).Error
	if !errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("a create in a transaction begun before SetMap: %v, want ErrShardMoving", err)
	}
	tx.Rollback()
	if n := countOn(t, a, 2) + countOn(t, b, 2); n != 0 {
		t.Errorf("%d rows written, want none", n)
	}
}

// A session made for a database with dbresolver does not follow the map
// away from it (dbresolver's callbacks would send the statement back to
// that database's pools): it refuses rows of the shard that moved with
// ErrShardMoving, whether dbresolver was registered before the router or
// after, and never writes them to the old database.
func TestKeptSessionDoesNotFollowAwayFromDBResolver(t *testing.T) {
	for _, before := range []bool{true, false} {
		t.Run(fmt.Sprintf("registered before the router %v", before), func(t *testing.T) {
			dir := t.TempDir()
			a, b := openSQLite(t), openSQLite(t)
			for _, db := range []*gorm.DB{a, b} {
				fresh(t, db, &PlgGetPhoto{}, &PlgGetComment{})
			}
			resolver := func() {
				t.Helper()
				if err := b.Use(dbresolver.Register(dbresolver.Config{
					Replicas: []gorm.Dialector{sqlite.Open(filepath.Join(dir, "replica.db"))},
				})); err != nil {
					t.Fatal(err)
				}
			}
			if before {
				resolver()
			}
			p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
			r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{a, b}, Names: []string{"main", "other"}, LogicalShards: 4, Plugin: p})
			if err != nil {
				t.Fatal(err)
			}
			if !before {
				resolver()
			}
			kept := r.ForShard(2) // on b
			if err := r.SetMap([]int{0, 0, 0, 1}); err != nil {
				t.Fatal(err)
			}
			if err := kept.Create(&PlgGetPhoto{UserID: 2}).Error; !errors.Is(err, shardid.ErrShardMoving) {
				t.Errorf("a create through a kept session away from dbresolver: %v, want ErrShardMoving", err)
			}
			if n := countOn(t, a, 2) + countOn(t, b.Clauses(dbresolver.Write), 2); n != 0 {
				t.Errorf("%d rows written, want none", n)
			}
			if err := r.ForShard(2).Create(&PlgGetPhoto{UserID: 2}).Error; err != nil || countOn(t, a, 2) != 1 {
				t.Errorf("a fresh session: %v", err)
			}
		})
	}
}

// waitUntil polls cond every millisecond, failing the test after a minute.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// A long-lived session on PostgreSQL, written through from several
// goroutines without a pause while the map moves its shard to another
// database: every write lands on exactly one database, those after SetMap
// on the new one, and reads after SetMap see the new database. A write under
// way at the switch may be refused with the retryable ErrShardMoving.
func TestKeptSessionFollowsSetMapPostgres(t *testing.T) {
	a, b := openPostgres(t), openSecondPostgres(t)
	ctx := context.Background()
	for _, db := range []*gorm.DB{a, b} {
		for s := range 2 {
			db.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS shardid_kf_%04d CASCADE", s))
		}
	}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{a, b}, Names: []string{"pg1", "pg2"},
		LogicalShards: 2, SchemaPattern: "shardid_kf_%04d", Plugin: p, Map: []int{0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	if err := shardid.MigrateSchema(ctx, b, "shardid_kf_0001", &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	kept := r.ForKey(1) // shard 1, on pg1
	var (
		wg      sync.WaitGroup
		stop    atomic.Bool
		written atomic.Int64
		moving  atomic.Int64 // writes refused as the map changed
		errs    = make(chan error, 4)
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				err := kept.WithContext(ctx).Create(&RPhoto{UserID: 1}).Error
				switch {
				case errors.Is(err, shardid.ErrShardMoving):
					// A write that began on the old database as the map
					// changed: refused, nothing written; retry.
					moving.Add(1)
				case err != nil:
					errs <- err
					return
				default:
					written.Add(1)
				}
			}
		}()
	}
	waitUntil(t, func() bool { return written.Load() >= 50 || len(errs) > 0 })
	if err := r.SetMap([]int{0, 1}); err != nil {
		t.Fatal(err)
	}
	atSwitch := written.Load()
	waitUntil(t, func() bool { return written.Load() >= atSwitch+200 || len(errs) > 0 })
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a write through the kept session: %v", err)
	}
	var onA, onB int64
	a.Table("shardid_kf_0001.r_photos").Count(&onA)
	b.Table("shardid_kf_0001.r_photos").Count(&onB)
	if onA+onB != written.Load() {
		t.Errorf("%d + %d rows on the two databases, %d written", onA, onB, written.Load())
	}
	if moving.Load() > 4 {
		t.Errorf("%d writes refused with ErrShardMoving; at most one per writer may be under way at the switch", moving.Load())
	}
	if onB < written.Load()-atSwitch-4 { // at most one write per writer was under way at the switch
		t.Errorf("%d rows on the new database; at least %d were written after SetMap", onB, written.Load()-atSwitch-4)
	}
	// Writes and reads from now on go to the new database only.
	ph := RPhoto{UserID: 1, Caption: "after"}
	if err := kept.Create(&ph).Error; err != nil {
		t.Fatal(err)
	}
	var n int64
	b.Table("shardid_kf_0001.r_photos").Where("id = ?", ph.ID).Count(&n)
	if n != 1 {
		t.Errorf("the row written after SetMap is not on the new database")
	}
	var total int64
	if err := kept.Model(&RPhoto{}).Count(&total).Error; err != nil || total != onB+1 {
		t.Errorf("a read through the kept session counts %d rows (%v), want the new database's %d", total, err, onB+1)
	}
}
