package reshard

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/shardid/shardid/internal/routesql"
	"gorm.io/gorm"
)

// splitTablesTable holds, on the monolith, the sharded tables as the split
// that is under way declared them (SplitConfig.Tables) and the map's
// logical shards: the triggers, the change log, the seals and the verified
// sums of the shards split so far all follow those keys and that modulus. A split run, plan, roll-back or clean-up with
// other declarations is refused until nothing is under way.
const splitTablesTable = routesql.SplitTablesTable

// declaration is the record of splitTablesTable: what a split's
// triggers and sums follow (the logical shards, a key's shard being the
// key modulo them, and the table declarations), and where its shards go
// and are recorded (the map's schema pattern, the catalog's table). A
// record of an earlier version has no SchemaPattern and no Catalog.
type declaration struct {
	LogicalShards int
	Tables        json.RawMessage
	SchemaPattern string `json:",omitempty"`
	Catalog       string `json:",omitempty"`
}

// declared returns sp's declaration in a canonical form, as JSON, the
// tables sorted by name.
func (sp *splitter) declared() string {
	d := declaration{LogicalShards: sp.shards, Tables: json.RawMessage(declaredTables(sp.tables)),
		SchemaPattern: sp.cfg.Map.SchemaPattern(), Catalog: sp.catalogName()}
	b, _ := json.Marshal(d) // strings and numbers: never fails
	return string(b)
}

// catalogName is the table of sp's catalog, "" without one.
func (sp *splitter) catalogName() string {
	if sp.cfg.Catalog == nil {
		return ""
	}
	name, err := sp.cfg.Catalog.table()
	if err != nil {
		return ""
	}
	return name
}

// sameDeclared reports whether the recorded declaration was is now's,
// or an earlier version's record of the same logical shards and tables
// (it kept no schema pattern and no catalog).
func sameDeclared(was, now string) bool {
	if was == now {
		return true
	}
	var w, n declaration
	if json.Unmarshal([]byte(was), &w) != nil || json.Unmarshal([]byte(now), &n) != nil {
		return false
	}
	return w.SchemaPattern == "" && w.Catalog == "" && w.LogicalShards == n.LogicalShards && string(w.Tables) == string(n.Tables)
}

// declaredChange says how now differs from was in words, where it is the
// map's schema pattern or the catalog, with the fix; "" otherwise (the
// caller names both records).
func declaredChange(was, now string) string {
	var w, n declaration
	if json.Unmarshal([]byte(was), &w) != nil || json.Unmarshal([]byte(now), &n) != nil {
		return ""
	}
	var out []string
	if w.Catalog != "" && w.Catalog != n.Catalog {
		out = append(out, fmt.Sprintf("it records its map in the catalog table %s, and the configuration names %q (CatalogTable): name the catalog it began with, "+
			"or routers following %s would never see the shards split from now on", w.Catalog, n.Catalog, w.Catalog))
	}
	if w.SchemaPattern != "" && w.SchemaPattern != n.SchemaPattern {
		out = append(out, fmt.Sprintf("its shards' schemas are named by the pattern %s, and the map's pattern is %s now (SchemaPattern): give it the pattern it began with, "+
			"or no one map could find both the shards split so far and those split from now on", w.SchemaPattern, n.SchemaPattern))
	}
	return strings.Join(out, "; ")
}

func declaredTables(tables []SplitTable) string {
	t := slices.Clone(tables)
	slices.SortFunc(t, func(a, b SplitTable) int { return strings.Compare(a.Name, b.Name) })
	b, _ := json.Marshal(t) // strings only: never fails
	return string(b)
}

// readDeclared returns the declarations recorded on the monolith, "" if
// none (or no table for them yet).
func (sp *splitter) readDeclared(ctx context.Context) (string, error) {
	return sp.readDeclaredAs(ctx, false)
}

// readDeclaredAs is readDeclared, the record read under a shared lock if
// shared: after forgetDeclared's deletion, if one holds the record.
func (sp *splitter) readDeclaredAs(ctx context.Context, shared bool) (string, error) {
	var n int64
	q := "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?"
	if !sp.mysql {
		// information_schema hides a table the role may not read: the
		// SELECT below then fails, where a count would say "none".
		q = "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = ? AND tablename = ?"
	}
	if err := sp.mono.WithContext(ctx).Raw(q, sp.schema, splitTablesTable).Scan(&n).Error; err != nil || n == 0 {
		return "", err
	}
	var got []string
	q = "SELECT tables FROM " + sp.q(splitTablesTable) + " WHERE id = 1"
	if !shared {
		if err := sp.mono.WithContext(ctx).Raw(q).Scan(&got).Error; err != nil {
			return "", err
		}
	} else {
		q += forShare(sp.mysql)
		if err := lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error { return tx.Raw(q).Scan(&got).Error }); err != nil {
			return "", err
		}
	}
	if len(got) == 0 {
		return "", nil
	}
	return got[0], nil
}

