package shardid_test

import (
	"slices"
	"sync"
	"time"

	"context"
	"fmt"
	"github.com/shardid/shardid/internal/testdb"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
)

// AtkPlPhoto is the model of TestTxKeepsItsPlacement.
type AtkPlPhoto struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Caption string
}

// TestTxKeepsItsPlacement begins a transaction on a shard that lives in a
// schema of its own, then changes the map so that the shard is shared on
// another database. The transaction stays on its database, and so must its
// table names: its statements read the shard's schema, never the old
// database's own tables (another placement's, holding other shards' rows).
func TestTxKeepsItsPlacement(t *testing.T) {
	ctx := context.Background()
	db0, db1 := openPostgres(t), openPostgres(t)
	const pattern = "shardid_atkpl_%04d"
	for s := range 2 {
		if err := db0.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS "+pattern+" CASCADE", s)).Error; err != nil {
			t.Fatal(err)
		}
	}
	fresh(t, db0, &AtkPlPhoto{})
	m, err := shardmap.New(shardmap.Config{Databases: []string{"a", "b"}, LogicalShards: 2,
		SchemaPattern: pattern, Assign: []int{0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db0, db1}, ShardMap: m, Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(ctx, &AtkPlPhoto{}); err != nil {
		t.Fatal(err)
	}
	if err := r.ForShard(1).Create(&AtkPlPhoto{UserID: 1, Caption: "schema"}).Error; err != nil {
		t.Fatal(err)
	}
	if err := db0.Exec("INSERT INTO atk_pl_photos (id, user_id, caption) VALUES (1, 1, 'shared')").Error; err != nil {
		t.Fatal(err)
	}
	read := func(db *gorm.DB, raw bool) string {
		t.Helper()
		var got []AtkPlPhoto
		q := db.Find(&got)
		if raw {
			q = db.Raw("SELECT * FROM {{schema}}.atk_pl_photos").Scan(&got)
		}
		if q.Error != nil {
			t.Fatal(q.Error)
		}
		if len(got) != 1 {
			t.Fatalf("read %+v, want one row", got)
		}
		return got[0].Caption
	}
	for _, raw := range []bool{false, true} {
		if err := m.SetPlacements([]shardmap.Placement{{DB: 0}, {DB: 0}}); err != nil {
			t.Fatal(err)
		}
		tx := r.ForShard(1).Begin()
		if c := read(tx, raw); c != "schema" {
			t.Fatalf("before the change the transaction read %q", c)
		}
		if err := m.SetPlacements([]shardmap.Placement{{DB: 0}, {DB: 1, Shared: true}}); err != nil {
			t.Fatal(err)
		}
		if c := read(tx, raw); c != "schema" {
			t.Errorf("raw %v: after the shard became shared on b, the transaction on a read the row %q of a's own tables", raw, c)
		}
		tx.Rollback()
	}
}

// TestPlacementFlipWhileRouting flips shard 1 between a schema of its own
// on database a and the own tables of database b while kept sessions of two
// routers on the map, and transactions, read it: every read finds the row
// of one placement (a's schema, b's own table), never a's own table nor b's
// schema, the other placement's table names on a database. Run with -race.
func TestPlacementFlipWhileRouting(t *testing.T) {
	ctx := context.Background()
	dbs := []*gorm.DB{openPostgres(t), testdb.OpenSecondPostgres(t)}
	const pattern = "shardid_atkfl_%04d"
	for i, db := range dbs {
		for s := range 2 {
			if err := db.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS "+pattern+" CASCADE", s)).Error; err != nil {
				t.Fatal(err)
			}
		}
		fresh(t, db, &AtkPlPhoto{})
		t.Cleanup(func() {
			for s := range 2 {
				db.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS "+pattern+" CASCADE", s))
			}
			db.Migrator().DropTable(&AtkPlPhoto{})
		})
		if err := db.Exec(fmt.Sprintf("CREATE SCHEMA "+pattern+"; CREATE TABLE "+pattern+".atk_pl_photos (LIKE atk_pl_photos)", 1, 1)).Error; err != nil {
			t.Fatal(err)
		}
		for _, tbl := range []string{"atk_pl_photos", fmt.Sprintf(pattern+".atk_pl_photos", 1)} {
			caption := fmt.Sprintf("%s on %d", map[bool]string{true: "shared", false: "schema"}[tbl == "atk_pl_photos"], i)
			if err := db.Exec("INSERT INTO "+tbl+" (id, user_id, caption) VALUES (1, 1, ?)", caption).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	valid := map[string]bool{"schema on 0": true, "shared on 1": true}
	m, err := shardmap.New(shardmap.Config{Databases: []string{"a", "b"}, LogicalShards: 2,
		SchemaPattern: pattern, Assign: []int{0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	var routers []*shardid.Router
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, ShardMap: m, Plugin: p})
		if err != nil {
			t.Fatal(err)
		}
		routers = append(routers, r)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 4 {
		r := routers[i%2]
		kept := r.ForShard(1).WithContext(ctx)
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				var got []AtkPlPhoto
				var err error
				switch n % 3 {
				case 0:
					err = kept.Find(&got).Error
				case 1:
					err = kept.Raw("SELECT * FROM {{schema}}.atk_pl_photos").Scan(&got).Error
				case 2:
					err = kept.Transaction(func(tx *gorm.DB) error {
						var more []AtkPlPhoto
						if err := tx.Find(&got).Error; err != nil {
							return err
						}
						if err := tx.Find(&more).Error; err != nil {
							return err
						}
						if len(more) != 1 || len(got) != 1 || more[0].Caption != got[0].Caption {
							return fmt.Errorf("one transaction read %v, then %v", got, more)
						}
						return nil
					})
				}
				if err == nil && (len(got) != 1 || !valid[got[0].Caption]) {
					err = fmt.Errorf("read %+v", got)
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range 400 {
		pl := []shardmap.Placement{{DB: 0}, {DB: 0}}
		if i%2 == 0 {
			pl[1] = shardmap.Placement{DB: 1, Shared: true}
		}
		if err := m.SetPlacements(pl); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestGatherUnderOneMap changes the map while Gather runs: each target was
// chosen under one version, so it reads the database it was chosen for,
// not where a later map puts the shard it is read through (which would
// read that database twice and the first one never).
func TestGatherUnderOneMap(t *testing.T) {
	ctx := context.Background()
	a, b := openSQLite(t), openSQLite(t)
	r := twoDBRouter(t, a, b) // shards 0, 1 on main; 2, 3 on other
	if err := r.ForShard(1).Create(&PlgGetPhoto{UserID: 1}).Error; err != nil {
		t.Fatal(err)
	}
	if err := r.ForShard(2).Create(&PlgGetPhoto{UserID: 2}).Error; err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	rows, err := shardid.Gather(ctx, r, shardid.GatherOptions{Workers: 1}, func(p PlgGetPhoto) shardid.ID { return p.ID },
		func(ctx context.Context, db *gorm.DB) ([]PlgGetPhoto, error) {
			once.Do(func() {
				if err := r.SetMap([]int{1, 0, 1, 1}); err != nil {
					t.Error(err)
				}
			})
			var out []PlgGetPhoto
			return out, db.Find(&out).Error
		})
	if err != nil {
		t.Fatal(err)
	}
	var users []int64
	for _, p := range rows {
		users = append(users, p.UserID)
	}
	slices.Sort(users)
	if !slices.Equal(users, []int64{1, 2}) {
		t.Errorf("Gather read the users %v, want 1 and 2 once each", users)
	}
}
