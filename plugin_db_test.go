package shardid_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// The models of the integration tests: Instagram's photos, with comments
// colocated on their photo's shard.
type Photo struct {
	ID       shardid.ID
	UserID   int64 `shardid:"key"`
	Caption  string
	Comments []Comment
	Meta     *PhotoMeta
	Tags     []Tag `gorm:"many2many:photo_tags"`
}

type Comment struct {
	ID      shardid.ID
	PhotoID shardid.ID `shardid:"key"`
	ReplyTo shardid.NullID
	Body    string
}

type PhotoMeta struct {
	ID      shardid.ID
	PhotoID shardid.ID `shardid:"key"`
	Width   int
}

type Tag struct {
	ID   shardid.ID
	Name string `shardid:"key" gorm:"size:64;uniqueIndex"`
}

// Account has a composite primary key, as Citus requires of a distributed
// table: (user_id, id).
type Account struct {
	UserID int64      `gorm:"primaryKey;autoIncrement:false" shardid:"key"`
	ID     shardid.ID `gorm:"primaryKey"`
	Email  string     `gorm:"size:64;uniqueIndex"`
}

// Legacy is an existing table with a plain int64 key, opted in.
type Legacy struct {
	ID     int64 `gorm:"primaryKey;autoIncrement:false" shardid:"id"`
	Region int64 `shardid:"key"`
}

// LegacyU is an existing table with a uint64 key, opted in.
type LegacyU struct {
	ID     uint64 `gorm:"primaryKey;autoIncrement:false" shardid:"id"`
	Region uint32 `shardid:"key"`
}

var allModels = []any{&Photo{}, &Comment{}, &PhotoMeta{}, &Tag{}, "photo_tags", &Account{}, &Legacy{}, &LegacyU{}}

func setupDB(t *testing.T, open func(*testing.T) *gorm.DB, cfg shardid.PluginConfig) (*gorm.DB, *shardid.Plugin) {
	t.Helper()
	db := open(t)
	p, err := shardid.NewPlugin(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	if err := db.Migrator().DropTable(allModels...); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&Photo{}, &Comment{}, &PhotoMeta{}, &Tag{}, &Account{}, &Legacy{}, &LegacyU{}); err != nil {
		t.Fatal(err)
	}
	return db, p
}

func forEachDialect(t *testing.T, fn func(t *testing.T, open func(*testing.T) *gorm.DB)) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) { fn(t, d.open) })
	}
}

func tagShard(name string) int {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int(h.Sum64() % 2000)
}

