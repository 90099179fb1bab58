package reshard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/shardid/shardid/internal/routesql"
	"slices"
	"strconv"
	"strings"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/sqlddl"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
)

// Splitting a monolith. A monolith is a placement in which the logical
// shards share one set of tables (shardmap.Placement.Shared): a shard's
// rows are those whose sharding key maps to it (key % LogicalShards), or,
// for a child table, those whose parent row's key does. A split moves
// shards out of it, a batch at a time, into their own schema (PostgreSQL)
// or database (MySQL) on a target database, with what a move does: a
// change log, a first copy, a comparison, the change log applied, a short
// fence, the last changes and a verification under it, a seal, and the
// flip of the map. The fence and the change log of the monolith work row by
// row, by the row's shard: a batch fences only its own rows.
//
// On the monolith one trigger per table (shardid_split) checks every
// written row against a state row per shard (shardid_split_state): the
// shard's fence, judged by the database's clock, and whether it is moving
// (its changes are logged in shardid_split_changes, with the shard). A
// writer reads its shard's state row under a shared lock held to its
// commit, so changing a shard's state (moving, fenced, sealed) waits for the
// writers of that shard under way, and for no other.

// SplitTable declares one sharded table of a monolith.
type SplitTable struct {
	// Name is the table's name. It must have a primary key on one integer
	// column, "id".
	Name string

	// Key is the column that holds the sharding key: a row belongs to
	// logical shard Key % LogicalShards, as Router.ForKey computes it.
	// Key or Parent is required.
	Key string `json:",omitempty"`

	// Parent, for a child table, is the table whose row a row of this
	// one follows ("comments" follow their "photos"): the row whose id
	// is the value of the column Via. The parent is declared too, before
	// its children. A parent's key must not change while it has children.
	Parent string `json:",omitempty"`
	Via    string `json:",omitempty"`
}

// SplitConfig describes a monolith, the map its shards are split by, and
// where they go.
type SplitConfig struct {
	// Map is the routing map. It needs a SchemaPattern (the schema, or
	// MySQL database, of each shard on its target); the shards still in
	// the monolith are Shared on the database Monolith. A split updates
	// it at each flip, as it does the catalog.
	Map *shardmap.Map

	// DBs are the databases, in the order of Map.Databases(). All of one
	// kind: PostgreSQL, or MySQL/MariaDB. A split uses up to 4 sessions
	// of a database at once, beside the application's: give its pools
	// room to keep them (SetMaxIdleConns(16), as the shardid command
	// does). database/sql keeps 2 idle sessions by default and closes
	// the rest as they come back, and each new session is a server
	// process that has yet to open the shards' tables: under a fence, on
	// 2 cores beside 4 writers, that made the longest fence 0.6 to 1 s
	// where 16 idle sessions kept it to 0.2 to 0.3 s.
	DBs []*gorm.DB

	// Monolith names the database, in Map, whose shared tables hold the
	// shards still to split.
	Monolith string

	// Tables are the monolith's sharded tables, parents before their
	// children.
	Tables []SplitTable

	// Global names the monolith's tables that no shard owns (plans,
	// countries): they stay where they are. Every other table of the
	// monolith must be in Tables or Global: a split leaves nothing behind
	// silently.
	Global []string

	// Catalog, if not nil, holds the map (SaveMap); every flip updates it
	// (only the batch's shards, on the condition that they are still
	// shared on the monolith).
	Catalog *Catalog

	// Layout, if not the zero Layout, is the layout of the IDs the plugin
	// issues on the monolith (its RouterConfig's). The split then checks
	// that each row's ID will find it in the shard its key puts it in: an
	// ID of the layout must name that shard, and an older one be recorded
	// on it by ReadLegacyIDs (Legacy). A row whose key changed since its
	// ID was issued, or whose legacy ID was issued after the record, is
	// refused by PlanSplit ("id-mismatch") and fails its batch before the
	// flip with ErrKeyMismatch, naming it: copied, no lookup by its ID
	// would find it. Without Layout nothing checks it, and PlanSplit warns.
	Layout shardid.Layout

	// Legacy is the record of the monolith's legacy IDs (ReadLegacyIDs)
	// that Layout's check uses. Nil: the one Catalog keeps
	// (Catalog.LoadLegacy), if any; without one, every ID must be the
	// layout's.
	Legacy *shardid.LegacyIDs
}

// splitter is a checked SplitConfig.
type splitter struct {
	cfg     SplitConfig
	mono    *gorm.DB
	monoIdx int
	schema  string // the monolith's schema (PostgreSQL) or database (MySQL)
	shards  int
	tables  []SplitTable
	byName  map[string]SplitTable
	mysql   bool
	// handTo is the sharded tables' owner (quoted, PostgreSQL), to whom
	// the transactions that create the split's own objects on the
	// monolith give them (handOverPG): a run stopped between the two
	// cannot leave them to a role that its owner's runs may not act as.
	// "" leaves them to the mover.
	handTo string
	// ids checks the rows' IDs (SplitConfig.Layout): set by the plan and
	// the runs of batches (loadIDs), nil without a Layout.
	ids *idCheck
}

