package reshard

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/sqlddl"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
)

// The catalog keeps which shards are shared (in their database's shared
// tables, as in a monolith, see shardmap.Placement) in a table of its own,
// <Table>_shared, one row per shared shard. A catalog without that table
// (made by an older version, or that never held a monolith) has no shared
// shard: old catalogs load as they did.

// sharedTable is the catalog's table of shared shards.
func sharedTable(t string) string { return t + "_shared" }

// SaveMap stores the placements of m (each shard's database, and which
// shards are shared) as the catalog's first map and returns its version,
// as Save does for a router's map: if the catalog holds a map already,
// SaveMap stores nothing and returns its version if it is m's, or an error
// matching ErrMapDiffers. It creates the catalog's tables, and the table of
// shared shards, when they are missing.
func (c *Catalog) SaveMap(ctx context.Context, m *shardmap.Map) (int64, error) {
	t, err := c.table()
	if err != nil {
		return 0, err
	}
	if err := c.ensure(ctx, t); err != nil {
		return 0, err
	}
	if err := c.ensureShared(ctx, t); err != nil {
		return 0, err
	}
	v := m.Load()
	names, assign, shared := m.Databases(), v.Assignment(), v.SharedShards()
	if m.SchemaPattern() == "" {
		shared = nil // every shard is shared: nothing to store
	}
	var version int64
	err = c.withVersionRow(ctx, t, func() error {
		return c.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var err error
			if version, err = lockVersion(tx, t); err != nil {
				return err
			}
			var rows []struct {
				Shard  int
				DBName string
			}
			if err := tx.Raw("SELECT shard, db_name FROM " + t + " ORDER BY shard").Scan(&rows).Error; err != nil {
				return err
			}
			if len(rows) > 0 {
				if err := sameMap(rows, assign, names); err != nil {
					return err
				}
				var have []int
				if err := tx.Raw("SELECT shard FROM " + sharedTable(t) + " ORDER BY shard").Scan(&have).Error; err != nil {
					return err
				}
				if !slices.Equal(have, shared) {
					return withDetail(ErrMapDiffers, fmt.Sprintf("the catalog has %d shared shards, the map %d", len(have), len(shared)))
				}
				return nil
			}
			if version, err = bumpVersion(tx, t, version); err != nil {
				return err
			}
			for lo := 0; lo < len(assign); lo += 500 {
				args := []any{}
				q := "INSERT INTO " + t + " (shard, db_name) VALUES "
				for s := lo; s < min(lo+500, len(assign)); s++ {
					if s > lo {
						q += ","
					}
					q += "(?, ?)"
					args = append(args, s, names[assign[s]])
				}
				if err := tx.Exec(q, args...).Error; err != nil {
					return err
				}
			}
			if err := saveShared(tx, t, shared, true); err != nil {
				return err
			}
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	return version, nil
}

// ensureShared creates the table of shared shards when it is missing.
func (c *Catalog) ensureShared(ctx context.Context, t string) error {
	return sqlddl.Ensure(ctx, c.DB, ErrInvalidCatalog, "Catalog.SaveMap", sharedTable(t), []string{sharedTable(t)},
		"CREATE TABLE IF NOT EXISTS "+sharedTable(t)+" (shard INT PRIMARY KEY)")
}

// LoadMap loads the catalog's placements into m (the databases by name,
// and which shards are shared) and returns the catalog's version. A
// catalog without a table of shared shards has none. It only reads.
func (c *Catalog) LoadMap(ctx context.Context, m *shardmap.Map) (int64, error) {
	p, version, err := c.loadPlacements(ctx, m.Databases(), m.LogicalShards())
	if err != nil {
		return version, err
	}
	return version, m.SetPlacements(p)
}

// loadPlacements reads the catalog's placements for the databases names.
func (c *Catalog) loadPlacements(ctx context.Context, names []string, shards int) ([]shardmap.Placement, int64, error) {
	t, err := c.table()
	if err != nil {
		return nil, 0, err
	}
	missing, err := sqlddl.Missing(ctx, c.DB, sharedTable(t))
	if err != nil {
		return nil, 0, err
	}
	var (
		rows []struct {
			Shard  int
			DBName string
		}
		shared  []int
		version int64
	)
	err = c.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Raw("SELECT COALESCE(MAX(version), 0) FROM " + t + "_version").Scan(&version).Error; err != nil {
			return err
		}
		if err := tx.Raw("SELECT shard, db_name FROM " + t + " ORDER BY shard").Scan(&rows).Error; err != nil {
			return err
		}
		if len(missing) > 0 {
			return nil
		}
		return tx.Raw("SELECT shard FROM " + sharedTable(t) + " ORDER BY shard").Scan(&shared).Error
	})
	if err != nil {
		return nil, 0, c.explain(ctx, t, err)
	}
	if len(rows) != shards {
		return nil, version, withDetail(ErrInvalidCatalog, fmt.Sprintf("the catalog maps %d shards, the map has %d", len(rows), shards))
	}
	p := make([]shardmap.Placement, shards)
	for _, row := range rows {
		d := slices.Index(names, row.DBName)
		if d < 0 || row.Shard < 0 || row.Shard >= shards {
			return nil, version, withDetail(ErrInvalidCatalog, fmt.Sprintf("the catalog maps shard %d to %q, which the map does not know", row.Shard, row.DBName))
		}
		p[row.Shard].DB = d
	}
	for _, s := range shared {
		if s < 0 || s >= shards {
			return nil, version, withDetail(ErrInvalidCatalog, fmt.Sprintf("shared shard %d", s))
		}
		p[s].Shared = true
	}
	return p, version, nil
}

