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
	defer c.release(context.WithoutCancel(ctx), nil)
	if err := c.capture(ctx, nil); err != nil {
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

// CopyVerifiesItself runs the capture and the copy of a move of the tables
// of schema from src to dst, then tamper (if not nil), and reports whether
// the copy then verifies itself against what it sent (verifySent).
func CopyVerifiesItself(ctx context.Context, src, dst *gorm.DB, schema string, tables []string, tamper func()) (bool, error) {
	c := newShardCopier(src, dst, schema, tables, 1000, nil)
	defer c.release(context.WithoutCancel(ctx), nil)
	if err := c.capture(ctx, nil); err != nil {
		return false, err
	}
	if _, err := c.copy(ctx); err != nil {
		return false, err
	}
	if tamper != nil {
		tamper()
	}
	sums, err := c.verifySent(ctx, func(context.Context) error { return nil })
	return sums != nil, err
}
