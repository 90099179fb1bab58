package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/sqlddl"
	"gorm.io/gorm"
)

// ErrKeyMismatch is returned by ReadLegacyIDs for a row whose ID is the
// layout's but names another shard than its sharding key does: on MySQL,
// the sign of writers that kept using AUTO_INCREMENT after the plugin had
// written an ID (AUTO_INCREMENT then continues after the largest ID, in the
// layout's range). The error names the rows.
var ErrKeyMismatch = errors.New("shardid: row ID names another shard than its sharding key")

// ReadLegacyIDs reads, from db (the database that adopted shardid, through
// whichever connection reads it), the shard of every row of tables whose ID
// was issued before adopted, the time the plugin began issuing IDs (the
// time of the first deploy with it; earlier is safe, later is not). A row's
// shard is its sharding key's, as the plugin computes it for integer keys:
// key % LogicalShards.
//
// Run it once every writer issues IDs through the plugin (no ID comes from
// the sequence any more), before a split moves the first row; the IDs it
// records never change. Rows whose IDs are the layout's are checked: one
// whose ID names another shard than its key fails the read with
// ErrKeyMismatch. Keep the result with Catalog.SaveLegacy.
func ReadLegacyIDs(ctx context.Context, db *gorm.DB, r *shardid.Router, adopted time.Time, tables ...SplitTable) (*shardid.LegacyIDs, error) {
	l, err := shardid.NewLegacyIDs(routerLayout(r), adopted)
	if err != nil {
		return nil, err
	}
	type legacyTable struct{ Table, ID, Key, Parent, ParentID string }
	byName := make(map[string]legacyTable, len(tables))
	for _, st := range tables {
		t := legacyTable{Table: st.Name, ID: "id", Key: st.Key, Parent: st.Parent, ParentID: st.Via}
		for _, n := range []string{t.Table, t.Key, t.Parent, t.ParentID} {
			if n != "" && !sqlddl.Name.MatchString(n) {
				return nil, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("legacy table %s: name %q: want %s", t.Table, n, sqlddl.Name))
			}
		}
		if t.Table == "" || (t.Key == "") == (t.Parent == "") || (t.Parent == "") != (t.ParentID == "") {
			return nil, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("legacy table %q: give Key, or Parent and Via", t.Table))
		}
		byName[t.Table] = t
	}
	shards := int64(r.LogicalShards())
	for _, t := range byName {
		var q string
		if t.Key != "" {
			q = fmt.Sprintf("SELECT %s, %s FROM %s", t.ID, t.Key, t.Table)
		} else {
			// The key of the chain's root: a child follows its parent,
			// which may follow its own, as the split follows them.
			from, alias, cur := t.Table+" c", "c", t
			for depth := 0; cur.Key == ""; depth++ {
				p, ok := byName[cur.Parent]
				if !ok || depth >= len(byName) {
					return nil, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("legacy table %s follows %s, which is not a listed table (or its parents go round)", t.Table, cur.Parent))
				}
				next := fmt.Sprintf("p%d", depth)
				from += fmt.Sprintf(" JOIN %s %s ON %s.%s = %s.%s", p.Table, next, next, p.ID, alias, cur.ParentID)
				alias, cur = next, p
			}
			q = fmt.Sprintf("SELECT c.%s, %s.%s FROM %s", t.ID, alias, cur.Key, from)
		}
		rows, err := db.WithContext(ctx).Raw(q).Rows()
		if err != nil {
			return nil, fmt.Errorf("shardid: reading the legacy IDs of %s: %w", t.Table, err)
		}
		var bad []string
		err = func() error {
			defer rows.Close()
			for rows.Next() {
				var id int64
				var key sql.NullInt64
				if err := rows.Scan(&id, &key); err != nil {
					return err
				}
				if !key.Valid || key.Int64 < 0 {
					return withDetail(shardid.ErrInvalidShardKey, fmt.Sprintf("%s %d has the sharding key %v: want a non-negative integer", t.Table, id, key))
				}
				shard := int(key.Int64 % shards)
				if shardid.ID(id) >= l.Floor() {
					if got := r.ShardOf(shardid.ID(id)); got != shard && len(bad) < 10 {
						bad = append(bad, fmt.Sprintf("%s %d (names shard %d, its key %d is on shard %d)", t.Table, id, got, key.Int64, shard))
					}
					continue
				}
				if err := l.Add(t.Table, shardid.ID(id), shard); err != nil {
					return err
				}
			}
			return rows.Err()
		}()
		if err != nil {
			return nil, fmt.Errorf("shardid: reading the legacy IDs of %s: %w", t.Table, err)
		}
		if len(bad) > 0 {
			return nil, withDetail(ErrKeyMismatch, strings.Join(bad, "; "))
		}
	}
	return l, nil
}

