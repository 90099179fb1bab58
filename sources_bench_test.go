package shardid_test

import (
	"context"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// BenchmarkIDSources compares a database round trip per ID (ticket servers)
// with segment mode (IDs from memory, blocks fetched in the background).
func BenchmarkIDSources(b *testing.B) {
	ctx := context.Background()
	my, pg := openMySQLTB(b), openPostgres(b)
	for _, tc := range []struct {
		name string
		db   *gorm.DB
	}{{"tickets/mysql", my}, {"tickets/postgres", pg}} {
		b.Run(tc.name, func(b *testing.B) {
			tickets, err := shardid.NewTicketAllocator(ctx, shardid.TicketConfig{Servers: []*gorm.DB{tc.db}, Name: "shardid_t_bench"})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tickets.Next(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	pg.Exec("DROP TABLE IF EXISTS shardid_seg_bench")
	seg, err := shardid.NewSegmentAllocator(ctx, shardid.SegmentConfig{DB: pg, Table: "shardid_seg_bench", Key: "bench", Step: 10000})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("segments/postgres", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := seg.Next(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("segments/postgres/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(p *testing.PB) {
			for p.Next() {
				if _, err := seg.Next(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
