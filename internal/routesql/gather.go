package routesql

import (
	"context"
	"errors"
	"sync"
)

// Gather runs query on each of targets concurrently, workers at a time (8
// if workers is 0 or less), and returns the rows of all, in the order of
// targets. It stops starting queries once ctx is done. Rows of the queries
// that succeeded are returned even when others failed; the error then joins
// fail(target, err) for each failure, and ctx's error when ctx is done.
func Gather[S, T any](ctx context.Context, targets []S, workers int, query func(context.Context, S) ([]T, error), fail func(S, error) error) ([]T, error) {
	if workers <= 0 {
		workers = 8
	}
	results := make([][]T, len(targets))
	errs := make([]error, len(targets))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(targets)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				got, err := query(ctx, targets[i])
				if err != nil {
					errs[i] = fail(targets[i], err)
					continue
				}
				results[i] = got
			}
		}()
	}
dispatch:
	for i := range targets {
		select {
		case next <- i:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(next)
	wg.Wait()
	var rows []T
	for _, got := range results {
		rows = append(rows, got...)
	}
	all := errs
	if ctx.Err() != nil {
		all = append(all, ctx.Err())
	}
	return rows, errors.Join(all...)
}