// underWay returns the first shard of the monolith that a split left
// sealed, moving or fenced, or that a roll-back marked, or -1 if there is
// none.
func (sp *splitter) underWay(ctx context.Context) (int, error) {
	return sp.underWayOn(ctx, sp.mono)
}

// underWayOn is underWay through db: the monolith's pool, or a
// transaction of it.
func (sp *splitter) underWayOn(ctx context.Context, db *gorm.DB) (int, error) {
	state, err := sp.readSplitStateOn(ctx, db, nil)
	if err != nil {
		return 0, err
	}
	marks, err := sp.readBackMarksOn(ctx, db)
	if err != nil {
		return 0, err
	}
	first := -1
	for s, st := range state {
		if s >= 0 && (st.Sealed || st.Moving || st.Live) && (first < 0 || s < first) {
			first = s
		}
	}
	for s := range marks {
		if first < 0 || s < first {
			first = s
		}
	}
	return first, nil
}

// checkDeclared returns ErrTablesChanged if the monolith records other
// table declarations than sp's (an earlier run's: they stay until
// AbortSplit, with nothing left under way, forgets them), or records none
// while a split is under way there (a shard sealed, moving, fenced or
// rolling back) whose triggers on the monolith are not exactly those sp's
// declarations make (triggersMatch). With record (the split's lock held)
// it records sp's where none are: under way, as the triggers showed them;
// with nothing under way, after it dropped every trigger of the split on
// the monolith (a run of another version, or of declarations that an
// abort forgot, made them), which installTriggers then makes anew.
func (sp *splitter) checkDeclared(ctx context.Context, record bool) error {
	was, err := sp.readDeclaredAs(ctx, record)
	if err != nil {
		return fmt.Errorf("shardid: split: reading the tables it began with: %w", err)
	}
	now := sp.declared()
	if was == now {
		return nil
	}
	s, err := sp.underWay(ctx)
	if err != nil {
		return err
	}
	switch {
	case was != "" && sameDeclared(was, now):
		// An earlier version's record of the same split: recorded
		// anew, with the pattern and the catalog, below.
	case was != "" && declaredChange(was, now) != "":
		msg := fmt.Sprintf("the split of %s: %s", sp.cfg.Monolith, declaredChange(was, now))
		if s < 0 {
			msg += " (no shard is split yet: aborting the split, with the configuration it began with, lets the next run begin anew)"
		}
		return withDetail(ErrTablesChanged, msg)
	case was != "" && s >= 0:
		return withDetail(ErrTablesChanged, fmt.Sprintf("the split of %s began with %s, and the configuration says %s now, while shard %d is split or being split: "+
			"declare them as they were (or roll back every split shard and abort the split before you change them)", sp.cfg.Monolith, was, now, s))
	case was != "":
		return withDetail(ErrTablesChanged, fmt.Sprintf("the split of %s last ran with %s, and the configuration says %s now: "+
			"declare them as they were, or abort the split first (AbortSplit, shardid split abort: it drops the copies of the earlier runs)", sp.cfg.Monolith, was, now))
	case s >= 0:
		// Under way with no record (begun by an earlier version, or the
		// record lost): the triggers on the monolith say what it began
		// with; they must be what these declarations make.
		same, err := sp.triggersMatch(ctx)
		if err != nil {
			return err
		}
		if !same {
			return withDetail(ErrTablesChanged, fmt.Sprintf("the split of %s is under way (shard %d), the monolith holds no record of the tables it began with (%s), "+
				"and its triggers compute shards otherwise than %s: declare the tables as the split began with them", sp.cfg.Monolith, s, splitTablesTable, now))
		}
	}
	if !record {
		return nil
	}
	if s < 0 && !sameDeclared(was, now) {
		if err := sp.dropSplitTriggers(ctx); err != nil {
			return fmt.Errorf("shardid: split: dropping the triggers of an earlier run: %w", err)
		}
	}
	db := sp.mono.WithContext(ctx)
	create := "CREATE TABLE IF NOT EXISTS " + sp.q(splitTablesTable) + " (id INT PRIMARY KEY, tables TEXT NOT NULL)"
	upsert := "INSERT INTO " + sp.q(splitTablesTable) + " (id, tables) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET tables = EXCLUDED.tables"
	if sp.mysql {
		create = "CREATE TABLE IF NOT EXISTS " + sp.q(splitTablesTable) + " (id INT PRIMARY KEY, tables MEDIUMTEXT NOT NULL) ENGINE=InnoDB"
		upsert = "INSERT INTO " + sp.q(splitTablesTable) + " (id, tables) VALUES (1, ?) ON DUPLICATE KEY UPDATE tables = VALUES(tables)"
	}
	write := func(tx *gorm.DB) error {
		if err := tx.Exec(create).Error; err != nil {
			return err
		}
		return tx.Exec(upsert, now).Error
	}
	if sp.mysql {
		err = write(db)
	} else {
		// Created, the record goes to the tables' owner in the same
		// transaction (sp.handTo), under a lock timeout (handing over
		// the state table takes it from the writers that read it).
		err = lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
			if err := write(tx); err != nil {
				return err
			}
			return sp.handOverPG(tx, sp.handTo)
		})
	}
	if err != nil {
		return fmt.Errorf("shardid: split: recording its tables: %w", err)
	}
	return nil
}