// newSplitter checks cfg and reads the monolith's schema.
func newSplitter(ctx context.Context, cfg SplitConfig) (*splitter, error) {
	bad := func(format string, a ...any) error {
		return withDetail(shardid.ErrInvalidConfig, "split: "+fmt.Sprintf(format, a...))
	}
	if cfg.Map == nil {
		return nil, bad("no Map")
	}
	if cfg.Map.SchemaPattern() == "" {
		return nil, bad("the map has no SchemaPattern: a split moves each shard into a schema of its own")
	}
	names := cfg.Map.Databases()
	if len(cfg.DBs) != len(names) {
		return nil, bad("%d DBs for the map's %d databases", len(cfg.DBs), len(names))
	}
	sp := &splitter{cfg: cfg, monoIdx: cfg.Map.DatabaseIndex(cfg.Monolith), shards: cfg.Map.LogicalShards(), byName: map[string]SplitTable{}}
	if sp.monoIdx < 0 {
		return nil, bad("the monolith %q is not a database of the map %q", cfg.Monolith, names)
	}
	for i, db := range cfg.DBs {
		if db == nil {
			return nil, bad("DBs[%d] is nil", i)
		}
		if d := db.Dialector.Name(); d != "postgres" && d != "mysql" || d != cfg.DBs[0].Dialector.Name() {
			return nil, bad("splitting needs PostgreSQL or MySQL/MariaDB everywhere, not %s and %s", cfg.DBs[0].Dialector.Name(), d)
		}
	}
	sp.mono, sp.mysql = cfg.DBs[sp.monoIdx], cfg.DBs[0].Dialector.Name() == "mysql"
	if len(cfg.Tables) == 0 {
		return nil, bad("no Tables")
	}
	for _, t := range cfg.Tables {
		for _, n := range []string{t.Name, t.Key, t.Parent, t.Via} {
			if n != "" && !sqlddl.Name.MatchString(n) {
				return nil, bad("name %q: want %s", n, sqlddl.Name)
			}
		}
		switch {
		case t.Name == "":
			return nil, bad("a table without a Name")
		case isInternalSplitTable(t.Name):
			return nil, bad("table %s is one of the split's own", t.Name)
		case slices.Contains([]string{splitDoneFunction, routesql.SplitSealedFunction, "shardid_split_check"}, splitFunction(t.Name)):
			// Its trigger function would be one of the split's own.
			return nil, bad("table %s: the split cannot take a table of that name (rename it)", t.Name)
		case sp.byName[t.Name].Name != "":
			return nil, bad("table %s is declared twice", t.Name)
		case (t.Key == "") == (t.Parent == ""):
			return nil, bad("table %s: give it a Key, or a Parent and Via (not both)", t.Name)
		case t.Parent != "" && t.Via == "":
			return nil, bad("table %s: a Parent without Via, the column that holds the parent's id", t.Name)
		case t.Parent != "" && sp.byName[t.Parent].Name == "":
			return nil, bad("table %s follows %s, which is not declared before it", t.Name, t.Parent)
		}
		sp.byName[t.Name] = t
		sp.tables = append(sp.tables, t)
	}
	for _, g := range cfg.Global {
		if !sqlddl.Name.MatchString(g) {
			return nil, bad("global table %q: want %s", g, sqlddl.Name)
		}
		if sp.byName[g].Name != "" {
			return nil, bad("table %s is both sharded and global", g)
		}
	}
	q := "SELECT current_schema()"
	if sp.mysql {
		q = "SELECT DATABASE()"
	}
	if err := sp.mono.WithContext(ctx).Raw(q).Scan(&sp.schema).Error; err != nil {
		return nil, err
	}
	if !sqlddl.Name.MatchString(sp.schema) {
		return nil, bad("the monolith's schema %q: want %s", sp.schema, sqlddl.Name)
	}
	return sp, nil
}

// splitStateTable, splitChangeTable: the split's own tables, in the
// monolith's schema.
const (
	splitStateTable  = routesql.SplitStateTable
	splitChangeTable = routesql.SplitChangeLogTable
)

// isInternalSplitTable reports whether table is one of the split's or a
// move's own.
func isInternalSplitTable(table string) bool {
	return table == splitStateTable || table == splitChangeTable || table == splitTablesTable || isInternalTable(table)
}

// q quotes a table of the monolith.
func (sp *splitter) q(table string) string { return quoteTable(sp.mono, sp.schema, table) }

