package shardid_test

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// PlgMapPhoto is created from maps through a router of two databases.
type PlgMapPhoto struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Caption string
}

const mapShards = 4 // shards 0, 1 on the first database; 2, 3 on the second

// mapRouter builds a router over two databases of one server, without
// schemas, and empties the test table on both.
func mapRouter(t *testing.T, first, second *gorm.DB) *shardid.Router {
	t.Helper()
	for _, db := range []*gorm.DB{first, second} {
		fresh(t, db, &PlgMapPhoto{})
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: mapShards})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{
		Databases: []*gorm.DB{first, second}, Names: []string{"one", "two"},
		LogicalShards: mapShards, Plugin: p,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// smallID is an ID of shard under 2^53, so that a float64 holds it exactly.
func smallID(t *testing.T, shard int) shardid.ID {
	t.Helper()
	id, err := shardid.Instagram.Compose(shardid.Parts{Time: shardid.Instagram.Epoch().Add(time.Hour), Shard: shard, Seq: 7})
	if err != nil || id > 1<<53 {
		t.Fatalf("smallID: %v %v", id, err)
	}
	return id
}

// TestPluginMapIDSpellingsRouted creates rows from maps whose ID is spelled
// in every way a caller (or decoded JSON) gives it, through a router on
// PostgreSQL and on MariaDB: an ID of another database is refused in every
// spelling, zero in every spelling is filled, and nothing is ever stored
// with ID 0 or on the wrong database.
func TestPluginMapIDSpellingsRouted(t *testing.T) {
	for _, d := range []struct {
		name string
		open func(t *testing.T) (*gorm.DB, *gorm.DB)
	}{
		{"postgres", func(t *testing.T) (*gorm.DB, *gorm.DB) { return openPostgres(t), openSecondPostgres(t) }},
		{"mysql", func(t *testing.T) (*gorm.DB, *gorm.DB) { return openMySQL(t), openSecondMySQL(t) }},
	} {
		t.Run(d.name, func(t *testing.T) {
			first, second := d.open(t)
			r := mapRouter(t, first, second)
			count := func(db *gorm.DB, where string, args ...any) int64 {
				t.Helper()
				var n int64
				if err := db.Model(&PlgMapPhoto{}).Where(where, args...).Count(&n).Error; err != nil {
					t.Fatal(err)
				}
				return n
			}

			// Shard 3 lives on "two"; the statements go to shard 0, on "one".
			small := smallID(t, 3)
			big, _ := shardid.Instagram.Compose(shardid.Parts{Time: time.Now(), Shard: 3})
			bigU := uint64(big)
			other := map[string]any{
				"string":         big.String(),
				"json.Number":    json.Number(big.String()),
				"[]byte":         []byte(big.String()),
				"float64":        float64(small),
				"float32 small":  float32(3 << 10), // shard 3 at time 0
				"uint64":         bigU,
				"*uint64":        &bigU,
				"ID":             big,
				"*ID":            &big,
				"int":            int(big),
				"NullID":         shardid.NullID{ID: big, Valid: true},
				"decoded string": decodeID(t, big),
			}
			for name, v := range other {
				for _, key := range []string{"id", "ID"} {
					err := r.ForShard(0).Model(&PlgMapPhoto{}).Create(map[string]any{key: v, "user_id": 3}).Error
					if !errors.Is(err, shardid.ErrWrongShard) {
						t.Errorf("%s under %q of shard 3 through shard 0: %v, want ErrWrongShard", name, key, err)
					}
				}
			}
			// A batch of maps with one row of another database.
			batch := []map[string]any{{"id": "0", "user_id": 0}, {"id": big.String(), "user_id": 3}}
			if err := r.ForShard(0).Model(&PlgMapPhoto{}).Create(&batch).Error; !errors.Is(err, shardid.ErrWrongShard) {
				t.Errorf("a batch with a row of shard 3 through shard 0: %v, want ErrWrongShard", err)
			}
			if n := count(first, "1=1") + count(second, "1=1"); n != 0 {
				t.Fatalf("%d rows stored by refused creates", n)
			}

			// Malformed IDs are errors, never rounded or read as zero.
			for name, v := range map[string]any{
				"fraction":      1.5,
				"beyond 2^53":   float64(big),
				"negative":      -1,
				"negative text": "-5",
				"space":         " 12",
				"exponent":      "1e5",
				"letters":       "abc",
				"empty":         "",
				"too big":       uint64(math.MaxUint64),
				"NaN":           math.NaN(),
				"bool":          true,
			} {
				err := r.ForShard(0).Model(&PlgMapPhoto{}).Create(map[string]any{"id": v, "user_id": 0}).Error
				if !errors.Is(err, shardid.ErrInvalidIDValue) {
					t.Errorf("%s (%v): %v, want ErrInvalidIDValue", name, v, err)
				}
			}
			both := map[string]any{"id": small.String(), "ID": "0", "user_id": 0}
			if err := r.ForShard(0).Model(&PlgMapPhoto{}).Create(both).Error; !errors.Is(err, shardid.ErrInvalidIDValue) {
				t.Errorf(`"id" and "ID" both: %v, want ErrInvalidIDValue`, err)
			}

			// Zero, in any spelling, is unassigned: filled from the key's shard.
			var nilID *shardid.ID
			zeros := map[string]any{
				"string": "0", "json.Number": json.Number("0"), "float64": 0.0, "nil": nil,
				"*ID nil": nilID, "int": 0, "NullID null": shardid.NullID{},
			}
			for name, v := range zeros {
				row := map[string]any{"id": v, "user_id": 1, "caption": name}
				if err := r.ForKey(1).Model(&PlgMapPhoto{}).Create(row).Error; err != nil {
					t.Errorf("zero %s: %v", name, err)
					continue
				}
				got, ok := row["id"].(shardid.ID)
				if !ok || got == 0 || got.Shard() != 1 {
					t.Errorf("zero %s: the map holds %#v, want a new ID of shard 1", name, row["id"])
				}
			}
			rows := []map[string]any{{"user_id": 1, "ID": "0"}, {"user_id": 1, "id": json.Number("0")}}
			if err := r.ForKey(1).Model(&PlgMapPhoto{}).Create(&rows).Error; err != nil {
				t.Fatal(err)
			}
			if n := count(first, "user_id = 1 AND id <> 0"); n != int64(len(zeros)+2) {
				t.Errorf("%d rows of user 1 with an ID, want %d", n, len(zeros)+2)
			}

			// The right database, in each spelling: stored with that exact ID.
			right := []any{big.String(), json.Number(smallID(t, 2).String()), float64(smallID(t, 3) + 1)}
			want := []shardid.ID{big, smallID(t, 2), smallID(t, 3) + 1}
			for i, v := range right {
				if err := r.ForShard(3).Model(&PlgMapPhoto{}).Create(map[string]any{"id": v, "user_id": 3}).Error; err != nil {
					t.Errorf("%T %v through shard 3: %v", v, v, err)
				}
				if n := count(second, "id = ?", want[i]); n != 1 {
					t.Errorf("%v: %d rows on the second database, want 1", want[i], n)
				}
			}
			if n := count(first, "id = 0") + count(second, "id = 0"); n != 0 {
				t.Errorf("%d rows stored with ID 0", n)
			}
			if n := count(first, "user_id = 3"); n != 0 {
				t.Errorf("%d rows of shard 3 on the first database", n)
			}
		})
	}
}

// decodeID returns what decoding this library's JSON of id into
// map[string]any gives for it.
func decodeID(t *testing.T, id shardid.ID) any {
	t.Helper()
	b, err := json.Marshal(map[string]any{"id": id})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m["id"]
}