// checkModulus returns ErrTablesChanged if the monolith records another
// count of logical shards than sp's map has, another schema pattern, or
// another catalog table (declaredChange).
func (sp *splitter) checkModulus(ctx context.Context) error {
	was, err := sp.readDeclared(ctx)
	if err != nil || was == "" {
		return err
	}
	var rec declaration
	if err := json.Unmarshal([]byte(was), &rec); err != nil {
		return fmt.Errorf("shardid: split: the tables it began with: %w", err)
	}
	if rec.LogicalShards != sp.shards {
		return withDetail(ErrTablesChanged, fmt.Sprintf("the split of %s began with %d logical shards, and the map has %d: give it the catalog's map",
			sp.cfg.Monolith, rec.LogicalShards, sp.shards))
	}
	// Another catalog would place the shards otherwise, and another
	// pattern name other schemas: what an abort drops follows both.
	if change := declaredChange(was, sp.declared()); change != "" {
		return withDetail(ErrTablesChanged, fmt.Sprintf("the split of %s: %s", sp.cfg.Monolith, change))
	}
	return nil
}

// triggersMatch reports whether the split's triggers on the monolith are
// exactly those sp's declarations make: one for each declared table
// (each event on MySQL), none for another, each with the body sp would
// give it (the key, the parents and the modulus are in it).
func (sp *splitter) triggersMatch(ctx context.Context) (bool, error) {
	want := map[string]string{}
	var have []struct{ Name, Tbl, Body string }
	if sp.mysql {
		want = sp.splitTriggerBodiesMySQL()
		err := sp.mono.WithContext(ctx).Raw("SELECT TRIGGER_NAME AS name, EVENT_OBJECT_TABLE AS tbl, ACTION_STATEMENT AS body"+
			" FROM information_schema.TRIGGERS WHERE "+triggersOfSchema, sp.schema).Scan(&have).Error
		if err != nil {
			return false, err
		}
		// The split's own only: a name it gives a table's trigger.
		have = slices.DeleteFunc(have, func(h struct{ Name, Tbl, Body string }) bool {
			return !slices.ContainsFunc(mysqlFenceEvents[:], func(ev struct{ letter, event string }) bool {
				return h.Name == splitTriggerMySQL(ev.letter, h.Tbl)
			})
		})
	} else {
		for _, t := range sp.tables {
			want[t.Name] = sp.splitFunctionBodyPG(t)
		}
		err := sp.mono.WithContext(ctx).Raw("SELECT c.relname AS name, c.relname AS tbl, p.prosrc AS body FROM pg_trigger t"+
			" JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_proc p ON p.oid = t.tgfoid"+
			" WHERE n.nspname = ? AND t.tgname = 'shardid_split'", sp.schema).Scan(&have).Error
		if err != nil {
			return false, err
		}
	}
	if len(have) != len(want) {
		return false, nil
	}
	for _, h := range have {
		if b, ok := want[h.Name]; !ok || withoutElsewhere(withoutIDRule(b)) != withoutElsewhere(withoutIDRule(h.Body)) {
			return false, nil
		}
	}
	return true, nil
}

// withoutElsewhere is the body of a split's trigger function (PostgreSQL)
// without the shards that its TRUNCATE's test leaves out, which follow the
// map when the function was made (splitFunctionBodyPG), not how the
// function computes shards.
func withoutElsewhere(body string) string {
	const from = "shard >= 0 AND NOT sealed"
	i := strings.Index(body, from)
	if i < 0 {
		return body
	}
	i += len(from)
	j := strings.Index(body[i:], ") THEN")
	if j < 0 {
		return body
	}
	return body[:i] + body[i+j:]
}

