package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// MonRow is the model of the monitoring tests.
type MonRow struct {
	ID     shardid.ID
	UserID int64 `shardid:"key"`
	Note   string
}

func monPlugin(t testing.TB, shards int) *shardid.Plugin {
	t.Helper()
	g, err := shardid.NewGenerator(moveLayout, shardid.WithWorker(3))
	if err != nil {
		t.Fatal(err)
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{Generator: g, LogicalShards: shards})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRouterStatsDatabaseDown routes to two databases, one of which (a
// PostgreSQL of the test's own) is stopped: every failing statement is
// counted against its database and its logical shard, and the other
// database counts nothing.
func TestRouterStatsDatabaseDown(t *testing.T) {
	pg := startPostgresInstance(t)
	down, err := gorm.Open(postgres.Open(pg.DSN()), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, down)
	lite := openSQLite(t)
	h := &logRecorder{}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{lite, down}, Names: []string{"lite", "pgown"},
		LogicalShards: 4, Plugin: monPlugin(t, 4), Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Migrate(ctx, &MonRow{}); err != nil {
		t.Fatal(err)
	}
	var ids []shardid.ID // one row per logical shard
	for key := range int64(4) {
		row := MonRow{UserID: key}
		if err := r.ForKey(key).Create(&row).Error; err != nil {
			t.Fatal(err)
		}
		ids = append(ids, row.ID)
	}
	// Not found is not a failure.
	var got MonRow
	if err := r.ForShard(0).WithContext(ctx).First(&got, "note = ?", "nope").Error; !errors.Is(err, gorm.ErrRecordNotFound) {
		t.Fatal(err)
	}

	pg.Stop()
	if err := r.ForKey(2).Create(&MonRow{UserID: 6}).Error; err == nil {
		t.Fatal("a create on a stopped database succeeded")
	}
	if err := r.Get(ctx, &got, ids[3]); err == nil {
		t.Fatal("a Get on a stopped database succeeded")
	}
	if err := r.Get(ctx, &got, ids[1]); err != nil {
		t.Fatalf("a Get on the database that is up: %v", err)
	}
	rows, err := shardid.Gather(ctx, r, shardid.GatherOptions{}, func(m MonRow) shardid.ID { return m.ID },
		func(ctx context.Context, db *gorm.DB) ([]MonRow, error) {
			var out []MonRow
			return out, db.Find(&out).Error
		})
	if err == nil || len(rows) != 2 {
		t.Fatalf("Gather with one database down: %d rows, %v; want 2 rows and an error", len(rows), err)
	}

	s := r.Stats()
	want := []shardid.DatabaseStats{{Name: "lite", Shards: 2, Errors: 0}, {Name: "pgown", Shards: 2, Errors: 3}}
	if !slices.Equal(s.Databases, want) {
		t.Errorf("Databases = %+v, want %+v", s.Databases, want)
	}
	// Gather ran once per database, through its first shard: 2 on pgown.
	wantShards := []shardid.ShardErrors{{Shard: 2, Database: "pgown", Errors: 2}, {Shard: 3, Database: "pgown", Errors: 1}}
	if !slices.Equal(s.FailingShards, wantShards) {
		t.Errorf("FailingShards = %+v, want %+v", s.FailingShards, wantShards)
	}
	if s.Gather.Count != 1 || s.Gather.Sum <= 0 {
		t.Errorf("Gather = %+v, want one observation", s.Gather)
	}
	ev := h.events(shardid.EventDatabaseError)
	if len(ev) != 1 || ev[0].level != slog.LevelWarn || ev[0].attrs["database"].String() != "pgown" {
		t.Errorf("logged %+v, want one routed-statement failure on pgown (the others held back)", ev)
	}
}

// dropMonSchemas drops the schemas of the move test on both databases.
func dropMonSchemas(t *testing.T, dbs ...*gorm.DB) {
	t.Helper()
	for _, db := range dbs {
		for s := range moveShards {
			if err := db.Exec(fmt.Sprintf(`DROP SCHEMA IF EXISTS shardid_mon_%04d CASCADE`, s)).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestMoveStatsAndEvents moves a shard twice between two PostgreSQL
// databases: the first move fails after its fence (a fence of 1ms lapses
// before the move can seal the old copy), the second succeeds. Router.Stats follows each move and
// the router's logger gets the fence set, lifted, and the move's outcome; a
// router still on the old map counts the write the old copy refuses.
func TestMoveStatsAndEvents(t *testing.T) {
	a := openPostgres(t)
	b := openSecondPostgres(t)
	dropMonSchemas(t, a, b)
	t.Cleanup(func() { dropMonSchemas(t, a, b) })
	h := &logRecorder{}
	p := monPlugin(t, moveShards)
	newRouter := func(logger *slog.Logger) *shardid.Router {
		r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{a, b}, Names: []string{"pg1", "pg2"},
			LogicalShards: moveShards, SchemaPattern: "shardid_mon_%04d", Plugin: p, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := newRouter(slog.New(h))
	stale := newRouter(nil) // never told of the move
	ctx := context.Background()
	if err := r.Migrate(ctx, &MonRow{}); err != nil {
		t.Fatal(err)
	}
	const shard, rows = 3, 50
	for i := range rows {
		if err := r.ForKey(int64(shard + moveShards*i)).Create(&MonRow{UserID: int64(shard + moveShards*i)}).Error; err != nil {
			t.Fatal(err)
		}
	}
	from, to := r.DatabaseName(shard), "pg2"
	if from == to {
		to = "pg1"
	}

	// A fence of 1ms cannot cover the final copy: the move fails after
	// fencing, and lifts its fence.
	var stages []string
	progressed := 0
	_, err := r.MoveShard(ctx, nil, shard, to, shardid.MoveOptions{Models: []any{&MonRow{}}, FenceFor: time.Millisecond,
		OnStage: func(s string) { stages = append(stages, s) }, Progress: func(string, int64) { progressed++ }})
	if !errors.Is(err, shardid.ErrFenceLapsed) {
		t.Fatalf("a move with a 1ms fence: %v, want ErrFenceLapsed", err)
	}
	s := r.Stats()
	if len(s.Moves) != 1 {
		t.Fatalf("Moves = %+v, want one", s.Moves)
	}
	m := s.Moves[0]
	if m.Shard != shard || m.From != from || m.To != to || m.Stage != "failed" || m.Err == nil ||
		m.RowsCopied != 2*rows || m.Fenced <= 0 || m.Ended.IsZero() {
		t.Errorf("the failed move: %+v", m)
	}
	if !slices.Equal(stages, []string{"created", "copied", "fenced", "verified"}) || progressed != 2 {
		t.Errorf("the caller's OnStage saw %v and Progress %d calls", stages, progressed)
	}
	var msgs []string
	for _, e := range h.events(shardid.EventFenceSet, shardid.EventFenceLifted, shardid.EventMoveFailed, shardid.EventShardMoved) {
		msgs = append(msgs, e.msg)
	}
	if want := []string{shardid.EventFenceSet, shardid.EventFenceLifted, shardid.EventMoveFailed}; !slices.Equal(msgs, want) {
		t.Errorf("logged %q, want %q", msgs, want)
	}
	if err := r.ForKey(shard).Create(&MonRow{UserID: shard}).Error; err != nil {
		t.Fatalf("a write after the failed move: %v", err)
	}

	res, err := r.MoveShard(ctx, nil, shard, to, shardid.MoveOptions{Models: []any{&MonRow{}}})
	if err != nil {
		t.Fatal(err)
	}
	s = r.Stats()
	if len(s.Moves) != 1 {
		t.Fatalf("Moves = %+v, want the last move of shard %d only", s.Moves, shard)
	}
	m = s.Moves[0]
	if m.Stage != "flipped" || m.Err != nil || m.RowsCopied != 2*(rows+1) || m.Fenced != res.Fenced || m.Fenced <= 0 {
		t.Errorf("the move: %+v (result %+v)", m, res)
	}
	msgs = msgs[:0]
	ev := h.events(shardid.EventFenceSet, shardid.EventFenceLifted, shardid.EventMoveFailed, shardid.EventShardMoved)
	for _, e := range ev {
		msgs = append(msgs, e.msg)
	}
	// The fence for the move, then the seal: the old copy fenced for good.
	if want := []string{shardid.EventFenceSet, shardid.EventFenceLifted, shardid.EventMoveFailed,
		shardid.EventFenceSet, shardid.EventFenceSet, shardid.EventShardMoved}; !slices.Equal(msgs, want) {
		t.Fatalf("logged %q, want %q", msgs, want)
	}
	if seal := ev[len(ev)-2]; !seal.attrs["for_good"].Bool() || seal.attrs["database"].String() != from {
		t.Errorf("the seal: %+v", seal.attrs)
	}
	if last := ev[len(ev)-1]; last.attrs["rows_copied"].Int64() != 2*(rows+1) || last.attrs["to"].String() != to {
		t.Errorf("the moved event: %+v", last.attrs)
	}
	for _, d := range s.Databases {
		if d.Errors != 0 {
			t.Errorf("database %s counted %d errors", d.Name, d.Errors)
		}
	}

	// A router that has not followed writes to the old copy, fenced for
	// good: a fenced write, not a database error.
	if err := stale.ForKey(shard).Create(&MonRow{UserID: shard}).Error; !errors.Is(err, shardid.ErrShardMoving) {
		t.Fatalf("a write to the old copy: %v", err)
	}
	if s := stale.Stats(); s.FencedWrites != 1 || len(s.FailingShards) != 0 {
		t.Errorf("the stale router: %+v", s)
	}
}
