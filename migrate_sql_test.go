package shardid_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/sqllock"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
)

// sqlDDL are the statements of the MigrateSQL tests, per dialect: a first
// release (v1), one that adds a column and an index (v2), one that changes
// a column's type (v3), each the one before and more.
var sqlDDL = map[string][3][]string{
	"postgres": {
		{
			`CREATE TABLE photos (id bigint PRIMARY KEY, user_id bigint NOT NULL, caption text DEFAULT '',
				created_at timestamptz NOT NULL DEFAULT now())`,
			`CREATE INDEX IF NOT EXISTS idx_photos_user ON photos (user_id)`,
			`CREATE TABLE comments (id bigint PRIMARY KEY, photo_id bigint NOT NULL, body text,
				CONSTRAINT fk_comments_photo FOREIGN KEY (photo_id) REFERENCES photos (id))`,
			`CREATE INDEX idx_comments_photo ON comments (photo_id)`,
			`COMMENT ON COLUMN photos.caption IS 'what the user wrote'`,
		},
		{
			`ALTER TABLE photos ADD COLUMN likes integer NOT NULL DEFAULT 0`,
			`CREATE INDEX idx_photos_likes ON photos (likes)`,
		},
		{
			`ALTER TABLE photos ALTER COLUMN caption TYPE varchar(300)`,
		},
	},
	"mysql": {
		{
			"CREATE TABLE photos (id bigint PRIMARY KEY, user_id bigint NOT NULL, caption varchar(200) DEFAULT '', " +
				"created_at datetime(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))",
			"CREATE INDEX idx_photos_user ON photos (user_id)",
			"CREATE TABLE `comments` (id bigint PRIMARY KEY, photo_id bigint NOT NULL, body text, " +
				"CONSTRAINT fk_comments_photo FOREIGN KEY (photo_id) REFERENCES photos (id))",
			"CREATE INDEX idx_comments_photo ON comments (photo_id)",
		},
		{
			"ALTER TABLE photos ADD COLUMN likes int NOT NULL DEFAULT 0",
			"ALTER TABLE photos ADD INDEX idx_photos_likes (likes)",
		},
		{
			"ALTER TABLE photos MODIFY caption varchar(300) DEFAULT ''",
		},
	},
}

// sqlRelease returns the statements of releases 1 to n of dialect.
func sqlRelease(dialect string, n int) []string {
	var out []string
	rels := sqlDDL[dialect]
	for _, r := range rels[:n] {
		out = append(out, r...)
	}
	return out
}

// sqlSetup is a map of shards logical shards named prefix_NN over two
// databases of dialect, as GORM (for the test's helpers) and as
// database/sql (for MigrateSQL).
type sqlSetup struct {
	dialect string
	gdbs    []*gorm.DB
	dbs     []*sql.DB
	m       *shardmap.Map
}

