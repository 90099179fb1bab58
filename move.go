package shardid

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// ErrShardMoving is returned by writes to a logical shard whose tables are
// fenced for a move. It is retryable: once routers follow the new map, the
// write goes to the shard's new database.
var ErrShardMoving = errors.New("shardid: shard is moving; retry")

// fenceMessage is what the fence trigger raises; callbacks turn it into
// ErrShardMoving.
const fenceMessage = "shardid: shard is fenced for a move"

// MoveOptions configures MoveShard.
type MoveOptions struct {
	// Models are the shard's tables, as models. Each must have an "id"
	// primary key. Models or Tables is required.
	Models []any

	// Tables names the shard's tables when there are no models (as in the
	// shardid move command): their definitions are copied from the source,
	// columns and primary key, without other indexes or defaults.
	Tables []string

	// Batch is how many rows each copy statement moves. If 0, 1000.
	Batch int

	// FenceFor is how long the source stays fenced if the move dies before
	// it flips the map: after that the source is writable again. If 0, 1m.
	FenceFor time.Duration

	// Progress, if not nil, is called after every batch with the table and
	// the rows copied from it so far.
	Progress func(table string, copied int64)

	// OnStage, if not nil, is called as the move reaches each stage:
	// "created" (the target's tables exist), "copied" (the first copy is
	// done), "fenced", "verified" and "flipped".
	OnStage func(stage string)
}

// MoveResult says what MoveShard did.
type MoveResult struct {
	Shard    int
	From, To string
	Tables   []TableCheck // as verified on both sides
	Version  int64        // the catalog version of the new map
	Fenced   time.Duration
}

// TableCheck is a table's row count and checksum, equal on both sides.
type TableCheck struct {
	Table    string
	Rows     int64
	Checksum uint64
}

