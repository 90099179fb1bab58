package shardid_test

import (
	"context"
	"math/big"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// Aggregates over all shards, grouped and not, equal what Go computes from
// every row: counts, exact sums (of IDs, past int64), minima, maxima and
// averages.
func TestAggregate(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			dbs := fanDBs(t, kind)
			r := fanRouter(t, dbs, "fo_a_%04d", 12)
			all := seed(t, r, 5)
			ctx := context.Background()
			n := statements(t, dbs)
			rows, err := shardid.Aggregate(ctx, r, shardid.AggregateOptions{
				GroupBy: []string{"likes"},
				Columns: []shardid.AggregateColumn{
					{Func: shardid.AggCount, Expr: "*"},
					{Func: shardid.AggSum, Expr: "id"},
					{Func: shardid.AggMin, Expr: "id"},
					{Func: shardid.AggMax, Expr: "caption"},
					{Func: shardid.AggAvg, Expr: "user_id"},
				},
			}, func(ctx context.Context, db *gorm.DB) *gorm.DB { return db.Model(&FPhoto{}).Where("user_id >= ?", 3) })
			if err != nil {
				t.Fatal(err)
			}
			if st := n.Load(); st != 2 {
				t.Errorf("%d statements, want 2 (one per database)", st)
			}
			type want struct {
				count   int64
				sum     *big.Int
				minID   shardid.ID
				maxCap  string
				sumUser int64
			}
			wants := map[int64]*want{}
			for _, p := range all {
				if p.UserID < 3 {
					continue
				}
				w := wants[p.Likes]
				if w == nil {
					w = &want{sum: new(big.Int), minID: p.ID, maxCap: p.Caption}
					wants[p.Likes] = w
				}
				w.count++
				w.sum.Add(w.sum, big.NewInt(int64(p.ID)))
				w.minID = min(w.minID, p.ID)
				w.maxCap = max(w.maxCap, p.Caption)
				w.sumUser += p.UserID
			}
			if len(rows) != len(wants) {
				t.Fatalf("%d groups, want %d", len(rows), len(wants))
			}
			overflow := false
			for _, row := range rows {
				likes, ok := row.Group[0].(int64)
				if !ok {
					t.Fatalf("group %T %v, want an int64", row.Group[0], row.Group[0])
				}
				w := wants[likes]
				if w == nil {
					t.Fatalf("group %d was not expected", likes)
				}
				if row.Values[0] != w.count {
					t.Errorf("likes %d: count %v, want %d", likes, row.Values[0], w.count)
				}
				if s := row.Values[1].(*big.Rat); !s.IsInt() || s.Num().Cmp(w.sum) != 0 {
					t.Errorf("likes %d: sum(id) %v, want %v", likes, s, w.sum)
				}
				if !w.sum.IsInt64() {
					overflow = true
				}
				if got, _ := row.Values[2].(int64); shardid.ID(got) != w.minID {
					t.Errorf("likes %d: min(id) %v (%T), want %d", likes, row.Values[2], row.Values[2], w.minID)
				}
				if row.Values[3] != w.maxCap {
					t.Errorf("likes %d: max(caption) %v, want %q", likes, row.Values[3], w.maxCap)
				}
				if avg, wantAvg := row.Values[4].(*big.Rat), big.NewRat(w.sumUser, w.count); avg.Cmp(wantAvg) != 0 {
					t.Errorf("likes %d: avg(user_id) %v, want %v", likes, avg, wantAvg)
				}
			}
			if !overflow {
				t.Errorf("no sum of IDs went past int64: the test does not check exact sums")
			}
			count, err := shardid.GatherCount(ctx, r, func(ctx context.Context, db *gorm.DB) *gorm.DB {
				return db.Model(&FPhoto{}).Where("likes <> ?", 5)
			})
			var wantCount int64
			for _, p := range all {
				if p.Likes != 5 {
					wantCount++
				}
			}
			if err != nil || count != wantCount {
				t.Errorf("GatherCount %d, %v; want %d", count, err, wantCount)
			}
			none, err := shardid.Aggregate(ctx, r, shardid.AggregateOptions{Columns: []shardid.AggregateColumn{
				{Func: shardid.AggCount, Expr: "*"}, {Func: shardid.AggSum, Expr: "likes"}, {Func: shardid.AggAvg, Expr: "likes"}, {Func: shardid.AggMax, Expr: "id"},
			}}, func(ctx context.Context, db *gorm.DB) *gorm.DB { return db.Model(&FPhoto{}).Where("likes > 100") })
			if err != nil || len(none) != 1 || none[0].Values[0] != int64(0) || none[0].Values[1] != nil || none[0].Values[2] != nil || none[0].Values[3] != nil {
				t.Errorf("aggregates of no rows: %+v, %v; want count 0 and nil sum, avg and max", none, err)
			}
		})
	}
}