// routerLayout returns the layout r decodes IDs with.
func routerLayout(r *shardid.Router) shardid.Layout { return r.Layout() }

// legacyTable returns the name of the table that keeps the legacy IDs.
func (c *Catalog) legacyTable() (string, error) {
	t, err := c.table()
	return t + "_legacy", err
}

// SaveLegacy stores l in the catalog, replacing what it held: a table
// <catalog>_legacy, in chunks, created when missing (with the catalog's
// Setup privileges). Routers load it with LoadLegacy and pass it as
// RouterConfig.Legacy.
func (c *Catalog) SaveLegacy(ctx context.Context, l *shardid.LegacyIDs) error {
	t, err := c.legacyTable()
	if err != nil {
		return err
	}
	blob := "BYTEA"
	if c.DB.Dialector.Name() == "mysql" {
		blob = "LONGBLOB"
	}
	if err := sqlddl.Ensure(ctx, c.DB, shardid.ErrSetupRequired, "Catalog.SaveLegacy", t, []string{t},
		"CREATE TABLE IF NOT EXISTS "+t+" (part INT PRIMARY KEY, data "+blob+" NOT NULL)"); err != nil {
		return err
	}
	data, err := l.MarshalBinary()
	if err != nil {
		return err
	}
	const part = 256 << 10 // below every MySQL default max_allowed_packet (1 MiB in 5.5)
	return c.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("DELETE FROM " + t).Error; err != nil {
			return err
		}
		for i := 0; i*part < len(data); i++ {
			chunk := data[i*part : min(len(data), (i+1)*part)]
			if err := tx.Exec("INSERT INTO "+t+" (part, data) VALUES (?, ?)", i, chunk).Error; err != nil {
				return err
			}
		}
		return nil
	})
}

// LoadLegacy returns the legacy IDs SaveLegacy stored, or nil when it never
// ran. It needs SELECT on the table.
func (c *Catalog) LoadLegacy(ctx context.Context) (*shardid.LegacyIDs, error) {
	t, err := c.legacyTable()
	if err != nil {
		return nil, err
	}
	rows, err := c.DB.WithContext(ctx).Raw("SELECT part, data FROM " + t + " ORDER BY part").Rows()
	if err != nil {
		// Never saved: the table is missing. A role that may not read it
		// is told so (MySQL hides such a table from information_schema
		// too): a router built without the legacy IDs would look them up
		// on the shards their bits name.
		eerr := sqlddl.Explain(ctx, c.DB, shardid.ErrSetupRequired, "Catalog.SaveLegacy", []string{t}, err)
		if errors.Is(eerr, shardid.ErrSetupRequired) && noSuchTable(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("shardid: loading the legacy IDs from %s (it needs SELECT on it): %w", t, err)
	}
	defer rows.Close()
	var data []byte
	for want := 0; rows.Next(); want++ {
		var part int
		var b []byte
		if err := rows.Scan(&part, &b); err != nil {
			return nil, err
		}
		if part != want {
			return nil, withDetail(ErrInvalidCatalog, t+": part "+strconv.Itoa(want)+" is missing")
		}
		data = append(data, b...)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if data == nil {
		return nil, nil
	}
	l := new(shardid.LegacyIDs)
	if err := l.UnmarshalBinary(data); err != nil {
		return nil, withDetail(ErrInvalidCatalog, t+": "+err.Error())
	}
	return l, nil
}

// noSuchTable reports whether err is the server's "table does not exist"
// (PostgreSQL 42P01, MySQL 1146, SQLite "no such table"), not a denial.
func noSuchTable(err error) bool {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState() == "42P01"
	}
	m := err.Error()
	return strings.Contains(m, "Error 1146") || strings.Contains(m, "no such table")
}
