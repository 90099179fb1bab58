// Command split takes a small monolith through an online split: one
// PostgreSQL database with users, photos and comments keyed by bigserial,
// foreign keys between them, and a global table of plans, is split into 16
// logical shards on two other databases, 4 shards a step, while a writer
// keeps writing through a shardid.Router. The application adopts shardid
// first: new photos get shardid IDs, the old rows' IDs are recorded as
// legacy IDs, and after the split both kinds still find their rows. It needs a PostgreSQL server
// (SHARDID_EXAMPLE_POSTGRES_DSN, by default the local one): it creates
// three databases of its own and drops them at the end.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Photo is a row of the monolith's photos: its shard is UserID % 16.
type Photo struct {
	ID      shardid.ID // bigserial before the adoption, shardid's since
	UserID  int64      `shardid:"key"`
	Caption string
}

const defaultDSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres sslmode=disable"

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer) error {
	ctx := context.Background()
	dsn := os.Getenv("SHARDID_EXAMPLE_POSTGRES_DSN")
	if dsn == "" {
		dsn = defaultDSN
	}
	cfg := &gorm.Config{Logger: logger.Discard}
	admin, err := gorm.Open(postgres.Open(dsn), cfg)
	if err != nil {
		return err
	}
	defer closeDB(admin)
	names := []string{"mono", "east", "west"}
	var dbs, appDBs []*gorm.DB // the split's sessions, and the application's
	for _, n := range names {
		name := fmt.Sprintf("split_example_%s_%d", n, os.Getpid())
		if err := admin.Exec("CREATE DATABASE " + name).Error; err != nil {
			return err
		}
		defer admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
		db, err := gorm.Open(postgres.Open(withDBName(dsn, name)), cfg)
		if err != nil {
			return err
		}
		defer closeDB(db)
		app, err := gorm.Open(postgres.Open(withDBName(dsn, name)), cfg)
		if err != nil {
			return err
		}
		defer closeDB(app)
		dbs, appDBs = append(dbs, db), append(appDBs, app)
	}

	// The monolith, as an application made it.
	for _, q := range []string{
		"CREATE TABLE plans (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL)",
		"CREATE TABLE users (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL)",
		"CREATE TABLE photos (id BIGSERIAL PRIMARY KEY, user_id BIGINT NOT NULL REFERENCES users(id), caption TEXT NOT NULL)",
		"CREATE TABLE comments (id BIGSERIAL PRIMARY KEY, photo_id BIGINT NOT NULL REFERENCES photos(id), body TEXT NOT NULL)",
		"INSERT INTO plans (name) VALUES ('free'), ('pro')",
		"INSERT INTO users (name) SELECT 'user ' || g FROM generate_series(1, 100) g",
		"INSERT INTO photos (user_id, caption) SELECT 1 + g % 100, 'photo ' || g FROM generate_series(1, 1000) g",
		"INSERT INTO comments (photo_id, body) SELECT 1 + g % 1000, 'comment ' || g FROM generate_series(1, 3000) g",
	} {
		if err := dbs[0].Exec(q).Error; err != nil {
			return err
		}
	}

	// Every logical shard starts in the monolith's own tables (Shared),
	// and is split into a schema of its own, shard_0005, on east or west.
	m, err := shardmap.New(shardmap.Config{Databases: names, LogicalShards: 16, SchemaPattern: "shard_%04d",
		Assign: make([]int, 16), Shared: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}})
	if err != nil {
		return err
	}
	catalog := &reshard.Catalog{DB: dbs[0]}
	if _, err := catalog.SaveMap(ctx, m); err != nil {
		return err
	}
	// Step 1: the application adopts shardid. Its new rows get shardid IDs
	// in the same bigint columns, with the shard of their user.
	adopted := time.Now()
	plugin, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 16})
	if err != nil {
		return err
	}
	router, err := shardid.NewRouter(shardid.RouterConfig{Databases: appDBs, ShardMap: m, Plugin: plugin})
	if err != nil {
		return err
	}
	split := reshard.SplitConfig{Map: m, DBs: dbs, Monolith: "mono", Catalog: catalog,
		Tables: []reshard.SplitTable{
			{Name: "users", Key: "id"},
			{Name: "photos", Key: "user_id"},
			{Name: "comments", Parent: "photos", Via: "photo_id"}, // comments follow their photo's user
		},
		Global: []string{"plans"}, // stays on mono
		// Each row's ID is checked against the shard its key puts it in.
		Layout: router.Layout(),
	}

	// Step 2: where each row whose ID is older than shardid belongs, kept
	// in the catalog, where the routers and the split find it.
	legacy, err := reshard.ReadLegacyIDs(ctx, dbs[0], router, adopted, split.Tables...)
	if err != nil {
		return err
	}
	if err := catalog.SaveLegacy(ctx, legacy); err != nil {
		return err
	}
	fmt.Fprintf(w, "legacy IDs: users %d, photos %d, comments %d\n", legacy.Rows("users"), legacy.Rows("photos"), legacy.Rows("comments"))

	// The dry run.
	plan, err := reshard.PlanSplit(ctx, split, []string{"east", "west"}, 4)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "plan: %d shards in %d steps; users %d, photos %d, comments %d rows; east %d, west %d rows\n",
		len(plan.To), len(plan.Batches), plan.Rows["users"], plan.Rows["photos"], plan.Rows["comments"], plan.RowsPerDB["east"], plan.RowsPerDB["west"])

	// A writer adds photos through the router all along.
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var written int
	var longest time.Duration
	var last shardid.ID
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := int64(1); wctx.Err() == nil; i++ {
			user := 1 + i%100
			start := time.Now()
			for {
				p := Photo{UserID: user, Caption: "written during the split"}
				err := router.Create(ctx, &p) // not wctx: a write under way ends, and is counted
				if err == nil {
					last = p.ID
					break
				}
				if !errors.Is(err, shardid.ErrShardMoving) || wctx.Err() != nil {
					return // the step that fences this shard is under a second: retry
				}
				time.Sleep(time.Millisecond)
			}
			written++
			longest = max(longest, time.Since(start))
		}
	}()
	err = reshard.RunSplit(ctx, split, plan, reshard.SplitOptions{}, func(i int, res reshard.SplitResult) {
		fmt.Fprintf(w, "step %d: shards %d-%d: %d rows copied, writes to them held %v\n",
			i+1, res.Shards[0], res.Shards[len(res.Shards)-1], res.Copied, res.Fenced.Round(10*time.Millisecond))
	})
	stop()
	wg.Wait()
	if err != nil {
		return err
	}

	// Every photo, old and new, is on its shard's database now; the
	// monolith keeps the plans alone.
	var mono, east, west int64
	dbs[0].Raw("SELECT count(*) FROM photos").Scan(&mono)
	for s := range 16 {
		var n int64
		v := m.Load()
		dbs[v.DB(s)].Raw("SELECT count(*) FROM " + router.Table(s, "photos")).Scan(&n)
		if v.Database(s) == "east" {
			east += n
		} else {
			west += n
		}
	}
	fmt.Fprintf(w, "photos: %d on east, %d on west, %d left in mono (%d written during the split, the longest write %v)\n",
		east, west, mono, written, longest.Round(10*time.Millisecond))
	if east+west != 1000+int64(written) || mono != 0 {
		return fmt.Errorf("photos: %d on the targets, want %d", east+west, 1000+written)
	}
	var p Photo
	if err := router.ForKey(7).Where("user_id = ?", 7).First(&p).Error; err != nil {
		return err
	}
	fmt.Fprintf(w, "user 7's first photo: %q, from %s\n", p.Caption, m.Load().Database(7))

	// Every ID still finds its row: a router given the legacy IDs (from
	// the catalog) looks an old one up where the split put its row, and a
	// new one where its bits say.
	kept, err := catalog.LoadLegacy(ctx)
	if err != nil {
		return err
	}
	after, err := shardid.NewRouter(shardid.RouterConfig{Databases: appDBs, ShardMap: m, Plugin: plugin, Legacy: kept})
	if err != nil {
		return err
	}
	for _, id := range []shardid.ID{42, last} {
		var p Photo
		if err := after.Get(ctx, &p, id); err != nil {
			return fmt.Errorf("photo %d after the split: %w", id, err)
		}
		s, err := after.ShardOfID("photos", id)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "photo %d: user %d's, on shard %d on %s\n", id, p.UserID, s, m.Load().Database(s))
	}
	return nil
}

// withDBName returns dsn with its dbname replaced.
func withDBName(dsn, name string) string {
	var parts []string
	for _, f := range strings.Fields(dsn) {
		if !strings.HasPrefix(f, "dbname=") {
			parts = append(parts, f)
		}
	}
	return strings.Join(append(parts, "dbname="+name), " ")
}

func closeDB(db *gorm.DB) {
	if s, err := db.DB(); err == nil {
		s.Close()
	}
}
