// Package shardid makes Instagram-style sharded IDs for GORM and
// database/sql: 64-bit integers that are unique across shards and processes,
// sortable by time, and that name the logical shard their row lives on.
//
// # The ID
//
// With the default Instagram layout an ID holds, from the high bits down:
//
//	 63                      23             10         0
//	+-------------------------+--------------+----------+
//	| 41 bits: ms since epoch | 13: shard    | 10: seq  |
//	+-------------------------+--------------+----------+
//	epoch 2011-01-01T00:00:00Z; 8,192 shards; 1,024 IDs per shard per ms
//
// so id>>23 is the time, (id>>10)&0x1FFF the logical shard and id&0x3FF the
// sequence. Because the shard is in the ID, an application knows from the ID
// alone which database and schema hold the row, and moving a
// logical shard to another server never changes an ID.
//
// ID is an int64 that is a database value (Scan, Value), travels in JSON as a
// string ("2217813737473025833", since JavaScript loses digits past 2^53),
// and decodes into Time, Shard and Seq. The zero ID means "not assigned yet".
// NullID holds a nullable ID column.
//
// # Layouts
//
// A Layout fixes the epoch, the time unit and the widths and order of the
// time, shard, worker and sequence fields. The presets Instagram, Snowflake,
// Sonyflake and Simpleflake decode real IDs of the systems they name; build
// your own with NewLayout, or carve worker bits out of the sequence with
// Layout.WithWorkerBits when several processes make IDs for the same shard.
// Layouts are values: there is no global configuration.
//
// # Generating IDs
//
// A Generator issues IDs for any shard of its layout. For each shard, the IDs
// it issues strictly increase: when a shard's 1,024 IDs of a millisecond are
// used up it waits for the next millisecond instead of wrapping, it reads the
// monotonic clock so a wall-clock step cannot repeat an ID, and when the
// clock reads behind the last millisecond used it keeps issuing from that
// millisecond (up to a bound) or fails with ErrClockBackwards. Generators
// with the same layout and worker in one process share their state, so a
// generator made per request is as safe as one made at start-up.
//
// Uniqueness across processes is the deployment's part: two processes must
// not make IDs for the same shard with the same worker id at the same time.
// Give each its own shards, or its own worker id in a layout with worker
// bits.
//
// # Package layout
//
// This package holds what nearly every user needs, and needs only GORM: the
// ID and its layouts, the generator, the GORM plugin, the router of logical
// shards to physical databases (with SetMap and Gather), worker-id leases in
// SQL or in a file, ticket servers and segments. Parts that bring a
// dependency of their own live beside it:
//
//   - reshard: the shard map in a catalog table, followed by every router
//     (LISTEN/NOTIFY with pgx), map files, the fence, and moves of logical
//     shards between databases, and rebalancing.
//   - redislease: a LeaseStore in Redis (go-redis).
//   - shardidprom, shardidotel: the components' Stats as Prometheus
//     metrics or OpenTelemetry instruments.
//   - cmd/shardid: the command (new, decode, sql, move, rebalance, demo).
//
// Importing shardid compiles no database driver and no Redis client: the
// application brings the GORM driver it uses.
//
// # Errors
//
// Every error wraps one of the sentinel errors in this package (ErrSyntax,
// ErrRange, ErrShardRange, ErrClockBackwards, ...), so errors.Is works on it.
package shardid
