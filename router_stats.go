package shardid

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
)

// callbackStats is the name of the callbacks that count a router's errors.
const callbackStats = PluginName + ":stats"

// EventDatabaseError is logged (at Warn) by a Router with a Logger when a
// statement routed to a logical shard fails, at most once per 10s with the
// number held back.
const EventDatabaseError = "shardid: routed statement failed"

// RouterStats is a snapshot of a Router.
type RouterStats struct {
	// Databases are the physical databases, in the order of the config.
	Databases []DatabaseStats

	// FailingShards lists the logical shards whose statements failed, with
	// how often, in shard order.
	FailingShards []ShardErrors

	// FencedWrites counts the writes refused with ErrShardMoving.
	FencedWrites uint64

	// Gather is the time each Gather took, from start to merged result.
	Gather Histogram

	// Moves are the moves this router ran, the last one of each shard, in
	// the order they started.
	Moves []MoveStats
}

// DatabaseStats is one physical database of a Router.
type DatabaseStats struct {
	Name string
	// Shards is how many logical shards the current map puts there.
	Shards int
	// Errors counts the statements routed there that failed. Not counted:
	// gorm.ErrRecordNotFound, a cancelled context, and writes refused by a
	// move's fence (FencedWrites).
	Errors uint64
}

// ShardErrors is how many statements routed to one logical shard failed.
type ShardErrors struct {
	Shard int
	// Database is the database the shard is on now.
	Database string
	Errors   uint64
}

// routerStats are a Router's counters.
type routerStats struct {
	logger      *slog.Logger
	dbErrs      []atomic.Uint64 // per database
	shardErrs   []atomic.Uint64 // per logical shard
	fenced      atomic.Uint64
	gather      durationHist
	errLog      eventLimiter
	mu          sync.Mutex // protects moves
	moves       []*MoveRecord
	moveByShard map[int]*MoveRecord
}

// registerStats adds the callbacks that count the errors of routed
// statements to every processor of db, once.
func registerStats(db *gorm.DB) error {
	cb := db.Callback()
	for _, reg := range []struct {
		registered bool
		add        func(string, func(*gorm.DB)) error
	}{
		{cb.Create().Get(callbackStats) != nil, cb.Create().After("gorm:create").Register},
		{cb.Query().Get(callbackStats) != nil, cb.Query().After("gorm:query").Register},
		{cb.Update().Get(callbackStats) != nil, cb.Update().After("gorm:update").Register},
		{cb.Delete().Get(callbackStats) != nil, cb.Delete().After("gorm:delete").Register},
		{cb.Row().Get(callbackStats) != nil, cb.Row().After("gorm:row").Register},
		{cb.Raw().Get(callbackStats) != nil, cb.Raw().After("gorm:raw").Register},
	} {
		if !reg.registered {
			if err := reg.add(callbackStats, countError); err != nil {
				return err
			}
		}
	}
	return nil
}

// countError counts the error of a routed statement.
func countError(db *gorm.DB) {
	if db.Error == nil {
		return
	}
	v, ok := db.Statement.Settings.Load(settingRoute)
	if !ok {
		return
	}
	rt := v.(route)
	rt.r.failed(rt.shard, rt.db, db.Error)
}

// failed counts err, the error of a statement routed to shard on database
// db.
func (r *Router) failed(shard, db int, err error) {
	s := &r.stats
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound), errors.Is(err, context.Canceled):
		return
	case errors.Is(err, ErrShardMoving) || strings.Contains(err.Error(), FenceMessage):
		s.fenced.Add(1)
		return
	}
	if shard < 0 || shard >= len(s.shardErrs) || db < 0 || db >= len(s.dbErrs) {
		return
	}
	s.shardErrs[shard].Add(1)
	s.dbErrs[db].Add(1)
	if s.logger != nil {
		if ok, held := s.errLog.allow(); ok {
			logEvent(s.logger, slog.LevelWarn, EventDatabaseError,
				slog.Int("shard", shard), slog.String("database", r.names[db]),
				slog.Any("error", err), slog.Uint64("held_back", held))
		}
	}
}

