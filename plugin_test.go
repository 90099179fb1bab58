package shardid_test

import (
	"database/sql/driver"
	"errors"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/shardid/shardid"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// frozen is the instant of every ID in these tests.
var frozen = time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)

// mockDB opens GORM on go-sqlmock with the named dialect and the plugin on a
// frozen clock, so that the IDs are known in advance.
func mockDB(t *testing.T, dialect string) (*gorm.DB, sqlmock.Sqlmock) {
	t.Helper()
	sqlDB, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := mock.ExpectationsWereMet(); err != nil {
			t.Error(err)
		}
		sqlDB.Close()
	})
	var d gorm.Dialector
	if dialect == "postgres" {
		d = postgres.New(postgres.Config{Conn: sqlDB})
	} else {
		d = mysql.New(mysql.Config{Conn: sqlDB, SkipInitializeWithVersion: true})
	}
	db, err := gorm.Open(d, gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	g, err := shardid.NewGenerator(shardid.Instagram, shardid.WithClock(func() time.Time { return frozen }))
	if err != nil {
		t.Fatal(err)
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{Generator: g})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	return db, mock
}

// id is the ID the frozen generator gives the seq-th row of shard.
func id(shard, seq int) driver.Value {
	v, err := shardid.Instagram.Compose(shardid.Parts{Time: frozen, Shard: shard, Seq: seq})
	if err != nil {
		panic(err)
	}
	return int64(v)
}

// q quotes identifiers the dialect's way: q("postgres", `"a"`) is "a",
// q("mysql", `"a"`) is `a`.
func q(dialect, sql string) string {
	if dialect == "postgres" {
		return sql
	}
	out := []byte(sql)
	for i, c := range out {
		if c == '"' {
			out[i] = '`'
		}
	}
	return string(out)
}

// ph returns the n-th placeholder.
func ph(dialect string, n int) string {
	if dialect == "postgres" {
		return "$" + string(rune('0'+n))
	}
	return "?"
}

