package reshard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/sqlddl"
	"gorm.io/gorm"
)

// Catalog keeps the shard map where every process can read it: a table in a
// PostgreSQL or MySQL/MariaDB database, with a version number that changes
// with every change. Routers follow it (Follow) and pick up a new map
// without a restart.
//
// Setting it up (Setup: DDL) and using it (DML) are separate: once its
// tables exist, only Save, SaveIf and SaveSetup write, and Load, Version,
// LoadSetup and Follow need nothing but SELECT, on a read-only connection
// too. Setup lists the privileges of each operation.
type Catalog struct {
	DB    *gorm.DB
	Table string // If empty, "shardid_shard_map". It must match [a-z_][a-z0-9_]*.

	// AllowPasswords lets SaveSetup store DSNs that carry a literal
	// password. If false, SaveSetup refuses them with ErrSecretInDSN:
	// whoever can read the catalog could log in to every database.
	AllowPasswords bool
}

// catalogSetup is what creates the catalog's tables, as ErrSetupRequired
// names it: the method, and the commands that run it.
const catalogSetup = "Catalog.Setup (the command: shardid catalog init, or shardid split run, which saves the monolith's map)"

func (c *Catalog) table() (string, error) {
	t := c.Table
	if t == "" {
		t = "shardid_shard_map"
	}
	if !sqlddl.Name.MatchString(t) {
		return "", withDetail(ErrInvalidCatalog, fmt.Sprintf("catalog table %q: want %s", t, sqlddl.Name))
	}
	return t, nil
}

// tables returns the catalog's tables: the map (t), its version and its
// setup.
func catalogTables(t string) []string {
	return []string{t, t + "_version", t + "_setup"}
}

// Setup creates the catalog's tables if they do not exist: one row per
// shard, one row holding the version, one holding the setup (SaveSetup).
// Run it once with a role that may create tables (PostgreSQL: CREATE on
// the schema the tables go to, the first of the search path the role may
// create in; MySQL: CREATE and INSERT on the database). Save, SaveIf and
// SaveSetup also create the tables when they are missing and the role
// may; nothing else runs DDL: Load, Version, LoadSetup and Follow only
// read (SELECT on the three tables; they work on a read-only connection or
// a hot standby), and return an error matching shardid.ErrSetupRequired,
// naming the table, when a table is missing.
//
// Once the tables exist, Save and SaveIf need SELECT, INSERT, UPDATE and
// DELETE on the map and version tables, SaveSetup DELETE and INSERT on the
// setup table, and MoveShard (through the catalog) SELECT and UPDATE on
// the map and version tables.
func (c *Catalog) Setup(ctx context.Context) error {
	t, err := c.table()
	if err != nil {
		return err
	}
	return c.ensure(ctx, t)
}

// ensure creates the catalog's tables when one is missing.
func (c *Catalog) ensure(ctx context.Context, t string) error {
	return sqlddl.Ensure(ctx, c.DB, shardid.ErrSetupRequired, catalogSetup, t, catalogTables(t),
		"CREATE TABLE IF NOT EXISTS "+t+` (
			shard    INT PRIMARY KEY,
			db_name  VARCHAR(200) NOT NULL)`,
		"CREATE TABLE IF NOT EXISTS "+t+`_version (
			id      INT PRIMARY KEY,
			version BIGINT NOT NULL)`,
		"CREATE TABLE IF NOT EXISTS "+t+"_setup (id INT PRIMARY KEY, setup TEXT NOT NULL)",
		// Version 0, no map: there is always a row for changes to lock.
		sqlddl.InsertIgnore(c.DB, t+"_version (id, version) VALUES (1, 0)", "id"))
}

// explain returns err, or shardid.ErrSetupRequired naming the table when
// one of the catalog's tables is missing.
func (c *Catalog) explain(ctx context.Context, t string, err error) error {
	return sqlddl.Explain(ctx, c.DB, shardid.ErrSetupRequired, catalogSetup, catalogTables(t), err)
}

// Save stores r's current map as the catalog's first map and returns its
// version. If the catalog holds a map already, Save stores nothing: it
// returns the catalog's version if that map is r's, and an error matching
// ErrMapDiffers if it differs for any shard. A configuration change (a
// database appended to RouterConfig.Databases without a Map recomputes
// the default split) must never move a shard's route without a move: build
// routers from the catalog's map (Catalog.Load and Router.SetMap, or
// Follow). To replace the catalog's map deliberately, use Overwrite.
func (c *Catalog) Save(ctx context.Context, r *shardid.Router) (int64, error) {
	return c.save(ctx, r, -1, false)
}

