package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// RawPhoto is the model of the raw SQL tests: a raw_photos table in every
// shard's schema, and one in the connection's default schema.
type RawPhoto struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Caption string
}

const (
	rawShards = 4
	rawDecoy  = "decoy in the default schema"
)

// rawRouter builds a router over db with a schema (MySQL database) per
// logical shard, shardid_raw_0000 to shardid_raw_0003, each holding two
// photos of its own in raw_photos; and a raw_photos in the connection's
// default schema (PostgreSQL's public, the DSN's database on MySQL), as a
// monolith that adopts shardid has, holding one decoy row.
func rawRouter(t *testing.T, db *gorm.DB) *shardid.Router {
	t.Helper()
	for s := range rawShards {
		drop := fmt.Sprintf("DROP DATABASE IF EXISTS shardid_raw_%04d", s)
		if db.Dialector.Name() == "postgres" {
			drop = fmt.Sprintf("DROP SCHEMA IF EXISTS shardid_raw_%04d CASCADE", s)
		}
		if err := db.Exec(drop).Error; err != nil {
			t.Fatal(err)
		}
	}
	fresh(t, db, &RawPhoto{})
	if err := db.Exec("INSERT INTO raw_photos (id, user_id, caption) VALUES (1, 2, ?)", rawDecoy).Error; err != nil {
		t.Fatal(err)
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: rawShards})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{
		Databases: []*gorm.DB{db}, Names: []string{"main"}, LogicalShards: rawShards,
		SchemaPattern: "shardid_raw_%04d", Plugin: p,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(context.Background(), &RawPhoto{}); err != nil {
		t.Fatal(err)
	}
	for s := range int64(rawShards) {
		for range 2 {
			if err := r.ForKey(s).Create(&RawPhoto{UserID: s, Caption: fmt.Sprint("shard ", s)}).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	return r
}

// rawDecoyCaption reads the decoy row straight from the default schema.
func rawDecoyCaption(t *testing.T, db *gorm.DB) string {
	t.Helper()
	var c []string
	if err := db.Raw("SELECT caption FROM raw_photos").Scan(&c).Error; err != nil || len(c) != 1 {
		t.Fatalf("the default schema's raw_photos: %q, %v; want the decoy row alone", c, err)
	}
	return c[0]
}

// wantUnrouted checks that err refuses raw SQL of shard on database main.
func wantUnrouted(t *testing.T, what string, err error, shard int) {
	t.Helper()
	var se *shardid.ShardError
	switch {
	case !errors.Is(err, shardid.ErrUnroutedSQL):
		t.Errorf("%s: %v, want ErrUnroutedSQL", what, err)
	case !errors.As(err, &se) || se.Shard != shard || se.Database != "main":
		t.Errorf("%s: %v, want a *ShardError of shard %d on main", what, err, shard)
	}
}

// TestRoutedRawSQL: raw SQL through a routed *gorm.DB reaches the shard's
// tables through {{schema}}, and SQL that would reach a same-named table
// outside the shard (the default schema's, left from before the shards) is
// refused with ErrUnroutedSQL, on PostgreSQL and MariaDB. Before the fix,
// such SQL read the decoy, and Gather returned it once per shard.
func TestRoutedRawSQL(t *testing.T) {
	for _, d := range dialects[:2] {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			r := rawRouter(t, db)
			ctx := context.Background()

			// Gather with raw SQL: every shard's rows, never the decoy.
			gather := func(sql string) ([]RawPhoto, error) {
				return shardid.Gather(ctx, r, shardid.GatherOptions{},
					func(p RawPhoto) shardid.ID { return p.ID },
					func(ctx context.Context, db *gorm.DB) ([]RawPhoto, error) {
						var ps []RawPhoto
						return ps, db.Raw(sql).Scan(&ps).Error
					})
			}
			ps, err := gather("SELECT * FROM raw_photos")
			if len(ps) != 0 {
				t.Errorf("Gather of unqualified raw SQL returned %d rows: %+v", len(ps), ps)
			}
			if !errors.Is(err, shardid.ErrUnroutedSQL) {
				t.Errorf("Gather of unqualified raw SQL: %v, want ErrUnroutedSQL", err)
			}
			ps, err = gather("SELECT * FROM {{schema}}.raw_photos")
			if err != nil || len(ps) != 2*rawShards {
				t.Errorf("Gather of {{schema}}.raw_photos: %d rows, %v; want %d", len(ps), err, 2*rawShards)
			}
			for _, p := range ps {
				if p.Caption != fmt.Sprint("shard ", p.ID.Shard()) {
					t.Errorf("Gather of {{schema}}.raw_photos returned %+v", p)
				}
			}

			// Reads with the placeholder: Scan, Find, Row, Rows.
			var got []RawPhoto
			if err := r.ForShard(2).Raw("SELECT * FROM {{schema}}.raw_photos WHERE user_id = ?", 2).Scan(&got).Error; err != nil ||
				len(got) != 2 || got[0].Caption != "shard 2" || got[1].Caption != "shard 2" {
				t.Errorf("Raw Scan of {{schema}}.raw_photos on shard 2: %+v, %v", got, err)
			}
			got = nil
			if err := r.ForShard(2).Raw("SELECT * FROM {{schema}}.raw_photos").Find(&got).Error; err != nil || len(got) != 2 || got[0].Caption != "shard 2" {
				t.Errorf("Raw Find of {{schema}}.raw_photos on shard 2: %+v, %v", got, err)
			}
			var n int64
			if err := r.ForShard(1).Raw("SELECT count(*) FROM {{schema}}.raw_photos WHERE caption = ?", "shard 1").Row().Scan(&n); err != nil || n != 2 {
				t.Errorf("Raw Row on shard 1: %d, %v; want 2", n, err)
			}
			var captions []string
			rows, err := r.ForShard(3).Raw("SELECT caption FROM {{schema}}.raw_photos").Rows()
			if err == nil {
				for rows.Next() {
					var c string
					err = rows.Scan(&c)
					captions = append(captions, c)
				}
				rows.Close()
			}
			if err != nil || !slices.Equal(captions, []string{"shard 3", "shard 3"}) {
				t.Errorf("Raw Rows on shard 3: %q, %v", captions, err)
			}

			// Writes with the placeholder; arguments are never rewritten.
			res := r.ForShard(2).Exec("UPDATE {{schema}}.raw_photos SET caption = ? WHERE user_id = ?", "edited", 2)
			if res.Error != nil || res.RowsAffected != 2 {
				t.Errorf("Exec UPDATE {{schema}}.raw_photos on shard 2: %d rows, %v; want 2", res.RowsAffected, res.Error)
			}
			id, _ := shardid.Instagram.Compose(shardid.Parts{Time: shardid.Instagram.Epoch().AddDate(10, 0, 0), Shard: 2})
			if err := r.ForID(id).Exec("INSERT INTO {{schema}}.raw_photos (id, user_id, caption) VALUES (?, ?, ?)", id, 2, "{{schema}}").Error; err != nil {
				t.Errorf("Exec INSERT INTO {{schema}}.raw_photos: %v", err)
			}
			var back RawPhoto
			if err := r.Get(ctx, &back, id); err != nil || back.Caption != "{{schema}}" {
				t.Errorf("the row inserted with the argument \"{{schema}}\" reads back as %+v, %v", back, err)
			}
			if c := rawDecoyCaption(t, db); c != rawDecoy {
				t.Errorf("the decoy was written: %q", c)
			}

			// Unqualified SQL is refused, and runs nowhere.
			got = nil
			wantUnrouted(t, "Raw Scan", r.ForShard(2).Raw("SELECT * FROM raw_photos").Scan(&got).Error, 2)
			wantUnrouted(t, "Raw Find", r.ForShard(2).Raw("SELECT * FROM raw_photos").Find(&got).Error, 2)
			if len(got) != 0 {
				t.Errorf("refused raw SQL filled %+v", got)
			}
			_, err = r.ForShard(2).Raw("SELECT * FROM raw_photos").Rows()
			wantUnrouted(t, "Raw Rows", err, 2)
			row := r.ForShard(2).Raw("SELECT count(*) FROM raw_photos").Row()
			if row == nil {
				t.Errorf("Raw Row: a nil *sql.Row")
			} else {
				wantUnrouted(t, "Raw Row Scan", row.Scan(&n), 2)
			}
			wantUnrouted(t, "Exec", r.ForShard(2).Exec("UPDATE raw_photos SET caption = 'hit'").Error, 2)
			wantUnrouted(t, "Exec in a transaction", r.ForShard(2).Transaction(func(tx *gorm.DB) error {
				return tx.Exec("UPDATE raw_photos SET caption = 'hit'").Error
			}), 2)
			if c := rawDecoyCaption(t, db); c != rawDecoy {
				t.Errorf("refused Exec wrote the decoy: %q", c)
			}

			// SQL that names the shard's schema itself passes; another
			// shard's schema is not this shard's.
			got = nil
			if err := r.ForShard(2).Raw("SELECT * FROM shardid_raw_0002.raw_photos").Scan(&got).Error; err != nil || len(got) != 3 {
				t.Errorf("Raw of shardid_raw_0002.raw_photos on shard 2: %d rows, %v; want 3", len(got), err)
			}
			wantUnrouted(t, "shard 2's schema through shard 1", r.ForShard(1).Raw("SELECT * FROM shardid_raw_0002.raw_photos").Scan(&got).Error, 1)
			table := r.Table(2, "raw_photos")
			want := `"shardid_raw_0002"."raw_photos"`
			if d.name == "mysql" {
				want = "`shardid_raw_0002`.`raw_photos`"
			}
			if table != want {
				t.Errorf("Table(2, raw_photos) = %s, want %s", table, want)
			}
			got = nil
			if err := r.ForShard(2).Raw("SELECT * FROM " + table).Scan(&got).Error; err != nil || len(got) != 3 {
				t.Errorf("Raw of %s on shard 2: %d rows, %v; want 3", table, len(got), err)
			}

			// Table-free SQL: refused unless the caller says so.
			wantUnrouted(t, "SELECT 41 + 1", r.ForShard(0).Raw("SELECT 41 + 1").Scan(&n).Error, 0)
			n = 0
			if err := shardid.AllowUnroutedSQL(r.ForShard(0)).Raw("SELECT 41 + 1").Scan(&n).Error; err != nil || n != 42 {
				t.Errorf("AllowUnroutedSQL: %d, %v; want 42", n, err)
			}
			n = 0
			if err := r.ForShard(0).Scopes(shardid.AllowUnroutedSQL).Raw("SELECT 41 + 1").Scan(&n).Error; err != nil || n != 42 {
				t.Errorf("Scopes(AllowUnroutedSQL): %d, %v; want 42", n, err)
			}
			// The opt-out stays on the *gorm.DB it returned, not on the
			// router's.
			wantUnrouted(t, "SELECT 41 + 1 after AllowUnroutedSQL", r.ForShard(0).Raw("SELECT 41 + 1").Scan(&n).Error, 0)
		})
	}
}

