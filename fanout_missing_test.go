package shardid_test

import (
	"context"
	"errors"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// When a database answers but one shard's table is missing, its union
// fails: the database is then read shard by shard, so that the one shard
// fails and the others' rows come back.
func TestGatherOneShardBroken(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			dbs := fanDBs(t, kind)
			const shards = 8
			r := fanRouter(t, dbs, "fo_x_%04d", shards)
			all := seed(t, r, 2)
			if err := r.ForShard(3).Exec("DROP TABLE {{schema}}.f_photos").Error; err != nil {
				t.Fatal(err)
			}
			rows, err := shardid.Gather(context.Background(), r, shardid.GatherOptions{}, photoID,
				func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
					var ps []FPhoto
					return ps, db.Find(&ps).Error
				})
			var se *shardid.ShardError
			if !errors.As(err, &se) || se.Shard != 3 || se.Database != "a" || len(err.(interface{ Unwrap() []error }).Unwrap()) != 1 {
				t.Fatalf("err %v, want one *ShardError of shard 3 on database a", err)
			}
			if len(rows) != len(all)-2 {
				t.Errorf("%d rows, want %d (all but shard 3's)", len(rows), len(all)-2)
			}
			for _, p := range rows {
				if r.ShardOf(p.ID) == 3 {
					t.Errorf("a row of the broken shard: %+v", p)
				}
			}
		})
	}
}
