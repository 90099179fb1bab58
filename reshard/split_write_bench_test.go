package reshard_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/routesql"
	"github.com/shardid/shardid/reshard"
)

// BenchmarkMonolithWritePostgres measures what a split's triggers cost
// each write of the application on the monolith, in a shard not yet
// split: an INSERT of a photo with an ID of the layout and an UPDATE of
// its caption, sent as the application would (no transaction of their
// own, one round trip each), to three monoliths, one in each stage (an op
// is a pair of writes to each; <stage>-ns/op is the time of its pair):
//
//   - monolith: no split, the floor;
//   - split: a split under way without SplitConfig.Layout, its change
//     log's triggers on the monolith;
//   - split+ids: the same with Layout, its triggers also checking each
//     written row's ID against the shard of its key.
//
// Run it so, and compare the stages of one line:
//
//	go test -run '^$' -bench 'BenchmarkMonolithWrite' -benchmem -count 5 ./reshard
func BenchmarkMonolithWritePostgres(b *testing.B) {
	benchMonolithWrite(b, func() *splitEnv { return newSplitEnvPG(b, 8, 16, 1, 1) }, "pg_a",
		"INSERT INTO photos (id, user_id, caption) VALUES ($1, $2, $3)", "UPDATE photos SET caption = $1 WHERE id = $2")
}

// BenchmarkMonolithWriteMariaDB is BenchmarkMonolithWritePostgres on
// MariaDB.
func BenchmarkMonolithWriteMariaDB(b *testing.B) {
	benchMonolithWrite(b, func() *splitEnv { return newSplitEnvMySQL(b, 8, 16, 1, 1) }, "my_a",
		"INSERT INTO photos (id, user_id, caption) VALUES (?, ?, ?)", "UPDATE photos SET caption = ? WHERE id = ?")
}

func benchMonolithWrite(b *testing.B, newEnv func() *splitEnv, target, insert, update string) {
	ctx := context.Background()
	gen, err := shardid.NewGenerator(shardid.Instagram)
	if err != nil {
		b.Fatal(err)
	}
	stages := []string{"monolith", "split", "split+ids"}
	var dbs []*sql.DB
	for _, stage := range stages {
		e := newEnv()
		if stage != "monolith" {
			cfg := e.cfg
			if stage == "split+ids" {
				cfg = withLayout(b, e)
			}
			// Shard 0 goes; the monolith's triggers stay for the others.
			if _, err := reshard.SplitShards(ctx, cfg, []int{0}, []string{target}, reshard.SplitOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		db, err := e.dbs[0].DB()
		if err != nil {
			b.Fatal(err)
		}
		// The stage is what it says: only split+ids refuses an ID of
		// another shard than its key's.
		wrong, err := gen.Next(2)
		if err != nil {
			b.Fatal(err)
		}
		_, err = db.ExecContext(ctx, insert, int64(wrong), 1, "wrong")
		if refused := err != nil && strings.Contains(err.Error(), routesql.KeyMismatchMessage); refused != (stage == "split+ids") || err != nil && !refused {
			b.Fatalf("%s: an ID of shard 2 for user 1: %v", stage, err)
		}
		dbs = append(dbs, db)
	}
	const user = 1 // shard 1 of 8: still in the monolith
	spent := make([]time.Duration, len(stages))
	i := 0
	for b.Loop() {
		// Each op writes to each stage's monolith once, first one and
		// then the next in turn, so that what slows the server down for
		// a while (a checkpoint, the other core's load) slows all three.
		for k := range stages {
			j := (i + k) % len(stages)
			id, err := gen.Next(user % 8)
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			if _, err := dbs[j].ExecContext(ctx, insert, int64(id), user, "new"); err != nil {
				b.Fatal(err)
			}
			if _, err := dbs[j].ExecContext(ctx, update, "edited", int64(id)); err != nil {
				b.Fatal(err)
			}
			spent[j] += time.Since(t0)
		}
		i++
	}
	for j, stage := range stages {
		b.ReportMetric(float64(spent[j].Nanoseconds())/float64(b.N), stage+"-ns/op")
	}
}
