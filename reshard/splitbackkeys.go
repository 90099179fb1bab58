package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
)

// The keys of a shard rolled back that are taken in the monolith: by a row
// of another shard (or, before the roll-back writes, of no shard), checked
// before it starts (checkKeys) and in each transaction that writes
// (checkTaken).

// checkKeys returns ErrKeyCollision if a key of the shard's rows is a row
// of another shard in the monolith's table (or, before the roll-back wrote
// anything, of no shard), or if a row of the monolith of no shard is the
// child of one of the shard's rows: it would join the shard.
func (bc *backCopy) checkKeys(ctx context.Context, first bool) error {
	s := strconv.Itoa(bc.shard)
	for _, t := range bc.sp.tables {
		shard := bc.sp.rowShard(t, "x", 0)
		cond := "COALESCE(" + shard + ", -1) <> " + s
		if !first {
			cond = shard + " <> " + s // rows of no shard: the roll-back's own
		}
		err := bc.eachSourceKeys(ctx, t.Name, func(ids []int64) error {
			in, args := bc.inArgs(ids)
			var taken []struct {
				ID    int64
				Shard *int
			}
			q := "SELECT x.id AS id, " + shard + " AS shard FROM " + bc.sp.q(t.Name) + " AS x WHERE x.id IN (" + in + ") AND " + cond + " ORDER BY x.id"
			if err := bc.sp.mono.WithContext(ctx).Raw(q, args...).Scan(&taken).Error; err != nil {
				return err
			}
			if len(taken) > 0 {
				return bc.collision(t.Name, taken[0].ID, taken[0].Shard)
			}
			if !first {
				return nil
			}
			for _, c := range bc.children(t) {
				var orphans []int64
				q := "SELECT x.id FROM " + bc.sp.q(c.Name) + " AS x WHERE " + bc.sp.col("x", c.Via) + " IN (" + in + ") AND COALESCE(" +
					bc.sp.rowShard(c, "x", 0) + ", -1) <> " + s + " ORDER BY x.id"
				if err := bc.sp.mono.WithContext(ctx).Raw(q, args...).Scan(&orphans).Error; err != nil {
					return err
				}
				if len(orphans) > 0 {
					return withDetail(ErrKeyCollision, fmt.Sprintf("%s id %d in the monolith belongs to no shard (its %s is missing) and names a row of shard %d's %s: it would join the shard",
						c.Name, orphans[0], t.Name, bc.shard, t.Name))
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// collision is ErrKeyCollision for key id of table, held in the monolith
// by a row of shard other (nil: of no shard).
func (bc *backCopy) collision(table string, id int64, other *int) error {
	whose := "a row of no shard (its parent row is missing)"
	if other != nil {
		whose = "a row of shard " + strconv.Itoa(*other)
	}
	return withDetail(ErrKeyCollision, fmt.Sprintf("%s id %d of shard %d is %s in the monolith", table, id, bc.shard, whose))
}

// eachSourceKeys calls f with the keys of table on the source, in
// ascending order, up to backBatch at a time.
func (bc *backCopy) eachSourceKeys(ctx context.Context, table string, f func(ids []int64) error) error {
	var after int64
	first := true
	for {
		q := "SELECT id FROM " + bc.srcTable(table)
		var args []any
		if !first {
			q += " WHERE id > ?"
			args = append(args, after)
		}
		var ids []int64
		if err := bc.src.WithContext(ctx).Raw(q+" ORDER BY id LIMIT "+strconv.Itoa(backBatch), args...).Scan(&ids).Error; err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		if err := f(ids); err != nil {
			return err
		}
		after, first = ids[len(ids)-1], false
	}
}

func shardName(s *int) string {
	if s == nil {
		return "none"
	}
	return strconv.Itoa(*s)
}

// checkTaken returns ErrKeyCollision if a key of ids is a row of table t
// in the monolith that is not the shard's (guard).
func (bc *backCopy) checkTaken(ctx context.Context, tx *sql.Tx, t SplitTable, ids []int64) error {
	in, args := bc.inArgs(ids)
	rows, err := tx.QueryContext(ctx, "SELECT x.id, "+bc.sp.rowShard(t, "x", 0)+" FROM "+bc.sp.q(t.Name)+" AS x WHERE x.id IN ("+in+") AND NOT ("+bc.guard(t, "x")+") ORDER BY x.id", args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if rows.Next() {
		var id int64
		var other sql.NullInt64
		if err := rows.Scan(&id, &other); err != nil {
			return err
		}
		var o *int
		if other.Valid {
			v := int(other.Int64)
			o = &v
		}
		return bc.collision(t.Name, id, o)
	}
	return rows.Err()
}