// gathered records the time of a Gather that started at start.
func (r *Router) gathered(start time.Time) { r.stats.gather.observe(time.Since(start)) }

// Stats returns a snapshot of the router's counters.
func (r *Router) Stats() RouterStats {
	s := &r.stats
	t := r.smap.Load()
	out := RouterStats{
		Databases:    make([]DatabaseStats, len(r.dbs)),
		FencedWrites: s.fenced.Load(),
		Gather:       s.gather.snapshot(),
	}
	for d := range r.dbs {
		out.Databases[d] = DatabaseStats{Name: r.names[d], Errors: s.dbErrs[d].Load()}
	}
	for shard, d := range t.Assignment() {
		out.Databases[d].Shards++
		if n := s.shardErrs[shard].Load(); n > 0 {
			out.FailingShards = append(out.FailingShards, ShardErrors{Shard: shard, Database: r.names[d], Errors: n})
		}
	}
	s.mu.Lock()
	for _, m := range s.moves {
		out.Moves = append(out.Moves, m.snapshot())
	}
	s.mu.Unlock()
	return out
}

// MoveStats is the progress of a move of a logical shard, as the mover
// (reshard.MoveShard) records it.
type MoveStats struct {
	Shard    int
	From, To string

	// Stage is the last stage the move reached: "started", then as
	// reshard.MoveOptions.OnStage says ("created", "copied", "fenced",
	// "verified", "sealed", "flipped"), or "failed".
	Stage string

	// Started is when the move started; Ended when it flipped or failed,
	// zero while it runs.
	Started, Ended time.Time

	// RowsCopied counts the rows copied to the target, by every pass.
	RowsCopied int64

	// ChangesApplied counts the entries of the change log (a captured
	// insert, update or delete of a row) that the move has applied to the
	// target so far.
	ChangesApplied int64

	// Backlog is the number of captured changes still waiting in the
	// source's change log after the move's last round of catching up:
	// what the fence will have to cover if it came now. It falls toward 0
	// as the move catches up, and is 0 after the last round under the
	// fence.
	Backlog int64

	// Fenced is how long the shard's old copy refused writes for the move
	// before the flip (reshard.MoveResult.Fenced), so far while it runs, or until
	// the move lifted its fence after a failure.
	Fenced time.Duration

	// Err is the move's error, when it failed.
	Err error
}

// MoveRecord is the record of one move of a logical shard, which
// Router.Stats reports and whose events go to the router's Logger. A mover
// (package reshard) makes it with Router.RecordMove and tells it what the
// move reached. Its methods are safe for concurrent use.
type MoveRecord struct {
	r      *Router
	logger *slog.Logger

	mu        sync.Mutex // protects the fields below
	st        MoveStats
	fencedAt  time.Time
	base      int64            // rows copied by the passes done
	lastTable map[string]int64 // rows copied so far by the current pass, per table
}

// RecordMove records the start of a move of logical shard from the
// database named from to the one named to, and returns its record. The
// record replaces that of an earlier move of the shard in Stats.
func (r *Router) RecordMove(shard int, from, to string) *MoveRecord {
	m := &MoveRecord{r: r, logger: r.stats.logger, lastTable: map[string]int64{},
		st: MoveStats{Shard: shard, From: from, To: to, Stage: "started", Started: time.Now()}}
	s := &r.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.moveByShard[shard]; old != nil {
		s.moves = slices.DeleteFunc(s.moves, func(x *MoveRecord) bool { return x == old })
	}
	if s.moveByShard == nil {
		s.moveByShard = make(map[int]*MoveRecord)
	}
	s.moveByShard[shard] = m
	s.moves = append(s.moves, m)
	return m
}

// Stage records that the move reached stage. The copies of a later stage
// are new passes over the tables.
func (m *MoveRecord) Stage(stage string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st.Stage = stage
	for t, n := range m.lastTable {
		m.base += n
		delete(m.lastTable, t)
	}
}

// CaughtUp records a round of catching up with the change log: applied
// more changes applied, backlog left in the log.
func (m *MoveRecord) CaughtUp(applied, backlog int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st.ChangesApplied += applied
	m.st.Backlog = backlog
}

