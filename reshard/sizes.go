package reshard

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/sqlddl"
	"gorm.io/gorm"
)

// SizeOptions configures Sizes. The zero value measures every table of each
// shard with the database's own row estimates.
type SizeOptions struct {
	// Tables, if not empty, are the only tables measured in each shard's
	// schema (as the catalog's setup names them); otherwise every table
	// there. Each must match [a-z_][a-z0-9_]*.
	Tables []string

	// ExactRows counts the rows of every table (count(*)) instead of
	// reading the database's estimate. It reads every table in full, one
	// statement per database for each 500 tables.
	ExactRows bool
}

// ShardSize is the size of one copy of a logical shard on one database.
type ShardSize struct {
	Shard    int
	Database string
	Tables   int   // tables found in the shard's schema
	Bytes    int64 // its tables with their indexes (and TOAST on PostgreSQL)
	Rows     int64 // an estimate unless SizeOptions.ExactRows

	// Empty says that the shard's tables hold no row: counted with
	// SizeOptions.ExactRows; otherwise judged by the database (PostgreSQL:
	// no table has a page of rows, or each was last vacuumed or analyzed
	// empty and no row was counted since; MySQL: the row estimates are 0).
	// A plan moves no empty shard but to drain a database.
	Empty bool
}

// ShardSizes is the size of every copy of every logical shard that Sizes
// found on a router's databases.
type ShardSizes struct {
	// Databases are the router's database names, in its order.
	Databases []string

	// LogicalShards is the router's number of logical shards.
	LogicalShards int

	// Copies holds every copy found, ordered by shard and then by database
	// (the router's order): the live one, and any a move left behind (the
	// old copy of a finished move, the partial copy of a failed one). A
	// shard whose schema does not exist anywhere has none.
	Copies []ShardSize

	// ExactRows says whether Rows were counted or estimated.
	ExactRows bool
}

// Of returns the size of the copy of shard on the database named db, and
// whether there is one.
func (s ShardSizes) Of(shard int, db string) (ShardSize, bool) {
	i := sort.Search(len(s.Copies), func(i int) bool { return s.Copies[i].Shard >= shard })
	for ; i < len(s.Copies) && s.Copies[i].Shard == shard; i++ {
		if s.Copies[i].Database == db {
			return s.Copies[i], true
		}
	}
	return ShardSize{Shard: shard, Database: db}, false
}

// Sizes measures every logical shard of r on every one of its databases,
// bytes and rows, with one catalog query per database (PostgreSQL:
// pg_total_relation_size of each table and the statistics' live row
// counts, else pg_class.reltuples; MySQL/MariaDB: information_schema.TABLES,
// DATA_LENGTH+INDEX_LENGTH and TABLE_ROWS), the databases in parallel. It
// changes nothing. The router needs a SchemaPattern.
//
// Row estimates lag behind recent writes (PostgreSQL's statistics by up to
// some ten seconds, InnoDB's until its next statistics update); bytes count pages,
// so a shard's size falls only after VACUUM (or OPTIMIZE TABLE) gives the
// space back.
func Sizes(ctx context.Context, r *shardid.Router, opts SizeOptions) (ShardSizes, error) {
	res := ShardSizes{Databases: r.Names(), LogicalShards: r.LogicalShards(), ExactRows: opts.ExactRows}
	if r.Schema(0) == "" {
		return res, withDetail(shardid.ErrInvalidConfig, "measuring shards needs a SchemaPattern: a schema per logical shard")
	}
	for _, t := range opts.Tables {
		if !sqlddl.Name.MatchString(t) {
			return res, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("table name %q: want %s", t, sqlddl.Name))
		}
	}
	shardOf := make(map[string]int, r.LogicalShards())
	schemas := make([]string, r.LogicalShards())
	for s := range schemas {
		schemas[s] = r.Schema(s)
		shardOf[schemas[s]] = s
	}
	dbs := r.Databases()
	for i, db := range dbs {
		if n := db.Dialector.Name(); n != "postgres" && n != "mysql" {
			return res, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("database %s is %s: measuring shards needs PostgreSQL or MySQL/MariaDB", res.Databases[i], n))
		}
	}
	found := make([][]ShardSize, len(dbs))
	errs := make([]error, len(dbs))
	var wg sync.WaitGroup
	for i, db := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found[i], errs[i] = measure(ctx, db, schemas, shardOf, opts)
			for j := range found[i] {
				found[i][j].Database = res.Databases[i]
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
				err = fmt.Errorf("%w: %w", ctxErr, err) // a driver may say only that its connection closed
			}
			return res, fmt.Errorf("shardid: measuring the shards on %s: %w", res.Databases[i], err)
		}
	}
	for i := range found {
		res.Copies = append(res.Copies, found[i]...)
	}
	index := make(map[string]int, len(res.Databases))
	for i, n := range res.Databases {
		index[n] = i
	}
	sort.Slice(res.Copies, func(i, j int) bool {
		a, b := res.Copies[i], res.Copies[j]
		return a.Shard < b.Shard || a.Shard == b.Shard && index[a.Database] < index[b.Database]
	})
	return res, nil
}

