package shardid

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shardid/shardid/internal/sqlddl"
	"gorm.io/gorm"
)

// SQLLeaseStore keeps worker-id leases in a table of a PostgreSQL or
// MySQL/MariaDB database, which Setup creates (and Claim, if it is missing
// and the role may). Expiry is judged by the
// database's clock, so the processes' clocks do not matter.
//
// The table holds one row per worker id: (worker, owner, expires_at in Unix
// milliseconds, last_tick, version). version is the token of the last
// claim, moved on by a release too; a renewal matches on it, never on the
// owner, and never shortens the expiry. Use one table per layout.
type SQLLeaseStore struct {
	DB    *gorm.DB
	Table string // If empty, "shardid_workers". It must match [a-z_][a-z0-9_]*.
}

var _ LeaseStore = (*SQLLeaseStore)(nil)

func (s *SQLLeaseStore) table() (string, error) {
	t := s.Table
	if t == "" {
		t = "shardid_workers"
	}
	if !schemaName.MatchString(t) {
		return "", withDetail(ErrInvalidConfig, fmt.Sprintf("lease table name %q: want %s", t, schemaName))
	}
	return t, nil
}

// nowMs is the database's clock in Unix milliseconds. On MySQL it is
// computed in UTC: UNIX_TIMESTAMP(NOW()) goes through the session's time
// zone and is an hour off in the hour a daylight-saving change repeats.
func (s *SQLLeaseStore) nowMs() string {
	if s.DB.Dialector.Name() == "mysql" {
		return "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"
	}
	return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
}

// Setup creates the store's table if it does not exist. Run it once (at
// deployment, or at each start of a process whose role may create tables):
// Claim creates the table too when it is missing, but a role that may not
// create tables gets ErrSetupRequired there instead. It needs CREATE on the
// schema the table goes to (PostgreSQL: the first schema of the search path
// the role may create in; MySQL: CREATE on the database).
//
// Once the table exists, Claim needs SELECT, INSERT and UPDATE on it, and
// Renew and Release SELECT and UPDATE; none of them runs DDL.
func (s *SQLLeaseStore) Setup(ctx context.Context) error {
	t, err := s.table()
	if err != nil {
		return err
	}
	return s.ensure(ctx, t)
}

// ensure creates the table when it is missing.
func (s *SQLLeaseStore) ensure(ctx context.Context, t string) error {
	return ensureObjects(ctx, s.DB, "SQLLeaseStore.Setup", t, []string{t}, "CREATE TABLE IF NOT EXISTS "+t+` (
		worker     INT PRIMARY KEY,
		owner      VARCHAR(200) NOT NULL DEFAULT '',
		expires_at BIGINT NOT NULL DEFAULT 0,
		last_tick  BIGINT NOT NULL DEFAULT 0,
		version    BIGINT NOT NULL DEFAULT 0)`)
}

// addWorkers creates the table if it is missing, and the rows of workers
// ids 0 to workers-1 that are missing: DML only, once the table exists.
func (s *SQLLeaseStore) addWorkers(ctx context.Context, t string, workers int) error {
	if err := s.ensure(ctx, t); err != nil {
		return err
	}
	var b strings.Builder
	for w := range workers {
		if w > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(" + strconv.Itoa(w) + ")")
	}
	return s.DB.WithContext(ctx).Exec(sqlddl.InsertIgnore(s.DB, t+" (worker) VALUES "+b.String(), "worker")).Error
}

// claimCandidates is how many free rows one pass of Claim reads.
const claimCandidates = 16

// claimPasses bounds the passes of Claim: each pass that ends without a
// claim saw every row it read change under it (claimed, renewed or
// released by others).
const claimPasses = 50