// Progress returns a progress callback (reshard.MoveOptions.Progress) that
// counts the rows copied, copied being the rows of table copied so far in
// the current pass, and then calls user, if not nil.
func (m *MoveRecord) Progress(user func(table string, copied int64)) func(table string, copied int64) {
	return func(table string, copied int64) {
		m.mu.Lock()
		if copied < m.lastTable[table] { // a new pass over the table within a stage
			m.base += m.lastTable[table]
		}
		m.lastTable[table] = copied
		var rows int64
		for _, n := range m.lastTable {
			rows += n
		}
		m.st.RowsCopied = m.base + rows
		m.mu.Unlock()
		if user != nil {
			user(table, copied)
		}
	}
}

// Fenced records that the move's fence is set: the old copy refuses writes
// from now on, and logs the event.
func (m *MoveRecord) Fenced(d time.Duration) {
	m.mu.Lock()
	m.fencedAt = time.Now()
	st := m.st
	m.mu.Unlock()
	m.r.LogFenceSet(st.Shard, st.From, d)
}

// Lifted records that a move that could not finish gave up its fence: the
// old copy is writable again, at once when lifted (and the event is logged),
// or when the fence runs out.
func (m *MoveRecord) Lifted(lifted bool) {
	m.mu.Lock()
	if !m.fencedAt.IsZero() {
		m.st.Fenced = time.Since(m.fencedAt)
		m.fencedAt = time.Time{}
	}
	st := m.st
	m.mu.Unlock()
	if lifted {
		m.r.LogFenceLifted(st.Shard, st.From)
	}
}

// LogFenceSet logs (EventFenceSet) that the tables of logical shard on the
// database named database refuse writes for d (for good when 0), as the
// database's clock judges it. Package reshard calls it.
func (r *Router) LogFenceSet(shard int, database string, d time.Duration) {
	attrs := []slog.Attr{slog.Int("shard", shard), slog.String("database", database)}
	if d == 0 {
		attrs = append(attrs, slog.Bool("for_good", true))
	} else {
		attrs = append(attrs, slog.Duration("for", d))
	}
	logEvent(r.stats.logger, slog.LevelInfo, EventFenceSet, attrs...)
}

// LogFenceLifted logs (EventFenceLifted) that the tables of logical shard
// on the database named database take writes again. Package reshard calls
// it.
func (r *Router) LogFenceLifted(shard int, database string) {
	logEvent(r.stats.logger, slog.LevelWarn, EventFenceLifted, slog.Int("shard", shard), slog.String("database", database))
}

// Finish records the end of the move, and logs it: err is its error, or
// nil when it flipped, after the old copy refused writes for fenced.
func (m *MoveRecord) Finish(fenced time.Duration, err error) {
	m.mu.Lock()
	m.st.Ended = time.Now()
	reached := m.st.Stage
	if err != nil {
		m.st.Stage, m.st.Err = "failed", err
		if !m.fencedAt.IsZero() {
			m.st.Fenced = time.Since(m.fencedAt)
		}
	} else {
		m.st.Stage, m.st.Fenced = "flipped", fenced
	}
	st := m.st
	m.mu.Unlock()
	if err != nil {
		logEvent(m.logger, slog.LevelError, EventMoveFailed,
			slog.Int("shard", st.Shard), slog.String("from", st.From), slog.String("to", st.To),
			slog.String("reached", reached), slog.Any("error", err))
		return
	}
	logEvent(m.logger, slog.LevelInfo, EventShardMoved,
		slog.Int("shard", st.Shard), slog.String("from", st.From), slog.String("to", st.To),
		slog.Int64("rows_copied", st.RowsCopied), slog.Duration("fenced", st.Fenced),
		slog.Duration("took", st.Ended.Sub(st.Started)))
}

func (m *MoveRecord) snapshot() MoveStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.st
	if !m.fencedAt.IsZero() && st.Ended.IsZero() {
		st.Fenced = time.Since(m.fencedAt)
	}
	return st
}
