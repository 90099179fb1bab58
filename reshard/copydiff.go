package reshard

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"gorm.io/gorm"
)

// Why two copies of a table differ. A move's check compares values as each
// side stores them: a target whose column stores values otherwise (a
// numeric of another scale, a timestamp of another precision, text in
// another character set) or whose trigger rewrites rows as the mover
// writes them fails it with ErrCopyDiffers, a key and a hash. copyDiffers
// names what in the table's definitions can explain it, so that the
// operator is told what to fix, not only which row.

// columnDef is how a column stores its values: its type as the server
// prints it (with its length, precision, scale or time precision), its
// collation and, on MySQL, its character set.
type columnDef struct {
	Name, Type, Collation, Charset string
}

// tableColumnDefs returns the columns of schema.table on db, in order.
func tableColumnDefs(ctx context.Context, db *gorm.DB, schema, table string) ([]columnDef, error) {
	// PostgreSQL: no collation, which changes how text sorts, not what
	// is stored (the hash reads text COLLATE "C").
	q := `SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type, '' AS collation, '' AS charset
		FROM pg_attribute a JOIN pg_class c ON a.attrelid = c.oid JOIN pg_namespace n ON c.relnamespace = n.oid
		WHERE n.nspname = ? AND c.relname = ? AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`
	if db.Dialector.Name() == "mysql" {
		q = "SELECT COLUMN_NAME AS name, LOWER(COLUMN_TYPE) AS type, COALESCE(COLLATION_NAME, '') AS collation, COALESCE(CHARACTER_SET_NAME, '') AS charset" +
			" FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION"
	}
	var out []columnDef
	err := db.WithContext(ctx).Raw(q, schema, table).Scan(&out).Error
	return out, err
}

// tableTriggers returns the triggers of schema.table on db that are not
// shardid's own (a move's fence and change log, a split's) and fire for a
// mover's writes: on PostgreSQL, those enabled, and for a superuser (whose
// mover writes in session_replication_role replica) only those enabled
// ALWAYS or REPLICA.
func tableTriggers(ctx context.Context, db *gorm.DB, schema, table string) ([]string, error) {
	q := `SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON t.tgrelid = c.oid JOIN pg_namespace n ON c.relnamespace = n.oid
		WHERE n.nspname = ? AND c.relname = ? AND NOT t.tgisinternal AND t.tgname NOT LIKE 'shardid%'
		AND t.tgenabled::text = ANY (CASE WHEN current_setting('is_superuser') = 'on' THEN ARRAY['A', 'R'] ELSE ARRAY['O', 'A'] END) ORDER BY 1`
	if db.Dialector.Name() == "mysql" {
		q = "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = ? AND EVENT_OBJECT_TABLE = ?" +
			" AND TRIGGER_NAME NOT LIKE 'shardid%' ORDER BY 1"
	}
	var out []string
	err := db.WithContext(ctx).Raw(q, schema, table).Scan(&out).Error
	return out, err
}

// copyDiffers returns what in the definitions of table, in schema on src
// and dst, can make the target store other values than the source holds:
// columns of another type, character set or (on MySQL) collation, or
// missing on one side, and triggers of the target's own. It returns ""
// when it finds nothing, or cannot read the definitions within the
// clean-up's time (the error it explains is the one that matters).
func copyDiffers(ctx context.Context, src, dst *gorm.DB, schema, table string) string {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	have, err := tableColumnDefs(ctx, src, schema, table)
	if err != nil {
		return ""
	}
	got, err := tableColumnDefs(ctx, dst, schema, table)
	if err != nil {
		return ""
	}
	on := map[string]columnDef{}
	for _, c := range got {
		on[c.Name] = c
	}
	var why []string
	for _, s := range have {
		d, ok := on[s.Name]
		if !ok {
			why = append(why, fmt.Sprintf("column %s is missing on the target", s.Name))
			continue
		}
		delete(on, s.Name)
		if storedType(d.Type) != storedType(s.Type) || d.Charset != s.Charset || d.Collation != s.Collation {
			why = append(why, fmt.Sprintf("column %s is %s on the source, %s on the target", s.Name, s.describe(), d.describe()))
		}
	}
	for _, d := range got {
		if _, ok := on[d.Name]; ok {
			why = append(why, fmt.Sprintf("column %s is only on the target", d.Name))
		}
	}
	if trs, err := tableTriggers(ctx, dst, schema, table); err == nil && len(trs) > 0 {
		why = append(why, "the target's table has trigger(s) of its own, which may rewrite the rows the move writes: "+strings.Join(trs, ", "))
	}
	return strings.Join(why, "; ")
}

// intWidth matches a MySQL integer type's display width: int(11).
var intWidth = regexp.MustCompile(`^(tinyint|smallint|mediumint|int|bigint)\(\d+\)`)

// storedType returns a column's type (as tableColumnDefs reads it)
// without what changes nothing stored or compared: a MySQL integer's
// display width, which MySQL 8.0.19 and later no longer print (int, where
// MariaDB and older MySQL print int(11)), unless ZEROFILL pads the value
// to it.
func storedType(t string) string {
	if strings.Contains(t, "zerofill") {
		return t
	}
	return intWidth.ReplaceAllString(t, "$1")
}

// describe prints c's type, with its character set and collation where
// it has them.
func (c columnDef) describe() string {
	s := c.Type
	if c.Charset != "" {
		s += " CHARACTER SET " + c.Charset
	}
	if c.Collation != "" {
		s += " COLLATE " + c.Collation
	}
	return s
}

// withCopyDiffers adds to err (an ErrCopyDiffers about table) what
// copyDiffers finds in the table's definitions.
func (c *shardCopier) withCopyDiffers(ctx context.Context, table string, err error) error {
	if why := copyDiffers(ctx, c.src, c.dst, c.schema, table); why != "" {
		return fmt.Errorf("%w; what can explain it: %s", err, why)
	}
	return err
}