// MoveShard moves logical shard to the database named target, with every ID
// unchanged: it creates the shard's schema and tables on the target, copies
// the rows in batches, fences the source (its tables refuse writes, so a
// router still on the old map gets ErrShardMoving instead of writing to the
// wrong place), copies again what changed meanwhile, verifies row counts and
// checksums per table on both sides, and only then flips the map in r and in
// the catalog. Writes to the shard fail with ErrShardMoving from the fence
// until routers follow the new map; other shards are untouched.
//
// The source keeps its copy, fenced, until DropShardCopy. If the move fails
// before the flip, the map still points at the source, which is writable
// again after FenceFor, or at once with Unfence; the move can be run again.
//
// The router needs a SchemaPattern (a schema per shard on PostgreSQL, a
// database per shard on MySQL); both databases must be of one kind.
func (r *Router) MoveShard(ctx context.Context, c *Catalog, shard int, target string, opts MoveOptions) (res MoveResult, err error) {
	res = MoveResult{Shard: shard, To: target}
	if err := r.checkMove(shard); err != nil {
		return res, err
	}
	to := slices.Index(r.names, target)
	from := r.table.Load().dbOf[shard]
	res.From = r.names[from]
	if to < 0 || to == from {
		return res, withDetail(ErrInvalidConfig, fmt.Sprintf("move shard %d from %s to %q: not another database of the router", shard, res.From, target))
	}
	if d1, d2 := r.dbs[from].Dialector.Name(), r.dbs[to].Dialector.Name(); d1 != d2 || (d1 != "postgres" && d1 != "mysql") {
		return res, withDetail(ErrInvalidConfig, "moving shards needs PostgreSQL or MySQL/MariaDB on both sides, not "+d1+" and "+d2)
	}
	if len(opts.Models) == 0 && len(opts.Tables) == 0 {
		return res, withDetail(ErrInvalidConfig, "MoveOptions has neither Models nor Tables")
	}
	if opts.Batch <= 0 {
		opts.Batch = 1000
	}
	if opts.FenceFor <= 0 {
		opts.FenceFor = time.Minute
	}
	src, dst, schema := r.dbs[from], r.dbs[to], r.schemas[shard]
	// defs are the shard's tables as models, or as names (validated by
	// tableNames) when there are no models.
	defs := opts.Models
	if len(defs) == 0 {
		for _, t := range opts.Tables {
			defs = append(defs, t)
		}
	}
	tables, err := tableNames(src, defs)
	if err != nil {
		return res, err
	}
	mv := r.startMove(shard, res.From, target)
	defer func() { mv.finish(res.Fenced, err) }()
	opts.Progress = mv.progress(opts.Progress)

	// 1. The schema and tables on the target.
	if len(opts.Models) > 0 {
		err = migrateShard(ctx, dst, schema, opts.Models)
	} else {
		err = copyDefinitions(ctx, src, dst, schema, tables)
	}
	if err != nil {
		return res, fmt.Errorf("shardid: creating shard %d on %s: %w", shard, target, err)
	}
	stage := func(s string) {
		mv.stage(s)
		if opts.OnStage != nil {
			opts.OnStage(s)
		}
	}
	stage("created")
	// 2. A first copy, while the source takes writes.
	for _, t := range tables {
		if _, err := copyTable(ctx, src, dst, schema+"."+t, opts.Batch, opts.Progress); err != nil {
			return res, err
		}
	}
	stage("copied")
	// 3. The fence: from here on no write reaches the source.
	fenced := time.Now()
	if err := r.Fence(ctx, shard, defs, opts.FenceFor); err != nil {
		return res, err
	}
	mv.fenced()
	stage("fenced")
	flipped := false
	defer func() {
		if !flipped {
			// The source is still the shard's home: let writes through at
			// once rather than when the fence runs out.
			_ = r.Unfence(context.WithoutCancel(ctx), shard, defs)
			mv.lifted()
		}
	}()
	// 4. What changed during the first copy, then 5. verification.
	for _, t := range tables {
		q := schema + "." + t
		if _, err := copyTable(ctx, src, dst, q, opts.Batch, opts.Progress); err != nil {
			return res, err
		}
		if err := deleteMissing(ctx, src, dst, q); err != nil {
			return res, err
		}
		a, err := checkTable(ctx, src, q)
		if err != nil {
			return res, err
		}
		b, err := checkTable(ctx, dst, q)
		if err != nil {
			return res, err
		}
		if a != b {
			return res, fmt.Errorf("shardid: shard %d table %s differs after the copy: %d rows (%x) on %s, %d (%x) on %s",
				shard, t, a.Rows, a.Checksum, res.From, b.Rows, b.Checksum, target)
		}
		a.Table = t
		res.Tables = append(res.Tables, a)
	}
	stage("verified")
	if time.Since(fenced) > opts.FenceFor*8/10 {
		return res, fmt.Errorf("shardid: the final copy of shard %d took %v, too close to the %v fence: not flipping", shard, time.Since(fenced), opts.FenceFor)
	}
	// 6. The flip: this router at once, the others through the catalog.
	m := r.Map()
	m[shard] = to
	if err := r.SetMap(m); err != nil {
		return res, err
	}
	flipped = true
	if c != nil {
		if res.Version, err = c.Save(ctx, r); err != nil {
			return res, fmt.Errorf("shardid: shard %d is on %s, but the catalog was not updated: %w", shard, target, err)
		}
	}
	// The source stays fenced for good: a router that has not followed the
	// catalog yet must not write there.
	if err := fenceTables(ctx, src, schema, tables, time.Time{}); err != nil {
		return res, fmt.Errorf("shardid: shard %d moved, but its old copy on %s could not be fenced for good: %w", shard, res.From, err)
	}
	res.Fenced = time.Since(fenced)
	stage("flipped")
	return res, nil
}

func (r *Router) checkMove(shard int) error {
	if r.schemas == nil {
		return withDetail(ErrInvalidConfig, "moving shards needs a SchemaPattern: a schema per logical shard")
	}
	if shard < 0 || shard >= r.shards {
		return withDetail(ErrShardRange, rangeDetail(shard, r.shards))
	}
	return nil
}

