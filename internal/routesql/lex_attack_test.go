package routesql

import "testing"

func bq(s string) string { return "`" + s + "`" }

// TestRewriteSkipsLiteralsAndComments: the alias is replaced where it
// qualifies a name in the SQL, never inside a string literal, a comment, a
// dollar-quoted string or another quoted identifier, which would change the
// data written or read.
func TestRewriteSkipsLiteralsAndComments(t *testing.T) {
	for _, c := range []struct {
		text  string
		quote func(string) string
		want  string
	}{
		{"SELECT * FROM app.photos WHERE caption = 'see app.photos'", pq, `SELECT * FROM "shard_0005".photos WHERE caption = 'see app.photos'`},
		{"SELECT * FROM app.photos WHERE caption = 'it''s app.x'", pq, `SELECT * FROM "shard_0005".photos WHERE caption = 'it''s app.x'`},
		{"SELECT * FROM app.photos -- app.x\nWHERE true", pq, "SELECT * FROM \"shard_0005\".photos -- app.x\nWHERE true"},
		{"/* app.x */ SELECT * FROM app.photos", pq, `/* app.x */ SELECT * FROM "shard_0005".photos`},
		{"SELECT $$ app.x $$, $t$ app.y $t$ FROM app.photos WHERE id = $1", pq, `SELECT $$ app.x $$, $t$ app.y $t$ FROM "shard_0005".photos WHERE id = $1`},
		{`SELECT "see app.x" FROM app.photos`, pq, `SELECT "see app.x" FROM "shard_0005".photos`},
		{`SELECT E'\' app.x' FROM app.photos`, pq, `SELECT E'\' app.x' FROM "shard_0005".photos`},
		{`SELECT 'a\' FROM app.photos`, pq, `SELECT 'a\' FROM "shard_0005".photos`},
		{`SELECT * FROM app.photos WHERE c = 'it\'s app.x'`, bq, "SELECT * FROM `shard_0005`.photos WHERE c = 'it\\'s app.x'"},
		{`SELECT * FROM app.photos WHERE c = "see app.x"`, bq, "SELECT * FROM `shard_0005`.photos WHERE c = \"see app.x\""},
	} {
		got, why := Rewrite(c.text, "shard_0005", "app", c.quote, true)
		if got != c.want || why != "" {
			t.Errorf("Rewrite(%q) = %q, %q; want %q", c.text, got, why, c.want)
		}
	}
	for _, text := range []string{
		"/* shard_0005.x */ SELECT * FROM photos",
		"SELECT ' shard_0005.x' FROM photos",
		"SELECT * FROM photos -- shard_0005.x",
	} {
		if NamesSchema(text, "shard_0005") {
			t.Errorf("NamesSchema(%q) is true: the schema is named only in a literal or comment", text)
		}
	}
}
