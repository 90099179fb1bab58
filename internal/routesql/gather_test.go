package routesql

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestGather: rows come in the order of the targets, those of the queries
// that succeeded even when others failed, with each failure as fail makes
// it; a done context joins its error.
func TestGather(t *testing.T) {
	ctx := context.Background()
	targets := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	query := func(_ context.Context, n int) ([]int, error) {
		if n%4 == 3 {
			return nil, fmt.Errorf("query %d failed", n)
		}
		return []int{n, n}, nil
	}
	fail := func(n int, err error) error { return fmt.Errorf("target %d: %w", n, err) }
	for _, workers := range []int{0, 1, 3, 20} {
		rows, err := Gather(ctx, targets, workers, query, fail)
		if want := []int{0, 0, 1, 1, 2, 2, 4, 4, 5, 5, 6, 6, 8, 8, 9, 9}; !slices.Equal(rows, want) {
			t.Errorf("%d workers: rows %v, want %v", workers, rows, want)
		}
		if err == nil || err.Error() != "target 3: query 3 failed\ntarget 7: query 7 failed" {
			t.Errorf("%d workers: error %q", workers, err)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if rows, err := Gather(done, targets, 1, query, fail); !errors.Is(err, context.Canceled) {
		t.Errorf("done context: %v, %v", rows, err)
	}
	if rows, err := Gather(ctx, []int(nil), 0, query, fail); rows != nil || err != nil {
		t.Errorf("no targets: %v, %v", rows, err)
	}
}