// Fence makes the tables of shard, on the database that holds it now, refuse
// every write with ErrShardMoving for d (for good when d is 0).
func (r *Router) Fence(ctx context.Context, shard int, models []any, d time.Duration) error {
	if err := r.checkMove(shard); err != nil {
		return err
	}
	db := r.dbs[r.table.Load().dbOf[shard]]
	tables, err := tableNames(db, models)
	if err != nil {
		return err
	}
	until := time.Time{}
	if d > 0 {
		until = time.Now().Add(d)
	}
	if err := fenceTables(ctx, db, r.schemas[shard], tables, until); err != nil {
		return err
	}
	r.fenceSet(shard, r.DatabaseName(shard), until)
	return nil
}

// Unfence lets writes through to shard's tables again: the way to abort a
// move before its flip.
func (r *Router) Unfence(ctx context.Context, shard int, models []any) error {
	if err := r.checkMove(shard); err != nil {
		return err
	}
	db := r.dbs[r.table.Load().dbOf[shard]]
	tables, err := tableNames(db, models)
	if err != nil {
		return err
	}
	for _, t := range tables {
		for _, q := range dropFence(db, r.schemas[shard], t) {
			if err := db.WithContext(ctx).Exec(q).Error; err != nil {
				return err
			}
		}
	}
	r.fenceLifted(shard, r.DatabaseName(shard))
	return nil
}

// dropFence returns the statements that remove the fence of one table.
func dropFence(db *gorm.DB, schema, table string) []string {
	if db.Dialector.Name() == "mysql" {
		var qs []string
		for _, ev := range []string{"i", "u", "d"} {
			qs = append(qs, fmt.Sprintf("DROP TRIGGER IF EXISTS `%s`.`shardid_fence_%s_%s`", schema, ev, table))
		}
		return qs
	}
	return []string{fmt.Sprintf(`DROP TRIGGER IF EXISTS shardid_fence ON "%s"."%s"`, schema, table)}
}

// DropShardCopy drops the copy of shard left on the database named from by
// a move. It refuses while the map still points there.
func (r *Router) DropShardCopy(ctx context.Context, shard int, from string) error {
	if err := r.checkMove(shard); err != nil {
		return err
	}
	d := slices.Index(r.names, from)
	if d < 0 || r.table.Load().dbOf[shard] == d {
		return withDetail(ErrInvalidConfig, fmt.Sprintf("shard %d lives on %q: its copy there is not a leftover", shard, from))
	}
	if r.dbs[d].Dialector.Name() == "mysql" {
		return r.dbs[d].WithContext(ctx).Exec("DROP DATABASE IF EXISTS `" + r.schemas[shard] + "`").Error
	}
	return r.dbs[d].WithContext(ctx).Exec(`DROP SCHEMA IF EXISTS "` + r.schemas[shard] + `" CASCADE`).Error
}

// fenceTables installs the fence trigger on tables of schema, until the
// given time (for good when zero). Creating the trigger waits for the
// writers under way, so every write before it is committed and none after.
func fenceTables(ctx context.Context, db *gorm.DB, schema string, tables []string, until time.Time) error {
	if db.Dialector.Name() == "mysql" {
		return fenceMySQL(ctx, db, schema, tables, until)
	}
	cond := "TRUE"
	if !until.IsZero() {
		cond = "clock_timestamp() < TIMESTAMPTZ '" + until.UTC().Format("2006-01-02 15:04:05.999999Z07:00") + "'"
	}
	fn := fmt.Sprintf(`CREATE OR REPLACE FUNCTION "%s".shardid_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF %s THEN
		RAISE EXCEPTION '%s' USING ERRCODE = '55000';
	END IF;
	RETURN NULL;
END $$`, schema, cond, fenceMessage)
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(fn).Error; err != nil {
			return err
		}
		for _, t := range tables {
			q := fmt.Sprintf(`"%s"."%s"`, schema, t)
			if err := tx.Exec(`DROP TRIGGER IF EXISTS shardid_fence ON ` + q).Error; err != nil {
				return err
			}
			if err := tx.Exec(fmt.Sprintf(`CREATE TRIGGER shardid_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s
				FOR EACH STATEMENT EXECUTE FUNCTION "%s".shardid_fence()`, q, schema)).Error; err != nil {
				return err
			}
		}
		return nil
	})
}

