// Command twodb is README's router on two PostgreSQL databases: 2,000
// logical shards, 1,000 on each, a schema per shard. It writes photos with
// their comments on their users' shards, finds each again from its ID
// alone, finds them all by fan-out over every shard, and deletes them.
//
// The databases come from SHARDID_EXAMPLE_PG1_DSN and
// SHARDID_EXAMPLE_PG2_DSN (by default shardid_example_pg1 and
// shardid_example_pg2 on the local server); the example creates them if
// they are missing, and keeps them with their 2,000 schemas, so that the
// next run only checks them.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardid/shardid"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

type Photo struct {
	ID       shardid.ID
	UserID   int64 `shardid:"key"` // shard = UserID % 2000
	Caption  string
	Comments []Comment
}

type Comment struct {
	ID      shardid.ID
	PhotoID shardid.ID `shardid:"key"` // on its photo's shard
	ReplyTo shardid.NullID
	Body    string
}

// The databases the example uses when the environment names none.
const (
	defaultPG1 = "host=127.0.0.1 port=5432 user=postgres dbname=shardid_example_pg1 sslmode=disable"
	defaultPG2 = "host=127.0.0.1 port=5432 user=postgres dbname=shardid_example_pg2 sslmode=disable"
)

func main() {
	dsn1, dsn2 := envOr("SHARDID_EXAMPLE_PG1_DSN", defaultPG1), envOr("SHARDID_EXAMPLE_PG2_DSN", defaultPG2)
	if err := run(context.Background(), os.Stdout, dsn1, dsn2); err != nil {
		log.Fatal(err)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, out io.Writer, dsn1, dsn2 string) error {
	var dbs []*gorm.DB
	defer func() {
		for _, db := range dbs {
			if sqlDB, err := db.DB(); err == nil {
				sqlDB.Close()
			}
		}
	}()
	for _, dsn := range []string{dsn1, dsn2} {
		if err := createDatabase(ctx, dsn); err != nil {
			return err
		}
		db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return err
		}
		dbs = append(dbs, db)
	}
	pg1, pg2 := dbs[0], dbs[1]

	plugin, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2000})
	if err != nil {
		return err
	}
	router, err := shardid.NewRouter(shardid.RouterConfig{
		Databases:     []*gorm.DB{pg1, pg2},
		Names:         []string{"pg1", "pg2"},
		LogicalShards: 2000,         // shards 0-999 on pg1, 1000-1999 on pg2
		SchemaPattern: "shard_%04d", // a schema per shard
		Plugin:        plugin,       // installed on every database
	})
	if err != nil {
		return err
	}
	// Creates shard_0000 ... shard_1999 and migrates inside each; a later
	// run finds them done.
	if err := router.Migrate(ctx, &Photo{}, &Comment{}); err != nil {
		return err
	}
	fmt.Fprintln(out, "migrated 2000 shards: shard_0000 ... shard_0999 on pg1, shard_1000 ... shard_1999 on pg2")

	var ids []shardid.ID
	for _, user := range []int64{7, 1234, 31341, 42} {
		photo := Photo{UserID: user, Caption: fmt.Sprint("by user ", user), Comments: []Comment{{Body: "nice"}, {Body: "wow"}}}
		if err := router.ForKey(user).WithContext(ctx).Create(&photo).Error; err != nil { // the user's shard, its database, its schema
			return err
		}
		fmt.Fprintf(out, "user %5d: photo %d on shard %4d, %s\n", user, photo.ID, photo.ID.Shard(), router.Table(photo.ID.Shard(), "photos"))
		ids = append(ids, photo.ID)
	}

	for _, id := range ids {
		var p Photo
		// The ID alone says where the row is.
		if err := router.Get(ctx, &p, id, func(db *gorm.DB) *gorm.DB { return db.Preload("Comments") }); err != nil {
			return err
		}
		fmt.Fprintf(out, "found %d on %s: %q, %d comments\n", id, router.DatabaseName(id.Shard()), p.Caption, len(p.Comments))
	}

	// Every shard's rows, merged newest first: this run's photos only (other
	// runs may share the databases).
	newest, err := shardid.Gather(ctx, router, shardid.GatherOptions{Desc: true, Limit: 20},
		func(p Photo) shardid.ID { return p.ID },
		func(ctx context.Context, db *gorm.DB) ([]Photo, error) {
			var ps []Photo
			return ps, db.Where("id IN ?", ids).Order("id DESC").Limit(20).Find(&ps).Error
		})
	if err != nil {
		return err
	}
	var users []string
	for _, p := range newest {
		users = append(users, fmt.Sprint(p.UserID))
	}
	fmt.Fprintf(out, "fan-out over 2000 shards, newest first: users %s\n", strings.Join(users, ", "))

	for _, id := range ids {
		db := router.ForID(id).WithContext(ctx)
		if err := db.Where("photo_id = ?", id).Delete(&Comment{}).Error; err != nil {
			return err
		}
		if err := db.Delete(&Photo{}, id).Error; err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "deleted the %d photos and their comments\n", len(ids))
	return nil
}

// createDatabase creates the database dsn names, through the server's
// postgres database, unless it exists.
func createDatabase(ctx context.Context, dsn string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	name := cfg.Database
	cfg.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil || exists {
		return err
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // created meanwhile by another run
		return nil
	}
	if err == nil {
		fmt.Fprintf(os.Stderr, "created database %s\n", name)
	}
	return err
}
