package shardid_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

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
	layout, _ := shardid.Instagram.WithWorkerBits(2)
	g, err := shardid.NewGenerator(layout, shardid.WithWorker(3))
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

// A move's record adds up the changes each round of catching up applied,
// and keeps the backlog of the last round.
func TestMoveRecordCaughtUp(t *testing.T) {
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{openSQLite(t), openSQLite(t)},
		Names: []string{"a", "b"}, LogicalShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	m := r.RecordMove(1, "a", "b")
	m.CaughtUp(5000, 1200)
	if st := r.Stats().Moves[0]; st.ChangesApplied != 5000 || st.Backlog != 1200 {
		t.Errorf("after one round: applied %d, backlog %d; want 5000, 1200", st.ChangesApplied, st.Backlog)
	}
	m.CaughtUp(1200, 0)
	if st := r.Stats().Moves[0]; st.ChangesApplied != 6200 || st.Backlog != 0 {
		t.Errorf("after two rounds: applied %d, backlog %d; want 6200, 0", st.ChangesApplied, st.Backlog)
	}
}
