package shardid

import (
	"cmp"
	"context"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// AggFunc is an aggregate function of Aggregate.
type AggFunc int

// The aggregate functions of Aggregate. Each is computed on every shard and
// merged exactly: counts and sums are added, minima and maxima compared,
// averages divided from the summed sums and counts.
const (
	AggCount AggFunc = iota + 1 // count(Expr); Expr "*" counts rows
	AggSum                      // sum(Expr)
	AggMin                      // min(Expr)
	AggMax                      // max(Expr)
	AggAvg                      // avg(Expr), as sum(Expr) / count(Expr)
)

// AggregateColumn is one aggregate of Aggregate: Func of the SQL expression
// Expr ("likes", "*" for AggCount), sent as written.
type AggregateColumn struct {
	Func AggFunc
	Expr string
}

// AggregateOptions configures Aggregate.
type AggregateOptions struct {
	// GroupBy are the SQL expressions to group by, sent as written. If
	// empty, Aggregate returns one row over all the shards.
	GroupBy []string

	// Columns are the aggregates. At least one is required.
	Columns []AggregateColumn

	// Workers is how many statements run at once. If 0, it is 8.
	Workers int

	// PerShard runs the query once per logical shard, as
	// GatherOptions.PerShard does, except that a database's shared tables
	// (the shards it holds without a schema of their own) are read once:
	// the query cannot tell their shards' rows apart.
	PerShard bool
}

// AggregateRow is one group of Aggregate.
type AggregateRow struct {
	// Group holds the values of the GroupBy expressions, as the driver
	// gives them ([]byte as string).
	Group []any

	// Values holds one value per AggregateColumn: an int64 for AggCount; a
	// *big.Rat, exact, for AggSum and AggAvg (nil when no row had a value);
	// for AggMin and AggMax, the value as the driver gives it ([]byte as
	// string; numeric and decimal columns are compared as numbers), or nil.
	Values []any
}

// Aggregate computes aggregates over every logical shard of r: on each
// shard, the rows query selects (it sets the model or table and the
// filter; Aggregate sets the SELECT list and GROUP BY), merged exactly
// across shards. Groups come in no particular order. An expression that
// begins with DISTINCT is refused (ErrInvalidConfig): distinct values per
// shard do not add up to distinct values across them. Groups and MIN and
// MAX of text are merged by Go's comparison of the values, byte by byte,
// not by the column's collation.
//
// It runs as Gather does: one statement per database on PostgreSQL and
// MySQL with a SchemaPattern, each shard an arm of a UNION ALL. Groups of
// the shards that answered are returned even when others failed, with an
// error as Gather's.
func Aggregate(ctx context.Context, r *Router, opts AggregateOptions,
	query func(ctx context.Context, db *gorm.DB) *gorm.DB) ([]AggregateRow, error) {
	defer r.gathered(time.Now())
	if len(opts.Columns) == 0 {
		return nil, withDetail(ErrInvalidConfig, "AggregateOptions has no Columns")
	}
	var sel []string
	sel = append(sel, opts.GroupBy...)
	for i, c := range opts.Columns {
		if strings.TrimSpace(c.Expr) == "" || c.Expr == "*" && c.Func != AggCount {
			return nil, withDetail(ErrInvalidConfig, fmt.Sprintf("AggregateOptions.Columns[%d]: expression %q", i, c.Expr))
		}
		if f := strings.Fields(strings.ToUpper(c.Expr)); len(f) > 0 && (f[0] == "DISTINCT" || strings.HasPrefix(f[0], "DISTINCT(")) {
			// Each shard's distinct values, added or averaged, are not the
			// distinct values of all of them.
			return nil, withDetail(ErrInvalidConfig, fmt.Sprintf("AggregateOptions.Columns[%d]: %q: DISTINCT cannot be merged across shards: Gather the values and count them", i, c.Expr))
		}
		switch c.Func {
		case AggCount:
			sel = append(sel, "count("+c.Expr+")")
		case AggSum:
			sel = append(sel, "sum("+c.Expr+")")
		case AggMin:
			sel = append(sel, "min("+c.Expr+")")
		case AggMax:
			sel = append(sel, "max("+c.Expr+")")
		case AggAvg:
			sel = append(sel, "sum("+c.Expr+")", "count("+c.Expr+")")
		default:
			return nil, withDetail(ErrInvalidConfig, fmt.Sprintf("AggregateOptions.Columns[%d]: unknown AggFunc %d", i, c.Func))
		}
	}
	for i := range sel {
		sel[i] += " AS shardid_agg" + strconv.Itoa(i)
	}
	type partial struct {
		vals    []any
		numeric []bool // per column: a decimal type, compared as a number
	}
	parts, err := fanout(ctx, r, fanOptions{perShard: opts.PerShard, sharedOnce: true, workers: opts.Workers},
		func(ctx context.Context, db *gorm.DB) ([]partial, error) {
			tx := query(ctx, db).Select(strings.Join(sel, ", "))
			for _, g := range opts.GroupBy {
				tx = tx.Group(g)
			}
			rows, err := tx.Rows()
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			types, err := rows.ColumnTypes()
			if err != nil {
				return nil, err
			}
			numeric := make([]bool, len(types))
			for i, t := range types {
				n := strings.ToUpper(t.DatabaseTypeName())
				numeric[i] = n == "NUMERIC" || n == "DECIMAL"
			}
			var out []partial
			for rows.Next() {
				vals := make([]any, len(sel))
				ptrs := make([]any, len(sel))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				if err := rows.Scan(ptrs...); err != nil {
					return nil, err
				}
				out = append(out, partial{vals: vals, numeric: numeric})
			}
			return out, rows.Err()
		})
	var (
		groups []*AggregateRow
		byKey  = map[string]*AggregateRow{}
		counts = map[*AggregateRow][]int64{} // per AggAvg column, its count
	)
	ng := len(opts.GroupBy)
	for _, p := range parts {
		var key strings.Builder
		group := make([]any, ng)
		for i := range ng {
			group[i] = plainValue(p.vals[i])
			fmt.Fprintf(&key, "%T\x00%v\x00", group[i], group[i])
		}
		g := byKey[key.String()]
		if g == nil {
			g = &AggregateRow{Group: group, Values: make([]any, len(opts.Columns))}
			for i, c := range opts.Columns {
				if c.Func == AggCount {
					g.Values[i] = int64(0)
				}
			}
			byKey[key.String()] = g
			groups = append(groups, g)
			counts[g] = make([]int64, len(opts.Columns))
		}
		at := ng
		for i, c := range opts.Columns {
			v := p.vals[at]
			switch c.Func {
			case AggCount:
				n, perr := toRat(v)
				if perr != nil || !n.IsInt() {
					return nil, withDetail(ErrInvalidConfig, fmt.Sprintf("count(%s) gave %v", c.Expr, v))
				}
				g.Values[i] = g.Values[i].(int64) + n.Num().Int64()
			case AggSum, AggAvg:
				if v != nil {
					n, perr := toRat(v)
					if perr != nil {
						return nil, withDetail(ErrInvalidConfig, fmt.Sprintf("sum(%s) gave %v: %v", c.Expr, v, perr))
					}
					if g.Values[i] == nil {
						g.Values[i] = new(big.Rat)
					}
					g.Values[i].(*big.Rat).Add(g.Values[i].(*big.Rat), n)
				}
				if c.Func == AggAvg {
					at++
					n, perr := toRat(p.vals[at])
					if perr != nil || !n.IsInt() {
						return nil, withDetail(ErrInvalidConfig, fmt.Sprintf("count(%s) gave %v", c.Expr, p.vals[at]))
					}
					counts[g][i] += n.Num().Int64()
				}
			case AggMin, AggMax:
				if v == nil {
					break
				}
				v = plainValue(v)
				if g.Values[i] == nil {
					g.Values[i] = v
					break
				}
				c := compareValues(v, g.Values[i], p.numeric[at])
				if c < 0 && opts.Columns[i].Func == AggMin || c > 0 && opts.Columns[i].Func == AggMax {
					g.Values[i] = v
				}
			}
			at++
		}
	}
	out := make([]AggregateRow, len(groups))
	for k, g := range groups {
		for i, c := range opts.Columns {
			if c.Func == AggAvg && g.Values[i] != nil {
				if counts[g][i] == 0 {
					g.Values[i] = nil
				} else {
					s := g.Values[i].(*big.Rat)
					s.Quo(s, new(big.Rat).SetInt64(counts[g][i]))
				}
			}
		}
		out[k] = *g
	}
	return out, err
}

// GatherCount returns the number of rows query selects over every logical
// shard of r: query sets the model or table and the filter. It runs as
// Aggregate does, and returns the count of the shards that answered with
// an error as Gather's when others failed.
func GatherCount(ctx context.Context, r *Router, query func(ctx context.Context, db *gorm.DB) *gorm.DB) (int64, error) {
	rows, err := Aggregate(ctx, r, AggregateOptions{Columns: []AggregateColumn{{Func: AggCount, Expr: "*"}}}, query)
	var n int64
	for _, row := range rows {
		n += row.Values[0].(int64)
	}
	return n, err
}

// plainValue returns v with []byte as string.
func plainValue(v any) any {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return v
}

// toRat returns the number v holds, exactly.
func toRat(v any) (*big.Rat, error) {
	switch v := v.(type) {
	case int64:
		return new(big.Rat).SetInt64(v), nil
	case int32:
		return new(big.Rat).SetInt64(int64(v)), nil
	case int:
		return new(big.Rat).SetInt64(int64(v)), nil
	case uint64:
		return new(big.Rat).SetUint64(v), nil
	case float64:
		if r := new(big.Rat); r.SetFloat64(v) != nil {
			return r, nil
		}
		return nil, fmt.Errorf("%v is not a finite number", v)
	case float32:
		return toRat(float64(v))
	case []byte:
		return toRat(string(v))
	case string:
		if r, ok := new(big.Rat).SetString(v); ok {
			return r, nil
		}
		return nil, fmt.Errorf("%q is not a number", v)
	}
	return nil, fmt.Errorf("%T is not a number", v)
}

// compareValues compares two values of one column, as numbers when
// numeric is set or both are numbers.
func compareValues(a, b any, numeric bool) int {
	switch a := a.(type) {
	case time.Time:
		if b, ok := b.(time.Time); ok {
			return a.Compare(b)
		}
	case string:
		if b, ok := b.(string); ok && !numeric {
			return cmp.Compare(a, b)
		}
	case bool:
		if b, ok := b.(bool); ok {
			switch {
			case a == b:
				return 0
			case !a:
				return -1
			}
			return 1
		}
	}
	x, err1 := toRat(a)
	y, err2 := toRat(b)
	if err1 == nil && err2 == nil {
		return x.Cmp(y)
	}
	return cmp.Compare(fmt.Sprint(a), fmt.Sprint(b))
}