// Claim implements LeaseStore. It reads free rows (the preferred id first)
// without locking them, and claims the first it can with a compare-and-set
// on the row's version and last_tick: the UPDATE matches only if nobody
// claimed, renewed or released the row since it was read, so the claim's
// last_tick is the row's, and concurrent claims take different ids. No row
// is locked beyond its own UPDATE: a claim never hides a free id from
// another (SELECT ... FOR UPDATE SKIP LOCKED did, on MySQL/MariaDB, where it
// locks every row it scans, and a rival then found no free id). It returns
// ErrNoFreeWorker when a read finds no free row (or, after claimPasses
// reads, when others claimed every free row each time). The claim's token
// is the row's new version.
func (s *SQLLeaseStore) Claim(ctx context.Context, workers, prefer int, owner string, ttl time.Duration) (Claim, error) {
	if workers < 1 {
		return Claim{}, withDetail(ErrWorkerRange, "no worker ids to claim from")
	}
	t, err := s.table()
	if err != nil {
		return Claim{}, err
	}
	if err := s.addWorkers(ctx, t, workers); err != nil {
		return Claim{}, err
	}
	db := s.DB.WithContext(ctx)
	for range claimPasses {
		var rows []struct {
			Worker   int
			LastTick int64
			Version  int64
		}
		if err := db.Raw("SELECT worker, last_tick, version FROM "+t+" WHERE worker < ? AND expires_at < "+s.nowMs()+
			" ORDER BY CASE WHEN worker = ? THEN 0 ELSE 1 END, worker LIMIT ?", workers, prefer, claimCandidates).Scan(&rows).Error; err != nil {
			return Claim{}, err
		}
		if len(rows) == 0 {
			return Claim{}, ErrNoFreeWorker
		}
		for _, row := range rows {
			res := db.Exec("UPDATE "+t+" SET owner = ?, expires_at = "+s.nowMs()+" + ?, version = ?"+
				" WHERE worker = ? AND version = ? AND last_tick = ? AND expires_at < "+s.nowMs(),
				owner, ttl.Milliseconds(), row.Version+1, row.Worker, row.Version, row.LastTick)
			if res.Error != nil {
				return Claim{}, res.Error
			}
			if res.RowsAffected == 1 {
				return Claim{Worker: row.Worker, Last: row.LastTick, Token: row.Version + 1}, nil
			}
		}
		if err := ctx.Err(); err != nil {
			return Claim{}, err
		}
	}
	// Others took every free id as it was read, pass after pass.
	return Claim{}, withDetail(ErrNoFreeWorker, fmt.Sprintf("every free row of %s was claimed by others as it was read, %d times", t, claimPasses))
}

// Renew implements LeaseStore. The row's version must still be c's token: a
// lease that expired but was not claimed by anyone else since is renewed.
func (s *SQLLeaseStore) Renew(ctx context.Context, c Claim, ttl time.Duration, promise int64) error {
	t, err := s.table()
	if err != nil {
		return err
	}
	// The expiry strictly grows, so that MySQL, which counts only the rows
	// an UPDATE changed, counts the row even when nothing else changed.
	res := s.DB.WithContext(ctx).Exec("UPDATE "+t+" SET expires_at = GREATEST(expires_at + 1, "+s.nowMs()+" + ?),"+
		" last_tick = GREATEST(last_tick, ?) WHERE worker = ? AND version = ?",
		ttl.Milliseconds(), promise, c.Worker, c.Token)
	if res.Error != nil {
		return explainMissing(ctx, s.DB, "SQLLeaseStore.Setup", []string{t}, res.Error)
	}
	if res.RowsAffected != 1 {
		return withDetail(ErrLeaseLost, fmt.Sprintf("worker %d was claimed again since token %d", c.Worker, c.Token))
	}
	return nil
}

// Release implements LeaseStore. It records last exactly, lowering the
// promise renewals wrote: the holder's last unit is at or above every earlier
// holder's, since its generator started above them. It moves the version
// on, so that c can be neither renewed nor released again.
func (s *SQLLeaseStore) Release(ctx context.Context, c Claim, last int64) error {
	t, err := s.table()
	if err != nil {
		return err
	}
	res := s.DB.WithContext(ctx).Exec("UPDATE "+t+" SET owner = '', expires_at = 0, last_tick = ?,"+
		" version = version + 1 WHERE worker = ? AND version = ?", last, c.Worker, c.Token)
	if res.Error != nil {
		return explainMissing(ctx, s.DB, "SQLLeaseStore.Setup", []string{t}, res.Error)
	}
	if res.RowsAffected != 1 {
		return withDetail(ErrLeaseLost, fmt.Sprintf("worker %d was claimed again since token %d", c.Worker, c.Token))
	}
	return nil
}
