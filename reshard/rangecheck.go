package reshard

import (
	"context"
	"database/sql/driver"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gorm.io/gorm"
)

// Verification by key ranges. Before the fence, both copies of a table are
// summed by ranges of about rangeRows keys (the row count and the sum of a
// 64-bit hash of each row computed by the database); a range is clean when
// its sums were equal on both sides and no change was applied to it since
// they were taken. Under the fence only the ranges that are not clean (the
// change log touched them, or they differed) are summed again, on both
// sides. That is sound because every write to the source after a range was
// summed is in the change log, and every write to the target is the mover
// applying a logged change: a clean range is still equal.

// rangeRows is about how many rows a key range holds.
const rangeRows = 256

// rangeSum is the row count and hash sum of a key range on one side.
type rangeSum struct {
	rows int64
	sum  uint64
}

// tableRanges are a table's key ranges: range i holds the keys k with
// bounds[i-1] <= k < bounds[i] (no lower limit for the first, no upper
// limit for the last).
type tableRanges struct {
	bounds []int64
	src    []rangeSum   // the source's sums, by range, as last taken
	bad    map[int]bool // ranges whose sums differed when last taken
}

// total is the source's row count and checksum over all ranges.
func (tr *tableRanges) total() TableCheck {
	var t TableCheck
	for _, s := range tr.src {
		t.Rows += s.rows
		t.Checksum += s.sum
	}
	return t
}

func (tr *tableRanges) rangeOf(id int64) int {
	return sort.Search(len(tr.bounds), func(i int) bool { return tr.bounds[i] > id })
}

// rowHash is the SQL expression of a row's 64-bit hash, over cols.
func rowHash(db *gorm.DB, cols []string) string {
	if db.Dialector.Name() == "mysql" {
		q := make([]string, len(cols))
		for i, c := range cols {
			q[i] = "QUOTE(" + quoteIdent(db, c) + ")"
		}
		return "CAST(CONV(LEFT(MD5(CONCAT_WS(',', " + strings.Join(q, ", ") + ")), 16), 16, 10) AS UNSIGNED)"
	}
	return "hashtextextended(ROW(" + columnList(db, cols) + ")::text, 0)"
}

// scanHashes streams the key and row hash of the rows of table on db that
// match one of where (with args; all rows if none), in key order if
// ordered, to visit. It reads on
// a session set to UTC, so values that depend on the time zone hash alike
// on both sides.
func scanHashes(ctx context.Context, db *gorm.DB, table string, cols []string, where []string, args []any, ordered bool, visit func(id int64, h uint64)) error {
	pool, err := sqlDB(db)
	if err != nil {
		return err
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	mysql := db.Dialector.Name() == "mysql"
	var restore string
	if mysql {
		var tz string
		if err := conn.QueryRowContext(ctx, "SELECT @@session.time_zone").Scan(&tz); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, "SET time_zone = '+00:00'"); err != nil {
			return err
		}
		restore = "SET time_zone = '" + strings.ReplaceAll(tz, "'", "''") + "'"
	} else {
		if _, err := conn.ExecContext(ctx, "BEGIN; SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO, MDY'; SET LOCAL extra_float_digits = 3"); err != nil {
			return err
		}
		restore = "COMMIT"
	}
	defer func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), restore); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // drop the session
		}
	}()
	// One select per condition, in a UNION ALL: each is an index range
	// scan however many there are (an OR of ranges can make the planner
	// scan the whole table). None: the whole table.
	sel := "SELECT id, " + rowHash(db, cols) + " FROM " + table
	q := sel
	if len(where) > 0 {
		parts := make([]string, len(where))
		for i, w := range where {
			parts[i] = sel + " WHERE " + w
		}
		q = strings.Join(parts, " UNION ALL ")
	}
	if ordered {
		q += " ORDER BY id"
	}
	rows, err := conn.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var h uint64
		if mysql {
			err = rows.Scan(&id, &h)
		} else {
			var s int64
			err = rows.Scan(&id, &s)
			h = uint64(s)
		}
		if err != nil {
			return err
		}
		visit(id, h)
	}
	return rows.Err()
}

