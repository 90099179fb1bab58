package shardid_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
)

// Many goroutines setting up the same tables at once, as processes starting
// together do: PostgreSQL's CREATE TABLE IF NOT EXISTS alone fails for some
// of them (a duplicate key in pg_type).
func TestConcurrentSetup(t *testing.T) {
	db := openPostgres(t)
	ctx := context.Background()
	for round := range 5 {
		db.Exec("DROP TABLE IF EXISTS shardid_setup_seg, shardid_setup_lease, shardid_setup_map, shardid_setup_map_version, shardid_setup_map_setup")
		var wg sync.WaitGroup
		errs := make(chan error, 48)
		for g := range 16 {
			wg.Add(3)
			go func() {
				defer wg.Done()
				_, err := shardid.NewSegmentAllocator(ctx, shardid.SegmentConfig{DB: db, Table: "shardid_setup_seg", Key: fmt.Sprint("k", g)})
				errs <- err
			}()
			go func() {
				defer wg.Done()
				store := &shardid.SQLLeaseStore{DB: db, Table: "shardid_setup_lease"}
				_, err := store.Claim(ctx, 64, g, fmt.Sprint("owner", g), 0)
				errs <- err
			}()
			go func() {
				defer wg.Done()
				err := (&reshard.Catalog{DB: db, Table: "shardid_setup_map"}).Setup(ctx)
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
