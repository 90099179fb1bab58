// Command split takes a small monolith through an online split: one
// database with users, photos and comments keyed by bigserial (or
// AUTO_INCREMENT), foreign keys between them, and a global table of plans,
// is split into 16 logical shards on two other databases, 4 shards a step,
// while a writer keeps writing through a shardid.Router. The application
// adopts shardid first: new photos get shardid IDs, the old rows' IDs are
// recorded as legacy IDs, and after the split both kinds still find their
// rows.
//
// It runs on PostgreSQL (SHARDID_EXAMPLE_POSTGRES_DSN, by default the
// local server), where each shard is a schema of its target database, or
// with -mysql on MySQL or MariaDB (SHARDID_EXAMPLE_MYSQL_DSN, by default
// the local server as root), where each shard is a database of its own:
//
//	go run ./examples/split
//	go run ./examples/split -mysql
//
// It creates three databases of its own (and on MySQL the shards'), and
// drops them at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/driver/mysql"
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

const (
	defaultDSN      = "host=127.0.0.1 port=5432 user=postgres dbname=postgres sslmode=disable"
	defaultMySQLDSN = "root@tcp(127.0.0.1:3306)/?parseTime=true"
)

// server is what the example needs to know of its server: how to reach a
// database of it, and the monolith's tables in its SQL.
type server struct {
	dsn    string
	open   func(dsn string) gorm.Dialector
	withDB func(dsn, name string) string
	drop   string   // DROP DATABASE, a %s for the name
	tables []string // the monolith's tables
	// shards is the pattern of the shards' schemas (PostgreSQL: in each
	// target database) or databases (MySQL: on the server, so named for
	// this run, and dropped at the end: shardDBs).
	shards   string
	shardDBs bool
}

func postgresServer() server {
	dsn := os.Getenv("SHARDID_EXAMPLE_POSTGRES_DSN")
	if dsn == "" {
		dsn = defaultDSN
	}
	return server{dsn: dsn, open: postgres.Open, withDB: withDBName, drop: "DROP DATABASE IF EXISTS %s WITH (FORCE)", shards: "shard_%04d",
		tables: []string{
			"CREATE TABLE plans (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL)",
			"CREATE TABLE users (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL)",
			"CREATE TABLE photos (id BIGSERIAL PRIMARY KEY, user_id BIGINT NOT NULL REFERENCES users(id), caption TEXT NOT NULL)",
			"CREATE TABLE comments (id BIGSERIAL PRIMARY KEY, photo_id BIGINT NOT NULL REFERENCES photos(id), body TEXT NOT NULL)",
		}}
}

func mysqlServer() server {
	dsn := os.Getenv("SHARDID_EXAMPLE_MYSQL_DSN")
	if dsn == "" {
		dsn = defaultMySQLDSN
	}
	return server{dsn: dsn, open: mysql.Open, withDB: withMySQLDBName, drop: "DROP DATABASE IF EXISTS %s",
		shards: fmt.Sprintf("split_example_%d_shard_%%04d", os.Getpid()), shardDBs: true,
		tables: []string{
			"CREATE TABLE plans (id BIGINT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(100) NOT NULL)",
			"CREATE TABLE users (id BIGINT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(100) NOT NULL)",
			"CREATE TABLE photos (id BIGINT AUTO_INCREMENT PRIMARY KEY, user_id BIGINT NOT NULL, caption VARCHAR(100) NOT NULL, FOREIGN KEY (user_id) REFERENCES users(id))",
			"CREATE TABLE comments (id BIGINT AUTO_INCREMENT PRIMARY KEY, photo_id BIGINT NOT NULL, body VARCHAR(100) NOT NULL, FOREIGN KEY (photo_id) REFERENCES photos(id))",
		}}
}

