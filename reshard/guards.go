package reshard

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// The guards of this file refuse, before a move changes anything, the
// mistakes of operators and the stale processes that would lose rows: two
// names for one database, a router whose map is not the catalog's, tables
// of the shard that the move does not list, models that do not match the
// source's tables, and a stale router moving a shard back over its live
// home.

// checkCatalogMap returns ErrMapDiffers unless r maps every shard where the
// catalog does: a router built from a configuration that changed (a
// database appended without a Map recomputes the default split) routes
// shards to databases that do not hold them.
func checkCatalogMap(ctx context.Context, r *shardid.Router, c *Catalog) error {
	m, _, err := c.Load(ctx, r)
	if err != nil {
		return err
	}
	return mapDiff(r.Names(), m, r.Map())
}

// mapDiff returns ErrMapDiffers, naming the first shard and how many
// differ, unless the catalog's map (database indexes in names) and the
// router's are equal.
func mapDiff(names []string, catalog, router []int) error {
	first, n := -1, 0
	for s := range catalog {
		if s >= len(router) || catalog[s] != router[s] {
			if first < 0 {
				first = s
			}
			n++
		}
	}
	if first < 0 {
		return nil
	}
	return withDetail(ErrMapDiffers, fmt.Sprintf("the catalog maps shard %d to %s, the router to %s (%d shards differ): "+
		"build the router from the catalog's map (Catalog.Load and Router.SetMap, or Follow)", first, names[catalog[first]], names[router[first]], n))
}

// isInternalTable reports whether table is one of the move's own, in the
// shard's schema: the fence's state and the change log.
func isInternalTable(table string) bool { return table == fenceTable || table == changeTable }

// baseTables returns the base tables of schema on db, not partitions nor
// the move's own.
func baseTables(ctx context.Context, db *gorm.DB, schema string) ([]string, error) {
	q := `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = ? AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1`
	if db.Dialector.Name() == "mysql" {
		q = "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' ORDER BY 1"
	}
	var all []string
	if err := db.WithContext(ctx).Raw(q, schema).Scan(&all).Error; err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, isInternalTable), nil
}