// fenceMySQL fences with row triggers, one per write event: MySQL has no
// statement triggers. Creating a trigger takes the table's metadata lock,
// so it waits for the transactions that wrote to it.
func fenceMySQL(ctx context.Context, db *gorm.DB, schema string, tables []string, until time.Time) error {
	cond := "TRUE"
	if !until.IsZero() {
		cond = "UTC_TIMESTAMP(6) < '" + until.UTC().Format("2006-01-02 15:04:05.999999") + "'"
	}
	for _, t := range tables {
		for _, q := range dropFence(db, schema, t) {
			if err := db.WithContext(ctx).Exec(q).Error; err != nil {
				return err
			}
		}
		for ev, event := range map[string]string{"i": "INSERT", "u": "UPDATE", "d": "DELETE"} {
			q := fmt.Sprintf("CREATE TRIGGER `%s`.`shardid_fence_%s_%s` BEFORE %s ON `%s`.`%s` FOR EACH ROW "+
				"BEGIN IF %s THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '%s'; END IF; END",
				schema, ev, t, event, schema, t, cond, fenceMessage)
			if err := db.WithContext(ctx).Exec(q).Error; err != nil {
				return err
			}
		}
	}
	return nil
}

// markMoving turns the fence's error into ErrShardMoving. It is registered
// after GORM's create, update and delete callbacks.
func markMoving(db *gorm.DB) {
	if db.Error != nil && !errors.Is(db.Error, ErrShardMoving) && strings.Contains(db.Error.Error(), fenceMessage) {
		db.Error = errors.Join(ErrShardMoving, db.Error)
	}
}

// tableNames returns the table names of models, validated. A model may be
// a table name itself.
func tableNames(db *gorm.DB, models []any) ([]string, error) {
	var names []string
	for _, m := range models {
		if name, ok := m.(string); ok {
			if !schemaName.MatchString(name) {
				return nil, withDetail(ErrInvalidConfig, fmt.Sprintf("table name %q: want %s", name, schemaName))
			}
			names = append(names, name)
			continue
		}
		stmt := &gorm.Statement{DB: db}
		if err := stmt.Parse(m); err != nil {
			return nil, err
		}
		if !schemaName.MatchString(stmt.Schema.Table) {
			return nil, withDetail(ErrInvalidConfig, fmt.Sprintf("table name %q: want %s", stmt.Schema.Table, schemaName))
		}
		names = append(names, stmt.Schema.Table)
	}
	return names, nil
}

// copyTable upserts every row of table from src into dst, in id order, in
// batches.
func copyTable(ctx context.Context, src, dst *gorm.DB, table string, batch int, progress func(string, int64)) (int64, error) {
	var copied int64
	var after any = int64(-1 << 63)
	for {
		var rows []map[string]any
		if err := src.WithContext(ctx).Table(table).Where("id > ?", after).Order("id").Limit(batch).Find(&rows).Error; err != nil {
			return copied, fmt.Errorf("shardid: reading %s: %w", table, err)
		}
		if len(rows) == 0 {
			return copied, nil
		}
		var cols []string
		for k := range rows[0] {
			if k != "id" {
				cols = append(cols, k)
			}
		}
		err := dst.WithContext(ctx).Table(table).Clauses(clause.OnConflict{
			Columns: []clause.Column{{Name: "id"}}, DoUpdates: clause.AssignmentColumns(cols),
		}).Create(&rows).Error
		if err != nil {
			return copied, fmt.Errorf("shardid: writing %s: %w", table, err)
		}
		copied += int64(len(rows))
		after = rows[len(rows)-1]["id"]
		if progress != nil {
			progress(table, copied)
		}
	}
}

