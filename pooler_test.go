package shardid_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// PlgPoolPhoto is the model of the pooler tests.
type PlgPoolPhoto struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Caption string
}

// TestRouterNamesPooledPreparedStatements routes queries through PgBouncer
// in transaction mode. With pgx's default statement cache they fail with
// 42P05 or 26000, and every such error says what to change
// (ErrPooledPreparedStatement) while errors.As still finds the driver's
// error and the *ShardError. With the DSN settings the error recommends,
// the same load runs clean and every row read is the right one.
func TestRouterNamesPooledPreparedStatements(t *testing.T) {
	b := testdb.StartPgBouncer(t, testdb.PgBouncerOptions{PoolMode: "transaction", PoolSize: 4})
	fresh(t, openPostgres(t), &PlgPoolPhoto{})
	for _, tc := range []struct {
		mode     string
		failures bool // whether the pooler breaks this mode
	}{
		{"", true}, // pgx's default: cache_statement
		{"cache_statement", true},
		{"simple_protocol", false},
		{"exec", false},
		{"cache_describe", false},
	} {
		name := tc.mode
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			dsn := b.DSN(testdb.PostgresDatabase(), "postgres")
			if tc.mode != "" {
				dsn += " default_query_exec_mode=" + tc.mode
			}
			db, err := gorm.Open(postgres.New(postgres.Config{DSN: dsn}), gormConfig())
			if err != nil {
				t.Fatal(err)
			}
			closeAtEnd(t, db)
			p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
			if err != nil {
				t.Fatal(err)
			}
			r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}, Names: []string{"pooled"}, LogicalShards: 4, Plugin: p})
			if err != nil {
				t.Fatal(err)
			}
			errs, wrong := poolLoad(r)
			if wrong > 0 {
				t.Errorf("%d reads returned another query's rows", wrong)
			}
			pooled := 0
			for _, err := range errs {
				var pg *pgconn.PgError
				var se *shardid.ShardError
				if !errors.As(err, &pg) || (pg.Code != "42P05" && pg.Code != "26000") {
					t.Errorf("an error other than a lost prepared statement: %v", err)
					continue
				}
				pooled++
				if !errors.Is(err, shardid.ErrPooledPreparedStatement) || !errors.As(err, &se) || se.Database != "pooled" {
					t.Errorf("routed statement failed with %v; want ErrPooledPreparedStatement, with the *pgconn.PgError, in a *ShardError on pooled", err)
				}
			}
			if tc.failures && pooled == 0 {
				t.Fatalf("no statement failed through the pooler: the test shows nothing")
			}
			if !tc.failures && pooled > 0 {
				t.Errorf("%d statements lost their prepared statement in mode %s", pooled, tc.mode)
			}
			t.Logf("%d errors", pooled)
		})
	}
}

// poolLoad runs routed queries from 8 goroutines at once, three different
// statements among them, and returns their errors and how many returned
// another statement's rows.
func poolLoad(r *shardid.Router) (errs []error, wrong int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				key := int64(g%4 + 1)
				var got struct{ K, N int64 }
				var err error
				switch g % 3 {
				case 0:
					err = r.ForKey(key).Raw("SELECT ?::bigint AS k, ?::bigint AS n", key, i).Scan(&got).Error
				case 1:
					err = r.ForKey(key).Raw("SELECT ?::bigint + 0 AS k, ?::bigint AS n", key, i).Scan(&got).Error
				default:
					var n int64
					err = r.ForKey(key).WithContext(context.Background()).Model(&PlgPoolPhoto{}).Where("user_id = ?", key).Count(&n).Error
					got.K, got.N = key, int64(i)
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if got.K != key || got.N != int64(i) {
					wrong++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs, wrong
}
