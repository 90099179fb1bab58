package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
)

// TestSplitCreatesLaterBatchesAheadPostgres runs a plan of 4 batches: the
// first batch creates the schemas of all 8 shards, fenced for the mover,
// and each later batch copies into those it finds as created. A later
// batch's schema whose fence changed since (another operator's) is
// emptied before its copy: the user it holds, one of the monolith's ids,
// would fail the copy's COPY as a duplicate key. A row that a mover
// wrote into a schema whose fence did not change fails its batch's
// comparison (ErrCopyDiffers, the row named) and is never deleted by it;
// the plan run again empties the copy first. Schemas created before the
// monolith's tables changed (a migration between two batches) or its
// privileges did (a GRANT) are dropped and created again: without that,
// the later batches' copies fail for the column their tables lack, and a
// role granted a table on the monolith may not read its shards.
func TestSplitCreatesLaterBatchesAheadPostgres(t *testing.T) {
	t.Parallel()
	testSplitCreatesAhead(t, func() *splitEnv { return newSplitEnvPG(t, 8, 40, 2, 2) })
}

// TestSplitCreatesLaterBatchesAheadMariaDB is
// TestSplitCreatesLaterBatchesAheadPostgres on MariaDB.
func TestSplitCreatesLaterBatchesAheadMariaDB(t *testing.T) {
	t.Parallel()
	testSplitCreatesAhead(t, func() *splitEnv { return newSplitEnvMySQL(t, 8, 40, 2, 2) })
}

// strayID is the id of a row a test writes into a shard's copy behind
// the split's back that no row of the monolith has.
const strayID = 900_000