func TestPluginCreatePaths(t *testing.T) {
	forEachDialect(t, func(t *testing.T, open func(*testing.T) *gorm.DB) {
		db, _ := setupDB(t, open, shardid.PluginConfig{})
		must := func(tx *gorm.DB) {
			t.Helper()
			if tx.Error != nil {
				t.Fatal(tx.Error)
			}
		}

		one := Photo{UserID: 31341, Caption: "struct"}
		must(db.Create(&one))

		slice := []Photo{{UserID: 1, Caption: "slice"}, {UserID: 2001, Caption: "slice"}, {UserID: 7, Caption: "slice", ID: 0}}
		must(db.Create(&slice))

		ptrs := []*Photo{{UserID: 3, Caption: "ptrs"}, {UserID: 4, Caption: "ptrs"}}
		must(db.Create(ptrs))

		arr := [2]Photo{{UserID: 5, Caption: "array"}, {UserID: 6, Caption: "array"}}
		must(db.Create(&arr))

		batch := make([]Photo, 250)
		for i := range batch {
			batch[i] = Photo{UserID: int64(i % 3), Caption: "batch"}
		}
		must(db.CreateInBatches(&batch, 100))

		saved := Photo{UserID: 8, Caption: "save"}
		must(db.Save(&saved))

		var foc Photo
		must(db.Where(Photo{UserID: 9, Caption: "firstorcreate"}).FirstOrCreate(&foc))

		kept := Photo{ID: 123456789, UserID: 10, Caption: "preset"}
		must(db.Create(&kept))
		if kept.ID != 123456789 {
			t.Errorf("a preset ID was replaced by %v", kept.ID)
		}

		must(db.Model(&Photo{}).Create(map[string]any{"user_id": int64(11), "caption": "map"}))
		must(db.Model(&Photo{}).Create([]map[string]any{
			{"UserID": 12, "Caption": "maps"}, // field names work as well as column names
			{"user_id": int64(13), "caption": "maps"},
		}))

		var photos []Photo
		must(db.Order("id").Find(&photos))
		if want := 1 + 3 + 2 + 2 + 250 + 1 + 1 + 1 + 1 + 2; len(photos) != want {
			t.Fatalf("%d photos stored, want %d", len(photos), want)
		}
		seen := map[shardid.ID]bool{}
		for _, p := range photos {
			if p.ID == 0 || seen[p.ID] {
				t.Fatalf("photo %+v: zero or duplicate ID", p)
			}
			seen[p.ID] = true
			if p.ID != 123456789 && p.ID.Shard() != int(p.UserID%2000) {
				t.Errorf("photo %+v: ID on shard %d, want user %d %% 2000", p, p.ID.Shard(), p.UserID)
			}
		}
		// The structs hold what was stored.
		for _, p := range append([]Photo{one, saved, foc}, append(slice, arr[:]...)...) {
			if !seen[p.ID] {
				t.Errorf("struct %+v holds an ID that was not stored", p)
			}
		}
		for _, p := range ptrs {
			if !seen[p.ID] {
				t.Errorf("struct %+v holds an ID that was not stored", p)
			}
		}
		// CreateInBatches: one user's consecutive rows share a shard; all
		// IDs distinct, each on its user's shard.
		for _, p := range batch {
			if p.ID.Shard() != int(p.UserID) {
				t.Fatalf("batch row %+v on shard %d", p, p.ID.Shard())
			}
		}
	})
}

func TestPluginAssociations(t *testing.T) {
	forEachDialect(t, func(t *testing.T, open func(*testing.T) *gorm.DB) {
		db, _ := setupDB(t, open, shardid.PluginConfig{})
		photos := []Photo{
			{UserID: 31341, Caption: "sunset",
				Comments: []Comment{{Body: "wow"}, {Body: "nice"}},
				Meta:     &PhotoMeta{Width: 1080},
				Tags:     []Tag{{Name: "sky"}, {Name: "sea"}}},
			{UserID: 42, Caption: "cat", Comments: []Comment{{Body: "meow"}}, Tags: []Tag{{Name: "pets"}}},
		}
		if err := db.Create(&photos).Error; err != nil {
			t.Fatal(err)
		}
		for _, p := range photos {
			for _, c := range p.Comments {
				if c.ID == 0 || c.PhotoID != p.ID || c.ID.Shard() != p.ID.Shard() {
					t.Errorf("comment %+v of photo %v: want its own ID on the photo's shard %d", c, p.ID, p.ID.Shard())
				}
			}
			for _, tag := range p.Tags {
				if tag.ID == 0 || tag.ID.Shard() != tagShard(tag.Name) {
					t.Errorf("tag %+v: shard %d, want fnv1a(name) %% 2000 = %d", tag, tag.ID.Shard(), tagShard(tag.Name))
				}
			}
		}
		if m := photos[0].Meta; m.ID == 0 || m.ID.Shard() != photos[0].ID.Shard() {
			t.Errorf("has-one %+v: want an ID on the photo's shard", m)
		}

		// A reply refers to another comment through a nullable ID column.
		reply := Comment{PhotoID: photos[0].ID, ReplyTo: shardid.NullIDOf(photos[0].Comments[0].ID), Body: "thanks"}
		if err := db.Create(&reply).Error; err != nil {
			t.Fatal(err)
		}
		var got Photo
		if err := db.Preload("Comments", func(tx *gorm.DB) *gorm.DB { return tx.Order("id") }).
			Preload("Meta").Preload("Tags").First(&got, photos[0].ID).Error; err != nil {
			t.Fatal(err)
		}
		if len(got.Comments) != 3 || got.Meta == nil || len(got.Tags) != 2 {
			t.Fatalf("read back %+v", got)
		}
		if c := got.Comments[2]; !c.ReplyTo.Valid || c.ReplyTo.ID != photos[0].Comments[0].ID {
			t.Errorf("reply's ReplyTo = %+v", c.ReplyTo)
		}
		if c := got.Comments[0]; c.ReplyTo.Valid {
			t.Errorf("a NULL ReplyTo read back as %+v", c.ReplyTo)
		}

		// JSON of a fetched model carries every ID as a string.
		b, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			`"ID":"` + got.ID.String() + `"`,
			`"PhotoID":"` + got.ID.String() + `"`,
			`"ReplyTo":"` + photos[0].Comments[0].ID.String() + `"`,
			`"ReplyTo":null`,
		} {
			if !strings.Contains(string(b), want) {
				t.Errorf("JSON lacks %s: %s", want, b)
			}
		}
	})
}

