package reshard

import (
	"context"

	"gorm.io/gorm"
)

// BumpCatalogVersion writes a new version of c, changing nothing else:
// a write to the catalog by someone else (a move of another shard), as a
// run's compare-and-set of the version sees it.
func BumpCatalogVersion(ctx context.Context, c *Catalog) error {
	t, err := c.table()
	if err != nil {
		return err
	}
	return c.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		v, err := lockVersion(tx, t)
		if err != nil {
			return err
		}
		_, err = bumpVersion(tx, t, v)
		return err
	})
}
