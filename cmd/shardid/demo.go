package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
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
// photo's shard. Their tables have names of the demo's own, so that it can
// drop them without touching anything else.
type Photo struct {
	ID       shardid.ID
	UserID   int64 `shardid:"key"`
	Caption  string
	Comments []Comment
}

func (Photo) TableName() string { return "demo_photos" }

type Comment struct {
	ID      shardid.ID
	PhotoID shardid.ID `shardid:"key"`
	UserID  int64
	Body    string
}

func (Comment) TableName() string { return "demo_comments" }

// DBComment is Comment with its ID made by next_id() in PostgreSQL.
type DBComment struct {
	ID      shardid.ID `gorm:"primaryKey;default:(-)"`
	PhotoID shardid.ID
	UserID  int64
	Body    string
}

func (DBComment) TableName() string { return "demo_comments" }

type demoConfig struct {
	postgres, mysql, dir string
	databases, shards    int
	users, photos        int
	comments, workers    int
	keep                 bool
	onStage              func(stage string) // if not nil, called once migrated ("migrated")
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
			dir = d
		}
		for i := range c.databases {
			name := fmt.Sprintf("db%d", i)
			file := filepath.Join(dir, fmt.Sprintf("shardid-demo-%s.sqlite", name))
			removeSQLite(file) // a file an earlier run kept
			db, err := gorm.Open(sqlite.Open(file+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)"), cfg)
			if err != nil {
				return fmt.Errorf("--dir %s: %w", dir, err)
			}
			sqlDB, _ := db.DB()
			sqlDB.SetMaxOpenConns(1) // one writer per SQLite file
			dbs, names = append(dbs, db), append(names, name)
		}
		where = fmt.Sprintf("embedded SQLite, %d database files in %s", c.databases, dir)
		defer func() {
			closeAll(dbs)
			switch {
			case c.keep:
				fmt.Fprintf(out, "kept the SQLite files in %s (--keep)\n", dir)
			case c.dir == "":
				os.RemoveAll(dir)
				fmt.Fprintf(out, "removed %s (--keep keeps it)\n", dir)
			default:
				for i := range c.databases {
					removeSQLite(filepath.Join(dir, fmt.Sprintf("shardid-demo-db%d.sqlite", i)))
				}
				fmt.Fprintf(out, "removed the demo's SQLite files from %s (--keep keeps them)\n", dir)
			}
		}()
	}
	defer closeAll(dbs)
	if c.postgres != "" || c.mysql != "" {
		// One demo at a time per database: a second one would drop the
		// first one's tables under it.
		lock, err := demoLock(ctx, dbs[0])
		if err != nil {
			return err
		}
		defer lock.Release()
		// Start from nothing, so the counts are this run's; and leave
		// nothing behind unless asked to.
		if n, err := dropDemo(ctx, dbs[0]); err != nil {
			return err
		} else if n != "" {
			fmt.Fprintf(out, "dropped the %s an earlier run of the demo left\n", n)
		}
		defer func() {
			if c.keep {
				fmt.Fprintln(out, "kept the demo's tables (--keep); the next run drops them")
				return
			}
			if n, err := dropDemo(context.WithoutCancel(ctx), dbs[0]); err != nil {
				fmt.Fprintf(out, "cleaning up: %v\n", err)
			} else if n != "" {
				fmt.Fprintf(out, "dropped the demo's %s (--keep keeps them)\n", n)
			}
		}()
	}

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
		if err := r.InstallPostgresNextID(ctx, 1, "id", "demo_comments"); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "migrated in %v\n", time.Since(start).Round(time.Millisecond))
	if c.onStage != nil {
		c.onStage("migrated")
	}

	ids, elapsed, err := writeRows(ctx, r, c, pattern != "", out)
	if err != nil {
		return err
	}
	err = summarize(ctx, r, layout, ids, elapsed, out)
	printStats(out, g.Stats(), r.Stats())
	if pattern != "" {
		// The generator's count is the photos': the comments' IDs came
		// from next_id() in PostgreSQL.
		fmt.Fprintf(out, "  next_id() in PostgreSQL: %d IDs issued, the comments'; the generator's above include the %d photos'\n",
			len(ids.comments), len(ids.photos))
	}
	return err
}

func closeAll(dbs []*gorm.DB) {
	for _, db := range dbs {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	}
}

// removeSQLite removes an SQLite file with its write-ahead log.
func removeSQLite(file string) {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(file + suffix)
	}
}

// dropDemo drops what the demo makes on a server: on PostgreSQL the schemas
// demo_0000 to demo_8191, on MySQL the tables demo_photos and
// demo_comments. It returns what it dropped ("tables demo_photos and
// demo_comments", "16 schemas demo_NNNN"), or "" for nothing.
func dropDemo(ctx context.Context, db *gorm.DB) (string, error) {
	db = db.WithContext(ctx)
	if db.Dialector.Name() != "postgres" {
		var n int64
		err := db.Raw("SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name IN ('demo_photos', 'demo_comments')").Scan(&n).Error
		if err != nil || n == 0 {
			return "", err
		}
		return "tables demo_photos and demo_comments", db.Exec("DROP TABLE IF EXISTS demo_comments, demo_photos").Error
	}
	var schemas []string
	if err := db.Raw(`SELECT nspname FROM pg_namespace WHERE nspname ~ '^demo_[0-9]{4}$' ORDER BY nspname`).Scan(&schemas).Error; err != nil {
		return "", err
	}
	total := len(schemas)
	// A few schemas per statement: each drops about ten objects, and a
	// transaction may lock only so many.
	for len(schemas) > 0 {
		batch := schemas[:min(len(schemas), 50)]
		schemas = schemas[len(batch):]
		if err := db.Exec("DROP SCHEMA " + strings.Join(batch, ", ") + " CASCADE").Error; err != nil {
			return "", err
		}
	}
	if total > 0 {
		return fmt.Sprintf("%d schemas demo_NNNN", total), nil
	}
	return "", nil
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
				if err != nil {
					if first == nil {
						first = fmt.Errorf("user %d: %w", user, err)
					}
					mu.Unlock()
					continue // nothing written to count
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
		u := rng.Int64N(1 << 40)
		if ctx.Err() != nil {
			break // stopped: the users not written yet are not dispatched
		}
		users <- u
	}
	close(users)
	wg.Wait()
	elapsed := time.Since(start)
	bar.Finish()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err() // stopped before a write failed
	}
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
