package reshard_test

import (
	"context"
	"testing"

	"github.com/shardid/shardid/reshard"
)

// A *gorm.DB kept from ForKey before a move (README: "keep it, share it")
// follows the new map once the move flips it: writes through it after the
// move land on the target and reads find them there, instead of
// ErrShardMoving from the old copy's fence forever.
func TestKeptSessionAcrossMove(t *testing.T) {
	r, c, _ := freshMoveSetup(t)
	ctx := context.Background()
	kept := r.ForKey(1) // shard 1, on pg1
	before := RPhoto{UserID: 1, Caption: "before"}
	if err := kept.Create(&before).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.MoveShard(ctx, r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}}); err != nil {
		t.Fatal(err)
	}
	after := RPhoto{UserID: 1, Caption: "after"}
	if err := kept.Create(&after).Error; err != nil {
		t.Fatalf("a write through a session kept across the move: %v", err)
	}
	var n int64
	r.Databases()[1].Table(r.Schema(1)+".r_photos").Where("id IN ?", []int64{int64(before.ID), int64(after.ID)}).Count(&n)
	if n != 2 {
		t.Errorf("the target holds %d of the 2 rows, want both", n)
	}
	var got []RPhoto
	if err := kept.Order("id").Find(&got).Error; err != nil || len(got) != 2 || got[1].Caption != "after" {
		t.Errorf("a read through the kept session: %+v, %v; want both rows from the target", got, err)
	}
	if err := kept.Model(&RPhoto{}).Where("id = ?", before.ID).Update("caption", "updated").Error; err != nil {
		t.Errorf("an update through the kept session: %v", err)
	}
}
