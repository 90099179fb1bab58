// Package routesql holds what every shardid router does to the raw SQL it
// routes and to the errors that come back, free of GORM and of database
// drivers: the GORM router (package shardid), the database/sql router
// (package shardsql) and the pgx router (package shardpgx) share it, so a
// statement and an error mean the same whatever the library. It also holds
// the rule by which they route an ID that may be legacy (IDs: ForID and
// ForTableID of shardsql and shardpgx, the GORM router's ShardOfID), and
// the routing core of the two routers without GORM (Routes, Gather), which
// are thin adapters of their driver over it.
//
// Package shardid imports this package, so this one cannot import it: where
// a shardid sentinel error is needed, the caller passes it in.
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

// KeyMismatchMessage is the message of the error that the triggers of a
// monolith being split (package reshard, with SplitConfig.Layout) raise for
// a write that would leave a row whose ID names another shard than its
// sharding key: once split, no lookup by its ID would find it. SQLSTATE
// 23514 on PostgreSQL, 45000 on MySQL (whose messages hold 128 characters).
const KeyMismatchMessage = "shardid: row ID names another shard than its sharding key, in a monolith being split"

// The tables that only shardid's triggers read, in a shard's schema or in
// a monolith being split (package reshard): a move's change log, a fence's
// state, a split's state, its change log and its declared tables.
const (
	ChangeLogTable      = "shardid_changes"
	FenceStateTable     = "shardid_fence_state"
	SplitStateTable     = "shardid_split_state"
	SplitChangeLogTable = "shardid_split_changes"
	SplitTablesTable    = "shardid_split_tables"
)