// flipShared moves the shards of moves out of the shared tables of the
// database named from into their schemas on the databases they name, as
// one new version, only if the catalog is still at version was and has
// each of them shared on from: otherwise it changes nothing and returns
// ErrCatalogConflict.
func (c *Catalog) flipShared(ctx context.Context, from string, moves map[int]string, was int64) (int64, error) {
	t, err := c.table()
	if err != nil {
		return 0, err
	}
	shards := make([]int, 0, len(moves))
	for s := range moves {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	var version int64
	err = c.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if version, err = lockVersion(tx, t); err != nil {
			return err
		}
		if version != was {
			return &catalogMoved{"the batch", was, version}
		}
		for lo := 0; lo < len(shards); lo += 500 {
			chunk := shards[lo:min(lo+500, len(shards))]
			res := tx.Exec("DELETE FROM "+sharedTable(t)+" WHERE shard IN ?", chunk)
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected != int64(len(chunk)) {
				return &catalogConflict{fmt.Sprintf("of shards %d to %d, %d are no longer shared", chunk[0], chunk[len(chunk)-1], len(chunk)-int(res.RowsAffected))}
			}
		}
		// A statement per target database, not per shard: the flip is
		// under the batch's fence.
		byTarget := map[string][]int{}
		for _, s := range shards {
			byTarget[moves[s]] = append(byTarget[moves[s]], s)
		}
		targets := make([]string, 0, len(byTarget))
		for d := range byTarget {
			targets = append(targets, d)
		}
		slices.Sort(targets)
		for _, d := range targets {
			for lo := 0; lo < len(byTarget[d]); lo += 500 {
				chunk := byTarget[d][lo:min(lo+500, len(byTarget[d]))]
				res := tx.Exec("UPDATE "+t+" SET db_name = ? WHERE shard IN ? AND db_name = ?", d, chunk, from)
				if res.Error != nil {
					return res.Error
				}
				if res.RowsAffected != int64(len(chunk)) {
					return &catalogConflict{fmt.Sprintf("of shards %d to %d, %d are no longer on %s", chunk[0], chunk[len(chunk)-1], len(chunk)-int(res.RowsAffected), from)}
				}
			}
		}
		version, err = bumpVersion(tx, t, version)
		return err
	})
	if err != nil {
		return 0, c.explain(ctx, t, err)
	}
	return version, nil
}

