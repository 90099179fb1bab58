package shardid_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardid/shardid"
)

// E2ERow is the table the end-to-end test's processes write to.
type E2ERow struct {
	ID     shardid.ID
	UserID int64 `shardid:"key"`
	Proc   int
}

// helperInsert is the body of one end-to-end process: lease a worker id,
// insert rows as fast as it can, step its clock back half way if told to,
// and report what it wrote.
func helperInsert(t *testing.T, store shardid.LeaseStore) {
	seconds, _ := time.ParseDuration(os.Getenv("SHARDID_E2E_FOR"))
	step, _ := time.ParseDuration(os.Getenv("SHARDID_E2E_STEP"))
	proc := os.Getenv("SHARDID_E2E_PROC")
	var offset atomic.Int64
	var opts []shardid.GeneratorOption
	if step > 0 {
		opts = append(opts, shardid.WithClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }))
	}
	ctx := context.Background()
	l, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: store, Layout: eightWorkers,
		TTL: 3 * time.Second, Wait: true, Options: opts})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	defer l.Close(ctx)
	p, _ := shardid.NewPlugin(shardid.PluginConfig{Generator: l.Generator()})
	db := openPostgres(t)
	if err := db.Use(p); err != nil {
		fmt.Println("error", err)
		return
	}
	var rows, dups, refused int
	start := time.Now()
	stepped := false
	for time.Since(start) < seconds {
		if step > 0 && !stepped && time.Since(start) > seconds/2 {
			offset.Store(int64(-step)) // the clock is set back, mid-run
			stepped = true
		}
		batch := make([]E2ERow, 100)
		for i := range batch {
			batch[i] = E2ERow{UserID: rand.Int64N(1 << 30), Proc: len(proc)}
		}
		err := db.Create(&batch).Error
		switch {
		case err == nil:
			rows += len(batch)
		case strings.Contains(err.Error(), "23505"):
			dups++
		case errors.Is(err, shardid.ErrClockBackwards), errors.Is(err, shardid.ErrLeaseLost):
			refused++ // nothing written; try again shortly
			time.Sleep(10 * time.Millisecond)
		default:
			fmt.Println("error", err)
			return
		}
	}
	fmt.Printf("rows %d dups %d refused %d worker %d\n", rows, dups, refused, l.Worker())
}

// Eight processes with leased worker ids insert into one PostgreSQL table
// with a primary key as fast as they can, for 20 seconds (3 with -short);
// half way, one process's clock is set back by 800ms and another's by 3s.
// No insert fails on a duplicate key, and the table holds exactly the rows
// the processes say they wrote.
func TestLeaseEndToEnd(t *testing.T) {
	duration := 20 * time.Second
	if testing.Short() {
		duration = 3 * time.Second
	}
	db := openPostgres(t)
	fresh(t, db, &E2ERow{})
	const ns = "shardid_e2e"
	db.Exec("DROP TABLE IF EXISTS " + ns)

	var outs []*bufio.Reader
	var waits []func() error
	for i := range 8 {
		step := "0s"
		switch i {
		case 0:
			step = "800ms"
		case 1:
			step = "3s"
		}
		cmd := helperProcess(t, "insert", "SHARDID_STORE=postgres", "SHARDID_NS="+ns,
			"SHARDID_E2E_FOR="+duration.String(), "SHARDID_E2E_STEP="+step, "SHARDID_E2E_PROC="+strings.Repeat("x", i))
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, bufio.NewReader(out))
		waits = append(waits, cmd.Wait)
	}
	var total, dups int
	workers := map[int]bool{}
	for i, out := range outs {
		line, _ := out.ReadString('\n')
		var rows, d, refused, w int
		if _, err := fmt.Sscanf(line, "rows %d dups %d refused %d worker %d", &rows, &d, &refused, &w); err != nil {
			t.Fatalf("process %d said %q", i, line)
		}
		t.Logf("process %d (worker %d): %d rows, %d duplicate-key errors, %d batches refused", i, w, rows, d, refused)
		total += rows
		dups += d
		workers[w] = true
	}
	for _, wait := range waits {
		wait()
	}
	var stored int64
	db.Model(&E2ERow{}).Count(&stored)
	if dups != 0 {
		t.Errorf("%d duplicate-key errors", dups)
	}
	if stored != int64(total) {
		t.Errorf("the table holds %d rows, the processes wrote %d", stored, total)
	}
	if len(workers) != 8 {
		t.Errorf("the processes held %d distinct worker ids, want 8", len(workers))
	}
	t.Logf("%d rows in %v from 8 processes", stored, duration)
}
