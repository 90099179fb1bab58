package shardid_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// Each constructor's ErrInvalidConfig names what is misconfigured: a
// router's errors do not blame a plugin, and a plugin's still say plugin.
func TestInvalidConfigNamesItsComponent(t *testing.T) {
	db := &gorm.DB{Config: &gorm.Config{}}
	plugin, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 8})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		err  error
		want string
	}{
		{"router without databases", routerErr(shardid.RouterConfig{}), "shardid: invalid router configuration: no databases"},
		{"router shards", routerErr(shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: -1}), "shardid: invalid router configuration: LogicalShards -1"},
		{"router names", routerErr(shardid.RouterConfig{Databases: []*gorm.DB{db}, Names: []string{"a", "b"}}), "shardid: invalid router configuration: 2 names for 1 databases"},
		{"router and plugin", routerErr(shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 16, Plugin: plugin}), "shardid: invalid router configuration: the router has 16 logical shards, the plugin 8"},
		{"router map", routerErr(shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 4, Map: []int{0}}), "shardid: invalid router configuration: the assignment has 1 shards"},
		{"plugin", pluginErr(shardid.PluginConfig{LogicalShards: -1}), "shardid: invalid plugin configuration: LogicalShards -1"},
		{"lease", leaseErr(shardid.LeaseConfig{}), "shardid: invalid configuration: no lease store"},
	} {
		if !errors.Is(tc.err, shardid.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", tc.what, tc.err)
			continue
		}
		if msg := tc.err.Error(); !strings.HasPrefix(msg, tc.want) {
			t.Errorf("%s: %q, want it to start %q", tc.what, msg, tc.want)
		}
	}
}

func routerErr(cfg shardid.RouterConfig) error {
	_, err := shardid.NewRouter(cfg)
	return err
}

func pluginErr(cfg shardid.PluginConfig) error {
	_, err := shardid.NewPlugin(cfg)
	return err
}

func leaseErr(cfg shardid.LeaseConfig) error {
	_, err := shardid.AcquireLease(context.Background(), cfg)
	return err
}
