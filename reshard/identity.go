package reshard

import (
	"context"
	"fmt"
	"strings"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// dbIdentity is what tells physical databases apart, as the database
// itself reports it: two *gorm.DB whose identities are equal reach the same
// database, whatever their DSNs say.
type dbIdentity struct {
	// strong is an identifier the server generates once (PostgreSQL's
	// system_identifier, MySQL's @@server_uuid), "" where the server has
	// none or the role may not read it. Replicas share PostgreSQL's.
	strong string
	// key is the server's instance (PostgreSQL: start time and port;
	// MySQL/MariaDB: server id, host name, port and data directory, and
	// started), plus,
	// on PostgreSQL, the database: a shard's schema lives in a database
	// there, and in the server itself on MySQL.
	key string
	// started is when a MySQL/MariaDB server started, in seconds since the
	// epoch, from its uptime: two servers of one host name, port and data
	// directory (containers on two hosts) are told apart by it. It is
	// known to a second, so a difference of up to 2 s counts as none.
	started int64
}

// same reports whether a and b are one database.
func (a dbIdentity) same(b dbIdentity) bool {
	if a.strong != "" && b.strong != "" && a.strong != b.strong {
		return false
	}
	if d := a.started - b.started; d > 2 || d < -2 {
		return false
	}
	return a.key == b.key
}

// identify returns db's identity. Every statement it runs is a plain
// SELECT any role may run; system_identifier is read only where the role
// may (pg_control_system can be revoked from PUBLIC).
func identify(ctx context.Context, db *gorm.DB) (dbIdentity, error) {
	var id dbIdentity
	if db.Dialector.Name() == "mysql" {
		var row struct {
			ServerID string `gorm:"column:server_id"`
			Host     string `gorm:"column:host"`
			Port     string `gorm:"column:port"`
			Datadir  string `gorm:"column:datadir"`
		}
		q := "SELECT CAST(@@server_id AS CHAR) AS server_id, @@hostname AS host, CAST(@@port AS CHAR) AS port, @@datadir AS datadir"
		if err := db.WithContext(ctx).Raw(q).Scan(&row).Error; err != nil {
			return id, err
		}
		id.key = strings.Join([]string{row.ServerID, row.Host, row.Port, row.Datadir}, "|")
		// MariaDB has no server_uuid: SHOW VARIABLES finds none (where
		// SELECT @@server_uuid would fail, and be logged).
		var uuid struct {
			Value string `gorm:"column:Value"`
		}
		if err := db.WithContext(ctx).Raw("SHOW VARIABLES LIKE 'server_uuid'").Scan(&uuid).Error; err != nil {
			return id, err
		}
		id.strong = uuid.Value
		var up struct {
			Value int64 `gorm:"column:Value"`
		}
		if err := db.WithContext(ctx).Raw("SHOW GLOBAL STATUS LIKE 'Uptime'").Scan(&up).Error; err != nil {
			return id, err
		}
		var now int64
		if err := db.WithContext(ctx).Raw("SELECT UNIX_TIMESTAMP()").Scan(&now).Error; err != nil {
			return id, err
		}
		id.started = now - up.Value
		return id, nil
	}
	var row struct {
		Started string `gorm:"column:started"`
		Port    string `gorm:"column:port"`
		DatOID  string `gorm:"column:datoid"`
		DatName string `gorm:"column:datname"`
	}
	// The start time as seconds since the epoch: its text would follow the
	// session's TimeZone and DateStyle.
	q := `SELECT extract(epoch FROM pg_postmaster_start_time())::text AS started, current_setting('port') AS port,
		d.oid::text AS datoid, d.datname AS datname FROM pg_database d WHERE d.datname = current_database()`
	if err := db.WithContext(ctx).Raw(q).Scan(&row).Error; err != nil {
		return id, err
	}
	id.key = strings.Join([]string{row.Started, row.Port, row.DatOID, row.DatName}, "|")
	// Only where the role may: a refused call would be logged. (A CASE
	// does not help: the privilege is checked before the query runs.)
	var may bool
	if err := db.WithContext(ctx).Raw("SELECT has_function_privilege('pg_control_system()', 'EXECUTE')").Scan(&may).Error; err != nil || !may {
		return id, err
	}
	err := db.WithContext(ctx).Raw("SELECT system_identifier::text FROM pg_control_system()").Scan(&id.strong).Error
	return id, err
}

// checkDistinct returns ErrSameDatabase if two of dbs (named names) are one
// physical database.
func checkDistinct(ctx context.Context, names []string, dbs []*gorm.DB) error {
	ids := make([]dbIdentity, len(dbs))
	for i, db := range dbs {
		id, err := identify(ctx, db)
		if err != nil {
			return fmt.Errorf("shardid: identifying database %s: %w", names[i], err)
		}
		for j := range i {
			if ids[j].same(id) {
				return withDetail(ErrSameDatabase, fmt.Sprintf("%s and %s are one database: give the router each physical database once", names[j], names[i]))
			}
		}
		ids[i] = id
	}
	return nil
}

// CheckDatabases returns an error matching ErrSameDatabase if two names of
// r reach one physical database (two DSNs for one server, such as
// localhost and 127.0.0.1), as the databases themselves report it:
// PostgreSQL's system identifier, start time, port and database, or
// MySQL's server UUID (where it has one), server id, host name, port, data
// directory and start time (from its uptime). MoveShard and Plan.Apply check it themselves; a program
// that builds a router from a configuration can call it at its start.
func CheckDatabases(ctx context.Context, r *shardid.Router) error {
	names, dbs := r.Names(), r.Databases()
	for _, db := range dbs {
		if n := db.Dialector.Name(); n != "postgres" && n != "mysql" {
			return nil // SQLite and others: no server to share
		}
	}
	return checkDistinct(ctx, names, dbs)
}

// sessionShared reports whether a and b reach one database (PostgreSQL)
// or one server (MySQL), by identify, as one role: their sessions may come
// from one pool (a pooler's is per database and role), and each may read
// what the other may.
func sessionShared(ctx context.Context, a, b *gorm.DB) (bool, error) {
	if a.Dialector.Name() != b.Dialector.Name() {
		return false, nil
	}
	var ua, ub string
	if err := a.WithContext(ctx).Raw("SELECT CURRENT_USER").Scan(&ua).Error; err != nil {
		return false, err
	}
	if err := b.WithContext(ctx).Raw("SELECT CURRENT_USER").Scan(&ub).Error; err != nil {
		return false, err
	}
	if ua != ub {
		return false, nil
	}
	ia, err := identify(ctx, a)
	if err != nil {
		return false, err
	}
	ib, err := identify(ctx, b)
	if err != nil {
		return false, err
	}
	return ia.same(ib), nil
}