func testSplitCreatesAhead(t *testing.T, newEnv func() *splitEnv) {
	ctx := context.Background()
	// run runs e's plan of 4 batches, checks that the first batch's copy
	// finds every shard's schema fenced for the mover, and calls meddle
	// once the first batch is flipped, with the plan. Each later batch's
	// copy must find its shards' fences as they were created (the
	// schemas taken as created, not fenced again or made anew), but for
	// the shards made returns true for.
	run := func(t *testing.T, e *splitEnv, meddle func(plan *reshard.SplitPlan), made func(s int) bool) (*reshard.SplitPlan, error) {
		plan, err := reshard.PlanSplit(ctx, e.cfg, e.names[1:], 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Batches) != 4 {
			t.Fatalf("%d batches, want 4", len(plan.Batches))
		}
		copies := 0
		created := map[int]int64{} // the fences' tokens at the first copy
		pctx := reshard.WithRunPause(ctx, func(at string) {
			if at != "split copy" {
				return
			}
			if copies++; copies > 1 {
				for _, s := range plan.Batches[copies-1] {
					if f, _ := e.targetFence(t, plan, s); f.Token != created[s] && (made == nil || !made(s)) {
						t.Errorf("shard %d at its batch's copy: its fence's token %d, want %d, as it was created", s, f.Token, created[s])
					}
				}
				return
			}
			for _, batch := range plan.Batches {
				for _, s := range batch {
					f, ok := e.targetFence(t, plan, s)
					if !ok || !f.MoverOnly || f.Sealed {
						t.Errorf("shard %d at the first batch's copy: schema there %v, fence %+v; want one fenced for the mover", s, ok, f)
					}
					created[s] = f.Token
				}
			}
		})
		flips := 0
		err = reshard.RunSplit(pctx, e.cfg, plan, reshard.SplitOptions{OnStage: func(st string) {
			if st == "flipped" {
				if flips++; flips == 1 {
					meddle(plan)
				}
			}
		}}, nil)
		if flips == 0 {
			t.Fatalf("no batch flipped: %v", err)
		}
		return plan, err
	}

	t.Run("a fence set since", func(t *testing.T) {
		e := newEnv()
		var s3 int
		plan, err := run(t, e, func(plan *reshard.SplitPlan) {
			// s3, of the third batch: a user of the monolith's written
			// into its copy, whose fence another operator set since.
			s3 = plan.Batches[2][0]
			e.strayRow(t, plan, s3, int64(s3+8))
			if err := e.targetDB(plan, s3).Exec("UPDATE " + e.qt(e.m.SchemaOf(s3), "shardid_fence_state") + " SET token = token + 1").Error; err != nil {
				t.Fatal(err)
			}
			// And a user of the last batch's inserted, as the
			// application does between two batches: MySQL's next
			// AUTO_INCREMENT moves past it, which is no change of the
			// tables.
			if err := e.dbs[0].Exec("INSERT INTO users (id, name) VALUES (?, 'between')", 1000+plan.Batches[3][0]).Error; err != nil {
				t.Fatal(err)
			}
		}, func(s int) bool { return s == s3 })
		if err != nil {
			t.Fatal(err)
		}
		e.wantAllSplit(t, plan, 1)
		var name string
		e.targetDB(plan, s3).Raw("SELECT name FROM "+e.qt(e.m.SchemaOf(s3), "users")+" WHERE id = ?", s3+8).Scan(&name)
		if name != fmt.Sprintf("user %d", s3+8) {
			t.Errorf("shard %d: user %d is named %q, want the monolith's name", s3, s3+8, name)
		}
	})

	t.Run("the monolith's tables changed", func(t *testing.T) {
		e := newEnv()
		typ := "TEXT"
		if e.dbs[0].Dialector.Name() == "mysql" {
			typ = "VARCHAR(20)"
		}
		plan, err := run(t, e, func(*reshard.SplitPlan) {
			// A migration between two batches: the schemas created
			// ahead lack the column.
			if err := e.dbs[0].Exec("ALTER TABLE users ADD COLUMN nick " + typ + " NOT NULL DEFAULT 'n'").Error; err != nil {
				t.Fatal(err)
			}
		}, func(int) bool { return true })
		// The rows of the shards sealed before the change are summed over
		// the columns their batch verified (the seal keeps them), not over
		// the table's new ones: the monolith's clean-up (on PostgreSQL at
		// the last batch, on MySQL at CleanSplit) deletes them all.
		if err != nil {
			t.Fatalf("the split with a migration between its batches: %v", err)
		}
		if e.dbs[0].Dialector.Name() == "mysql" {
			if _, err := reshard.CleanSplit(ctx, e.cfg); err != nil {
				t.Fatalf("CleanSplit after a migration between the batches: %v", err)
			}
		}
		for _, table := range []string{"users", "photos", "comments"} {
			var n int64
			if err := e.dbs[0].Raw("SELECT count(*) FROM " + table).Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("the monolith's %s holds %d rows after the clean-up, want 0", table, n)
			}
		}
		e.wantAllSplit(t, plan, 0)
		for _, batch := range plan.Batches[1:] {
			for _, s := range batch {
				var n int64
				e.targetDB(plan, s).Raw("SELECT count(*) FROM information_schema.columns WHERE table_schema = ? AND table_name = 'users' AND column_name = 'nick'", e.m.SchemaOf(s)).Scan(&n)
				if n != 1 {
					t.Errorf("shard %d, of a batch after the change: its users have no column nick", s)
				}
			}
		}
	})

	t.Run("a column dropped", func(t *testing.T) {
		e := newEnv()
		if err := e.dbs[0].Exec("ALTER TABLE users ADD COLUMN extra INT NOT NULL DEFAULT 7").Error; err != nil {
			t.Fatal(err)
		}
		plan, err := run(t, e, func(*reshard.SplitPlan) {
			// The first batch's rows were verified with the column: the
			// clean-up cannot sum them as they were verified.
			if err := e.dbs[0].Exec("ALTER TABLE users DROP COLUMN extra").Error; err != nil {
				t.Fatal(err)
			}
		}, func(int) bool { return true })
		if err == nil && e.dbs[0].Dialector.Name() == "mysql" {
			_, err = reshard.CleanSplit(ctx, e.cfg)
		}
		if !errors.Is(err, reshard.ErrCopyDiffers) || !strings.Contains(err.Error(), "extra") {
			t.Fatalf("the clean-up after a column dropped between the batches: %v, want ErrCopyDiffers naming the column", err)
		}
		// And naming the first batch's shards, those verified with it.
		var named []string
		if e.dbs[0].Dialector.Name() == "mysql" {
			for _, s := range plan.Batches[0] {
				named = append(named, fmt.Sprintf("shard %d of users", s))
			}
		} else {
			var list []string
			first := slices.Clone(plan.Batches[0])
			slices.Sort(first) // as the refusal lists them
			for _, s := range first {
				list = append(list, strconv.Itoa(s))
			}
			named = []string{"shards " + strings.Join(list, ", ") + " of users"}
		}
		for _, n := range named {
			if !strings.Contains(err.Error(), n) {
				t.Errorf("the clean-up's refusal %q does not name %q", err, n)
			}
		}
		// Nothing unverified is deleted: on PostgreSQL the monolith's
		// tables are emptied at once or not at all; MySQL deletes the
		// shards that add up, and keeps the first batch's users (5 a
		// shard).
		want := int64(40)
		if e.dbs[0].Dialector.Name() == "mysql" {
			want = int64(5 * len(plan.Batches[0]))
		}
		var n int64
		if err := e.dbs[0].Raw("SELECT count(*) FROM users").Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("the monolith keeps %d users after the refused clean-up, want %d", n, want)
		}
	})

	// PostgreSQL's: each shard's schema gets the monolith's grants (MySQL's
	// are the server's, by the shards' name pattern).
	pg := strings.Contains(t.Name(), "Postgres")
	t.Run("a privilege granted between batches", func(t *testing.T) {
		if !pg {
			return
		}
		admin := testdb.OpenPostgres(t) // before the env: its role dropped after the env's databases
		role := fmt.Sprintf("shardid_ahead_%d", rand.IntN(1e9))
		if err := admin.Exec("CREATE ROLE " + role + " NOLOGIN").Error; err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := admin.Exec("DROP ROLE IF EXISTS " + role).Error; err != nil {
				t.Errorf("dropping %s: %v", role, err)
			}
		})
		e := newEnv()
		// Its grants on the monolith and the shards go before the env's
		// databases do (their drops are not waited for), so that the role
		// can go.
		t.Cleanup(func() {
			for _, db := range e.dbs {
				db.Exec("DROP OWNED BY " + role)
			}
		})
		plan, err := run(t, e, func(*reshard.SplitPlan) {
			if err := e.dbs[0].Exec("GRANT SELECT ON users TO " + role).Error; err != nil {
				t.Fatal(err)
			}
		}, func(int) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		for _, batch := range plan.Batches[1:] {
			for _, s := range batch {
				var may bool
				e.targetDB(plan, s).Raw("SELECT has_table_privilege(?, ?, 'SELECT')", role, e.m.SchemaOf(s)+".users").Scan(&may)
				if !may {
					t.Errorf("shard %d, of a batch after the grant: %s may not read its users", s, role)
				}
			}
		}
	})

	t.Run("a mover's row", func(t *testing.T) {
		e := newEnv()
		var s2 int
		plan, err := run(t, e, func(plan *reshard.SplitPlan) {
			// s2, of the second batch: a row no monolith has, written
			// into its copy as a mover would, the fence left as it was.
			s2 = plan.Batches[1][0]
			e.strayRow(t, plan, s2, strayID)
		}, nil)
		if !errors.Is(err, reshard.ErrCopyDiffers) || !strings.Contains(err.Error(), strconv.Itoa(strayID)) {
			t.Fatalf("the run with a stray row in shard %d's copy: %v, want ErrCopyDiffers naming id %d", s2, err, strayID)
		}
		if !e.m.Load().Shared(s2) {
			t.Fatalf("shard %d flipped with a stray row in its copy", s2)
		}
		var n int64
		e.targetDB(plan, s2).Raw("SELECT count(*) FROM "+e.qt(e.m.SchemaOf(s2), "users")+" WHERE id = ?", strayID).Scan(&n)
		if n != 1 {
			t.Errorf("the failed batch deleted the row it did not copy")
		}
		// Run again (the guide's resume): the copies are emptied first.
		if err := reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{}, nil); err != nil {
			t.Fatal(err)
		}
		e.wantAllSplit(t, plan, 0)
	})
}

