package shardid

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"sync"
)

// CreateByShardOptions tunes Router.CreateByShard. The zero value is ready
// to use.
type CreateByShardOptions struct {
	// Workers is how many shards are written at the same time. If Workers
	// is 0, it is 4.
	Workers int

	// BatchSize, if positive, splits each shard's rows into INSERTs of at
	// most BatchSize rows (as CreateInBatches), all in the shard's one
	// transaction. If BatchSize is 0, each shard's rows go in one INSERT, or
	// in batches of the database's gorm.Config.CreateBatchSize.
	BatchSize int
}

// ShardWrite is what Router.CreateByShard did on one logical shard.
type ShardWrite struct {
	Shard    int    // the logical shard
	Database string // the name of the database that holds it
	Rows     []int  // the indices of the shard's rows in the caller's slice, ascending

	// Err is nil when the shard's transaction committed: all of Rows are
	// written, with their IDs set in the caller's rows. Otherwise it is a
	// *ShardError naming the shard and wrapping the cause, and the
	// transaction was rolled back (or never begun: ctx was done first), so
	// none of Rows is written, unless InDoubt.
	Err error

	// InDoubt is set when Err came from the COMMIT itself. The server
	// refused to commit (a deferred constraint, a serialization failure) and
	// nothing is written, or the connection broke while committing and the
	// rows may be there: look before writing them again.
	InDoubt bool
}

// CreateReport is the outcome of Router.CreateByShard, one ShardWrite per
// shard that had rows, in shard order.
type CreateReport struct {
	Shards []ShardWrite
}

// Written returns the indices of the rows whose shard committed, ascending.
func (c CreateReport) Written() []int {
	var rows []int
	for _, w := range c.Shards {
		if w.Err == nil {
			rows = append(rows, w.Rows...)
		}
	}
	slices.Sort(rows)
	return rows
}

// Failed returns the writes of the shards that did not commit.
func (c CreateReport) Failed() []ShardWrite {
	var failed []ShardWrite
	for _, w := range c.Shards {
		if w.Err != nil {
			failed = append(failed, w)
		}
	}
	return failed
}

// Err joins the errors of the shards that failed; nil when all committed.
func (c CreateReport) Err() error {
	var errs []error
	for _, w := range c.Shards {
		if w.Err != nil {
			errs = append(errs, w.Err)
		}
	}
	return errors.Join(errs...)
}

// CreateByShard creates rows that may belong to several shards: it groups
// them by shard as ShardOfRow decides each row's, and writes each shard's
// rows in one transaction of their own on the database that holds the
// shard, several shards at a time (opts.Workers).
//
// The write is atomic per shard, not across shards: a shard whose INSERT
// fails (a unique violation, a database down) is rolled back as a whole and
// reported, while the other shards' rows are committed. The report says
// which rows each shard wrote and which failed; the error is
// report.Err(), nil when every shard committed. IDs the plugin fills are
// set in the caller's rows, also in rows of a shard that failed (whose IDs
// then name no stored row).
//
// rows is a slice (or a pointer to a slice or an array) of structs or of
// pointers to structs. A row whose shard cannot be told (a bad or missing
// key: see ShardOfRow) fails the whole call before anything is written,
// with an empty report. Once ctx is done, no further shard is begun; those
// are reported with ctx's error.
func (r *Router) CreateByShard(ctx context.Context, rows any, opts CreateByShardOptions) (CreateReport, error) {
	rv := indirect(reflect.ValueOf(rows))
	if k := rv.Kind(); k != reflect.Slice && k != reflect.Array {
		return CreateReport{}, withDetail(ErrInvalidShardKey, "CreateByShard takes a slice of rows, not a "+
			reflect.TypeOf(rows).String())
	}
	shards, err := r.rowShards(rows)
	if err != nil {
		return CreateReport{}, err
	}
	ptrs := rv.Type().Elem().Kind() == reflect.Pointer
	if !ptrs && rv.Kind() == reflect.Array && !rv.CanAddr() {
		return CreateReport{}, withDetail(ErrNotAddressable, "an array of rows passed by value: pass a pointer to it, or a slice")
	}
	// One group per shard, rows in the caller's order.
	groups := make(map[int][]int)
	for i, s := range shards {
		groups[s] = append(groups[s], i)
	}
	report := CreateReport{Shards: make([]ShardWrite, 0, len(groups))}
	for _, s := range slices.Sorted(maps.Keys(groups)) {
		report.Shards = append(report.Shards, ShardWrite{Shard: s, Database: r.DatabaseName(s), Rows: groups[s]})
	}

	// Each group is a []*T of the caller's rows, so that the IDs GORM
	// and the plugin set land in them.
	ptrType := rv.Type().Elem()
	if !ptrs {
		ptrType = reflect.PointerTo(ptrType)
	}
	subset := func(idx []int) any {
		sub := reflect.MakeSlice(reflect.SliceOf(ptrType), len(idx), len(idx))
		for j, i := range idx {
			if ptrs {
				sub.Index(j).Set(rv.Index(i))
			} else {
				sub.Index(j).Set(rv.Index(i).Addr())
			}
		}
		return sub.Interface()
	}

	workers := opts.Workers
	if workers <= 0 {
		workers = 4
	}
	var (
		wg   sync.WaitGroup
		next = make(chan *ShardWrite)
	)
	for range min(workers, len(report.Shards)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range next {
				r.writeShard(ctx, w, subset(w.Rows), opts.BatchSize)
			}
		}()
	}
	for i := range report.Shards {
		w := &report.Shards[i]
		if ctx.Err() != nil {
			w.Err = &ShardError{Shard: w.Shard, Database: w.Database, Err: ctx.Err()}
			continue
		}
		select {
		case next <- w:
		case <-ctx.Done():
			w.Err = &ShardError{Shard: w.Shard, Database: w.Database, Err: ctx.Err()}
		}
	}
	close(next)
	wg.Wait()
	return report, report.Err()
}

// writeShard creates rows, all of w.Shard, in one transaction, and records
// the outcome in w.
func (r *Router) writeShard(ctx context.Context, w *ShardWrite, rows any, batch int) {
	fail := func(err error) {
		var se *ShardError
		if !errors.As(err, &se) {
			err = &ShardError{Shard: w.Shard, Database: w.Database, Err: err}
		}
		w.Err = err
	}
	tx := r.ForShard(w.Shard).WithContext(ctx).Begin()
	if tx.Error != nil {
		fail(tx.Error)
		return
	}
	// The database may have changed since grouping (a move): name the one
	// the transaction runs on.
	w.Database = r.DatabaseName(w.Shard)
	var err error
	if batch > 0 {
		err = tx.CreateInBatches(rows, batch).Error
	} else {
		err = tx.Create(rows).Error
	}
	if err != nil {
		tx.Rollback()
		fail(err)
		return
	}
	if err := tx.Commit().Error; err != nil {
		fail(err)
		w.InDoubt = true
	}
}