// forgetDeclared deletes the recorded declarations if nothing is under way
// any more (AbortSplit, holding lock): the next run may declare the tables
// otherwise. The record's row is held from before the lock is checked and
// the split's state read to the deletion's commit: a run that takes the
// lock once this one's is lost reads the record under a shared lock
// (checkDeclared), so it waits, finds no record and makes its own. (A
// plain read found the record, the run went on, and the deletion left a
// split under way with none.)
func (sp *splitter) forgetDeclared(ctx context.Context, lock *moveLock) error {
	if was, err := sp.readDeclared(ctx); err != nil || was == "" {
		return err
	}
	pauseAt(ctx, "abort forget")
	return lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
		var held []int
		if err := tx.Raw("SELECT id FROM " + sp.q(splitTablesTable) + " WHERE id = 1 FOR UPDATE").Scan(&held).Error; err != nil {
			return err
		}
		if err := lock.ensure(ctx, "forgetting the split's tables"); err != nil {
			return err
		}
		// Read in the transaction: its session is one of the two the
		// monolith's pool must allow (ErrPoolTooSmall), the lock's the
		// other.
		if s, err := sp.underWayOn(ctx, tx); err != nil || s >= 0 {
			return err
		}
		pauseAt(ctx, "abort forget held")
		return tx.Exec("DELETE FROM " + sp.q(splitTablesTable)).Error
	})
}

// dropSplitTriggers drops every trigger of the split on the monolith's
// tables (and, on PostgreSQL, their functions), whatever tables they are
// on and whatever they compute.
func (sp *splitter) dropSplitTriggers(ctx context.Context) error {
	if sp.mysql {
		var have []struct{ Name, Tbl string }
		err := sp.mono.WithContext(ctx).Raw("SELECT TRIGGER_NAME AS name, EVENT_OBJECT_TABLE AS tbl FROM information_schema.TRIGGERS"+
			" WHERE "+triggersOfSchema, sp.schema).Scan(&have).Error
		if err != nil {
			return err
		}
		var drop, tables []string
		for _, h := range have {
			for _, ev := range mysqlFenceEvents {
				if h.Name != splitTriggerMySQL(ev.letter, h.Tbl) {
					continue
				}
				drop = append(drop, "DROP TRIGGER `"+sp.schema+"`.`"+h.Name+"`")
				if !slices.Contains(tables, h.Tbl) {
					tables = append(tables, h.Tbl)
				}
			}
		}
		if len(drop) == 0 {
			return nil
		}
		return execTablesLocked(ctx, sp.mono, sp.schema, append(tables, splitStateTable, splitChangeTable), drop)
	}
	return lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
		var have []struct{ Tbl, Name string }
		err := tx.Raw("SELECT c.relname AS tbl, t.tgname AS name FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"+
			" JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ? AND t.tgname IN ('shardid_split', 'shardid_split_truncate')", sp.schema).
			Scan(&have).Error
		if err != nil {
			return err
		}
		var tables []string
		for _, h := range have {
			if err := tx.Exec("DROP TRIGGER " + quotePGName(h.Name) + " ON " + sp.q(h.Tbl)).Error; err != nil {
				return err
			}
			if !slices.Contains(tables, h.Tbl) {
				tables = append(tables, h.Tbl)
			}
		}
		// Their functions, once no trigger uses them.
		for _, t := range tables {
			if err := tx.Exec(fmt.Sprintf(`DROP FUNCTION IF EXISTS "%s".%s()`, sp.schema, splitFunction(t))).Error; err != nil {
				return err
			}
		}
		return nil
	})
}

// checkPlanTables returns ErrInvalidPlan unless p was made for the tables
// cfg declares.
func (p *SplitPlan) checkPlanTables(cfg SplitConfig) error {
	if declaredTables(p.Tables) != declaredTables(cfg.Tables) {
		return withDetail(errInvalidSplitPlan, fmt.Sprintf("the plan was made for Tables %s, and they are %s now: plan again", declaredTables(p.Tables), declaredTables(cfg.Tables)))
	}
	return nil
}

// checkColumns returns ErrSplitRefused ("bad-table") unless every declared
// table is on the monolith with an id and its Key or Via column: a split
// run without a plan (SplitShards) must not install a trigger that reads
// a column the table does not have, which PostgreSQL would find only at
// the application's next write, and fail it.
func (sp *splitter) checkColumns(ctx context.Context) error {
	for _, t := range sp.tables {
		cols, err := sourceColumns(ctx, sp.mono, sp.schema, t.Name)
		if err != nil {
			return err
		}
		if len(cols) == 0 {
			return withDetail(ErrSplitRefused, "bad-table: "+t.Name+": a sharded table the monolith does not have")
		}
		for _, c := range []string{"id", t.Key, t.Via} {
			if c != "" && !slices.Contains(cols, c) {
				return withDetail(ErrSplitRefused, "bad-table: "+t.Name+": it has no column "+c)
			}
		}
	}
	return nil
}