func main() {
	onMySQL := flag.Bool("mysql", false, "split a MySQL or MariaDB monolith (SHARDID_EXAMPLE_MYSQL_DSN) instead of a PostgreSQL one")
	flag.Parse()
	srv := postgresServer()
	if *onMySQL {
		srv = mysqlServer()
	}
	if err := run(os.Stdout, srv); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer, srv server) (rerr error) {
	ctx := context.Background()
	cfg := &gorm.Config{Logger: logger.Discard}
	admin, err := gorm.Open(srv.open(srv.dsn), cfg)
	if err != nil {
		return err
	}
	defer closeDB(admin)
	// drop drops a database the example made, once its sessions are
	// closed (defers run last first), trying again if the server ended
	// the session meanwhile; what it cannot drop is the run's error.
	drop := func(name string) {
		var err error
		for range 3 {
			if err = admin.Exec(fmt.Sprintf(srv.drop, name)).Error; err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		rerr = errors.Join(rerr, fmt.Errorf("dropping %s: %w", name, err))
	}
	if srv.shardDBs { // on MySQL the shards' databases are the server's
		for s := range 16 {
			defer drop(fmt.Sprintf(srv.shards, s))
		}
	}
	names := []string{"mono", "east", "west"}
	var dbs, appDBs []*gorm.DB // the split's sessions, and the application's
	for _, n := range names {
		name := fmt.Sprintf("split_example_%s_%d", n, os.Getpid())
		if err := admin.Exec("CREATE DATABASE " + name).Error; err != nil {
			return err
		}
		defer drop(name)
		db, err := gorm.Open(srv.open(srv.withDB(srv.dsn, name)), cfg)
		if err != nil {
			return err
		}
		defer closeDB(db)
		app, err := gorm.Open(srv.open(srv.withDB(srv.dsn, name)), cfg)
		if err != nil {
			return err
		}
		defer closeDB(app)
		dbs, appDBs = append(dbs, db), append(appDBs, app)
	}

	// The monolith, as an application made it: 100 users, 1,000 photos,
	// 3,000 comments (rows written out, which both servers read alike).
	for _, q := range append(srv.tables,
		"INSERT INTO plans (name) VALUES ('free'), ('pro')",
		"INSERT INTO users (name) VALUES "+rows(100, func(g int) string { return fmt.Sprintf("('user %d')", g) }),
		"INSERT INTO photos (user_id, caption) VALUES "+rows(1000, func(g int) string { return fmt.Sprintf("(%d, 'photo %d')", 1+g%100, g) }),
		"INSERT INTO comments (photo_id, body) VALUES "+rows(3000, func(g int) string { return fmt.Sprintf("(%d, 'comment %d')", 1+g%1000, g) }),
	) {
		if err := dbs[0].Exec(q).Error; err != nil {
			return err
		}
	}

	// Every logical shard starts in the monolith's own tables (Shared),
	// and is split into a schema of its own, shard_0005, on east or west
	// (on MySQL a database of its own).
	m, err := shardmap.New(shardmap.Config{Databases: names, LogicalShards: 16, SchemaPattern: srv.shards,
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
		fmt.Fprintf(w, "step %d: shards %v: %d rows copied, writes to them held %v\n",
			i+1, res.Shards, res.Copied, res.Fenced.Round(10*time.Millisecond))
	})
	stop()
	wg.Wait()
	if err != nil {
		return err
	}
	// The split shards' rows stay on the monolith, sealed, until no router
	// can route with the map from before the split. PostgreSQL's last step
	// empties them (its statement triggers refuse a stale router's writes);
	// on MySQL, once every router follows the catalog (the writer's
	// did), CleanSplit does.
	deleted, err := reshard.CleanSplit(ctx, split)
	if err != nil {
		return err
	}
	if deleted > 0 {
		fmt.Fprintf(w, "clean-up: %d rows of the split shards deleted from mono\n", deleted)
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

// rows returns the rows row(1) to row(n), separated by commas.
func rows(n int, row func(g int) string) string {
	out := make([]string, n)
	for g := 1; g <= n; g++ {
		out[g-1] = row(g)
	}
	return strings.Join(out, ", ")
}

// withMySQLDBName returns the MySQL dsn with its database replaced. The
// dsn parses: the server's session opened with it first.
func withMySQLDBName(dsn, name string) string {
	c, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		return dsn
	}
	c.DBName = name
	return c.FormatDSN()
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