// IsFence reports whether err is the error the fence of a moving shard
// raised, or the error a write meets on MySQL/MariaDB when it opens a
// table in the instant a move or a split creates or drops the triggers
// that read one of shardid's own tables: "Table 'app_0001.shardid_changes'
// doesn't exist" (error 1146) although the table is there or was just
// dropped with its triggers. MariaDB fails a statement that way when it
// opens a table while another session changes the table's triggers
// (MDEV-26048), and the LOCK TABLES shardid holds for those changes
// narrows that window without closing it. In both cases the statement did
// not run and the shard is moving: the write is to be routed again. The
// message is matched, not a driver's type, so it holds for pgx's
// *pgconn.PgError, go-sql-driver/mysql's *MySQLError and any other driver
// that reports the server's message.
func IsFence(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	if strings.Contains(msg, FenceMessage) {
		return true
	}
	if !strings.Contains(msg, "Table '") {
		return false
	}
	for _, t := range []string{ChangeLogTable, FenceStateTable, SplitStateTable, SplitChangeLogTable, SplitTablesTable} {
		if strings.Contains(msg, "."+t+"' doesn't exist") {
			return true
		}
	}
	return false
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

// IsKeyMismatch reports whether err is the error that a split's triggers
// raise for a row whose ID names another shard than its key
// (KeyMismatchMessage), told by its message as IsFence tells the fence's.
func IsKeyMismatch(err error) bool {
	return err != nil && strings.Contains(err.Error(), KeyMismatchMessage)
}

// Classify returns err with moving joined when it is the error a move's
// fence raised (IsFence), with pooled joined when it is a prepared
// statement a transaction pooler lost (IsPooledStatement), with wrong
// joined when a split's triggers refused a row whose ID names another
// shard than its key (IsKeyMismatch), and err unchanged otherwise, or when
// it matches that error already. errors.As still finds the driver's error
// in the result. moving, pooled and wrong are shardid.ErrShardMoving,
// shardid.ErrPooledPreparedStatement and shardid.ErrWrongShard, which this
// package cannot import.
func Classify(err, moving, pooled, wrong error) error {
	switch {
	case err == nil:
		return nil
	case IsFence(err) && !errors.Is(err, moving):
		return &classified{kind: moving, err: err}
	case IsPooledStatement(err) && !errors.Is(err, pooled):
		return &classified{kind: pooled, err: err}
	case IsKeyMismatch(err) && !errors.Is(err, wrong):
		return &classified{kind: wrong, err: err}
	}
	return err
}

// classified is a driver's error that a shardid sentinel explains.
type classified struct{ kind, err error }

func (e *classified) Error() string   { return e.kind.Error() + ": " + e.err.Error() }
func (e *classified) Unwrap() []error { return []error{e.kind, e.err} }

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
// "alias".x or `alias`.x, not the tail of a longer identifier, nor inside a
// string literal, a comment or another quoted identifier) by quote(schema),
// or removes it with its dot when schema is "", and reports whether it
// replaced any.
func replaceQualifier(text, alias, schema string, quote func(string) string) (string, bool) {
	var b strings.Builder
	done := 0
	qualifiers(text, alias, quote != nil && strings.HasPrefix(quote("x"), "`"), func(from, dot int) bool {
		b.WriteString(text[done:from])
		if schema == "" {
			done = dot + 1
		} else {
			b.WriteString(quote(schema))
			done = dot
		}
		return true
	})
	if done == 0 {
		return text, false
	}
	b.WriteString(text[done:])
	return b.String(), true
}

// NamesSchema reports whether text names schema as the qualifier of a
// name: schema.x, "schema".x or `schema`.x, with schema not the tail of a
// longer identifier (shard_5 in xshard_5.t) nor inside a string literal or
// a comment.
func NamesSchema(text, schema string) bool {
	found := false
	qualifiers(text, schema, false, func(int, int) bool { found = true; return false })
	return found
}

// qualifiers calls f, in order, with the span of each place where name
// qualifies a name in the SQL text (name., "name". or `name`.): from is
// where it begins (its quote, if quoted), dot the index of its dot. String
// literals ('...', with ” or, for MySQL and E'...', a backslash escaping a
// quote), PostgreSQL's dollar-quoted strings, comments (--, /* */, and # on
// MySQL) and other quoted identifiers (MySQL: "..." strings) are skipped.
// It stops when f returns false.
func qualifiers(text, name string, mysql bool, f func(from, dot int) bool) {
	for i := 0; i < len(text); {
		c := text[i]
		var before byte
		if i > 0 {
			before = text[i-1]
		}
		switch {
		case c == '\'':
			escapes := mysql || (before == 'E' || before == 'e') && (i < 2 || !identByte(text[i-2]))
			i = endOfString(text, i, escapes)
		case c == '"' || c == '`':
			if strings.HasPrefix(text[i+1:], name) && strings.HasPrefix(text[i+1+len(name):], string(c)+".") {
				dot := i + 2 + len(name)
				if !f(i, dot) {
					return
				}
				i = dot
				continue
			}
			i = endOfString(text, i, mysql && c == '"')
		case c == '-' && strings.HasPrefix(text[i:], "--"), mysql && c == '#':
			if j := strings.IndexByte(text[i:], '\n'); j >= 0 {
				i += j + 1
			} else {
				i = len(text)
			}
		case c == '/' && strings.HasPrefix(text[i:], "/*"):
			if j := strings.Index(text[i+2:], "*/"); j >= 0 {
				i += j + 4
			} else {
				i = len(text)
			}
		case c == '$' && !mysql && !identByte(before):
			i = endOfDollar(text, i)
		case !identByte(before) && strings.HasPrefix(text[i:], name) && i+len(name) < len(text) && text[i+len(name)] == '.':
			dot := i + len(name)
			if !f(i, dot) {
				return
			}
			i = dot
		default:
			i++
		}
	}
}

// nextWord returns the first unquoted word of the SQL text from text[i]
// on (an identifier or keyword, a parameter such as $1) and the index after
// it, or "" and len(text) when there is none; open is true when the text
// ends inside a string, a quoted identifier or a comment. It skips what
// qualifiers skips: string literals, quoted identifiers, dollar-quoted
// strings and comments, PostgreSQL's nested (mysql false).
func nextWord(text string, i int, mysql bool) (word string, next int, open bool) {
	for i < len(text) {
		c := text[i]
		var before byte
		if i > 0 {
			before = text[i-1]
		}
		switch {
		case c == '\'' || c == '"' || c == '`':
			escapes := c == '\'' && (mysql || (before == 'E' || before == 'e') && (i < 2 || !identByte(text[i-2]))) ||
				mysql && c == '"'
			end, closed := scanString(text, i, escapes)
			if !closed {
				return "", len(text), true
			}
			i = end
		case c == '-' && strings.HasPrefix(text[i:], "--"), mysql && c == '#':
			ends := "\n\r" // PostgreSQL ends a -- comment at either, MySQL at \n
			if mysql {
				ends = "\n"
			}
			j := strings.IndexAny(text[i:], ends)
			if j < 0 {
				return "", len(text), false // a comment to the end: nothing after it
			}
			i += j + 1
		case c == '/' && strings.HasPrefix(text[i:], "/*"):
			end, ok := endOfComment(text, i, !mysql)
			if !ok {
				return "", len(text), true
			}
			i = end
		case c == '$' && !mysql && !identByte(before) && endOfDollar(text, i) > i+1:
			end := endOfDollar(text, i)
			tag := text[i : i+2+strings.IndexByte(text[i+1:], '$')]
			if end == len(text) && (end-i < 2*len(tag) || !strings.HasSuffix(text, tag)) {
				return "", len(text), true
			}
			i = end
		case identByte(c):
			j := i + 1
			for j < len(text) && identByte(text[j]) {
				j++
			}
			return text[i:j], j, false
		default:
			i++
		}
	}
	return "", len(text), false
}

// endOfComment returns the index after the /* comment */ that begins at
// text[i], and whether it ends: nested comments nest when nest is true
// (PostgreSQL), not on MySQL.
func endOfComment(text string, i int, nest bool) (int, bool) {
	depth := 0
	for j := i; j+1 < len(text); {
		switch {
		case text[j] == '/' && text[j+1] == '*' && (nest || depth == 0):
			depth++
			j += 2
		case text[j] == '*' && text[j+1] == '/':
			depth--
			j += 2
			if depth == 0 {
				return j, true
			}
		default:
			j++
		}
	}
	return len(text), false
}

// endOfString returns the index after the quoted string or identifier that
// begins at text[i], quoted by text[i]; a doubled quote, or a backslash when
// escapes is true, does not end it.
func endOfString(text string, i int, escapes bool) int {
	end, _ := scanString(text, i, escapes)
	return end
}

// scanString is endOfString, and reports whether the string is closed
// (false when it runs to the end of text unclosed).
func scanString(text string, i int, escapes bool) (end int, closed bool) {
	q := text[i]
	for j := i + 1; j < len(text); j++ {
		switch text[j] {
		case '\\':
			if escapes {
				j++
			}
		case q:
			if j+1 < len(text) && text[j+1] == q {
				j++
				continue
			}
			return j + 1, true
		}
	}
	return len(text), false
}

// endOfDollar returns the index after PostgreSQL's dollar-quoted string
// ($$...$$ or $tag$...$tag$) that begins at text[i], or i+1 when text[i] is
// a dollar that begins none (a parameter, $1).
func endOfDollar(text string, i int) int {
	j := i + 1
	for j < len(text) && (text[j] == '_' || text[j] >= 'a' && text[j] <= 'z' || text[j] >= 'A' && text[j] <= 'Z' || j > i+1 && text[j] >= '0' && text[j] <= '9' || text[j] >= 0x80) {
		j++
	}
	if j >= len(text) || text[j] != '$' {
		return i + 1
	}
	tag := text[i : j+1]
	if k := strings.Index(text[j+1:], tag); k >= 0 {
		return j + 1 + k + len(tag)
	}
	return len(text)
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