// checkListed returns ErrUnlistedTable if schema on src holds a table that
// tables does not list: the move would leave it behind, and DropShardCopy
// would drop it.
func checkListed(ctx context.Context, src *gorm.DB, schema string, tables []string) error {
	have, err := baseTables(ctx, src, schema)
	if err != nil {
		return err
	}
	var missing []string
	for _, t := range have {
		if !slices.Contains(tables, t) {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return withDetail(ErrUnlistedTable, fmt.Sprintf("%s holds %s, which the move does not list: add them to MoveOptions.Models or Tables (and the catalog's Tables)",
			schema, strings.Join(missing, ", ")))
	}
	return nil
}

// checkModels returns ErrModelMismatch if a model does not match its table
// of schema on src: a table the source lacks, a column the model lacks (the
// copy could not carry it) or one the source lacks (the copy would fail
// on it).
func checkModels(ctx context.Context, src *gorm.DB, schema string, models []any) error {
	for _, m := range models {
		if _, ok := m.(string); ok {
			continue
		}
		stmt := &gorm.Statement{DB: src}
		if err := stmt.Parse(m); err != nil {
			return err
		}
		table := stmt.Schema.Table
		have, err := sourceColumns(ctx, src, schema, table)
		if err != nil {
			return err
		}
		if len(have) == 0 {
			return withDetail(ErrModelMismatch, fmt.Sprintf("%s.%s does not exist on the source", schema, table))
		}
		var lacks, extra []string
		for _, col := range have {
			if !slices.Contains(stmt.Schema.DBNames, col) {
				lacks = append(lacks, col)
			}
		}
		for _, col := range stmt.Schema.DBNames {
			if !slices.Contains(have, col) {
				extra = append(extra, col)
			}
		}
		if len(lacks) > 0 || len(extra) > 0 {
			var why []string
			if len(lacks) > 0 {
				why = append(why, "the model lacks "+strings.Join(lacks, ", "))
			}
			if len(extra) > 0 {
				why = append(why, "the source lacks "+strings.Join(extra, ", "))
			}
			return withDetail(ErrModelMismatch, fmt.Sprintf("%s.%s: %s: migrate the source or fix the model, or move by table names (MoveOptions.Tables)",
				schema, table, strings.Join(why, "; ")))
		}
	}
	return nil
}

// sourceColumns returns the column names of schema.table on db.
func sourceColumns(ctx context.Context, db *gorm.DB, schema, table string) ([]string, error) {
	defs, err := tableColumnDefs(ctx, db, schema, table)
	if err != nil {
		return nil, err
	}
	cols := make([]string, len(defs))
	for i, d := range defs {
		cols[i] = d.Name
	}
	return cols, nil
}

// fenceState is the row of a copy's fence table.
type fenceState struct {
	Exists    bool // the fence table exists
	Live      bool // fenced now, by the database's clock
	Sealed    bool // fenced for good by a move
	MoverOnly bool // a move's target
}

// readFence returns the state of schema's fence on db (fences of older
// versions included, through fenceLeft).
func readFence(ctx context.Context, db *gorm.DB, schema string) (fenceState, error) {
	var st fenceState
	ok, err := tableExists(ctx, db, schema, fenceTable)
	if err != nil || !ok {
		return st, err
	}
	st.Exists = true
	f, err := fenceLeft(ctx, db, schema)
	if err != nil || f == nil {
		return st, err
	}
	st.Live, st.Sealed, st.MoverOnly = true, f.Sealed, f.MoverOnly
	return st, nil
}

// checkSealedSource is called before a move creates anything. It reports
// whether the move's source is sealed (fenced for good by an earlier move).
// A sealed source may only be taken over by that move run again, which
// sealed it and could not flip: its target is then still fenced for the
// mover, as that move left it. Otherwise the target may be the shard's
// live home and the router's map stale, and the move would truncate the
// live home and refill it from the old copy: ErrShardMoved.
func checkSealedSource(ctx context.Context, src, dst *gorm.DB, schema string, shard int, from, to string) (bool, error) {
	st, err := readFence(ctx, src, schema)
	if err != nil || !st.Sealed {
		return false, err
	}
	tf, err := readFence(ctx, dst, schema)
	if err != nil {
		return false, err
	}
	if tf.Exists && tf.MoverOnly && tf.Live && !tf.Sealed {
		return true, nil
	}
	if tf.Exists || tf.Sealed {
		return false, withDetail(ErrShardMoved, fmt.Sprintf("shard %d lives on %s (its copy there takes writes), and %s holds its old copy, fenced for good: "+
			"this router's map is stale; load the catalog's map", shard, to, from))
	}
	tables, err := baseTables(ctx, dst, schema)
	if err != nil {
		return false, err
	}
	for _, t := range tables {
		var one int64
		if err := dst.WithContext(ctx).Raw("SELECT count(*) FROM (SELECT 1 FROM " + quoteTable(dst, schema, t) + " LIMIT 1) x").Scan(&one).Error; err != nil {
			return false, err
		}
		if one > 0 {
			return false, withDetail(ErrShardMoved, fmt.Sprintf("shard %d lives on %s (%s holds rows), and %s holds its old copy, fenced for good: "+
				"this router's map is stale; load the catalog's map", shard, to, t, from))
		}
	}
	return false, withDetail(ErrShardMoved, fmt.Sprintf("%s holds an old copy of shard %d, fenced for good, and %s no copy a move left: "+
		"the shard lives elsewhere; load the catalog's map", from, shard, to))
}

// restoreSeal fences the tables of schema on db for good again, as a move
// had sealed them before a move run again took the seal over (setFence
// over a seal, which keeps it sealed and changes its token only) and then
// failed: the old copy must never take writes again. It does so only
// while the fence is still the one of token, the failed move's: not over
// a fence set since by another mover. (A seal taken over by this version
// stays sealed; the seal of an older version's run was a timed fence.)
func restoreSeal(ctx context.Context, db *gorm.DB, schema string, token int64) error {
	st, until := fmt.Sprintf(`"%s".%s`, schema, fenceTable), "'infinity'"
	if db.Dialector.Name() == "mysql" {
		st, until = fmt.Sprintf("`%s`.`%s`", schema, fenceTable), "'9999-12-31 23:59:59'"
	}
	return db.WithContext(ctx).Exec("UPDATE "+st+" SET fenced_until = "+until+", token = token + 1, sealed = TRUE, mover_only = FALSE WHERE id = 1 AND token = ?", token).Error
}

// dropCreatedTarget drops what a failed move created on its target: the
// schema (a database on MySQL), which did not exist before the move, if it
// holds nothing but the move's tables, and the staging schema of
// PostgreSQL. The caller holds the move lock.
//
// The copy is dropped only while it is still the failed move's own: fenced
// for that mover alone, with token, the token its fence was given when the
// move created it. A move that lost its lock may find the lock free again
// once a rival mover took over the copy and finished the move: the copy is
// then the shard's live home (its fence lifted, a token moved on), and
// dropping it would lose every row. With token 0 (the move failed before
// it fenced its copy) the copy is dropped only if the lock was held all
// along (held).
func dropCreatedTarget(ctx context.Context, dst *gorm.DB, schema string, tables []string, token int64, held bool) error {
	mysql := dst.Dialector.Name() == "mysql"
	drop := func(tx *gorm.DB, s string) error {
		if mysql {
			return dropDatabaseMySQL(tx, s, tables, nil)
		}
		return tx.Exec(`DROP SCHEMA IF EXISTS "` + s + `" CASCADE`).Error
	}
	if !mysql {
		if err := drop(dst.WithContext(ctx), stagingSchema(schema)); err != nil {
			return err
		}
	}
	have, err := baseTables(ctx, dst, schema)
	if err != nil {
		return err
	}
	for _, t := range have {
		if !slices.Contains(tables, t) {
			return nil // someone else's: keep all
		}
	}
	dropOwn := func(tx *gorm.DB) error {
		ok, err := tableExists(ctx, tx, schema, fenceTable)
		if err != nil {
			return err
		}
		if !ok {
			if !held || token != 0 {
				return nil // not the copy this move fenced: keep it
			}
			return drop(tx, schema)
		}
		st := fmt.Sprintf(`"%s".%s`, schema, fenceTable)
		if mysql {
			st = fmt.Sprintf("`%s`.`%s`", schema, fenceTable)
		}
		var cur struct {
			Token     int64 `gorm:"column:token"`
			MoverOnly bool  `gorm:"column:mover_only"`
			Sealed    bool  `gorm:"column:sealed"`
		}
		if err := tx.Raw("SELECT token, mover_only, sealed FROM " + st + " WHERE id = 1 FOR UPDATE").Scan(&cur).Error; err != nil {
			return err
		}
		if token == 0 || cur.Token != token || !cur.MoverOnly || cur.Sealed {
			return nil // taken over, lifted or sealed since: not ours any more
		}
		return drop(tx, schema)
	}
	if mysql {
		// DROP DATABASE commits on its own; the move lock, held, keeps
		// every other mover from changing the fence in between.
		return dropOwn(dst.WithContext(ctx))
	}
	// PostgreSQL: the check and the drop in one transaction, the fence's
	// row locked.
	return dst.WithContext(ctx).Transaction(dropOwn)
}

// checkCopyHeld returns ErrCopyNotMoved unless the copy of schema on db is
// a move's leftover (sealed, or fenced for its mover) and every table of it
// exists on home, the shard's home, and holds rows there when it holds
// rows in the copy: DropShardCopy must never drop what no move carried
// over. Row counts are not compared otherwise: the home takes
// writes (and deletes) after the move.
func checkCopyHeld(ctx context.Context, db, home *gorm.DB, schema, from, homeName string) error {
	tables, err := baseTables(ctx, db, schema)
	if err != nil {
		return err
	}
	// A leftover is an old copy sealed by a move, or a failed move's
	// target, fenced for its mover. A copy that takes writes is a live
	// home: the router's map is stale.
	st, err := readFence(ctx, db, schema)
	if err != nil {
		return err
	}
	live := st.Exists && !st.Sealed && !(st.MoverOnly && st.Live)
	if !st.Exists {
		for _, t := range tables {
			var n int64
			if err := db.WithContext(ctx).Raw("SELECT count(*) FROM (SELECT 1 FROM " + quoteTable(db, schema, t) + " LIMIT 1) x").Scan(&n).Error; err != nil {
				return err
			}
			live = live || n > 0
		}
	}
	if live {
		return withDetail(ErrCopyNotMoved, fmt.Sprintf("the copy of %s on %s takes writes, or holds rows no move fenced: it is the shard's home, "+
			"and this router's map (naming %s) is stale; load the catalog's map", schema, from, homeName))
	}
	homeTables, err := baseTables(ctx, home, schema)
	if err != nil {
		return err
	}
	count := func(d *gorm.DB, t string) (int64, error) {
		var n int64
		err := d.WithContext(ctx).Raw("SELECT count(*) FROM (SELECT 1 FROM " + quoteTable(d, schema, t) + " LIMIT 1) x").Scan(&n).Error
		return n, err
	}
	var missing, empty []string
	for _, t := range tables {
		if !slices.Contains(homeTables, t) {
			missing = append(missing, t)
			continue
		}
		n, err := count(db, t)
		if err != nil || n == 0 {
			if err != nil {
				return err
			}
			continue
		}
		if n, err = count(home, t); err != nil {
			return err
		} else if n == 0 {
			empty = append(empty, t)
		}
	}
	var why []string
	if len(missing) > 0 {
		why = append(why, fmt.Sprintf("%s does not hold %s", homeName, strings.Join(missing, ", ")))
	}
	if len(empty) > 0 {
		why = append(why, fmt.Sprintf("%s holds rows there and none on %s", strings.Join(empty, ", "), homeName))
	}
	if len(why) > 0 {
		return withDetail(ErrCopyNotMoved, fmt.Sprintf("the copy of %s on %s: %s: move them first (MoveShard lists them), or drop the copy by hand",
			schema, from, strings.Join(why, "; ")))
	}
	return nil
}

// guardMove makes the checks of a move that need no lock, before it
// changes anything: the two databases are two, the move lists every table
// of the shard, and its models match the source's tables.
func guardMove(ctx context.Context, names []string, src, dst *gorm.DB, schema string, tables []string, models []any) error {
	if err := checkDistinct(ctx, names, []*gorm.DB{src, dst}); err != nil {
		return err
	}
	if err := checkListed(ctx, src, schema, tables); err != nil {
		return err
	}
	return checkModels(ctx, src, schema, models)
}
