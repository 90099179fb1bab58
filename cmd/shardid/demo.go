package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/shardid/shardid"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// The demo's models: Instagram's photos, with comments colocated on their
// photo's shard.
type Photo struct {
	ID       shardid.ID
	UserID   int64 `shardid:"key"`
	Caption  string
	Comments []Comment
}

type Comment struct {
	ID      shardid.ID
	PhotoID shardid.ID `shardid:"key"`
	UserID  int64
	Body    string
}

// DBComment is Comment with its ID made by next_id() in PostgreSQL.
type DBComment struct {
	ID      shardid.ID `gorm:"primaryKey;default:(-)"`
	PhotoID shardid.ID
	UserID  int64
	Body    string
}

func (DBComment) TableName() string { return "comments" }

type demoConfig struct {
	postgres, mysql, dir string
	databases, shards    int
	users, photos        int
	comments, workers    int
}

func runDemo(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", "[--postgres DSN | --mysql DSN] [--shards N] [--users N] [--photos N]", stderr)
	var c demoConfig
	fs.StringVar(&c.postgres, "postgres", os.Getenv("SHARDID_DEMO_POSTGRES_DSN"), "run on PostgreSQL, a schema per logical shard")
	fs.StringVar(&c.mysql, "mysql", os.Getenv("SHARDID_DEMO_MYSQL_DSN"), "run on MySQL/MariaDB")
	fs.StringVar(&c.dir, "dir", "", "where the embedded SQLite files go (default: a new temporary directory)")
	fs.IntVar(&c.databases, "databases", 4, "physical SQLite databases")
	fs.IntVar(&c.shards, "shards", shardid.DefaultLogicalShards, "logical shards")
	fs.IntVar(&c.users, "users", 200, "users")
	fs.IntVar(&c.photos, "photos", 10, "photos per user")
	fs.IntVar(&c.comments, "comments", 2, "comments per photo")
	fs.IntVar(&c.workers, "workers", 8, "goroutines writing at once")
	if err := parse(fs, args); err != nil {
		return err
	}
	if c.users < 1 || c.photos < 1 || c.comments < 0 || c.workers < 1 || c.databases < 1 {
		return errors.New("--users, --photos, --workers and --databases must be positive, --comments not negative")
	}
	return demo(context.Background(), c, stdout)
}

func demo(ctx context.Context, c demoConfig, out io.Writer) error {
	cfg := &gorm.Config{Logger: logger.Discard}
	layout := shardid.Instagram
	var (
		dbs     []*gorm.DB
		names   []string
		pattern string
		where   string
	)
	switch {
	case c.postgres != "":
		db, err := gorm.Open(postgres.Open(c.postgres), cfg)
		if err != nil {
			return err
		}
		dbs, names, pattern, where = []*gorm.DB{db}, []string{"postgres"}, "demo_%04d", "PostgreSQL, a schema per logical shard"
		// Go and PostgreSQL both make IDs: a worker bit each.
		layout, _ = shardid.Instagram.WithWorkerBits(1)
	case c.mysql != "":
		db, err := gorm.Open(mysql.Open(c.mysql), cfg)
		if err != nil {
			return err
		}
		dbs, names, where = []*gorm.DB{db}, []string{"mysql"}, "MySQL/MariaDB"
	default:
		dir := c.dir
		if dir == "" {
			d, err := os.MkdirTemp("", "shardid-demo-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(d)
			dir = d
		}
		for i := range c.databases {
			name := fmt.Sprintf("db%d", i)
			db, err := gorm.Open(sqlite.Open(filepath.Join(dir, name+".sqlite")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)"), cfg)
			if err != nil {
				return err
			}
			sqlDB, _ := db.DB()
			sqlDB.SetMaxOpenConns(1) // one writer per SQLite file
			dbs, names = append(dbs, db), append(names, name)
		}
		where = fmt.Sprintf("embedded SQLite, %d database files in %s", c.databases, dir)
	}
	defer func() {
		for _, db := range dbs {
			if sqlDB, err := db.DB(); err == nil {
				sqlDB.Close()
			}
		}
	}()

	g, err := shardid.NewGenerator(layout, workerOption(layout)...)
	if err != nil {
		return err
	}
	plugin, err := shardid.NewPlugin(shardid.PluginConfig{Generator: g, LogicalShards: c.shards})
	if err != nil {
		return err
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: names, LogicalShards: c.shards,
		SchemaPattern: pattern, Plugin: plugin})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "shardid demo: %d logical shards on %s\n", c.shards, where)
	start := time.Now()
	if err := r.Migrate(ctx, &Photo{}, &Comment{}); err != nil {
		return err
	}
	if pattern != "" {
		if err := r.InstallPostgresNextID(ctx, 1, "id", "comments"); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "migrated in %v\n", time.Since(start).Round(time.Millisecond))

	ids, elapsed, err := writeRows(ctx, r, c, pattern != "", out)
	if err != nil {
		return err
	}
	return summarize(ctx, r, layout, ids, elapsed, out)
}

func workerOption(l shardid.Layout) []shardid.GeneratorOption {
	if l.Workers() > 1 {
		return []shardid.GeneratorOption{shardid.WithWorker(0)}
	}
	return nil
}

