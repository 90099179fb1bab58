package shardsql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardsql"
	gmysql "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// idOf returns an ID of logical shard s.
func idOf(t testing.TB, s, seq int) shardid.ID {
	t.Helper()
	id, err := shardid.Instagram.Compose(shardid.Parts{Time: time.Now(), Shard: s, Seq: seq})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

var uniq atomic.Int64

// prefix returns a schema prefix no other test uses.
func prefix() string {
	return fmt.Sprintf("sq%d_%d_", time.Now().UnixNano()%1_000_000_000, uniq.Add(1))
}

// offline returns two pools that never connect (sql.Open only), for tests
// of routing.
func offline(t *testing.T) []*sql.DB {
	var dbs []*sql.DB
	for range 2 {
		db, err := sql.Open("pgx", "host=127.0.0.1 port=1 dbname=none")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		dbs = append(dbs, db)
	}
	return dbs
}

func TestRoute(t *testing.T) {
	dbs := offline(t)
	m, err := shardmap.New(shardmap.Config{Databases: []string{"a", "b"}, LogicalShards: 4, SchemaPattern: "shard_%02d", Shared: []int{3}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardsql.New(shardsql.Config{Databases: dbs, Map: m, SchemaAlias: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Dialect() != "postgres" {
		t.Errorf("dialect %q, want postgres (told from pgx's stdlib)", r.Dialect())
	}
	sh := r.ForShard(1)
	if sh.DB != dbs[0] || sh.Shard != 1 || sh.Schema != "shard_01" || sh.Database != "a" || sh.Err() != nil {
		t.Errorf("ForShard(1) = %v", sh)
	}
	if got := sh.Table("photos"); got != "shard_01.photos" {
		t.Errorf("Table = %q", got)
	}
	if sh := r.ForID(idOf(t, 2, 7)); sh.DB != dbs[1] || sh.Shard != 2 || sh.Database != "b" {
		t.Errorf("ForID(shard 2) = %v", sh)
	}
	if sh := r.ForKey(6); sh.Shard != 2 {
		t.Errorf("ForKey(6) = %v, want shard 2", sh)
	}
	// Table names made concurrently, for many tables, are each right.
	done := make(chan bool)
	for g := range 8 {
		go func() {
			defer func() { done <- true }()
			for i := range 40 {
				name := fmt.Sprint("t", (g+i)%20)
				if got := r.ForShard(i % 3).Table(name); got != fmt.Sprintf("shard_%02d.%s", i%3, name) {
					t.Errorf("Table(%q) on shard %d = %q", name, i%3, got)
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	// A shared shard's tables are the database's own.
	if sh := r.ForShard(3); sh.Schema != "" || sh.Table("photos") != "photos" {
		t.Errorf("shared shard: %v, table %q", sh, sh.Table("photos"))
	}
	if q, err := r.ForShard(3).SQL("SELECT * FROM {{schema}}.photos JOIN app.users u ON true"); err != nil || q != "SELECT * FROM photos JOIN users u ON true" {
		t.Errorf("shared shard SQL = %q, %v", q, err)
	}
	for _, c := range []struct{ in, want string }{
		{"SELECT * FROM {{schema}}.photos WHERE id = $1", `SELECT * FROM "shard_01".photos WHERE id = $1`},
		{"SELECT * FROM app.photos WHERE id = $1", `SELECT * FROM "shard_01".photos WHERE id = $1`},
		{"SELECT * FROM shard_01.photos", "SELECT * FROM shard_01.photos"},
	} {
		if got, err := sh.SQL(c.in); got != c.want || err != nil {
			t.Errorf("SQL(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	// Unrouted SQL is refused, and runs nothing: the pool is never asked.
	_, err = sh.ExecContext(context.Background(), "DELETE FROM photos")
	var se *shardid.ShardError
	if !errors.Is(err, shardid.ErrUnroutedSQL) || !errors.As(err, &se) || se.Shard != 1 || se.Database != "a" {
		t.Errorf("unrouted Exec: %v", err)
	}
	if err := sh.QueryRowContext(context.Background(), "SELECT * FROM photos").Scan(new(int)); !errors.Is(err, shardid.ErrUnroutedSQL) {
		t.Errorf("unrouted QueryRow: %v", err)
	}
	if q, err := sh.Unrouted().SQL("SELECT now()"); err != nil || q != "SELECT now()" {
		t.Errorf("Unrouted: %q, %v", q, err)
	}
	// Out of range.
	for _, bad := range []shardsql.Shard{r.ForShard(4), r.ForShard(-1), r.ForKey(-5)} {
		if !errors.Is(bad.Err(), shardid.ErrShardRange) {
			t.Errorf("%v: Err() = %v", bad, bad.Err())
		}
		if _, err := bad.ExecContext(context.Background(), "SELECT 1 FROM {{schema}}.x"); !errors.Is(err, shardid.ErrShardRange) {
			t.Errorf("%v: Exec: %v", bad, err)
		}
	}
	if sh := r.ForID(idOf(t, 100, 0)); !errors.Is(sh.Err(), shardid.ErrShardRange) {
		t.Errorf("ID of shard 100 of 4: %v", sh.Err())
	}
	// A Shard no router made fails, without a panic.
	var zero shardsql.Shard
	if _, err := zero.ExecContext(context.Background(), "SELECT 1"); !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Errorf("zero Shard: %v", err)
	}
	if _, err := zero.BeginTx(context.Background(), nil); !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Errorf("zero Shard: %v", err)
	}
	// A change of the map reaches the router at once.
	if err := m.Set([]int{1, 1, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if sh := r.ForShard(1); sh.DB != dbs[1] || sh.Database != "b" {
		t.Errorf("after Set: ForShard(1) = %v", sh)
	}
}

func TestNewErrors(t *testing.T) {
	dbs := offline(t)
	m, _ := shardmap.New(shardmap.Config{Databases: []string{"a", "b"}, LogicalShards: 4, SchemaPattern: "shard_%02d"})
	small, _ := shardid.NewLayout(shardid.LayoutConfig{TimeBits: 41, ShardBits: 1, SeqBits: 10, Unit: time.Millisecond, Epoch: shardid.Instagram.Epoch()})
	for name, cfg := range map[string]shardsql.Config{
		"no map":        {Databases: dbs},
		"one database":  {Databases: dbs[:1], Map: m},
		"nil database":  {Databases: []*sql.DB{dbs[0], nil}, Map: m},
		"dialect":       {Databases: dbs, Map: m, Dialect: "oracle"},
		"alias":         {Databases: dbs, Map: m, SchemaAlias: "Bad-Name"},
		"alias schema":  {Databases: dbs, Map: m, SchemaAlias: "shard_02"},
		"layout shards": {Databases: dbs, Map: m, Layout: small},
	} {
		if name == "layout shards" && small == (shardid.Layout{}) {
			continue
		}
		if _, err := shardsql.New(cfg); !errors.Is(err, shardid.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// fixture is a router over two databases of one server, with 4 logical
// shards in schemas (MySQL: databases) of the test's own, each with a
// photos table.
type fixture struct {
	kind   string
	dbs    []*sql.DB
	m      *shardmap.Map
	r      *shardsql.Router
	prefix string
}

func newFixture(t *testing.T, kind string) *fixture { return newFixtureTB(t, kind) }

// newFixtureB is newFixture on PostgreSQL for a benchmark.
func newFixtureB(b *testing.B) *fixture { return newFixtureTB(b, "postgres") }

func newFixtureTB(t testing.TB, kind string) *fixture {
	t.Helper()
	f := &fixture{kind: kind, dbs: []*sql.DB{testdb.OpenSQL(t, kind, ""), testdb.OpenSQL(t, kind, "shardid_test2")}, prefix: prefix()}
	var err error
	f.m, err = shardmap.New(shardmap.Config{Databases: []string{"one", "two"}, LogicalShards: 4, SchemaPattern: f.prefix + "%02d"})
	if err != nil {
		t.Fatal(err)
	}
	f.r, err = shardsql.New(shardsql.Config{Databases: f.dbs, Map: f.m, SchemaAlias: "app"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for s := range 4 {
		schema := f.m.SchemaOf(s)
		for _, db := range f.dbs {
			t.Cleanup(func() { f.drop(db, schema) })
		}
		db := f.dbs[f.m.Load().DB(s)]
		create := "CREATE SCHEMA " + schema
		if kind == "mysql" {
			create = "CREATE DATABASE " + schema
		}
		for _, q := range []string{create, "CREATE TABLE " + schema + ".photos (id BIGINT PRIMARY KEY, title VARCHAR(200) NOT NULL)"} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
	}
	return f
}

func (f *fixture) drop(db *sql.DB, schema string) {
	q := "DROP SCHEMA IF EXISTS " + schema + " CASCADE"
	if f.kind == "mysql" {
		q = "DROP DATABASE IF EXISTS " + schema
	}
	db.Exec(q)
}

// gormRouter returns a GORM router over f's databases with f's map, as
// reshard needs one.
func (f *fixture) gormRouter(t testing.TB) *shardid.Router {
	t.Helper()
	var gdbs []*gorm.DB
	for _, db := range f.dbs {
		var d gorm.Dialector = postgres.New(postgres.Config{Conn: db})
		if f.kind == "mysql" {
			d = gmysql.New(gmysql.Config{Conn: db})
		}
		g, err := gorm.Open(d, testdb.GormConfig())
		if err != nil {
			t.Fatal(err)
		}
		gdbs = append(gdbs, g)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: gdbs, Names: f.m.Databases(), LogicalShards: 4,
		SchemaPattern: f.m.SchemaPattern(), Map: f.m.Load().Assignment()})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ph returns the n-th bind placeholder of f's dialect.
func (f *fixture) ph(n int) string {
	if f.kind == "mysql" {
		return "?"
	}
	return fmt.Sprintf("$%d", n)
}

func forKinds(t *testing.T, test func(t *testing.T, f *fixture)) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) { test(t, newFixture(t, kind)) })
	}
}

func TestStatements(t *testing.T) {
	forKinds(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		ins := "INSERT INTO {{schema}}.photos (id, title) VALUES (" + f.ph(1) + ", " + f.ph(2) + ")"
		var ids []shardid.ID
		for s := range 4 {
			id := idOf(t, s, 1)
			ids = append(ids, id)
			if _, err := f.r.ForID(id).ExecContext(ctx, ins, id, fmt.Sprint("photo ", s)); err != nil {
				t.Fatal(err)
			}
		}
		// Each row is in its shard's schema on its shard's database.
		for s, id := range ids {
			db := f.dbs[f.m.Load().DB(s)]
			var title string
			if err := db.QueryRow("SELECT title FROM "+f.m.SchemaOf(s)+".photos WHERE id = "+f.ph(1), id).Scan(&title); err != nil || title != fmt.Sprint("photo ", s) {
				t.Errorf("shard %d: %q, %v", s, title, err)
			}
			var got string
			if err := f.r.ForID(id).QueryRowContext(ctx, "SELECT title FROM app.photos WHERE id = "+f.ph(1), id).Scan(&got); err != nil || got != title {
				t.Errorf("QueryRow shard %d: %q, %v", s, got, err)
			}
		}
		// A duplicate key: a *ShardError with the driver's error inside.
		_, err := f.r.ForID(ids[2]).ExecContext(ctx, ins, ids[2], "again")
		var se *shardid.ShardError
		if !errors.As(err, &se) || se.Shard != 2 || se.Database != "two" || !driverError(err) {
			t.Errorf("duplicate: %v", err)
		}
		// No rows.
		err = f.r.ForShard(1).QueryRowContext(ctx, "SELECT title FROM {{schema}}.photos WHERE id = 0").Scan(new(string))
		if !errors.Is(err, sql.ErrNoRows) || !errors.As(err, &se) || se.Shard != 1 {
			t.Errorf("no rows: %v", err)
		}
		// Rows, with their columns and types passed on.
		rows, err := f.r.ForShard(0).QueryContext(ctx, "SELECT id, title FROM {{schema}}.photos ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		types, _ := rows.ColumnTypes()
		var n int
		for rows.Next() {
			var id shardid.ID
			var title string
			if err := rows.Scan(&id, &title); err != nil {
				t.Fatal(err)
			}
			if id != ids[0] || title != "photo 0" {
				t.Errorf("row %d, %q", id, title)
			}
			n++
		}
		if err := rows.Close(); err != nil || n != 1 || !slices.Equal(cols, []string{"id", "title"}) || len(types) != 2 || types[0].DatabaseTypeName() == "" {
			t.Errorf("rows: %d, %v, %v, %v", n, err, cols, types)
		}
		// A transaction stays in its shard; a rollback leaves nothing.
		tx, err := f.r.ForShard(3).BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		id := idOf(t, 3, 9)
		if _, err := tx.ExecContext(ctx, ins, id, "in tx"); err != nil {
			t.Fatal(err)
		}
		var c int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM {{schema}}.photos").Scan(&c); err != nil || c != 2 {
			t.Errorf("in tx: %d, %v", c, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := f.r.ForShard(3).QueryRowContext(ctx, "SELECT count(*) FROM {{schema}}.photos").Scan(&c); err != nil || c != 1 {
			t.Errorf("after rollback: %d, %v", c, err)
		}
		if _, err := tx.ExecContext(ctx, ins, id, "late"); !errors.Is(err, sql.ErrTxDone) || !errors.As(err, &se) {
			t.Errorf("after rollback: %v", err)
		}
		// Unrouted SQL reaches no table.
		if _, err := f.r.ForShard(0).ExecContext(ctx, "DELETE FROM photos"); !errors.Is(err, shardid.ErrUnroutedSQL) {
			t.Errorf("unrouted: %v", err)
		}
		var one int
		if err := f.r.ForShard(0).Unrouted().QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Errorf("Unrouted: %d, %v", one, err)
		}
	})
}

// driverError reports whether err holds the driver's own error type.
func driverError(err error) bool {
	var pg *pgconn.PgError
	var my *mysql.MySQLError
	return errors.As(err, &pg) || errors.As(err, &my)
}

// TestRowsErrors: an error that comes while the rows are read is a
// *ShardError too.
func TestRowsErrors(t *testing.T) {
	f := newFixture(t, "postgres")
	ctx := context.Background()
	for s := range 2 {
		if _, err := f.r.ForShard(0).ExecContext(ctx, "INSERT INTO {{schema}}.photos VALUES ($1, 'x')", idOf(t, 0, s)); err != nil {
			t.Fatal(err)
		}
	}
	// The division fails at the second row, after the first was sent.
	rows, err := f.r.ForShard(0).QueryContext(ctx, "SELECT 1 / (row_number() OVER () - 2)::int FROM {{schema}}.photos")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
	}
	err = rows.Err()
	var se *shardid.ShardError
	var pg *pgconn.PgError
	if !errors.As(err, &se) || se.Shard != 0 || !errors.As(err, &pg) || pg.Code != "22012" {
		t.Errorf("rows.Err() = %v, want a *ShardError of shard 0 with division_by_zero", err)
	}
}

func TestGather(t *testing.T) {
	forKinds(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		for s := range 4 {
			for i := range s + 1 {
				if _, err := f.r.ForShard(s).ExecContext(ctx, "INSERT INTO {{schema}}.photos VALUES ("+f.ph(1)+", 'x')", idOf(t, s, i)); err != nil {
					t.Fatal(err)
				}
			}
		}
		type count struct{ shard, n int }
		counts, err := shardsql.Gather(ctx, f.r, shardsql.GatherOptions{Workers: 3}, func(ctx context.Context, sh shardsql.Shard) ([]count, error) {
			var n int
			err := sh.QueryRowContext(ctx, "SELECT count(*) FROM {{schema}}.photos").Scan(&n)
			return []count{{sh.Shard, n}}, err
		})
		if err != nil || !slices.Equal(counts, []count{{0, 1}, {1, 2}, {2, 3}, {3, 4}}) {
			t.Errorf("Gather = %v, %v", counts, err)
		}
		// One shard fails: the others' rows come back, the error names it.
		if _, err := f.dbs[1].Exec("DROP TABLE " + f.m.SchemaOf(3) + ".photos"); err != nil {
			t.Fatal(err)
		}
		counts, err = shardsql.Gather(ctx, f.r, shardsql.GatherOptions{}, func(ctx context.Context, sh shardsql.Shard) ([]count, error) {
			var n int
			if err := sh.QueryRowContext(ctx, "SELECT count(*) FROM {{schema}}.photos").Scan(&n); err != nil {
				return nil, fmt.Errorf("counting: %w", err)
			}
			return []count{{sh.Shard, n}}, nil
		})
		var se *shardid.ShardError
		if len(counts) != 3 || !errors.As(err, &se) || se.Shard != 3 || se.Database != "two" || !driverError(err) {
			t.Errorf("Gather with shard 3 failing = %v, %v", counts, err)
		}
	})
}

// TestFence: a write refused by a move's fence (reshard.Fence) is
// ErrShardMoving, through Exec and through the Scan of INSERT ... RETURNING,
// on PostgreSQL (pgx's stdlib) and MariaDB (go-sql-driver/mysql).
func TestFence(t *testing.T) {
	forKinds(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		g := f.gormRouter(t)
		if err := reshard.Fence(ctx, g, 2, []any{"photos"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reshard.Unfence(ctx, g, 2, []any{"photos"}) })
		sh := f.r.ForShard(2)
		_, err := sh.ExecContext(ctx, "INSERT INTO {{schema}}.photos VALUES ("+f.ph(1)+", 'x')", idOf(t, 2, 1))
		var se *shardid.ShardError
		if !errors.Is(err, shardid.ErrShardMoving) || !errors.As(err, &se) || se.Shard != 2 || !driverError(err) {
			t.Errorf("fenced Exec: %v", err)
		}
		var id int64
		err = sh.QueryRowContext(ctx, "INSERT INTO {{schema}}.photos VALUES ("+f.ph(1)+", 'x') RETURNING id", idOf(t, 2, 2)).Scan(&id)
		if !errors.Is(err, shardid.ErrShardMoving) || !errors.As(err, &se) || se.Shard != 2 {
			t.Errorf("fenced INSERT RETURNING: %v", err)
		}
		// Another shard is not fenced; reads of the fenced one work.
		if _, err := f.r.ForShard(3).ExecContext(ctx, "INSERT INTO {{schema}}.photos VALUES ("+f.ph(1)+", 'x')", idOf(t, 3, 1)); err != nil {
			t.Errorf("unfenced shard: %v", err)
		}
		var n int
		if err := sh.QueryRowContext(ctx, "SELECT count(*) FROM {{schema}}.photos").Scan(&n); err != nil {
			t.Errorf("read of a fenced shard: %v", err)
		}
		if err := reshard.Unfence(ctx, g, 2, []any{"photos"}); err != nil {
			t.Fatal(err)
		}
		if _, err := sh.ExecContext(ctx, "INSERT INTO {{schema}}.photos VALUES ("+f.ph(1)+", 'x')", idOf(t, 2, 3)); err != nil {
			t.Errorf("after Unfence: %v", err)
		}
		// A write retried with RetryMoving goes through once a fence
		// lapses, by the database's clock, and soon after.
		if err := reshard.Fence(ctx, g, 2, []any{"photos"}, 400*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		start, tries := time.Now(), 0
		err = shardid.RetryMoving(ctx, func() error {
			tries++
			_, err := f.r.ForID(idOf(t, 2, 4)).ExecContext(ctx, "INSERT INTO {{schema}}.photos VALUES ("+f.ph(1)+", 'x')", idOf(t, 2, 4))
			return err
		})
		if took := time.Since(start); err != nil || took < 300*time.Millisecond || took > 2*time.Second || tries < 2 || tries > 15 {
			t.Errorf("RetryMoving through a 400 ms fence: %v after %v and %d tries", err, took, tries)
		}
	})
}

// TestPgBouncer: through PgBouncer in transaction mode, with one server
// connection per database for many clients, statements of different shards
// interleave on one server connection and each still reaches its own
// shard: the router sets nothing on a connection (no search_path).
func TestPgBouncer(t *testing.T) {
	b := testdb.StartPgBouncer(t, testdb.PgBouncerOptions{PoolSize: 1, Databases: []string{testdb.PostgresDatabase(), "shardid_test2"}})
	f := newFixture(t, "postgres")
	var dbs []*sql.DB
	for _, name := range []string{testdb.PostgresDatabase(), "shardid_test2"} {
		db, err := sql.Open("pgx", b.DSN(name, "postgres")+" default_query_exec_mode=exec")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		dbs = append(dbs, db)
	}
	r, err := shardsql.New(shardsql.Config{Databases: dbs, Map: f.m})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	errs := make(chan error, 400)
	done := make(chan bool)
	for w := range 8 {
		go func() {
			defer func() { done <- true }()
			for i := range 25 {
				id := idOf(t, (w+i)%4, w*100+i)
				sh := r.ForID(id)
				if _, err := sh.ExecContext(ctx, "INSERT INTO {{schema}}.photos VALUES ($1, $2)", id, sh.Schema); err != nil {
					errs <- err
					continue
				}
				var title string
				if err := sh.QueryRowContext(ctx, "SELECT title FROM {{schema}}.photos WHERE id = $1", id).Scan(&title); err != nil || title != sh.Schema {
					errs <- fmt.Errorf("read back %d: %q, %v", id, title, err)
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for s := range 4 {
		var n, wrong int
		err := f.dbs[f.m.Load().DB(s)].QueryRow("SELECT count(*), count(*) FILTER (WHERE title <> $1) FROM "+f.m.SchemaOf(s)+".photos", f.m.SchemaOf(s)).Scan(&n, &wrong)
		if err != nil || n != 50 || wrong != 0 {
			t.Errorf("shard %d: %d rows, %d elsewhere's, %v", s, n, wrong, err)
		}
	}
}

type stateErr string

func (e stateErr) Error() string    { return "ERROR: prepared statement (SQLSTATE " + string(e) + ")" }
func (e stateErr) SQLState() string { return string(e) }

// TestClassify: the fence's error and a prepared statement a pooler lost
// are told whatever error type carries them; others are left as they are.
func TestClassify(t *testing.T) {
	r, err := shardsql.New(shardsql.Config{Databases: offline(t), Map: mustMap(t)})
	if err != nil {
		t.Fatal(err)
	}
	sh := r.ForShard(1)
	fence := fmt.Errorf("driver: %s", "Error 1644 (45000): shardid: shard is fenced for a move")
	for _, c := range []struct {
		err    error
		target error
	}{
		{fence, shardid.ErrShardMoving},
		{stateErr("42P05"), shardid.ErrPooledPreparedStatement},
		{fmt.Errorf("x: %w", stateErr("26000")), shardid.ErrPooledPreparedStatement},
	} {
		got := sh.Wrap(c.err)
		var se *shardid.ShardError
		if !errors.Is(got, c.target) || !errors.Is(got, c.err) || !errors.As(got, &se) || se.Shard != 1 {
			t.Errorf("Wrap(%v) = %v, want %v", c.err, got, c.target)
		}
	}
	other := stateErr("23505")
	if got := shardsql.Classify(other); got != error(other) {
		t.Errorf("Classify(23505) = %v", got)
	}
	if sh.Wrap(nil) != nil {
		t.Error("Wrap(nil) != nil")
	}
}

func mustMap(t *testing.T) *shardmap.Map {
	m, err := shardmap.New(shardmap.Config{Databases: []string{"a", "b"}, LogicalShards: 4, SchemaPattern: "shard_%02d"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGatherPerDatabase: on a map without SchemaPattern, Gather runs once
// per database (Shard -1, tables unqualified) unless PerShard.
func TestGatherPerDatabase(t *testing.T) {
	ctx := context.Background()
	dbs := []*sql.DB{testdb.OpenSQL(t, "postgres", ""), testdb.OpenSQL(t, "postgres", "shardid_test2")}
	table := prefix() + "photos"
	for _, db := range dbs {
		if _, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + table) })
	}
	m, _ := shardmap.New(shardmap.Config{Databases: []string{"one", "two"}, LogicalShards: 4})
	r, err := shardsql.New(shardsql.Config{Databases: dbs, Map: m})
	if err != nil {
		t.Fatal(err)
	}
	for s := range 4 {
		if _, err := r.ForShard(s).ExecContext(ctx, "INSERT INTO {{schema}}."+table+" VALUES ($1)", idOf(t, s, 0)); err != nil {
			t.Fatal(err)
		}
	}
	type got struct {
		shard int
		db    string
		n     int
	}
	query := func(ctx context.Context, sh shardsql.Shard) ([]got, error) {
		var n int
		err := sh.QueryRowContext(ctx, "SELECT count(*) FROM "+sh.Table(table)).Scan(&n)
		return []got{{sh.Shard, sh.Database, n}}, err
	}
	perDB, err := shardsql.Gather(ctx, r, shardsql.GatherOptions{}, query)
	if err != nil || !slices.Equal(perDB, []got{{-1, "one", 2}, {-1, "two", 2}}) {
		t.Errorf("per database: %v, %v", perDB, err)
	}
	perShard, err := shardsql.Gather(ctx, r, shardsql.GatherOptions{PerShard: true}, query)
	if err != nil || len(perShard) != 4 || perShard[3] != (got{3, "two", 2}) {
		t.Errorf("per shard: %v, %v", perShard, err)
	}
}