// loadRouter loads the catalog's placements (which shards are shared too)
// into r's map and returns the catalog's version: Follow's load, so that a
// split's flip of a shared shard reaches every router.
//
// A catalog without a table of shared shards (an older one) changes only
// the databases of r's shards, as Router.SetMap does: which are shared
// stays as r's configuration says.
func (c *Catalog) loadRouter(ctx context.Context, r *shardid.Router) (int64, error) {
	t, err := c.table()
	if err != nil {
		return 0, err
	}
	missing, err := sqlddl.Missing(ctx, c.DB, sharedTable(t))
	if err != nil {
		return 0, err
	}
	p, version, err := c.loadPlacements(ctx, r.Names(), r.LogicalShards())
	if err != nil {
		return version, err
	}
	if len(missing) > 0 {
		a := make([]int, len(p))
		for s := range p {
			a[s] = p[s].DB
		}
		return version, r.SetMap(a)
	}
	return version, r.ShardMap().SetPlacements(p)
}

// saveShared replaces the catalog's shared shards with shared, in tx, if
// the catalog has a table for them.
func saveShared(tx *gorm.DB, t string, shared []int, has bool) error {
	if !has {
		return nil
	}
	if err := tx.Exec("DELETE FROM " + sharedTable(t)).Error; err != nil {
		return err
	}
	for lo := 0; lo < len(shared); lo += 500 {
		args := []any{}
		q := "INSERT INTO " + sharedTable(t) + " (shard) VALUES "
		for i, s := range shared[lo:min(lo+500, len(shared))] {
			if i > 0 {
				q += ","
			}
			q += "(?)"
			args = append(args, s)
		}
		if err := tx.Exec(q, args...).Error; err != nil {
			return err
		}
	}
	return nil
}

// catalogMoved is the ErrCatalogConflict of a flip whose only finding is
// that the catalog's version is no longer the one its run read: any write
// to the catalog makes it, a move of another shard as well as the claim
// of an operator undoing the run (claimVersion). A run that held its lock
// from before it read the version until after it finds this knows that
// no operator claimed it (an operator takes the same lock first), and
// tries its flip again at the new version (retryFlip).
type catalogMoved struct {
	who      string
	was, now int64
}

func (e *catalogMoved) Error() string {
	return fmt.Sprintf("%v: version %d when %s read it, %d at its flip (an abort, or a move, went on meanwhile)", ErrCatalogConflict, e.was, e.who, e.now)
}
func (e *catalogMoved) Unwrap() error { return ErrCatalogConflict }

// flipTries is how many times a run tries a flip of the catalog whose
// version moved under it, its lock held all along (catalogMoved).
const flipTries = 5

// retryFlip runs try (read the catalog's version, ask the lock, flip at
// that version) until it succeeds, fails otherwise than by a version
// moved under it (catalogMoved), the lock was lost at any time (even if
// taken again since: an operator may have held it meanwhile), or
// flipTries tries have failed.
func retryFlip(lock *moveLock, try func() error) error {
	for n := 1; ; n++ {
		err := try()
		var moved *catalogMoved
		if err == nil || !errors.As(err, &moved) || n >= flipTries || lock.lost() != nil {
			return err
		}
	}
}

// claimVersion makes a new version of the catalog, changing nothing else,
// only if it is still at version was: otherwise ErrCatalogConflict. An
// operator who is about to undo what a run wrote before its flip claims
// the version it read, so that the run's flip (flipShared, at the version
// it read) fails after it.
func (c *Catalog) claimVersion(ctx context.Context, was int64) error {
	t, err := c.table()
	if err != nil {
		return err
	}
	err = c.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		version, err := lockVersion(tx, t)
		if err != nil {
			return err
		}
		if version != was {
			return &catalogConflict{fmt.Sprintf("the catalog changed since it was read (version %d, then %d): a run went on meanwhile", was, version)}
		}
		_, err = bumpVersion(tx, t, version)
		return err
	})
	return c.explain(ctx, t, err)
}
