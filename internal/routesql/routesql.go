// Package routesql holds what every shardid router does to the raw SQL it
// routes and to the errors that come back, free of GORM and of database
// drivers: the GORM router (package shardid), the database/sql router
// (package shardsql) and the pgx router (package shardpgx) share it, so a
// statement and an error mean the same whatever the library.
package routesql

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// Placeholder is shardid.SchemaPlaceholder.
const Placeholder = "{{schema}}"

// FenceMessage is shardid.FenceMessage: the message of the error that the
// triggers fencing a shard's tables for a move raise, SQLSTATE 55000 on
// PostgreSQL and 45000 (SIGNAL, error 1644) on MySQL.
const FenceMessage = "shardid: shard is fenced for a move"

// IsFence reports whether err is the error the fence of a moving shard
// raised. The message is matched, not a driver's type, so it holds for
// pgx's *pgconn.PgError, go-sql-driver/mysql's *MySQLError and any other
// driver that reports the server's message.
func IsFence(err error) bool {
	return err != nil && strings.Contains(err.Error(), FenceMessage)
}

// sqlStater is what a driver's error offers when it carries a SQLSTATE, as
// pgx's *pgconn.PgError does.
type sqlStater interface{ SQLState() string }

// IsPooledStatement reports whether err is PostgreSQL's "prepared statement
// already exists" (42P05) or "does not exist" (26000): the mark of
// statements prepared on a connection behind a transaction pooler.
func IsPooledStatement(err error) bool {
	var s sqlStater
	if !errors.As(err, &s) {
		return false
	}
	switch s.SQLState() {
	case "42P05", "26000":
		return true
	}
	return false
}

// Quote quotes name, a schema or table name that needs no escaping, for
// dialect: "postgres" (double quotes) or "mysql" (backquotes).
func Quote(dialect, name string) string {
	if dialect == "mysql" {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// Rewrite puts text, routed to a shard whose tables are in schema (""
// when they are the database's own), in that shard: it replaces
// Placeholder, and the qualifier alias. when alias is not "", with schema
// quoted by quote, or removes "{{schema}}." and "alias." when schema is
// "". It returns the text to run, or a reason ("" when none) to refuse it:
// a placeholder left without a schema, or, when check is true and schema
// is not "", text that names neither a placeholder nor schema itself.
func Rewrite(text, schema, alias string, quote func(string) string, check bool) (string, string) {
	routed := false
	if strings.Contains(text, Placeholder) {
		routed = true
		if schema == "" {
			text = strings.ReplaceAll(text, Placeholder+".", "")
			if strings.Contains(text, Placeholder) {
				return text, "the shard's tables are the database's own, so " + Placeholder +
					" names no schema: write " + Placeholder + ".table, which becomes table"
			}
		} else {
			text = strings.ReplaceAll(text, Placeholder, quote(schema))
		}
	}
	if alias != "" {
		var n bool
		text, n = replaceQualifier(text, alias, schema, quote)
		routed = routed || n
	}
	if routed || !check || schema == "" || NamesSchema(text, schema) {
		return text, ""
	}
	why := "name the shard's tables " + Placeholder + ".table"
	if alias != "" {
		why += " or " + alias + ".table"
	}
	return text, why + " (or as Table gives them), or run SQL that names no table of the shard as unrouted SQL"
}

// replaceQualifier replaces alias where it qualifies a name (alias.x,
// "alias".x or `alias`.x, not the tail of a longer identifier nor after a
// single quote) by quote(schema), or removes it with its dot when schema
// is "", and reports whether it replaced any.
func replaceQualifier(text, alias, schema string, quote func(string) string) (string, bool) {
	var b strings.Builder
	done := 0
	for i := 0; i < len(text); {
		j := strings.Index(text[i:], alias)
		if j < 0 {
			break
		}
		start, end := i+j, i+j+len(alias)
		i = start + 1
		var before byte
		if start > 0 {
			before = text[start-1]
		}
		from, to := -1, -1 // the span to replace, and its dot
		switch before {
		case '"', '`':
			if end+1 < len(text) && text[end] == before && text[end+1] == '.' {
				from, to = start-1, end+1
			}
		case '\'':
		default:
			if !identByte(before) && end < len(text) && text[end] == '.' {
				from, to = start, end
			}
		}
		if from < 0 {
			continue
		}
		b.WriteString(text[done:from])
		if schema == "" {
			done = to + 1
		} else {
			b.WriteString(quote(schema))
			done = to
		}
		i = to
	}
	if done == 0 {
		return text, false
	}
	b.WriteString(text[done:])
	return b.String(), true
}

// NamesSchema reports whether text names schema as the qualifier of a
// name: schema.x, "schema".x or `schema`.x, with schema not the tail of a
// longer identifier (shard_5 in xshard_5.t) nor inside a string literal's
// quote.
func NamesSchema(text, schema string) bool {
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

// Start returns the first 80 bytes or so of text, for an error message.
func Start(text string) string {
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
