package reshard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/shardid/shardid/reshard"
)

// TestSplitFlipOutlivesACatalogWritePostgres: a write to the catalog by
// someone else (a move of another shard) between a batch's read of the
// catalog's version and its flip, the batch's lock held all along, must
// not fail the batch: it failed with ErrCatalogConflict after its seal,
// its shards refusing every write until an operator ran it again. The
// batch reads the version again and flips; a catalog that changes under
// every try still fails it, after a few, and the batch run again
// finishes.
func TestSplitFlipOutlivesACatalogWritePostgres(t *testing.T) {
	t.Parallel()
	testSplitFlipOutlivesACatalogWrite(t, newSplitEnvPG(t, 4, 20, 2, 2), []string{"pg_a", "pg_b"})
}

// TestSplitFlipOutlivesACatalogWriteMariaDB is
// TestSplitFlipOutlivesACatalogWritePostgres on MariaDB.
func TestSplitFlipOutlivesACatalogWriteMariaDB(t *testing.T) {
	t.Parallel()
	testSplitFlipOutlivesACatalogWrite(t, newSplitEnvMySQL(t, 4, 20, 2, 2), []string{"my_a", "my_b"})
}

func testSplitFlipOutlivesACatalogWrite(t *testing.T, e *splitEnv, to []string) {
	ctx := context.Background()
	// Shards 0 and 1: the catalog written twice under the flip.
	writes := 0
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at == "split flip" && writes < 2 {
			writes++
			if err := reshard.BumpCatalogVersion(pctx, e.cat); err != nil {
				t.Error(err)
			}
		}
	})
	_, err := reshard.SplitShards(pctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{})
	if err != nil {
		t.Fatalf("a batch whose catalog changed twice under its flip: %v", err)
	}
	if writes != 2 {
		t.Fatalf("the catalog was written %d times under the flip, want 2", writes)
	}
	// Shards 2 and 3: written under every try.
	tries := 0
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at == "split flip" {
			tries++
			if err := reshard.BumpCatalogVersion(pctx, e.cat); err != nil {
				t.Error(err)
			}
		}
	})
	_, err = reshard.SplitShards(pctx, e.cfg, []int{2, 3}, to, reshard.SplitOptions{})
	if !errors.Is(err, reshard.ErrCatalogConflict) {
		t.Fatalf("a batch whose catalog changed under every flip: %v, want ErrCatalogConflict", err)
	}
	if tries < 2 || tries > 10 {
		t.Errorf("the flip was tried %d times, want a few", tries)
	}
	t.Logf("after %d tries: %v", tries, err)
	if err := e.dbs[0].Exec("UPDATE users SET name = 'sealed' WHERE id = 2").Error; err == nil {
		t.Error("a write to shard 2 on the monolith, sealed, its flip failed: nil, want it refused")
	}
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{2, 3}, to, reshard.SplitOptions{}); err != nil {
		t.Fatalf("the batch run again: %v", err)
	}
	if _, err := e.cat.LoadMap(ctx, e.m); err != nil {
		t.Fatal(err)
	}
	p := e.m.Load().Placements()
	for s := range 4 {
		if p[s].Shared || p[s].DB != e.m.DatabaseIndex(to[s%2]) {
			t.Errorf("shard %d in the catalog: %+v, want its schema on %s", s, p[s], to[s%2])
		}
	}
	for _, id := range []int64{4, 2} {
		db, users := e.table(id, "users")
		if res := db.Exec("UPDATE "+users+" SET name = 'on its target' WHERE id = ?", id); res.Error != nil || res.RowsAffected != 1 {
			t.Errorf("a write to user %d on its target: %v, %d rows", id, res.Error, res.RowsAffected)
		}
	}
}

// TestRollbackFlipOutlivesACatalogWritePostgres: as
// TestSplitFlipOutlivesACatalogWritePostgres, for a roll-back's flip of
// the catalog back to the monolith.
func TestRollbackFlipOutlivesACatalogWritePostgres(t *testing.T) {
	t.Parallel()
	testRollbackFlipOutlivesACatalogWrite(t, newSplitEnvPG(t, 4, 20, 2, 2))
}

// TestRollbackFlipOutlivesACatalogWriteMariaDB is
// TestRollbackFlipOutlivesACatalogWritePostgres on MariaDB.
func TestRollbackFlipOutlivesACatalogWriteMariaDB(t *testing.T) {
	t.Parallel()
	testRollbackFlipOutlivesACatalogWrite(t, newSplitEnvMySQL(t, 4, 20, 2, 2))
}

func testRollbackFlipOutlivesACatalogWrite(t *testing.T, e *splitEnv) {
	ctx := context.Background()
	from := e.names[1]
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{from, from}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	writes := 0
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at == "unflip back" && writes < 2 {
			writes++
			if err := reshard.BumpCatalogVersion(pctx, e.cat); err != nil {
				t.Error(err)
			}
		}
	})
	if _, err := reshard.RollbackSplit(pctx, e.cfg, []int{0}, reshard.RollbackOptions{}); err != nil {
		t.Fatalf("a roll-back whose catalog changed twice under its flip: %v", err)
	}
	if writes != 2 {
		t.Fatalf("the catalog was written %d times under the flip, want 2", writes)
	}
	if _, err := e.cat.LoadMap(ctx, e.m); err != nil {
		t.Fatal(err)
	}
	if p := e.m.Load().Placements()[0]; !p.Shared || p.DB != 0 {
		t.Errorf("shard 0 in the catalog after its roll-back: %+v, want shared on the monolith", p)
	}
	if res := e.dbs[0].Exec("UPDATE users SET name = 'home again' WHERE id = 4"); res.Error != nil || res.RowsAffected != 1 {
		t.Errorf("a write to shard 0 on the monolith after its roll-back: %v, %d rows", res.Error, res.RowsAffected)
	}
}

// TestSplitLiftOutlivesItsReadiedSessionPostgres: a batch lifts its
// targets' fences on sessions it readied while the monolith sealed
// (liftSessions). A readied session that the server ends before the lift
// (an idle-session reaper, a restart) must not leave the batch flipped
// with its targets refusing writes: the lift goes through the pool.
func TestSplitLiftOutlivesItsReadiedSessionPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	ended := 0
	pctx := reshard.WithRunPause(ctx, func(at string) {
		if at != "split lift" {
			return
		}
		// Every session of the targets but this one: the readied ones
		// are idle, held by the run.
		for _, db := range e.dbs[1:] {
			var n int
			if err := db.Raw("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()").Scan(&n).Error; err != nil {
				t.Error(err)
			}
			ended += n
		}
	})
	if _, err := reshard.SplitShards(pctx, e.cfg, []int{0, 1}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{}); err != nil {
		t.Fatalf("the split, its readied sessions ended before the lift: %v", err)
	}
	if ended == 0 {
		t.Fatal("no session of the targets was ended before the lift")
	}
	v := e.m.Load()
	for _, s := range []int{0, 1} {
		if err := e.dbs[v.DB(s)].Exec(`UPDATE "`+v.Schema(s)+`".users SET name = 'after the lift' WHERE id % 4 = ?`, s).Error; err != nil {
			t.Errorf("a write to shard %d on its target: %v", s, err)
		}
	}
}