// Rows created one after another, in different milliseconds and on
// different shards, sort by ID in creation order.
func TestPluginOrderByIDIsCreationOrder(t *testing.T) {
	forEachDialect(t, func(t *testing.T, open func(*testing.T) *gorm.DB) {
		db, _ := setupDB(t, open, shardid.PluginConfig{})
		var created []shardid.ID
		for i := range 40 {
			p := Photo{UserID: int64((40 - i) * 37), Caption: fmt.Sprint(i)} // shards fall as time rises
			if err := db.Create(&p).Error; err != nil {
				t.Fatal(err)
			}
			created = append(created, p.ID)
			time.Sleep(1100 * time.Microsecond)
		}
		var ids []shardid.ID
		if err := db.Model(&Photo{}).Order("id").Pluck("id", &ids).Error; err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ids) != fmt.Sprint(created) {
			t.Errorf("ORDER BY id = %v\nwant creation order %v", ids, created)
		}
	})
}

func TestPluginErrorsWriteNothing(t *testing.T) {
	forEachDialect(t, func(t *testing.T, open func(*testing.T) *gorm.DB) {
		db, _ := setupDB(t, open, shardid.PluginConfig{})
		tests := []struct {
			name   string
			create func() error
			err    error
		}{
			{"negative key", func() error { return db.Create(&Photo{UserID: -1}).Error }, shardid.ErrInvalidShardKey},
			{"negative key in a batch", func() error {
				return db.Create(&[]Photo{{UserID: 1}, {UserID: -5}}).Error
			}, shardid.ErrInvalidShardKey},
			{"struct by value", func() error { return db.Create(Photo{UserID: 1}).Error }, shardid.ErrNotAddressable},
			{"nil pointer in a slice", func() error { return db.Create([]*Photo{{UserID: 1}, nil}).Error }, shardid.ErrNilRow},
			{"comment on an unsaved photo", func() error { return db.Create(&Comment{Body: "x"}).Error }, shardid.ErrInvalidShardKey},
			{"empty string key", func() error { return db.Create(&Tag{}).Error }, shardid.ErrInvalidShardKey},
			{"map with a negative key", func() error {
				return db.Model(&Photo{}).Create(map[string]any{"user_id": -3}).Error
			}, shardid.ErrInvalidShardKey},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if err := tc.create(); !errors.Is(err, tc.err) {
					t.Errorf("error %v, want %v", err, tc.err)
				}
			})
		}
		var n int64
		db.Model(&Photo{}).Count(&n)
		var c int64
		db.Model(&Comment{}).Count(&c)
		if n+c != 0 {
			t.Errorf("%d photos and %d comments written by failed creates", n, c)
		}
	})
}