// written are the IDs the demo wrote.
type written struct {
	photos   []Photo // ID and UserID
	comments []shardid.ID
}

// writeRows creates every user's photos with their comments, from
// c.workers goroutines, through the router.
func writeRows(ctx context.Context, r *shardid.Router, c demoConfig, dbComments bool, out io.Writer) (written, time.Duration, error) {
	total := int64(c.users * c.photos * (1 + c.comments))
	bar := startProgress(out, "writing", total)
	users := make(chan int64)
	var (
		mu    sync.Mutex
		w     written
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	for range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for user := range users {
				photos := make([]Photo, c.photos)
				for i := range photos {
					photos[i] = Photo{UserID: user, Caption: fmt.Sprintf("photo %d of user %d", i, user)}
					if !dbComments {
						for j := range c.comments {
							photos[i].Comments = append(photos[i].Comments, Comment{UserID: user + int64(j), Body: "nice"})
						}
					}
				}
				db := r.ForKey(user).WithContext(ctx)
				err := db.Create(&photos).Error
				var cids []shardid.ID
				if err == nil && dbComments {
					// Comments get their IDs from next_id() in the shard's schema.
					var cs []DBComment
					for _, p := range photos {
						for j := range c.comments {
							cs = append(cs, DBComment{PhotoID: p.ID, UserID: user + int64(j), Body: "nice"})
						}
					}
					if len(cs) > 0 {
						err = db.Create(&cs).Error
					}
					for _, cm := range cs {
						cids = append(cids, cm.ID)
					}
				}
				mu.Lock()
				if err != nil && first == nil {
					first = fmt.Errorf("user %d: %w", user, err)
				}
				for _, p := range photos {
					w.photos = append(w.photos, Photo{ID: p.ID, UserID: p.UserID})
					for _, cm := range p.Comments {
						cids = append(cids, cm.ID)
					}
				}
				w.comments = append(w.comments, cids...)
				mu.Unlock()
				bar.Add(len(photos) + len(cids))
			}
		}()
	}
	// User ids are arbitrary numbers, as in an application: spread over
	// every logical shard (the same ones on every run).
	rng := rand.New(rand.NewPCG(1, 2))
	for range c.users {
		users <- rng.Int64N(1 << 40)
	}
	close(users)
	wg.Wait()
	elapsed := time.Since(start)
	bar.Finish()
	return w, elapsed, first
}

func summarize(ctx context.Context, r *shardid.Router, layout shardid.Layout, w written, elapsed time.Duration, out io.Writer) error {
	rows := len(w.photos) + len(w.comments)
	fmt.Fprintf(out, "wrote %d photos and %d comments in %v: %.0f rows/s\n",
		len(w.photos), len(w.comments), elapsed.Round(time.Millisecond), float64(rows)/elapsed.Seconds())

	seen := make(map[shardid.ID]bool, rows)
	dups := 0
	for _, id := range append(photoIDs(w.photos), w.comments...) {
		if seen[id] {
			dups++
		}
		seen[id] = true
	}
	fmt.Fprintf(out, "duplicate IDs: %d\n", dups)

	// Read every photo back by its ID alone.
	start := time.Now()
	missing := 0
	for _, p := range w.photos {
		var got Photo
		if err := r.Get(ctx, &got, p.ID); err != nil || got.UserID != p.UserID {
			missing++
		}
	}
	fmt.Fprintf(out, "read %d photos back by ID through the router in %v: %d missing\n",
		len(w.photos), time.Since(start).Round(time.Millisecond), missing)

	// Rows per physical database, counted in the databases.
	counts := map[string]int64{}
	if r.Schema(0) == "" {
		names := r.Names()
		for i, db := range r.Databases() {
			var n int64
			db.WithContext(ctx).Model(&Photo{}).Count(&n)
			counts[names[i]] = n
		}
	} else {
		for s := range r.LogicalShards() {
			var n int64
			r.ForShard(s).WithContext(ctx).Model(&Photo{}).Count(&n)
			counts[r.DatabaseName(s)] += n
		}
	}
	var names []string
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(out, "photos per physical database:")
	for _, n := range names {
		fmt.Fprintf(out, "  %-10s %d\n", n, counts[n])
	}

	newest, err := shardid.Gather(ctx, r, shardid.GatherOptions{Desc: true, Limit: 3},
		func(p Photo) shardid.ID { return p.ID },
		func(ctx context.Context, db *gorm.DB) ([]Photo, error) {
			var ps []Photo
			return ps, db.Order("id DESC").Limit(3).Find(&ps).Error
		})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "the 3 newest photos across all shards, by fan-out:")
	for _, p := range newest {
		d := layout.Decompose(p.ID)
		fmt.Fprintf(out, "  %d  time=%s shard=%d worker=%d seq=%d  on %s  (user %d)\n",
			p.ID, d.Time.Format(timeFormat), d.Shard, d.Worker, d.Seq, r.DatabaseName(d.Shard), p.UserID)
	}
	if dups > 0 || missing > 0 {
		return fmt.Errorf("%d duplicate IDs, %d photos not found", dups, missing)
	}
	return nil
}

func photoIDs(ps []Photo) []shardid.ID {
	ids := make([]shardid.ID, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids
}
