package reshard

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/shardid/shardid"
)

// Follow loads the catalog's map into r now, and then whenever its version
// changes, checking every interval (1s if 0), until ctx is done. On
// PostgreSQL it also listens for the catalog's notifications, so a new map
// arrives as soon as it is saved. It returns after the first load; errors of
// later loads go to onError, if not nil.
func Follow(ctx context.Context, r *shardid.Router, c *Catalog, interval time.Duration, onError func(error)) error {
	if interval <= 0 {
		interval = time.Second
	}
	m, version, err := c.Load(ctx, r)
	if err != nil {
		return err
	}
	if err := r.SetMap(m); err != nil {
		return err
	}
	wake := make(chan struct{}, 1)
	if c.DB.Dialector.Name() == "postgres" {
		go c.listen(ctx, wake)
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-wake:
			}
			v, err := c.Version(ctx)
			if err == nil && v != version {
				m, v, err = c.Load(ctx, r)
				if err == nil {
					err = r.SetMap(m)
				}
				if err == nil {
					version = v
				}
			}
			if err != nil && onError != nil && ctx.Err() == nil {
				onError(err)
			}
		}
	}()
	return nil
}

// listen waits for the catalog's notifications on a connection of its own
// and wakes Follow for each, until ctx is done. If the driver is not pgx, or
// the connection breaks, Follow goes on polling; listen retries every few
// seconds.
func (c *Catalog) listen(ctx context.Context, wake chan<- struct{}) {
	t, err := c.table()
	if err != nil {
		return
	}
	sqlDB, err := c.DB.DB()
	if err != nil {
		return
	}
	for ctx.Err() == nil {
		conn, err := sqlDB.Conn(ctx)
		if err == nil {
			err = conn.Raw(func(dc any) error {
				sc, ok := dc.(*stdlib.Conn)
				if !ok {
					return errNotPgx
				}
				pc := sc.Conn()
				if _, err := pc.Exec(ctx, "LISTEN "+t); err != nil {
					return err
				}
				for {
					if _, err := pc.WaitForNotification(ctx); err != nil {
						return err
					}
					select {
					case wake <- struct{}{}:
					default:
					}
				}
			})
			// The session listened: do not hand it back to the pool.
			dropConn(conn)
			conn.Close()
		}
		if errors.Is(err, errNotPgx) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(3 * time.Second):
		}
	}
}

var errNotPgx = errors.New("not a pgx connection")
