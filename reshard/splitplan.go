package reshard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// SplitPlan is what PlanSplit found: where each shard still in the
// monolith goes, in which batches, what will move, and what cannot be
// split safely. It changes nothing; RunSplit carries it out. It is stored
// as JSON for review (ParseSplitPlan reads it back).
type SplitPlan struct {
	Monolith      string
	Schema        string // the monolith's schema (MySQL: database)
	Databases     []string
	LogicalShards int
	SchemaPattern string
	Tables        []SplitTable
	Global        []string

	// To gives, for each shard to split, the database it goes to; the
	// shards not in it are split already.
	To map[int]string
	// Batches are the steps, in order: each fences only its own shards.
	Batches [][]int

	// Rows counts the rows to move: per table, per target database, and
	// per shard (all tables).
	Rows      map[string]int64
	RowsPerDB map[string]int64
	ShardRows map[int]int64
	// Estimate is the time the split should take at RowsPerSecond rows
	// per second plus PerShard for each shard's schema.
	Estimate      time.Duration
	RowsPerSecond int64
	PerShard      time.Duration

	// Refusals are what cannot be split safely. A plan with refusals
	// cannot be run.
	Refusals []SplitRefusal `json:",omitempty"`
	// Warnings are what the split can do, but slowly or with long stalls
	// of the writers: a plan with warnings runs.
	Warnings []SplitWarning `json:",omitempty"`
}

// SplitWarning is a condition in which a split runs, but at a cost to the
// writers that the operator can avoid first.
type SplitWarning struct {
	// Kind is "table-cache": a MySQL server whose table caches are
	// smaller than the tables it will hold once split; or "privileges":
	// the mover may not read other MySQL users' privileges, so the plan
	// could not check that the users of the sharded tables may use the
	// shards' databases.
	Kind     string
	Database string // the target database concerned
	Detail   string // the condition and its fix
}

func (w SplitWarning) String() string { return w.Kind + ": " + w.Database + ": " + w.Detail }

// SplitRefusal is one reason a monolith cannot be split safely.
type SplitRefusal struct {
	// Kind is one of "no-primary-key", "null-key", "cross-shard-key",
	// "global-key", "cascade-key", "unlisted-table", "target-holds-data",
	// "bad-table", "id-mismatch", "tables-changed", "privileges" (Table
	// names the database: what the mover may not do there, and the fix).
	Kind   string
	Table  string
	Detail string
	// IDs are the first rows (primary keys) concerned, if rows are.
	IDs []int64 `json:",omitempty"`
}

func (r SplitRefusal) String() string {
	s := r.Kind + ": " + r.Table + ": " + r.Detail
	if len(r.IDs) > 0 {
		s += " (ids " + joinIDs(r.IDs) + ")"
	}
	return s
}

// splitEstimate returns PlanSplit's estimates for a monolith on
// PostgreSQL or on MySQL: the rows per second of a whole split (copy,
// verification, change log, clean-up) and the cost of each shard's schema.
// They are the slowest runs of BenchmarkSplitPostgres and
// BenchmarkSplitMariaDB (1,000,000 rows into 2,000 shards beside 4 writers
// as fast as they can, on 2 cores shared by the servers, the writers and
// the split; docs/resharding.md, "What it costs"), rounded down: a
// pessimistic figure on a server of its own.
func splitEstimate(mysql bool) (rowsPerSecond int64, perShard time.Duration) {
	if mysql {
		// Schemas: 22 ms each (a database, its tables, the fence's
		// table and 9 triggers); rows: 24,000 a second after them.
		return 15_000, 30 * time.Millisecond
	}
	// Schemas: 5 to 6 ms each; rows: 43,000 to 62,000 a second after them.
	return 30_000, 8 * time.Millisecond
}

