package reshard

import (
	"context"
	"fmt"

	"gorm.io/gorm"
)

// unflipShared places shard back in the shared tables of the database
// named to (a roll-back of a split), as one new version, only if the
// catalog still places it on the database named from, in a schema of its
// own, and is still at version was: otherwise it changes nothing and
// returns ErrCatalogConflict.
func (c *Catalog) unflipShared(ctx context.Context, shard int, from, to string, was int64) (int64, error) {
	t, err := c.table()
	if err != nil {
		return 0, err
	}
	if err := c.ensureShared(ctx, t); err != nil {
		return 0, err
	}
	var version int64
	err = c.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if version, err = lockVersion(tx, t); err != nil {
			return err
		}
		if version != was {
			return &catalogMoved{"the roll-back", was, version}
		}
		var shared int64
		if err := tx.Raw("SELECT count(*) FROM "+sharedTable(t)+" WHERE shard = ?", shard).Scan(&shared).Error; err != nil {
			return err
		}
		if shared != 0 {
			return &catalogConflict{fmt.Sprintf("shard %d is shared already", shard)}
		}
		res := tx.Exec("UPDATE "+t+" SET db_name = ? WHERE shard = ? AND db_name = ?", to, shard, from)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return &catalogConflict{fmt.Sprintf("shard %d is no longer on %s", shard, from)}
		}
		if err := tx.Exec("INSERT INTO "+sharedTable(t)+" (shard) VALUES (?)", shard).Error; err != nil {
			return err
		}
		version, err = bumpVersion(tx, t, version)
		return err
	})
	if err != nil {
		return 0, c.explain(ctx, t, err)
	}
	return version, nil
}
