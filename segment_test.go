package shardid_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardid/shardid"
)

// segmentGoroutines counts the goroutines running a SegmentAllocator's
// code.
func segmentGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "shardid.(*SegmentAllocator)") {
			n++
		}
	}
	return n
}

// Close stops a background fetch that is stuck (the segment row is locked
// by another transaction) and waits for it; two Close calls at once both
// return; Next then returns ErrClosed, and no goroutine of the allocator is
// left.
func TestSegmentAllocatorClose(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			db := segmentDB(t, kind)
			db.Exec("DROP TABLE IF EXISTS shardid_seg_close")
			ctx := context.Background()
			s, err := shardid.NewSegmentAllocator(ctx, shardid.SegmentConfig{DB: db, Table: "shardid_seg_close", Key: "close", Step: 10})
			if err != nil {
				t.Fatal(err)
			}
			tx := db.Begin()
			defer tx.Rollback()
			if err := tx.Exec("UPDATE shardid_seg_close SET step = step WHERE biz_key = 'close'").Error; err != nil {
				t.Fatal(err)
			}
			for range 6 { // past the refill point: the next block is fetched, and waits on the row
				if _, err := s.Next(ctx); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(10 * time.Second)
			for segmentGoroutines() == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if segmentGoroutines() == 0 {
				t.Fatal("no background fetch started")
			}
			var wg sync.WaitGroup
			for range 2 {
				wg.Add(1)
				go func() { defer wg.Done(); s.Close() }()
			}
			wg.Wait()
			// The fetch's goroutine has signalled Close as it returns (its
			// deferred Done): it may still be on its way out for a moment.
			// One that stays is a leak.
			deadline = time.Now().Add(2 * time.Second)
			for segmentGoroutines() != 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if n := segmentGoroutines(); n != 0 {
				t.Errorf("%d goroutines of the allocator are left 2 s after Close", n)
			}
			if _, err := s.Next(ctx); !errors.Is(err, shardid.ErrClosed) {
				t.Errorf("Next after Close: %v, want ErrClosed", err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("a third Close: %v", err)
			}
		})
	}
}
