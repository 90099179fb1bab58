package reshard

import (
	"context"

	"gorm.io/gorm"
)

// CopyShard runs the steps of a move that copy the tables of schema from
// src to dst while src takes writes (capture, copy, converge), calls fence,
// which must stop every write to src, and then the steps under the fence
// (finish, release).
func CopyShard(ctx context.Context, src, dst *gorm.DB, schema string, tables []string, fence func()) ([]TableCheck, error) {
	c := newShardCopier(src, dst, schema, tables, 1000, nil)
	defer c.release(context.WithoutCancel(ctx))
	if err := c.capture(ctx); err != nil {
		return nil, err
	}
	if _, err := c.copy(ctx); err != nil {
		return nil, err
	}
	if err := c.converge(ctx); err != nil {
		return nil, err
	}
	fence()
	return c.finish(ctx)
}