// Overwrite stores r's current map as a new version and returns it,
// whatever the catalog held: every router that follows the catalog takes
// it. Use it only when the databases hold the shards where r's map says
// (restoring a catalog, or after moving shards by hand): routers that
// take a map naming a database that does not hold a shard write the
// shard's rows where no one reads them. A program that read the catalog
// and changes it should use SaveIf, so that it cannot undo a change made
// meanwhile (MoveShard changes one shard with a conditional update of its
// own).
func (c *Catalog) Overwrite(ctx context.Context, r *shardid.Router) (int64, error) {
	return c.save(ctx, r, -1, true)
}

// SaveIf stores r's current map as a new version, and returns it, only if
// the catalog's version is still expected (0 for a catalog that holds no
// map yet): a compare-and-set on the version, and, like Overwrite, a
// deliberate replacement of the catalog's map. Otherwise it changes nothing
// and returns an error matching ErrCatalogConflict: reload (Catalog.Load),
// apply the change again and retry.
func (c *Catalog) SaveIf(ctx context.Context, r *shardid.Router, expected int64) (int64, error) {
	if expected < 0 {
		return 0, withDetail(ErrInvalidCatalog, fmt.Sprintf("expected version %d", expected))
	}
	return c.save(ctx, r, expected, true)
}

// save stores r's map; if expected is not negative, only over that
// version; unless overwrite, only as the first map (one identical to the
// catalog's stores nothing).
func (c *Catalog) save(ctx context.Context, r *shardid.Router, expected int64, overwrite bool) (int64, error) {
	t, err := c.table()
	if err != nil {
		return 0, err
	}
	if err := c.ensure(ctx, t); err != nil {
		return 0, err
	}
	m, names := r.Map(), r.Names()
	// Which shards are shared (see catalog_shared.go): stored when the
	// router has some, or the catalog a table for them.
	// (A map without a SchemaPattern has every shard shared: nothing to
	// store.)
	var shared []int
	if r.ShardMap().SchemaPattern() != "" {
		shared = r.ShardMap().Load().SharedShards()
	}
	missing, err := sqlddl.Missing(ctx, c.DB, sharedTable(t))
	if err != nil {
		return 0, err
	}
	hasShared := len(missing) == 0
	if len(shared) > 0 && !hasShared {
		if err := c.ensureShared(ctx, t); err != nil {
			return 0, err
		}
		hasShared = true
	}
	var version int64
	err = c.withVersionRow(ctx, t, func() error {
		return c.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var err error
			if version, err = lockVersion(tx, t); err != nil {
				return err
			}
			if expected >= 0 && version != expected {
				return &catalogConflict{fmt.Sprintf("version %d, not the %d expected", version, expected)}
			}
			if !overwrite {
				var rows []struct {
					Shard  int
					DBName string
				}
				if err := tx.Raw("SELECT shard, db_name FROM " + t + " ORDER BY shard").Scan(&rows).Error; err != nil {
					return err
				}
				if len(rows) > 0 {
					if err := sameMap(rows, m, names); err != nil {
						return err
					}
					return nil // the catalog holds r's map already: its version
				}
			}
			if version, err = bumpVersion(tx, t, version); err != nil {
				return err
			}
			if err := tx.Exec("DELETE FROM " + t).Error; err != nil {
				return err
			}
			for lo := 0; lo < len(m); lo += 500 {
				args := []any{}
				q := "INSERT INTO " + t + " (shard, db_name) VALUES "
				for s := lo; s < min(lo+500, len(m)); s++ {
					if s > lo {
						q += ","
					}
					q += "(?, ?)"
					args = append(args, s, names[m[s]])
				}
				if err := tx.Exec(q, args...).Error; err != nil {
					return err
				}
			}
			return saveShared(tx, t, shared, hasShared)
		})
	})
	if err != nil {
		return 0, err
	}
	return version, nil
}