func newSQLSetup(t *testing.T, d int, prefix string, shards int) *sqlSetup {
	t.Helper()
	s := &sqlSetup{dialect: migDialects[d].name, gdbs: migDialects[d].open(t)}
	for _, g := range s.gdbs {
		db, err := g.DB()
		if err != nil {
			t.Fatal(err)
		}
		s.dbs = append(s.dbs, db)
	}
	dropMigSchemas(t, s.gdbs, prefix)
	t.Cleanup(func() { dropMigSchemas(t, s.gdbs, prefix) })
	var err error
	s.m, err = shardmap.New(shardmap.Config{Databases: []string{"one", "two"}, LogicalShards: shards, SchemaPattern: prefix + "_%02d"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// migrate runs MigrateSQL of ddl and returns its last progress report.
func (s *sqlSetup) migrate(t *testing.T, ddl []string) shardid.MigrateProgress {
	t.Helper()
	var p progressLog
	if err := shardid.MigrateSQL(context.Background(), s.dbs, s.m, shardid.MigrateOptions{Progress: p.report}, ddl...); err != nil {
		t.Fatal(err)
	}
	return p.last(t, s.m.LogicalShards())
}

// gdb returns the GORM handle of shard's database.
func (s *sqlSetup) gdb(shard int) *gorm.DB { return s.gdbs[s.m.Load().DB(shard)] }

// exec runs q, with {{schema}} replaced by shard's schema, on its
// database.
func (s *sqlSetup) exec(t *testing.T, shard int, q string) {
	t.Helper()
	q = strings.ReplaceAll(q, shardid.SchemaPlaceholder, s.m.SchemaOf(shard))
	if err := s.gdb(shard).Exec(q).Error; err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// plainSQL runs ddl in schema of db, created first, one statement after
// the other with nothing else: the reference to compare with.
func plainSQL(t *testing.T, db *gorm.DB, schema string, ddl []string) {
	t.Helper()
	err := db.Connection(func(tx *gorm.DB) error {
		if tx.Dialector.Name() == "postgres" {
			for _, q := range []string{`DROP SCHEMA IF EXISTS "` + schema + `" CASCADE`, `CREATE SCHEMA "` + schema + `"`, `SET search_path TO "` + schema + `"`} {
				if err := tx.Exec(q).Error; err != nil {
					return err
				}
			}
			defer tx.Exec("RESET search_path")
		} else {
			var current string
			if err := tx.Raw("SELECT DATABASE()").Scan(&current).Error; err != nil {
				return err
			}
			for _, q := range []string{"DROP DATABASE IF EXISTS `" + schema + "`", "CREATE DATABASE `" + schema + "`", "USE `" + schema + "`"} {
				if err := tx.Exec(q).Error; err != nil {
					return err
				}
			}
			defer tx.Exec("USE `" + current + "`")
		}
		for _, q := range ddl {
			if err := tx.Exec(strings.ReplaceAll(q, shardid.SchemaPlaceholder, schema)).Error; err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("plain DDL in %s: %v", schema, err)
	}
}

// sameAs fails the test unless every shard is like the schema ref on the
// first database.
func (s *sqlSetup) sameAs(t *testing.T, ref string) {
	t.Helper()
	want := sqlDump(t, s.gdbs[0], ref)
	for sh := range s.m.LogicalShards() {
		got := sqlDump(t, s.gdb(sh), s.m.SchemaOf(sh))
		if !slices.Equal(got, want) {
			t.Fatalf("shard %d (%s) differs from the plain DDL's %s:\n got %s\nwant %s", sh, s.m.SchemaOf(sh), ref,
				strings.Join(got, "\n     "), strings.Join(want, "\n     "))
		}
	}
}

// sqlDump is dumpSchema with MySQL's SHOW CREATE TABLE cut into sorted
// lines: an index created again comes last there.
func sqlDump(t *testing.T, db *gorm.DB, schema string) []string {
	t.Helper()
	var out []string
	for _, l := range dumpSchema(t, db, schema) {
		for _, line := range strings.Split(l, "\n") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(line), ","))
		}
	}
	slices.Sort(out)
	return out
}

// TestMigrateSQL takes shards through three releases of plain DDL: each
// shard ends as the statements leave an empty schema, and a second run of
// each release does nothing.
func TestMigrateSQL(t *testing.T) {
	for d := range migDialects {
		t.Run(migDialects[d].name, func(t *testing.T) {
			const shards = 6
			s := newSQLSetup(t, d, "migsql", shards)
			ref := "migsql_ref"
			for rel := 1; rel <= 3; rel++ {
				ddl := sqlRelease(s.dialect, rel)
				plainSQL(t, s.gdbs[0], ref, ddl)
				m := s.migrate(t, ddl)
				wantAuto := 0
				if rel == 3 {
					wantAuto = shards // a changed type: replayed
				}
				if m.Altered != shards || m.AutoMigrated != wantAuto {
					t.Fatalf("release %d: %+v, want every shard altered, %d replayed", rel, m, wantAuto)
				}
				s.sameAs(t, ref)
				if m := s.migrate(t, ddl); m.Altered != 0 {
					t.Fatalf("release %d again: %+v, want nothing altered", rel, m)
				}
			}
		})
	}
}

// TestMigrateSQLResumes damages shards as an interrupted run or a hand
// edit leaves them, and checks that the next run repairs each and touches
// no other; a difference no statement repairs fails with
// ErrMigrateDiverged, naming the shard, and changes nothing in it.
func TestMigrateSQLResumes(t *testing.T) {
	for d := range migDialects {
		t.Run(migDialects[d].name, func(t *testing.T) {
			const shards = 6
			s := newSQLSetup(t, d, "migsqlfix", shards)
			ddl := sqlRelease(s.dialect, 2)
			ref := "migsqlfix_ref"
			plainSQL(t, s.gdbs[0], ref, ddl)
			s.migrate(t, ddl)

			q := `"`
			if s.dialect == "mysql" {
				q = "`"
			}
			s.exec(t, 0, "DROP TABLE "+q+"{{schema}}"+q+".comments")
			s.exec(t, 1, "ALTER TABLE "+q+"{{schema}}"+q+".photos DROP COLUMN likes")
			if s.dialect == "postgres" {
				s.exec(t, 2, `DROP INDEX "{{schema}}".idx_photos_user`)
			} else {
				s.exec(t, 2, "DROP INDEX idx_photos_user ON `{{schema}}`.photos")
			}
			if s.dialect == "postgres" {
				s.exec(t, 3, `DROP SCHEMA "{{schema}}" CASCADE`)
			} else {
				s.exec(t, 3, "DROP DATABASE `{{schema}}`")
			}
			m := s.migrate(t, ddl)
			if m.Altered != 4 {
				t.Fatalf("repair: %+v, want 4 shards altered", m)
			}
			s.sameAs(t, ref)

			// A column of another type that no statement changes.
			if s.dialect == "postgres" {
				s.exec(t, 4, `ALTER TABLE "{{schema}}".photos ALTER COLUMN caption TYPE varchar(10)`)
			} else {
				s.exec(t, 4, "ALTER TABLE `{{schema}}`.photos MODIFY caption varchar(10) DEFAULT ''")
			}
			s.exec(t, 5, "ALTER TABLE "+q+"{{schema}}"+q+".photos DROP COLUMN likes")
			before := dumpSchema(t, s.gdb(4), s.m.SchemaOf(4))
			err := shardid.MigrateSQL(context.Background(), s.dbs, s.m, shardid.MigrateOptions{}, ddl...)
			var se *shardid.ShardError
			if !errors.Is(err, shardid.ErrMigrateDiverged) || !errors.As(err, &se) || se.Shard != 4 ||
				!strings.Contains(err.Error(), "caption") {
				t.Fatalf("got %v, want ErrMigrateDiverged naming shard 4 and its column caption", err)
			}
			if after := dumpSchema(t, s.gdb(4), s.m.SchemaOf(4)); !slices.Equal(after, before) {
				t.Fatalf("shard 4 changed:\n%s\nwas\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
			}
		})
	}
}

// TestMigrateSQLWithGORMRouter checks that MigrateSQL and Router.Migrate
// take the same lock: while it is held, MigrateSQL that may not wait fails
// with ErrMigrateLocked, and two MigrateSQL at once both succeed.
func TestMigrateSQLLock(t *testing.T) {
	for d := range migDialects {
		t.Run(migDialects[d].name, func(t *testing.T) {
			s := newSQLSetup(t, d, "migsqllock", 4)
			ddl := sqlRelease(s.dialect, 1)
			lock, err := sqllock.Acquire(context.Background(), s.dbs[1], s.dialect,
				sqllock.Key{Name: migLockName(s.m.SchemaOf(2))}, sqllock.Options{})
			if err != nil {
				t.Fatal(err)
			}
			err = shardid.MigrateSQL(context.Background(), s.dbs, s.m, shardid.MigrateOptions{LockWait: -1}, ddl...)
			lock.Release()
			var se *shardid.ShardError
			if !errors.Is(err, shardid.ErrMigrateLocked) || !errors.As(err, &se) || se.Database != "two" {
				t.Fatalf("got %v, want ErrMigrateLocked on database two", err)
			}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i := range errs {
				wg.Go(func() {
					errs[i] = shardid.MigrateSQL(context.Background(), s.dbs, s.m, shardid.MigrateOptions{}, ddl...)
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			ref := "migsqllock_ref"
			plainSQL(t, s.gdbs[0], ref, ddl)
			s.sameAs(t, ref)
		})
	}
}

// TestMigrateSQLSharedTables migrates a map without a SchemaPattern: the
// statements run once in each database's own schema.
func TestMigrateSQLSharedTables(t *testing.T) {
	for d := range migDialects {
		t.Run(migDialects[d].name, func(t *testing.T) {
			s := newSQLSetup(t, d, "migsqlown", 4)
			ddl := []string{
				"CREATE TABLE migsqlown_items (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0)",
				"CREATE INDEX migsqlown_idx_n ON migsqlown_items (n)",
			}
			drop := func() {
				for _, db := range s.gdbs {
					db.Exec("DROP TABLE IF EXISTS migsqlown_items")
				}
			}
			drop()
			t.Cleanup(drop)
			m, err := shardmap.New(shardmap.Config{Databases: []string{"one", "two"}, LogicalShards: 8})
			if err != nil {
				t.Fatal(err)
			}
			for run := range 2 {
				var p progressLog
				if err := shardid.MigrateSQL(context.Background(), s.dbs, m, shardid.MigrateOptions{Progress: p.report}, ddl...); err != nil {
					t.Fatal(err)
				}
				if got := p.last(t, 2); got.Altered != 2*(1-run) {
					t.Fatalf("run %d: %+v, want %d altered", run, got, 2*(1-run))
				}
			}
			for i, db := range s.gdbs {
				if !db.Migrator().HasIndex("migsqlown_items", "migsqlown_idx_n") {
					t.Errorf("database %d: migsqlown_items has no index migsqlown_idx_n", i)
				}
			}
		})
	}
}

// TestMigrateSQLStatements checks the statements MigrateSQL refuses,
// before it connects to anything.
func TestMigrateSQLStatements(t *testing.T) {
	m, err := shardmap.New(shardmap.Config{Databases: []string{"one"}, LogicalShards: 4, SchemaPattern: "x_%02d"})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"DROP TABLE photos",
		"CREATE TABLE public.photos (id bigint)",
		"CREATE INDEX ON photos (user_id)",
		"ALTER TABLE app.photos ADD COLUMN x int",
		"CREATE TABLE a (id int); CREATE TABLE b (id int)",
		"INSERT INTO photos VALUES (1)",
		"",
	} {
		err := shardid.MigrateSQL(context.Background(), []*sql.DB{nil}, m, shardid.MigrateOptions{}, "CREATE TABLE a (id int)", q)
		if !errors.Is(err, shardid.ErrMigrateStatement) || !strings.Contains(err.Error(), "statement 2") {
			t.Errorf("%q: got %v, want ErrMigrateStatement naming statement 2", q, err)
		}
	}
	for _, c := range []struct {
		dbs []*sql.DB
		m   *shardmap.Map
		ddl []string
	}{
		{[]*sql.DB{nil}, nil, []string{"CREATE TABLE a (id int)"}},
		{[]*sql.DB{nil, nil}, m, []string{"CREATE TABLE a (id int)"}},
		{[]*sql.DB{nil}, m, []string{"CREATE TABLE a (id int)"}},
		{[]*sql.DB{nil}, m, nil},
	} {
		if err := shardid.MigrateSQL(context.Background(), c.dbs, c.m, shardid.MigrateOptions{}, c.ddl...); !errors.Is(err, shardid.ErrInvalidConfig) {
			t.Errorf("%d databases, map %v, %d statements: got %v, want ErrInvalidConfig", len(c.dbs), c.m != nil, len(c.ddl), err)
		}
	}
}
