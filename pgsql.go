package shardid

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// PostgresNextID returns the SQL that makes IDs of layout l inside
// PostgreSQL for one logical shard, as Instagram did: a sequence
// schema.next_id_seq and a function schema.next_id() to use as a column
// default (see PostgresDefault). The IDs decode with l exactly as the Go
// generator's do.
//
// worker is the database's own worker id. When Go and the database both
// make IDs for the same shard, give l worker bits and each side its own
// worker id (Instagram.WithWorkerBits(1): Go worker 0, database worker 1);
// with no worker bits, only one side may write to a shard.
//
// The function reads clock_timestamp(), not now(), which is fixed for a
// whole transaction. Its limit is the layout's: SeqPerUnit IDs per shard per
// unit, shared by every table of the schema. The sequence wraps past that,
// and the 1,025th ID of one millisecond (with Instagram) repeats the first:
// the primary key then rejects the insert. Use the Go generator, which
// waits for the next unit instead, for bursts beyond that.
func PostgresNextID(l Layout, schema string, shard, worker int) (string, error) {
	if !schemaName.MatchString(schema) {
		return "", withDetail(ErrInvalidConfig, fmt.Sprintf("schema name %q: want %s", schema, schemaName))
	}
	if err := l.checkShard(shard); err != nil {
		return "", err
	}
	if err := l.checkWorker(worker); err != nil {
		return "", err
	}
	if l.unit%time.Microsecond != 0 || l.epoch%int64(time.Microsecond) != 0 {
		return "", withDetail(ErrInvalidLayout, "PostgreSQL keeps microseconds: the unit and epoch must be whole microseconds")
	}
	s := `"` + schema + `"`
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE SEQUENCE IF NOT EXISTS %s.next_id_seq;\n", s)
	fmt.Fprintf(&b, "CREATE OR REPLACE FUNCTION %s.next_id() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$\n", s)
	fmt.Fprintf(&b, "-- shardid %s, shard %d, worker %d\n", l.String(), shard, worker)
	b.WriteString("DECLARE\n")
	fmt.Fprintf(&b, "\tepoch_us bigint := %d; -- %s\n", l.epoch/int64(time.Microsecond), l.Epoch().Format(time.RFC3339Nano))
	fmt.Fprintf(&b, "\tunit_us  bigint := %d;\n", int64(l.unit/time.Microsecond))
	b.WriteString("\tnow_us   bigint := floor(extract(epoch FROM clock_timestamp()) * 1000000);\n")
	b.WriteString("\ttick     bigint := (now_us - epoch_us) / unit_us;\n")
	fmt.Fprintf(&b, "\tseq      bigint := nextval('%s.next_id_seq') %% %d;\n", s, l.SeqPerUnit())
	b.WriteString("BEGIN\n")
	b.WriteString("\tIF now_us < epoch_us THEN\n\t\tRAISE EXCEPTION 'shardid: clock is before the epoch';\n\tEND IF;\n")
	fmt.Fprintf(&b, "\tIF tick > %d THEN\n\t\tRAISE EXCEPTION 'shardid: time is past the end of the layout';\n\tEND IF;\n", l.maxTick)
	// <<, | and % share one precedence level in PostgreSQL and group to the
	// left: every term is parenthesized.
	fmt.Fprintf(&b, "\tRETURN (tick << %d) | (%d::bigint << %d) | (%d::bigint << %d) | (seq << %d);\n",
		l.timeShift, shard, l.shardShift, worker, l.workerShift, l.seqShift)
	b.WriteString("END\n$$;\n")
	return b.String(), nil
}

// PostgresDefault returns the statement that makes schema.next_id() the
// default of table's column in that schema. Give the model's ID field the
// tag `gorm:"default:(-)"`: the plugin then leaves zero IDs to the database,
// GORM reads them back with RETURNING, and AutoMigrate keeps the default.
func PostgresDefault(schema, table, column string) (string, error) {
	for _, name := range []string{schema, table, column} {
		if !schemaName.MatchString(name) {
			return "", withDetail(ErrInvalidConfig, fmt.Sprintf("name %q: want %s", name, schemaName))
		}
	}
	return fmt.Sprintf(`ALTER TABLE "%s"."%s" ALTER COLUMN "%s" SET DEFAULT "%s".next_id();`,
		schema, table, column, schema), nil
}

// InstallPostgresNextID installs next_id() (PostgresNextID, with the
// database's worker id) in the schema of every logical shard on a
// PostgreSQL database, and makes it the default of column in each of tables.
// The router needs a SchemaPattern. Run it after Migrate.
func (r *Router) InstallPostgresNextID(ctx context.Context, worker int, column string, tables ...string) error {
	if r.schemas == nil {
		return withDetail(ErrInvalidConfig, "DB-side IDs need a SchemaPattern: one next_id() per logical shard")
	}
	t := r.smap.Load()
	for s, schema := range r.schemas {
		db := r.dbs[t.DB(s)]
		if db.Dialector.Name() != "postgres" {
			continue
		}
		sql, err := PostgresNextID(r.layout, schema, s, worker)
		if err != nil {
			return err
		}
		for _, table := range tables {
			def, err := PostgresDefault(schema, table, column)
			if err != nil {
				return err
			}
			sql += def + "\n"
		}
		if err := db.WithContext(ctx).Exec(sql).Error; err != nil {
			return &ShardError{Shard: s, Database: r.names[t.DB(s)], Err: err}
		}
	}
	return nil
}