// sumTable sums table by key ranges on src, whose keys in order set the
// bounds, and then on dst, and returns the ranges with the differing ones
// marked bad.
func sumTable(ctx context.Context, src, dst *gorm.DB, table string, cols []string) (*tableRanges, error) {
	tr := &tableRanges{bad: map[int]bool{}}
	var s []rangeSum
	var n int64
	err := scanHashes(ctx, src, table, cols, nil, nil, true, func(id int64, h uint64) {
		if n > 0 && n%rangeRows == 0 {
			tr.bounds = append(tr.bounds, id)
		}
		n++
		if len(s) <= len(tr.bounds) {
			s = append(s, rangeSum{})
		}
		s[len(tr.bounds)].rows++
		s[len(tr.bounds)].sum += h
	})
	if err != nil {
		return nil, fmt.Errorf("shardid: summing %s on the source: %w", table, err)
	}
	s = append(s, make([]rangeSum, len(tr.bounds)+1-len(s))...)
	d := make([]rangeSum, len(tr.bounds)+1)
	err = scanHashes(ctx, dst, table, cols, nil, nil, false, func(id int64, h uint64) {
		i := tr.rangeOf(id)
		d[i].rows++
		d[i].sum += h
	})
	if err != nil {
		return nil, fmt.Errorf("shardid: summing %s on the target: %w", table, err)
	}
	for i := range s {
		if s[i] != d[i] {
			tr.bad[i] = true
		}
	}
	tr.src = s
	return tr, nil
}

// rangeWhere returns the conditions selecting ranges of tr (sorted), one
// per run of adjacent ranges, with their arguments in db's placeholders.
func (tr *tableRanges) rangeWhere(db *gorm.DB, ranges []int) ([]string, []any) {
	var conds []string
	var args []any
	for k := 0; k < len(ranges); {
		lo, hi := ranges[k], ranges[k]
		for k++; k < len(ranges) && ranges[k] == hi+1; k++ {
			hi = ranges[k]
		}
		var c []string
		if lo > 0 {
			c = append(c, "id >= "+placeholders(db, len(args), 1))
			args = append(args, tr.bounds[lo-1])
		}
		if hi < len(tr.bounds) {
			c = append(c, "id < "+placeholders(db, len(args), 1))
			args = append(args, tr.bounds[hi])
		}
		if len(c) == 0 {
			return nil, nil // the one range of a table that was empty: all of it
		}
		conds = append(conds, strings.Join(c, " AND "))
	}
	return conds, args
}

// recheck sums ranges of table again on both sides (at once) and marks
// those that differ bad and the others good.
func (tr *tableRanges) recheck(ctx context.Context, src, dst *gorm.DB, table string, cols []string, ranges []int) error {
	sort.Ints(ranges)
	for len(ranges) > 0 {
		chunk := ranges[:min(len(ranges), 100)]
		ranges = ranges[len(chunk):]
		sums := [2]map[int]*rangeSum{{}, {}}
		errs := make(chan error, 2)
		for side, db := range []*gorm.DB{src, dst} {
			go func() {
				where, args := tr.rangeWhere(db, chunk)
				errs <- scanHashes(ctx, db, table, cols, where, args, false, func(id int64, h uint64) {
					i := tr.rangeOf(id)
					if sums[side][i] == nil {
						sums[side][i] = &rangeSum{}
					}
					sums[side][i].rows++
					sums[side][i].sum += h
				})
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				return fmt.Errorf("shardid: summing key ranges of %s: %w", table, err)
			}
		}
		for _, i := range chunk {
			var a, b rangeSum
			if p := sums[0][i]; p != nil {
				a = *p
			}
			if p := sums[1][i]; p != nil {
				b = *p
			}
			tr.src[i] = a
			if a != b {
				tr.bad[i] = true
			} else {
				delete(tr.bad, i)
			}
		}
	}
	return nil
}

// describe names range i for an error message.
func (tr *tableRanges) describe(i int) string {
	lo, hi := "-inf", "+inf"
	if i > 0 {
		lo = strconv.FormatInt(tr.bounds[i-1], 10)
	}
	if i < len(tr.bounds) {
		hi = strconv.FormatInt(tr.bounds[i], 10)
	}
	return "[" + lo + ", " + hi + ")"
}
