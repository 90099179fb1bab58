package shardid

import (
	"context"
	"database/sql"
	"regexp"
	"strings"

	"gorm.io/gorm"
)

// migratePostgres is the fast path of Migrate on PostgreSQL.
type migratePostgres struct{}

// pgBatchStatements bounds the statements of one transaction: each
// CREATE TABLE takes several locks, and the lock table is shared by the
// whole server.
const pgBatchStatements = 200

// template creates tmpl, runs build in it and reads the catalog, all in
// one transaction on conn that is then rolled back: the template never
// exists for another session and needs no drop, whatever happens, and the
// search_path set for it ends with the transaction.
func (migratePostgres) template(ctx context.Context, conn *sql.Conn, _ *sql.DB, tmpl string, schemas []string,
	build func(q migrateConn) error) (map[string]catSchema, error) {
	tx, err := pgBegin(ctx, conn, tmpl)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	if err := build(tx); err != nil {
		return nil, err
	}
	// The catalog names objects of the schemas on the search_path without
	// their schema: read it with the default one, as the shards' are.
	if _, err := tx.ExecContext(ctx, "SET LOCAL search_path TO DEFAULT"); err != nil {
		return nil, err
	}
	return pgCatalog(ctx, tx, append(schemas[:len(schemas):len(schemas)], tmpl))
}

// replay runs stmts in schema in one transaction on conn, and commits it
// when check accepts what schema then holds.
func (migratePostgres) replay(ctx context.Context, conn *sql.Conn, schema string, stmts []string, check func(have catSchema) error) error {
	tx, err := pgBegin(ctx, conn, schema)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after Commit, sql.ErrTxDone
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return &stmtError{stmt: q, err: err}
		}
	}
	if _, err := tx.ExecContext(ctx, "SET LOCAL search_path TO DEFAULT"); err != nil {
		return err
	}
	cat, err := pgCatalog(ctx, tx, []string{schema})
	if err != nil {
		return err
	}
	if err := check(cat[schema]); err != nil {
		return err
	}
	return tx.Commit()
}

func (migratePostgres) currentSchema(ctx context.Context, db *sql.DB) (string, error) {
	var s sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT current_schema()").Scan(&s); err != nil {
		return "", err
	}
	if !s.Valid {
		return "", withDetail(ErrInvalidConfig, "no schema of the search_path exists: unqualified tables have nowhere to go")
	}
	return s.String, nil
}

// pgBegin begins a transaction on conn, creates schema there if it is
// missing and makes it the transaction's search_path (SET LOCAL, which
// ends with the transaction).
func pgBegin(ctx context.Context, conn gorm.TxBeginner, schema string) (*sql.Tx, error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	// schema matched schemaName: it needs no escaping, and is quoted all
	// the same.
	for _, q := range []string{"CREATE SCHEMA IF NOT EXISTS " + pgIdent(schema), "SET LOCAL search_path TO " + pgIdent(schema)} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			_ = tx.Rollback()
			return nil, err
		}
	}
	return tx, nil
}

// pgBeginIn is pgBegin, with a session of db bound to the transaction.
func pgBeginIn(ctx context.Context, db *gorm.DB, conn gorm.TxBeginner, schema string) (*sql.Tx, *gorm.DB, error) {
	tx, err := pgBegin(ctx, conn, schema)
	if err != nil {
		return nil, nil, err
	}
	in := db.Session(&gorm.Session{NewDB: true, Context: ctx})
	in.Statement.ConnPool = tx
	return tx, in, nil
}

// pgCatalogQueries read, for the schemas in $1, the schemas, the columns
// of their tables, the indexes and the constraints, from pg_catalog (the
// information_schema views check privileges row by row and slow down with
// every schema).
var pgCatalogQueries = [...]string{
	`SELECT nspname FROM pg_catalog.pg_namespace WHERE nspname = ANY($1)`,
	`SELECT n.nspname, c.relname, a.attname,
		pg_catalog.format_type(a.atttypid, a.atttypmod) ||
			COALESCE(' COLLATE ' || pg_catalog.quote_ident(co.collname), ''),
		a.attnotnull, d.adbin IS NOT NULL, COALESCE(pg_catalog.pg_get_expr(d.adbin, d.adrelid), ''),
		a.attidentity::text || a.attgenerated::text,
		COALESCE(pg_catalog.col_description(c.oid, a.attnum), '')
	FROM pg_catalog.pg_namespace n
	JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relkind IN ('r', 'p')
	JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	JOIN pg_catalog.pg_type ty ON ty.oid = a.atttypid
	LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
	LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation AND a.attcollation <> ty.typcollation
	WHERE n.nspname = ANY($1)`,
	`SELECT n.nspname, t.relname, i.relname
	FROM pg_catalog.pg_index x
	JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
	JOIN pg_catalog.pg_class t ON t.oid = x.indrelid
	JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace
	WHERE n.nspname = ANY($1)`,
	`SELECT n.nspname, t.relname, co.conname
	FROM pg_catalog.pg_constraint co
	JOIN pg_catalog.pg_class t ON t.oid = co.conrelid
	JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace
	WHERE n.nspname = ANY($1) AND co.contype IN ('p', 'u', 'f', 'c', 'x')`,
}

