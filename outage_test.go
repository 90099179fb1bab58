package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// A physical database goes away: only the logical shards it holds fail, with
// errors that name them; the others keep working; when it returns, every
// row written before is there and writes work again.
func TestRouterDatabaseOutage(t *testing.T) {
	main := openPostgres(t)
	pg := startPostgresInstance(t)
	other, err := gorm.Open(postgres.Open(pg.DSN()), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, other)
	for s := range 8 {
		if err := main.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS shardid_o_%04d CASCADE", s)).Error; err != nil {
			t.Fatal(err)
		}
	}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 8})
	r, err := shardid.NewRouter(shardid.RouterConfig{
		Databases: []*gorm.DB{main, other}, Names: []string{"main", "other"},
		LogicalShards: 8, SchemaPattern: "shardid_o_%04d", Plugin: p,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	var before []RPhoto
	for user := range int64(16) {
		ph := RPhoto{UserID: user}
		if err := r.ForKey(user).Create(&ph).Error; err != nil {
			t.Fatal(err)
		}
		before = append(before, ph)
	}
	newest := func() ([]RPhoto, error) {
		return shardid.Gather(ctx, r, shardid.GatherOptions{Desc: true},
			func(p RPhoto) shardid.ID { return p.ID },
			func(ctx context.Context, db *gorm.DB) ([]RPhoto, error) {
				var ps []RPhoto
				return ps, db.Order("id DESC").Find(&ps).Error
			})
	}

	pg.Stop()

	rows, err := newest()
	var failed []int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var se *shardid.ShardError
		if !errors.As(e, &se) || se.Database != "other" {
			t.Fatalf("error %v does not name a shard of the stopped database", e)
		}
		failed = append(failed, se.Shard)
	}
	slices.Sort(failed)
	if !slices.Equal(failed, []int{4, 5, 6, 7}) {
		t.Errorf("failed shards %v, want 4 5 6 7 (the stopped database's)", failed)
	}
	if len(rows) != 8 {
		t.Errorf("%d rows from the shards still up, want 8", len(rows))
	}
	if err := r.ForShard(1).Create(&RPhoto{UserID: 1}).Error; err != nil {
		t.Errorf("a shard of the live database: %v", err)
	}
	if err := r.ForShard(5).Create(&RPhoto{UserID: 5}).Error; err == nil {
		t.Errorf("a create on the stopped database succeeded")
	}

	pg.Start()

	// The pool may hold connections the restart broke: allow it a few tries,
	// as an application's retry would.
	var got []RPhoto
	for try := 0; ; try++ {
		got, err = newest()
		if err == nil || try == 5 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	if len(got) != 17 {
		t.Errorf("%d rows after the restart, want the 16 from before and 1 written during", len(got))
	}
	for _, b := range before {
		var back RPhoto
		if err := r.Get(ctx, &back, b.ID); err != nil {
			t.Errorf("photo %v written before the outage: %v", b.ID, err)
		}
	}
	if err := r.ForShard(5).Create(&RPhoto{UserID: 5}).Error; err != nil {
		t.Errorf("a create after the restart: %v", err)
	}
}
