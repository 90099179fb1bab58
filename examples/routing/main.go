// Command routing shows logical shards on physical databases: two SQLite
// files hold 2000 logical shards, rows go to the file their sharding key
// names, and a row is found again from its ID alone.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/glebarez/sqlite"
	"github.com/shardid/shardid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

type Photo struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Caption string
}

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run runs the example in a temporary directory, removed at the end.
func run(out io.Writer) error {
	dir, err := os.MkdirTemp("", "shardid-routing-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var dbs []*gorm.DB
	defer func() {
		for _, db := range dbs {
			if sqlDB, err := db.DB(); err == nil {
				sqlDB.Close()
			}
		}
	}()
	for _, name := range []string{"east", "west"} {
		db, err := gorm.Open(sqlite.Open(filepath.Join(dir, name+".sqlite")), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return err
		}
		dbs = append(dbs, db)
	}
	plugin, err := shardid.NewPlugin(shardid.PluginConfig{})
	if err != nil {
		return err
	}
	router, err := shardid.NewRouter(shardid.RouterConfig{
		Databases: dbs, Names: []string{"east", "west"}, Plugin: plugin, // shards 0-999 east, 1000-1999 west
	})
	if err != nil {
		return err
	}
	if err := router.Migrate(context.Background(), &Photo{}); err != nil {
		return err
	}

	var ids []shardid.ID
	for _, user := range []int64{7, 1234, 31341, 42} {
		p := Photo{UserID: user, Caption: fmt.Sprint("by user ", user)}
		if err := router.ForKey(user).Create(&p).Error; err != nil {
			return err
		}
		ids = append(ids, p.ID)
	}
	for _, id := range ids {
		var p Photo
		if err := router.ForID(id).First(&p, id).Error; err != nil {
			return err
		}
		fmt.Fprintf(out, "%d  shard %4d  on %-4s  %q\n", id, id.Shard(), router.DatabaseName(id.Shard()), p.Caption)
	}
	return nil
}