// TestSplitAbortDropsTheSchemasCreatedAheadPostgres stops a plan's first
// batch at its copy, when the later batches' schemas exist too: the abort
// drops every one, and the plan then runs from the start.
func TestSplitAbortDropsTheSchemasCreatedAheadPostgres(t *testing.T) {
	t.Parallel()
	testSplitAbortAhead(t, newSplitEnvPG(t, 8, 40, 2, 2))
}

// TestSplitAbortDropsTheSchemasCreatedAheadMariaDB is
// TestSplitAbortDropsTheSchemasCreatedAheadPostgres on MariaDB.
func TestSplitAbortDropsTheSchemasCreatedAheadMariaDB(t *testing.T) {
	t.Parallel()
	testSplitAbortAhead(t, newSplitEnvMySQL(t, 8, 40, 2, 2))
}

// runStoppedAt runs plan, cancelled (Ctrl-C) as it reaches the run's
// point at.
func runStoppedAt(e *splitEnv, plan *reshard.SplitPlan, at string) error {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ctx = reshard.WithRunPause(ctx, func(point string) {
		if point == at {
			stop()
		}
	})
	return reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{}, nil)
}

func testSplitAbortAhead(t *testing.T, e *splitEnv) {
	ctx := context.Background()
	plan, err := reshard.PlanSplit(ctx, e.cfg, e.names[1:], 2)
	if err != nil {
		t.Fatal(err)
	}
	err = runStoppedAt(e, plan, "split copy")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the run stopped at its first copy: %v, want context.Canceled", err)
	}
	for _, s := range allShards(8) {
		if _, ok := e.targetFence(t, plan, s); !ok {
			t.Errorf("shard %d: no schema on its target after the first batch's creation", s)
		}
	}
	res, err := reshard.AbortSplit(ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Dropped, allShards(8)) {
		t.Errorf("the abort dropped %v, want every shard's copy", res.Dropped)
	}
	for _, s := range allShards(8) {
		if _, ok := e.targetFence(t, plan, s); ok {
			t.Errorf("shard %d: its schema is still on its target after the abort", s)
		}
	}
	if err := reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	e.wantAllSplit(t, plan, 0)
}

