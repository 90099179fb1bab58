package reshard

import (
	"context"
	"time"

	"gorm.io/gorm"
)

// CopyShard runs the steps of a move that copy the tables of schema from
// src to dst while src takes writes (capture, copy, converge), calls fence,
// which must stop every write to src, and then the steps under the fence
// (finish, release).
func CopyShard(ctx context.Context, src, dst *gorm.DB, schema string, tables []string, fence func()) ([]TableCheck, error) {
	c := newShardCopier(src, dst, schema, tables, 1000, nil)
	defer c.release(context.WithoutCancel(ctx))
	println(time.Now().Format("15:04:05.000"), "capture")
	if err := c.capture(ctx); err != nil {
		return nil, err
	}
	println(time.Now().Format("15:04:05.000"), "captured")
	if _, err := c.copy(ctx); err != nil {
		return nil, err
	}
	if err := c.converge(ctx); err != nil {
		return nil, err
	}
	fence()
	return c.finish(ctx)
}
