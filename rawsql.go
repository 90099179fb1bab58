package shardid

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// SchemaPlaceholder names the logical shard's schema (on PostgreSQL) or
// database (on MySQL) in raw SQL run through a *gorm.DB from ForShard, ForID,
// ForKey or Gather: Raw, Exec, and Row, Rows, Scan or Find after Raw.
//
//	router.ForShard(5).Raw("SELECT * FROM {{schema}}.photos WHERE id = ?", id).Scan(&p)
//
// runs SELECT * FROM "shard_0005".photos WHERE id = $1 when the router's
// SchemaPattern is "shard_%04d": the placeholder becomes the shard's name,
// quoted for the dialect, wherever it stands in the SQL text (in a string
// literal too: pass such text as an argument, which is never rewritten). On a
// router without SchemaPattern each shard's tables are the database's own, and
// "{{schema}}." is removed: the same SQL then reads photos.
//
// On a router with a SchemaPattern, routed raw SQL that neither has the
// placeholder nor names the shard's schema itself ("shard_0005.photos", or as
// Router.Table quotes it) is refused with ErrUnroutedSQL, since its tables
// would resolve through the search_path (PostgreSQL) or the connection's
// database (MySQL), not in the shard. The check is textual: it makes sure the
// statement addresses the shard, not that every table name in it does; name
// each table with the placeholder. SQL that names no table of the shard, such
// as SELECT now(), runs through AllowUnroutedSQL.
const SchemaPlaceholder = "{{schema}}"

// settingUnrouted is the statement setting AllowUnroutedSQL sets.
const settingUnrouted = PluginName + ":unrouted_sql"

// AllowUnroutedSQL returns db with the check of routed raw SQL turned off:
// raw SQL without SchemaPlaceholder runs as written, on the shard's database,
// with unqualified names resolved by the search_path (PostgreSQL) or the
// connection's database (MySQL), not in the shard's schema. It is meant for
// SQL that names no table of the shard:
//
//	shardid.AllowUnroutedSQL(router.ForShard(5)).Raw("SELECT now()").Scan(&now)
//
// It has the signature of a GORM scope, so db.Scopes(shardid.AllowUnroutedSQL)
// works too. SchemaPlaceholder is still replaced. The setting stays on the
// returned *gorm.DB and what is chained from it.
func AllowUnroutedSQL(db *gorm.DB) *gorm.DB { return db.Set(settingUnrouted, true) }

// Table returns the name of table in logical shard shard, quoted for the
// dialect of the database that holds the shard: "shard_0005"."photos" on
// PostgreSQL, `shard_0005`.`photos` on MySQL, or the table alone, quoted, when
// the router has no SchemaPattern. It is "" for a shard out of range. Raw SQL
// that names its tables with it passes the check SchemaPlaceholder describes.
func (r *Router) Table(shard int, table string) string {
	if shard < 0 || shard >= r.shards {
		return ""
	}
	v := r.smap.Load()
	name := table
	if schema := v.Schema(shard); schema != "" {
		name = schema + "." + table
	}
	var b strings.Builder
	r.dbs[v.DB(shard)].Dialector.QuoteTo(&b, name)
	return b.String()
}

// routeSQL puts the raw SQL of a routed statement in its shard: it replaces
// SchemaPlaceholder, and refuses SQL that would not reach the shard's tables.
func routeSQL(db *gorm.DB, rt route) {
	text := db.Statement.SQL.String()
	schema := rt.schema
	if strings.Contains(text, SchemaPlaceholder) {
		if schema == "" {
			text = strings.ReplaceAll(text, SchemaPlaceholder+".", "")
			if strings.Contains(text, SchemaPlaceholder) {
				refuseSQL(db, rt, "the router has no SchemaPattern, so "+SchemaPlaceholder+
					" names no schema: write "+SchemaPlaceholder+".table, which becomes table")
				return
			}
		} else {
			text = strings.ReplaceAll(text, SchemaPlaceholder, db.Statement.Quote(schema))
		}
		db.Statement.SQL.Reset()
		db.Statement.SQL.WriteString(text)
		return
	}
	if schema == "" || namesSchema(text, schema) {
		return
	}
	if unroutedAllowed(db.Statement) {
		return
	}
	refuseSQL(db, rt, "name the shard's tables "+SchemaPlaceholder+".table (or with Router.Table), "+
		"or run SQL that names no table of the shard through shardid.AllowUnroutedSQL")
}