// col quotes alias.column.
func (sp *splitter) col(alias, column string) string {
	if alias == "NEW" || alias == "OLD" {
		return alias + "." + quoteIdent(sp.mono, column)
	}
	return quoteIdent(sp.mono, alias) + "." + quoteIdent(sp.mono, column)
}

// modExpr is the shard of an integer key expression: NULL for a NULL or
// negative key (which no shard holds).
func (sp *splitter) modExpr(key string) string {
	n := strconv.Itoa(sp.shards)
	if sp.mysql {
		return "(CASE WHEN " + key + " >= 0 THEN CAST(MOD(" + key + ", " + n + ") AS SIGNED) END)"
	}
	return "(CASE WHEN " + key + " >= 0 THEN (" + key + " % " + n + ")::int END)"
}

// rowShard is the SQL expression of the shard of the row of table t that
// ref names (an alias, or NEW or OLD in a trigger), with correlated
// lookups of its ancestors: NULL when the key is NULL or the parent
// missing.
func (sp *splitter) rowShard(t SplitTable, ref string, depth int) string {
	if t.Key != "" {
		return sp.modExpr(sp.col(ref, t.Key))
	}
	p := sp.byName[t.Parent]
	alias := "shardid_p" + strconv.Itoa(depth)
	return "(SELECT " + sp.rowShard(p, alias, depth+1) + " FROM " + sp.q(p.Name) + " AS " + quoteIdent(sp.mono, alias) +
		" WHERE " + sp.col(alias, "id") + " = " + sp.col(ref, t.Via) + ")"
}

// from is the FROM clause of table t (alias x) joined to its ancestors,
// and the expression of its rows' shard.
func (sp *splitter) from(t SplitTable) (from, shard string) {
	from = sp.q(t.Name) + " AS x"
	ref, cur := "x", t
	for i := 0; cur.Key == ""; i++ {
		p := sp.byName[cur.Parent]
		alias := "shardid_j" + strconv.Itoa(i)
		from += " JOIN " + sp.q(p.Name) + " AS " + quoteIdent(sp.mono, alias) + " ON " + sp.col(alias, "id") + " = " + sp.col(ref, cur.Via)
		ref, cur = alias, p
	}
	return from, sp.modExpr(sp.col(ref, cur.Key))
}

// inList is "IN (a, b, ...)" of shards, which are never empty.
func inList(shards []int) string {
	var b strings.Builder
	b.WriteString("IN (")
	for i, s := range shards {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s))
	}
	b.WriteByte(')')
	return b.String()
}

// rel is a derived table of the rows of t in shards, with all of t's
// columns and their shard (shardid_s): the source of a split's reads,
// which look rows up by id in it.
func (sp *splitter) rel(t SplitTable, shards []int) string {
	from, shard := sp.from(t)
	return "(SELECT x.*, " + shard + " AS shardid_s FROM " + from + " WHERE " + shard + " " + inList(shards) + ") AS shardid_src"
}

