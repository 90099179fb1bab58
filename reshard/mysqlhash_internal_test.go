package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid/internal/testdb"
	"gorm.io/gorm"
)

// mysqlRowHash must give every row of a table of plain columns
// (plainTypeMySQL) the hash that MySQL's rowHash gives it, read as a
// move's copy reads it (copyBatches: a read session, a query with an
// argument). Where it does not, a move's copy no longer checks itself and
// compares both sides instead (correct, but slower). Integers of every
// size, signed and not, decimals, text in the character sets a utf8mb4
// connection reads unchanged, enums and sets, bytes; random text with
// every character that QUOTE escapes.
func TestMySQLRowHashMatchesTheServer(t *testing.T) {
	db := testdb.OpenMySQL(t)
	ctx := context.Background()
	const schema = "shardid_myhash"
	freshSchema(t, db, schema)
	for _, q := range []string{
		"CREATE TABLE " + schema + ".items (id BIGINT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT, i INT, " +
			"bu BIGINT UNSIGNED, d DECIMAL(12,3), c CHAR(5), vc VARCHAR(200), t TEXT, lt LONGTEXT, bn BINARY(4), vb VARBINARY(20), bl BLOB, " +
			"e ENUM('a','b c','x''y'), st SET('p','q','r'), a VARCHAR(20) CHARACTER SET ascii, u3 VARCHAR(20) CHARACTER SET utf8mb3)",
		"INSERT INTO " + schema + ".items VALUES " +
			"(1, -128, 255, -32768, -8388608, -2147483648, 18446744073709551615, -123456789.125, 'ab', 'plain', 'x', 'y', 'abcd', 'v', 'b', 'b c', 'p,r', 'ascii', 'ünï')," +
			"(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)," +
			"(-3, 0, 0, 0, 0, 0, 0, 0, '', '', '', '', x'00000000', x'', x'001a275c', 'x''y', '', '', '')," +
			"(9223372036854775807, 127, 1, 32767, 8388607, 2147483647, 1, 0.001, 'NULL', 'NULL', '''NULL''', 'a,b', x'5c27', x'1a', x'ff', 'a', 'q', 'x', '✓')",
	} {
		if err := db.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(8, 31))
	alphabet := []string{"a", "Z", "0", " ", "\t", "\n", "\r", "\\", `"`, "'", "(", ")", ",", "\x00", "\x1a", "\x01", "\x7f",
		"é", "\u00a0", "\u2028", "✓", "😀", "NULL", `\0`, `\Z`}
	for i := range 2000 {
		v := randomText(rng, alphabet)
		b := make([]byte, rng.IntN(20))
		for j := range b {
			b[j] = byte(rng.IntN(256))
		}
		err := db.Exec("INSERT INTO "+schema+".items (id, vc, lt, vb, i, bu, d) VALUES (?, ?, ?, ?, ?, ?, ?)",
			10+i*4093, v, v, b, rng.Int32(), rng.Uint64(), fmt.Sprintf("%d.%03d", rng.IntN(1e9)-5e8, rng.IntN(1000))).Error
		if err != nil {
			t.Fatal(err)
		}
	}
	cols, err := tableColumns(ctx, db, schema, "items")
	if err != nil {
		t.Fatal(err)
	}
	if !cols.plainMySQL {
		t.Fatal("a table of integers, decimals, text and bytes is not plain")
	}
	table := quoteTable(db, schema, "items")
	server := map[int64]uint64{}
	var mover []map[int64]uint64
	err = readConn(ctx, db, func(conn *sql.Conn, settings string) error {
		return txOn(ctx, conn, readCommitted, settings, func(tx *sql.Tx) error {
			rs, err := tx.QueryContext(ctx, "SELECT id, "+rowHash(db, cols.hashed())+" FROM "+table)
			if err != nil {
				return err
			}
			for rs.Next() {
				var id int64
				var h any
				if err := rs.Scan(&id, &h); err != nil {
					return err
				}
				if server[id], err = hashOf(h); err != nil {
					return err
				}
			}
			if err := rs.Close(); err != nil {
				return err
			}
			// As copyBatches reads: with an argument (the driver's
			// binary protocol), and without one (its text protocol).
			for _, q := range []struct {
				sql  string
				args []any
			}{
				{"SELECT " + columnList(db, cols.write) + " FROM " + table + " WHERE id > ? ORDER BY id", []any{int64(-1) << 62}},
				{"SELECT " + columnList(db, cols.write) + " FROM " + table + " ORDER BY id", nil},
			} {
				rs, err := tx.QueryContext(ctx, q.sql, q.args...)
				if err != nil {
					return err
				}
				rows, err := scanAll(rs, len(cols.write))
				if err != nil {
					return err
				}
				got := map[int64]uint64{}
				var buf []byte
				for _, row := range rows {
					id, err := asInt64(row[0])
					if err != nil {
						return err
					}
					h, b, ok := mysqlRowHash(row, buf)
					buf = b
					if !ok {
						return fmt.Errorf("id %d: a value the mover cannot hash: %#v", id, row)
					}
					got[id] = h
				}
				mover = append(mover, got)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(server) != 2004 {
		t.Fatalf("the server hashed %d rows, want 2004", len(server))
	}
	for i, got := range mover {
		bad := 0
		for id, w := range server {
			if got[id] != w {
				if bad++; bad <= 5 {
					t.Errorf("read %d, id %d: the mover's hash %d, the server's %d", i, id, got[id], w)
				}
			}
		}
		if bad > 0 || len(got) != len(server) {
			t.Errorf("read %d: %d of %d rows hashed otherwise, %d rows read", i, bad, len(server), len(got))
		}
	}
}

// A value of a type the mover cannot print as the server would (a float,
// a time) leaves the row unhashed: the copy then cannot check itself
// (copyBatches returns no sums) rather than send a wrong sum.
func TestMySQLRowHashRefusesOtherTypes(t *testing.T) {
	for _, v := range []any{1.5, float32(2), time.Unix(0, 0), true} {
		if _, _, ok := mysqlRowHash([]any{int64(1), v}, nil); ok {
			t.Errorf("a row with a %T: hashed", v)
		}
	}
	if _, _, ok := mysqlRowHash([]any{int64(1), uint64(2), []byte("x"), "y", nil}, nil); !ok {
		t.Error("a row of integers, bytes, a string and a NULL: not hashed")
	}
}

// Columns that do not read as the server prints them (floats, times,
// text in another character set) or generated ones leave a table to the
// source's hash.
func TestPlainMySQLColumns(t *testing.T) {
	db := testdb.OpenMySQL(t)
	ctx := context.Background()
	const schema = "shardid_myplain"
	freshSchema(t, db, schema)
	for _, tc := range []struct {
		col   string
		plain bool
	}{
		{"v VARCHAR(10)", true},
		{"v DECIMAL(5,2)", true},
		{"v DOUBLE", false},
		{"v FLOAT", false},
		{"v DATETIME(3)", false},
		{"v TIMESTAMP NULL", false},
		{"v DATE", false},
		{"v TIME", false},
		{"v VARCHAR(10) CHARACTER SET latin1", false},
		{"v BIT(3)", false},
		{"v INT, w INT AS (v + 1) VIRTUAL", false},
	} {
		db.Exec("DROP TABLE IF EXISTS " + schema + ".t")
		if err := db.Exec("CREATE TABLE " + schema + ".t (id BIGINT PRIMARY KEY, " + tc.col + ")").Error; err != nil {
			t.Fatal(err)
		}
		cols, err := tableColumns(ctx, db, schema, "t")
		if err != nil {
			t.Fatal(err)
		}
		if cols.plainMySQL != tc.plain {
			t.Errorf("%s: plain %v, want %v", tc.col, cols.plainMySQL, tc.plain)
		}
	}
}

// freshSchema creates schema on db (a database on MySQL, in utf8mb4),
// dropping what a run before left of it, and drops it at the end of t.
func freshSchema(t *testing.T, db *gorm.DB, schema string) {
	t.Helper()
	drop, create := `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`, `CREATE SCHEMA "`+schema+`"`
	if db.Dialector.Name() == "mysql" {
		drop, create = "DROP DATABASE IF EXISTS `"+schema+"`", "CREATE DATABASE `"+schema+"` CHARACTER SET utf8mb4"
	}
	db.Exec(drop)
	t.Cleanup(func() { db.Exec(drop) })
	if err := db.Exec(create).Error; err != nil {
		t.Fatal(err)
	}
}

// randomText returns up to 39 pieces of alphabet picked by rng, or, one
// time in 20, nil (a NULL).
func randomText(rng *rand.Rand, alphabet []string) any {
	var s strings.Builder
	for range rng.IntN(40) {
		s.WriteString(alphabet[rng.IntN(len(alphabet))])
	}
	if rng.IntN(20) == 0 {
		return nil
	}
	return s.String()
}