// PlanSplit plans the split of the shards still shared on cfg.Monolith
// onto targets (contiguous ranges of shards, one per target, in order),
// batch shards per step (if 0, 100), and checks, changing nothing, that it
// can be done safely. It refuses, naming the tables and the first rows:
// a sharded table without a primary key on id alone; rows whose key is
// NULL or negative, or whose parent is missing; a foreign key whose rows
// cross shards, or that joins a sharded table and a global one (it
// cannot hold once they are apart); a table of the monolith that neither
// Tables nor Global lists (shardid's own tables, shardid_*, aside); a
// shard's schema on its target that holds rows; a privilege the mover
// lacks (see SplitShards), or a role that uses the sharded tables and
// could not connect to a target. With refusals it returns
// the plan and an error matching ErrSplitRefused listing them. It also
// warns (Warnings), and returns no error for it, of a MySQL server whose
// table caches are smaller than the tables it will hold once split.
func PlanSplit(ctx context.Context, cfg SplitConfig, targets []string, batch int) (*SplitPlan, error) {
	sp, err := newSplitter(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if sp.ids, err = newIDCheck(ctx, cfg); err != nil {
		return nil, err
	}
	if batch <= 0 {
		batch = 100
	}
	if len(targets) == 0 {
		return nil, withDetail(shardid.ErrInvalidConfig, "split: no target databases")
	}
	for _, t := range targets {
		if d := cfg.Map.DatabaseIndex(t); d < 0 || d == sp.monoIdx {
			return nil, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("split: target %q: not another database of the map", t))
		}
	}
	p := &SplitPlan{Monolith: cfg.Monolith, Schema: sp.schema, Databases: cfg.Map.Databases(), LogicalShards: sp.shards,
		SchemaPattern: cfg.Map.SchemaPattern(), Tables: sp.tables, Global: cfg.Global, To: map[int]string{},
		Rows: map[string]int64{}, RowsPerDB: map[string]int64{}, ShardRows: map[int]int64{}}
	p.RowsPerSecond, p.PerShard = splitEstimate(sp.mysql)
	v := cfg.Map.Load()
	var todo []int
	for s := range sp.shards {
		if v.Shared(s) && v.DB(s) == sp.monoIdx {
			todo = append(todo, s)
		}
	}
	for i, s := range todo {
		p.To[s] = targets[i*len(targets)/len(todo)]
	}
	p.Batches = splitBatches(todo, p.To, targets, batch)
	refuse := func(kind, table, detail string, ids []int64) {
		p.Refusals = append(p.Refusals, SplitRefusal{Kind: kind, Table: table, Detail: detail, IDs: ids})
	}
	ok, err := sp.checkTables(ctx, refuse, true)
	if err != nil {
		return nil, err
	}
	if err := sp.checkDeclared(ctx, false); errors.Is(err, ErrTablesChanged) {
		refuse("tables-changed", sp.cfg.Monolith, strings.TrimPrefix(err.Error(), ErrTablesChanged.Error()+": "), nil)
	} else if err != nil {
		return nil, err
	}
	if len(todo) > 0 {
		if err := sp.countRows(ctx, p, todo, ok); err != nil {
			return nil, err
		}
		if sp.ids == nil {
			p.Warnings = append(p.Warnings, SplitWarning{Kind: "ids-unchecked", Database: cfg.Monolith,
				Detail: "no Layout is given (split.json: Layout): a row whose key changed since its ID was issued would be copied where no lookup by its ID finds it"})
		} else if err := sp.planIDs(ctx, todo, ok, refuse); err != nil {
			return nil, err
		}
		b := &splitBatch{sp: sp, to: map[int]int{}}
		for _, s := range todo {
			b.to[s] = cfg.Map.DatabaseIndex(p.To[s])
			b.shards = append(b.shards, s)
		}
		targetsIdx, shards := b.byTarget()
		for _, d := range targetsIdx {
			rows, err := targetRows(ctx, cfg.DBs[d], shardSchemas(b, shards[d]))
			if err != nil {
				return nil, err
			}
			for _, r := range rows {
				if !r.moverFenced {
					refuse("target-holds-data", r.schema+"."+r.table, fmt.Sprintf("%s holds %d row(s): a split writes only into empty schemas", p.Databases[d], r.rows), r.ids)
				}
			}
		}
		problems, warnings, _, err := sp.splitPrivileges(ctx, targetsIdx, shards)
		if err != nil {
			return nil, err
		}
		for _, pr := range problems {
			db, detail, _ := strings.Cut(pr, ": ")
			refuse("privileges", db, detail, nil)
		}
		for _, w := range warnings {
			p.Warnings = append(p.Warnings, SplitWarning{Kind: "privileges", Database: cfg.Monolith, Detail: w})
		}
		if sp.mysql {
			if err := sp.checkTableCaches(ctx, p, targetsIdx, shards); err != nil {
				return nil, err
			}
		}
	}
	var total int64
	for _, n := range p.Rows {
		total += n
	}
	p.Estimate = time.Duration(float64(total)/float64(p.RowsPerSecond)*float64(time.Second)) + time.Duration(len(todo))*p.PerShard
	if len(p.Refusals) > 0 {
		return p, p.refused()
	}
	return p, nil
}

