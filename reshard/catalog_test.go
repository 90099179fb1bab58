package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// catalogRouter is a router of 4 logical shards over three SQLite
// databases, for catalog tests that need only its map and names.
func catalogRouter(t *testing.T, shards int) *shardid.Router {
	t.Helper()
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{openUnreachable(t), openUnreachable(t), openUnreachable(t)},
		Names: []string{"a", "b", "c"}, LogicalShards: shards})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// SaveIf is a compare-and-set on the catalog's version: of saves racing
// over one version exactly one wins, the others change nothing and get
// ErrCatalogConflict.
func TestCatalogSaveIf(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			db := segmentDB(t, kind)
			db.Exec("DROP TABLE IF EXISTS shardid_cas_catalog, shardid_cas_catalog_version, shardid_cas_catalog_setup")
			c := &reshard.Catalog{DB: db, Table: "shardid_cas_catalog"}
			ctx := context.Background()
			race := func(expected int64) (won []int, version int64) {
				var mu sync.Mutex
				var wg sync.WaitGroup
				for i := range 6 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := catalogRouter(t, 4)
						r.SetMap([]int{i % 3, i % 3, i % 3, i % 3})
						v, err := c.SaveIf(ctx, r, expected)
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err == nil:
							won, version = append(won, i), v
						case !errors.Is(err, reshard.ErrCatalogConflict):
							t.Errorf("a save that lost the race: %v, want ErrCatalogConflict", err)
						}
					}()
				}
				wg.Wait()
				return won, version
			}
			for expected := range int64(3) { // 0: the first map
				won, v := race(expected)
				if len(won) != 1 || v != expected+1 {
					t.Fatalf("6 saves over version %d: %v won, version %d; want one winner and version %d", expected, won, v, expected+1)
				}
				r := catalogRouter(t, 4)
				m, got, err := c.Load(ctx, r)
				if want := won[0] % 3; err != nil || got != v || m[0] != want {
					t.Errorf("after the race over version %d: %v, version %d, %v; want the winner's map (%d) at version %d", expected, m, got, err, want, v)
				}
			}
			r := catalogRouter(t, 4)
			if _, err := c.SaveIf(ctx, r, 1); !errors.Is(err, reshard.ErrCatalogConflict) {
				t.Errorf("a save over an old version: %v, want ErrCatalogConflict", err)
			}
			if _, err := c.SaveIf(ctx, r, -1); !errors.Is(err, reshard.ErrInvalidCatalog) {
				t.Errorf("a save over version -1: %v, want ErrInvalidCatalog", err)
			}
			if v, _ := c.Version(ctx); v != 3 {
				t.Errorf("refused saves moved the version to %d", v)
			}
			// The catalog's content does not fit another router: its own error.
			for _, other := range []*shardid.Router{catalogRouter(t, 5), func() *shardid.Router {
				r, _ := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{openUnreachable(t)}, Names: []string{"x"}, LogicalShards: 4})
				return r
			}()} {
				_, _, err := c.Load(ctx, other)
				if !errors.Is(err, reshard.ErrInvalidCatalog) || !errors.Is(err, shardid.ErrInvalidConfig) || strings.Contains(fmt.Sprint(err), "plugin") {
					t.Errorf("loading a catalog that does not fit: %v, want ErrInvalidCatalog in its own words", err)
				}
			}
			if _, err := c.LoadSetup(ctx); !errors.Is(err, reshard.ErrInvalidCatalog) {
				t.Errorf("a catalog without a setup: %v, want ErrInvalidCatalog", err)
			}
			if _, err := (&reshard.Catalog{DB: db, Table: "bad name"}).Version(ctx); !errors.Is(err, reshard.ErrInvalidCatalog) {
				t.Errorf("a bad table name: %v, want ErrInvalidCatalog", err)
			}
		})
	}
}
