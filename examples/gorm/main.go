// Command gorm shows the shardid plugin on a GORM model: IDs assigned on
// create, on the shard of the sharding key, comments colocated with their
// photo. It runs on an embedded SQLite file in a temporary directory, removed
// at the end, unless SHARDID_EXAMPLE_POSTGRES_DSN names a PostgreSQL
// database: there it works in a schema of its own, shardid_example, and drops
// it at the end.
package main

import (
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/glebarez/sqlite"
	"github.com/shardid/shardid"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/gorm/schema"
)

type Photo struct {
	ID       shardid.ID
	UserID   int64 `shardid:"key"` // shard = UserID % 2000
	Caption  string
	Comments []Comment
}

type Comment struct {
	ID      shardid.ID
	PhotoID shardid.ID `shardid:"key"` // the photo's own shard
	Body    string
}

// pgSchema is the PostgreSQL schema the example creates, works in and drops.
const pgSchema = "shardid_example"

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(out io.Writer) error {
	cfg := &gorm.Config{Logger: logger.Discard}
	var dialector gorm.Dialector
	dsn := os.Getenv("SHARDID_EXAMPLE_POSTGRES_DSN")
	if dsn != "" {
		dialector = postgres.Open(dsn)
		// Every table in the example's own schema, never in public.
		cfg.NamingStrategy = schema.NamingStrategy{TablePrefix: pgSchema + "."}
	} else {
		dir, err := os.MkdirTemp("", "shardid-example-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dialector = sqlite.Open(filepath.Join(dir, "photos.sqlite"))
	}
	db, err := gorm.Open(dialector, cfg)
	if err != nil {
		return err
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	if dsn != "" {
		if err := db.Exec("CREATE SCHEMA IF NOT EXISTS " + pgSchema).Error; err != nil {
			return err
		}
		defer db.Exec("DROP SCHEMA IF EXISTS " + pgSchema + " CASCADE")
	}
	plugin, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2000})
	if err != nil {
		return err
	}
	if err := db.Use(plugin); err != nil {
		return err
	}
	if err := db.AutoMigrate(&Photo{}, &Comment{}); err != nil {
		return err
	}

	photo := Photo{UserID: 31341, Caption: "sunset", Comments: []Comment{{Body: "wow"}, {Body: "nice"}}}
	if err := db.Create(&photo).Error; err != nil {
		return err
	}
	fmt.Fprintf(out, "photo   %d  shard %d  made %s\n", photo.ID, photo.ID.Shard(), photo.ID.Time().Format("15:04:05.000"))
	for _, c := range photo.Comments {
		fmt.Fprintf(out, "comment %d  shard %d\n", c.ID, c.ID.Shard())
	}

	var back Photo
	if err := db.Preload("Comments").First(&back, photo.ID).Error; err != nil {
		return err
	}
	fmt.Fprintf(out, "read back %q with %d comments\n", back.Caption, len(back.Comments))
	return nil
}
