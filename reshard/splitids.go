package reshard

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/routesql"
)

// A split puts each row in the shard of its sharding key, and the row's ID
// must still find it there: Router.Get and ForID route an ID of the layout
// by the shard its bits name, and an older one by the record of legacy IDs
// (ReadLegacyIDs). A row whose key was changed since its ID was issued
// (UPDATE photos SET user_id = ...), or whose legacy ID an old writer's
// sequence issued after the record, would be copied where no lookup by its
// ID goes. With SplitConfig.Layout, the plan checks every row of the
// monolith; each run every row left in it, before it installs its triggers
// and again once they are on; the triggers every write from then on
// (idRulePG, idRuleMySQL); and each batch every row it copies or applies,
// before its flip.

// idCheck tells whether a row's ID finds it in a shard.
type idCheck struct {
	layout shardid.Layout
	legacy *shardid.LegacyIDs // nil: none recorded
	shards int
	// ownKey are the tables keyed by their own id (users, Key "id"): a
	// plain integer ID (the model's int64 primary key, which the plugin
	// leaves to the sequence) is found by its key, ForKey(id), where the
	// split puts it, recorded or not; only IDs of the layout are checked.
	ownKey map[string]bool
}

// newIDCheck returns the check of cfg, or nil without a Layout. Without
// Legacy it loads the record Catalog keeps, if any.
func newIDCheck(ctx context.Context, cfg SplitConfig) (*idCheck, error) {
	if cfg.Layout.Unit() == 0 {
		if cfg.Legacy != nil {
			return nil, withDetail(shardid.ErrInvalidConfig, "split: Legacy without Layout: give the layout the plugin issues IDs in")
		}
		return nil, nil
	}
	if n := cfg.Layout.Shards(); n < cfg.Map.LogicalShards() {
		return nil, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("split: the layout %s names %d shards, fewer than the map's %d", cfg.Layout.Name(), n, cfg.Map.LogicalShards()))
	}
	c := &idCheck{layout: cfg.Layout, legacy: cfg.Legacy, shards: cfg.Map.LogicalShards(), ownKey: map[string]bool{}}
	for _, t := range cfg.Tables {
		if t.Key == "id" {
			c.ownKey[t.Name] = true
		}
	}
	if c.legacy == nil && cfg.Catalog != nil {
		l, err := cfg.Catalog.LoadLegacy(ctx)
		if err != nil {
			return nil, err
		}
		c.legacy = l
	}
	return c, nil
}

// mismatch returns why the row id of table, put in shard, would not be
// found by its ID, or "" when it would.
func (c *idCheck) mismatch(table string, id int64, shard int) string {
	if c.ownKey[table] && id >= 0 && id < c.plainBelow() {
		return "" // a plain integer ID, which is its key
	}
	if c.legacy != nil && shardid.ID(id) >= c.legacy.Floor() || c.legacy == nil && id > 0 {
		// The common case, an ID of the layout, without allocating.
		if c.layout.Decompose(shardid.ID(id)).Shard == shard {
			return ""
		}
	}
	row := func() string { return table + " " + strconv.FormatInt(id, 10) }
	if c.legacy != nil {
		s, legacy, err := c.legacy.Shard(table, shardid.ID(id))
		switch {
		case legacy && err == nil && s == shard:
			return ""
		case errors.Is(err, shardid.ErrNoLegacyRow):
			return row() + " (a legacy ID the record does not hold: issued by the old sequence after ReadLegacyIDs)"
		case err != nil:
			return row() + " (" + strings.TrimPrefix(err.Error(), "shardid: ") + ")"
		case legacy && s != shard:
			return fmt.Sprintf("%s (recorded on shard %d, its key now puts it on shard %d)", row(), s, shard)
		case legacy:
			return ""
		}
	}
	if id <= 0 {
		return row() + " (not an ID)"
	}
	if s := c.layout.Decompose(shardid.ID(id)).Shard; s != shard {
		if c.legacy == nil {
			return fmt.Sprintf("%s (names shard %d, its key puts it on shard %d; if it is older than shardid, record the legacy IDs first: ReadLegacyIDs, Catalog.SaveLegacy)", row(), s, shard)
		}
		return fmt.Sprintf("%s (names shard %d, its key puts it on shard %d)", row(), s, shard)
	}
	return ""
}

// idMismatches gathers the rows a batch would lose the IDs of; safe for
// concurrent use.
type idMismatches struct {
	mu    sync.Mutex
	n     int64
	first []string
	ids   map[string][]int64
}

