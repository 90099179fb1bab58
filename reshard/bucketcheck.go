package reshard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gorm.io/gorm"
)

// compareBuckets is how many buckets of keys (id modulo compareBuckets) a
// comparison of two copies of a table sums each side by.
const compareBuckets = 4096

// bucketSums returns the row count and the sum of the row hashes (rowHash
// over cols) of each bucket of keys of table on db, summed by db: only the
// sums cross the network.
func bucketSums(ctx context.Context, db *gorm.DB, table string, cols hashCols) (map[int64]sentRows, error) {
	sum := "coalesce(sum(" + rowHash(db, cols) + "), 0)::text"
	if db.Dialector.Name() == "mysql" {
		sum = "CAST(COALESCE(SUM(" + rowHash(db, cols) + "), 0) AS CHAR)"
	}
	q := "SELECT MOD(id, " + strconv.Itoa(compareBuckets) + "), count(*), " + sum + " FROM " + table + " GROUP BY 1"
	out := map[int64]sentRows{}
	err := readSession(ctx, db, func(qr querier) error {
		rows, err := qr.QueryContext(ctx, q)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var b, n int64
			var total string
			if err := rows.Scan(&b, &n, &total); err != nil {
				return err
			}
			sum, err := sumOf(total)
			if err != nil {
				return err
			}
			out[b] = sentRows{rows: n, sum: sum}
		}
		return rows.Err()
	})
	return out, err
}

// tableSumOn returns the row count and the sum of the row hashes (rowHash
// over cols) of table on db, summed by db and read through q (a read set
// up as readSession's are): a copy's check against what it sent
// (verifySent). Without bucketSums' grouping it costs the server less,
// and PostgreSQL can spread the scan over parallel workers.
func tableSumOn(ctx context.Context, q querier, db *gorm.DB, table string, cols hashCols) (sentRows, error) {
	sql := "SELECT count(*), coalesce(sum(" + rowHash(db, cols) + "), 0)::text FROM " + table
	if db.Dialector.Name() == "mysql" {
		sql = "SELECT count(*), CAST(COALESCE(SUM(" + rowHash(db, cols) + "), 0) AS CHAR) FROM " + table
	}
	var out sentRows
	var total string
	if err := q.QueryRowContext(ctx, sql).Scan(&out.rows, &total); err != nil {
		return sentRows{}, err
	}
	var err error
	out.sum, err = sumOf(total)
	return out, err
}

// bucketHashes returns the hash of every row of table on db whose key is
// in one of buckets.
func bucketHashes(ctx context.Context, db *gorm.DB, table string, cols hashCols, buckets []int64) (map[int64]uint64, error) {
	out := map[int64]uint64{}
	err := readSession(ctx, db, func(qr querier) error {
		for lo := 0; lo < len(buckets); lo += 1000 {
			chunk := buckets[lo:min(lo+1000, len(buckets))]
			in := make([]string, len(chunk))
			for i, b := range chunk {
				in[i] = strconv.FormatInt(b, 10)
			}
			rows, err := qr.QueryContext(ctx, "SELECT id, "+rowHash(db, cols)+" FROM "+table+
				" WHERE MOD(id, "+strconv.Itoa(compareBuckets)+") IN ("+strings.Join(in, ",")+")")
			if err != nil {
				return err
			}
			for rows.Next() {
				var id int64
				var h any
				if err := rows.Scan(&id, &h); err != nil {
					rows.Close()
					return err
				}
				if out[id], err = hashOf(h); err != nil {
					rows.Close()
					return err
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// compareByBuckets compares table on src and dst, as compareTable does,
// reading far less: both sides' sums per bucket of keys (bucketSums) at
// once, then, on both sides, the keys of the buckets whose sums differ.
// What it returns is compareTable's: the target's row count and hash sum,
// and the keys that differ (on one side only, or with other hashes). When
// most buckets differ it compares every row (compareTable), which reads no
// more.
func compareByBuckets(ctx context.Context, src, dst *gorm.DB, table string, cols hashCols) (*rowCheck, error) {
	var sums [2]map[int64]sentRows
	errs := make(chan error, 2)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // an error on one side stops the other
	for side, db := range []*gorm.DB{src, dst} {
		go func() {
			var err error
			if sums[side], err = bucketSums(ctx, db, table, cols); err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	var first error
	for range 2 {
		if err := <-errs; err != nil && (first == nil || errors.Is(first, context.Canceled)) {
			first = err
		}
	}
	if first != nil {
		return nil, fmt.Errorf("shardid: comparing %s: %w", table, first)
	}
	rc := &rowCheck{table: table, suspect: map[int64]string{}}
	for _, v := range sums[1] {
		rc.rows += v.rows
		rc.sum += v.sum
	}
	var differ []int64
	for b, v := range sums[0] {
		if sums[1][b] != v {
			differ = append(differ, b)
		}
	}
	for b := range sums[1] {
		if _, ok := sums[0][b]; !ok {
			differ = append(differ, b)
		}
	}
	if len(differ) == 0 {
		return rc, nil
	}
	if len(differ) > compareBuckets/4 {
		return compareTable(ctx, src, dst, table, cols)
	}
	var hs [2]map[int64]uint64
	for side, db := range []*gorm.DB{src, dst} {
		go func() {
			var err error
			if hs[side], err = bucketHashes(ctx, db, table, cols, differ); err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil && (first == nil || errors.Is(first, context.Canceled)) {
			first = err
		}
	}
	if first != nil {
		return nil, fmt.Errorf("shardid: comparing %s: %w", table, first)
	}
	for id, a := range hs[0] {
		switch b, ok := hs[1][id]; {
		case !ok:
			rc.suspect[id] = "missing on the target"
		case a != b:
			rc.suspect[id] = "different on the target"
		}
	}
	for id := range hs[1] {
		if _, ok := hs[0][id]; !ok {
			rc.suspect[id] = "only on the target"
		}
	}
	return rc, nil
}