func TestPluginSQL(t *testing.T) {
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			p := func(n int) string { return ph(dialect, n) }

			t.Run("struct", func(t *testing.T) {
				db, mock := mockDB(t, dialect)
				mock.ExpectBegin()
				mock.ExpectExec(q(dialect, `INSERT INTO "photos" ("id","user_id","caption") VALUES (`+p(1)+`,`+p(2)+`,`+p(3)+`)`)).
					WithArgs(id(1341, 0), int64(31341), "sunset").
					WillReturnResult(sqlmock.NewResult(0, 1))
				mock.ExpectCommit()
				if err := db.Create(&Photo{UserID: 31341, Caption: "sunset"}).Error; err != nil {
					t.Fatal(err)
				}
			})

			t.Run("slice, one row preset", func(t *testing.T) {
				db, mock := mockDB(t, dialect)
				mock.ExpectBegin()
				mock.ExpectExec(q(dialect, `INSERT INTO "photos" ("id","user_id","caption") VALUES (`+
					p(1)+`,`+p(2)+`,`+p(3)+`),(`+p(4)+`,`+p(5)+`,`+p(6)+`),(`+p(7)+`,`+p(8)+`,`+p(9)+`)`)).
					WithArgs(id(7, 0), int64(7), "a", int64(99), int64(7), "b", id(7, 1), int64(2007), "c").
					WillReturnResult(sqlmock.NewResult(0, 3))
				mock.ExpectCommit()
				rows := []*Photo{{UserID: 7, Caption: "a"}, {ID: 99, UserID: 7, Caption: "b"}, {UserID: 2007, Caption: "c"}}
				if err := db.Create(rows).Error; err != nil {
					t.Fatal(err)
				}
			})

			t.Run("map", func(t *testing.T) {
				db, mock := mockDB(t, dialect)
				mock.ExpectBegin()
				// GORM sorts map keys; the plugin adds the ID under its column name.
				mock.ExpectExec(q(dialect, `INSERT INTO "photos" ("caption","id","user_id") VALUES (`+p(1)+`,`+p(2)+`,`+p(3)+`)`)).
					WithArgs("m", id(11, 0), int64(11)).
					WillReturnResult(sqlmock.NewResult(0, 1))
				mock.ExpectCommit()
				if err := db.Model(&Photo{}).Create(map[string]any{"user_id": int64(11), "caption": "m"}).Error; err != nil {
					t.Fatal(err)
				}
			})

			t.Run("has-many children colocated", func(t *testing.T) {
				db, mock := mockDB(t, dialect)
				mock.ExpectBegin()
				mock.ExpectExec(q(dialect, `INSERT INTO "photos" ("id","user_id","caption") VALUES (`+p(1)+`,`+p(2)+`,`+p(3)+`)`)).
					WithArgs(id(5, 0), int64(5), "p").
					WillReturnResult(sqlmock.NewResult(0, 1))
				children := `INSERT INTO "comments" ("id","photo_id","reply_to","body") VALUES (` +
					p(1) + `,` + p(2) + `,` + p(3) + `,` + p(4) + `),(` + p(5) + `,` + p(6) + `,` + p(7) + `,` + p(8) + `)`
				args := []driver.Value{id(5, 1), id(5, 0), nil, "x", id(5, 2), id(5, 0), nil, "y"}
				if dialect == "postgres" {
					// GORM saves children as an upsert; the plugin has it
					// return the stored IDs.
					mock.ExpectQuery(children + ` ON CONFLICT ("id") DO UPDATE SET "photo_id"="excluded"."photo_id" RETURNING "id"`).
						WithArgs(args...).
						WillReturnRows(sqlmock.NewRows([]string{"id"}).AddRow(id(5, 1)).AddRow(id(5, 2)))
				} else {
					mock.ExpectExec(q(dialect, children) + " ON DUPLICATE KEY UPDATE `photo_id`=VALUES(`photo_id`)").
						WithArgs(args...).
						WillReturnResult(sqlmock.NewResult(0, 2))
				}
				mock.ExpectCommit()
				photo := Photo{UserID: 5, Caption: "p", Comments: []Comment{{Body: "x"}, {Body: "y"}}}
				if err := db.Create(&photo).Error; err != nil {
					t.Fatal(err)
				}
			})

			t.Run("upsert returns the stored id", func(t *testing.T) {
				db, mock := mockDB(t, dialect)
				mock.ExpectBegin()
				if dialect == "postgres" {
					mock.ExpectQuery(`INSERT INTO "tags" ("id","name") VALUES ($1,$2) ON CONFLICT ("name") DO UPDATE SET "name"="excluded"."name" RETURNING "id"`).
						WithArgs(id(tagShard("sky"), 0), "sky").
						WillReturnRows(sqlmock.NewRows([]string{"id"}).AddRow(int64(1001)))
				} else {
					// No RETURNING on MySQL: the struct keeps the new ID (see README).
					mock.ExpectExec("INSERT INTO `tags` (`id`,`name`) VALUES (?,?) ON DUPLICATE KEY UPDATE `name`=VALUES(`name`)").
						WithArgs(id(tagShard("sky"), 0), "sky").
						WillReturnResult(sqlmock.NewResult(0, 1))
				}
				mock.ExpectCommit()
				tag := Tag{Name: "sky"}
				err := db.Clauses(clause.OnConflict{
					Columns:   []clause.Column{{Name: "name"}},
					DoUpdates: clause.AssignmentColumns([]string{"name"}),
				}).Create(&tag).Error
				if err != nil {
					t.Fatal(err)
				}
				if dialect == "postgres" && tag.ID != 1001 {
					t.Errorf("tag.ID = %v, want the stored row's 1001", tag.ID)
				}
			})

			t.Run("composite key", func(t *testing.T) {
				db, mock := mockDB(t, dialect)
				mock.ExpectBegin()
				mock.ExpectExec(q(dialect, `INSERT INTO "accounts" ("user_id","id","email") VALUES (`+p(1)+`,`+p(2)+`,`+p(3)+`)`)).
					WithArgs(int64(2005), id(5, 0), "a@b").
					WillReturnResult(sqlmock.NewResult(0, 1))
				mock.ExpectCommit()
				if err := db.Create(&Account{UserID: 2005, Email: "a@b"}).Error; err != nil {
					t.Fatal(err)
				}
			})

			t.Run("a bad key sends no INSERT", func(t *testing.T) {
				db, mock := mockDB(t, dialect)
				// GORM opens its transaction before the callback runs; the
				// callback's error rolls it back before any INSERT.
				mock.ExpectBegin()
				mock.ExpectRollback()
				err := db.Create(&[]Photo{{UserID: 1}, {UserID: -1}}).Error
				if !errors.Is(err, shardid.ErrInvalidShardKey) {
					t.Errorf("error %v, want ErrInvalidShardKey", err)
				}
			})
		})
	}
}
