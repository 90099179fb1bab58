package shardid

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
)

// SegmentConfig configures NewSegmentAllocator.
type SegmentConfig struct {
	// DB holds the segment table, which NewSegmentAllocator creates:
	// PostgreSQL or MySQL/MariaDB. Required.
	DB *gorm.DB

	// Table is the segment table. If empty, "shardid_segments". It must
	// match [a-z_][a-z0-9_]*.
	Table string

	// Key names the sequence, one row of the table (a business key such as
	// "orders"). Processes sharing a key share its IDs. Required, at most
	// 128 bytes.
	Key string

	// Step is the size of the first block. If 0, 1000. Later blocks adapt to
	// how fast IDs are taken, between MinStep and MaxStep.
	Step int64

	// MinStep and MaxStep bound the step. If 0, Step and 1000 * Step.
	MinStep, MaxStep int64

	// Target is how long a block should last; the step doubles when a block
	// lasts less than half of it and halves when one lasts more than twice.
	// If 0, 10s.
	Target time.Duration

	// RefillAt is the fraction of a block after which the next block is
	// fetched in the background. If 0, 0.5. It must be in (0, 1).
	RefillAt float64
}

// SegmentAllocator hands out increasing int64 IDs for one key from blocks
// (segments) it takes from a database row, as Meituan's Leaf does: a block
// is (max_id - step, max_id], taken by UPDATE ... SET max_id = max_id + step.
// IDs come from memory, one atomic add each; when RefillAt of a block is
// used, the next block is fetched in the background, so callers do not wait
// on the database in steady state. A block taken and not used up is lost,
// never handed out again, across restarts too.
//
// Within one allocator, IDs increase. Across processes sharing a key they
// are unique, not ordered. SegmentAllocator is safe for concurrent use.
// Close it to stop its background fetches.
type SegmentAllocator struct {
	cfg   SegmentConfig
	table string
	cur   atomic.Pointer[segment]

	closedFlag atomic.Bool     // set by Close; Next checks it first
	stop       context.Context // done when Close is called: ends the fetch under way
	cancel     context.CancelFunc
	wg         sync.WaitGroup // the background fetch; Add only under mu, while not closed

	mu       sync.Mutex    // protects the fields below
	next     *segment      // fetched ahead, or nil
	fetching chan struct{} // closed when the fetch under way ends; nil when none is
	fetchErr error         // the last fetch's error
	step     int64         // the step of the next fetch
	closed   bool          // no fetch starts once set

	stats segmentStats
}

// segment is one block: IDs in [start, end].
type segment struct {
	end      int64
	next     atomic.Int64
	size     int64
	refill   int64 // fetch the next block once next passes this
	taken    time.Time
	refilled atomic.Bool
}

// NewSegmentAllocator creates the table when it is missing and the key's
// row when needed, takes the first block and returns the allocator. It
// runs DDL only when the table is missing: once it exists, a role with
// SELECT, INSERT and UPDATE on it suffices. A missing table that the role
// may not create gives ErrSetupRequired, naming it.
func NewSegmentAllocator(ctx context.Context, cfg SegmentConfig) (*SegmentAllocator, error) {
	if cfg.DB == nil || cfg.Key == "" || len(cfg.Key) > 128 {
		return nil, withDetail(ErrInvalidConfig, "a segment allocator needs a DB and a Key of 1 to 128 bytes")
	}
	s := &SegmentAllocator{cfg: cfg, table: cfg.Table}
	if s.table == "" {
		s.table = "shardid_segments"
	}
	if !schemaName.MatchString(s.table) {
		return nil, withDetail(ErrInvalidConfig, fmt.Sprintf("segment table %q: want %s", s.table, schemaName))
	}
	c := &s.cfg
	if c.Step == 0 {
		c.Step = 1000
	}
	if c.MinStep == 0 {
		c.MinStep = c.Step
	}
	if c.MaxStep == 0 {
		c.MaxStep = 1000 * c.Step
	}
	if c.Target == 0 {
		c.Target = 10 * time.Second
	}
	if c.RefillAt == 0 {
		c.RefillAt = 0.5
	}
	if c.Step < 1 || c.MinStep < 1 || c.MinStep > c.Step || c.MaxStep < c.Step || c.RefillAt <= 0 || c.RefillAt >= 1 {
		return nil, withDetail(ErrInvalidConfig, fmt.Sprintf("segment steps %d in [%d, %d], RefillAt %v", c.Step, c.MinStep, c.MaxStep, c.RefillAt))
	}
	s.step = c.Step
	if err := s.setup(ctx); err != nil {
		return nil, err
	}
	seg, err := s.fetchCounted(ctx, s.step)
	if err != nil {
		return nil, err
	}
	s.stop, s.cancel = context.WithCancel(context.Background())
	s.cur.Store(seg)
	return s, nil
}