// TestSplitStoppedBeforeItCreatesAheadPostgres stops a plan's first batch
// (Ctrl-C) once its own schemas exist and before it creates the later
// batches': the plan run again finishes, the first batch's schemas found
// as any run again finds them, the later ones created ahead then.
func TestSplitStoppedBeforeItCreatesAheadPostgres(t *testing.T) {
	t.Parallel()
	testSplitStoppedBeforeAhead(t, newSplitEnvPG(t, 8, 40, 2, 2))
}

// TestSplitStoppedBeforeItCreatesAheadMariaDB is
// TestSplitStoppedBeforeItCreatesAheadPostgres on MariaDB.
func TestSplitStoppedBeforeItCreatesAheadMariaDB(t *testing.T) {
	t.Parallel()
	testSplitStoppedBeforeAhead(t, newSplitEnvMySQL(t, 8, 40, 2, 2))
}

func testSplitStoppedBeforeAhead(t *testing.T, e *splitEnv) {
	ctx := context.Background()
	plan, err := reshard.PlanSplit(ctx, e.cfg, e.names[1:], 2)
	if err != nil {
		t.Fatal(err)
	}
	err = runStoppedAt(e, plan, "split create ahead")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the run stopped before its creation ahead: %v, want context.Canceled", err)
	}
	for k, batch := range plan.Batches {
		for _, s := range batch {
			if _, ok := e.targetFence(t, plan, s); ok != (k == 0) {
				t.Errorf("shard %d, of batch %d: schema on its target %v after the stop, want %v", s, k+1, ok, k == 0)
			}
		}
	}
	if err := reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	e.wantAllSplit(t, plan, 0)
}

// targetDB is shard s's target in plan.
func (e *splitEnv) targetDB(plan *reshard.SplitPlan, s int) *gorm.DB {
	return e.dbs[e.m.DatabaseIndex(plan.To[s])]
}

