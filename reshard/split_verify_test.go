package reshard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// The first copy verifies itself: what it sent of each table of each shard
// (rows, and the sum of their hashes as the monolith computed them) is
// compared with what the target then holds. A row changed on the target
// behind the split's back right after the copy (here by a session let
// through the target's fence, as only the mover is) must fail the batch
// with ErrCopyDiffers before the fence, never be sealed and flipped.
func TestSplitCopyVerifiesItselfPostgres(t *testing.T) {
	testSplitCopyVerifiesItself(t, newSplitEnvPG(t, 4, 20, 2, 2), "SELECT set_config('shardid.mover', 'on', true)")
}

// TestSplitCopyVerifiesItselfMariaDB is TestSplitCopyVerifiesItselfPostgres
// on MariaDB.
func TestSplitCopyVerifiesItselfMariaDB(t *testing.T) {
	testSplitCopyVerifiesItself(t, newSplitEnvMySQL(t, 4, 20, 2, 2), "SET @shardid_mover = 1")
}

func testSplitCopyVerifiesItself(t *testing.T, e *splitEnv, mover string) {
	ctx := context.Background()
	var reached []string
	_, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{e.names[1], e.names[2]}, reshard.SplitOptions{OnStage: func(s string) {
		reached = append(reached, s)
		if s != "copied" {
			return
		}
		err := e.dbs[1].Connection(func(c *gorm.DB) error {
			if c.Dialector.Name() == "mysql" {
				defer c.Exec("SET @shardid_mover = NULL")
			}
			return c.Transaction(func(tx *gorm.DB) error {
				if err := tx.Exec(mover).Error; err != nil {
					return err
				}
				res := tx.Exec("UPDATE " + e.qt(e.m.SchemaOf(0), "comments") + " SET body = 'changed behind the split' WHERE id = (SELECT min(id) FROM " + e.qt(e.m.SchemaOf(0), "comments") + ")")
				if res.Error == nil && res.RowsAffected != 1 {
					t.Errorf("changed %d rows on the target, want 1", res.RowsAffected)
				}
				return res.Error
			})
		})
		if err != nil {
			t.Errorf("changing a row of the copy: %v", err)
		}
	}})
	if !errors.Is(err, reshard.ErrCopyDiffers) {
		t.Fatalf("a batch whose copy was changed behind its back: %v (stages %v), want ErrCopyDiffers", err, reached)
	}
	for _, s := range reached {
		if s == "fenced" || s == "sealed" || s == "flipped" {
			t.Errorf("the batch went on to %q", s)
		}
	}
	if v := e.m.Load(); !v.Shared(0) {
		t.Errorf("shard 0 left the monolith")
	}
}
