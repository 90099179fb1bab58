package reshard

import (
	"context"
	"fmt"
	"strings"

	"gorm.io/gorm"
)

// pgNextID is a shard's next_id() on PostgreSQL (shardid.PostgresNextID):
// the function's definition, its sequence's last value, and the columns
// whose default calls it.
type pgNextID struct {
	Def       string // pg_get_functiondef
	LastValue *int64 // nil if the sequence was never used or is missing
	Defaults  [][2]string
}

// readNextID reads schema's next_id() on db, nil if it has none.
func readNextID(ctx context.Context, db *gorm.DB, schema string) (*pgNextID, error) {
	var fn struct {
		OID int64  `gorm:"column:oid"`
		Def string `gorm:"column:def"`
	}
	err := db.WithContext(ctx).Raw(`SELECT p.oid::bigint AS oid, pg_get_functiondef(p.oid) AS def FROM pg_proc p
		JOIN pg_namespace n ON p.pronamespace = n.oid WHERE n.nspname = ? AND p.proname = 'next_id' AND p.pronargs = 0`, schema).Scan(&fn).Error
	if err != nil || fn.OID == 0 {
		return nil, err
	}
	n := &pgNextID{Def: fn.Def}
	err = db.WithContext(ctx).Raw("SELECT last_value FROM pg_sequences WHERE schemaname = ? AND sequencename = 'next_id_seq'", schema).
		Scan(&n.LastValue).Error
	if err != nil {
		return nil, err
	}
	var cols []struct{ Table, Column string }
	err = db.WithContext(ctx).Raw(`SELECT c.relname AS table, a.attname AS column FROM pg_attrdef d
		JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum JOIN pg_class c ON c.oid = d.adrelid
		WHERE EXISTS (SELECT 1 FROM pg_depend dep WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
			AND dep.refclassid = 'pg_proc'::regclass AND dep.refobjid = ?)`, fn.OID).Scan(&cols).Error
	if err != nil {
		return nil, err
	}
	for _, c := range cols {
		n.Defaults = append(n.Defaults, [2]string{c.Table, c.Column})
	}
	return n, nil
}

// apply creates next_id() and its sequence in the schema in (the copy of
// the source's schema, under its staging name) on dst, the sequence past
// the source's last value, and makes it the default of the same columns
// of tables. The function's body names the sequence by the shard's schema
// (its final name), so it runs once the schema has its name.
func (n *pgNextID) apply(ctx context.Context, dst *gorm.DB, in string, tables []string) error {
	if n == nil {
		return nil
	}
	header, body, ok := strings.Cut(n.Def, "next_id()")
	if !ok || !strings.HasPrefix(header, "CREATE OR REPLACE FUNCTION ") {
		return fmt.Errorf("shardid: unexpected definition of next_id(): %.60q", n.Def)
	}
	q := `"` + in + `"`
	stmts := []string{"CREATE SEQUENCE IF NOT EXISTS " + q + ".next_id_seq"}
	if n.LastValue != nil {
		stmts = append(stmts, fmt.Sprintf("SELECT setval('%s.next_id_seq', %d)", q, *n.LastValue))
	}
	stmts = append(stmts, "CREATE OR REPLACE FUNCTION "+q+".next_id()"+body)
	for _, d := range n.Defaults {
		for _, t := range tables {
			if t == d[0] {
				stmts = append(stmts, fmt.Sprintf(`ALTER TABLE %s."%s" ALTER COLUMN "%s" SET DEFAULT %s.next_id()`, q, d[0], d[1], q))
			}
		}
	}
	return execAll(ctx, dst, stmts)
}
