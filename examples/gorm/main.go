// Command gorm shows the shardid plugin on a GORM model: IDs assigned on
// create, on the shard of the sharding key, comments colocated with their
// photo. It runs on an embedded SQLite file unless SHARDID_EXAMPLE_POSTGRES_DSN
// names a PostgreSQL database.
package main

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/glebarez/sqlite"
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
	PhotoID shardid.ID `shardid:"key"` // the photo's own shard
	Body    string
}

func main() {
	var dialector gorm.Dialector
	if dsn := os.Getenv("SHARDID_EXAMPLE_POSTGRES_DSN"); dsn != "" {
		dialector = postgres.Open(dsn)
	} else {
		dialector = sqlite.Open(filepath.Join(os.TempDir(), "shardid-example.sqlite"))
	}
	db, err := gorm.Open(dialector, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	plugin, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2000})
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Use(plugin); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Photo{}, &Comment{}); err != nil {
		log.Fatal(err)
	}

	photo := Photo{UserID: 31341, Caption: "sunset", Comments: []Comment{{Body: "wow"}, {Body: "nice"}}}
	if err := db.Create(&photo).Error; err != nil {
		log.Fatal(err)
	}
	fmt.Printf("photo   %d  shard %d  made %s\n", photo.ID, photo.ID.Shard(), photo.ID.Time().Format("15:04:05.000"))
	for _, c := range photo.Comments {
		fmt.Printf("comment %d  shard %d\n", c.ID, c.ID.Shard())
	}

	var back Photo
	if err := db.Preload("Comments").First(&back, photo.ID).Error; err != nil {
		log.Fatal(err)
	}
	fmt.Printf("read back %q with %d comments\n", back.Caption, len(back.Comments))
}
