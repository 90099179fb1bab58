package reshard_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// Found while adding splits to TestChaos: a batch that flipped but could not lift its targets'
// fences (the mover killed between the two, a target restarting, its lock
// taken by another operator) fails saying "run the batch again", and the
// guide's resume is to run the plan again. RunSplit took the batch for
// split already (the map has its shards on their targets) and skipped it:
// the shards' new homes refused every write for good. The lift fails here
// by an error injected into the target's statement that lifts the fences.
func TestSplitRunAgainAfterFailedLift(t *testing.T) {
	t.Parallel()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	ctx := context.Background()
	var fail atomic.Bool
	fail.Store(true)
	errInjected := errors.New("injected: the target went away")
	err := e.dbs[1].Callback().Raw().Before("gorm:raw").Register("test:fail_lift", func(db *gorm.DB) {
		if fail.Load() && strings.Contains(db.Statement.SQL.String(), "mover_only = FALSE WHERE id = 1 AND") {
			db.AddError(errInjected)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := reshard.PlanSplit(ctx, e.cfg, []string{"pg_a"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	err = reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{}, nil)
	if !errors.Is(err, errInjected) {
		t.Fatalf("the run whose lift failed: %v, want the injected error", err)
	}
	fail.Store(false)
	// The guide: run the plan again.
	if err := reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	db, tbl := e.table(4, "users") // user 4 is shard 0's, the batch that failed
	if err := db.Exec("UPDATE " + tbl + " SET name = 'after the resume' WHERE id = 4").Error; err != nil {
		t.Errorf("shard 0, split, after the plan was run again: %v", err)
	}
}