// TestRoutedRawSQLWithoutSchemaPattern: without a SchemaPattern a shard's
// tables are its database's own: unqualified raw SQL runs as written, and
// "{{schema}}." is removed; a {{schema}} that qualifies nothing is refused.
func TestRoutedRawSQLWithoutSchemaPattern(t *testing.T) {
	type RawPlainPhoto struct {
		ID      shardid.ID
		Caption string
	}
	for _, d := range dialects[:2] {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			fresh(t, db, &RawPlainPhoto{})
			if err := db.Create(&RawPlainPhoto{ID: 7, Caption: "seven"}).Error; err != nil {
				t.Fatal(err)
			}
			r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}, Names: []string{"main"}, LogicalShards: 2})
			if err != nil {
				t.Fatal(err)
			}
			for _, sql := range []string{"SELECT * FROM raw_plain_photos", "SELECT * FROM {{schema}}.raw_plain_photos"} {
				var ps []RawPlainPhoto
				if err := r.ForShard(1).Raw(sql).Scan(&ps).Error; err != nil || len(ps) != 1 || ps[0].Caption != "seven" {
					t.Errorf("%s: %+v, %v", sql, ps, err)
				}
			}
			if err := r.ForShard(1).Exec("UPDATE {{schema}}.raw_plain_photos SET caption = ?", "{{schema}}").Error; err != nil {
				t.Errorf("Exec UPDATE {{schema}}.raw_plain_photos: %v", err)
			}
			var p RawPlainPhoto
			if err := db.First(&p).Error; err != nil || p.Caption != "{{schema}}" {
				t.Errorf("after the update: %+v, %v", p, err)
			}
			if got, want := r.Table(1, "raw_plain_photos"), db.Statement.Quote("raw_plain_photos"); got != want {
				t.Errorf("Table without SchemaPattern = %s, want %s", got, want)
			}
			var n int64
			wantUnrouted(t, "a bare {{schema}}", r.ForShard(1).Raw("SELECT count(*) FROM information_schema.tables WHERE table_schema = {{schema}}").Scan(&n).Error, 1)
		})
	}
}

