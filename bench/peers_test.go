package bench

import (
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/shardid/shardid"
	"github.com/sony/sonyflake"
)

// IDs made by bwmarrin/snowflake decode with shardid.Snowflake: its 10-bit
// node is the 5-bit datacenter (shard) above the 5-bit worker.
func TestDecodeBwmarrinSnowflake(t *testing.T) {
	node, err := snowflake.NewNode(27<<5 | 9)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().Truncate(time.Millisecond)
	for i := range 5000 {
		id := node.Generate()
		p := shardid.Snowflake.Decompose(shardid.ID(id.Int64()))
		if p.Shard != 27 || p.Worker != 9 || int64(p.Seq) != id.Step() ||
			p.Time.UnixMilli() != id.Time() || p.Time.Before(before) || p.Time.After(time.Now()) {
			t.Fatalf("#%d: %d decodes to %+v; bwmarrin says time %d node %d step %d",
				i, id, p, id.Time(), id.Node(), id.Step())
		}
	}
}

// IDs made by sony/sonyflake decode with shardid.Sonyflake.
func TestDecodeSonyflake(t *testing.T) {
	sf, err := sonyflake.New(sonyflake.Settings{MachineID: func() (uint16, error) { return 0xBEEF, nil }})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().Truncate(10 * time.Millisecond)
	for i := range 600 {
		v, err := sf.NextID()
		if err != nil {
			t.Fatal(err)
		}
		p := shardid.Sonyflake.Decompose(shardid.ID(v))
		parts := sonyflake.Decompose(v)
		if p.Worker != 0xBEEF || uint64(p.Seq) != parts["sequence"] ||
			uint64(p.Time.Sub(shardid.Sonyflake.Epoch())/(10*time.Millisecond)) != parts["time"] ||
			p.Time.Before(before) || p.Time.After(time.Now()) {
			t.Fatalf("#%d: %d decodes to %+v; sonyflake says %v", i, v, p, parts)
		}
	}
}
