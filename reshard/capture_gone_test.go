package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// On MariaDB, a write that opens a moving shard's table while a move
// creates or drops the triggers on it can fail with error 1146 for a table
// those triggers read (shardid_changes, shardid_fence_state), there or
// not (MDEV-26048; seen for writes during a move's fence and at its end,
// under load). The statement did not run; the router reports it as
// ErrShardMoving, as it reports the fence, so that the writer routes it
// again. Here the state is made by hand: triggers that read a table that
// is not there.
func TestWriteMeetsAGoneChangeLogMariaDB(t *testing.T) {
	ctx := context.Background()
	db := openMySQL(t)
	for s := range guardShards {
		db.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS shardid_gone_%04d", s))
	}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: guardShards})
	r := guardRouter(t, p, "shardid_gone", []*gorm.DB{db}, []string{"my1"}, make([]int, guardShards))
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	const key = 1
	shard, err := r.ShardOfKey(int64(key))
	if err != nil {
		t.Fatal(err)
	}
	schema := r.Schema(shard)
	for _, q := range []string{
		"CREATE TABLE " + schema + ".shardid_changes (seq BIGINT AUTO_INCREMENT PRIMARY KEY, tbl VARCHAR(64) NOT NULL, id BIGINT NOT NULL)",
		"CREATE TRIGGER " + schema + ".shardid_cap_i_r_photos AFTER INSERT ON " + schema + ".r_photos FOR EACH ROW INSERT INTO " + schema + ".shardid_changes (tbl, id) VALUES ('r_photos', NEW.id)",
		"DROP TABLE " + schema + ".shardid_changes",
	} {
		if err := db.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	err = r.ForKey(key).Create(&RPhoto{UserID: key, Caption: "x"}).Error
	if !errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("a write meeting a gone change log: %v, want ErrShardMoving", err)
	}
	var n int64
	db.Raw("SELECT count(*) FROM " + schema + ".r_photos").Scan(&n)
	if n != 0 {
		t.Errorf("%d rows written", n)
	}
	// The same for a fence's state (MariaDB fails a write that opens a
	// table while a fence's triggers are created on it: MDEV-26048).
	for _, q := range []string{
		"DROP TRIGGER " + schema + ".shardid_cap_i_r_photos",
		"CREATE TRIGGER " + schema + ".shardid_fence_i_r_photos BEFORE INSERT ON " + schema + ".r_photos FOR EACH ROW BEGIN DECLARE u DATETIME(6); " +
			"SELECT fenced_until INTO u FROM " + schema + ".shardid_fence_state WHERE id = 1; END",
	} {
		if err := db.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	err = r.ForKey(key).Create(&RPhoto{UserID: key, Caption: "x"}).Error
	if !errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("a write meeting a missing fence state: %v, want ErrShardMoving", err)
	}
	// Another missing table stays what it is.
	err = r.ForKey(key).Table("no_such_table").Create(&RPhoto{UserID: key}).Error
	if err == nil || errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("a write to a missing table: %v, want the driver's error alone", err)
	}
}
