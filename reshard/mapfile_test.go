package reshard_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

func TestMapFile(t *testing.T) {
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{openUnreachable(t), openUnreachable(t), openUnreachable(t)},
		Names: []string{"pg1", "pg2", "pg3"}, LogicalShards: 10})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "map.json")
		os.WriteFile(p, []byte(s), 0o644)
		return p
	}
	if err := reshard.LoadMapFile(r, write(`{"pg1": ["0-4"], "pg2": ["5-6", "8-9"], "pg3": ["7"]}`)); err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 0, 0, 0, 0, 1, 1, 2, 1, 1}; !slices.Equal(r.Map(), want) {
		t.Errorf("map %v, want %v", r.Map(), want)
	}
	out := filepath.Join(dir, "out.json")
	if err := reshard.WriteMapFile(r, out); err != nil {
		t.Fatal(err)
	}
	before := r.Map()
	r.SetMap(make([]int, 10))
	if err := reshard.LoadMapFile(r, out); err != nil || !slices.Equal(r.Map(), before) {
		t.Errorf("a written map read back as %v, %v; want %v", r.Map(), err, before)
	}
	for _, bad := range []string{
		`{"pg1": ["0-9"], "pg2": ["3"]}`, // shard 3 twice
		`{"pg1": ["0-8"]}`,               // shard 9 missing
		`{"pg9": ["0-9"]}`,               // unknown database
		`{"pg1": ["0-10"]}`,              // out of range
		`{"pg1": ["9-0"]}`,               // backwards
		`{"pg1": ["x"]}`,                 // not a number
		`["0-9"]`,                        // not an object
	} {
		err := reshard.LoadMapFile(r, write(bad))
		if !errors.Is(err, reshard.ErrInvalidMap) || !errors.Is(err, shardid.ErrInvalidConfig) {
			t.Errorf("LoadMapFile(%s) = %v, want ErrInvalidMap (and ErrInvalidConfig)", bad, err)
		}
		if err != nil && (strings.Contains(err.Error(), "plugin") || !strings.Contains(err.Error(), "invalid shard map")) {
			t.Errorf("LoadMapFile(%s) says %q: want the map's own wording", bad, err)
		}
	}
	if !slices.Equal(r.Map(), before) {
		t.Errorf("a bad file changed the map to %v", r.Map())
	}
	if err := reshard.LoadMapFile(r, filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v, want os.ErrNotExist", err)
	}
}
