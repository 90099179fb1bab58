package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// A move finds a row that differs on the target and that no change
// explains, fails with ErrCopyDiffers naming it, leaves the map alone and
// the source writable; a clean move of the same shard then succeeds.
func TestMoveVerifiesEveryRow(t *testing.T) {
	ownDatabases(t)
	cases := []struct {
		name string
		// at runs at the stage "created" or "copied", with the seeded rows.
		stage string
		at    func(t *testing.T, r *shardid.Router, rows []RPhoto) shardid.ID
		why   string
		// compare: MoveOptions.CompareSource, without which the copy
		// is checked against what it sent, not the source.
		compare bool
	}{
		{"a target row changed behind the mover", "copied", func(t *testing.T, r *shardid.Router, rows []RPhoto) shardid.ID {
			// Through the target's mover-only fence, and not in the change
			// log: only the comparison can see it.
			moverExec(t, r.Databases()[1], "UPDATE shardid_mv_0001.r_photos SET caption = 'tampered' WHERE id = $1", rows[7].ID)
			return rows[7].ID
		}, "different on the target", false},
		{"a source row deleted without the change log", "copied", func(t *testing.T, r *shardid.Router, rows []RPhoto) shardid.ID {
			// A superuser's session that fires no trigger.
			err := r.Databases()[0].Transaction(func(tx *gorm.DB) error {
				if err := tx.Exec("SET LOCAL session_replication_role = replica").Error; err != nil {
					return err
				}
				return tx.Exec("DELETE FROM shardid_mv_0001.r_photos WHERE id = ?", rows[3].ID).Error
			})
			if err != nil {
				t.Fatal(err)
			}
			return rows[3].ID
		}, "only on the target", true},
		{"a target that rewrites a copied row", "created", func(t *testing.T, r *shardid.Router, rows []RPhoto) shardid.ID {
			// A trigger on the target that fires even for the mover
			// (ENABLE ALWAYS), and a row that it rewrites: the comparison
			// after the copy sees it (TestApplyVerifiesEveryRow: the
			// apply's own check).
			dst := r.Databases()[1]
			for _, q := range []string{
				`CREATE FUNCTION shardid_mv_0001.mangle() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF NEW.caption = 'mangle me' THEN NEW.caption := 'MANGLED'; END IF; RETURN NEW; END $$`,
				`CREATE TRIGGER mangle BEFORE INSERT OR UPDATE ON shardid_mv_0001.r_photos FOR EACH ROW EXECUTE FUNCTION shardid_mv_0001.mangle()`,
				`ALTER TABLE shardid_mv_0001.r_photos ENABLE ALWAYS TRIGGER mangle`,
			} {
				if err := dst.Exec(q).Error; err != nil {
					t.Fatal(err)
				}
			}
			if err := r.ForKey(rows[5].UserID).Model(&RPhoto{}).Where("id = ?", rows[5].ID).Update("caption", "mangle me").Error; err != nil {
				t.Fatal(err)
			}
			return rows[5].ID
		}, "different on the target", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, c, _ := freshMoveSetup(t)
			rows := seedShard(t, r, 1, 300)
			var bad shardid.ID
			_, err := reshard.MoveShard(context.Background(), r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 100,
				CompareSource: tc.compare,
				OnStage: func(s string) {
					if s == tc.stage {
						bad = tc.at(t, r, rows)
					}
				}})
			if !errors.Is(err, reshard.ErrCopyDiffers) {
				t.Fatalf("move: %v, want ErrCopyDiffers", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("id %d (%s", bad, tc.why)) {
				t.Errorf("the error does not name id %d (%s): %v", bad, tc.why, err)
			}
			if r.DatabaseName(1) != "pg1" {
				t.Fatal("a move whose copies differ flipped the map")
			}
			if err := r.ForKey(1).Create(&RPhoto{UserID: 1}).Error; err != nil {
				t.Errorf("the source after the failed move: %v", err)
			}
			noCapture(t, r.Databases()[0], "shardid_mv_0001")
			// The copy is made again from scratch: the move succeeds, with
			// the target trigger gone.
			r.Databases()[1].Exec("DROP SCHEMA shardid_mv_0001 CASCADE")
			res, err := reshard.MoveShard(context.Background(), r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}})
			if err != nil {
				t.Fatal(err)
			}
			var n int64
			r.Databases()[0].Raw("SELECT count(*) FROM shardid_mv_0001.r_photos").Scan(&n)
			if res.Tables[0].Rows != n {
				t.Errorf("the move checked %d rows, the source has %d", res.Tables[0].Rows, n)
			}
		})
	}
}

