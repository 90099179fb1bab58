package reshard_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// The catalog's tables are created once by a role that may create tables;
// the application follows the catalog with SELECT on them only, on a
// read-only connection too. (Not run: it needs a server.)
func ExampleCatalog_Setup() {
	ctx := context.Background()
	var admin, readOnly *gorm.DB // gorm.Open(postgres.Open(...)) as each role
	var router *shardid.Router   // the application's router

	// At deployment, as the owner:
	owner := &reshard.Catalog{DB: admin}
	if err := owner.Setup(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := owner.Save(ctx, router); err != nil {
		log.Fatal(err)
	}

	// In the application:
	err := reshard.Follow(ctx, router, &reshard.Catalog{DB: readOnly}, time.Second, func(err error) { log.Print(err) })
	if errors.Is(err, shardid.ErrSetupRequired) {
		log.Fatal("run Catalog.Setup as the owner first: ", err)
	}
	if err != nil {
		log.Fatal(err)
	}
}
