package shardid_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// AsPhoto has comments and tags, as a monolith's photos do; the tables
// exist in every shard's schema and, as leftovers, in the default schema.
type AsPhoto struct {
	ID       shardid.ID
	UserID   int64       `shardid:"key"`
	Comments []AsComment `gorm:"foreignKey:PhotoID"`
	Tags     []AsTag     `gorm:"many2many:as_photo_tags"`
}

type AsComment struct {
	ID      shardid.ID
	PhotoID shardid.ID
	UserID  int64 `shardid:"key"`
	Body    string
}

type AsTag struct {
	ID     shardid.ID
	UserID int64 `shardid:"key"`
	Name   string
}

// TestRoutedAssociationStatements checks the statements GORM starts with a
// new Statement inside a routed one, which lose the router's settings: the
// delete of a has-many association and the rows of a many-to-many join
// table. They must reach the shard's tables, never the same-named tables
// left in the default schema.
func TestRoutedAssociationStatements(t *testing.T) {
	for _, d := range dialects[:2] {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			db := d.open(t)
			const shards = 2
			for s := range shards {
				drop := fmt.Sprintf("DROP DATABASE IF EXISTS shardid_as_%04d", s)
				if d.name == "postgres" {
					drop = fmt.Sprintf("DROP SCHEMA IF EXISTS shardid_as_%04d CASCADE", s)
				}
				if err := db.Exec(drop).Error; err != nil {
					t.Fatal(err)
				}
			}
			db.Exec("DROP TABLE IF EXISTS as_photo_tags")
			fresh(t, db, &AsPhoto{}, &AsComment{}, &AsTag{})
			t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS as_photo_tags") })
			// The leftovers: rows in the default schema that a statement
			// missing its schema would touch.
			decoy := AsPhoto{ID: 7, UserID: 1, Comments: []AsComment{{ID: 8, UserID: 1, Body: "decoy"}}}
			if err := db.Create(&decoy).Error; err != nil {
				t.Fatal(err)
			}
			p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: shards})
			r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: shards,
				SchemaPattern: "shardid_as_%04d", Plugin: p})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Migrate(ctx, &AsPhoto{}, &AsComment{}, &AsTag{}); err != nil {
				t.Fatal(err)
			}
			ph := AsPhoto{UserID: 1, Comments: []AsComment{{UserID: 1, Body: "a"}, {UserID: 1, Body: "b"}},
				Tags: []AsTag{{UserID: 1, Name: "sea"}}}
			if err := r.ForKey(1).Create(&ph).Error; err != nil {
				t.Fatal(err)
			}
			count := func(q string) int64 {
				t.Helper()
				var n int64
				if err := db.Raw(q).Scan(&n).Error; err != nil {
					t.Fatal(err)
				}
				return n
			}
			if n := count("SELECT count(*) FROM shardid_as_0001.as_photo_tags"); n != 1 {
				t.Fatalf("the shard's join table has %d rows, want 1", n)
			}
			if n := count("SELECT count(*) FROM as_photo_tags"); n != 0 {
				t.Fatalf("the default schema's join table got %d rows", n)
			}
			// Delete the photo with its comments and tag links.
			if err := r.ForID(ph.ID).Select("Comments", "Tags").Delete(&AsPhoto{ID: ph.ID}).Error; err != nil {
				t.Fatal(err)
			}
			if n := count("SELECT count(*) FROM shardid_as_0001.as_comments"); n != 0 {
				t.Fatalf("the shard still has %d comments of the deleted photo", n)
			}
			if n := count("SELECT count(*) FROM shardid_as_0001.as_photo_tags"); n != 0 {
				t.Fatalf("the shard still has %d tag links of the deleted photo", n)
			}
			if n := count("SELECT count(*) FROM as_comments"); n != 1 {
				t.Fatalf("the default schema's comments: %d, want the decoy alone", n)
			}
			// The same in a transaction begun through the router.
			ph2 := AsPhoto{UserID: 1, Comments: []AsComment{{UserID: 1, Body: "c"}}}
			if err := r.ForKey(1).Create(&ph2).Error; err != nil {
				t.Fatal(err)
			}
			if err := r.ForKey(1).Transaction(func(tx *gorm.DB) error {
				return tx.Select("Comments").Delete(&AsPhoto{ID: ph2.ID}).Error
			}); err != nil {
				t.Fatal(err)
			}
			if n := count("SELECT count(*) FROM shardid_as_0001.as_comments"); n != 0 {
				t.Fatalf("a transaction's association delete left %d comments", n)
			}
			if n := count("SELECT count(*) FROM as_comments"); n != 1 {
				t.Fatalf("a transaction's association delete reached the default schema: %d", n)
			}
		})
	}
}