// Without MoveOptions.CompareSource a move reads the source's rows once:
// the copy is checked against the sums of the rows it sent, and the
// source is not compared again. A row deleted from the source after the
// copy read it, by a session that fires no trigger, is then not seen (the
// price of leaving CompareSource out, as documented; with it the move
// fails: TestMoveVerifiesEveryRow), and a row changed on the target
// behind the mover still is (TestMoveVerifiesEveryRow, TestCopyVerifiesItself).
func TestMoveCopyVerifiesItself(t *testing.T) {
	ownDatabases(t)
	r, c, _ := freshMoveSetup(t)
	rows := seedShard(t, r, 1, 300)
	res, err := reshard.MoveShard(context.Background(), r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 100,
		OnStage: func(s string) {
			if s != "copied" {
				return
			}
			err := r.Databases()[0].Transaction(func(tx *gorm.DB) error {
				if err := tx.Exec("SET LOCAL session_replication_role = replica").Error; err != nil {
					return err
				}
				return tx.Exec("DELETE FROM shardid_mv_0001.r_photos WHERE id = ?", rows[3].ID).Error
			})
			if err != nil {
				t.Error(err)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tables[0].Rows != 300 {
		t.Errorf("the move checked %d rows, want the 300 it copied: it compared the source again", res.Tables[0].Rows)
	}
}

// A change applied after the comparison (here under the fence) is
// verified as it is written: a target that rewrites it fails the copy,
// though the comparison found every row equal.
func TestApplyVerifiesEveryRow(t *testing.T) {
	ownDatabases(t)
	src, dst := openPostgres(t), openSecondPostgresTB(t)
	const schema = "shardid_apply_0001"
	for _, db := range []*gorm.DB{src, dst} {
		db.Exec(`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`)
		if err := db.Exec(`CREATE SCHEMA ` + schema + `; CREATE TABLE ` + schema + `.items (id bigint PRIMARY KEY, v text)`).Error; err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`CREATE FUNCTION ` + schema + `.mangle() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.v = 'mangle me' THEN NEW.v := 'MANGLED'; END IF; RETURN NEW; END $$`,
		`CREATE TRIGGER mangle BEFORE INSERT OR UPDATE ON ` + schema + `.items FOR EACH ROW EXECUTE FUNCTION ` + schema + `.mangle()`,
		`ALTER TABLE ` + schema + `.items ENABLE ALWAYS TRIGGER mangle`,
		`INSERT INTO ` + schema + `.items SELECT g, 'v' || g FROM generate_series(1, 300) g`,
	} {
		db := dst
		if strings.HasPrefix(q, "INSERT") {
			db = src
		}
		if err := db.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	_, err := reshard.CopyShard(context.Background(), src, dst, schema, []string{"items"}, func() {
		src.Exec(`UPDATE ` + schema + `.items SET v = 'mangle me' WHERE id = 42`)
	})
	if !errors.Is(err, reshard.ErrCopyDiffers) || !strings.Contains(err.Error(), "id 42 (different on the target") {
		t.Fatalf("copy: %v, want ErrCopyDiffers naming id 42", err)
	}
}

// moverExec runs q on db in a transaction that the target's mover-only
// fence lets through.
func moverExec(t *testing.T, db *gorm.DB, q string, args ...any) {
	t.Helper()
	err := db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("SELECT set_config('shardid.mover', 'on', true)").Error; err != nil {
			return err
		}
		return tx.Exec(q, args...).Error
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The sums a move reports are the target's, kept through every write of
// the mover: equal to a sum taken over the source after the move.
func TestMoveTableCheckMatchesTheSource(t *testing.T) {
	ownDatabases(t)
	r, c, _ := freshMoveSetup(t)
	rows := seedShard(t, r, 1, 500)
	res, err := reshard.MoveShard(context.Background(), r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 50,
		OnStage: func(s string) {
			if s != "copied" {
				return
			}
			// Changes of every kind after the snapshot: the apply keeps
			// the sums.
			for i, ph := range rows[:60] {
				var err error
				switch i % 3 {
				case 0:
					err = r.ForKey(ph.UserID).Model(&RPhoto{}).Where("id = ?", ph.ID).Update("caption", "changed").Error
				case 1:
					err = r.ForKey(ph.UserID).Where("id = ?", ph.ID).Delete(&RPhoto{}).Error
				case 2:
					err = r.ForKey(ph.UserID).Create(&RPhoto{UserID: ph.UserID, Caption: "added"}).Error
				}
				if err != nil {
					t.Error(err)
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		N   int64
		Sum string
	}
	// The same hash as the move's (TableCheck's: each column by its
	// type's hash function, seeded by its place), summed modulo 2^64 by
	// the database.
	r.Databases()[0].Raw(`SELECT count(*) AS n, (coalesce(sum(h::numeric), 0) % 18446744073709551616)::text AS sum FROM (
		SELECT CASE WHEN x < 0 THEN x + 18446744073709551616 ELSE x END AS h FROM (
		SELECT (coalesce(hashint8extended(id, 1) # hashint8extended(id >> 32, -1), 1) #
			coalesce(hashint8extended(user_id, 2) # hashint8extended(user_id >> 32, -2), 2) #
			coalesce(hashtextextended(caption COLLATE "C", 3), 3))::numeric AS x FROM shardid_mv_0001.r_photos) a) b`).Scan(&want)
	got := res.Tables[0]
	if got.Rows != want.N || fmt.Sprint(got.Checksum) != want.Sum {
		t.Errorf("the move reports %d rows, sum %d; the source has %d rows, sum %s", got.Rows, got.Checksum, want.N, want.Sum)
	}
	if want.N != 500-20+20 {
		t.Errorf("the source has %d rows, want 500", want.N)
	}
}

// Sessions whose settings print values differently (PostgreSQL: DateStyle,
// TimeZone, IntervalStyle, extra_float_digits, bytea_output; MySQL:
// time_zone) on the source and the target: the copy and the changes
// arrive unchanged, and the comparison finds them equal.
func TestMoveAcrossSessionSettingsPostgres(t *testing.T) {
	ownDatabases(t)
	openSecondPostgresTB(t) // creates the second database when needed
	src, err := gorm.Open(postgres.Open(postgresDSN(t, 0)+" DateStyle='SQL, DMY' TimeZone=Asia/Tokyo IntervalStyle=sql_standard extra_float_digits=-3 bytea_output=escape"), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, src)
	dst, err := gorm.Open(postgres.Open(postgresDSN(t, 1)+" DateStyle='German' TimeZone=America/Los_Angeles"), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, dst)
	const schema = "shardid_settings_0001"
	for _, db := range []*gorm.DB{src, dst} {
		db.Exec(`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`)
		if err := db.Exec(`CREATE SCHEMA ` + schema + `; CREATE TABLE ` + schema + `.vals (id bigint PRIMARY KEY,
			d date, ts timestamptz, t timestamp, iv interval, f float8, b bytea, g bigint GENERATED ALWAYS AS (id * 2) STORED)`).Error; err != nil {
			t.Fatal(err)
		}
	}
	insert := func(id int) {
		if err := src.Exec(`INSERT INTO `+schema+`.vals VALUES (?, DATE '2026-03-04' + ?::int, TIMESTAMPTZ '2026-11-22 23:30:00.123456+00' + ? * interval '1 hour',
			TIMESTAMP '2026-01-02 03:04:05.6', ? * interval '1 day 2 hours', 0.1 + ?, '\x00ff10'::bytea)`, id, id, id, id, id).Error; err != nil {
			t.Fatal(err)
		}
	}
	for id := 1; id <= 200; id++ {
		insert(id)
	}
	_, err = reshard.CopyShard(context.Background(), src, dst, schema, []string{"vals"}, func() {
		for id := 201; id <= 220; id++ { // applied under the "fence"
			insert(id)
		}
		src.Exec(`UPDATE ` + schema + `.vals SET f = f * 3, d = d + 1 WHERE id % 7 = 0`)
	})
	if err != nil {
		t.Fatal(err)
	}
	read := func(db *gorm.DB) []string {
		var out []string
		err := db.Transaction(func(tx *gorm.DB) error {
			tx.Exec("SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO, MDY'; SET LOCAL IntervalStyle = 'postgres'; SET LOCAL extra_float_digits = 3; SET LOCAL bytea_output = 'hex'")
			return tx.Raw(`SELECT ROW(id, d, ts, t, iv, f, b, g)::text FROM ` + schema + `.vals ORDER BY id`).Scan(&out).Error
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if a, b := read(src), read(dst); !reflect.DeepEqual(a, b) || len(a) != 220 {
		t.Errorf("the copy differs: %d rows on the source, %d on the target; first source row %q", len(a), len(b), a[0])
	}
}

func TestMoveAcrossSessionSettingsMariaDB(t *testing.T) {
	openMySQL(t) // the server is up, or the test skips (locally) or fails (CI)
	inst := startMariaDBInstance(t)
	// The source's sessions in +09:00, the target's in -08:00: a TIMESTAMP
	// is read and written in the session's time zone.
	dsn := envOr("SHARDID_TEST_MYSQL_DSN", testdb.DefaultMySQLDSN)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	src, err := gorm.Open(mysql.Open(dsn+sep+"time_zone=%27%2B09%3A00%27"), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, src)
	dst, err := gorm.Open(mysql.Open(inst.DSN("test")+"&time_zone=%27-08%3A00%27"), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, dst)
	const schema = "shardid_settings_0001"
	for _, db := range []*gorm.DB{src, dst} {
		db.Exec("DROP DATABASE IF EXISTS " + schema)
		if err := db.Exec("CREATE DATABASE " + schema).Error; err != nil {
			t.Fatal(err)
		}
		if err := db.Exec("CREATE TABLE " + schema + ".vals (id BIGINT PRIMARY KEY, ts TIMESTAMP(6) NULL, dt DATETIME(6), s VARCHAR(20), g BIGINT AS (id DIV 2) VIRTUAL)").Error; err != nil {
			t.Fatal(err)
		}
	}
	insert := func(id int) {
		if err := src.Exec("INSERT INTO "+schema+".vals (id, ts, dt, s) VALUES (?, TIMESTAMP '2026-11-22 23:30:00.5' + INTERVAL ? HOUR, '2026-01-02 03:04:05.6', IF(? % 5 = 0, NULL, 'x'))", id, id, id).Error; err != nil {
			t.Fatal(err)
		}
	}
	for id := 1; id <= 200; id++ {
		insert(id)
	}
	// The lowest key there is: the copy in batches starts below it.
	if err := src.Exec("INSERT INTO "+schema+".vals (id, ts, dt, s) VALUES (?, NULL, NULL, 'lowest')", math.MinInt64).Error; err != nil {
		t.Fatal(err)
	}
	_, err = reshard.CopyShard(context.Background(), src, dst, schema, []string{"vals"}, func() {
		for id := 201; id <= 220; id++ {
			insert(id)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	read := func(db *gorm.DB) []string {
		var out []string
		err := db.Connection(func(tx *gorm.DB) error {
			tx.Exec("SET time_zone = '+00:00'")
			defer tx.Exec("SET time_zone = SYSTEM")
			return tx.Raw("SELECT CONCAT_WS('|', id, ts, dt, QUOTE(s), g) FROM " + schema + ".vals ORDER BY id").Scan(&out).Error
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if a, b := read(src), read(dst); !reflect.DeepEqual(a, b) || len(a) != 221 {
		t.Errorf("the copy differs: %d rows on the source, %d on the target; first %q vs %q", len(a), len(b), a[0], b[0])
	}
}

// Two rows that swap the values of another unique index while the shard
// moves: the apply in place (an upsert) meets the unique index, and the
// move applies those rows again as a delete and an insert.
func TestMoveUniqueSwap(t *testing.T) {
	ownDatabases(t)
	for _, side := range []string{"postgres", "mariadb"} {
		t.Run(side, func(t *testing.T) {
			var src, dst *gorm.DB
			if side == "postgres" {
				src, dst = openPostgres(t), openSecondPostgresTB(t)
			} else {
				src, dst = openMySQL(t), openMariaDBInstance(t)
			}
			const schema = "shardid_swap_0001"
			for _, db := range []*gorm.DB{src, dst} {
				if side == "postgres" {
					db.Exec(`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`)
					db.Exec(`CREATE SCHEMA ` + schema)
				} else {
					db.Exec("DROP DATABASE IF EXISTS " + schema)
					db.Exec("CREATE DATABASE " + schema)
				}
				if err := db.Exec("CREATE TABLE " + schema + ".users (id BIGINT PRIMARY KEY, email VARCHAR(50) NOT NULL UNIQUE)").Error; err != nil {
					t.Fatal(err)
				}
			}
			for id := 1; id <= 3000; id += 500 {
				var vals []string
				for k := id; k < id+500; k++ {
					vals = append(vals, fmt.Sprintf("(%d, 'u%d@example.com')", k, k))
				}
				if err := src.Exec("INSERT INTO " + schema + ".users VALUES " + strings.Join(vals, ", ")).Error; err != nil {
					t.Fatal(err)
				}
			}
			swap := func(a, b int) {
				err := src.Transaction(func(tx *gorm.DB) error {
					for _, q := range []string{
						fmt.Sprintf("UPDATE %s.users SET email = 'swapping' WHERE id = %d", schema, a),
						fmt.Sprintf("UPDATE %s.users SET email = 'u%d@example.com' WHERE id = %d", schema, a, b),
						fmt.Sprintf("UPDATE %s.users SET email = 'u%d@example.com' WHERE id = %d", schema, b, a),
					} {
						if err := tx.Exec(q).Error; err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			checks, err := reshard.CopyShard(context.Background(), src, dst, schema, []string{"users"}, func() {
				swap(3, 4)
				swap(10, 20)
				// Row 30 is logged first, 1,200 others after it, and then
				// 30 and 31 swap: 31 comes in a later chunk of changes
				// than 30, which takes 31's old value.
				src.Exec("UPDATE " + schema + ".users SET email = email WHERE id = 30")
				src.Exec("UPDATE " + schema + ".users SET email = email WHERE id BETWEEN 100 AND 1300")
				swap(30, 31)
				// A chain across chunks: 2001 lets go of its value, 2002 to
				// 2900 each take the one below, and 2001 takes 2900's.
				err := src.Transaction(func(tx *gorm.DB) error {
					if err := tx.Exec("UPDATE " + schema + ".users SET email = 'chain' WHERE id = 2001").Error; err != nil {
						return err
					}
					for id := 2002; id <= 2900; id++ {
						if err := tx.Exec(fmt.Sprintf("UPDATE %s.users SET email = 'u%d@example.com' WHERE id = %d", schema, id-1, id)).Error; err != nil {
							return err
						}
					}
					return tx.Exec("UPDATE " + schema + ".users SET email = 'u2900@example.com' WHERE id = 2001").Error
				})
				if err != nil {
					t.Fatal(err)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			var a, b []string
			src.Raw("SELECT email FROM " + schema + ".users ORDER BY id").Scan(&a)
			dst.Raw("SELECT email FROM " + schema + ".users ORDER BY id").Scan(&b)
			if !reflect.DeepEqual(a, b) || a[2] != "u4@example.com" || a[29] != "u31@example.com" || a[2000] != "u2900@example.com" || a[2001] != "u2001@example.com" {
				t.Errorf("after the swaps the target differs: %v vs %v", a[:5], b[:5])
			}
			// The rows taken off the target and written again leave the
			// totals exact.
			if checks[0].Rows != int64(len(a)) {
				t.Errorf("the copy counts %d rows, the source has %d", checks[0].Rows, len(a))
			}
		})
	}
}

// On MySQL a move refuses tables with a cascading foreign key: MySQL fires
// no trigger for the rows a cascade changes.
func TestMoveRefusesMySQLCascades(t *testing.T) {
	src := openMySQL(t)
	dst := openMariaDBInstance(t)
	src.Exec("DROP DATABASE IF EXISTS shardid_fk_0000")
	src.Exec("DROP DATABASE IF EXISTS shardid_fk_0001")
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{src, dst}, Names: []string{"my1", "my2"},
		LogicalShards: 2, SchemaPattern: "shardid_fk_%04d", Plugin: p, Map: []int{0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE DATABASE shardid_fk_0001",
		"CREATE TABLE shardid_fk_0001.parents (id BIGINT PRIMARY KEY)",
		"CREATE TABLE shardid_fk_0001.kids (id BIGINT PRIMARY KEY, parent_id BIGINT, FOREIGN KEY (parent_id) REFERENCES shardid_fk_0001.parents (id) ON DELETE CASCADE)",
	} {
		if err := src.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	_, err = reshard.MoveShard(context.Background(), r, nil, 1, "my2", reshard.MoveOptions{Tables: []string{"parents", "kids"}})
	if !errors.Is(err, shardid.ErrInvalidConfig) || !strings.Contains(err.Error(), "ON DELETE CASCADE") {
		t.Fatalf("move of a shard with a cascading key: %v, want ErrInvalidConfig naming it", err)
	}
	var n int64
	dst.Raw("SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'shardid_fk_0001'").Scan(&n)
	if n != 0 {
		t.Error("the refused move created the shard on the target")
	}
}

// On PostgreSQL a TRUNCATE of a moving shard's table, which the change log
// could not record, is refused until the move ends.
func TestMoveRefusesTruncate(t *testing.T) {
	ownDatabases(t)
	r, c, _ := freshMoveSetup(t)
	seedShard(t, r, 1, 100)
	var truncErr error
	res, err := reshard.MoveShard(context.Background(), r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}},
		OnStage: func(s string) {
			if s == "copied" {
				truncErr = r.Databases()[0].Exec("TRUNCATE shardid_mv_0001.r_photos").Error
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if truncErr == nil || !strings.Contains(truncErr.Error(), "cannot be truncated while its shard moves") {
		t.Fatalf("TRUNCATE during the move: %v, want it refused", truncErr)
	}
	if res.Tables[0].Rows != 100 {
		t.Errorf("moved %d rows, want 100", res.Tables[0].Rows)
	}
}

// A writer's transaction that stays open on the shard's table (a paused
// process, a long batch) while the move creates its triggers and sets its
// fence: the move waits for it a little at a time, so the other writers
// are never held back for the length of that transaction, and the fence
// counts only from its last try.
func TestMoveDoesNotQueueWritersBehindALongTransaction(t *testing.T) {
	ownDatabases(t)
	r, c, _ := freshMoveSetup(t)
	seedShard(t, r, 1, 200)
	longTransactionMove(t, r, c, "shardid_mv_0001", "pg2", 3*time.Second, 2*time.Second)
}

// The same on MariaDB, whose lock waits count seconds: each try waits 1 s
// at most.
func TestMoveDoesNotQueueWritersBehindALongTransactionMariaDB(t *testing.T) {
	src := openMySQL(t)
	for s := range moveShards {
		src.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS shardid_lt_%04d", s))
	}
	dst := openMariaDBInstance(t)
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{src, dst}, Names: []string{"my1", "my2"},
		LogicalShards: moveShards, SchemaPattern: "shardid_lt_%04d", Plugin: movePlugin(t, 0), Map: make([]int, moveShards)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(context.Background(), &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	seedShard(t, r, 1, 200)
	longTransactionMove(t, r, nil, "shardid_lt_0001", "my2", 4*time.Second, 2500*time.Millisecond)
}

// longTransactionMove moves shard 1 of r to target while a transaction
// holds a row of schema.r_photos for hold, once when the move creates its
// triggers and once when it sets its fence, and a writer writes to the
// shard: no write of it may wait longer than maxStall.
func longTransactionMove(t *testing.T, r *shardid.Router, c *reshard.Catalog, schema, target string, hold, maxStall time.Duration) {
	src := r.Databases()[0]
	holdOpen := func(id int64) chan error {
		done := make(chan error, 1)
		go func() {
			done <- src.Transaction(func(tx *gorm.DB) error {
				if err := tx.Exec("INSERT INTO "+schema+".r_photos (id, user_id, caption) VALUES (?, 1, 'long')", id).Error; err != nil {
					return err
				}
				time.Sleep(hold)
				return nil
			})
		}()
		return done
	}
	stop := runWriters(t, 1, func(_, i int) error {
		u := int64(1 + moveShards*i)
		return r.ForKey(u).Create(&RPhoto{UserID: u, Caption: "w"}).Error
	})
	first := holdOpen(1) // open when the move creates its triggers
	time.Sleep(100 * time.Millisecond)
	var second chan error
	start := time.Now()
	res, err := reshard.MoveShard(context.Background(), r, c, 1, target, reshard.MoveOptions{Models: []any{&RPhoto{}},
		OnStage: func(s string) {
			if s == "copied" {
				second = holdOpen(2) // open when the move sets its fence
				time.Sleep(100 * time.Millisecond)
			}
		}})
	took := time.Since(start)
	seen := stop()
	stall, ops := seen.stall, seen.ops
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("moved in %v, fenced %v; the writer's longest stall %v over %d writes", took, res.Fenced, stall, ops)
	if took < 2*hold-200*time.Millisecond {
		t.Fatalf("the move took %v: it did not wait for the open transactions", took)
	}
	// One lock wait at a time, and slack for a busy machine: far from the
	// length of the open transaction.
	if stall > maxStall {
		t.Errorf("a writer waited %v behind the move's lock requests", stall)
	}
	if res.Fenced > maxStall {
		t.Errorf("fenced for %v: the waits before the fence count", res.Fenced)
	}
	var n int64
	r.Databases()[1].Raw("SELECT count(*) FROM " + schema + ".r_photos WHERE id IN (1, 2)").Scan(&n)
	if n != 2 {
		t.Errorf("%d of the 2 rows of the long transactions on the target", n)
	}
}

// A mover that is not a PostgreSQL superuser writes on the target with its
// foreign keys in force: a cascading key between the shard's tables is
// refused before the move changes anything, as on MySQL.
func TestMoveRefusesCascadesForANonSuperuser(t *testing.T) {
	ownDatabases(t)
	src := openPostgres(t)
	openSecondPostgresTB(t)
	src.Exec("DROP SCHEMA IF EXISTS shardid_nsu_0001 CASCADE")
	mover := testdb.PostgresRole(t, "nsu_mover")
	dsn := postgresDSN(t, 1)
	dst, err := gorm.Open(postgres.Open(testdb.WithPostgresField(dsn, "user", mover)), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, dst)
	var super string
	if err := dst.Raw("SELECT current_setting('is_superuser')").Scan(&super).Error; err != nil || super != "off" {
		t.Fatalf("the mover's role: superuser %q, %v", super, err)
	}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{src, dst}, Names: []string{"pg1", "pg2"},
		LogicalShards: 2, SchemaPattern: "shardid_nsu_%04d", Plugin: p, Map: []int{0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE SCHEMA shardid_nsu_0001",
		"CREATE TABLE shardid_nsu_0001.parents (id bigint PRIMARY KEY)",
		"CREATE TABLE shardid_nsu_0001.kids (id bigint PRIMARY KEY, parent_id bigint REFERENCES shardid_nsu_0001.parents (id) ON DELETE SET NULL)",
	} {
		if err := src.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	_, err = reshard.MoveShard(context.Background(), r, nil, 1, "pg2", reshard.MoveOptions{Tables: []string{"parents", "kids"}})
	if !errors.Is(err, shardid.ErrInvalidConfig) || !strings.Contains(err.Error(), "ON DELETE SET NULL") || !strings.Contains(err.Error(), "not a superuser") {
		t.Fatalf("move by a non-superuser of a shard with a cascading key: %v, want ErrInvalidConfig naming it", err)
	}
	var n int64
	dst.Raw("SELECT count(*) FROM pg_namespace WHERE nspname = 'shardid_nsu_0001'").Scan(&n)
	if n != 0 {
		t.Error("the refused move created the shard on the target")
	}
}

// A step that cannot get its locks within its bound (a transaction stays
// open on the shard's table) gives up with ErrLockWait, having held the
// other writers back one short wait at a time.
func TestFenceGivesUpWithErrLockWait(t *testing.T) {
	defer reshard.SetMaxLockRetry(t, time.Second)()
	r, _, _ := freshMoveSetup(t)
	seedShard(t, r, 1, 10)
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- r.Databases()[0].Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec("INSERT INTO shardid_mv_0001.r_photos (id, user_id, caption) VALUES (1, 1, 'open')").Error; err != nil {
				return err
			}
			close(held)
			time.Sleep(3 * time.Second)
			return nil
		})
	}()
	<-held
	start := time.Now()
	err := reshard.Fence(context.Background(), r, 1, []any{&RPhoto{}}, time.Minute)
	took := time.Since(start)
	if !errors.Is(err, reshard.ErrLockWait) {
		t.Fatalf("Fence beside an open transaction: %v, want ErrLockWait", err)
	}
	if took > 2500*time.Millisecond {
		t.Errorf("gave up after %v, bound 1 s", took)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Nothing fenced: the writers go on.
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1}).Error; err != nil {
		t.Errorf("after the Fence that gave up: %v", err)
	}
}
