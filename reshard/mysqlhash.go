package reshard

import (
	"crypto/md5"
	"encoding/binary"
	"strconv"
)

// The mover's side of MySQL's row hash. A move's copy on MySQL reads its
// rows in batches and must add up, for the target's check (verifySent),
// the hash that rowHash gives each row: the first 8 bytes of the MD5 of
// its columns, each QUOTE'd, joined by commas. Computed by the source in
// its query, that costs the server twice the read itself (1,000,000 rows
// of three columns: 2.4 s against 0.8 s on MariaDB, docs/resharding.md).
// mysqlRowHash computes the same from the values the driver read, for a
// table whose columns all read as the server prints them (plainTypeMySQL):
// integers, and text or bytes as stored. As with PostgreSQL's
// (copyRowHasher), a hash that differed from the server's could only make
// the copy compare both sides, never let a wrong copy through.

// plainTypeMySQL reports whether a column of MySQL data type t, in the
// character set cs (nil if it has none), reads through the driver as
// the value QUOTE gives it on the server: an integer (int64 or uint64,
// printed in decimal), or a decimal, text or bytes ([]byte), in a
// character set that a utf8mb4 connection reads unchanged.
func plainTypeMySQL(t string, cs *string) bool {
	switch t {
	case "tinyint", "smallint", "mediumint", "int", "bigint":
		return true
	case "decimal", "char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set",
		"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		if cs == nil {
			return true
		}
		switch *cs {
		case "utf8mb4", "utf8mb3", "utf8", "ascii", "binary":
			return true
		}
	}
	return false
}

// mysqlRowHash returns rowHash of a row of MySQL whose values vals were
// read from columns that plainTypeMySQL accepts, and false for a value of
// another type: a row the mover cannot hash as the server would. buf is
// scratch space, returned for the next row.
func mysqlRowHash(vals []any, buf []byte) (uint64, []byte, bool) {
	buf = buf[:0]
	for i, v := range vals {
		if i > 0 {
			buf = append(buf, ',')
		}
		switch x := v.(type) {
		case nil:
			buf = append(buf, "NULL"...)
		case int64:
			buf = append(strconv.AppendInt(append(buf, '\''), x, 10), '\'')
		case uint64:
			buf = append(strconv.AppendUint(append(buf, '\''), x, 10), '\'')
		case []byte:
			buf = appendQuotedMySQL(buf, x)
		case string:
			buf = appendQuotedMySQL(buf, []byte(x))
		default:
			return 0, buf, false
		}
	}
	sum := md5.Sum(buf)
	return binary.BigEndian.Uint64(sum[:8]), buf, true
}

// appendQuotedMySQL appends v as MySQL's QUOTE writes it: in single
// quotes, with a backslash before each single quote and backslash, NUL as
// \0 and Control-Z as \Z.
func appendQuotedMySQL(dst, v []byte) []byte {
	dst = append(dst, '\'')
	for _, c := range v {
		switch c {
		case '\'', '\\':
			dst = append(dst, '\\', c)
		case 0:
			dst = append(dst, '\\', '0')
		case 0x1a:
			dst = append(dst, '\\', 'Z')
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '\'')
}
