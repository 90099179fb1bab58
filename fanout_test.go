package shardid_test

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// FPhoto is the model of the fan-out tests: f_photos in every shard.
type FPhoto struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Likes   int64
	Caption string
}

// fanDBs opens the two databases of kind ("postgres" or "mysql") the
// fan-out tests spread their shards over.
func fanDBs(t *testing.T, kind string) []*gorm.DB {
	t.Helper()
	if kind == "postgres" {
		return []*gorm.DB{openPostgres(t), openSecondPostgres(t)}
	}
	return []*gorm.DB{openMySQL(t), openSecondMySQL(t)}
}

// dropSchemas drops the schemas (MySQL databases) pattern names for
// shards 0 to n-1 on dbs.
func dropSchemas(t testing.TB, dbs []*gorm.DB, pattern string, n int) {
	t.Helper()
	if err := tryDropSchemas(dbs, pattern, n); err != nil {
		t.Fatal(err)
	}
}

// tryDropSchemas is dropSchemas, returning the first error.
func tryDropSchemas(dbs []*gorm.DB, pattern string, n int) error {
	for _, db := range dbs {
		for s := range n {
			q := "DROP DATABASE IF EXISTS " + fmt.Sprintf(pattern, s)
			if db.Dialector.Name() == "postgres" {
				q = "DROP SCHEMA IF EXISTS " + fmt.Sprintf(pattern, s) + " CASCADE"
			}
			if err := db.Exec(q).Error; err != nil {
				return err
			}
		}
	}
	return nil
}

// fanRouter builds a router of shards logical shards over dbs, in
// schemas (MySQL databases) named by pattern, migrated for FPhoto, and
// drops them when the test ends.
func fanRouter(t *testing.T, dbs []*gorm.DB, pattern string, shards int) *shardid.Router {
	t.Helper()
	dropSchemas(t, dbs, pattern, shards)
	t.Cleanup(func() { _ = tryDropSchemas(dbs, pattern, shards) }) // a stopped database keeps its own
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: shards})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b", "c", "d"}[:len(dbs)]
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: names, LogicalShards: shards,
		SchemaPattern: pattern, Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(context.Background(), &FPhoto{}); err != nil {
		t.Fatal(err)
	}
	return r
}

// seed writes per photos to every shard of r, users u*shards+s, likes
// varying, and returns them all.
func seed(t *testing.T, r *shardid.Router, per int) []FPhoto {
	t.Helper()
	var all []FPhoto
	// One shard after the other, so that every shard has old and new rows.
	for i := range per {
		for s := range r.LogicalShards() {
			p := FPhoto{UserID: int64(i*r.LogicalShards() + s), Likes: int64((s*7 + i*3) % 11), Caption: fmt.Sprintf("s%d-%d", s, i)}
			if err := r.ForShard(s).Create(&p).Error; err != nil {
				t.Fatal(err)
			}
			all = append(all, p)
		}
	}
	return all
}

// statements counts the statements GORM runs on dbs: with a fan-out, one
// per query it runs (a union counts once).
func statements(t *testing.T, dbs []*gorm.DB) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	name := fmt.Sprintf("fanout_test:count_%p", &n)
	for _, db := range dbs {
		if err := db.Callback().Query().After("*").Register(name, func(*gorm.DB) { n.Add(1) }); err != nil {
			t.Fatal(err)
		}
		if err := db.Callback().Row().After("*").Register(name, func(*gorm.DB) { n.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, db := range dbs {
			db.Callback().Query().Remove(name)
			db.Callback().Row().Remove(name)
		}
	})
	return &n
}

func ids(ps []FPhoto) []shardid.ID {
	out := make([]shardid.ID, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

func photoID(p FPhoto) shardid.ID { return p.ID }

// Gather reads the shards of a database in one statement, for ORM queries
// and raw SQL with {{schema}}, and returns what it returned shard by shard.
func TestGatherUnion(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			dbs := fanDBs(t, kind)
			const shards = 24
			r := fanRouter(t, dbs, "fo_u_%04d", shards)
			all := seed(t, r, 6)
			ctx := context.Background()
			n := statements(t, dbs)
			queries := map[string]func(ctx context.Context, db *gorm.DB) ([]FPhoto, error){
				"orm": func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
					var ps []FPhoto
					return ps, db.Where("likes > ?", 3).Order("id DESC").Limit(4).Find(&ps).Error
				},
				"raw": func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
					var ps []FPhoto
					return ps, db.Raw("SELECT * FROM {{schema}}.f_photos WHERE likes > ? AND caption <> ? ORDER BY id DESC LIMIT 4", 3, "x").Scan(&ps).Error
				},
			}
			var want []FPhoto
			for _, p := range all {
				if p.Likes > 3 {
					want = append(want, p)
				}
			}
			slices.SortFunc(want, func(a, b FPhoto) int { return cmp.Compare(b.ID, a.ID) })
			want = want[:10]
			for name, q := range queries {
				n.Store(0)
				got, err := shardid.Gather(ctx, r, shardid.GatherOptions{Desc: true, Limit: 10}, photoID, q)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if st := n.Load(); st != 2 {
					t.Errorf("%s: %d statements, want 2 (one per database)", name, st)
				}
				if !slices.Equal(ids(got), ids(want)) {
					t.Errorf("%s: got %v, want %v", name, ids(got), ids(want))
				}
				n.Store(0)
				per, err := shardid.Gather(ctx, r, shardid.GatherOptions{Desc: true, Limit: 10, PerShard: true}, photoID, q)
				if err != nil || !slices.Equal(per, got) {
					t.Errorf("%s: PerShard gave %v, %v; the union %v", name, ids(per), err, ids(got))
				}
				if st := n.Load(); st != shards {
					t.Errorf("%s PerShard: %d statements, want %d", name, st, shards)
				}
			}
		})
	}
}

