package shardid_test

import (
	"context"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// TestTicketStats: two PostgreSQL ticket servers, the second one of the
// test's own; it is stopped, fails once and is then skipped while it rests.
func TestTicketStats(t *testing.T) {
	one := openPostgres(t)
	one.Exec("DROP SEQUENCE IF EXISTS shardid_t_mon")
	t.Cleanup(func() { one.Exec("DROP SEQUENCE IF EXISTS shardid_t_mon") })
	pg := startPostgresInstance(t)
	two, err := gorm.Open(postgres.Open(pg.DSN()), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, two)
	ctx := context.Background()
	tickets, err := shardid.NewTicketAllocator(ctx, shardid.TicketConfig{
		Servers: []*gorm.DB{one, two}, Name: "shardid_t_mon", RetryAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, err := tickets.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s := tickets.Stats()
	if len(s.Servers) != 2 || s.Servers[0].Tickets != 10 || s.Servers[1].Tickets != 10 ||
		s.Servers[0].Failures+s.Servers[1].Failures+s.Servers[0].Skips+s.Servers[1].Skips != 0 {
		t.Fatalf("both up: %+v", s)
	}
	pg.Stop()
	// The servers take turns: 5 of the 10 calls go to the stopped one
	// first. The first fails over to the other; the next 4 skip it.
	for range 10 {
		if _, err := tickets.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s = tickets.Stats()
	want := []shardid.TicketServerStats{
		{Server: 0, Tickets: 20},
		{Server: 1, Tickets: 10, Failures: 1, Skips: 4, Resting: true},
	}
	if s.Servers[0] != want[0] || s.Servers[1] != want[1] {
		t.Errorf("one down: %+v, want %+v", s.Servers, want)
	}
}

// TestSegmentStats: blocks of 10 from a PostgreSQL of the test's own, which
// then stops: refills fail and callers wait.
func TestSegmentStats(t *testing.T) {
	pg := startPostgresInstance(t)
	db, err := gorm.Open(postgres.Open(pg.DSN()), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, db)
	ctx := context.Background()
	seg, err := shardid.NewSegmentAllocator(ctx, shardid.SegmentConfig{DB: db, Key: "mon", Step: 10, MinStep: 10, MaxStep: 10})
	if err != nil {
		t.Fatal(err)
	}
	if s := seg.Stats(); s.Key != "mon" || s.Step != 10 || s.Refills != 1 || s.Remaining != 10 || s.RefillLatency.Count != 1 {
		t.Fatalf("a new allocator: %+v", s)
	}
	for range 35 {
		if _, err := seg.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s := seg.Stats()
	if s.Refills < 4 || s.RefillFailures != 0 || s.Remaining > 10 {
		t.Errorf("after 35 IDs in blocks of 10: %+v", s)
	}
	pg.Stop()
	var failed bool
	for range 40 {
		if _, err := seg.Next(ctx); err != nil {
			failed = true
			break
		}
	}
	if !failed {
		t.Fatal("40 IDs with the database down and blocks of 10")
	}
	s = seg.Stats()
	if s.RefillFailures == 0 || s.Waits == 0 || s.Remaining != 0 {
		t.Errorf("with the database down: %+v", s)
	}
}