// installTriggers creates the split's state table (a row per shard of the
// map, unfenced and not moving, and row -1 for the rows whose shard is
// unknown), its change log and its triggers on the sharded tables of the
// monolith, where missing. Creating a trigger waits for the writers under
// way on its table: once it exists every write checks its shard's state.
// users (PostgreSQL: the roles, quoted, that hold privileges on the
// sharded tables; MySQL: those of them that may not read the split's
// state) may execute the function, or read the state, that routers read
// to check a write that changed no row.
func (sp *splitter) installTriggers(ctx context.Context, users []string) error {
	if sp.mysql {
		return sp.installTriggersMySQL(ctx, users)
	}
	st, log := sp.q(splitStateTable), sp.q(splitChangeTable)
	check := fmt.Sprintf(`CREATE OR REPLACE FUNCTION "%[1]s".shardid_split_check(t text, k bigint, s int) RETURNS void LANGUAGE plpgsql
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE u timestamptz; m boolean; sealed boolean;
BEGIN
	SELECT fenced_until, moving, st.sealed INTO u, m, sealed FROM %[2]s st WHERE shard = coalesce(s, -1) FOR SHARE;
	IF NOT FOUND THEN
		RETURN;
	END IF;
	IF u > clock_timestamp() AND NOT (sealed AND coalesce(current_setting('shardid.mover', true), '') = 'on') THEN
		RAISE EXCEPTION '%[4]s' USING ERRCODE = '55000';
	END IF;
	IF m THEN
		INSERT INTO %[3]s (tbl, id, shard) VALUES (t, k, coalesce(s, -1));
	END IF;
END $$`, sp.schema, st, log, shardid.FenceMessage)
	stmts := []string{
		"SELECT pg_advisory_xact_lock(hashtext('shardid:split:" + sp.schema + "'))",
		"CREATE TABLE IF NOT EXISTS " + st + " (shard INT PRIMARY KEY, moving BOOLEAN NOT NULL, fenced_until TIMESTAMPTZ NOT NULL, token BIGINT NOT NULL, sealed BOOLEAN NOT NULL, verified TEXT)",
		"INSERT INTO " + st + " (shard, moving, fenced_until, token, sealed) SELECT g, FALSE, '-infinity', 0, FALSE FROM generate_series(-1, " +
			strconv.Itoa(sp.shards-1) + ") AS g ON CONFLICT (shard) DO NOTHING",
		"CREATE TABLE IF NOT EXISTS " + log + " (seq BIGSERIAL PRIMARY KEY, tbl TEXT NOT NULL, id BIGINT NOT NULL, shard INT NOT NULL)",
		check,
		// What a router asks after an UPDATE or a DELETE of a shard that
		// changed no row here (routesql.Left): if the split sealed the
		// shard, the router's map is stale and the row is on the target.
		// A locking read: it waits for a seal under way, and at REPEATABLE
		// READ fails on a seal made after the snapshot, never misses it.
		fmt.Sprintf(`CREATE OR REPLACE FUNCTION "%[1]s".%[2]s(s int) RETURNS boolean LANGUAGE sql VOLATILE
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ SELECT coalesce((SELECT sealed FROM %[3]s WHERE shard = s FOR SHARE), false) $$`,
			sp.schema, routesql.SplitSealedFunction, st),
	}
	for _, t := range sp.tables {
		stmts = append(stmts, fmt.Sprintf(`CREATE OR REPLACE FUNCTION "%s".%s() RETURNS trigger LANGUAGE plpgsql
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$%s$$`, sp.schema, splitFunction(t.Name), sp.splitFunctionBodyPG(t)))
	}
	sealed := fmt.Sprintf(`"%s".%s(integer)`, sp.schema, routesql.SplitSealedFunction)
	return lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
		var fresh bool
		if err := tx.Raw("SELECT to_regprocedure(?) IS NULL", sealed).Scan(&fresh).Error; err != nil {
			return err
		}
		for _, q := range stmts {
			if err := tx.Exec(q).Error; err != nil {
				return err
			}
		}
		if err := sp.handOverPG(tx, sp.handTo); err != nil {
			return err
		}
		// The roles that write the sharded tables call the function after
		// a write that changed no row (ErrUncheckedWrite if they may not):
		// granted when it is made, for a database whose functions PUBLIC
		// may not execute (ALTER DEFAULT PRIVILEGES). A grant revoked
		// since stays revoked.
		if fresh && len(users) > 0 {
			if err := tx.Exec("GRANT EXECUTE ON FUNCTION " + sealed + " TO " + strings.Join(users, ", ")).Error; err != nil {
				return err
			}
		}
		for _, t := range sp.tables {
			var n int64
			if err := tx.Raw("SELECT count(*) FROM pg_trigger WHERE tgrelid = ?::regclass AND tgname = 'shardid_split'", sp.q(t.Name)).Scan(&n).Error; err != nil {
				return err
			}
			if n > 0 {
				continue
			}
			fn := fmt.Sprintf(`"%s".%s`, sp.schema, splitFunction(t.Name))
			for _, q := range []string{
				"CREATE TRIGGER shardid_split BEFORE INSERT OR UPDATE OR DELETE ON " + sp.q(t.Name) + " FOR EACH ROW EXECUTE FUNCTION " + fn + "()",
				"CREATE TRIGGER shardid_split_truncate BEFORE TRUNCATE ON " + sp.q(t.Name) + " FOR EACH STATEMENT EXECUTE FUNCTION " + fn + "()",
			} {
				if err := tx.Exec(q).Error; err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// splitFunctionBodyPG is the body of the split's trigger function of t
// (PostgreSQL): it refuses a TRUNCATE, but the mover's once every shard
// of the monolith is sealed (the last batch's, which checks every row's
// sum first: a mover that is not a superuser cannot quiet the trigger with
// session_replication_role), and
// checks each row's old and new shard (shardid_split_check), which logs or
// refuses the write. The shards of the monolith are those its state holds
// but the ones that the map, when the function is made (by every batch),
// places elsewhere and that are not sealed: shards the monolith never held
// (a monolith of a part of the shards) would be left unsealed for ever.
func (sp *splitter) splitFunctionBodyPG(t SplitTable) string {
	v := sp.cfg.Map.Load()
	var elsewhere []int
	for s := range v.LogicalShards() {
		if !v.Shared(s) || v.DB(s) != sp.monoIdx {
			elsewhere = append(elsewhere, s)
		}
	}
	unsealed := "shard >= 0 AND NOT sealed"
	if len(elsewhere) > 0 {
		unsealed += " AND shard NOT " + inList(elsewhere)
	}
	return fmt.Sprintf(`
DECLARE so int; sn int;
BEGIN
	IF TG_OP = 'TRUNCATE' THEN
		IF coalesce(current_setting('shardid.mover', true), '') = 'on'
			AND NOT EXISTS (SELECT 1 FROM %[4]s WHERE %[5]s) THEN
			RETURN NULL; -- the split's own, once every shard is sealed
		END IF;
		RAISE EXCEPTION 'shardid: table %% cannot be truncated while its monolith is split: the split cannot record it', TG_TABLE_NAME
			USING ERRCODE = '0A000';
	END IF;
	IF TG_OP <> 'INSERT' THEN
		so := %[1]s;
		PERFORM "%[3]s".shardid_split_check(TG_TABLE_NAME, OLD.id, so);
	END IF;
	IF TG_OP = 'DELETE' THEN
		RETURN OLD;
	END IF;
	sn := %[2]s;
	IF TG_OP = 'INSERT' OR NEW.id IS DISTINCT FROM OLD.id OR sn IS DISTINCT FROM so THEN
		PERFORM "%[3]s".shardid_split_check(TG_TABLE_NAME, NEW.id, sn);%[6]s
	END IF;
	RETURN NEW;
END `, sp.rowShard(t, "OLD", 0), sp.rowShard(t, "NEW", 0), sp.schema, sp.q(splitStateTable), unsealed, sp.ids.idRulePG(sp.q(splitStateTable), sp.q(splitTablesTable), t.Name, sp.q(t.Name)))
}

// splitFunction names the split's trigger function (PostgreSQL) of table.
func splitFunction(table string) string {
	name := "shardid_split_" + table
	if len(name) > 63 {
		return captureTrigger("split", table)
	}
	return name
}

// splitState is one shard's row of the split's state table.
type splitState struct {
	Shard       int
	Moving      bool
	Live        bool // fenced now, by the database's clock
	Token       int64
	Sealed      bool
	FencedUntil string
}

// readSplitState returns the state rows of shards (all of them if nil),
// or nil when the split's tables do not exist.
func (sp *splitter) readSplitState(ctx context.Context, shards []int) (map[int]splitState, error) {
	return sp.readSplitStateOn(ctx, sp.mono, shards)
}

// readSplitStateOn is readSplitState through db: the monolith's pool, or
// a transaction of it.
func (sp *splitter) readSplitStateOn(ctx context.Context, db *gorm.DB, shards []int) (map[int]splitState, error) {
	if ok, err := tableExists(ctx, db, sp.schema, splitStateTable); err != nil || !ok {
		return nil, err
	}
	now := "clock_timestamp()"
	if sp.mysql {
		now = "UTC_TIMESTAMP(6)"
	}
	sel := "SELECT shard, moving, fenced_until > " + now + " AS live, token, sealed, CAST(fenced_until AS CHAR(40)) AS fenced_until FROM " + sp.q(splitStateTable)
	if !sp.mysql {
		sel = strings.Replace(sel, "CHAR(40)", "TEXT", 1)
	}
	if shards != nil {
		sel += " WHERE shard " + inList(shards)
	}
	var rows []splitState
	if err := db.WithContext(ctx).Raw(sel).Scan(&rows).Error; err != nil {
		return nil, err
	}
	out := make(map[int]splitState, len(rows))
	for _, r := range rows {
		out[r.Shard] = r
	}
	return out, nil
}

// fenceShards fences shards for d from now by the monolith's clock and
// returns each shard's token. It waits for the writers of those shards
// under way (their shared locks on the state rows), and no other. A
// sealed shard is refused with ErrShardMoved.
func (sp *splitter) fenceShards(ctx context.Context, shards []int, d int64) (map[int]int64, error) {
	tokens := map[int]int64{}
	err := lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
		cur, err := sp.lockStates(tx, shards)
		if err != nil {
			return err
		}
		if len(cur) != len(shards) {
			return fmt.Errorf("shardid: the split's state has %d of the %d shards to fence", len(cur), len(shards))
		}
		for _, c := range cur {
			if c.Sealed {
				return withDetail(ErrShardMoved, fmt.Sprintf("shard %d was split out of the monolith", c.Shard))
			}
			tokens[c.Shard] = c.Token + 1
		}
		until := "clock_timestamp() + " + strconv.FormatInt(d, 10) + " * interval '1 microsecond'"
		if sp.mysql {
			until = "UTC_TIMESTAMP(6) + INTERVAL " + strconv.FormatInt(d, 10) + " MICROSECOND"
		}
		return tx.Exec("UPDATE " + sp.q(splitStateTable) + " SET fenced_until = " + until + ", token = token + 1 WHERE shard " + inList(shards)).Error
	})
	return tokens, err
}

// sealShards fences shards for good (their rows on the monolith are an old
// copy) if each one's fence has held without a break since fenceShards
// returned tokens: unchanged and not run out by the database's clock.
// Otherwise it changes nothing and returns ErrFenceLapsed.
//
// verified holds, per shard, what finish verified of it (each table's rows
// and checksum, equal on both sides), stored with the seal: the rows of a
// sealed shard are deleted from the monolith only when they still add up
// to it (deleteCopied).
//
// check (the run's check of its lock) is called with the rows held, and
// its error returned: a run paused after its last check, whose lock a
// rival took meanwhile (AbortSplit, which lifts the fences as it read
// them), must not seal the monolith's rows under it.
//
// With endUnknown the logging of the rows of no known shard ends too:
// unless batches of the run's group come after the sealed one, whose
// copies need those entries still (a child row deleted by its parent's
// ON DELETE CASCADE is logged so: its parent is gone when its trigger
// looks its shard up).
func (sp *splitter) sealShards(ctx context.Context, tokens map[int]int64, verified map[int]string, endUnknown bool, check func(context.Context) error) error {
	shards := make([]int, 0, len(tokens))
	for s := range tokens {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	now, forever := "clock_timestamp()", "'infinity'"
	if sp.mysql {
		now, forever = "UTC_TIMESTAMP(6)", "'9999-12-31 23:59:59'"
	}
	var why string
	err := lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
		var cur []struct {
			Shard int
			Token int64
			Live  bool
		}
		q := "SELECT shard, token, fenced_until > " + now + " AS live FROM " + sp.q(splitStateTable) + " WHERE shard " + inList(shards) + " ORDER BY shard FOR UPDATE"
		if err := tx.Raw(q).Scan(&cur).Error; err != nil {
			return err
		}
		if sp.mysql { // the first read waited for the locks; this one judges the time
			if err := tx.Raw(q).Scan(&cur).Error; err != nil {
				return err
			}
		}
		for _, c := range cur {
			switch {
			case c.Token != tokens[c.Shard]:
				why = fmt.Sprintf("the fence of shard %d was lifted or replaced (abort, or another operator)", c.Shard)
			case !c.Live:
				why = fmt.Sprintf("the fence of shard %d ran out by the database's clock", c.Shard)
			}
			if why != "" {
				return errFenceLapsed
			}
		}
		if len(cur) != len(shards) {
			why = "a shard's state row is missing"
			return errFenceLapsed
		}
		if err := check(ctx); err != nil {
			return err
		}
		if err := sp.sealRows(tx, shards, verified, forever); err != nil {
			return err
		}
		// The rows of no shard are logged only while a batch moves.
		if !endUnknown {
			return nil
		}
		return tx.Exec("UPDATE " + sp.q(splitStateTable) + " SET moving = FALSE WHERE shard = -1").Error
	})
	if errors.Is(err, errFenceLapsed) {
		return withDetail(ErrFenceLapsed, why)
	}
	return err
}

