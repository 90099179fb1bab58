package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// helperSplitMover splits shards 0 and 1 of the env that SHARDID_SPLIT_DSNS
// names, and dies (exit 3, no clean-up) at stage SHARDID_DIE_AT.
func helperSplitMover(t *testing.T) {
	dsns := strings.Split(os.Getenv("SHARDID_SPLIT_DSNS"), "|")
	shards, _ := strconv.Atoi(os.Getenv("SHARDID_SPLIT_SHARDS"))
	names := strings.Split(os.Getenv("SHARDID_SPLIT_NAMES"), ",")
	var dbs []*gorm.DB
	for _, d := range dsns {
		dial := postgres.Open(d)
		if os.Getenv("SHARDID_SPLIT_DIALECT") == "mysql" {
			dial = mysql.Open(d)
		}
		db, err := gorm.Open(dial, testdb.GormConfig())
		if err != nil {
			fmt.Println("error", err)
			return
		}
		dbs = append(dbs, db)
	}
	m, err := shardmap.New(shardmap.Config{Databases: names, LogicalShards: shards, SchemaPattern: os.Getenv("SHARDID_SPLIT_PATTERN")})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	cat := &reshard.Catalog{DB: dbs[0]}
	if _, err := cat.LoadMap(context.Background(), m); err != nil {
		fmt.Println("error", err)
		return
	}
	cfg := reshard.SplitConfig{Map: m, DBs: dbs, Monolith: "mono", Catalog: cat, Global: []string{"plans"},
		Tables: []reshard.SplitTable{{Name: "users", Key: "id"}, {Name: "photos", Key: "user_id"}, {Name: "comments", Parent: "photos", Via: "photo_id"}}}
	die := os.Getenv("SHARDID_DIE_AT")
	_, err = reshard.SplitShards(context.Background(), cfg, []int{0, 1}, names[1:], reshard.SplitOptions{
		FenceFor: 2 * time.Second,
		OnStage: func(s string) {
			if s == die {
				os.Exit(3)
			}
		}})
	fmt.Println("finished", err)
}

// TestSplitKilledAtEachStagePostgres kills the mover of a batch at each
// stage (no clean-up at all), then runs the batch again: no row lost, none
// left twice; before the seal the monolith's rows take writes again once
// the fence runs out, after it never.
func TestSplitKilledAtEachStagePostgres(t *testing.T) {
	t.Parallel() // its own databases: runs beside the other slow split tests
	testSplitKilledAtEachStage(t, func(t *testing.T) *splitEnv { return newSplitEnvPG(t, 4, 20, 2, 2) })
}

// TestSplitKilledAtEachStageMariaDB is TestSplitKilledAtEachStagePostgres on
// MariaDB.
func TestSplitKilledAtEachStageMariaDB(t *testing.T) {
	t.Parallel()
	testSplitKilledAtEachStage(t, func(t *testing.T) *splitEnv { return newSplitEnvMySQL(t, 4, 20, 2, 2) })
}

func testSplitKilledAtEachStage(t *testing.T, newEnv func(t *testing.T) *splitEnv) {
	if testing.Short() {
		t.Skip("kills a mover at six stages")
	}
	for _, stage := range []string{"created", "copied", "fenced", "verified", "sealed", "flipped"} {
		t.Run(stage, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			cmd := testdb.HelperProcess(t, "splitmover", "SHARDID_SPLIT_DSNS="+strings.Join(e.dsns, "|"),
				"SHARDID_SPLIT_SHARDS=4", "SHARDID_DIE_AT="+stage, "SHARDID_SPLIT_NAMES="+strings.Join(e.names, ","),
				"SHARDID_SPLIT_PATTERN="+e.m.SchemaPattern(), "SHARDID_SPLIT_DIALECT="+e.dbs[0].Dialector.Name())
			out, err := cmd.Output()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 3 {
				t.Fatalf("the mover did not die at %s: %v\n%s", stage, err, out)
			}
			sealed := stage == "sealed" || stage == "flipped"
			// The monolith's rows of the batch: writable again once the
			// fence runs out (2 s), never after the seal.
			deadline := time.Now().Add(5 * time.Second)
			for {
				err := e.dbs[0].Exec("UPDATE users SET name = 'after the kill' WHERE id = 4").Error
				if sealed {
					if !isFenced(err) {
						t.Errorf("a write to a sealed shard after the kill: %v", err)
					}
					break
				}
				if err == nil {
					break
				}
				if !isFenced(err) || time.Now().After(deadline) {
					t.Fatalf("a write to the batch after the kill: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			// Run again, from the catalog's map.
			if _, err := e.cat.LoadMap(ctx, e.m); err != nil {
				t.Fatal(err)
			}
			if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, e.names[1:], reshard.SplitOptions{}); err != nil {
				t.Fatal(err)
			}
			var left, users int64
			e.dbs[0].Raw("SELECT count(*) FROM users WHERE id % 4 IN (0, 1)").Scan(&left)
			e.dbs[1].Raw("SELECT count(*) FROM " + e.qt(e.m.SchemaOf(0), "users")).Scan(&users)
			if left != 10 || users != 5 { // sealed on the monolith until the last batch
				t.Errorf("%d users of the batch left in the monolith (sealed), %d in shard 0; want 10 and 5", left, users)
			}
			var name string
			e.dbs[1].Raw("SELECT name FROM " + e.qt(e.m.SchemaOf(0), "users") + " WHERE id = 4").Scan(&name)
			if want := map[bool]string{false: "after the kill", true: "user 4"}[sealed]; name != want {
				t.Errorf("user 4 is %q, want %q", name, want)
			}
			var comments, want int64
			e.dbs[1].Raw("SELECT count(*) FROM " + e.qt(e.m.SchemaOf(0), "comments")).Scan(&comments)
			e.dbs[2].Raw("SELECT count(*) FROM " + e.qt(e.m.SchemaOf(1), "comments")).Scan(&want)
			if comments+want != 80/2 {
				t.Errorf("%d comments in shards 0 and 1, want 40", comments+want)
			}
			st, err := reshard.ReadSplitStatus(ctx, e.cfg)
			if err != nil || st.Split != 2 || st.Backlog != 0 || len(st.Moving) != 0 {
				t.Errorf("status: %+v, %v", st, err)
			}
		})
	}
}
