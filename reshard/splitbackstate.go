package reshard

import (
	"context"
	"fmt"
	"strings"

	"gorm.io/gorm"
)

// The state of a roll-back, on the monolith. A shard being rolled back has
// a row in shardid_split_rollback, written before the roll-back writes
// anything into the monolith and deleted once the shard takes writes there
// again: the database it comes back from, what the split verified of it
// (its state row's verified, cleared meanwhile, so that no split's clean-up
// deletes the rows the roll-back copies: deleteCopied keeps a shard's rows
// without a verification; an abort verifies them anew), and the token of the fence the roll-back set on
// the shard's schema (0 before its fence), by which a roll-back run again
// tells its own seal of that schema from a move's.

// splitBackTable is the roll-backs' table, in the monolith's schema.
const splitBackTable = "shardid_split_rollback"

// backMark is a shard's row of splitBackTable.
type backMark struct {
	Shard    int
	Source   string
	Verified *string
	Token    int64
}

// ensureBackTable creates splitBackTable where it is missing.
func (sp *splitter) ensureBackTable(ctx context.Context) error {
	q := "CREATE TABLE IF NOT EXISTS " + sp.q(splitBackTable) + " (shard INT PRIMARY KEY, source VARCHAR(255) NOT NULL, verified TEXT, token BIGINT NOT NULL)"
	if sp.mysql {
		q += " ENGINE=InnoDB"
	}
	return sp.mono.WithContext(ctx).Exec(q).Error
}

// readBackMarks returns the roll-backs under way, by shard (none when the
// table does not exist).
func (sp *splitter) readBackMarks(ctx context.Context) (map[int]backMark, error) {
	return sp.readBackMarksOn(ctx, sp.mono)
}

// readBackMarksOn is readBackMarks through db: the monolith's pool, or a
// transaction of it.
func (sp *splitter) readBackMarksOn(ctx context.Context, db *gorm.DB) (map[int]backMark, error) {
	ok, err := tableExists(ctx, db, sp.schema, splitBackTable)
	if err != nil || !ok {
		return map[int]backMark{}, err
	}
	var rows []backMark
	if err := db.WithContext(ctx).Raw("SELECT shard, source, verified, token FROM " + sp.q(splitBackTable)).Scan(&rows).Error; err != nil {
		return nil, err
	}
	out := make(map[int]backMark, len(rows))
	for _, r := range rows {
		out[r.Shard] = r
	}
	return out, nil
}

// markBack records that shard s, sealed on the monolith by a split, is
// being rolled back from the database named source: its row in
// splitBackTable with the split's verification, which its state row no
// longer holds. It returns ErrNotSplit, changing nothing, if the state row
// is not sealed with a verification.
func (sp *splitter) markBack(ctx context.Context, s int, source string) error {
	return lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
		var st []struct {
			Sealed   bool
			Verified *string
		}
		if err := tx.Raw("SELECT sealed, verified FROM "+sp.q(splitStateTable)+" WHERE shard = ? FOR UPDATE", s).Scan(&st).Error; err != nil {
			return err
		}
		if len(st) != 1 || !st[0].Sealed || st[0].Verified == nil {
			return withDetail(ErrNotSplit, fmt.Sprintf("shard %d is not sealed on the monolith by a split", s))
		}
		if err := tx.Exec("INSERT INTO "+sp.q(splitBackTable)+" (shard, source, verified, token) VALUES (?, ?, ?, 0)", s, source, *st[0].Verified).Error; err != nil {
			return err
		}
		return tx.Exec("UPDATE "+sp.q(splitStateTable)+" SET verified = NULL WHERE shard = ?", s).Error
	})
}

// unmarkBack ends the roll-back of s that an abort read as m, having
// claimed the shard's state row with token claimed: the roll-back's row
// deleted, and the state row's verified set to verified, the
// verification of the shard's rows the monolith keeps, sealed. A row that
// another roll-back changed since the abort read it, or a state row it
// claimed since (the abort lost its lock meanwhile), fails with
// ErrMoveInProgress, and nothing changes.
func (sp *splitter) unmarkBack(ctx context.Context, s int, verified string, m backMark, claimed int64) error {
	return lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
		st, err := sp.lockStates(tx, []int{s})
		if err != nil {
			return err
		}
		if len(st) != 1 || st[0].Token != claimed || !st[0].Sealed {
			return withDetail(ErrMoveInProgress, fmt.Sprintf("the split's state of shard %d changed while its roll-back was being aborted (another operator ran the roll-back): see shardid split status, then run it or the abort again", s))
		}
		var cur []backMark
		if err := tx.Raw("SELECT shard, source, verified, token FROM "+sp.q(splitBackTable)+" WHERE shard = ? FOR UPDATE", s).Scan(&cur).Error; err != nil {
			return err
		}
		if len(cur) != 1 || cur[0].Source != m.Source || cur[0].Token != m.Token {
			return withDetail(ErrMoveInProgress, fmt.Sprintf("the roll-back of shard %d changed while it was being aborted (another operator ran it): see shardid split status, then run it or the abort again", s))
		}
		if err := tx.Exec("UPDATE "+sp.q(splitStateTable)+" SET verified = ? WHERE shard = ?", verified, s).Error; err != nil {
			return err
		}
		return tx.Exec("DELETE FROM "+sp.q(splitBackTable)+" WHERE shard = ?", s).Error
	})
}

