package shardpgx_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardpgx"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

func idOf(t testing.TB, s, seq int) shardid.ID {
	t.Helper()
	id, err := shardid.Instagram.Compose(shardid.Parts{Time: time.Now(), Shard: s, Seq: seq})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

var uniq atomic.Int64

func prefix() string {
	return fmt.Sprintf("px%d_%d_", time.Now().UnixNano()%1_000_000_000, uniq.Add(1))
}

// openPool opens a pool on dsn, closed when the test ends.
func openPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := pgxpool.New(ctx, dsn)
	if err == nil {
		err = p.Ping(ctx)
	}
	if err != nil {
		testdb.Unreachable(t, "PostgreSQL ("+dsn+")", err)
	}
	t.Cleanup(p.Close)
	return p
}

type fixture struct {
	pools  []*pgxpool.Pool
	m      *shardmap.Map
	r      *shardpgx.Router
	direct []*pgxpool.Pool // the same databases, not through a pooler
}

// newFixture makes 4 logical shards in schemas of the test's own on the
// test databases "test" and "shardid_test2", and a router over pools on
// dsn(db), with a photos table in each shard.
func newFixture(t *testing.T, dsn func(db string) string) *fixture {
	t.Helper()
	testdb.OpenSQL(t, "postgres", "shardid_test2") // creates it when missing
	f := &fixture{}
	for _, db := range []string{testdb.PostgresDatabase(), "shardid_test2"} {
		f.direct = append(f.direct, openPool(t, testdb.SQLDSN("postgres", db)))
		f.pools = append(f.pools, openPool(t, dsn(db)))
	}
	var err error
	f.m, err = shardmap.New(shardmap.Config{Databases: []string{"one", "two"}, LogicalShards: 4, SchemaPattern: prefix() + "%02d"})
	if err != nil {
		t.Fatal(err)
	}
	f.r, err = shardpgx.New(shardpgx.Config{Pools: f.pools, Map: f.m, SchemaAlias: "app"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for s := range 4 {
		schema := f.m.SchemaOf(s)
		for _, p := range f.direct {
			t.Cleanup(func() { p.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
		}
		p := f.direct[f.m.Load().DB(s)]
		if _, err := p.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".photos (id BIGINT PRIMARY KEY, title TEXT NOT NULL)"); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func direct(db string) string { return testdb.SQLDSN("postgres", db) }

func TestRoute(t *testing.T) {
	ctx := context.Background()
	var pools []*pgxpool.Pool
	for range 2 {
		p, err := pgxpool.New(ctx, "host=127.0.0.1 port=1 dbname=none") // never connects
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pools = append(pools, p)
	}
	m, _ := shardmap.New(shardmap.Config{Databases: []string{"a", "b"}, LogicalShards: 4, SchemaPattern: "shard_%02d", Shared: []int{3}})
	if _, err := shardpgx.New(shardpgx.Config{Pools: pools[:1], Map: m}); !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Errorf("one pool for two databases: %v", err)
	}
	if _, err := shardpgx.New(shardpgx.Config{Pools: pools, Map: m, SchemaAlias: "shard_01"}); !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Errorf("alias of a shard's schema: %v", err)
	}
	r, err := shardpgx.New(shardpgx.Config{Pools: pools, Map: m})
	if err != nil {
		t.Fatal(err)
	}
	if sh := r.ForID(idOf(t, 2, 0)); sh.Pool != pools[1] || sh.Schema != "shard_02" || sh.Table("photos") != "shard_02.photos" || sh.Database != "b" {
		t.Errorf("ForID(shard 2) = %v", sh)
	}
	if sh := r.ForShard(3); sh.Schema != "" || sh.Table("photos") != "photos" {
		t.Errorf("shared shard = %v", sh)
	}
	if _, err := r.ForShard(0).Exec(ctx, "DELETE FROM photos"); !errors.Is(err, shardid.ErrUnroutedSQL) {
		t.Errorf("unrouted: %v", err)
	}
	if err := r.ForKey(-1).QueryRow(ctx, "SELECT 1").Scan(new(int)); !errors.Is(err, shardid.ErrShardRange) {
		t.Errorf("ForKey(-1): %v", err)
	}
	if _, err := r.ForShard(0).CopyFrom(ctx, pgx.Identifier{"other", "photos"}, []string{"id"}, pgx.CopyFromRows(nil)); !errors.Is(err, shardid.ErrUnroutedSQL) {
		t.Errorf("COPY into another schema: %v", err)
	}
	var zero shardpgx.Shard
	if err := zero.QueryRow(ctx, "SELECT 1").Scan(new(int)); !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Errorf("zero Shard: %v", err)
	}
	if _, err := zero.Begin(ctx); !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Errorf("zero Shard: %v", err)
	}
	if err := m.Set([]int{1, 1, 1, 1}); err != nil {
		t.Fatal(err)
	}
	if sh := r.ForShard(0); sh.Pool != pools[1] {
		t.Errorf("after Set: %v", sh)
	}
}

func TestStatements(t *testing.T) {
	f := newFixture(t, direct)
	ctx := context.Background()
	ids := make([]shardid.ID, 4)
	for s := range 4 {
		ids[s] = idOf(t, s, 1)
		if _, err := f.r.ForID(ids[s]).Exec(ctx, "INSERT INTO {{schema}}.photos VALUES ($1, $2)", ids[s], fmt.Sprint("photo ", s)); err != nil {
			t.Fatal(err)
		}
	}
	for s, id := range ids {
		var title string
		if err := f.direct[f.m.Load().DB(s)].QueryRow(ctx, "SELECT title FROM "+f.m.SchemaOf(s)+".photos WHERE id = $1", id).Scan(&title); err != nil {
			t.Errorf("shard %d not in its schema: %v", s, err)
		}
		var got string
		if err := f.r.ForID(id).QueryRow(ctx, "SELECT title FROM app.photos WHERE id = $1", id).Scan(&got); err != nil || got != title {
			t.Errorf("QueryRow: %q, %v", got, err)
		}
	}
	var se *shardid.ShardError
	var pg *pgconn.PgError
	_, err := f.r.ForID(ids[2]).Exec(ctx, "INSERT INTO {{schema}}.photos VALUES ($1, 'x')", ids[2])
	if !errors.As(err, &se) || se.Shard != 2 || se.Database != "two" || !errors.As(err, &pg) || pg.Code != "23505" {
		t.Errorf("duplicate: %v", err)
	}
	if err := f.r.ForShard(1).QueryRow(ctx, "SELECT title FROM {{schema}}.photos WHERE id = 0").Scan(new(string)); !errors.Is(err, pgx.ErrNoRows) || !errors.As(err, &se) {
		t.Errorf("no rows: %v", err)
	}
	// An UPDATE ... RETURNING read as a row behaves as pgx's own row: its
	// value, no row, and no *pgtype.DriverBytes (whose bytes would outlive
	// the row's buffer).
	var title string
	if err := f.r.ForID(ids[1]).QueryRow(ctx, "UPDATE {{schema}}.photos SET title = title WHERE id = $1 RETURNING title", ids[1]).Scan(&title); err != nil || title != "photo 1" {
		t.Errorf("UPDATE ... RETURNING as a row: %q, %v", title, err)
	}
	if err := f.r.ForShard(1).QueryRow(ctx, "UPDATE {{schema}}.photos SET title = 'z' WHERE id = 0 RETURNING title").Scan(&title); !errors.Is(err, pgx.ErrNoRows) || !errors.As(err, &se) {
		t.Errorf("UPDATE ... RETURNING of no row as a row: %v", err)
	}
	var raw pgtype.DriverBytes
	if err := f.r.ForID(ids[1]).QueryRow(ctx, "UPDATE {{schema}}.photos SET title = title WHERE id = $1 RETURNING title", ids[1]).Scan(&raw); err == nil || !strings.Contains(err.Error(), "DriverBytes") {
		t.Errorf("UPDATE ... RETURNING into *pgtype.DriverBytes: %v, want pgx's refusal", err)
	}
	// Rows collected by pgx's helpers; an error mid-way names the shard.
	if _, err := f.r.ForShard(0).Exec(ctx, "INSERT INTO {{schema}}.photos VALUES ($1, 'y')", idOf(t, 0, 2)); err != nil {
		t.Fatal(err)
	}
	rows, err := f.r.ForShard(0).Query(ctx, "SELECT id, title FROM {{schema}}.photos ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	type photo struct {
		ID    int64
		Title string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByName[photo])
	if err != nil || len(got) != 2 {
		t.Errorf("CollectRows: %v, %v", got, err)
	}
	rows, err = f.r.ForShard(0).Query(ctx, "SELECT 1 / (row_number() OVER () - 2)::int FROM {{schema}}.photos")
	if err != nil {
		t.Fatal(err)
	}
	_, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	if !errors.As(err, &se) || se.Shard != 0 || !errors.As(err, &pg) || pg.Code != "22012" {
		t.Errorf("error mid-rows: %v", err)
	}
	// COPY into the shard's table named alone, as sqlc's :copyfrom does.
	n, err := f.r.ForShard(3).CopyFrom(ctx, pgx.Identifier{"photos"}, []string{"id", "title"},
		pgx.CopyFromRows([][]any{{idOf(t, 3, 5), "c1"}, {idOf(t, 3, 6), "c2"}}))
	if err != nil || n != 2 {
		t.Errorf("CopyFrom: %d, %v", n, err)
	}
	// A batch, each query in the shard; the caller's batch is left as it was.
	b, bid := &pgx.Batch{}, idOf(t, 3, 7)
	b.Queue("INSERT INTO {{schema}}.photos VALUES ($1, 'b1')", bid)
	b.Queue("SELECT count(*) FROM app.photos")
	br := f.r.ForShard(3).SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		t.Errorf("batch insert: %v", err)
	}
	if err := br.QueryRow().Scan(&n); err != nil || n != 4 {
		t.Errorf("batch count: %d, %v", n, err)
	}
	if err := br.Close(); err != nil {
		t.Error(err)
	}
	if b.QueuedQueries[1].SQL != "SELECT count(*) FROM app.photos" {
		t.Errorf("the batch was changed: %q", b.QueuedQueries[1].SQL)
	}
	br = f.r.ForShard(3).SendBatch(ctx, b) // the same row again: a duplicate key
	_, err = br.Exec()
	if !errors.As(err, &se) || se.Shard != 3 || !errors.As(err, &pg) || pg.Code != "23505" {
		t.Errorf("batch duplicate: %v", err)
	}
	br.Close()
	if _, err := f.r.ForShard(3).Exec(ctx, "DELETE FROM {{schema}}.photos WHERE id = $1", bid); err != nil {
		t.Fatal(err)
	}
	// A transaction stays in its shard.
	tx, err := f.r.ForShard(3).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "DELETE FROM {{schema}}.photos"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var c int
	if err := f.r.ForShard(3).QueryRow(ctx, "SELECT count(*) FROM {{schema}}.photos").Scan(&c); err != nil || c != 3 {
		t.Errorf("after rollback: %d, %v", c, err)
	}
	// Gather, per shard.
	counts, err := shardpgx.Gather(ctx, f.r, shardpgx.GatherOptions{}, func(ctx context.Context, sh shardpgx.Shard) ([]int, error) {
		var n int
		err := sh.QueryRow(ctx, "SELECT count(*) FROM {{schema}}.photos").Scan(&n)
		return []int{n}, err
	})
	if err != nil || !slices.Equal(counts, []int{2, 1, 1, 3}) {
		t.Errorf("Gather: %v, %v", counts, err)
	}
}