// splitBatches cuts todo (in order, each shard's target in to) into
// batches of size shards, each taking its shards from every target in
// turn: a batch's schemas are created, filled and verified on all its
// targets at once, not on one target while the others wait. Within a
// batch the shards are in order.
func splitBatches(todo []int, to map[int]string, targets []string, size int) [][]int {
	per := map[string][]int{}
	for _, s := range todo {
		per[to[s]] = append(per[to[s]], s)
	}
	var order []int
	for len(order) < len(todo) {
		for _, t := range targets {
			if len(per[t]) > 0 {
				order = append(order, per[t][0])
				per[t] = per[t][1:]
			}
		}
	}
	var out [][]int
	for lo := 0; lo < len(order); lo += size {
		b := slices.Clone(order[lo:min(lo+size, len(order))])
		slices.Sort(b)
		out = append(out, b)
	}
	return out
}

// refused is the error of a plan with refusals.
func (p *SplitPlan) refused() error {
	lines := make([]string, len(p.Refusals))
	for i, r := range p.Refusals {
		lines[i] = r.String()
	}
	err := ErrSplitRefused
	for _, r := range p.Refusals {
		switch {
		case r.Kind == "tables-changed":
			err = ErrTablesChanged
		case r.Kind == "privileges" && err != ErrTablesChanged:
			err = ErrMoverPrivileges
		case r.Kind == "target-holds-data" && err != ErrTablesChanged && err != ErrMoverPrivileges:
			err = ErrTargetHoldsData
		}
	}
	return withDetail(err, strings.Join(lines, "; "))
}

