package reshard

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

func TestCopyField(t *testing.T) {
	row := []byte("42\t7\tcaption with spaces\t\\N\n")
	for i, want := range []string{"42", "7", "caption with spaces", `\N`} {
		if got, ok := copyField(row, i); !ok || string(got) != want {
			t.Errorf("copyField(%d) = %q, %v; want %q", i, got, ok, want)
		}
	}
	if _, ok := copyField(row, 4); ok {
		t.Error("copyField past the last column: ok")
	}
}

func TestShardList(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{{nil, ""}, {[]int{3}, "3"}, {[]int{0, 1, 2, 3, 8}, "0-3, 8"}, {[]int{1, 3, 4, 6}, "1, 3-4, 6"}} {
		if got := shardList(c.in); got != c.want {
			t.Errorf("shardList(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

// idCheckFixture: shard 3's legacy photo 5, and a photo of the layout on
// shard 3.
func idCheckFixture(t testing.TB) (*idCheck, int64) {
	t.Helper()
	l := shardid.Instagram
	legacy, err := shardid.NewLegacyIDs(l, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 1000; id++ {
		if err := legacy.Add("photos", shardid.ID(id), int(id%16)); err != nil {
			t.Fatal(err)
		}
	}
	id, err := l.Compose(shardid.Parts{Time: time.Now(), Shard: 3})
	if err != nil {
		t.Fatal(err)
	}
	return &idCheck{layout: l, legacy: legacy, shards: 16}, int64(id)
}

func TestIDCheckMismatch(t *testing.T) {
	c, layoutID := idCheckFixture(t)
	for _, x := range []struct {
		table string
		id    int64
		shard int
		want  string // "" for none
	}{
		{"photos", layoutID, 3, ""},
		{"photos", 5, 5, ""},
		{"photos", layoutID, 2, "names shard 3, its key puts it on shard 2"},
		{"photos", 5, 2, "recorded on shard 5, its key now puts it on shard 2"},
		{"photos", 1001, 9, "invalid ID"}, // between the record and the layout
		{"comments", 5, 5, "no legacy IDs were recorded for table comments"},
		{"photos", 0, 0, "invalid ID"},
	} {
		got := c.mismatch(x.table, x.id, x.shard)
		if (x.want == "") != (got == "") || !strings.Contains(got, x.want) {
			t.Errorf("mismatch(%s %d on %d) = %q, want %q", x.table, x.id, x.shard, got, x.want)
		}
	}
	// Without a record, an old ID says how to record them.
	c.legacy = nil
	if got := c.mismatch("photos", 5, 5); !strings.Contains(got, "record the legacy IDs first") {
		t.Errorf("mismatch without a record: %q", got)
	}
	var m idMismatches
	for id := range int64(12) {
		m.check(c, "photos", 2000+id, 15)
	}
	err := m.err("copying shards 15")
	if !errors.Is(err, ErrKeyMismatch) || !strings.Contains(err.Error(), "12 row(s)") || !strings.Contains(err.Error(), "and 2 more") {
		t.Errorf("err: %v", err)
	}
}

// BenchmarkCopyRouterLine: what the ID check adds to the routing of a
// copied row in Go (PostgreSQL's copy: copyRouter.line), against the same
// line unchecked.
func BenchmarkCopyRouterLine(b *testing.B) {
	c, layoutID := idCheckFixture(b)
	lines := map[string][]byte{
		"layout": fmt.Appendf(nil, "3\t%d\t3\tphoto of the layout\t2026-12-01 06:00:00+00\n", layoutID),
		"legacy": []byte("5\t5\t5\ta legacy photo\t2026-12-01 06:00:00+00\n"),
	}
	for _, name := range []string{"layout", "legacy"} {
		for _, checked := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/checked=%v", name, checked), func(b *testing.B) {
				r := newCopyRouter(allShards(16), func(copyChunkOf) error { return nil }, nil)
				r.hasher = &copyRowHasher{}
				var bad idMismatches
				if checked {
					r.idCol = 0
					r.checkID = func(id int64, s int) { bad.check(c, "photos", id, s) }
				}
				l := lines[name]
				b.ReportAllocs()
				for b.Loop() {
					if err := r.line(l); err != nil {
						b.Fatal(err)
					}
				}
				if bad.n != 0 {
					b.Fatal(bad.err("bench"))
				}
			})
		}
	}
}

func allShards(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func TestParseDecimal(t *testing.T) {
	for _, s := range []string{"0", "7", "-7", "4213295091143411712", "9223372036854775807", "-9223372036854775808"} {
		want, _ := strconv.ParseInt(s, 10, 64)
		if got, ok := parseDecimal([]byte(s)); !ok || got != want {
			t.Errorf("parseDecimal(%q) = %d, %v", s, got, ok)
		}
	}
	for _, s := range []string{"", "-", "9223372036854775808", "-9223372036854775809", "12a", `\N`, "99999999999999999999", "1.5"} {
		if got, ok := parseDecimal([]byte(s)); ok {
			t.Errorf("parseDecimal(%q) = %d, ok", s, got)
		}
	}
}

func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"0", "-1", "9223372036854775807", "-9223372036854775808", "18446744073709551615", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseDecimal([]byte(s))
		want, err := strconv.ParseInt(s, 10, 64)
		// ParseInt takes a leading "+", which COPY never writes.
		if strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-+") {
			if ok {
				t.Fatalf("parseDecimal(%q) = %d, ok", s, got)
			}
			return
		}
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("parseDecimal(%q) = %d, %v; ParseInt: %d, %v", s, got, ok, want, err)
		}
	})
}