// tableSize is one table of a shard as a database's catalog describes it.
type tableSize struct {
	SchemaName string
	TableName  string // "" for a schema without tables
	Bytes      int64
	Rows       int64
	IsEmpty    bool
}

// measure reads the size of every shard schema on db in one query, and
// counts rows exactly if asked.
func measure(ctx context.Context, db *gorm.DB, schemas []string, shardOf map[string]int, opts SizeOptions) ([]ShardSize, error) {
	var q string
	args := []any{schemas}
	if len(opts.Tables) > 0 {
		args = []any{opts.Tables, schemas} // the table filter comes first
	}
	if db.Dialector.Name() == "postgres" {
		filter := ""
		if len(opts.Tables) > 0 {
			filter = " AND c.relname IN ?"
		}
		// The statistics' live tuples follow every committed write within
		// about a second; reltuples only after VACUUM or ANALYZE (and is
		// -1 before the first).
		q = `SELECT n.nspname AS schema_name, COALESCE(c.relname, '') AS table_name,
				COALESCE(pg_total_relation_size(c.oid), 0) AS bytes,
				COALESCE(NULLIF(st.n_live_tup, 0), GREATEST(c.reltuples, 0), 0)::bigint AS rows,
				COALESCE(pg_relation_size(c.oid) = 0 OR (COALESCE(st.n_live_tup, 0) = 0 AND c.reltuples = 0), TRUE) AS is_empty
			FROM pg_namespace n
			LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relkind = 'r'` + filter + `
			LEFT JOIN pg_stat_all_tables st ON st.relid = c.oid
			WHERE n.nspname IN ?`
	} else {
		filter := ""
		if len(opts.Tables) > 0 {
			filter = " AND t.TABLE_NAME IN ?"
		}
		q = `SELECT s.SCHEMA_NAME AS schema_name, COALESCE(t.TABLE_NAME, '') AS table_name,
				COALESCE(t.DATA_LENGTH, 0) + COALESCE(t.INDEX_LENGTH, 0) AS bytes,
				COALESCE(t.TABLE_ROWS, 0) AS ` + "`rows`" + `, COALESCE(t.TABLE_ROWS, 0) = 0 AS is_empty
			FROM information_schema.SCHEMATA s
			LEFT JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = s.SCHEMA_NAME AND t.TABLE_TYPE = 'BASE TABLE'` + filter + `
			WHERE s.SCHEMA_NAME IN ?`
	}
	var tables []tableSize
	if err := db.WithContext(ctx).Raw(q, args...).Scan(&tables).Error; err != nil {
		return nil, err
	}
	if opts.ExactRows {
		if err := countRows(ctx, db, tables); err != nil {
			return nil, err
		}
	}
	at := map[string]int{} // schema → index in out
	var out []ShardSize
	for _, t := range tables {
		s, ok := shardOf[t.SchemaName]
		if !ok {
			continue // not a shard's schema (MySQL compares names without case)
		}
		i, ok := at[t.SchemaName]
		if !ok {
			i = len(out)
			at[t.SchemaName] = i
			out = append(out, ShardSize{Shard: s, Empty: true})
		}
		if t.TableName != "" {
			out[i].Tables++
			out[i].Bytes += t.Bytes
			out[i].Rows += t.Rows
			out[i].Empty = out[i].Empty && t.IsEmpty
		}
	}
	return out, nil
}

// countRows replaces the estimated rows of tables by counts, 500 tables a
// statement.
func countRows(ctx context.Context, db *gorm.DB, tables []tableSize) error {
	var idx []int
	for i, t := range tables {
		if t.TableName != "" {
			idx = append(idx, i)
		}
	}
	for len(idx) > 0 {
		n := min(len(idx), 500)
		var q strings.Builder
		for k, i := range idx[:n] {
			if k > 0 {
				q.WriteString(" UNION ALL ")
			}
			t := tables[i]
			// Names come from the database's catalog and matched the
			// router's schema names or SizeOptions.Tables: they are
			// quoted all the same.
			fmt.Fprintf(&q, "SELECT %d AS i, COUNT(*) AS n FROM %s.%s", i,
				db.Statement.Quote(t.SchemaName), db.Statement.Quote(t.TableName))
		}
		var counts []struct {
			I int
			N int64
		}
		if err := db.WithContext(ctx).Raw(q.String()).Scan(&counts).Error; err != nil {
			return err
		}
		for _, c := range counts {
			tables[c.I].Rows = c.N
			tables[c.I].IsEmpty = c.N == 0
		}
		idx = idx[n:]
	}
	return nil
}