// deleteMissing deletes from dst the rows of table that src no longer has.
func deleteMissing(ctx context.Context, src, dst *gorm.DB, table string) error {
	var have, want []int64
	if err := dst.WithContext(ctx).Table(table).Order("id").Pluck("id", &have).Error; err != nil {
		return err
	}
	if err := src.WithContext(ctx).Table(table).Order("id").Pluck("id", &want).Error; err != nil {
		return err
	}
	var gone []int64
	for _, id := range have {
		if _, ok := slices.BinarySearch(want, id); !ok {
			gone = append(gone, id)
		}
	}
	for len(gone) > 0 {
		n := min(len(gone), 1000)
		if err := dst.WithContext(ctx).Exec("DELETE FROM "+table+" WHERE id IN ?", gone[:n]).Error; err != nil {
			return err
		}
		gone = gone[n:]
	}
	return nil
}

// checkTable counts the rows of table and hashes them (FNV-1a 64 over each
// row's JSON, in id order).
func checkTable(ctx context.Context, db *gorm.DB, table string) (TableCheck, error) {
	h := fnv.New64a()
	var n int64
	var after any = int64(-1 << 63)
	for {
		var rows []map[string]any
		if err := db.WithContext(ctx).Table(table).Where("id > ?", after).Order("id").Limit(5000).Find(&rows).Error; err != nil {
			return TableCheck{}, err
		}
		if len(rows) == 0 {
			return TableCheck{Rows: n, Checksum: h.Sum64()}, nil
		}
		for _, row := range rows {
			b, err := json.Marshal(row) // map keys are sorted: a stable text
			if err != nil {
				return TableCheck{}, err
			}
			h.Write(b)
		}
		n += int64(len(rows))
		after = rows[len(rows)-1]["id"]
	}
}

// copyDefinitions creates the schema and tables on dst as they are on src:
// on MySQL with SHOW CREATE TABLE, on PostgreSQL from the columns and the
// "id" primary key.
func copyDefinitions(ctx context.Context, src, dst *gorm.DB, schema string, tables []string) error {
	if dst.Dialector.Name() == "mysql" {
		if err := dst.WithContext(ctx).Exec("CREATE DATABASE IF NOT EXISTS `" + schema + "`").Error; err != nil {
			return err
		}
		for _, t := range tables {
			var row struct {
				Table       string `gorm:"column:Table"`
				CreateTable string `gorm:"column:Create Table"`
			}
			if err := src.WithContext(ctx).Raw("SHOW CREATE TABLE `" + schema + "`.`" + t + "`").Scan(&row).Error; err != nil {
				return err
			}
			ddl, ok := strings.CutPrefix(row.CreateTable, "CREATE TABLE `"+t+"`")
			if !ok {
				return fmt.Errorf("shardid: unexpected definition of %s.%s: %.60q", schema, t, row.CreateTable)
			}
			if err := dst.WithContext(ctx).Exec("CREATE TABLE IF NOT EXISTS `" + schema + "`.`" + t + "`" + ddl).Error; err != nil {
				return err
			}
		}
		return nil
	}
	if err := dst.WithContext(ctx).Exec(`CREATE SCHEMA IF NOT EXISTS "` + schema + `"`).Error; err != nil {
		return err
	}
	for _, t := range tables {
		var cols []struct {
			Name    string
			Type    string
			NotNull bool
		}
		err := src.WithContext(ctx).Raw(`SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null
			FROM pg_attribute a JOIN pg_class c ON a.attrelid = c.oid JOIN pg_namespace n ON c.relnamespace = n.oid
			WHERE n.nspname = ? AND c.relname = ? AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, schema, t).Scan(&cols).Error
		if err != nil {
			return err
		}
		if len(cols) == 0 {
			return fmt.Errorf("shardid: %s.%s has no columns on the source", schema, t)
		}
		var defs []string
		for _, c := range cols {
			d := `"` + c.Name + `" ` + c.Type
			if c.NotNull {
				d += " NOT NULL"
			}
			defs = append(defs, d)
		}
		defs = append(defs, `PRIMARY KEY ("id")`)
		q := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS "%s"."%s" (%s)`, schema, t, strings.Join(defs, ", "))
		if err := dst.WithContext(ctx).Exec(q).Error; err != nil {
			return err
		}
	}
	return nil
}