// TestIDRuleStrips: a trigger body with the ID rule, stripped of it, is the
// body without it, on both dialects: triggersMatch judges the declarations
// of a split with no record by the bodies, whatever Layout said.
func TestIDRuleStrips(t *testing.T) {
	c, _ := idCheckFixture(t)
	for _, mysql := range []bool{false, true} {
		var dialector gorm.Dialector = postgres.Dialector{}
		if mysql {
			dialector = gormmysql.Dialector{}
		}
		sp := &splitter{shards: 16, schema: "public", byName: map[string]SplitTable{}, mysql: mysql,
			mono: &gorm.DB{Config: &gorm.Config{Dialector: dialector}}}
		sp.tables = []SplitTable{{Name: "users", Key: "id"}, {Name: "photos", Key: "user_id"}, {Name: "comments", Parent: "photos", Via: "photo_id"}}
		for _, tb := range sp.tables {
			sp.byName[tb.Name] = tb
		}
		sp.cfg.Map = mustMap(t, 16)
		without := map[string]string{}
		if mysql {
			without = sp.splitTriggerBodiesMySQL()
		} else {
			for _, tb := range sp.tables {
				without[tb.Name] = sp.splitFunctionBodyPG(tb)
			}
		}
		sp.ids = c
		with := map[string]string{}
		if mysql {
			with = sp.splitTriggerBodiesMySQL()
		} else {
			for _, tb := range sp.tables {
				with[tb.Name] = sp.splitFunctionBodyPG(tb)
			}
		}
		for name, w := range with {
			if w == without[name] {
				t.Errorf("mysql %v, %s: the body has no ID rule", mysql, name)
			}
			if got := withoutIDRule(w); got != without[name] {
				t.Errorf("mysql %v, %s: stripped of its ID rule:\n%s\nwant\n%s", mysql, name, got, without[name])
			}
		}
	}
}

// mustMap is a map of shards logical shards, every one shared on "mono".
func mustMap(t *testing.T, shards int) *shardmap.Map {
	t.Helper()
	m, err := shardmap.New(shardmap.Config{Databases: []string{"mono", "a"}, LogicalShards: shards, SchemaPattern: "s_%04d",
		Assign: make([]int, shards), Shared: allShards(shards)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
