package shardid

import "testing"

func TestDedupConstraints(t *testing.T) {
	fk := `CONSTRAINT "fk_photos_comments" FOREIGN KEY ("photo_id") REFERENCES "photos"("id")`
	other := `CONSTRAINT "fk_photos_comments" FOREIGN KEY ("photo_id") REFERENCES "photos"("id") ON DELETE CASCADE`
	for _, c := range []struct{ in, want string }{
		{`CREATE TABLE "comments" ("id" bigint,"body" text DEFAULT 'a,(b',PRIMARY KEY ("id"),` + fk + `,` + fk + `)`,
			`CREATE TABLE "comments" ("id" bigint,"body" text DEFAULT 'a,(b',PRIMARY KEY ("id"),` + fk + `)`},
		// MySQL's table options after the closing parenthesis stay.
		{"CREATE TABLE `c` (`id` bigint," + fk + "," + fk + ") ENGINE=InnoDB COMMENT='x)'",
			"CREATE TABLE `c` (`id` bigint," + fk + ") ENGINE=InnoDB COMMENT='x)'"},
		// Different definitions under one name are the server's to refuse.
		{`CREATE TABLE "c" ("id" bigint,` + fk + `,` + other + `)`, `CREATE TABLE "c" ("id" bigint,` + fk + `,` + other + `)`},
		{`CREATE TABLE "c" ("id" bigint,` + fk + `)`, `CREATE TABLE "c" ("id" bigint,` + fk + `)`},
		{`ALTER TABLE "c" ADD ` + fk, `ALTER TABLE "c" ADD ` + fk},
	} {
		if got := dedupConstraints(c.in); got != c.want {
			t.Errorf("dedupConstraints(%s)\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}
