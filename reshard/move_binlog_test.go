package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// A move to a MariaDB with binary logging, by a mover without SUPER, is
// refused before it creates anything, with ErrMoverPrivileges naming both
// fixes; once log_bin_trust_function_creators is set, the same move runs.
func TestMoveRefusesTriggersWithoutSuperBinlog(t *testing.T) {
	ctx := context.Background()
	const prefix = "shardid_pm"
	src := openMySQL(t)
	drop := func() {
		for s := range 2 {
			src.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS %s_%04d", prefix, s))
		}
	}
	drop()
	t.Cleanup(drop)
	inst := startMariaDBInstance(t, "--log-bin=mariadb-bin", "--server-id=7")
	root, err := gorm.Open(mysql.Open(inst.DSN("test")), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, root)
	var logBin int
	if err := root.Raw("SELECT @@log_bin").Scan(&logBin).Error; err != nil || logBin != 1 {
		t.Fatalf("the instance's log_bin: %d, %v", logBin, err)
	}
	mover := testdb.MySQLUser(t, root, "pmmover", "GRANT ALL PRIVILEGES ON `shardid\\_pm\\_%%`.* TO %[1]s")
	dst := testdb.OpenMySQLUser(t, inst.DSN(""), mover) // no default database: its grants are on the shards' only

	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{src, dst}, Names: []string{"my1", "my2"},
		LogicalShards: 2, SchemaPattern: prefix + "_%04d", Plugin: p, Map: []int{0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	seedShard(t, r, 1, 20)
	opts := reshard.MoveOptions{Tables: []string{"r_photos"}}
	_, err = reshard.MoveShard(ctx, r, nil, 1, "my2", opts)
	if !errors.Is(err, reshard.ErrMoverPrivileges) || !strings.Contains(err.Error(), "SUPER") || !strings.Contains(err.Error(), "log_bin_trust_function_creators") {
		t.Fatalf("a move to a server with binary logging by a mover without SUPER: %v, want ErrMoverPrivileges naming both fixes", err)
	}
	var n int64
	root.Raw("SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?", r.Schema(1)).Scan(&n)
	if n != 0 {
		t.Errorf("the refused move created %s on the target", r.Schema(1))
	}
	// The second fix.
	if err := root.Exec("SET GLOBAL log_bin_trust_function_creators = 1").Error; err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.MoveShard(ctx, r, nil, 1, "my2", opts); err != nil {
		t.Fatalf("the move once log_bin_trust_function_creators = 1: %v", err)
	}
}