// A query that does not read every row of its statement into the slice it
// returns (First, Count, a query per row) runs shard by shard, and gives
// what it gave before.
func TestGatherNotRowWise(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			dbs := fanDBs(t, kind)
			const shards = 8
			r := fanRouter(t, dbs, "fo_n_%04d", shards)
			seed(t, r, 3)
			ctx := context.Background()
			counts, err := shardid.Gather(ctx, r, shardid.GatherOptions{},
				func(int64) shardid.ID { return 0 },
				func(ctx context.Context, db *gorm.DB) ([]int64, error) {
					var n int64
					err := db.Model(&FPhoto{}).Count(&n).Error
					return []int64{n}, err
				})
			if err != nil || len(counts) != shards {
				t.Fatalf("counts %v, %v; want %d counts of 3", counts, err, shards)
			}
			for _, c := range counts {
				if c != 3 {
					t.Errorf("counts %v, want 3 each", counts)
					break
				}
			}
			firsts, err := shardid.Gather(ctx, r, shardid.GatherOptions{}, photoID,
				func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
					var p FPhoto
					err := db.Order("id").First(&p).Error
					return []FPhoto{p}, err
				})
			if err != nil || len(firsts) != shards {
				t.Fatalf("First on each shard: %d rows, %v; want %d", len(firsts), err, shards)
			}
			for _, p := range firsts {
				if p.Caption != fmt.Sprintf("s%d-0", r.ShardOf(p.ID)) {
					t.Errorf("First of shard %d is %q", r.ShardOf(p.ID), p.Caption)
				}
			}
		})
	}
}

// The union path keeps Gather's error rules: raw SQL that names no shard is
// refused with ErrUnroutedSQL for every shard, and the message says so once
// per database.
func TestGatherUnroutedErrorOncePerDatabase(t *testing.T) {
	dbs := fanDBs(t, "postgres")
	const shards = 32
	r := fanRouter(t, dbs, "fo_e_%04d", shards)
	_, err := shardid.Gather(context.Background(), r, shardid.GatherOptions{}, photoID,
		func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
			var ps []FPhoto
			return ps, db.Raw("SELECT * FROM f_photos").Scan(&ps).Error
		})
	if !errors.Is(err, shardid.ErrUnroutedSQL) {
		t.Fatalf("err %v, want ErrUnroutedSQL", err)
	}
	var failed []int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var se *shardid.ShardError
		if !errors.As(e, &se) {
			t.Fatalf("%v is not a *ShardError", e)
		}
		failed = append(failed, se.Shard)
	}
	slices.Sort(failed)
	if len(failed) != shards || failed[0] != 0 || failed[shards-1] != shards-1 {
		t.Errorf("failed shards %v, want 0 to %d", failed, shards-1)
	}
}

// shardsOf returns the shards of rows, sorted, once each.
func shardsOf(r *shardid.Router, ps []FPhoto) []int {
	var out []int
	for _, p := range ps {
		out = append(out, r.ShardOf(p.ID))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// errLines returns the lines of err's message.
func errLines(err error) []string { return strings.Split(err.Error(), "\n") }

// FPhotoNull reads f_photos with a nullable caption.
type FPhotoNull struct {
	ID      shardid.ID
	Caption sql.NullString
}

// TableName implements GORM's Tabler.
func (FPhotoNull) TableName() string { return "f_photos" }

// NULL, empty and other values come through a union as they come shard by
// shard.
func TestGatherNulls(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			dbs := fanDBs(t, kind)
			const shards = 6
			r := fanRouter(t, dbs, "fo_z_%04d", shards)
			seed(t, r, 6)
			for s := range shards {
				if err := r.ForShard(s).Exec("UPDATE {{schema}}.f_photos SET caption = NULL WHERE likes % 2 = 0").Error; err != nil {
					t.Fatal(err)
				}
				if err := r.ForShard(s).Exec("UPDATE {{schema}}.f_photos SET caption = '' WHERE likes % 3 = 1").Error; err != nil {
					t.Fatal(err)
				}
			}
			q := func(ctx context.Context, db *gorm.DB) ([]FPhotoNull, error) {
				var ps []FPhotoNull
				return ps, db.Order("id").Find(&ps).Error
			}
			id := func(p FPhotoNull) shardid.ID { return p.ID }
			union, err := shardid.Gather(context.Background(), r, shardid.GatherOptions{}, id, q)
			if err != nil {
				t.Fatal(err)
			}
			per, err := shardid.Gather(context.Background(), r, shardid.GatherOptions{PerShard: true}, id, q)
			if err != nil {
				t.Fatal(err)
			}
			var nulls, empty int
			for _, p := range per {
				if !p.Caption.Valid {
					nulls++
				} else if p.Caption.String == "" {
					empty++
				}
			}
			if !slices.Equal(union, per) || nulls == 0 || empty == 0 {
				t.Errorf("union %v\nper shard %v (%d NULL, %d empty)", union, per, nulls, empty)
			}
		})
	}
}