// sameMap returns ErrMapDiffers unless rows, the catalog's map, map every
// shard of m (indexes into names) as m does.
func sameMap(rows []struct {
	Shard  int
	DBName string
}, m []int, names []string) error {
	if len(rows) != len(m) {
		return withDetail(ErrMapDiffers, fmt.Sprintf("the catalog maps %d shards, the router %d", len(rows), len(m)))
	}
	first, n := -1, 0
	for i, row := range rows {
		if row.Shard != i || row.DBName != names[m[i]] {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	if first < 0 {
		return nil
	}
	return withDetail(ErrMapDiffers, fmt.Sprintf("the catalog maps shard %d to %s, the router to %s (%d shards differ): "+
		"build the router from the catalog's map (Catalog.Load and Router.SetMap, or Follow), or replace the catalog's map deliberately (Catalog.Overwrite)",
		rows[first].Shard, rows[first].DBName, names[m[first]], n))
}

// lockVersion reads the catalog's version and locks its row until the end
// of tx, so that changes of the catalog take turns. It returns
// errNoVersionRow when the row is missing (see withVersionRow).
func lockVersion(tx *gorm.DB, t string) (int64, error) {
	var version int64
	res := tx.Raw("SELECT version FROM " + t + "_version WHERE id = 1 FOR UPDATE").Scan(&version)
	if res.Error == nil && res.RowsAffected != 1 {
		return 0, errNoVersionRow
	}
	return version, res.Error
}

// errNoVersionRow is lockVersion's error when the version row is missing.
var errNoVersionRow = errors.New("shardid: the catalog has no version row")

// withVersionRow runs change (a transaction that starts with lockVersion)
// and, if the version row was missing, writes it and runs change again.
// The setup writes the row after it creates the tables; on MySQL, whose DDL
// is not transactional, another process can find the tables before the
// row. The row is written outside change's transaction: inserted there,
// after a locking read found it missing, it would deadlock with the other
// writers' gap locks.
func (c *Catalog) withVersionRow(ctx context.Context, t string, change func() error) error {
	err := change()
	if !errors.Is(err, errNoVersionRow) {
		return err
	}
	if err := c.DB.WithContext(ctx).Exec(sqlddl.InsertIgnore(c.DB, t+"_version (id, version) VALUES (1, 0)", "id")).Error; err != nil {
		return err
	}
	return change()
}

// bumpVersion stores version+1 and announces it (on PostgreSQL, to every
// router that follows the catalog, at commit).
func bumpVersion(tx *gorm.DB, t string, version int64) (int64, error) {
	version++
	if err := tx.Exec("UPDATE "+t+"_version SET version = ? WHERE id = 1", version).Error; err != nil {
		return 0, err
	}
	if tx.Dialector.Name() == "postgres" {
		if err := tx.Exec("SELECT pg_notify(?, ?)", t, strconv.FormatInt(version, 10)).Error; err != nil {
			return 0, err
		}
	}
	return version, nil
}

// catalogConflict is an ErrCatalogConflict with what was found.
type catalogConflict struct{ detail string }

func (e *catalogConflict) Error() string { return ErrCatalogConflict.Error() + ": " + e.detail }
func (e *catalogConflict) Unwrap() error { return ErrCatalogConflict }

// flipShard moves one shard's entry from the database named from to the one
// named to, as a new version, only if the catalog still names from: two
// moves of different shards never undo each other, and a move of a shard
// someone else moved fails with ErrCatalogConflict.
func (c *Catalog) flipShard(ctx context.Context, shard int, from, to string) (int64, error) {
	return c.flipShardHeld(ctx, shard, from, to, nil)
}

// flipShardHeld is flipShard, with held (if not nil) run first in its
// transaction, after the version's row is locked: a check that must hold
// until the flip commits (a read of a row under a shared lock in the same
// database as the catalog).
func (c *Catalog) flipShardHeld(ctx context.Context, shard int, from, to string, held func(tx *gorm.DB) error) (int64, error) {
	t, err := c.table()
	if err != nil {
		return 0, err
	}
	var version int64
	err = c.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if version, err = lockVersion(tx, t); err != nil {
			return err
		}
		if held != nil {
			if err := held(tx); err != nil {
				return err
			}
		}
		res := tx.Exec("UPDATE "+t+" SET db_name = ? WHERE shard = ? AND db_name = ?", to, shard, from)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return &catalogConflict{fmt.Sprintf("shard %d is no longer on %s", shard, from)}
		}
		version, err = bumpVersion(tx, t, version)
		return err
	})
	if err != nil {
		return 0, c.explain(ctx, t, err)
	}
	return version, nil
}

// shardDB returns the name of the database the catalog maps shard to, ""
// when the catalog holds no map (or has no tables yet).
func (c *Catalog) shardDB(ctx context.Context, shard int) (string, error) {
	t, err := c.table()
	if err != nil {
		return "", err
	}
	var name string
	err = c.DB.WithContext(ctx).Raw("SELECT db_name FROM "+t+" WHERE shard = ?", shard).Scan(&name).Error
	if err != nil {
		if missing, merr := sqlddl.Missing(ctx, c.DB, t); merr == nil && len(missing) > 0 {
			return "", nil
		}
	}
	return name, err
}

// Version returns the catalog's current version, 0 when it holds no map.
// It only reads (see Setup).
func (c *Catalog) Version(ctx context.Context) (int64, error) {
	t, err := c.table()
	if err != nil {
		return 0, err
	}
	var v int64
	err = c.DB.WithContext(ctx).Raw("SELECT COALESCE(MAX(version), 0) FROM " + t + "_version").Scan(&v).Error
	return v, c.explain(ctx, t, err)
}