// check records row id of table in shard if it fails c; c may be nil.
func (m *idMismatches) check(c *idCheck, table string, id int64, shard int) {
	if c == nil {
		return
	}
	if why := c.mismatch(table, id, shard); why != "" {
		m.add(table, id, why)
	}
}

// add records row id of table, which fails for the reason why.
func (m *idMismatches) add(table string, id int64, why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	if len(m.first) < 10 {
		m.first = append(m.first, why)
		if m.ids == nil {
			m.ids = map[string][]int64{}
		}
		m.ids[table] = append(m.ids[table], id)
	}
}

// err returns nil, or ErrKeyMismatch naming the first rows.
func (m *idMismatches) err(what string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == 0 {
		return nil
	}
	return withDetail(ErrKeyMismatch, fmt.Sprintf("%s: %d row(s) whose IDs would not find them in the shards their keys put them in: %s%s; %s",
		what, m.n, strings.Join(m.first, "; "), more(m.n, len(m.first)), idMismatchFix))
}

// idMismatchFix says what to do about rows whose IDs would not find them.
const idMismatchFix = "change their keys back (once the split's triggers are on the monolith, a legacy row's in an operator's transaction that sets shardid.fix_key, while no batch is under way: SET LOCAL shardid.fix_key = on on PostgreSQL; SET @shardid_fix_key = 1, then SET @shardid_fix_key = NULL, on MySQL) or give them new IDs, then run the split again"

func more(n int64, shown int) string {
	if n > int64(shown) {
		return fmt.Sprintf(" and %d more", n-int64(shown))
	}
	return ""
}

// parseDecimal parses b, a decimal int64 as COPY writes it, without
// allocating.
func parseDecimal(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' || v > (1<<63)/10 {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	switch {
	case neg && v <= 1<<63:
		return -int64(v), true
	case !neg && v <= 1<<63-1:
		return int64(v), true
	}
	return 0, false
}

// idColumn returns the index of "id" in cols, or -1.
func idColumn(cols []string) int {
	for i, c := range cols {
		if c == "id" {
			return i
		}
	}
	return -1
}

// copyField returns field i of a COPY text row (columns separated by
// tabs), without its line end.
func copyField(row []byte, i int) ([]byte, bool) {
	for ; i > 0; i-- {
		j := bytes.IndexByte(row, '\t')
		if j < 0 {
			return nil, false
		}
		row = row[j+1:]
	}
	if j := bytes.IndexByte(row, '\t'); j >= 0 {
		row = row[:j]
	}
	return bytes.TrimSuffix(row, []byte("\n")), true
}

// planIDs reads the shard and ID of every row of the shards todo of the
// monolith's tables in ok, and refuses those whose IDs would not find them.
func (sp *splitter) planIDs(ctx context.Context, todo []int, ok map[string]bool, refuse func(kind, table, detail string, ids []int64)) error {
	for _, t := range sp.tables {
		if !ok[t.Name] || t.Parent != "" && !ok[t.Parent] {
			continue
		}
		var m idMismatches
		err := readSession(ctx, sp.mono, func(q querier) error {
			rows, err := q.QueryContext(ctx, "SELECT id, shardid_s FROM "+sp.rel(t, todo))
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id int64
				var s int
				if err := rows.Scan(&id, &s); err != nil {
					return err
				}
				m.check(sp.ids, t.Name, id, s)
			}
			return rows.Err()
		})
		if err != nil {
			return fmt.Errorf("shardid: reading the IDs of %s: %w", t.Name, err)
		}
		if m.n > 0 {
			hint := ""
			if t.Key == "id" {
				// Keyed by its own ID: new rows the plugin gave IDs of
				// the layout name the shard the plugin chose.
				hint = "; " + t.Name + " is keyed by its own id, which the split takes modulo the logical shards: rows given IDs of the layout cannot be split so (keep their IDs plain integers, docs/resharding.md, step 1)"
			} else if t.Key != "" {
				// A key holding IDs of the layout (a comment's photo_id):
				// the plugin routes by the shard they name, the split by
				// the key modulo the logical shards.
				var n int64
				k := quoteIdent(sp.mono, t.Key)
				if err := sp.mono.WithContext(ctx).Raw("SELECT count(*) FROM "+sp.q(t.Name)+" WHERE "+k+" >= ?", sp.ids.plainBelow()).Scan(&n).Error; err != nil {
					return fmt.Errorf("shardid: reading the keys of %s: %w", t.Name, err)
				}
				if n > 0 {
					hint = fmt.Sprintf("; %d row(s) of %s hold IDs of the layout in %s, which the split takes modulo the logical shards while the plugin routes by the shard they name: "+
						"declare %s a child of the table whose IDs they are (Parent, with Via: %q), so that each row follows its parent's shard", n, t.Name, t.Key, t.Name, t.Key)
				}
			}
			refuse("id-mismatch", t.Name, fmt.Sprintf("%d row(s) whose IDs would not find them in the shards their keys put them in: %s%s%s; %s",
				m.n, strings.Join(m.first, "; "), more(m.n, len(m.first)), hint, idMismatchFix), m.ids[t.Name])
		}
	}
	return nil
}

