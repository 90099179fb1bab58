package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// The models of the migration tests: IDs, composite keys, defaults, NOT
// NULL, comments, unique and composite indexes, a check, a foreign key, a
// join table and an auto-increment key.
type MigUser struct {
	ID        shardid.ID `gorm:"primaryKey"`
	Email     string     `gorm:"size:120;not null;uniqueIndex"`
	Name      string     `gorm:"size:80;default:'anon';comment:the user's display name"`
	Age       int        `gorm:"not null;default:18;index:idx_mig_age_nick,priority:1"`
	Nick      string     `gorm:"size:40;index:idx_mig_age_nick,priority:2"`
	Score     float64
	Active    bool `gorm:"default:true"`
	CreatedAt time.Time
	Posts     []MigPost `gorm:"foreignKey:UserID"`
}

type MigPost struct {
	ID     shardid.ID     `gorm:"primaryKey"`
	UserID shardid.ID     `gorm:"index;not null"`
	Title  string         `gorm:"type:varchar(200);check:chk_mig_title,title <> ''"`
	Body   string         `gorm:"type:text"`
	Ref    shardid.NullID `gorm:"index"`
	Labels []MigLabel     `gorm:"many2many:mig_post_labels"`
}

type MigLabel struct {
	ID   shardid.ID `gorm:"primaryKey"`
	Name string     `gorm:"size:30;uniqueIndex"`
}

type MigTag struct {
	PostID shardid.ID `gorm:"primaryKey"`
	Tag    string     `gorm:"primaryKey;size:50"`
	Weight int        `gorm:"default:1"`
}

// MigTagV2 is MigTag after a release that adds two columns, one with an
// index and a comment.
type MigTagV2 struct {
	PostID  shardid.ID `gorm:"primaryKey"`
	Likes   int        `gorm:"not null;default:0;index"`
	Tag     string     `gorm:"primaryKey;size:50"`
	Weight  int        `gorm:"default:1"`
	Summary string     `gorm:"size:300;comment:it's short"`
}

func (MigTagV2) TableName() string { return "mig_tags" }

type MigCounter struct {
	ID uint `gorm:"primaryKey"`
	N  int64
}

var (
	migV1 = []any{&MigUser{}, &MigPost{}, &MigLabel{}, &MigTag{}, &MigCounter{}}
	migV2 = []any{&MigUser{}, &MigPost{}, &MigLabel{}, &MigTagV2{}, &MigCounter{}}
)

// migDialects are the servers of the migration tests: two physical
// databases each.
var migDialects = []struct {
	name string
	open func(t *testing.T) []*gorm.DB
}{
	{"postgres", func(t *testing.T) []*gorm.DB { return []*gorm.DB{openPostgres(t), openSecondPostgres(t)} }},
	{"mysql", func(t *testing.T) []*gorm.DB { return []*gorm.DB{openMySQL(t), openSecondMySQL(t)} }},
}

