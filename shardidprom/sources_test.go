package shardidprom_test

import (
	"context"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardidprom"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// openPostgres opens the test server named by SHARDID_TEST_POSTGRES_DSN;
// it skips loudly when it is unreachable, and fails under CI=true.
func openPostgres(t *testing.T) *gorm.DB {
	t.Helper()
	dsn := os.Getenv("SHARDID_TEST_POSTGRES_DSN")
	if dsn == "" {
		dsn = "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable"
	}
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err == nil {
		var sqlDB interface{ Close() error }
		if sqlDB, err = db.DB(); err == nil {
			t.Cleanup(func() { sqlDB.Close() })
			err = db.Exec("SELECT 1").Error
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL unreachable under CI=true: %v", err)
		}
		t.Skipf("SKIPPING: PostgreSQL unreachable (set SHARDID_TEST_POSTGRES_DSN): %v", err)
	}
	return db
}

// TestCollectorSources exports a segment allocator and a ticket allocator
// on PostgreSQL and checks their series.
func TestCollectorSources(t *testing.T) {
	db := openPostgres(t)
	db.Exec("DROP TABLE IF EXISTS shardid_prom_segments")
	db.Exec("DROP SEQUENCE IF EXISTS shardid_prom_tickets")
	t.Cleanup(func() {
		db.Exec("DROP TABLE IF EXISTS shardid_prom_segments")
		db.Exec("DROP SEQUENCE IF EXISTS shardid_prom_tickets")
	})
	ctx := context.Background()
	seg, err := shardid.NewSegmentAllocator(ctx, shardid.SegmentConfig{DB: db, Table: "shardid_prom_segments", Key: "k",
		Step: 100, MinStep: 100, MaxStep: 100})
	if err != nil {
		t.Fatal(err)
	}
	for range 30 {
		if _, err := seg.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tickets, err := shardid.NewTicketAllocator(ctx, shardid.TicketConfig{Servers: []*gorm.DB{db}, Name: "shardid_prom_tickets"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := tickets.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c := shardidprom.NewCollector()
	if err := c.AddSegments("orders", seg); err != nil {
		t.Fatal(err)
	}
	if err := c.AddTickets("users", tickets); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	got := samples(scrape(t, srv.URL))
	for s, v := range map[series]float64{
		{"shardid_segment_refills_total", "source=orders"}:           1,
		{"shardid_segment_refill_failures_total", "source=orders"}:   0,
		{"shardid_segment_refill_duration_seconds", "source=orders"}: 1,
		{"shardid_segment_waits_total", "source=orders"}:             0,
		{"shardid_segment_step", "source=orders"}:                    100,
		{"shardid_segment_remaining", "source=orders"}:               70,
		{"shardid_ticket_issued_total", "server=0,source=users"}:     3,
		{"shardid_ticket_failures_total", "server=0,source=users"}:   0,
		{"shardid_ticket_skips_total", "server=0,source=users"}:      0,
		{"shardid_ticket_server_resting", "server=0,source=users"}:   0,
	} {
		m, ok := got[s]
		if !ok {
			t.Errorf("no series %s{%s}", s.name, s.labels)
			continue
		}
		if value(m) != v {
			t.Errorf("%s{%s} = %v, want %v", s.name, s.labels, value(m), v)
		}
	}
}
