package shardid_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/shardid/shardid"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

func ExampleSchemaPlaceholder() {
	// A PostgreSQL database that is never reached: DryRun builds the
	// statements without running them.
	db, err := gorm.Open(postgres.Open("host=localhost dbname=app"),
		&gorm.Config{DryRun: true, DisableAutomaticPing: true, Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	router, err := shardid.NewRouter(shardid.RouterConfig{
		Databases: []*gorm.DB{db}, LogicalShards: 16, SchemaPattern: "shard_%04d",
	})
	if err != nil {
		log.Fatal(err)
	}
	type Photo struct {
		ID      shardid.ID
		Caption string
	}
	var photos []Photo

	// {{schema}} becomes the shard's schema; arguments are never rewritten.
	stmt := router.ForShard(5).Raw("SELECT * FROM {{schema}}.photos WHERE caption = ?", "{{schema}}").Find(&photos).Statement
	fmt.Println(stmt.SQL.String(), stmt.Vars)

	// Or name the table in full, quoted.
	fmt.Println(router.Table(5, "photos"))

	// Unqualified, photos would be public.photos, not the shard's: refused.
	err = router.ForShard(5).Raw("SELECT * FROM photos").Find(&photos).Error
	fmt.Println(errors.Is(err, shardid.ErrUnroutedSQL))

	// SQL that names no table of the shard runs when the caller says so.
	err = shardid.AllowUnroutedSQL(router.ForShard(5)).Raw("SELECT now()").Find(&photos).Error
	fmt.Println(err)
	// Output:
	// SELECT * FROM "shard_0005".photos WHERE caption = $1 [{{schema}}]
	// "shard_0005"."photos"
	// true
	// <nil>
}
