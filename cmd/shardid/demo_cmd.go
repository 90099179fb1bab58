package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/sqllock"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gorm.io/gorm"
)

func newDemoCmd(s *streams) *cobra.Command {
	var c demoConfig
	cmd := &cobra.Command{
		Use:   "demo [--postgres DSN | --mysql DSN | --dir DIR [--databases N]] [flags]",
		Short: "write and read sharded rows end to end (no server needed)",
		Long: "demo writes users' photos and comments through the router, reads them back by ID, and prints what\n" +
			"it measured. With no flag it runs on embedded SQLite files; with --postgres, on a schema per\n" +
			"logical shard (demo_0000 ...) of one PostgreSQL database, whose comments get their IDs from\n" +
			"next_id() in the database; with --mysql, on two tables of one MySQL/MariaDB database.\n" +
			"It removes what it made unless --keep; a demo kept on PostgreSQL is ready for shardid catalog\n" +
			"init and shardid move (see shardid catalog init --help).",
		Example: "  shardid demo\n  shardid demo --postgres 'host=127.0.0.1 user=postgres dbname=test' --shards 16 --keep",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := c.check(cmd.Flags(), args); err != nil {
				return err
			}
			// Ctrl-C stops the demo between two statements; it then drops what it
			// made, as at its end.
			in := onInterrupt(s.err)
			defer in.stop()
			in.Leaves("what the demo made may be left: the next run of the demo drops it (on a server: the schemas demo_NNNN, or the tables demo_photos and demo_comments)")
			c.onStage = func(stage string) { stageHook(stage, in) }
			return demo(in.ctx, c, s.out)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&c.postgres, "postgres", os.Getenv("SHARDID_DEMO_POSTGRES_DSN"), "run on PostgreSQL, a schema per logical shard (demo_0000 ...); default $SHARDID_DEMO_POSTGRES_DSN")
	fs.StringVar(&c.mysql, "mysql", os.Getenv("SHARDID_DEMO_MYSQL_DSN"), "run on MySQL/MariaDB (tables demo_photos and demo_comments); default $SHARDID_DEMO_MYSQL_DSN")
	fs.StringVar(&c.dir, "dir", "", "an existing directory for the embedded SQLite files (default: a new temporary directory)")
	intFlag(fs, &c.databases, "databases", 4, "physical SQLite databases")
	intFlag(fs, &c.shards, "shards", shardid.DefaultLogicalShards, "logical shards")
	intFlag(fs, &c.users, "users", 200, "users")
	intFlag(fs, &c.photos, "photos", 10, "photos per user")
	intFlag(fs, &c.comments, "comments", 2, "comments per photo")
	intFlag(fs, &c.workers, "workers", 8, "goroutines writing at once")
	fs.BoolVar(&c.keep, "keep", false, "keep the schemas, tables or files the demo made (it removes them by default)")
	// The environment's DSNs are not defaults to print in --help.
	fs.Lookup("postgres").DefValue = ""
	fs.Lookup("mysql").DefValue = ""
	cmd.MarkFlagDirname("dir")
	return cmd
}

// check validates the flags, each with a message that names it.
func (c *demoConfig) check(fs *pflag.FlagSet, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	for _, f := range []string{"postgres", "mysql", "dir"} {
		if fs.Changed(f) && fs.Lookup(f).Value.String() == "" {
			return badFlag("--%s \"\": empty; give a DSN (a directory for --dir), or leave the flag out", f)
		}
	}
	if c.postgres != "" && c.mysql != "" {
		return badFlag("give --postgres or --mysql, not both (SHARDID_DEMO_POSTGRES_DSN and SHARDID_DEMO_MYSQL_DSN count as given)")
	}
	if (c.postgres != "" || c.mysql != "") && (fs.Changed("dir") || fs.Changed("databases")) {
		return badFlag("--dir and --databases are for the embedded SQLite demo, not with --postgres or --mysql")
	}
	if c.dir != "" {
		st, err := os.Stat(c.dir)
		if err != nil {
			return badFlag("--dir %s: %v", c.dir, err)
		}
		if !st.IsDir() {
			return badFlag("--dir %s: not a directory", c.dir)
		}
	}
	for _, f := range []struct {
		name    string
		v, lo   int
		hi      int
		meaning string
	}{
		{"shards", c.shards, 1, shardid.Instagram.Shards(), "a number of logical shards"},
		{"databases", c.databases, 1, 64, "a number of SQLite files"},
		{"users", c.users, 1, 1_000_000, "a number of users"},
		{"photos", c.photos, 1, 10_000, "a number of photos per user"},
		{"comments", c.comments, 0, 1_000, "a number of comments per photo"},
		{"workers", c.workers, 1, 1_024, "a number of goroutines"},
	} {
		if err := inRange(f.name, int64(f.v), int64(f.lo), int64(f.hi), f.meaning); err != nil {
			return err
		}
	}
	return nil
}

// demoLock takes the lock that keeps two demos off one database (on
// MySQL/MariaDB, one database of the server), or fails saying another
// demo holds it.
func demoLock(ctx context.Context, db *gorm.DB) (*sqllock.Lock, error) {
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	key := sqllock.Key{Name: "shardid_demo"}
	if db.Dialector.Name() == "mysql" {
		// GET_LOCK is server-wide; the demo's tables are the database's.
		var name string
		if err := db.WithContext(ctx).Raw("SELECT DATABASE()").Scan(&name).Error; err != nil {
			return nil, err
		}
		key.Name = "shardid_demo." + name
		if len(key.Name) > 64 {
			key.Name = key.Name[:64]
		}
	}
	l, err := sqllock.Acquire(ctx, sqlDB, db.Dialector.Name(), key, sqllock.Options{})
	if errors.Is(err, sqllock.ErrHeld) {
		return nil, fmt.Errorf("another shardid demo is running on this database: %w; wait for it to end, or give this one another database", err)
	}
	return l, err
}
