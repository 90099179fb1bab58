package shardid_test

import (
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// BenchmarkRouterByKey is the cost of routing by a key, beside ForKey:
// an int64 and a tenant name through ForKeyOf, and a row through ForRow
// (new, by its key; loaded, by its ID).
func BenchmarkRouterByKey(b *testing.B) {
	dbs := []*gorm.DB{openSQLite(b), openSQLite(b)}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Plugin: p})
	if err != nil {
		b.Fatal(err)
	}
	loaded := ByrowPhoto{ID: mustComposeB(b, 1341), UserID: 31341}
	for _, c := range []struct {
		name  string
		route func(i int64) *gorm.DB
	}{
		{"ForKey", func(i int64) *gorm.DB { return r.ForKey(i) }},
		{"ForKeyOf/int64", func(i int64) *gorm.DB { return r.ForKeyOf(i) }},
		{"ForKeyOf/string", func(int64) *gorm.DB { return r.ForKeyOf("acme-corporation") }},
		{"ForRow/new", func(i int64) *gorm.DB { return r.ForRow(&ByrowPhoto{UserID: i}) }},
		{"ForRow/loaded", func(int64) *gorm.DB { return r.ForRow(&loaded) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var i int64
			for b.Loop() {
				if db := c.route(i & 4095); db.Error != nil {
					b.Fatal(db.Error)
				}
				i++
			}
		})
	}
}

func mustComposeB(b *testing.B, shard int) shardid.ID {
	id, err := shardid.Instagram.Compose(shardid.Parts{Time: frozen, Shard: shard})
	if err != nil {
		b.Fatal(err)
	}
	return id
}
