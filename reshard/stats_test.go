package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// MonRow is the model of the monitoring test.
type MonRow struct {
	ID     shardid.ID
	UserID int64 `shardid:"key"`
	Note   string
}

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu      sync.Mutex // protects records
	records []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// event is a logged record: its message, level and attributes by key.
type event struct {
	msg   string
	level slog.Level
	attrs map[string]slog.Value
}

// events returns the records logged so far with one of msgs, in order.
func (h *logRecorder) events(msgs ...string) []event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []event
	for _, r := range h.records {
		if slices.Contains(msgs, r.Message) {
			e := event{msg: r.Message, level: r.Level, attrs: map[string]slog.Value{}}
			r.Attrs(func(a slog.Attr) bool { e.attrs[a.Key] = a.Value; return true })
			out = append(out, e)
		}
	}
	return out
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
	ownDatabases(t)
	a := openPostgres(t)
	b := openSecondPostgresTB(t)
	dropMonSchemas(t, a, b)
	t.Cleanup(func() { dropMonSchemas(t, a, b) })
	h := &logRecorder{}
	p := movePlugin(t, 3)
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
	_, err := reshard.MoveShard(ctx, r, nil, shard, to, reshard.MoveOptions{Models: []any{&MonRow{}}, FenceFor: time.Millisecond,
		OnStage: func(s string) { stages = append(stages, s) }, Progress: func(string, int64) { progressed++ }})
	if !errors.Is(err, reshard.ErrFenceLapsed) {
		t.Fatalf("a move with a 1ms fence: %v, want ErrFenceLapsed", err)
	}
	s := r.Stats()
	if len(s.Moves) != 1 {
		t.Fatalf("Moves = %+v, want one", s.Moves)
	}
	m := s.Moves[0]
	if m.Shard != shard || m.From != from || m.To != to || m.Stage != "failed" || m.Err == nil ||
		m.RowsCopied != rows || m.Fenced <= 0 || m.Ended.IsZero() {
		t.Errorf("the failed move: %+v", m)
	}
	if !slices.Equal(stages, []string{"created", "copied", "fenced", "verified"}) || progressed < 1 {
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

	// Three writes after the copy reach the target through the change log.
	const late = 3
	res, err := reshard.MoveShard(ctx, r, nil, shard, to, reshard.MoveOptions{Models: []any{&MonRow{}},
		OnStage: func(s string) {
			if s != "copied" {
				return
			}
			for i := range late {
				if err := r.ForKey(shard).Create(&MonRow{UserID: int64(shard + moveShards*(rows+i))}).Error; err != nil {
					t.Errorf("a write during the move: %v", err)
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	s = r.Stats()
	if len(s.Moves) != 1 {
		t.Fatalf("Moves = %+v, want the last move of shard %d only", s.Moves, shard)
	}
	m = s.Moves[0]
	if m.ChangesApplied < late || m.Backlog != 0 {
		t.Errorf("the move applied %d changes, %d left in its log; want at least %d, and 0", m.ChangesApplied, m.Backlog, late)
	}
	if m.Stage != "flipped" || m.Err != nil || m.RowsCopied != rows+1 || m.Fenced != res.Fenced || m.Fenced <= 0 {
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
	if last := ev[len(ev)-1]; last.attrs["rows_copied"].Int64() != rows+1 || last.attrs["to"].String() != to {
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

	// An operator's Fence and Unfence of another shard are events too.
	if err := reshard.Fence(ctx, r, 5, []any{&MonRow{}}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := reshard.Unfence(ctx, r, 5, []any{&MonRow{}}); err != nil {
		t.Fatal(err)
	}
	ev = h.events(shardid.EventFenceSet, shardid.EventFenceLifted)
	if n := len(ev); n < 2 || ev[n-2].msg != shardid.EventFenceSet || ev[n-2].attrs["shard"].Int64() != 5 ||
		ev[n-2].attrs["for"].Duration() != time.Minute || ev[n-1].msg != shardid.EventFenceLifted || ev[n-1].attrs["shard"].Int64() != 5 {
		t.Errorf("Fence and Unfence logged %+v", ev)
	}
}