// TestFence: a write refused by a move's fence is ErrShardMoving through
// native pgx, in Exec and in QueryRow's Scan.
func TestFence(t *testing.T) {
	f := newFixture(t, direct)
	ctx := context.Background()
	var gdbs []*gorm.DB
	for _, db := range []string{testdb.PostgresDatabase(), "shardid_test2"} {
		g, err := gorm.Open(postgres.Open(direct(db)), testdb.GormConfig())
		if err != nil {
			t.Fatal(err)
		}
		testdb.CloseAtEnd(t, g)
		gdbs = append(gdbs, g)
	}
	g, err := shardid.NewRouter(shardid.RouterConfig{Databases: gdbs, Names: f.m.Databases(), LogicalShards: 4, SchemaPattern: f.m.SchemaPattern()})
	if err != nil {
		t.Fatal(err)
	}
	if err := reshard.Fence(ctx, g, 1, []any{"photos"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reshard.Unfence(ctx, g, 1, []any{"photos"}) })
	sh := f.r.ForShard(1)
	_, err = sh.Exec(ctx, "INSERT INTO {{schema}}.photos VALUES ($1, 'x')", idOf(t, 1, 1))
	var pg *pgconn.PgError
	if !errors.Is(err, shardid.ErrShardMoving) || !errors.As(err, &pg) {
		t.Errorf("fenced Exec: %v", err)
	}
	var id int64
	err = sh.QueryRow(ctx, "INSERT INTO {{schema}}.photos VALUES ($1, 'x') RETURNING id", idOf(t, 1, 2)).Scan(&id)
	var se *shardid.ShardError
	if !errors.Is(err, shardid.ErrShardMoving) || !errors.As(err, &se) || se.Shard != 1 || se.Database != "one" {
		t.Errorf("fenced INSERT RETURNING: %v", err)
	}
}