// shardList writes ascending shards as ranges: "0-3, 8".
func shardList(shards []int) string {
	var parts []string
	for i := 0; i < len(shards); {
		j := i
		for j+1 < len(shards) && shards[j+1] == shards[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(shards[i]))
		} else {
			parts = append(parts, strconv.Itoa(shards[i])+"-"+strconv.Itoa(shards[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// checkApplied checks the rows that a catch-up is about to apply, by table:
// each as the monolith holds it now, in whichever shard, of the batch or
// not (a row whose key left the batch would otherwise be deleted from
// its copy, and the flip would send its ID where it is not). A row changed
// after the read is logged again, and checked again.
func (b *splitBatch) checkApplied(ctx context.Context, ids map[string][]int64) error {
	if b.sp.ids == nil {
		return nil
	}
	var m idMismatches
	for _, table := range slices.Sorted(maps.Keys(ids)) {
		all := ids[table]
		err := readSession(ctx, b.sp.mono, func(q querier) error {
			for lo := 0; lo < len(all); lo += 1000 {
				chunk := all[lo:min(lo+1000, len(all))]
				args := make([]any, len(chunk))
				for i, id := range chunk {
					args[i] = id
				}
				from, shard := b.sp.from(b.sp.byName[table])
				rows, err := q.QueryContext(ctx, "SELECT x.id, "+shard+" FROM "+from+
					" WHERE x.id IN ("+placeholders(b.sp.mono, 0, len(chunk))+")", args...)
				if err != nil {
					return err
				}
				for rows.Next() {
					var id int64
					var s sql.NullInt64
					if err := rows.Scan(&id, &s); err != nil {
						rows.Close()
						return err
					}
					if !s.Valid {
						m.add(table, id, fmt.Sprintf("%s %d (its key is NULL or negative now: no shard holds it)", table, id))
						continue
					}
					m.check(b.sp.ids, table, id, int(s.Int64))
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("shardid: reading the IDs of %s: %w", table, err)
		}
	}
	return m.err("catching up with shards " + shardList(b.shards))
}

// The ID rule in the split's triggers (PostgreSQL's function, MySQL's
// triggers) is marked, for triggersMatch: it follows Layout and the record
// of legacy IDs, not the declared tables.
const (
	idRuleStart = "/* shardid: ids */"
	idRuleEnd   = "/* shardid: ids end */"
)

// withoutIDRule is a trigger body without its ID rule (each part of it).
func withoutIDRule(body string) string {
	for {
		i := strings.Index(body, idRuleStart)
		j := strings.Index(body, idRuleEnd)
		if i < 0 || j < i {
			return body
		}
		body = body[:i] + body[j+len(idRuleEnd):]
	}
}

// shardShift returns the position of the layout's shard bits.
func (c *idCheck) shardShift() int {
	for b := range 63 {
		if c.layout.Decompose(shardid.ID(1)<<b).Shard == 1 {
			return b
		}
	}
	return 0 // newIDCheck refuses layouts without shard bits
}

// floor is the first ID of the layout at the adoption (0 with no record:
// every ID is then checked by its bits).
func (c *idCheck) floor() int64 {
	if c.legacy == nil {
		return 0
	}
	return int64(c.legacy.Floor())
}

// plainBelow is where the IDs of a table keyed by its own id stop being
// plain integers: the adoption's floor, or without a record the layout's
// ID of its epoch's second day, above any sequence's values and below any
// ID the layout gives today.
func (c *idCheck) plainBelow() int64 {
	if c.legacy != nil {
		return int64(c.legacy.Floor())
	}
	id, err := c.layout.Compose(shardid.Parts{Time: c.layout.Epoch().Add(24 * time.Hour)})
	if err != nil {
		return 0
	}
	return int64(id)
}

// sqlBroken is the SQL condition that the row ref's ID (NEW) of table would
// not find it in the shard shard (an expression): an ID below the layout's
// (a legacy one, which only the record places), or one whose shard bits
// name another. A table keyed by its own id takes plain integer IDs.
func (c *idCheck) sqlBroken(table, ref, shard string) string {
	bits := fmt.Sprintf("((%[1]s.id >> %[2]d) & %[3]d) <> %[4]s", ref, c.shardShift(), c.layout.Shards()-1, shard)
	if c.ownKey[table] {
		return fmt.Sprintf("(%s.id >= %d AND %s)", ref, c.plainBelow(), bits)
	}
	return fmt.Sprintf("(%s.id < %d OR %s)", ref, c.floor(), bits)
}

// idRulePG is the ID rule of the split's trigger function of a table
// (PostgreSQL), run where a row is written with a new ID or shard (sn),
// or "" without a Layout. A write that would leave the row where its ID
// does not find it fails with routesql.KeyMismatchMessage: from the first
// run's triggers on, the monolith keeps every row findable by its ID. The
// mover's writes (a roll-back's) pass; so does every write once the
// split's tables are no longer declared (an abort with nothing split
// forgets them, in the transaction that ends the rule with them); and so
// does, while no batch is
// under way, a session that sets shardid.fix_key: an operator putting a
// legacy row's key back as recorded (the record is not in the database;
// the next run checks every row again, checkAllIDs).
func (c *idCheck) idRulePG(state, declared, table, quoted string) string {
	if c == nil {
		return ""
	}
	// An INSERT of a row that is there already is an upsert (ON CONFLICT:
	// GORM's save of a loaded parent): it writes nothing, or updates,
	// which the UPDATE is checked as.
	return fmt.Sprintf(`%[1]s
		IF sn IS NOT NULL AND %[2]s AND coalesce(current_setting('shardid.mover', true), '') <> 'on'
			AND NOT (TG_OP = 'INSERT' AND EXISTS (SELECT 1 FROM %[6]s WHERE id = NEW.id)) THEN
			IF EXISTS (SELECT 1 FROM %[7]s)
				AND (coalesce(current_setting('shardid.fix_key', true), '') <> 'on' OR EXISTS (SELECT 1 FROM %[5]s WHERE moving)) THEN
				RAISE EXCEPTION '%[3]s: %% %% in shard %%', TG_TABLE_NAME, NEW.id, sn USING ERRCODE = '23514',
					HINT = 'a row keeps the shard its ID names: give a new row the ID of its key''s shard (the plugin does), and do not change a row''s key during the split; to put a legacy row''s key back as the record has it, SET LOCAL shardid.fix_key = on in an operator''s transaction while no batch is under way';
			END IF;
		END IF;%[4]s`, idRuleStart, c.sqlBroken(table, "NEW", "sn"), routesql.KeyMismatchMessage, idRuleEnd, state, quoted, declared)
}

// idRuleMySQL is idRulePG for MySQL's INSERT and UPDATE triggers: s is the
// row's new shard, changed whether its ID or its shard changed (TRUE for
// an INSERT).
func (c *idCheck) idRuleMySQL(changed, state, declared, table string) string {
	if c == nil {
		return ""
	}
	return idRuleStart + " IF " + changed + " AND s IS NOT NULL AND " + c.sqlBroken(table, "NEW", "s") + " AND COALESCE(@shardid_mover, 0) <> 1 THEN" +
		" IF EXISTS (SELECT 1 FROM " + declared + ") AND (COALESCE(@shardid_fix_key, 0) <> 1 OR EXISTS (SELECT 1 FROM " + state + " WHERE moving)) THEN" +
		" SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '" + routesql.KeyMismatchMessage + "'; END IF; END IF; " + idRuleEnd
}

// checkAllIDs checks the ID of every row of the shards still in the
// monolith, and returns ErrKeyMismatch naming those that would not be
// found.
func (sp *splitter) checkAllIDs(ctx context.Context) error {
	v := sp.cfg.Map.Load()
	var todo []int
	for s := range sp.shards {
		if v.Shared(s) && v.DB(s) == sp.monoIdx {
			todo = append(todo, s)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	ok := map[string]bool{}
	for _, t := range sp.tables {
		ok[t.Name] = true
	}
	var found []string
	err := sp.planIDs(ctx, todo, ok, func(_, table, detail string, _ []int64) {
		found = append(found, table+": "+detail)
	})
	if err != nil {
		return err
	}
	if len(found) > 0 {
		return withDetail(ErrKeyMismatch, "the monolith holds rows written before the split's triggers: "+strings.Join(found, "; "))
	}
	return nil
}
