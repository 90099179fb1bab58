package shardid_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/plugin/dbresolver"
)

// Many goroutines create rows for the same few users through one *gorm.DB:
// no duplicate-key error, ever, and every row is there.
func TestPluginConcurrentCreatesPostgres(t *testing.T) {
	db, _ := setupDB(t, func(t *testing.T) *gorm.DB { return openPostgres(t) }, shardid.PluginConfig{})
	sqlDB, _ := db.DB()
	sqlDB.SetMaxOpenConns(16)
	const workers, perWorker = 16, 60
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				user := int64(i % 5) // five users, hammered by every goroutine
				var err error
				if i%3 == 0 {
					batch := []Photo{{UserID: user}, {UserID: user}, {UserID: user + 1}}
					err = db.Create(&batch).Error
				} else {
					err = db.Create(&Photo{UserID: user, Caption: fmt.Sprint(w)}).Error
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var n, distinct int64
	db.Model(&Photo{}).Count(&n)
	db.Raw("SELECT count(DISTINCT id) FROM photos").Scan(&distinct)
	if want := int64(workers * (perWorker/3*3 + perWorker*2/3)); n != want || distinct != n {
		t.Errorf("%d rows, %d distinct IDs; want %d", n, distinct, want)
	}
}

type Hooked struct {
	ID     shardid.ID
	UserID int64 `shardid:"key"`
}

// BeforeCreate runs before the plugin, so a key it sets decides the shard.
func (h *Hooked) BeforeCreate(*gorm.DB) error {
	if h.ID != 0 {
		return errors.New("the hook saw an ID already assigned")
	}
	h.UserID = 1234
	return nil
}

func TestPluginRunsAfterBeforeCreate(t *testing.T) {
	forEachDialect(t, func(t *testing.T, open func(*testing.T) *gorm.DB) {
		db, _ := setupDB(t, open, shardid.PluginConfig{})
		fresh(t, db, &Hooked{})
		h := Hooked{}
		if err := db.Create(&h).Error; err != nil || h.ID.Shard() != 1234 {
			t.Errorf("shard %d, %v; want the hook's key 1234", h.ID.Shard(), err)
		}
		// SkipHooks skips the model's hook, never the plugin.
		s := Hooked{UserID: 7}
		if err := db.Session(&gorm.Session{SkipHooks: true}).Create(&s).Error; err != nil || s.ID.Shard() != 7 {
			t.Errorf("with SkipHooks: shard %d, %v; want 7", s.ID.Shard(), err)
		}
	})
}

// Initialize can run many times (dbresolver opens every source and replica
// with the same plugins): it registers the callback once per *gorm.DB.
func TestPluginInitializeIdempotent(t *testing.T) {
	db := openPostgres(t)
	p, _ := shardid.NewPlugin(shardid.PluginConfig{})
	var logs bytes.Buffer
	db.Logger = logger.New(log.New(&logs, "", 0), logger.Config{LogLevel: logger.Warn})
	for range 3 {
		if err := p.Initialize(db); err != nil {
			t.Fatal(err)
		}
	}
	if bytes.Contains(logs.Bytes(), []byte("duplicated")) {
		t.Errorf("Initialize registered the callback twice: %s", logs.String())
	}
	if err := db.Use(p); err != nil {
		t.Fatalf("Use after Initialize: %v", err)
	}
	if err := db.Use(p); !errors.Is(err, gorm.ErrRegistered) {
		t.Errorf("a second Use: %v, want gorm.ErrRegistered", err)
	}

	// With dbresolver: one source and one replica (the same server here).
	dsn := envOr("SHARDID_TEST_POSTGRES_DSN", defaultPostgresDSN)
	rdb, err := gorm.Open(postgres.Open(dsn), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, rdb)
	if err := rdb.Use(p); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Use(dbresolver.Register(dbresolver.Config{
		Replicas: []gorm.Dialector{postgres.Open(dsn)},
	})); err != nil {
		t.Fatal(err)
	}
	fresh(t, rdb, &Hooked{})
	rows := []Hooked{{UserID: 1}, {UserID: 2}}
	if err := rdb.WithContext(context.Background()).Create(&rows).Error; err != nil {
		t.Fatal(err)
	}
	var back []Hooked
	if err := rdb.Clauses(dbresolver.Read).Order("id").Find(&back).Error; err != nil || len(back) != 2 ||
		back[0].ID != rows[0].ID && back[0].ID != rows[1].ID {
		t.Errorf("read through the replica: %+v, %v; wrote %+v", back, err, rows)
	}
}

// DBDefault leaves its ID to the database: default:(-), with the default
// installed by hand (as the router's migration will do with next_id()).
type DBDefault struct {
	ID   shardid.ID `gorm:"primaryKey;default:(-)"`
	Name string
}

func TestPluginLeavesDatabaseDefaults(t *testing.T) {
	db, _ := setupDB(t, func(t *testing.T) *gorm.DB { return openPostgres(t) }, shardid.PluginConfig{})
	fresh(t, db, &DBDefault{})
	for _, q := range []string{
		"DROP SEQUENCE IF EXISTS db_defaults_seq",
		"CREATE SEQUENCE db_defaults_seq START 5000000000",
		"ALTER TABLE db_defaults ALTER COLUMN id SET DEFAULT nextval('db_defaults_seq')",
	} {
		if err := db.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	rows := []DBDefault{{Name: "db"}, {ID: 42, Name: "preset"}, {Name: "db2"}}
	if err := db.Create(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if rows[0].ID != 5000000000 || rows[1].ID != 42 || rows[2].ID != 5000000001 {
		t.Errorf("IDs %v, %v, %v; want the database's 5000000000 and 5000000001 around the preset 42",
			rows[0].ID, rows[1].ID, rows[2].ID)
	}
}