// migRouter returns a router of shards logical shards named prefix_NN over
// dbs, and drops every schema of that prefix before and after the test.
func migRouter(t *testing.T, dbs []*gorm.DB, prefix string, shards int) *shardid.Router {
	t.Helper()
	dropMigSchemas(t, dbs, prefix)
	t.Cleanup(func() { dropMigSchemas(t, dbs, prefix) })
	r, err := shardid.NewRouter(shardid.RouterConfig{
		Databases:     dbs,
		LogicalShards: shards,
		SchemaPattern: prefix + "_%02d",
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// dropMigSchemas drops the schemas (MySQL: databases) whose names start
// with prefix_ on dbs.
func dropMigSchemas(t testing.TB, dbs []*gorm.DB, prefix string) {
	t.Helper()
	for _, db := range dbs {
		var names []string
		var err error
		if db.Dialector.Name() == "postgres" {
			err = db.Raw("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, ?)", prefix+"_").Scan(&names).Error
		} else {
			err = db.Raw("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE ?",
				strings.ReplaceAll(prefix, "_", `\_`)+`\_%`).Scan(&names).Error
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			q := `DROP SCHEMA "` + n + `" CASCADE`
			if db.Dialector.Name() != "postgres" {
				q = "DROP DATABASE `" + n + "`"
			}
			if err := db.Exec(q).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
}

// plainMigrate runs GORM's AutoMigrate of models inside schema, as Migrate
// did for every shard before its fast path: the reference to compare with.
func plainMigrate(t *testing.T, db *gorm.DB, schema string, models ...any) {
	t.Helper()
	err := db.Connection(func(tx *gorm.DB) error {
		if tx.Dialector.Name() == "postgres" {
			if err := tx.Exec(`CREATE SCHEMA IF NOT EXISTS "` + schema + `"`).Error; err != nil {
				return err
			}
			if err := tx.Exec(`SET search_path TO "` + schema + `"`).Error; err != nil {
				return err
			}
			defer tx.Exec("RESET search_path")
		} else {
			var current string
			if err := tx.Raw("SELECT DATABASE()").Scan(&current).Error; err != nil {
				return err
			}
			if err := tx.Exec("CREATE DATABASE IF NOT EXISTS `" + schema + "`").Error; err != nil {
				return err
			}
			if err := tx.Exec("USE `" + schema + "`").Error; err != nil {
				return err
			}
			defer tx.Exec("USE `" + current + "`")
		}
		return tx.AutoMigrate(models...)
	})
	if err != nil {
		t.Fatalf("AutoMigrate in %s: %v", schema, err)
	}
}

var autoIncrement = regexp.MustCompile(` AUTO_INCREMENT=\d+`)

// dumpSchema describes every table of schema, one line per column, index
// and constraint, with the schema's name replaced by "S": what two schemas
// must share to be migrated alike.
func dumpSchema(t *testing.T, db *gorm.DB, schema string) []string {
	t.Helper()
	var lines []string
	if db.Dialector.Name() == "postgres" {
		err := db.Raw(`
SELECT format('column %s.%s %s notnull=%s default=%s identity=%s generated=%s collation=%s comment=%s',
	c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
	pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated, a.attcollation,
	col_description(c.oid, a.attnum))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
WHERE n.nspname = @s AND c.relkind = 'r'
UNION ALL
SELECT format('index %s %s', i.relname, pg_get_indexdef(x.indexrelid))
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_namespace n ON n.oid = i.relnamespace
WHERE n.nspname = @s
UNION ALL
SELECT format('constraint %s.%s %s %s', t.relname, co.conname, co.contype, pg_get_constraintdef(co.oid))
FROM pg_constraint co JOIN pg_class t ON t.oid = co.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = @s
UNION ALL
SELECT format('sequence %s', c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = @s AND c.relkind = 'S'`, map[string]any{"s": schema}).Scan(&lines).Error
		if err != nil {
			t.Fatal(err)
		}
	} else {
		var tables []string
		if err := db.Raw("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", schema).
			Scan(&tables).Error; err != nil {
			t.Fatal(err)
		}
		for _, tb := range tables {
			var name, ddl string
			if err := db.Raw("SHOW CREATE TABLE `"+schema+"`.`"+tb+"`").Row().Scan(&name, &ddl); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, autoIncrement.ReplaceAllString(ddl, ""))
		}
	}
	for i, l := range lines {
		lines[i] = strings.ReplaceAll(l, schema+".", "S.")
	}
	slices.Sort(lines)
	if len(lines) == 0 {
		t.Fatalf("schema %s is empty", schema)
	}
	return lines
}

// sameSchemas fails the test unless every shard of r is like the schema
// ref on r's first database.
func sameSchemas(t *testing.T, r *shardid.Router, ref string) {
	t.Helper()
	dbs := r.Databases()
	want := dumpSchema(t, dbs[0], ref)
	for s := range r.LogicalShards() {
		got := dumpSchema(t, dbs[r.Map()[s]], r.Schema(s))
		if !slices.Equal(got, want) {
			t.Fatalf("shard %d (%s) differs from AutoMigrate's %s:\n got %s\nwant %s", s, r.Schema(s), ref,
				strings.Join(got, "\n     "), strings.Join(want, "\n     "))
		}
	}
}

// progressLog collects the progress reports of one Migrate.
type progressLog struct {
	mu  sync.Mutex
	got []shardid.MigrateProgress
}

func (p *progressLog) report(m shardid.MigrateProgress) {
	p.mu.Lock()
	p.got = append(p.got, m)
	p.mu.Unlock()
}

// last checks that Done grew at each report and ended at Total, and
// returns the last report.
func (p *progressLog) last(t *testing.T, total int) shardid.MigrateProgress {
	t.Helper()
	if len(p.got) == 0 {
		t.Fatal("Progress was never called")
	}
	for i, m := range p.got {
		if m.Total != total || i > 0 && m.Done <= p.got[i-1].Done {
			t.Fatalf("report %d: %+v after %+v, want Done growing to Total %d", i, m, p.got[max(i-1, 0)], total)
		}
	}
	m := p.got[len(p.got)-1]
	if m.Done != total {
		t.Fatalf("last report %+v, want Done %d", m, total)
	}
	return m
}

// migrateWith runs MigrateWith and returns its last progress report.
func migrateWith(t *testing.T, r *shardid.Router, models ...any) shardid.MigrateProgress {
	t.Helper()
	var p progressLog
	if err := r.MigrateWith(context.Background(), shardid.MigrateOptions{Progress: p.report}, models...); err != nil {
		t.Fatal(err)
	}
	return p.last(t, r.LogicalShards())
}

func TestMigrateMatchesAutoMigrate(t *testing.T) {
	for _, d := range migDialects {
		t.Run(d.name, func(t *testing.T) {
			dbs := d.open(t)
			const shards = 6
			r := migRouter(t, dbs, "migcmp", shards)
			ref := "migcmp_ref"
			plainMigrate(t, dbs[0], ref, migV1...)

			// A new shard gets AutoMigrate's statements.
			if m := migrateWith(t, r, migV1...); m.Altered != shards || m.AutoMigrated != 0 {
				t.Fatalf("first run: %+v, want every shard altered by the fast path", m)
			}
			sameSchemas(t, r, ref)

			// Nothing to do: no DDL at all.
			if m := migrateWith(t, r, migV1...); m.Altered != 0 {
				t.Fatalf("re-run: %+v, want nothing altered", m)
			}
			sameSchemas(t, r, ref)

			// Two columns added, one of them indexed: ALTER TABLE ADD and
			// CREATE INDEX, no AutoMigrate.
			plainMigrate(t, dbs[0], ref, migV2...)
			if m := migrateWith(t, r, migV2...); m.Altered != shards || m.AutoMigrated != 0 {
				t.Fatalf("added columns: %+v, want every shard altered by the fast path", m)
			}
			sameSchemas(t, r, ref)
			if m := migrateWith(t, r, migV2...); m.Altered != 0 {
				t.Fatalf("re-run after adding columns: %+v, want nothing altered", m)
			}
		})
	}
}

// TestMigrateRepairsShards damages shards in ways a crash or a hand edit
// leaves them, and checks that Migrate brings each back to AutoMigrate's
// result: a missing table and join table by the fast path, a changed
// column type through AutoMigrate.
func TestMigrateRepairsShards(t *testing.T) {
	for _, d := range migDialects {
		t.Run(d.name, func(t *testing.T) {
			dbs := d.open(t)
			const shards = 4
			r := migRouter(t, dbs, "migfix", shards)
			ref := "migfix_ref"
			plainMigrate(t, dbs[0], ref, migV2...)
			migrateWith(t, r, migV2...)

			q := func(s int, sql string) {
				t.Helper()
				if err := dbs[r.Map()[s]].Exec(fmt.Sprintf(sql, r.Schema(s))).Error; err != nil {
					t.Fatal(err)
				}
			}
			if d.name == "postgres" {
				q(0, `DROP TABLE "%s".mig_tags`)
				q(1, `DROP TABLE "%[1]s".mig_post_labels; DROP INDEX "%[1]s".idx_mig_tags_likes`)
				q(2, `ALTER TABLE "%s".mig_posts ALTER COLUMN body TYPE varchar(10)`)
			} else {
				q(0, "DROP TABLE `%s`.mig_tags")
				q(1, "DROP TABLE `%s`.mig_post_labels")
				q(1, "ALTER TABLE `%s`.mig_tags DROP INDEX idx_mig_tags_likes")
				q(2, "ALTER TABLE `%s`.mig_posts MODIFY body varchar(10)")
			}
			if m := migrateWith(t, r, migV2...); m.Altered != 3 || m.AutoMigrated != 1 {
				t.Fatalf("repair: %+v, want 3 shards altered, 1 (the changed type) through AutoMigrate", m)
			}
			sameSchemas(t, r, ref)
		})
	}
}

// TestMigrateCancel cancels Migrate while a statement waits for a lock,
// and expects an error that wraps the context's error, whatever the driver
// makes of the interruption.
func TestMigrateCancel(t *testing.T) {
	for _, d := range migDialects {
		t.Run(d.name, func(t *testing.T) {
			dbs := d.open(t)
			r := migRouter(t, dbs, "migcan", 4)
			if err := r.Migrate(context.Background(), migV1...); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				name   string
				ctx    func() (context.Context, context.CancelFunc)
				target error
			}{
				{"cancel", func() (context.Context, context.CancelFunc) {
					ctx, cancel := context.WithCancel(context.Background())
					time.AfterFunc(300*time.Millisecond, cancel)
					return ctx, cancel
				}, context.Canceled},
				{"deadline", func() (context.Context, context.CancelFunc) {
					return context.WithTimeout(context.Background(), 300*time.Millisecond)
				}, context.DeadlineExceeded},
			} {
				t.Run(tc.name, func(t *testing.T) {
					// Another session holds the shard's table: the ALTER
					// TABLE adding a column waits for it.
					db := dbs[r.Map()[0]]
					err := db.Connection(func(tx *gorm.DB) error {
						if d.name == "postgres" {
							if err := tx.Exec("BEGIN").Error; err != nil {
								return err
							}
							defer tx.Exec("ROLLBACK")
							if err := tx.Exec(`LOCK TABLE "` + r.Schema(0) + `".mig_tags IN ACCESS EXCLUSIVE MODE`).Error; err != nil {
								return err
							}
						} else {
							if err := tx.Exec("LOCK TABLES `" + r.Schema(0) + "`.mig_tags WRITE").Error; err != nil {
								return err
							}
							defer tx.Exec("UNLOCK TABLES")
						}
						ctx, cancel := tc.ctx()
						defer cancel()
						start := time.Now()
						err := r.Migrate(ctx, migV2...)
						if err == nil {
							t.Fatal("Migrate returned nil while its table was locked")
						}
						if !errors.Is(err, tc.target) {
							t.Fatalf("Migrate = %v, want an error wrapping %v", err, tc.target)
						}
						if time.Since(start) > 20*time.Second {
							t.Fatalf("Migrate returned after %v: it did not stop at the cancellation", time.Since(start))
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				})
			}
			// Once the lock is gone, Migrate finishes what it could not.
			if err := r.Migrate(context.Background(), migV2...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMigrateWaitsForAnotherMigrate runs two Migrates of the same shards
// at once, as two processes starting together do: both succeed.
func TestMigrateWaitsForAnotherMigrate(t *testing.T) {
	for _, d := range migDialects {
		t.Run(d.name, func(t *testing.T) {
			dbs := d.open(t)
			r := migRouter(t, dbs, "migtwo", 8)
			other, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, LogicalShards: 8, SchemaPattern: "migtwo_%02d"})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i, rr := range []*shardid.Router{r, other} {
				wg.Go(func() { errs[i] = rr.Migrate(context.Background(), migV1...) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			ref := "migtwo_ref"
			plainMigrate(t, dbs[0], ref, migV1...)
			sameSchemas(t, r, ref)
		})
	}
}

// TestMigrateWithoutSchemas reports progress per database.
func TestMigrateWithoutSchemas(t *testing.T) {
	dbs := []*gorm.DB{openSQLite(t), openSQLite(t), openSQLite(t)}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, LogicalShards: 6})
	if err != nil {
		t.Fatal(err)
	}
	var p progressLog
	if err := r.MigrateWith(context.Background(), shardid.MigrateOptions{Progress: p.report}, migV1...); err != nil {
		t.Fatal(err)
	}
	p.last(t, len(dbs))
	for i, db := range dbs {
		if !db.Migrator().HasTable(&MigTag{}) {
			t.Fatalf("database %d has no mig_tags", i)
		}
	}
}

// TestMigrateSchemasNeedAServer refuses schemas per shard on SQLite with a
// typed error naming the database.
func TestMigrateSchemasNeedAServer(t *testing.T) {
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{openSQLite(t)}, LogicalShards: 4, SchemaPattern: "s_%d"})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Migrate(context.Background(), migV1...)
	var se *shardid.ShardError
	if !errors.Is(err, shardid.ErrInvalidConfig) || !errors.As(err, &se) || se.Database != "db0" {
		t.Fatalf("Migrate on SQLite with schemas = %v, want ErrInvalidConfig in a *ShardError for db0", err)
	}
}

// TestMigrateCancelAnywhere lets Migrate's deadline pass at many points of
// a first run: within catalog queries, DDL, between shards. Every error
// must wrap context.DeadlineExceeded. (GORM's AutoMigrate drops the error of
// an interrupted existence check and goes on to fail on the closed
// connection with a bare "sql: connection is already closed".)
func TestMigrateCancelAnywhere(t *testing.T) {
	for _, d := range migDialects {
		t.Run(d.name, func(t *testing.T) {
			dbs := d.open(t)
			r := migRouter(t, dbs, "migany", 8)
			for _, delay := range []time.Duration{2, 10, 25, 45, 70, 100, 150, 220, 330, 500} {
				ctx, cancel := context.WithTimeout(context.Background(), delay*time.Millisecond)
				err := r.Migrate(ctx, migV1...)
				cancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("deadline after %v: Migrate = %v, want an error wrapping %v", delay*time.Millisecond, err, context.DeadlineExceeded)
				}
				dropMigSchemas(t, dbs, "migany")
			}
		})
	}
}

// TestMigrateSmallPools refuses at once, with ErrMigratePoolTooSmall, a
// pool of one connection (which would wait forever for a second one while
// the first holds the migration lock), and migrates through pools of two:
// the lock on one, the template, the catalog and the DDL on the other.
func TestMigrateSmallPools(t *testing.T) {
	for _, d := range migDialects {
		t.Run(d.name, func(t *testing.T) {
			dbs := d.open(t)
			setPool := func(n int) {
				for _, db := range dbs {
					sqlDB, err := db.DB()
					if err != nil {
						t.Fatal(err)
					}
					sqlDB.SetMaxOpenConns(n)
				}
			}
			r := migRouter(t, dbs, "migone", 6)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			setPool(1)
			start := time.Now()
			err := r.Migrate(ctx, migV1...)
			var se *shardid.ShardError
			if !errors.Is(err, shardid.ErrMigratePoolTooSmall) || !errors.As(err, &se) {
				t.Fatalf("Migrate with one connection per pool = %v, want ErrMigratePoolTooSmall in a *ShardError", err)
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("Migrate took %v to refuse a pool of one", time.Since(start))
			}

			setPool(2)
			var p progressLog
			if err := r.MigrateWith(ctx, shardid.MigrateOptions{Progress: p.report}, migV1...); err != nil {
				t.Fatalf("Migrate with two connections per pool: %v", err)
			}
			if m := p.last(t, 6); m.Altered != 6 || m.AutoMigrated != 0 {
				t.Fatalf("%+v, want every shard altered by the fast path", m)
			}
			if err := r.MigrateWith(ctx, shardid.MigrateOptions{}, migV2...); err != nil {
				t.Fatal(err)
			}
			ref := "migone_ref"
			plainMigrate(t, dbs[0], ref, migV1...)
			plainMigrate(t, dbs[0], ref, migV2...)
			sameSchemas(t, r, ref)
		})
	}
}