// checkTables finds what cannot be split safely in the monolith's tables:
// with rows, all of it; without, what the catalog alone tells (the tables
// no rule covers, the declared tables' keys and columns, the foreign keys
// between a sharded table and another), which a run checks again
// (checkStructure).
//
// It returns the tables that can be read as declared.
func (sp *splitter) checkTables(ctx context.Context, refuse func(kind, table, detail string, ids []int64), rows bool) (map[string]bool, error) {
	db := sp.mono.WithContext(ctx)
	have, err := baseTables(ctx, sp.mono, sp.schema)
	if err != nil {
		return nil, err
	}
	for _, t := range have {
		if !slices.Contains(sp.cfg.Global, t) && sp.byName[t].Name == "" && !strings.HasPrefix(t, "shardid_") && !sp.catalogTable(t) {
			refuse("unlisted-table", t, "no rule covers it: declare it a sharded table (Tables) or a global one (Global)", nil)
		}
	}
	for _, g := range sp.cfg.Global {
		if !slices.Contains(have, g) {
			refuse("bad-table", g, "a global table the monolith does not have", nil)
		}
	}
	ok := map[string]bool{}
	for _, t := range sp.tables {
		if !slices.Contains(have, t.Name) {
			refuse("bad-table", t.Name, "a sharded table the monolith does not have", nil)
			continue
		}
		cols, err := sourceColumns(ctx, sp.mono, sp.schema, t.Name)
		if err != nil {
			return nil, err
		}
		pk, err := primaryKey(ctx, sp.mono, sp.schema, t.Name)
		if err != nil {
			return nil, err
		}
		switch {
		case len(pk) == 0:
			refuse("no-primary-key", t.Name, "a sharded table needs a primary key on id: its rows cannot be told apart", nil)
			continue
		case !slices.Equal(pk, []string{"id"}):
			refuse("no-primary-key", t.Name, fmt.Sprintf("its primary key is (%s): a split needs one on id alone", strings.Join(pk, ", ")), nil)
			continue
		case slices.Contains(cols, "shardid_s"):
			refuse("bad-table", t.Name, "a column is called shardid_s, which the split uses", nil)
			continue
		}
		for _, c := range []string{t.Key, t.Via} {
			if c != "" && !slices.Contains(cols, c) {
				refuse("bad-table", t.Name, "it has no column "+c, nil)
			}
		}
		ok[t.Name] = true
	}
	// Rows no shard holds.
	for _, t := range sp.tables {
		if !rows || !ok[t.Name] || t.Parent != "" && !ok[t.Parent] {
			continue
		}
		var q, why string
		if t.Key != "" {
			k := quoteIdent(sp.mono, t.Key)
			q = "SELECT id FROM " + sp.q(t.Name) + " WHERE " + k + " IS NULL OR " + k + " < 0"
			why = "its sharding key " + t.Key + " is NULL or negative: no shard holds them"
		} else {
			q = "SELECT x.id FROM " + sp.q(t.Name) + " AS x LEFT JOIN " + sp.q(t.Parent) + " AS p ON p.id = x." + quoteIdent(sp.mono, t.Via) + " WHERE p.id IS NULL"
			why = "their parent row in " + t.Parent + " (by " + t.Via + ") is missing: no shard holds them"
		}
		ids, n, err := firstIDs(ctx, db, q)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			refuse("null-key", t.Name, fmt.Sprintf("%d row(s): %s", n, why), ids)
		}
	}
	// Foreign keys.
	fks, err := foreignKeys(ctx, sp.mono, sp.schema)
	if err != nil {
		return nil, err
	}
	for _, fk := range fks {
		from, to := sp.byName[fk.Table], sp.byName[fk.RefTable]
		fs, ts := from.Name != "", to.Name != ""
		switch {
		case !fs && !ts:
			continue
		case fs != ts:
			refuse("global-key", fk.Table, fmt.Sprintf("foreign key %s references %s: one is sharded, the other not, and they will be on different databases; drop the key first",
				fk.Name, fk.RefTable), nil)
			continue
		case sp.mysql && fk.cascades():
			// MySQL fires no trigger for the rows a cascade changes: the
			// change log would miss them, and a batch's copy would keep a
			// child its parent's delete took, or leave one its update moved.
			refuse("cascade-key", fk.Table, fmt.Sprintf("foreign key %s references %s with ON DELETE %s ON UPDATE %s: MySQL fires no trigger for the rows a cascade changes, "+
				"so the split cannot capture them; make the key RESTRICT or NO ACTION (and delete or update the child rows yourself) before the split",
				fk.Name, fk.RefTable, fk.OnDelete, fk.OnUpdate), nil)
			continue
		case !rows || !ok[fk.Table] || !ok[fk.RefTable]:
			continue
		}
		fromSQL, fromShard := sp.from(from)
		toSQL, toShard := sp.from(to)
		var on []string
		for i := range fk.Cols {
			on = append(on, "b."+quoteIdent(sp.mono, fk.RefCols[i])+" = a."+quoteIdent(sp.mono, fk.Cols[i]))
		}
		q := "SELECT a.id FROM (SELECT x.*, " + fromShard + " AS shardid_s FROM " + fromSQL + ") AS a JOIN (SELECT x.*, " + toShard + " AS shardid_s FROM " + toSQL +
			") AS b ON " + strings.Join(on, " AND ") + " WHERE a.shardid_s <> b.shardid_s"
		ids, n, err := firstIDs(ctx, db, q)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			refuse("cross-shard-key", fk.Table, fmt.Sprintf("%d row(s) reference, by foreign key %s, rows of %s in another shard: they would be on different databases", n, fk.Name, fk.RefTable), ids)
		}
	}
	return ok, nil
}