func (s *SegmentAllocator) setup(ctx context.Context) error {
	db := s.cfg.DB.WithContext(ctx)
	if err := ensureObjects(ctx, s.cfg.DB, "NewSegmentAllocator", s.table, []string{s.table}, "CREATE TABLE IF NOT EXISTS "+s.table+` (
		biz_key VARCHAR(128) NOT NULL PRIMARY KEY,
		max_id  BIGINT NOT NULL DEFAULT 0,
		step    BIGINT NOT NULL DEFAULT 0)`); err != nil {
		return err
	}
	if s.cfg.DB.Dialector.Name() == "mysql" {
		return db.Exec("INSERT IGNORE INTO "+s.table+" (biz_key) VALUES (?)", s.cfg.Key).Error
	}
	return db.Exec("INSERT INTO "+s.table+" (biz_key) VALUES (?) ON CONFLICT DO NOTHING", s.cfg.Key).Error
}

// fetch takes a block of step IDs from the database.
func (s *SegmentAllocator) fetch(ctx context.Context, step int64) (*segment, error) {
	var maxID int64
	err := s.cfg.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Exec("UPDATE "+s.table+" SET max_id = max_id + ?, step = ? WHERE biz_key = ?", step, step, s.cfg.Key)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("shardid: segment key %q is missing from %s", s.cfg.Key, s.table)
		}
		// The row is locked by the UPDATE until commit: this reads our own
		// new bound.
		return tx.Raw("SELECT max_id FROM "+s.table+" WHERE biz_key = ?", s.cfg.Key).Scan(&maxID).Error
	})
	if err != nil {
		return nil, err
	}
	seg := &segment{end: maxID, size: step, taken: time.Now()}
	start := maxID - step + 1
	seg.next.Store(start)
	seg.refill = start + int64(float64(step)*s.cfg.RefillAt)
	return seg, nil
}

// Next returns a new ID. It waits for the database only when a block is used
// up before the next one arrived. After Close it returns ErrClosed.
func (s *SegmentAllocator) Next(ctx context.Context) (int64, error) {
	for {
		if s.closedFlag.Load() {
			return 0, ErrClosed
		}
		seg := s.cur.Load()
		v := seg.next.Add(1) - 1
		if v <= seg.end {
			if v >= seg.refill && !seg.refilled.Swap(true) {
				s.startFetch(seg)
			}
			return v, nil
		}
		if err := s.advance(ctx, seg); err != nil {
			return 0, err
		}
	}
}

// startFetch fetches the block after seg in the background.
func (s *SegmentAllocator) startFetch(seg *segment) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next != nil || s.fetching != nil || s.closed {
		return
	}
	// Adapt the step to how fast this block is going.
	elapsed := time.Since(seg.taken)
	used := float64(seg.refill-(seg.end-seg.size+1)) / float64(seg.size)
	if used > 0 {
		lasts := time.Duration(float64(elapsed) / used) // projected life of the block
		switch {
		case lasts < s.cfg.Target/2:
			s.step = min(s.step*2, s.cfg.MaxStep)
		case lasts > s.cfg.Target*2:
			s.step = max(s.step/2, s.cfg.MinStep)
		}
	}
	done := make(chan struct{})
	s.fetching = done
	step := s.step
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.stop, 30*time.Second)
		defer cancel()
		next, err := s.fetchCounted(ctx, step)
		s.mu.Lock()
		s.next, s.fetchErr, s.fetching = next, err, nil
		s.mu.Unlock()
		close(done)
	}()
}

// advance replaces the used-up block seg with the next, fetching it (or
// waiting for the fetch under way) when it is not there yet.
func (s *SegmentAllocator) advance(ctx context.Context, seg *segment) error {
	for {
		s.mu.Lock()
		if s.cur.Load() != seg { // another caller advanced already
			s.mu.Unlock()
			return nil
		}
		if s.next != nil {
			s.cur.Store(s.next)
			s.next = nil
			s.mu.Unlock()
			return nil
		}
		if s.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		wait := s.fetching
		if wait == nil {
			// No fetch under way (the last one failed, or the block was used
			// up before its refill point was reached): fetch now.
			seg.refilled.Store(true)
			s.mu.Unlock()
			s.startFetch(seg)
			s.mu.Lock()
			wait = s.fetching
			if wait == nil { // it finished already
				s.mu.Unlock()
				continue
			}
		}
		s.mu.Unlock()
		s.stats.waits.Add(1)
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.mu.Lock()
		err := s.fetchErr
		if s.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		if s.next == nil && err != nil {
			s.fetchErr = nil
			s.mu.Unlock()
			return fmt.Errorf("shardid: taking a segment of %q: %w", s.cfg.Key, err)
		}
		s.mu.Unlock()
	}
}

// Close stops the allocator's background work: it cancels the fetch of
// the next block under way and waits for it to end. Next then returns
// ErrClosed; the IDs left in the current block are lost, as in a restart.
// Close is idempotent and safe to call concurrently, and with Next.
func (s *SegmentAllocator) Close() error {
	s.closedFlag.Store(true)
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}

// Step returns the step the next block will be taken with.
func (s *SegmentAllocator) Step() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.step
}
