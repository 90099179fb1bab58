package shardid

import (
	"errors"
	"fmt"
)

// These errors can be returned by Parse, ID.UnmarshalText, ID.UnmarshalJSON
// and ID.Scan (and their NullID counterparts).
var (
	// ErrSyntax is returned when text is not a canonical decimal ID: empty,
	// a plus sign, a space, a leading zero, "-0", an exponent, a fraction
	// or any other character that is not a decimal digit.
	ErrSyntax = errors.New("shardid: invalid syntax")

	// ErrRange is returned when a value is negative or larger than the
	// largest int64 (the largest uint64, for a UUIDShort), however it
	// arrives: a well-formed negative number in text ("-5", as Parse,
	// UnmarshalText, UnmarshalJSON and Scan read it) is out of range as a
	// negative int64 is. A valid ID is never negative.
	ErrRange = errors.New("shardid: value out of range")

	// ErrUnsupportedType is returned when Scan is given a source type it
	// cannot convert, such as a float or a time.
	ErrUnsupportedType = errors.New("shardid: unsupported scan type")
)

// These errors can be returned by NewLayout and Layout.WithWorkerBits.
var (
	// ErrInvalidLayout is returned when a layout's field widths, order or
	// time unit do not describe a usable 64-bit ID.
	ErrInvalidLayout = errors.New("shardid: invalid layout")

	// ErrEpochInFuture is returned when a layout's epoch is after the
	// current time.
	ErrEpochInFuture = errors.New("shardid: epoch is in the future")

	// ErrEpochRange is returned when a layout's epoch is before
	// 1677-09-21T00:12:43.145224192Z, the earliest instant int64 nanoseconds
	// since 1970 can hold. It wraps ErrInvalidLayout.
	ErrEpochRange = fmt.Errorf("%w: epoch is before 1677-09-21T00:12:43.145224192Z, the earliest time int64 nanoseconds hold", ErrInvalidLayout)
)

// These errors can be returned by Layout.Compose and by a Generator.
var (
	// ErrShardRange is returned when a shard does not fit the layout's shard
	// field.
	ErrShardRange = errors.New("shardid: shard out of range")

	// ErrWorkerRange is returned when a worker id does not fit the layout's
	// worker field.
	ErrWorkerRange = errors.New("shardid: worker out of range")

	// ErrSeqRange is returned when a sequence number does not fit the
	// layout's sequence field.
	ErrSeqRange = errors.New("shardid: sequence out of range")

	// ErrTimeBeforeEpoch is returned when a time (or the clock) is before the
	// layout's epoch.
	ErrTimeBeforeEpoch = errors.New("shardid: time is before the epoch")

	// ErrTimeOverflow is returned when a time is at or after the layout's
	// End: its time field would not fit, or the ID would be negative.
	ErrTimeOverflow = errors.New("shardid: time is past the end of the layout")
)

// These errors can be returned by NewGenerator and Generator methods.
var (
	// ErrNoWorker is returned by NewGenerator when the layout has worker bits
	// and no worker id was given with WithWorker. Picking worker 0 silently
	// is how two processes end up issuing the same IDs.
	ErrNoWorker = errors.New("shardid: layout has worker bits but no worker id was given")

	// ErrClockBackwards is returned when the clock reads further behind the
	// last time unit a shard used than the generator tolerates (see
	// WithMaxClockBackwards). No ID is issued; the call may be retried once
	// the clock has caught up.
	ErrClockBackwards = errors.New("shardid: clock moved backwards")

	// ErrSequenceExhausted is returned when a shard's sequence for the
	// current time unit is used up and the clock does not reach the next
	// unit within the time that should take (a stopped or very slow clock).
	ErrSequenceExhausted = errors.New("shardid: sequence exhausted and the clock is not advancing")
)

// These errors can be returned by WorkerFromHostname, WorkerFromPodName and
// WorkerFromFile, besides ErrWorkerRange.
var (
	// ErrNoOrdinal is returned when a pod's name, or the downward API file
	// meant to carry its pod index, holds no StatefulSet ordinal: a name
	// that does not end in -N, a missing file, an empty value (the label is
	// not set) or a labels file without the pod-index label.
	ErrNoOrdinal = errors.New("shardid: no StatefulSet pod ordinal")
)

// detailError adds context to a sentinel error while keeping errors.Is
// working: "shardid: shard out of range: 9000 is not in [0, 8192)".
type detailError struct {
	err    error
	detail string
}

func (e *detailError) Error() string { return e.err.Error() + ": " + e.detail }
func (e *detailError) Unwrap() error { return e.err }

func withDetail(err error, detail string) error {
	return &detailError{err: err, detail: detail}
}

// configError is ErrInvalidConfig for one component's configuration:
// "shardid: invalid router configuration: no databases".
type configError struct {
	component, detail string
}

func (e *configError) Error() string {
	return "shardid: invalid " + e.component + " configuration: " + e.detail
}
func (e *configError) Unwrap() error { return ErrInvalidConfig }