// rollingBack returns the shards being rolled back (CleanSplit leaves
// their rows alone: the roll-back copied them).
func (sp *splitter) rollingBack(ctx context.Context) (map[int]bool, error) {
	marks, err := sp.readBackMarks(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[int]bool, len(marks))
	for s := range marks {
		out[s] = true
	}
	return out, nil
}

// captureWhole reports whether the change log of schema on db is whole: its
// table, a trigger per event of every table, and on PostgreSQL a trigger
// function that logs (stopCapture makes it a no-op first), in a table the
// run's role may read and trim (a log another role left is not: the run
// starts its own).
func captureWhole(ctx context.Context, db *gorm.DB, schema string, tables []string) (bool, error) {
	ok, err := tableExists(ctx, db, schema, changeTable)
	if err != nil || !ok {
		return false, err
	}
	var n int64
	if db.Dialector.Name() == "mysql" {
		q := "SELECT count(*) FROM information_schema.TRIGGERS WHERE " + triggersOfSchema + " AND TRIGGER_NAME LIKE 'shardid\\_cap\\_%' AND EVENT_OBJECT_TABLE IN ?"
		if err := db.WithContext(ctx).Raw(q, schema, tables).Scan(&n).Error; err != nil {
			return false, err
		}
		return n == int64(3*len(tables)), nil
	}
	var may bool
	log := quoteTable(db, schema, changeTable)
	q := "SELECT has_table_privilege(?, 'SELECT') AND has_table_privilege(?, 'DELETE')"
	if err := db.WithContext(ctx).Raw(q, log, log).Scan(&may).Error; err != nil || !may {
		return false, err
	}
	q = `SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = ? AND t.tgname = 'shardid_capture' AND c.relname IN ?`
	if err := db.WithContext(ctx).Raw(q, schema, tables).Scan(&n).Error; err != nil || n != int64(len(tables)) {
		return false, err
	}
	var src string
	q = "SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = ? AND p.proname = 'shardid_capture'"
	if err := db.WithContext(ctx).Raw(q, schema).Scan(&src).Error; err != nil {
		return false, err
	}
	return strings.Contains(src, changeTable), nil
}

// identities caches the identities of databases, by index.
type identities map[int]dbIdentity

// same reports whether dbs[a] and dbs[b] are one database (identify).
func (ids identities) same(ctx context.Context, dbs []*gorm.DB, a, b int) (bool, error) {
	for _, d := range []int{a, b} {
		if _, ok := ids[d]; !ok {
			id, err := identify(ctx, dbs[d])
			if err != nil {
				return false, err
			}
			ids[d] = id
		}
	}
	return ids[a].same(ids[b]), nil
}

// refusesEveryWritePG reports whether the monolith's sharded tables refuse
// every write, emptied by the split's last batch (refuseWritesPG): never
// on MySQL.
func (sp *splitter) refusesEveryWritePG(ctx context.Context) (bool, error) {
	if sp.mysql {
		return false, nil
	}
	var n int64
	q := "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = ? AND p.proname = ?"
	err := sp.mono.WithContext(ctx).Raw(q, sp.schema, splitDoneFunction).Scan(&n).Error
	return n > 0, err
}

// claimBack makes the roll-back of s this run's: with the shard's state
// row on the monolith locked, check (the run's check of its locks), then
// a new token, which it returns, and which every write of this run to the
// monolith holds (backCopy.hold): a run of the same roll-back that was
// paused before it (and lost its locks) writes nothing there any more.
// The shard must still be sealed there (split, not flipped back).
func (sp *splitter) claimBack(ctx context.Context, s int, check func(context.Context) error) (int64, error) {
	var token int64
	err := lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
		cur, err := sp.lockStates(tx, []int{s})
		if err != nil {
			return err
		}
		if len(cur) != 1 || !cur[0].Sealed {
			return withDetail(ErrNotSplit, fmt.Sprintf("shard %d is not sealed on the monolith: flipped back by another run meanwhile", s))
		}
		if err := check(ctx); err != nil {
			return err
		}
		token = cur[0].Token + 1
		return tx.Exec("UPDATE "+sp.q(splitStateTable)+" SET token = ? WHERE shard = ?", token, s).Error
	})
	return token, err
}