// sealRows seals the state rows of shards, in tx (sealShards, the rows
// held): fenced for good, no longer logged, and each one's verified
// stored. On PostgreSQL it is one statement whose shards and verified
// values come as one JSON parameter: a UNION ALL of a SELECT per shard,
// 500 parameters for 250 shards, took 20 to 50 ms to plan on a quiet
// machine, under the batch's fence.
func (sp *splitter) sealRows(tx *gorm.DB, shards []int, verified map[int]string, forever string) error {
	if !sp.mysql {
		type row struct {
			S int    `json:"s"`
			V string `json:"v"`
		}
		rows := make([]row, len(shards))
		for i, s := range shards {
			rows[i] = row{s, verified[s]}
		}
		j, err := json.Marshal(rows)
		if err != nil {
			return err
		}
		return tx.Exec("UPDATE "+sp.q(splitStateTable)+" AS st SET fenced_until = "+forever+", token = token + 1, sealed = TRUE, moving = FALSE, verified = v.v"+
			" FROM json_to_recordset(CAST(? AS json)) AS v(s int, v text) WHERE st.shard = v.s", string(j)).Error
	}
	for lo := 0; lo < len(shards); lo += 500 {
		chunk := shards[lo:min(lo+500, len(shards))]
		var vals []string
		var args []any
		for _, s := range chunk {
			vals = append(vals, "SELECT CAST(? AS SIGNED) AS s, CAST(? AS CHAR) AS v")
			args = append(args, s, verified[s])
		}
		q := "UPDATE " + sp.q(splitStateTable) + " AS st JOIN (" + strings.Join(vals, " UNION ALL ") + ") AS v ON st.shard = v.s SET st.fenced_until = " + forever +
			", st.token = st.token + 1, st.sealed = TRUE, st.moving = FALSE, st.verified = v.v"
		if err := tx.Exec(q, args...).Error; err != nil {
			return err
		}
	}
	return nil
}