// TestRoutedRawSQLNamesTheSchema: which text counts as naming the shard's
// schema. Statements are built without running (DryRun).
func TestRoutedRawSQLNamesTheSchema(t *testing.T) {
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{openSQLite(t)}, LogicalShards: 64, SchemaPattern: "s%d"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sql  string
		pass bool
	}{
		{"SELECT * FROM s5.photos", true},
		{"SELECT * FROM `s5`.photos", true},
		{`SELECT * FROM "s5"."photos"`, true},
		{"s5.photos", true},
		{"SELECT * FROM photos", false},
		{"SELECT * FROM s50.photos", false},  // another shard's schema
		{"SELECT * FROM xs5.photos", false},  // a longer name
		{"SELECT * FROM s5photos", false},    // not a qualifier
		{"SELECT * FROM s5 . photos", false}, // spaced: refused, to be safe
		{`SELECT * FROM "s5.photos"`, false}, // a table named s5.photos
		{"SELECT 's5.photos' FROM photos", false},
		{`SELECT * FROM "s5"photos`, false},
		{"SELECT * FROM {{schema}}.photos", true},
	} {
		err := r.ForShard(5).Session(&gorm.Session{DryRun: true}).Raw(tc.sql).Find(&[]RawPhoto{}).Error
		if pass := !errors.Is(err, shardid.ErrUnroutedSQL); pass != tc.pass || pass && err != nil {
			t.Errorf("%s on shard 5: %v, want passing %v", tc.sql, err, tc.pass)
		}
	}
	stmt := r.ForShard(5).Session(&gorm.Session{DryRun: true}).Raw("SELECT '{{schema}}', ? FROM {{schema}}.photos", "{{schema}}").Find(&[]RawPhoto{}).Statement
	if got, want := stmt.SQL.String(), "SELECT '`s5`', ? FROM `s5`.photos"; got != want || !slices.Equal(stmt.Vars, []any{"{{schema}}"}) {
		t.Errorf("rewritten SQL %s %v, want %s with the argument as it was", got, stmt.Vars, want)
	}
}