// invalidConfig returns ErrInvalidConfig for component ("router",
// "plugin") with detail.
func invalidConfig(component, detail string) error {
	return &configError{component: component, detail: detail}
}

// These errors can be returned by NewPlugin and by creates through the
// plugin (as the *gorm.DB's Error).
var (
	// ErrInvalidConfig is returned when a configuration cannot work, such
	// as more logical shards than the layout holds: by NewPlugin and
	// NewRouter (their messages say "invalid plugin configuration" and
	// "invalid router configuration"), AcquireLease, the allocators, and
	// creates through a plugin that lacks the source a model asks for.
	ErrInvalidConfig = errors.New("shardid: invalid configuration")

	// ErrInvalidTag is returned when a model's shardid struct tags are
	// wrong: an unknown value, two sharding keys, or a key or ID field of a
	// type the plugin cannot use.
	ErrInvalidTag = errors.New("shardid: invalid model tag")

	// ErrNoShardKey is returned when a row has no sharding key and the
	// plugin is strict. A ShardKey function or method may return it to say
	// that a row has no key.
	ErrNoShardKey = errors.New("shardid: row has no sharding key")

	// ErrInvalidShardKey is returned when a row's sharding key cannot name a
	// shard: a negative number, an empty string, or an unassigned ID.
	ErrInvalidShardKey = errors.New("shardid: invalid sharding key")

	// ErrNotAddressable is returned when a create needs to set the ID of a
	// row it cannot write to, such as a struct passed by value: pass a
	// pointer.
	ErrNotAddressable = errors.New("shardid: cannot set the ID of a row passed by value")

	// ErrNilRow is returned when a slice of rows holds a nil pointer.
	ErrNilRow = errors.New("shardid: nil row")

	// ErrWrongShard is returned when a row created through a Router's
	// *gorm.DB belongs to a shard that lives elsewhere: another schema, or
	// another database. GORM creates children on their parent's connection,
	// so a child keyed to another database would otherwise land in the
	// wrong place. A monolith being split (package reshard, with
	// SplitConfig.Layout) also refuses with it a write that would leave a
	// row whose ID names another shard than its key: an ID the split could
	// not find the row by.
	ErrWrongShard = errors.New("shardid: row belongs to another shard than the statement is routed to")

	// ErrShardMoving is returned by routed writes to a logical shard whose
	// tables are fenced for a move (package reshard), and on MySQL/MariaDB
	// by a write that opened the shard's table while a move or a split
	// created or dropped the triggers on it (error 1146 for a table only
	// those triggers read, such as shardid_changes: MariaDB's MDEV-26048;
	// the statement did not run). A routed UPDATE or DELETE that changed no
	// row on a database that a split or a move took the shard away from
	// (the router's map is stale) fails with it too. It is retryable: once
	// the router follows the new map, the write goes to the shard's new
	// database.
	ErrShardMoving = errors.New("shardid: shard is moving; retry")

	// ErrUncheckedWrite is returned by a routed UPDATE or DELETE that
	// changed no row when the router could not ask the database whether a
	// split or a move had taken the shard away from it (a router whose map
	// is stale would otherwise report a write it lost as "0 rows changed"):
	// the role may not call shardid_split_sealed (PostgreSQL) or read
	// shardid_split_state or a shard's shardid_fence_state (MySQL). The
	// error names the grant that fixes it; the write itself changed nothing.
	// shardsql's PrepareContext of such a write to a shard shared in a
	// monolith returns it too, before anything runs: the prepared
	// statement's executions would pass no router.
	ErrUncheckedWrite = errors.New("shardid: a write that changed no row could not be checked against a split or a move")

	// ErrUnroutedSQL is returned for raw SQL (Raw, Exec) run through a
	// Router's *gorm.DB when the router has a SchemaPattern and the SQL
	// neither has SchemaPlaceholder nor names the shard's schema: its
	// tables would resolve through the search_path (PostgreSQL) or the
	// connection's database (MySQL), such as a public.photos left from
	// before the shards, not in the shard. Nothing runs. Write
	// {{schema}}.photos, or use Router.Table; run SQL that names no table
	// of the shard through AllowUnroutedSQL.
	ErrUnroutedSQL = errors.New("shardid: raw SQL does not name the shard's tables")

	// ErrPooledPreparedStatement is returned, with the driver's error and in
	// the statement's *ShardError, when PostgreSQL reports that a prepared
	// statement already exists (SQLSTATE 42P05) or does not exist (26000).
	// That is the mark of a driver that prepares statements on a connection
	// (pgx's default, default_query_exec_mode=cache_statement) behind a
	// pooler in transaction mode (PgBouncer before 1.21, or without
	// max_prepared_statements): each transaction may get another server
	// connection, which lacks the statements the last one prepared, or has
	// another client's of the same name. Use
	// default_query_exec_mode=simple_protocol, exec or cache_describe in the
	// DSN, or PgBouncer 1.21 or later with max_prepared_statements.
	ErrPooledPreparedStatement = errors.New("shardid: prepared statements do not survive a transaction pooler: use default_query_exec_mode=simple_protocol (or exec, or cache_describe) in the DSN, or PgBouncer 1.21+ with max_prepared_statements")

	// ErrPluginConflict is returned when a plugin meets a *gorm.DB that
	// already has a different shardid plugin installed: NewRouter given a
	// Plugin, or Plugin.Initialize. Keeping the other plugin would leave the
	// IDs to a generator the caller did not choose (say, one without the
	// worker id it leased).
	ErrPluginConflict = errors.New("shardid: the database already has a different shardid plugin")

	// ErrAmbiguousID is returned when a model has several primary-key
	// fields of type ID, none named ID or tagged `shardid:"id"`, and a row
	// leaves one of them zero: the plugin cannot tell which one to fill.
	ErrAmbiguousID = errors.New("shardid: which primary-key field is the ID is ambiguous")

	// ErrNoIDSource is returned when a row's key is zero and the plugin has
	// nothing to fill it from: a Flake key without PluginConfig.Flake, or a
	// PinterestID key without a type and source in its tag.
	ErrNoIDSource = errors.New("shardid: no source configured for a zero key")

	// ErrInvalidIDValue is returned when a create from a map carries an ID
	// the plugin cannot read exactly: a float that is not an integer or is
	// beyond 2^53, a string that is not a canonical decimal ID, a negative
	// number, or a value of another type.
	ErrInvalidIDValue = errors.New("shardid: invalid ID value in a map")

	// ErrMixedShards is returned when rows given to a Router's ShardOfRow,
	// ForRow, Create, Save or Delete belong to several shards: one statement
	// runs on one shard. Router.CreateByShard writes such rows shard by
	// shard.
	ErrMixedShards = errors.New("shardid: the rows belong to several shards")
)

