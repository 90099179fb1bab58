package reshard_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// A MySQL session that reads text converted to another character set
// (charset=latin1 in the DSN) gets other bytes than the server hashes: the
// mover leaves the rows' hashes to the source there, and the copy still
// verifies itself (MoveResult.ComparedSource false), where hashing the
// bytes it read would have made the move compare both sides. With
// CompareSource the move says it compared them. The target's server
// defaults to latin1: its table, made from the model or from the source's
// definition, has the source's character set all the same.
func TestMoveHashesTextReadConvertedMariaDB(t *testing.T) {
	latin1 := func(dsn string) string { return dsn + "&charset=latin1" }
	src, err := gorm.Open(mysql.Open(latin1(envOr("SHARDID_TEST_MYSQL_DSN", testdb.DefaultMySQLDSN))), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, src)
	var cs string
	if err := src.Raw("SELECT @@character_set_results").Scan(&cs).Error; err != nil || cs != "latin1" {
		t.Fatalf("the source session's character set: %q, %v", cs, err)
	}
	inst := startMariaDBInstance(t)
	dst, err := gorm.Open(mysql.Open(latin1(inst.DSN("test"))), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, dst)
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2})
	for _, compare := range []bool{false, true} {
		for s := range 2 {
			src.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS shardid_cs_%04d", s))
			dst.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS shardid_cs_%04d", s))
		}
		r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{src, dst}, Names: []string{"my1", "my2"},
			LogicalShards: 2, SchemaPattern: "shardid_cs_%04d", Plugin: p, Map: []int{0, 0}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Migrate(context.Background(), &RPhoto{}); err != nil {
			t.Fatal(err)
		}
		for i := range int64(50) {
			if err := r.ForKey(1 + 2*i).Create(&RPhoto{UserID: 1 + 2*i, Caption: fmt.Sprint("café ", i)}).Error; err != nil {
				t.Fatal(err)
			}
		}
		var got struct{ Stored, Read string }
		if err := src.Raw("SELECT HEX(caption) AS stored, caption AS `read` FROM shardid_cs_0001.r_photos ORDER BY id LIMIT 1").Scan(&got).Error; err != nil {
			t.Fatal(err)
		}
		if got.Stored == strings.ToUpper(hex.EncodeToString([]byte(got.Read))) {
			t.Fatalf("the session reads %q as stored (%s): the test needs it converted", got.Read, got.Stored)
		}
		opts := reshard.MoveOptions{Models: []any{&RPhoto{}}, CompareSource: compare}
		if compare {
			opts = reshard.MoveOptions{Tables: []string{"r_photos"}, CompareSource: compare}
		}
		res, err := reshard.MoveShard(context.Background(), r, nil, 1, "my2", opts)
		if err != nil {
			t.Fatal(err)
		}
		if res.ComparedSource != compare {
			t.Errorf("CompareSource %v: the move compared both sides: %v", compare, res.ComparedSource)
		}
		var charsets []string
		for _, db := range []*gorm.DB{src, dst} {
			var cs string
			db.Raw("SELECT CHARACTER_SET_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'shardid_cs_0001' AND TABLE_NAME = 'r_photos' AND COLUMN_NAME = 'caption'").Scan(&cs)
			charsets = append(charsets, cs)
		}
		if charsets[0] != charsets[1] {
			t.Errorf("the caption's character set: %s on the source, %s on the target", charsets[0], charsets[1])
		}
		var n int64
		dst.Raw("SELECT count(*) FROM shardid_cs_0001.r_photos WHERE caption LIKE 'café %'").Scan(&n)
		if n != 50 {
			t.Errorf("%d of the 50 rows with café on the target", n)
		}
	}
	for s := range 2 {
		src.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS shardid_cs_%04d", s))
	}
}

// A split creates each shard's database with the monolith database's
// character set and collation: the tables that later migrations add
// there inherit them, not the server's default (utf8mb4 on Debian's
// MariaDB, latin1 on MariaDB's own).
func TestSplitShardDatabasesKeepTheMonolithsCharsetMariaDB(t *testing.T) {
	e := newSplitEnvMySQL(t, 4, 8, 2, 1)
	mono := e.dbs[0]
	var name string
	if err := mono.Raw("SELECT DATABASE()").Scan(&name).Error; err != nil {
		t.Fatal(err)
	}
	if err := mono.Exec("ALTER DATABASE `" + name + "` CHARACTER SET utf8mb3 COLLATE utf8mb3_bin").Error; err != nil {
		t.Fatal(err)
	}
	var server string
	if err := mono.Raw("SELECT @@character_set_server").Scan(&server).Error; err != nil {
		t.Fatal(err)
	}
	if server == "utf8mb3" {
		t.Fatal("the server defaults to utf8mb3: the test could not tell the databases apart")
	}
	ctx := context.Background()
	plan, err := reshard.PlanSplit(ctx, e.cfg, []string{"my_a", "my_b"}, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	for s := range 4 {
		var def struct{ Charset, Collation string }
		if err := e.targetDB(plan, s).Raw("SELECT DEFAULT_CHARACTER_SET_NAME AS charset, DEFAULT_COLLATION_NAME AS collation"+
			" FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", e.m.SchemaOf(s)).Scan(&def).Error; err != nil {
			t.Fatal(err)
		}
		if def.Charset != "utf8mb3" || def.Collation != "utf8mb3_bin" {
			t.Errorf("shard %d's database %s: %s, %s; want the monolith's utf8mb3, utf8mb3_bin", s, e.m.SchemaOf(s), def.Charset, def.Collation)
		}
	}
}