// liftShards lifts a failed batch's fences of shards on the monolith,
// those with tokens only, with no lock held: writes go through again at
// once rather than when the fences lapse. The shards' logging (moving) is
// left as it is: that is the lock holder's, who may be a rival that began
// its own run, its change log started, since this run lost its lock
// (stopChangeLog ends it, the lock held). Clearing it here stopped the
// rival's log, and the writes made between this lift and the rival's fence
// were neither in its copy nor in its log: lost (found by the fault test;
// TestSplitFailedRunsLiftKeepsARivalsLog*).
func (sp *splitter) liftShards(ctx context.Context, shards []int, tokens map[int]int64) error {
	return lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
		return sp.liftShardsTx(tx, shards, tokens, false, false)
	})
}

// shardState is a shard's row of the split's state, as a fence or a lift
// reads it.
type shardState struct {
	Shard  int
	Token  int64
	Sealed bool
}

// lockStates reads the state rows of shards, in shard order, locked for
// the rest of tx.
func (sp *splitter) lockStates(tx *gorm.DB, shards []int) ([]shardState, error) {
	var cur []shardState
	err := tx.Raw("SELECT shard, token, sealed FROM " + sp.q(splitStateTable) + " WHERE shard " + inList(shards) + " ORDER BY shard FOR UPDATE").Scan(&cur).Error
	return cur, err
}