// These errors can be returned by AcquireLease, by a LeaseStore, and by the
// generator of a Lease.
var (
	// ErrNoFreeWorker is returned when every worker id is leased by another
	// process.
	ErrNoFreeWorker = errors.New("shardid: no free worker id")

	// ErrLeaseLost is returned by a leased generator when its lease could not
	// be renewed in time (the store is gone, the network is cut, the process
	// was paused), or was taken over, or was released. It issues no ID until
	// the lease is renewed. A LeaseStore's Renew and Release, and
	// Lease.Close, return it for a claim that is no longer current: its
	// worker id was released or claimed again since, so its token no longer
	// matches.
	ErrLeaseLost = errors.New("shardid: worker id lease lost")
)

// These errors can be returned by the Setup methods (SQLLeaseStore.Setup,
// reshard's Catalog.Setup) and by what needs the tables they create.
var (
	// ErrSetupRequired is returned when a table (or sequence) that shardid
	// keeps its state in does not exist and the role at hand could not
	// create it: it may not create tables, or its connection is read-only.
	// The error names the table and what to run (SQLLeaseStore.Setup,
	// Catalog.Setup, or the constructor) once with a role that may create
	// tables; it also wraps the database's error. Once the tables exist,
	// running needs only the privileges on them that each type documents.
	ErrSetupRequired = errors.New("shardid: setup required")
)

// These errors can be returned by NewTicketAllocator, NewSegmentAllocator
// and their methods.
var (
	// ErrTicketConfigChanged is returned by NewTicketAllocator when a
	// ticket server was set up for another list of servers (another number
	// of servers, or another place in the list) than the one given: its
	// tickets would repeat another server's.
	ErrTicketConfigChanged = errors.New("shardid: ticket servers differ from the ones they were set up with")

	// ErrClosed is returned by the Next method of a closed TicketAllocator or
	// SegmentAllocator.
	ErrClosed = errors.New("shardid: allocator is closed")
)

// These errors can be returned by Router.Migrate and Router.MigrateWith,
// inside the *ShardError that names the database.
var (
	// ErrMigrateLocked is returned when another Migrate of the same shards
	// (another process, or another Router over the same database) held the
	// database's migration lock for all of MigrateOptions.LockWait. The
	// error that wraps it names the holder when the server says who it is.
	// Let the other Migrate finish, or end it, and try again.
	ErrMigrateLocked = errors.New("shardid: another Migrate holds the migration lock")

	// ErrMigrateLockLost is returned when the session that held the
	// migration lock ended during Migrate (a server timeout, a restart, a
	// broken network): Migrate stops before its next step, which another
	// Migrate may be running at the same time. What was done stays done;
	// run Migrate again.
	ErrMigrateLockLost = errors.New("shardid: the migration lock was lost")

	// ErrMigratePoolTooSmall is returned when a database's pool allows only
	// one open connection (sql.DB.SetMaxOpenConns(1)) and the router has a
	// SchemaPattern: Migrate holds the migration lock on one connection
	// and works on another, and would wait forever for the second. Allow
	// at least two (five lets MySQL spread its DDL over four).
	ErrMigratePoolTooSmall = errors.New("shardid: Migrate needs at least two connections per database")
)