// firstIDs runs q (SELECT id ...) and returns its first 5 ids in order and
// how many rows it gives.
func firstIDs(ctx context.Context, db *gorm.DB, q string) ([]int64, int64, error) {
	var n int64
	if err := db.Raw("SELECT count(*) FROM (" + q + ") AS c").Scan(&n).Error; err != nil || n == 0 {
		return nil, n, err
	}
	var ids []int64
	err := db.Raw("SELECT id FROM (" + q + ") AS c ORDER BY id LIMIT 5").Scan(&ids).Error
	return ids, n, err
}

// primaryKey returns the columns of the primary key of schema.table.
func primaryKey(ctx context.Context, db *gorm.DB, schema, table string) ([]string, error) {
	q := `SELECT a.attname FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
		WHERE n.nspname = ? AND c.relname = ? AND i.indisprimary ORDER BY k.ord`
	if db.Dialector.Name() == "mysql" {
		q = "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX"
	}
	var cols []string
	err := db.WithContext(ctx).Raw(q, schema, table).Scan(&cols).Error
	return cols, err
}

// foreignKey is a foreign key of the monolith.
type foreignKey struct {
	Name, Table, RefTable string
	Cols, RefCols         []string
	// OnDelete and OnUpdate are the key's actions, as SQL spells them
	// (CASCADE, SET NULL, SET DEFAULT, RESTRICT, NO ACTION).
	OnDelete, OnUpdate string
}

// cascades reports whether fk changes rows of its table when its
// referenced rows are deleted or updated.
func (fk foreignKey) cascades() bool {
	quiet := func(rule string) bool { return rule == "RESTRICT" || rule == "NO ACTION" }
	return !quiet(fk.OnDelete) || !quiet(fk.OnUpdate)
}

// foreignKeys returns the foreign keys between tables of schema.
func foreignKeys(ctx context.Context, db *gorm.DB, schema string) ([]foreignKey, error) {
	var rows []struct {
		Name, Tbl, RefTbl, Col, RefCol, OnDelete, OnUpdate string
	}
	q := `SELECT con.conname AS name, c.relname AS tbl, rc.relname AS ref_tbl, a.attname AS col, ra.attname AS ref_col,
		` + fmt.Sprintf(pgKeyAction, "con.confdeltype") + ` AS on_delete, ` + fmt.Sprintf(pgKeyAction, "con.confupdtype") + ` AS on_update
		FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_class rc ON rc.oid = con.confrelid JOIN pg_namespace rn ON rn.oid = rc.relnamespace
		CROSS JOIN LATERAL unnest(con.conkey, con.confkey) WITH ORDINALITY AS k(attnum, refnum, ord)
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
		JOIN pg_attribute ra ON ra.attrelid = rc.oid AND ra.attnum = k.refnum
		WHERE con.contype = 'f' AND (n.nspname = ? OR rn.nspname = ?) ORDER BY 2, 1, k.ord`
	args := []any{schema, schema}
	if db.Dialector.Name() == "mysql" {
		q = "SELECT k.CONSTRAINT_NAME AS name, k.TABLE_NAME AS tbl, k.REFERENCED_TABLE_NAME AS ref_tbl, k.COLUMN_NAME AS col, k.REFERENCED_COLUMN_NAME AS ref_col," +
			" r.DELETE_RULE AS on_delete, r.UPDATE_RULE AS on_update" +
			" FROM information_schema.KEY_COLUMN_USAGE AS k JOIN information_schema.REFERENTIAL_CONSTRAINTS AS r" +
			" ON r.CONSTRAINT_SCHEMA = k.CONSTRAINT_SCHEMA AND r.CONSTRAINT_NAME = k.CONSTRAINT_NAME AND r.TABLE_NAME = k.TABLE_NAME" +
			" WHERE k.TABLE_SCHEMA = ? AND k.REFERENCED_TABLE_NAME IS NOT NULL ORDER BY 2, 1, k.ORDINAL_POSITION"
		args = args[:1]
	}
	if err := db.WithContext(ctx).Raw(q, args...).Scan(&rows).Error; err != nil {
		return nil, err
	}
	var out []foreignKey
	for _, r := range rows {
		if n := len(out); n == 0 || out[n-1].Name != r.Name || out[n-1].Table != r.Tbl {
			out = append(out, foreignKey{Name: r.Name, Table: r.Tbl, RefTable: r.RefTbl, OnDelete: r.OnDelete, OnUpdate: r.OnUpdate})
		}
		fk := &out[len(out)-1]
		fk.Cols = append(fk.Cols, r.Col)
		fk.RefCols = append(fk.RefCols, r.RefCol)
	}
	return out, nil
}

