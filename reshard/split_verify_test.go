package reshard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// The first copy verifies itself: what it sent of each table of each shard
// (rows, and the sum of their hashes as the splitter computed them) is
// compared with what the target then holds. A row changed on the target
// behind the split's back right after the copy (here by a session let
// through the target's fence, as only the mover is) must fail the batch
// with ErrCopyDiffers before the fence, never be sealed and flipped.
func TestSplitCopyVerifiesItselfPostgres(t *testing.T) {
	t.Parallel()
	testSplitCopyVerifiesItself(t, newSplitEnvPG(t, 4, 20, 2, 2), "SELECT set_config('shardid.mover', 'on', true)")
}

// TestSplitCopyVerifiesItselfMariaDB is TestSplitCopyVerifiesItselfPostgres
// on MariaDB.
func TestSplitCopyVerifiesItselfMariaDB(t *testing.T) {
	t.Parallel()
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

// A split carries the monolith's foreign keys between its sharded tables
// into each shard's schema (PostgreSQL) or database (MySQL), validated: a
// comment of a photo that the shard does not hold is refused there.
func TestSplitCarriesForeignKeysPostgres(t *testing.T) {
	t.Parallel()
	testSplitCarriesForeignKeys(t, newSplitEnvPG(t, 4, 20, 2, 2))
}

// TestSplitCarriesForeignKeysMariaDB is TestSplitCarriesForeignKeysPostgres
// on MariaDB.
func TestSplitCarriesForeignKeysMariaDB(t *testing.T) {
	t.Parallel()
	testSplitCarriesForeignKeys(t, newSplitEnvMySQL(t, 4, 20, 2, 2))
}

func testSplitCarriesForeignKeys(t *testing.T, e *splitEnv) {
	ctx := context.Background()
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{e.names[1], e.names[2]}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	for s, db := range map[int]*gorm.DB{0: e.dbs[1], 1: e.dbs[2]} {
		schema := e.m.SchemaOf(s)
		var keys []string
		q := "SELECT conname FROM pg_constraint con JOIN pg_namespace n ON n.oid = con.connamespace WHERE n.nspname = ? AND contype = 'f' AND convalidated ORDER BY 1"
		if db.Dialector.Name() == "mysql" {
			q = "SELECT CONSTRAINT_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = ? ORDER BY 1"
		}
		if err := db.Raw(q, schema).Scan(&keys).Error; err != nil {
			t.Fatal(err)
		}
		if len(keys) != 2 {
			t.Errorf("shard %d: foreign keys %v, want the monolith's two (comments to photos, photos to users), validated", s, keys)
		}
		err := db.Exec("INSERT INTO "+e.qt(schema, "comments")+" (id, photo_id, body) VALUES (?, ?, 'orphan')", 900_000_000+s, 800_000_000).Error
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "foreign key") {
			t.Errorf("shard %d: a comment of a photo it does not hold: %v, want a foreign key violation", s, err)
		}
	}
}

// A split's targets refuse every writer but the mover from the moment
// they are created until the flip (their fence for the mover), and take
// writes after it.
func TestSplitTargetsRefuseWritersUntilTheFlipPostgres(t *testing.T) {
	t.Parallel()
	testSplitTargetsRefuseWriters(t, newSplitEnvPG(t, 4, 20, 2, 2))
}

// TestSplitTargetsRefuseWritersUntilTheFlipMariaDB is
// TestSplitTargetsRefuseWritersUntilTheFlipPostgres on MariaDB.
func TestSplitTargetsRefuseWritersUntilTheFlipMariaDB(t *testing.T) {
	t.Parallel()
	testSplitTargetsRefuseWriters(t, newSplitEnvMySQL(t, 4, 20, 2, 2))
}

func testSplitTargetsRefuseWriters(t *testing.T, e *splitEnv) {
	ctx := context.Background()
	insert := func() error {
		return e.dbs[1].Exec("INSERT INTO " + e.qt(e.m.SchemaOf(0), "users") + " (id, name) VALUES (900000, 'stray')").Error
	}
	var tried []string
	_, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{e.names[1], e.names[2]}, reshard.SplitOptions{OnStage: func(s string) {
		if s != "created" && s != "copied" && s != "sealed" {
			return
		}
		tried = append(tried, s)
		if err := insert(); !isFenced(err) {
			t.Errorf("a write to a target at %q: %v, want the fence's refusal", s, err)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(tried) != 3 {
		t.Errorf("tried the targets at %v", tried)
	}
	if err := insert(); err != nil {
		t.Errorf("a write to a target after the flip: %v", err)
	}
}

// A split whose targets' pools open one session each still finishes: its
// copy writes through as many sessions of a target as the pool allows, not
// more (a second one, waiting for the session that the first holds until
// the read ends, would wait for ever).
func TestSplitThroughOneSessionPerTarget(t *testing.T) {
	t.Parallel()
	// More shards on each target than a lane's feed holds chunks.
	e := newSplitEnvPG(t, 48, 200, 2, 2)
	for _, db := range e.dbs[1:] {
		pool, err := db.DB()
		if err != nil {
			t.Fatal(err)
		}
		pool.SetMaxOpenConns(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var shards []int
	var to []string
	for s := range 48 {
		shards, to = append(shards, s), append(to, e.names[1+s%2])
	}
	if _, err := reshard.SplitShards(ctx, e.cfg, shards, to, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
}