// liftShardsTx lifts the fences of shards on the monolith, in tx: with
// tokens, only those fences; without, any fence but a seal, and with
// unseal a seal too (an abort before the flip, a roll-back's flip back,
// which the caller checked). With endLog, the shards' logging ends too
// (moving cleared): only for a caller that holds the split's lock, checked
// with the state rows held.
func (sp *splitter) liftShardsTx(tx *gorm.DB, shards []int, tokens map[int]int64, unseal, endLog bool) error {
	open := "'-infinity'"
	if sp.mysql {
		open = "'1000-01-01'"
	}
	cur, err := sp.lockStates(tx, shards)
	if err != nil {
		return err
	}
	var lift []int
	for _, c := range cur {
		switch {
		case tokens != nil && tokens[c.Shard] != c.Token:
		case c.Sealed && !unseal:
		default:
			lift = append(lift, c.Shard)
		}
	}
	if len(lift) == 0 {
		return nil
	}
	q := "UPDATE " + sp.q(splitStateTable) + " SET fenced_until = " + open + ", token = token + 1, sealed = FALSE"
	if endLog {
		q += ", moving = FALSE"
	}
	return tx.Exec(q + " WHERE shard " + inList(lift)).Error
}

// installTriggersMySQL is installTriggers on MySQL/MariaDB: AFTER row
// triggers (a BEFORE INSERT trigger does not see the AUTO_INCREMENT id),
// which fail the statement, rolled back with its row, when the row's shard
// is fenced, and log it when it is moving. They are created under LOCK
// TABLES, as the move's (withTablesLocked).
func (sp *splitter) installTriggersMySQL(ctx context.Context, users []string) error {
	st, log := sp.q(splitStateTable), sp.q(splitChangeTable)
	db := sp.mono.WithContext(ctx)
	var had int64
	if err := db.Raw("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", sp.schema, splitStateTable).Scan(&had).Error; err != nil {
		return err
	}
	if err := db.Exec("CREATE TABLE IF NOT EXISTS " + st + " (shard INT PRIMARY KEY, moving BOOLEAN NOT NULL, fenced_until DATETIME(6) NOT NULL," +
		" token BIGINT NOT NULL, sealed BOOLEAN NOT NULL, verified TEXT) ENGINE=InnoDB").Error; err != nil {
		return err
	}
	// The users of the sharded tables whose routers read it (usersMySQL:
	// those that may not yet, when the mover may grant): granted when it
	// is made; a grant revoked since stays revoked.
	if had == 0 {
		for _, u := range users {
			if err := db.Exec("GRANT SELECT ON " + st + " TO " + grantTo(u)).Error; err != nil {
				return fmt.Errorf("granting %s SELECT on %s, which its routers read: %w", u, st, err)
			}
		}
	}
	if err := db.Exec("CREATE TABLE IF NOT EXISTS " + log + " (seq BIGINT AUTO_INCREMENT PRIMARY KEY, tbl VARCHAR(64) NOT NULL, id BIGINT NOT NULL, shard INT NOT NULL) ENGINE=InnoDB").Error; err != nil {
		return err
	}
	for lo := -1; lo < sp.shards; lo += 1000 {
		var vals []string
		for s := lo; s < min(lo+1000, sp.shards); s++ {
			vals = append(vals, "("+strconv.Itoa(s)+", FALSE, '1000-01-01', 0, FALSE)")
		}
		if err := db.Exec("INSERT IGNORE INTO " + st + " (shard, moving, fenced_until, token, sealed) VALUES " + strings.Join(vals, ", ")).Error; err != nil {
			return err
		}
	}
	var triggers []struct{ Name, Body string }
	// Every trigger of the schema: a long table's is named by a hash
	// (splitTriggerMySQL), not shardid_split_*.
	if err := db.Raw("SELECT TRIGGER_NAME AS name, ACTION_STATEMENT AS body FROM information_schema.TRIGGERS WHERE "+triggersOfSchema, sp.schema).Scan(&triggers).Error; err != nil {
		return err
	}
	have := map[string]string{}
	for _, t := range triggers {
		have[t.Name] = t.Body
	}
	bodies := sp.splitTriggerBodiesMySQL()
	var stmts []string
	var tables []string
	for _, t := range sp.tables {
		for _, ev := range mysqlFenceEvents {
			name := splitTriggerMySQL(ev.letter, t.Name)
			if body, ok := have[name]; ok {
				// Made again when only its ID rule differs: Layout, or the
				// record of legacy IDs, changed since (or an earlier
				// version made it).
				if body == bodies[name] || withoutIDRule(body) != withoutIDRule(bodies[name]) {
					continue
				}
				stmts = append(stmts, fmt.Sprintf("DROP TRIGGER `%s`.`%s`", sp.schema, name))
			}
			stmts = append(stmts, fmt.Sprintf("CREATE TRIGGER `%s`.`%s` AFTER %s ON %s FOR EACH ROW %s",
				sp.schema, name, ev.event, sp.q(t.Name), bodies[name]))
			if !slices.Contains(tables, t.Name) {
				tables = append(tables, t.Name)
			}
		}
	}
	if len(stmts) == 0 {
		return nil
	}
	return execTablesLocked(ctx, sp.mono, sp.schema, append(tables, splitStateTable, splitChangeTable), stmts)
}