// qualifyFrom is the clause builder of FROM on a router's databases: in a
// routed statement of a router with a SchemaPattern, it puts the tables of
// joins in the shard's schema (GORM builds an association's join, as
// Joins("User"), from the unqualified table name, which would resolve
// through the search_path to a same-named table outside the shard), and
// checks joins given as SQL as routeSQL checks raw SQL. Then it builds the
// clause with next, the builder it replaced, or as GORM does.
func qualifyFrom(next clause.ClauseBuilder) clause.ClauseBuilder {
	return func(c clause.Clause, b clause.Builder) {
		if stmt, ok := b.(*gorm.Statement); ok {
			if v, ok := stmt.Settings.Load(settingRoute); ok {
				if from, ok := c.Expression.(clause.From); ok && len(from.Joins) > 0 {
					c.Expression = qualifyJoins(stmt, v.(route), from)
				}
			}
		}
		if next != nil {
			next(c, b)
			return
		}
		c.Build(b)
	}
}

// qualifyJoins returns from with its joins in the shard's schema.
func qualifyJoins(stmt *gorm.Statement, rt route, from clause.From) clause.From {
	if rt.schema == "" {
		return from
	}
	schema := rt.schema
	joins := make([]clause.Join, len(from.Joins))
	for i, j := range from.Joins {
		switch e := j.Expression.(type) {
		case nil:
			if j.Table.Name != "" && j.Table.Name != clause.CurrentTable && !strings.Contains(j.Table.Name, ".") {
				j.Table.Name = schema + "." + j.Table.Name
			}
		case clause.NamedExpr:
			switch {
			case strings.Contains(e.SQL, SchemaPlaceholder):
				e.SQL = strings.ReplaceAll(e.SQL, SchemaPlaceholder, stmt.Quote(schema))
				j.Expression = e
			case !namesSchema(e.SQL, schema) && !unroutedAllowed(stmt):
				_ = stmt.AddError(withDetail(ErrUnroutedSQL, fmt.Sprintf("shard %d (schema %s): join %q: name the shard's tables %s.table (or with Router.Table)",
					rt.shard, schema, sqlStart(e.SQL), SchemaPlaceholder)))
			}
		}
		joins[i] = j
	}
	from.Joins = joins
	return from
}

// unroutedAllowed reports whether AllowUnroutedSQL was set on stmt.
func unroutedAllowed(stmt *gorm.Statement) bool {
	v, ok := stmt.Settings.Load(settingUnrouted)
	return ok && v == true
}

// refuseSQL fails a routed raw statement with ErrUnroutedSQL.
func refuseSQL(db *gorm.DB, rt route, fix string) {
	where := "shard " + strconv.Itoa(rt.shard)
	if rt.schema != "" {
		where += " (schema " + rt.schema + ")"
	}
	_ = db.AddError(withDetail(ErrUnroutedSQL, fmt.Sprintf("%s: %q: %s", where, sqlStart(db.Statement.SQL.String()), fix)))
}

// sqlStart returns the first 80 bytes or so of text, for an error message.
func sqlStart(text string) string {
	const limit = 80
	if len(text) <= limit {
		return text
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + "…"
}

// namesSchema reports whether text names schema as the qualifier of a name:
// schema.x, "schema".x or `schema`.x, with schema not the tail of a longer
// identifier (shard_5 in xshard_5.t) nor inside a string literal's quote.
func namesSchema(text, schema string) bool {
	for i := 0; i < len(text); {
		j := strings.Index(text[i:], schema)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(schema)
		i = start + 1
		var before byte
		if start > 0 {
			before = text[start-1]
		}
		switch before {
		case '"', '`':
			if end+1 < len(text) && text[end] == before && text[end+1] == '.' {
				return true
			}
		case '\'':
		default:
			if !identByte(before) && end < len(text) && text[end] == '.' {
				return true
			}
		}
	}
	return false
}

// identByte reports whether c may be part of an unquoted identifier.
func identByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// nameShardRow is nameShard for Row and Rows. Row keeps its error in the
// *sql.Row it returns, and GORM returns a nil *sql.Row for a statement that
// failed before it ran (one refused with ErrUnroutedSQL): give it a *sql.Row
// whose Scan returns the error instead.
func nameShardRow(db *gorm.DB) {
	nameShard(db)
	if db.Error == nil {
		return
	}
	if _, ok := db.Statement.Dest.(*sql.Row); ok {
		return
	}
	if rows, ok := db.Get("rows"); ok && rows == false {
		db.Statement.Dest = errorRow(db.Error)
	}
}

// errorRow returns a *sql.Row whose Scan returns err. database/sql makes a
// *sql.Row only from a query; this one is made by a pool whose connector
// fails with err, so it never reaches a server.
func errorRow(err error) *sql.Row {
	pool := sql.OpenDB(failConnector{err})
	defer pool.Close()
	return pool.QueryRowContext(context.Background(), "")
}

// failConnector is a [driver.Connector] whose connections fail with err.
type failConnector struct{ err error }

// Connect implements [driver.Connector].
func (c failConnector) Connect(context.Context) (driver.Conn, error) { return nil, c.err }

// Driver implements [driver.Connector].
func (c failConnector) Driver() driver.Driver { return c }

// Open implements [driver.Driver].
func (c failConnector) Open(string) (driver.Conn, error) { return nil, c.err }