// targetFence reads the fence of shard s's schema on its target in plan,
// and reports whether the schema is there.
func (e *splitEnv) targetFence(t *testing.T, plan *reshard.SplitPlan, s int) (f struct {
	MoverOnly, Sealed bool
	Token             int64
}, ok bool) {
	t.Helper()
	db, sc := e.targetDB(plan, s), e.m.SchemaOf(s)
	var n int64
	if err := db.Raw("SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?", sc).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		return f, false
	}
	if err := db.Raw("SELECT mover_only, sealed, token FROM " + e.qt(sc, "shardid_fence_state")).Scan(&f).Error; err != nil {
		t.Fatal(err)
	}
	return f, true
}

// strayRow writes user id, named "stray", into shard s's copy on its
// target, let through its fence as a mover is.
func (e *splitEnv) strayRow(t *testing.T, plan *reshard.SplitPlan, s int, id int64) {
	t.Helper()
	db := e.targetDB(plan, s)
	insert := fmt.Sprintf("INSERT INTO %s (id, name) VALUES (%d, 'stray')", e.qt(e.m.SchemaOf(s), "users"), id)
	var err error
	if db.Dialector.Name() == "mysql" {
		err = db.Connection(func(c *gorm.DB) error {
			if err := c.Exec("SET @shardid_mover = 1").Error; err != nil {
				return err
			}
			defer c.Exec("SET @shardid_mover = NULL")
			return c.Exec(insert).Error
		})
	} else {
		err = db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec("SELECT set_config('shardid.mover', 'on', true)").Error; err != nil {
				return err
			}
			return tx.Exec(insert).Error
		})
	}
	if err != nil {
		t.Fatalf("a mover's row in shard %d's copy: %v", s, err)
	}
}

// wantAllSplit checks that every shard of plan is on its target, with the
// monolith's rows of each table (40 users and more, 80 photos, 160
// comments in all) and no stray row.
func (e *splitEnv) wantAllSplit(t *testing.T, plan *reshard.SplitPlan, moreUsers int64) {
	t.Helper()
	v := e.m.Load()
	counts := map[string]int64{}
	for s := range v.LogicalShards() {
		if v.Shared(s) || v.Database(s) != plan.To[s] {
			t.Errorf("shard %d on %s (shared: %v), want %s", s, v.Database(s), v.Shared(s), plan.To[s])
			continue
		}
		db := e.targetDB(plan, s)
		e.addShardRows(t, db, v.Schema(s), counts)
		var stray int64
		db.Raw("SELECT count(*) FROM " + e.qt(v.Schema(s), "users") + " WHERE name = 'stray'").Scan(&stray)
		if stray != 0 {
			t.Errorf("shard %d holds a row written behind the split's back", s)
		}
	}
	if want := map[string]int64{"users": 40 + moreUsers, "photos": 80, "comments": 160}; !maps.Equal(counts, want) {
		t.Errorf("rows on the targets %v, want %v", counts, want)
	}
}

// TestSplitRefusesALaterBatchsBadTarget: a plan whose later batch names
// the monolith, or a database the map does not have, as a shard's target
// (a plan file edited by hand) is refused before the first batch creates
// anything: the first batch would otherwise create that batch's schemas
// there, where no abort looks for them (or index no database at all).
func TestSplitRefusesALaterBatchsBadTarget(t *testing.T) {
	t.Parallel()
	e := newSplitEnvPG(t, 8, 40, 2, 2)
	ctx := context.Background()
	for _, to := range []string{"mono", "nowhere"} {
		plan, err := reshard.PlanSplit(ctx, e.cfg, e.names[1:], 2)
		if err != nil {
			t.Fatal(err)
		}
		s := plan.Batches[2][0]
		plan.To[s] = to
		err = reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{}, nil)
		if !errors.Is(err, shardid.ErrInvalidConfig) || !strings.Contains(err.Error(), fmt.Sprintf("shard %d to %q", s, to)) {
			t.Errorf("a plan sending shard %d to %s: %v, want ErrInvalidConfig naming it", s, to, err)
		}
		for _, d := range e.dbs {
			var n int64
			d.Raw("SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE 'shard_%'").Scan(&n)
			if n != 0 {
				t.Errorf("%d shard schemas created by the refused run", n)
			}
		}
	}
}