// pgCatalog reads what exists in schemas.
func pgCatalog(ctx context.Context, conn querier, schemas []string) (map[string]catSchema, error) {
	return readCatalog(ctx, conn, pgCatalogQueries, []any{schemas}, func(rows *sql.Rows) (schema, table, name string, c catColumn, err error) {
		err = rows.Scan(&schema, &table, &name, &c.typ, &c.notNull, &c.hasDef, &c.def, &c.extra, &c.comment)
		c.typ, c.def = markSchema(c.typ, schema), markSchema(c.def, schema)
		return schema, table, name, c, err
	})
}

func (migratePostgres) addColumn(table, name string, c catColumn) ([]string, bool) {
	if c.extra != "" || strings.Contains(c.typ, schemaMark) || strings.Contains(c.def, schemaMark) {
		return nil, false // identity, generated, a sequence or a type of the schema
	}
	q := `ALTER TABLE "` + table + `" ADD COLUMN ` + pgIdent(name) + " " + c.typ
	if c.hasDef {
		q += " DEFAULT " + c.def
	}
	if c.notNull {
		q += " NOT NULL"
	}
	stmts := []string{q}
	if c.comment != "" {
		stmts = append(stmts, `COMMENT ON COLUMN "`+table+`".`+pgIdent(name)+" IS "+pgLiteral(c.comment))
	}
	return stmts, true
}

// The forms of GORM's DDL on PostgreSQL, with an unqualified table.
var (
	pgCreateTable = regexp.MustCompile(`^CREATE TABLE "([^".]+)" \(`)
	pgCreateIndex = regexp.MustCompile(`^CREATE (?:UNIQUE )?INDEX IF NOT EXISTS "([^"]+)" ON "([^".]+)"(?: USING | \()`)
	pgComment     = regexp.MustCompile(`^COMMENT ON COLUMN "([^".]+)"\."`)
	pgAlterTable  = regexp.MustCompile(`^ALTER TABLE "([^".]+)" `)
)

func (migratePostgres) parse(stmt string) (table, index string, ok bool) {
	if m := pgCreateTable.FindStringSubmatch(stmt); m != nil {
		return m[1], "", true
	}
	if m := pgCreateIndex.FindStringSubmatch(stmt); m != nil {
		return m[2], m[1], true
	}
	if m := pgComment.FindStringSubmatch(stmt); m != nil {
		return m[1], "", true
	}
	if m := pgAlterTable.FindStringSubmatch(stmt); m != nil {
		return m[1], "", true
	}
	return "", "", false
}

// apply runs the actions on conn in transactions of up to
// pgBatchStatements statements, one round trip each: DDL is transactional on PostgreSQL, and
// SET LOCAL search_path puts each shard's statements in its schema. When a
// batch fails, its shards are run again one per transaction, to name the
// one that fails.
func (migratePostgres) apply(ctx context.Context, conn *sql.Conn, _ *sql.DB, acts []shardAction, held func() error, done func(n int)) error {
	run := func(batch []shardAction) error {
		var b strings.Builder
		for _, a := range batch {
			b.WriteString("CREATE SCHEMA IF NOT EXISTS " + pgIdent(a.schema) + ";SET LOCAL search_path TO " + pgIdent(a.schema) + ";")
			for _, q := range a.stmts {
				b.WriteString(q)
				b.WriteString(";\n")
			}
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, b.String()); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	for len(acts) > 0 {
		n, stmts := 0, 0
		for n < len(acts) && (n == 0 || stmts+len(acts[n].stmts) <= pgBatchStatements) {
			stmts += len(acts[n].stmts)
			n++
		}
		if err := held(); err != nil {
			return err
		}
		if err := run(acts[:n]); err != nil {
			if ctx.Err() != nil || n == 1 {
				return &ShardError{Shard: acts[0].shard, Err: err}
			}
			for _, a := range acts[:n] {
				if err := run([]shardAction{a}); err != nil {
					return &ShardError{Shard: a.shard, Err: err}
				}
				done(1)
			}
		} else {
			done(n)
		}
		acts = acts[n:]
	}
	return nil
}

// pgIdent quotes a PostgreSQL identifier.
func pgIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// pgLiteral quotes a PostgreSQL string literal, whatever
// standard_conforming_strings says.
func pgLiteral(s string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, "'", "''").Replace(s) + "'"
}