// RawOwner and RawAlbum are the models of TestRoutedJoins: an album
// belongs to its owner, both in the shard.
type RawOwner struct {
	ID     int64
	UserID int64 `shardid:"key"`
	Name   string
}

type RawAlbum struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	OwnerID int64
	Owner   RawOwner
}

// TestRoutedJoins: a routed query's joins reach the shard's tables, never a
// same-named table outside the shard: an association's join (Joins("Owner"))
// is qualified with the shard's schema, a join given as SQL uses
// {{schema}} or is refused with ErrUnroutedSQL. Before, Joins("Owner")
// read the default schema's raw_owners.
func TestRoutedJoins(t *testing.T) {
	for _, d := range dialects[:2] {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			r := rawRouter(t, db)
			ctx := context.Background()
			fresh(t, db, &RawOwner{}, &RawAlbum{})
			if err := db.Create(&RawOwner{ID: 7, UserID: 1, Name: rawDecoy}).Error; err != nil {
				t.Fatal(err)
			}
			if err := r.Migrate(ctx, &RawOwner{}, &RawAlbum{}); err != nil {
				t.Fatal(err)
			}
			s := r.ForKey(1)
			if err := s.Create(&RawOwner{ID: 7, UserID: 1, Name: "owner in shard 1"}).Error; err != nil {
				t.Fatal(err)
			}
			a := RawAlbum{UserID: 1, OwnerID: 7}
			if err := s.Omit("Owner").Create(&a).Error; err != nil {
				t.Fatal(err)
			}
			var got RawAlbum
			if err := s.WithContext(ctx).Joins("Owner").First(&got, a.ID).Error; err != nil {
				t.Fatal(err)
			}
			if got.Owner.Name != "owner in shard 1" {
				t.Errorf("Joins(\"Owner\") read %q, want the shard's owner", got.Owner.Name)
			}
			var names []string
			err := s.Model(&RawAlbum{}).Select("o.name").
				Joins("JOIN {{schema}}.raw_owners o ON o.id = raw_albums.owner_id").Scan(&names).Error
			if err != nil || len(names) != 1 || names[0] != "owner in shard 1" {
				t.Errorf("a join with {{schema}}: %q, %v", names, err)
			}
			err = s.Model(&RawAlbum{}).Select("o.name").
				Joins("JOIN raw_owners o ON o.id = raw_albums.owner_id").Scan(&names).Error
			wantUnrouted(t, "an unqualified join", err, 1)
			// Not routed: the default schema's tables, as GORM has it.
			var plain []RawOwner
			if err := db.Find(&plain).Error; err != nil || len(plain) != 1 || plain[0].Name != rawDecoy {
				t.Errorf("an unrouted query: %+v, %v", plain, err)
			}
		})
	}
}