func TestPluginGeneratorErrorAbortsCreate(t *testing.T) {
	// A clock before the layout's epoch: the generator refuses every ID.
	g, err := shardid.NewGenerator(shardid.Instagram, shardid.WithClock(func() time.Time {
		return time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	}))
	if err != nil {
		t.Fatal(err)
	}
	forEachDialect(t, func(t *testing.T, open func(*testing.T) *gorm.DB) {
		db, _ := setupDB(t, open, shardid.PluginConfig{Generator: g})
		rows := make([]Photo, 300)
		if err := db.CreateInBatches(&rows, 100).Error; !errors.Is(err, shardid.ErrTimeBeforeEpoch) {
			t.Errorf("CreateInBatches: %v, want ErrTimeBeforeEpoch", err)
		}
		var n int64
		db.Model(&Photo{}).Count(&n)
		if n != 0 {
			t.Errorf("%d rows written", n)
		}
	})
}

func TestPluginKeysFromConfigAndStrictMode(t *testing.T) {
	forEachDialect(t, func(t *testing.T, open func(*testing.T) *gorm.DB) {
		// ShardKey in the config wins over the tagged field.
		db, _ := setupDB(t, open, shardid.PluginConfig{
			LogicalShards: 100,
			ShardKey: func(row any) (int64, error) {
				if p, ok := row.(*Photo); ok {
					return p.UserID + 1, nil
				}
				return 0, shardid.ErrNoShardKey
			},
			DefaultShard: 99,
		})
		p := Photo{UserID: 41}
		if err := db.Create(&p).Error; err != nil || p.ID.Shard() != 42 {
			t.Errorf("config ShardKey: shard %d, %v; want 42", p.ID.Shard(), err)
		}
		l := Legacy{Region: 5} // no key from the function: the default shard
		if err := db.Create(&l).Error; err != nil || shardid.ID(l.ID).Shard() != 99 {
			t.Errorf("default shard: %d, %v; want 99", shardid.ID(l.ID).Shard(), err)
		}

		strict, _ := shardid.NewPlugin(shardid.PluginConfig{Strict: true,
			ShardKey: func(any) (int64, error) { return 0, shardid.ErrNoShardKey }})
		sdb := db.Session(&gorm.Session{NewDB: true})
		sdb2, err := gorm.Open(sdb.Dialector, gormConfig())
		if err != nil {
			t.Fatal(err)
		}
		if err := sdb2.Use(strict); err != nil {
			t.Fatal(err)
		}
		if err := sdb2.Create(&Photo{UserID: 1}).Error; !errors.Is(err, shardid.ErrNoShardKey) {
			t.Errorf("strict: %v, want ErrNoShardKey", err)
		}
	})
}

type Keyed struct {
	ID    shardid.ID
	Owner string
}

// ShardKey puts every row of one owner on one shard by its own rule.
func (k *Keyed) ShardKey() (int64, error) { return int64(len(k.Owner)), nil }

func TestPluginShardKeyerMethod(t *testing.T) {
	forEachDialect(t, func(t *testing.T, open func(*testing.T) *gorm.DB) {
		db, _ := setupDB(t, open, shardid.PluginConfig{})
		fresh(t, db, &Keyed{})
		rows := []Keyed{{Owner: "ab"}, {Owner: "abcde"}}
		if err := db.Create(&rows).Error; err != nil {
			t.Fatal(err)
		}
		if rows[0].ID.Shard() != 2 || rows[1].ID.Shard() != 5 {
			t.Errorf("shards %d, %d; want 2, 5", rows[0].ID.Shard(), rows[1].ID.Shard())
		}
	})
}

