package shardid_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// ShortRow's key is filled by the Go generator through the plugin.
type ShortRow struct {
	ID   shardid.UUIDShort
	Name string
}

// ShortDBRow's key is filled by MariaDB and read back with RETURNING.
type ShortDBRow struct {
	ID   shardid.UUIDShort `gorm:"primaryKey;default:(uuid_short())"`
	Name string
}

// Values of the real UUID_SHORT() decode to the server's server_id and
// start; a generator primed with them gives what the server gives next.
func TestUUIDShortMatchesMariaDB(t *testing.T) {
	db := openMySQL(t)
	sqlDB, _ := db.DB()
	conn, err := sqlDB.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var (
		v        shardid.UUIDShort
		serverID int
		start    int64
	)
	if err := conn.QueryRowContext(t.Context(),
		"SELECT UUID_SHORT(), @@server_id, CAST(UNIX_TIMESTAMP() AS SIGNED) - (SELECT CAST(VARIABLE_VALUE AS SIGNED) FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME')").
		Scan(&v, &serverID, &start); err != nil {
		t.Fatal(err)
	}
	p := v.Decompose()
	if p.ServerID != serverID&255 {
		t.Errorf("UUID_SHORT() %d decodes to server %d, the server's id is %d", v, p.ServerID, serverID)
	}
	if d := p.Start.Unix() - start; d < -1 || d > 1 {
		t.Errorf("UUID_SHORT() %d decodes to start %v, the server started at %v", v, p.Start, time.Unix(start, 0).UTC())
	}
	g, err := shardid.NewUUIDShortGenerator(p.ServerID, p.Start, p.Counter+1)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		var next shardid.UUIDShort
		if err := conn.QueryRowContext(t.Context(), "SELECT UUID_SHORT()").Scan(&next); err != nil {
			t.Fatal(err)
		}
		if want := g.Next(); next != want {
			t.Fatalf("the server gave %d, the primed generator %d", next, want)
		}
	}
}

// A server with server_id 200 makes values past 2^63; they survive the
// driver, GORM (filled by the database or by the Go generator) and JSON.
func TestUUIDShortAbove2To63(t *testing.T) {
	m := startMariaDBInstance(t, "--server-id=200")
	db, err := gorm.Open(mysql.Open(m.DSN("test")), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, db)

	var v shardid.UUIDShort
	if err := db.Raw("SELECT UUID_SHORT()").Scan(&v).Error; err != nil {
		t.Fatal(err)
	}
	if uint64(v) <= math.MaxInt64 || v.Decompose().ServerID != 200 {
		t.Fatalf("UUID_SHORT() on server 200 = %d (%+v), want a value past 2^63", v, v.Decompose())
	}

	g, _ := shardid.NewUUIDShortGenerator(200, time.Now(), 0)
	p, _ := shardid.NewPlugin(shardid.PluginConfig{UUIDShort: g})
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&ShortRow{}, &ShortDBRow{}); err != nil {
		t.Fatal(err)
	}
	var colType string
	db.Raw(`SELECT column_type FROM information_schema.columns WHERE table_schema = DATABASE()
		AND table_name = 'short_rows' AND column_name = 'id'`).Scan(&colType)
	if colType != "bigint(20) unsigned" {
		t.Errorf("short_rows.id is %q, want bigint(20) unsigned", colType)
	}

	fromGo := []ShortRow{{Name: "a"}, {Name: "b"}}
	if err := db.Create(&fromGo).Error; err != nil {
		t.Fatal(err)
	}
	fromDB := ShortDBRow{Name: "c"}
	if err := db.Create(&fromDB).Error; err != nil {
		t.Fatal(err)
	}
	if uint64(fromDB.ID) <= math.MaxInt64 || fromDB.ID.Decompose().ServerID != 200 {
		t.Errorf("the database's default read back as %d", fromDB.ID)
	}
	for _, want := range []shardid.UUIDShort{fromGo[0].ID, fromGo[1].ID} {
		var got ShortRow
		if err := db.First(&got, "id = ?", want).Error; err != nil || got.ID != want || uint64(want) <= math.MaxInt64 {
			t.Errorf("row %d read back as %+v, %v", want, got, err)
		}
		b, _ := json.Marshal(got)
		var back ShortRow
		if err := json.Unmarshal(b, &back); err != nil || back.ID != want {
			t.Errorf("JSON %s read back as %d, %v", b, back.ID, err)
		}
	}
	var got ShortDBRow
	if err := db.First(&got, "id = ?", fromDB.ID).Error; err != nil || got.ID != fromDB.ID {
		t.Errorf("the database-made row read back as %+v, %v", got, err)
	}
}

// FlakeRow stores a 128-bit flake: uuid on PostgreSQL, BINARY(16) on MySQL.
type FlakeRow struct {
	ID   shardid.Flake `gorm:"primaryKey"`
	Name string
}

func TestFlakeStorage(t *testing.T) {
	fg, err := shardid.NewFlakeGenerator(0x0123456789AB)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			fresh(t, db, &FlakeRow{})
			var rows []FlakeRow
			for i := range 50 {
				f, err := fg.Next()
				if err != nil {
					t.Fatal(err)
				}
				rows = append(rows, FlakeRow{ID: f, Name: string(rune('a' + i%26))})
			}
			if err := db.Create(&rows).Error; err != nil {
				t.Fatal(err)
			}
			var back []FlakeRow
			if err := db.Order("id").Find(&back).Error; err != nil {
				t.Fatal(err)
			}
			if len(back) != len(rows) {
				t.Fatalf("%d rows read back, want %d", len(back), len(rows))
			}
			for i := range rows {
				if back[i].ID != rows[i].ID { // ORDER BY id is time order
					t.Fatalf("row %d: %v, want %v", i, back[i].ID, rows[i].ID)
				}
			}
			var one FlakeRow
			if err := db.First(&one, "id = ?", rows[7].ID).Error; err != nil || one.ID != rows[7].ID {
				t.Errorf("lookup by flake: %+v, %v", one, err)
			}
		})
	}
}