// TestPgBouncer: through PgBouncer in transaction mode, with one server
// connection per database for many clients, statements of different
// shards interleave on one server connection and each still reaches its own
// shard: the routers set nothing on a connection (no search_path).
func TestPgBouncer(t *testing.T) {
	b := testdb.StartPgBouncer(t, testdb.PgBouncerOptions{PoolSize: 1, Databases: []string{testdb.PostgresDatabase(), "shardid_test2"}})
	f := newFixture(t, func(db string) string {
		return b.DSN(db, "postgres") + " default_query_exec_mode=exec pool_max_conns=8"
	})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				s := (w + i) % 4
				id := idOf(t, s, w*100+i)
				sh := f.r.ForID(id)
				if _, err := sh.Exec(ctx, "INSERT INTO {{schema}}.photos VALUES ($1, $2)", id, sh.Schema); err != nil {
					errs <- err
					continue
				}
				var title string
				if err := sh.QueryRow(ctx, "SELECT title FROM {{schema}}.photos WHERE id = $1", id).Scan(&title); err != nil || title != sh.Schema {
					errs <- fmt.Errorf("read back %d: %q, %v", id, title, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Every row is in the schema it names, on the database of its shard.
	for s := range 4 {
		var n, wrong int
		err := f.direct[f.m.Load().DB(s)].QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE title <> $1) FROM "+f.m.SchemaOf(s)+".photos", f.m.SchemaOf(s)).Scan(&n, &wrong)
		if err != nil || n != 50 || wrong != 0 {
			t.Errorf("shard %d: %d rows, %d elsewhere's, %v", s, n, wrong, err)
		}
	}
}