func TestPluginCompositeAndLegacyKeys(t *testing.T) {
	forEachDialect(t, func(t *testing.T, open func(*testing.T) *gorm.DB) {
		db, _ := setupDB(t, open, shardid.PluginConfig{})
		a := Account{UserID: 2005, Email: "a@example.com"}
		if err := db.Create(&a).Error; err != nil {
			t.Fatal(err)
		}
		if a.ID == 0 || a.UserID != 2005 || a.ID.Shard() != 5 {
			t.Errorf("composite key: %+v", a)
		}
		var back Account
		if err := db.First(&back, "user_id = ? AND id = ?", a.UserID, a.ID).Error; err != nil {
			t.Errorf("read back: %v", err)
		}

		legacy := []Legacy{{Region: 1}, {Region: 2}, {ID: 77, Region: 3}}
		if err := db.Create(&legacy).Error; err != nil {
			t.Fatal(err)
		}
		if shardid.ID(legacy[0].ID).Shard() != 1 || shardid.ID(legacy[1].ID).Shard() != 2 || legacy[2].ID != 77 {
			t.Errorf("opted-in int64 keys: %+v", legacy)
		}
		u := LegacyU{Region: 4000000001}
		if err := db.Create(&u).Error; err != nil {
			t.Fatal(err)
		}
		var ub LegacyU
		if err := db.First(&ub, u.ID).Error; err != nil || u.ID == 0 || shardid.ID(u.ID).Shard() != 1 || ub != u {
			t.Errorf("opted-in uint64 key: %+v, read back %+v, %v", u, ub, err)
		}
	})
}

// An upsert that updates on conflict leaves the struct holding the stored
// row's ID where the dialect has RETURNING.
func TestPluginUpsertKeepsStoredID(t *testing.T) {
	forEachDialect(t, func(t *testing.T, open func(*testing.T) *gorm.DB) {
		db, _ := setupDB(t, open, shardid.PluginConfig{})
		first := Tag{Name: "sky"}
		if err := db.Create(&first).Error; err != nil {
			t.Fatal(err)
		}
		again := Tag{Name: "sky"}
		err := db.Clauses(clause.OnConflict{
			Columns:   []clause.Column{{Name: "name"}},
			DoUpdates: clause.AssignmentColumns([]string{"name"}),
		}).Create(&again).Error
		if err != nil {
			t.Fatal(err)
		}
		returning := db.Dialector.Name() != "mysql" || strings.Contains(mariaDBVersion(db), "MariaDB")
		if returning && again.ID != first.ID {
			t.Errorf("after the upsert the struct holds %v, the stored row has %v", again.ID, first.ID)
		}
		var n int64
		db.Model(&Tag{}).Count(&n)
		if n != 1 {
			t.Errorf("%d tags after an upsert, want 1", n)
		}
	})
}

func mariaDBVersion(db *gorm.DB) string {
	var v string
	db.Raw("SELECT VERSION()").Scan(&v)
	return v
}

// GORM must not make the ID auto-increment: a plain bigint column.
func TestPluginDDL(t *testing.T) {
	forEachDialect(t, func(t *testing.T, open func(*testing.T) *gorm.DB) {
		db, _ := setupDB(t, open, shardid.PluginConfig{})
		var ddl string
		switch db.Dialector.Name() {
		case "postgres":
			var row struct {
				DataType      string
				ColumnDefault *string
			}
			db.Raw(`SELECT data_type, column_default FROM information_schema.columns
				WHERE table_name = 'photos' AND column_name = 'id'`).Scan(&row)
			if row.DataType != "bigint" || row.ColumnDefault != nil {
				t.Errorf("photos.id is %q with default %v; want bigint, no default", row.DataType, row.ColumnDefault)
			}
			return
		case "mysql":
			var row struct{ ColumnType, Extra string }
			db.Raw(`SELECT column_type, extra FROM information_schema.columns
				WHERE table_schema = DATABASE() AND table_name = 'photos' AND column_name = 'id'`).Scan(&row)
			if !strings.HasPrefix(row.ColumnType, "bigint") || row.Extra != "" {
				t.Errorf("photos.id is %q %q; want bigint with no AUTO_INCREMENT", row.ColumnType, row.Extra)
			}
			return
		case "sqlite":
			db.Raw(`SELECT sql FROM sqlite_master WHERE name = 'photos'`).Scan(&ddl)
			if !strings.Contains(ddl, "`id` bigint") || strings.Contains(strings.ToUpper(ddl), "AUTOINCREMENT") {
				t.Errorf("photos DDL %s; want a bigint id, not AUTOINCREMENT", ddl)
			}
		}
	})
}