// countRows counts the rows to move, per table and shard, with one read of
// each table.
func (sp *splitter) countRows(ctx context.Context, p *SplitPlan, todo []int, ok map[string]bool) error {
	for _, t := range sp.tables {
		if !ok[t.Name] || t.Parent != "" && !ok[t.Parent] {
			continue
		}
		from, shard := sp.from(t)
		var rows []struct {
			S int
			N int64
		}
		q := "SELECT " + shard + " AS s, count(*) AS n FROM " + from + " WHERE " + shard + " " + inList(todo) + " GROUP BY 1"
		if err := sp.mono.WithContext(ctx).Raw(q).Scan(&rows).Error; err != nil {
			return err
		}
		for _, r := range rows {
			p.Rows[t.Name] += r.N
			p.RowsPerDB[p.To[r.S]] += r.N
			p.ShardRows[r.S] += r.N
		}
	}
	return nil
}

// ParseSplitPlan reads a plan stored as JSON, strictly: an unknown field
// or trailing data give an error matching ErrInvalidPlan.
func ParseSplitPlan(data []byte) (*SplitPlan, error) {
	var p SplitPlan
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, withDetail(errInvalidSplitPlan, err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, withDetail(errInvalidSplitPlan, "data after the plan")
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// validate returns ErrInvalidPlan unless p is whole: every shard of its
// batches one of its logical shards, in one batch, with a target, and
// every shard with a target in a batch.
func (p *SplitPlan) validate() error {
	if p.Monolith == "" || p.LogicalShards <= 0 || len(p.Batches) == 0 && len(p.To) > 0 {
		return withDetail(errInvalidSplitPlan, "not a split plan")
	}
	seen := map[int]bool{}
	for _, b := range p.Batches {
		for _, s := range b {
			if s < 0 || s >= p.LogicalShards {
				return withDetail(errInvalidSplitPlan, fmt.Sprintf("shard %d is not one of the plan's %d logical shards (0 to %d)", s, p.LogicalShards, p.LogicalShards-1))
			}
			if _, ok := p.To[s]; !ok || seen[s] {
				return withDetail(errInvalidSplitPlan, fmt.Sprintf("shard %d is in no target, or in two batches", s))
			}
			seen[s] = true
		}
	}
	if len(seen) != len(p.To) {
		return withDetail(errInvalidSplitPlan, "a shard with a target is in no batch")
	}
	return nil
}

// check returns ErrInvalidPlan unless p was made for cfg's monolith and
// map.
func (p *SplitPlan) check(cfg SplitConfig) error {
	if err := p.validate(); err != nil {
		return err
	}
	if p.Monolith != cfg.Monolith || p.LogicalShards != cfg.Map.LogicalShards() || p.SchemaPattern != cfg.Map.SchemaPattern() ||
		!slices.Equal(p.Databases, cfg.Map.Databases()) {
		return withDetail(errInvalidSplitPlan, "the plan was made for another monolith or map")
	}
	if err := p.checkPlanTables(cfg); err != nil {
		return err
	}
	if len(p.Refusals) > 0 {
		return p.refused()
	}
	return nil
}

// checkTableCaches warns (Warnings, "table-cache") of each MySQL server of
// the targets whose table_definition_cache or table_open_cache is smaller
// than the tables it will hold once the split is done: those it holds now
// and a database of len(sp.tables)+1 tables (the fence's) for each shard
// it gets. Below that the server evicts and reopens tables all the time
// (Table_open_cache_overflows), and a write waits in "Opening tables":
// in 6 runs of BenchmarkSplitMariaDB the writers' longest stall was 0.24
// to 5.05 s at the defaults (400 and 2,000, for 8,000 tables), and 0.12 to
// 1.53 s in 4 runs with both at 11,000 or 12,000.
func (sp *splitter) checkTableCaches(ctx context.Context, p *SplitPlan, targets []int, shards map[int][]int) error {
	type server struct {
		name      string // of its first target
		now, more int64
		def, open int64
	}
	var servers []*server
	byID := map[string]*server{}
	for _, d := range targets {
		var v struct {
			ID        string
			Def, Open int64
			Tables    int64
		}
		// A server is told apart by its host, port and data directory:
		// targets (and the monolith) are often databases of one server.
		// The tables of the shards' databases (a batch that ran before)
		// are counted with the new ones.
		skip := append([]string{"mysql", "information_schema", "performance_schema", "sys"}, shardSchemas(&splitBatch{sp: sp}, shards[d])...)
		err := sp.cfg.DBs[d].WithContext(ctx).Raw("SELECT CONCAT_WS(':', @@hostname, @@port, @@datadir) AS id,"+
			" @@table_definition_cache AS def, @@table_open_cache AS open,"+
			" (SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA NOT IN ?) AS tables", skip).
			Scan(&v).Error
		if err != nil {
			return fmt.Errorf("shardid: split: reading the table caches of %s: %w", p.Databases[d], err)
		}
		sv := byID[v.ID]
		if sv == nil {
			sv = &server{name: p.Databases[d], now: v.Tables, def: v.Def, open: v.Open}
			byID[v.ID] = sv
			servers = append(servers, sv)
		}
		sv.more += int64(len(shards[d]) * (len(sp.tables) + 1))
	}
	for _, sv := range servers {
		need := sv.now + sv.more
		if need <= min(sv.def, sv.open) {
			continue
		}
		// The fix, with room: rounded up to the next thousand above 5/4.
		fix := (need*5/4 + 999) / 1000 * 1000
		p.Warnings = append(p.Warnings, SplitWarning{Kind: "table-cache", Database: sv.name, Detail: fmt.Sprintf(
			"its server will hold %d tables once split (%d now, %d new), more than its table_definition_cache (%d) or table_open_cache (%d):"+
				" writes stall for seconds while it reopens tables; first run SET GLOBAL table_definition_cache = %d, table_open_cache = %d"+
				" (and set them in its configuration)", need, sv.now, sv.more, sv.def, sv.open, max(fix, sv.def), max(fix, sv.open))})
	}
	return nil
}

// catalogTable reports whether t is one of the tables of sp's catalog
// (the map, its version, its setup, its shared shards), which the
// catalog keeps in the monolith's database when it is there: they are
// shardid's, not the application's, whatever the catalog's Table.
func (sp *splitter) catalogTable(t string) bool {
	if sp.cfg.Catalog == nil {
		return false
	}
	name, err := sp.cfg.Catalog.table()
	if err != nil {
		return false
	}
	return slices.Contains(catalogTables(name), t) || t == sharedTable(name)
}

// checkStructure checks again, before a run copies or deletes anything,
// what a plan refuses by the catalog alone (checkTables without its
// reads of rows): a table created since the plan that no rule covers, a
// foreign key added between a sharded table and another, a declared
// table's key or primary key changed. It returns ErrSplitRefused naming
// them; the plan's refusals of rows (NULL keys, keys across shards) are
// not read again.
func (sp *splitter) checkStructure(ctx context.Context, what string) error {
	var refusals []string
	_, err := sp.checkTables(ctx, func(kind, table, detail string, _ []int64) {
		refusals = append(refusals, SplitRefusal{Kind: kind, Table: table, Detail: detail}.String())
	}, false)
	if err != nil {
		return fmt.Errorf("shardid: split: reading the monolith's tables: %w", err)
	}
	if len(refusals) > 0 {
		return withDetail(ErrSplitRefused, fmt.Sprintf("%s: the monolith %s changed since the plan: %s", what, sp.cfg.Monolith, strings.Join(refusals, "; ")))
	}
	return nil
}
