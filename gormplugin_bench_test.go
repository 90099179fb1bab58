package shardid

import (
	"context"
	"math/rand/v2"
	"reflect"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

type benchRow struct {
	ID      ID
	UserID  int64 `shardid:"key"`
	Caption string
}

// BenchmarkAssignIDs measures the create callback alone: no SQL is built or
// sent. It reports the cost per row of a 10,000-row slice.
func BenchmarkAssignIDs(b *testing.B) {
	// A dialector that never connects: the statement is built by hand.
	db, err := gorm.Open(postgres.New(postgres.Config{DSN: "host=127.0.0.1 dbname=none"}),
		&gorm.Config{DisableAutomaticPing: true, Logger: logger.Discard})
	if err != nil {
		b.Fatal(err)
	}
	p, err := NewPlugin(PluginConfig{})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		user func(i int) int64
	}{
		// 10,000 IDs on one shard need 9.8 ms of its capacity (1,024/ms):
		// this case measures the layout's limit, not the callback.
		{"one user", func(int) int64 { return 31341 }},
		// Runs of 100 rows per user: the batched NextN path, within capacity.
		{"100 users in runs", func(i int) int64 { return int64(i / 100) }},
		{"random users", func(int) int64 { return rand.Int64N(1 << 40) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rows := make([]benchRow, 10000)
			for i := range rows {
				rows[i].UserID = bc.user(i)
			}
			tx := db.Session(&gorm.Session{NewDB: true, Context: context.Background()})
			if err := tx.Statement.Parse(&benchRow{}); err != nil {
				b.Fatal(err)
			}
			tx.Statement.ReflectValue = reflect.ValueOf(rows)
			b.ReportAllocs()
			for b.Loop() {
				for i := range rows {
					rows[i].ID = 0
				}
				p.assignIDs(tx)
				if tx.Error != nil {
					b.Fatal(tx.Error)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rows)), "ns/row")
		})
	}
}

func TestAssignIDsAllocations(t *testing.T) {
	db, err := gorm.Open(postgres.New(postgres.Config{DSN: "host=127.0.0.1 dbname=none"}),
		&gorm.Config{DisableAutomaticPing: true, Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := NewPlugin(PluginConfig{})
	rows := make([]benchRow, 1000)
	for i := range rows {
		rows[i].UserID = int64(i * 7)
	}
	tx := db.Session(&gorm.Session{NewDB: true, Context: context.Background()})
	if err := tx.Statement.Parse(&benchRow{}); err != nil {
		t.Fatal(err)
	}
	tx.Statement.ReflectValue = reflect.ValueOf(rows)
	allocs := testing.AllocsPerRun(20, func() {
		for i := range rows {
			rows[i].ID = 0
		}
		p.assignIDs(tx)
	})
	// The callback may allocate per statement, never per row.
	if allocs > 5 {
		t.Errorf("assigning 1,000 IDs took %v allocations", allocs)
	}
	for i, r := range rows {
		if r.ID == 0 || r.ID.Shard() != int(r.UserID%2000) {
			t.Fatalf("row %d: %+v", i, r)
		}
	}
}
