package reshard

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"gorm.io/gorm"
)

// splitTablesTable holds, on the monolith, the sharded tables as the split
// that is under way declared them (SplitConfig.Tables) and the map's
// logical shards: the triggers, the change log, the seals and the verified
// sums of the shards split so far all follow those keys and that modulus. A split run, plan, roll-back or clean-up with
// other declarations is refused until nothing is under way.
const splitTablesTable = "shardid_split_tables"

// declared returns what sp's triggers and sums follow in a canonical form,
// as JSON: the logical shards (a key's shard is the key modulo them) and
// the table declarations, sorted by name.
func (sp *splitter) declared() string {
	b, _ := json.Marshal(struct {
		LogicalShards int
		Tables        json.RawMessage
	}{sp.shards, json.RawMessage(declaredTables(sp.tables))}) // never fails
	return string(b)
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
	var n int64
	q := "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?"
	if err := sp.mono.WithContext(ctx).Raw(q, sp.schema, splitTablesTable).Scan(&n).Error; err != nil || n == 0 {
		return "", err
	}
	var got []string
	if err := sp.mono.WithContext(ctx).Raw("SELECT tables FROM " + sp.q(splitTablesTable) + " WHERE id = 1").Scan(&got).Error; err != nil {
		return "", err
	}
	if len(got) == 0 {
		return "", nil
	}
	return got[0], nil
}

// underWay returns the first shard of the monolith that a split (or a
// roll-back) left sealed, moving or fenced, or -1 if there is none.
func (sp *splitter) underWay(ctx context.Context) (int, error) {
	state, err := sp.readSplitState(ctx, nil)
	if err != nil {
		return 0, err
	}
	first := -1
	for s, st := range state {
		if s >= 0 && (st.Sealed || st.Moving || st.Live) && (first < 0 || s < first) {
			first = s
		}
	}
	return first, nil
}

// checkDeclared returns ErrTablesChanged if the monolith records other
// table declarations than sp's while a split is under way there (a shard
// sealed, moving or fenced). With record (the split's lock held), it
// records sp's when none are, or when others are and nothing is under way,
// after dropping the split's triggers of the tables as they were declared,
// which installTriggers then makes anew.
func (sp *splitter) checkDeclared(ctx context.Context, record bool) error {
	was, err := sp.readDeclared(ctx)
	if err != nil {
		return fmt.Errorf("shardid: split: reading the tables it began with: %w", err)
	}
	now := sp.declared()
	if was == now {
		return nil
	}
	if was != "" {
		s, err := sp.underWay(ctx)
		if err != nil {
			return err
		}
		if s >= 0 {
			return withDetail(ErrTablesChanged, fmt.Sprintf("the split of %s began with %s, and the configuration says %s now, while shard %d is split or being split: "+
				"declare them as they were (or roll back every split shard and abort the split before you change them)", sp.cfg.Monolith, was, now, s))
		}
	}
	if !record {
		return nil
	}
	if was != "" {
		var old struct{ Tables []SplitTable }
		if err := json.Unmarshal([]byte(was), &old); err != nil {
			return fmt.Errorf("shardid: split: the tables it began with: %w", err)
		}
		if err := sp.dropSplitTriggers(ctx, old.Tables); err != nil {
			return fmt.Errorf("shardid: split: dropping the triggers of its tables as they were declared: %w", err)
		}
	}
	db := sp.mono.WithContext(ctx)
	upsert := "INSERT INTO " + sp.q(splitTablesTable) + " (id, tables) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET tables = EXCLUDED.tables"
	if sp.mysql {
		upsert = "INSERT INTO " + sp.q(splitTablesTable) + " (id, tables) VALUES (1, ?) ON DUPLICATE KEY UPDATE tables = VALUES(tables)"
	}
	if err := db.Exec("CREATE TABLE IF NOT EXISTS " + sp.q(splitTablesTable) + " (id INT PRIMARY KEY, tables TEXT NOT NULL)").Error; err != nil {
		return fmt.Errorf("shardid: split: recording its tables: %w", err)
	}
	if err := db.Exec(upsert, now).Error; err != nil {
		return fmt.Errorf("shardid: split: recording its tables: %w", err)
	}
	return nil
}

// dropSplitTriggers drops the split's triggers (and, on PostgreSQL, their
// functions) of the monolith's tables declared as old.
func (sp *splitter) dropSplitTriggers(ctx context.Context, old []SplitTable) error {
	if sp.mysql {
		var have []struct{ Name, Tbl string }
		err := sp.mono.WithContext(ctx).Raw("SELECT TRIGGER_NAME AS name, EVENT_OBJECT_TABLE AS tbl FROM information_schema.TRIGGERS"+
			" WHERE TRIGGER_SCHEMA = ?", sp.schema).Scan(&have).Error
		if err != nil {
			return err
		}
		var drop, tables []string
		for _, t := range old {
			for _, ev := range mysqlFenceEvents {
				name := splitTriggerMySQL(ev.letter, t.Name)
				if slices.ContainsFunc(have, func(h struct{ Name, Tbl string }) bool { return h.Name == name }) {
					drop = append(drop, "DROP TRIGGER `"+sp.schema+"`.`"+name+"`")
					if !slices.Contains(tables, t.Name) {
						tables = append(tables, t.Name)
					}
				}
			}
		}
		if len(drop) == 0 {
			return nil
		}
		return withTablesLocked(ctx, sp.mono, sp.schema, append(tables, splitStateTable, splitChangeTable), func(conn *sql.Conn) error {
			for _, q := range drop {
				if _, err := conn.ExecContext(ctx, q); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
		for _, t := range old {
			var reg *string
			if err := tx.Raw("SELECT to_regclass(?)::text", sp.q(t.Name)).Scan(&reg).Error; err != nil {
				return err
			}
			if reg != nil {
				for _, q := range []string{"DROP TRIGGER IF EXISTS shardid_split ON " + sp.q(t.Name),
					"DROP TRIGGER IF EXISTS shardid_split_truncate ON " + sp.q(t.Name)} {
					if err := tx.Exec(q).Error; err != nil {
						return err
					}
				}
			}
			if err := tx.Exec(fmt.Sprintf(`DROP FUNCTION IF EXISTS "%s".%s()`, sp.schema, splitFunction(t.Name))).Error; err != nil {
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
		return withDetail(ErrInvalidPlan, fmt.Sprintf("the plan was made for Tables %s, and they are %s now: plan again", declaredTables(p.Tables), declaredTables(cfg.Tables)))
	}
	return nil
}
