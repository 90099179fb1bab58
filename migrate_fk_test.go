package shardid_test

import (
	"strings"
	"testing"

	"github.com/shardid/shardid"
)

// FKPhoto has many FKComments: GORM puts the foreign key
// fk_fkmig_photos_comments on the comments' table, declared in its CREATE
// TABLE.
type FKPhoto struct {
	ID       shardid.ID
	UserID   int64 `shardid:"key"`
	Caption  string
	Comments []FKComment `gorm:"foreignKey:PhotoID"`
}

func (FKPhoto) TableName() string { return "fkmig_photos" }

// FKPhotoV2 is FKPhoto in its next release, with one more column: another
// Go type of the same table and the same has-many.
type FKPhotoV2 struct {
	ID       shardid.ID
	UserID   int64 `shardid:"key"`
	Caption  string
	Likes    int
	Comments []FKComment `gorm:"foreignKey:PhotoID"`
}

func (FKPhotoV2) TableName() string { return "fkmig_photos" }

type FKComment struct {
	ID      shardid.ID
	PhotoID shardid.ID `shardid:"key"`
	Body    string
}

func (FKComment) TableName() string { return "fkmig_comments" }

// TestMigrateHasManyTwoReleases is issue #24: after a Migrate of FKPhoto
// and FKComment, a Migrate of FKPhotoV2 and FKComment in the same process
// failed with constraint "fk_fkmig_photos_comments" already exists, while
// AutoMigrate of the live tables succeeds. GORM's schema cache gives
// FKComment a back-reference per parent type that has many of it, each
// with the same foreign key, and CreateTable declares each of them: the
// fresh template schema got the constraint twice. Both releases must
// migrate, a shard created by the second must get the key once, and every
// shard must end as AutoMigrate leaves the live tables.
func TestMigrateHasManyTwoReleases(t *testing.T) {
	for _, d := range migDialects {
		t.Run(d.name, func(t *testing.T) {
			dbs := d.open(t)
			const shards = 4
			r := migRouter(t, dbs, "migfk", shards)
			ref := "migfk_ref"
			plainMigrate(t, dbs[0], ref, &FKPhoto{}, &FKComment{})
			if m := migrateWith(t, r, &FKPhoto{}, &FKComment{}); m.Altered != shards || m.AutoMigrated != 0 {
				t.Fatalf("first release: %+v, want every shard altered by the fast path", m)
			}
			sameSchemas(t, r, ref)

			// A shard that is new at the second release.
			dropOne := `DROP SCHEMA "` + r.Schema(1) + `" CASCADE`
			if d.name == "mysql" {
				dropOne = "DROP DATABASE `" + r.Schema(1) + "`"
			}
			if err := dbs[r.Map()[1]].Exec(dropOne).Error; err != nil {
				t.Fatal(err)
			}
			// A shard that goes through AutoMigrate (a changed column type)
			// and lacks the comments.
			q := `"`
			if d.name == "mysql" {
				q = "`"
			}
			for _, stmt := range []string{"DROP TABLE S.fkmig_comments", "ALTER TABLE S.fkmig_photos DROP COLUMN caption",
				"ALTER TABLE S.fkmig_photos ADD COLUMN caption varchar(10)"} {
				if err := dbs[r.Map()[2]].Exec(strings.ReplaceAll(stmt, "S.", q+r.Schema(2)+q+".")).Error; err != nil {
					t.Fatal(err)
				}
			}
			plainMigrate(t, dbs[0], ref, &FKPhotoV2{}, &FKComment{}) // the live tables
			if m := migrateWith(t, r, &FKPhotoV2{}, &FKComment{}); m.Altered != shards || m.AutoMigrated != 1 {
				t.Fatalf("second release: %+v, want every shard altered, one through AutoMigrate", m)
			}
			sameSchemas(t, r, ref)
			if m := migrateWith(t, r, &FKPhotoV2{}, &FKComment{}); m.Altered != 0 {
				t.Fatalf("second release again: %+v, want nothing altered", m)
			}
			// Both releases in one call.
			if err := r.Migrate(t.Context(), &FKPhoto{}, &FKPhotoV2{}, &FKComment{}); err != nil {
				t.Fatal(err)
			}
			sameSchemas(t, r, ref)
		})
	}
}