// Load returns the catalog's map for r (database indexes by name) and its
// version. It only reads (see Setup).
func (c *Catalog) Load(ctx context.Context, r *shardid.Router) ([]int, int64, error) {
	t, err := c.table()
	if err != nil {
		return nil, 0, err
	}
	var (
		rows []struct {
			Shard  int
			DBName string
		}
		version int64
	)
	err = c.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Raw("SELECT COALESCE(MAX(version), 0) FROM " + t + "_version").Scan(&version).Error; err != nil {
			return err
		}
		return tx.Raw("SELECT shard, db_name FROM " + t + " ORDER BY shard").Scan(&rows).Error
	})
	if err != nil {
		return nil, 0, c.explain(ctx, t, err)
	}
	if len(rows) != r.LogicalShards() {
		return nil, version, withDetail(ErrInvalidCatalog, fmt.Sprintf("the catalog maps %d shards, the router has %d", len(rows), r.LogicalShards()))
	}
	index := map[string]int{}
	for i, n := range r.Names() {
		index[n] = i
	}
	m := make([]int, len(rows))
	for _, row := range rows {
		d, ok := index[row.DBName]
		if !ok || row.Shard < 0 || row.Shard >= len(m) {
			return nil, version, withDetail(ErrInvalidCatalog, fmt.Sprintf("the catalog maps shard %d to %q, which the router does not know", row.Shard, row.DBName))
		}
		m[row.Shard] = d
	}
	return m, version, nil
}

// CatalogSetup is what a process needs, besides the map, to build a router
// from the catalog alone, as the shardid move command does.
type CatalogSetup struct {
	Databases     []CatalogDatabase
	LogicalShards int
	SchemaPattern string
	Tables        []string // the tables of every logical shard
}

// CatalogDatabase is a physical database: its name in the map, its dialect
// ("postgres" or "mysql") and its DSN.
//
// The DSN is stored as it is given, so it should hold no secret: write a
// password as a ${NAME} placeholder, which LoadSetup replaces with the
// environment variable NAME of the process that loads it
// ("postgres://shardid:${PG3_PASSWORD}@pg3/app", "password=${PG3_PASSWORD}",
// "shardid:${MY1_PASSWORD}@tcp(my1:3306)/app"), or leave the password out
// and let the driver find it (pgx reads ~/.pgpass, or the file PGPASSFILE
// names). Any part of a DSN may be a placeholder.
type CatalogDatabase struct {
	Name, Dialect, DSN string
}

// SaveSetup stores setup in the catalog, replacing what was there. It
// refuses, with ErrSecretInDSN, a DSN that carries a literal password
// unless c.AllowPasswords, and with ErrInvalidCatalog a malformed ${NAME}
// placeholder; it stores placeholders as they are.
func (c *Catalog) SaveSetup(ctx context.Context, setup CatalogSetup) error {
	for _, d := range setup.Databases {
		if err := checkDSN(d, c.AllowPasswords); err != nil {
			return err
		}
	}
	t, err := c.table()
	if err != nil {
		return err
	}
	if err := c.ensure(ctx, t); err != nil {
		return err
	}
	b, err := json.Marshal(setup)
	if err != nil {
		return err
	}
	return c.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("DELETE FROM " + t + "_setup").Error; err != nil {
			return err
		}
		return tx.Exec("INSERT INTO "+t+"_setup (id, setup) VALUES (1, ?)", string(b)).Error
	})
}

// LoadSetup returns the setup SaveSetup stored (it only reads), with the ${NAME}
// placeholders of its DSNs replaced by this process's environment
// variables (escaped for where they stand in the DSN). A variable that is
// not set gives ErrDSNVariable.
func (c *Catalog) LoadSetup(ctx context.Context) (CatalogSetup, error) {
	var setup CatalogSetup
	t, err := c.table()
	if err != nil {
		return setup, err
	}
	var text string
	if err := c.DB.WithContext(ctx).Raw("SELECT setup FROM " + t + "_setup WHERE id = 1").Scan(&text).Error; err != nil {
		return setup, c.explain(ctx, t, err)
	}
	if text == "" {
		return setup, withDetail(ErrInvalidCatalog, "the catalog has no setup: see Catalog.SaveSetup")
	}
	if err := json.Unmarshal([]byte(text), &setup); err != nil {
		return setup, withDetail(ErrInvalidCatalog, "its setup: "+err.Error())
	}
	return expandSetup(setup, os.LookupEnv)
}