// splitTriggerBodiesMySQL returns the bodies (BEGIN ... END) of the
// split's triggers of the monolith's tables (MySQL), by trigger name: each
// row's old and new shard looked up in the split's state (shared lock),
// the write refused if fenced, logged if moving.
func (sp *splitter) splitTriggerBodiesMySQL() map[string]string {
	st, log := sp.q(splitStateTable), sp.q(splitChangeTable)
	check := func(t, ref, shard string) string {
		return "SET s = " + shard + "; SET u = NULL, m = FALSE, sl = FALSE; " +
			"SELECT fenced_until, moving, sealed INTO u, m, sl FROM " + st + " WHERE shard = COALESCE(s, -1) LOCK IN SHARE MODE; " +
			"IF u > UTC_TIMESTAMP(6) AND NOT (sl AND COALESCE(@shardid_mover, 0) = 1) THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '" + shardid.FenceMessage + "'; END IF; " +
			"IF m THEN INSERT INTO " + log + " (tbl, id, shard) VALUES ('" + t + "', " + ref + ".id, COALESCE(s, -1)); END IF; "
	}
	out := map[string]string{}
	for _, t := range sp.tables {
		decl := "DECLARE s INT; DECLARE u DATETIME(6); DECLARE m BOOLEAN; DECLARE sl BOOLEAN; "
		if sp.ids != nil {
			decl += idRuleStart + " DECLARE so INT; " + idRuleEnd
		}
		body := map[string]string{
			"i": check(t.Name, "NEW", sp.rowShard(t, "NEW", 0)) + sp.ids.idRuleMySQL("TRUE", st, sp.q(splitTablesTable), t.Name),
			"d": check(t.Name, "OLD", sp.rowShard(t, "OLD", 0)),
			"u": check(t.Name, "OLD", sp.rowShard(t, "OLD", 0)) + check(t.Name, "NEW", sp.rowShard(t, "NEW", 0)),
		}
		if sp.ids != nil {
			body["u"] = check(t.Name, "OLD", sp.rowShard(t, "OLD", 0)) + idRuleStart + " SET so = s; " + idRuleEnd + check(t.Name, "NEW", sp.rowShard(t, "NEW", 0)) +
				sp.ids.idRuleMySQL("(NEW.id <> OLD.id OR NOT (so <=> s))", st, sp.q(splitTablesTable), t.Name)
		}
		for _, ev := range mysqlFenceEvents {
			out[splitTriggerMySQL(ev.letter, t.Name)] = "BEGIN " + decl + body[ev.letter] + " END"
		}
	}
	return out
}

// splitTriggerMySQL names the split's trigger of table for event (i, u,
// d), within 64 characters.
func splitTriggerMySQL(letter, table string) string {
	name := "shardid_split_" + letter + "_" + table
	if len(name) > 64 {
		return captureTrigger("s"+letter, table)
	}
	return name
}
