package reshard_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shardid/shardid/reshard"
)

// A migration that changes a column's type while a move runs (bigint to
// numeric, once the copy is made, and a write after it) leaves the
// move's check of that write unable to read the column by the type it had when the move
// began: the move stops with ErrTableChanged, which says so, rather than
// with PostgreSQL's "function hashint8extended(numeric, bigint) does not
// exist" alone, and leaves the shard on its home, writable. Run again
// once the migration is done, it moves the shard.
func TestMoveStopsWhenAColumnChangesType(t *testing.T) {
	ownDatabases(t)
	r, c, _ := freshMoveSetup(t)
	const shard = 1
	seeded := seedShard(t, r, shard, 50)
	src := r.Databases()[0]
	altered := false
	opts := reshard.MoveOptions{Models: []any{&RPhoto{}}}
	changing := opts
	changing.OnStage = func(stage string) {
		if stage != "copied" || altered {
			return
		}
		altered = true
		if err := src.Exec("ALTER TABLE " + r.Schema(shard) + ".r_photos ALTER COLUMN user_id TYPE numeric").Error; err != nil {
			t.Errorf("the migration: %v", err)
		}
		// A write after it: the move compares its row on both sides.
		if err := r.ForKey(shard).Create(&RPhoto{UserID: shard, Caption: "after the migration"}).Error; err != nil {
			t.Errorf("a write after the migration: %v", err)
		}
	}
	_, err := reshard.MoveShard(context.Background(), r, c, shard, "pg2", changing)
	if !altered {
		t.Fatal("the move never made its copy")
	}
	if !errors.Is(err, reshard.ErrTableChanged) || !strings.Contains(err.Error(), "changed type during the move") {
		t.Fatalf("a move whose column changed type under it: %v, want ErrTableChanged", err)
	}
	t.Log(err)
	if got := r.DatabaseName(shard); got != "pg1" {
		t.Fatalf("shard %d after the stopped move: on %s, want pg1", shard, got)
	}
	if _, err := reshard.MoveShard(context.Background(), r, c, shard, "pg2", opts); err != nil {
		t.Fatalf("the move run again after the migration: %v", err)
	}
	checkShardWhole(t, loaded(t, moveRouter(t, movePlugin(t, 1)), c), shard, len(seeded)+1)
}
