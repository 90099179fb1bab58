package reshard

import "context"

// FlipShard is flipShard, for the tests of the privileges a move needs on
// the catalog.
func (c *Catalog) FlipShard(ctx context.Context, shard int, from, to string) (int64, error) {
	return c.flipShard(ctx, shard, from, to)
}
