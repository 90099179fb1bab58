package reshard

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardid/shardid"
)

// kindError is a sentinel of its own that also matches a broader one with
// errors.Is, so callers that checked the broader one keep working while the
// message says what is really wrong.
type kindError struct {
	msg    string
	parent error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.parent }

// These errors can be returned by LoadMapFile and the Catalog.
var (
	// ErrInvalidMap is returned when a shard map file is not valid: not JSON
	// of the expected form, an unknown database name, a bad range, or a shard
	// named twice or not at all. errors.Is(err, shardid.ErrInvalidConfig)
	// also holds.
	ErrInvalidMap error = &kindError{"shardid: invalid shard map", shardid.ErrInvalidConfig}

	// ErrInvalidCatalog is returned when the catalog's content does not fit
	// the router reading it (another number of shards, a database the router
	// does not know), or it holds no setup. errors.Is(err,
	// shardid.ErrInvalidConfig) also holds.
	ErrInvalidCatalog error = &kindError{"shardid: invalid catalog", shardid.ErrInvalidConfig}

	// ErrCatalogConflict is returned when a conditional change of the
	// catalog finds it changed since it was read: another version than the
	// one expected (Catalog.SaveIf), or a shard no longer where the mover
	// found it. Reload and retry.
	ErrCatalogConflict = errors.New("shardid: the catalog changed meanwhile")

	// ErrSecretInDSN is returned by Catalog.SaveSetup when a database's DSN
	// carries a literal password (postgres://u:p@h/db, password=p, or
	// MySQL's u:p@tcp(...)/db): every process that reads the catalog could
	// read it. Write the password as a ${NAME} placeholder, expanded from the
	// environment when the setup is loaded, or leave it out and use a
	// password file (PostgreSQL's ~/.pgpass or PGPASSFILE); or set
	// Catalog.AllowPasswords.
	ErrSecretInDSN = errors.New("shardid: a DSN in the catalog's setup carries a literal password")

	// ErrDSNVariable is returned by Catalog.LoadSetup when a ${NAME}
	// placeholder in a database's DSN names an environment variable that is
	// not set, or one whose value the DSN cannot carry.
	ErrDSNVariable = errors.New("shardid: a DSN placeholder cannot be expanded")

	// ErrMapDiffers is returned by Catalog.Save when the catalog holds a map
	// that differs from the router's, and by MoveShard and Plan.Apply when
	// the router's map differs from the catalog's: a configuration change
	// (a database appended to RouterConfig.Databases without a Map
	// recomputes the default split) must never move a shard's route without
	// a move. Build the router from the catalog's map (Catalog.Load and
	// Router.SetMap, or Follow); overwrite the catalog only deliberately
	// (Catalog.Overwrite). errors.Is(err, ErrCatalogConflict) also holds.
	ErrMapDiffers error = &kindError{"shardid: the router's map differs from the catalog's", ErrCatalogConflict}
)

// These errors can be returned by MoveShard, Fence and Unfence.
var (
	// ErrMoveInProgress is returned when another mover (in this process or
	// another) is moving the same logical shard, or when Unfence is called
	// while a move of the shard runs.
	ErrMoveInProgress = errors.New("shardid: a move of this shard is in progress")

	// ErrMoveLockLost is returned by MoveShard, Fence, Unfence and
	// DropShardCopy when the move lock they held was lost: the server
	// ended the lock's session (idle_session_timeout, a reaper, a
	// restart, a network reset), so another mover or an abort may have
	// started since. The operation stops before its next step that must
	// not run without the lock; a move that stops so before its fence for
	// good leaves the map where it was and the source writable, as a
	// cancelled one does. Find what ends sessions, and run it again.
	ErrMoveLockLost = errors.New("shardid: the move lock was lost")

	// ErrFenceLapsed is returned by MoveShard when its fence ran out (by the
	// database's clock) or was lifted or replaced before the move could
	// fence the old copy for good, as when the mover was paused longer than
	// MoveOptions.FenceFor: writes may have reached the old copy after the
	// last copy, so the map is not flipped.
	ErrFenceLapsed = errors.New("shardid: the move's fence lapsed before the flip")

	// ErrShardMoved is returned by Fence and Unfence when the copy of the
	// shard they would change was fenced for good by a move (its old copy):
	// the router's map is out of date, or the move failed after it fenced
	// the old copy and before the catalog named the new one (run the move
	// again to finish it). DropUnfinishedCopies returns it when the map it
	// is given shows itself stale, and drops nothing.
	ErrShardMoved = errors.New("shardid: this copy of the shard was moved away and is fenced for good")

	// ErrLockWait is returned by MoveShard, Fence and Unfence when one of
	// their steps could not get the locks it needs on the shard's tables
	// within two minutes of tries: a transaction stays open on them (an
	// idle session in a transaction, a long batch, a paused process).
	// Each try waits 500 ms at most, so writers are never held back for
	// longer; end that transaction and run the operation again. A move
	// that gives up before its fence for good leaves the map where it was.
	ErrLockWait = errors.New("shardid: a transaction on the shard's tables holds the locks a move needs")

	// ErrCopyDiffers is returned by MoveShard when a row of the target
	// differs from the source's and no change waiting in the log explains
	// it: a row that differed when both sides were compared after the copy
	// (a write that skipped the change log before then, a target that
	// cannot hold the source's values), or one that the target rewrote as
	// the mover wrote it (a trigger, a default). A write that skips the
	// change log after the comparison is not seen. The map is not flipped
	// and the source is writable again; the message names the first key,
	// and what in the table's definitions can explain the difference: a
	// column of another type, collation or character set on the target,
	// one missing on either side, a trigger of the target's own.
	ErrCopyDiffers = errors.New("shardid: the copies differ")

	// ErrTableChanged is returned by MoveShard when a column of a table it
	// moves changed type while it ran (a migration run meanwhile) so that
	// its checks, which read each column by the type it had when the move
	// began, cannot read it any longer (PostgreSQL). The map is not
	// flipped and the source is writable again; run the move again once
	// the migration is done.
	ErrTableChanged = errors.New("shardid: a column of a moved table changed type during the move")

	// ErrSameDatabase is returned by MoveShard, Plan.Apply and
	// CheckDatabases when two names of the router reach one physical
	// database (two DSNs for one server, such as localhost and 127.0.0.1):
	// a move between them would copy the shard onto itself and delete it.
	// Give the router each database once.
	ErrSameDatabase = errors.New("shardid: two names of the router are one database")

	// ErrUnlistedTable is returned by MoveShard when the shard's schema on
	// the source holds a table that MoveOptions (Models or Tables) does not
	// list: the move would leave its rows behind, and DropShardCopy would
	// then delete them. The message names the tables.
	ErrUnlistedTable = errors.New("shardid: the shard holds a table the move does not list")

	// ErrModelMismatch is returned by MoveShard, before it creates
	// anything, when a model of MoveOptions.Models does not match its table
	// on the source: the table is missing, or a column is missing from the
	// model or from the table. The message names them.
	ErrModelMismatch = errors.New("shardid: a model does not match the source's table")

	// ErrCopyNotMoved is returned by DropShardCopy when the copy it would
	// drop is not a move's leftover (it takes writes: the router's map is
	// stale and the copy is the shard's home), or holds a table the shard's
	// home does not hold, or rows in a table that is empty on the home: what
	// no move carried over. Nothing is dropped.
	ErrCopyNotMoved = errors.New("shardid: the copy holds what the shard's home does not")

	// ErrMoverPrivileges is returned by MoveShard, before it creates
	// anything, when the mover could not give the shard's new copy what
	// the old one has, or could not create it at all. On PostgreSQL: the
	// source's schema or objects belong to a role the mover may not make
	// them belong to on the target (it is not a member of that role: run
	// the move as that role, or GRANT it to the mover), or a role granted
	// privileges on the shard may not connect to the target database
	// (GRANT CONNECT ON DATABASE). On MySQL/MariaDB with binary logging,
	// the mover may not create triggers: grant it SUPER, or set
	// log_bin_trust_function_creators = 1 on the server. The message
	// names the role and the fix.
	//
	// SplitShards returns it before it changes anything, and PlanSplit
	// refuses ("privileges"), for the same reasons and, on PostgreSQL,
	// when the mover lacks a privilege a split needs on the monolith's
	// sharded tables (SELECT, INSERT, UPDATE, DELETE, TRIGGER, TRUNCATE),
	// CREATE on their schema, or CREATE on a target database, when the
	// sharded tables have several owners or row-level security, or when a
	// role that owns or uses them may not connect to a target; on MySQL,
	// when a user that may read or write the sharded tables may not on
	// the shards' databases.
	ErrMoverPrivileges = errors.New("shardid: the mover lacks a privilege the move needs")
)

// These errors can be given to the OnError of Follow and FollowWith.
var (
	// ErrListenUnavailable is given once to OnError when the catalog's
	// notifications cannot reach Follow: two sessions of the catalog's DB
	// were served by one server process, or a notification sent from
	// another session did not arrive in time. That is what a pooler in
	// transaction mode (PgBouncer's pool_mode = transaction) does to
	// LISTEN. Follow then polls every interval, which works through a
	// pool; for instant updates, give it a direct or session-mode
	// connection in FollowOptions.ListenDSN.
	ErrListenUnavailable = errors.New("shardid: LISTEN does not work through this connection")
)

// hintPooler returns err with shardid.ErrPooledPreparedStatement added
// when err is PostgreSQL's "prepared statement already exists" (42P05) or
// "does not exist" (26000), as routed statements' errors have it, and err
// unchanged otherwise.
func hintPooler(err error) error {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || (pg.Code != "42P05" && pg.Code != "26000") || errors.Is(err, shardid.ErrPooledPreparedStatement) {
		return err
	}
	return &pooledStatementError{err}
}

// hintTableChanged returns err with ErrTableChanged added when err is
// PostgreSQL's "function does not exist" (42883) for one of the hash
// functions a move reads a column by its type with, and err unchanged
// otherwise: the column's type changed since the move read it.
func hintTableChanged(err error) error {
	var pg *pgconn.PgError
	if err == nil || errors.Is(err, ErrTableChanged) || !errors.As(err, &pg) || pg.Code != "42883" ||
		!strings.Contains(pg.Message, "hashint8extended") && !strings.Contains(pg.Message, "hashtextextended") {
		return err
	}
	return fmt.Errorf("%w: %w", ErrTableChanged, err)
}

// pooledStatementError is a driver's error that
// shardid.ErrPooledPreparedStatement explains.
type pooledStatementError struct{ err error }

func (e *pooledStatementError) Error() string {
	return shardid.ErrPooledPreparedStatement.Error() + ": " + e.err.Error()
}

func (e *pooledStatementError) Unwrap() []error {
	return []error{shardid.ErrPooledPreparedStatement, e.err}
}

// detailError adds context to a sentinel error while keeping errors.Is
// working: "shardid: invalid catalog: the catalog maps 8 shards, the router
// has 16".
type detailError struct {
	err    error
	detail string
}

func (e *detailError) Error() string { return e.err.Error() + ": " + e.detail }
func (e *detailError) Unwrap() error { return e.err }

func withDetail(err error, detail string) error {
	return &detailError{err: err, detail: detail}
}

// These errors can be returned by ParsePlan, Plan.Check and Plan.Apply.
var (
	// ErrInvalidPlan is returned when a plan is not one PlanRebalance (or,
	// for ParseSplitPlan and RunSplit, PlanSplit) could have made: not
	// JSON of a plan's form (an unknown field, a field missing), an
	// unknown measure or database, a move whose source is not where the
	// plan's map puts the shard, a shard moved twice, a shard outside the
	// plan's logical shards, a plan made for another map or other tables.
	// errors.Is(err, shardid.ErrInvalidConfig) also holds.
	ErrInvalidPlan error = &kindError{"shardid: invalid rebalancing plan", shardid.ErrInvalidConfig}

	// ErrStalePlan is returned when the map changed since a plan was made
	// in a way the plan does not account for: a shard it does not move
	// has moved, or a shard it moves is on neither the move's source nor
	// its target. Make a new plan from the catalog's map.
	ErrStalePlan = errors.New("shardid: the rebalancing plan is stale: the map changed since it was made")

	// errInvalidSplitPlan and errStaleSplitPlan are ErrInvalidPlan and
	// ErrStalePlan (errors.Is holds) for a split's plan, whose errors
	// should not speak of rebalancing.
	errInvalidSplitPlan error = &kindError{"shardid: invalid split plan", ErrInvalidPlan}
	errStaleSplitPlan   error = &kindError{"shardid: the split plan is stale: the map changed since it was made", ErrStalePlan}
)

// These errors can be returned by the leftovers' functions.
var (
	// ErrNoCopy is returned when a database holds no copy of a shard to
	// drop.
	ErrNoCopy = errors.New("shardid: no copy of the shard there")
)

// These errors can be returned by PlanSplit, SplitShards, RunSplit and
// AbortSplit.
var (
	// ErrSplitRefused is returned by PlanSplit (and by a split that
	// checks again before it starts) when the monolith cannot be split
	// safely: a sharded table without a primary key on id, rows whose
	// sharding key is NULL or negative (or whose parent is missing), a
	// foreign key whose rows cross shards or reach a global table, a
	// table that no rule covers, a target that holds data. The error
	// names the tables and the first rows; SplitPlan.Refusals lists them
	// all.
	ErrSplitRefused = errors.New("shardid: the monolith cannot be split safely")

	// ErrTargetHoldsData is returned when a shard's schema on its target
	// holds rows that no split of this monolith copied there.
	// errors.Is(err, ErrSplitRefused) also holds.
	ErrTargetHoldsData error = &kindError{"shardid: a split's target holds data", ErrSplitRefused}

	// ErrTablesChanged is returned by PlanSplit, SplitShards, RunSplit,
	// RollbackSplit and CleanSplit when SplitConfig.Tables declares the
	// monolith's sharded tables otherwise (another key, parent or table),
	// or the map has other logical shards or another schema pattern, or
	// the catalog another table, than the split under way there began
	// with: its triggers, its seals and the sums it verified follow the
	// first declarations, its shards' schemas the first pattern, and the
	// routers the first catalog. Declare them as they were, or roll back
	// every split shard and abort the split first. AbortSplit returns it
	// for another count of logical shards, pattern or catalog.
	// errors.Is(err, ErrSplitRefused) also holds.
	ErrTablesChanged error = &kindError{"shardid: the split is configured otherwise than when it began (its tables, logical shards, schema pattern or catalog)", ErrSplitRefused}

	// ErrNotShared is returned when a split is asked to move a shard that
	// the map (or the catalog) does not place in the monolith's shared
	// tables: split already, or never in this monolith.
	ErrNotShared = errors.New("shardid: the shard is not in the monolith's shared tables")
)

// ErrPoolTooSmall is returned by MoveShard, the split's and roll-back's
// functions, Fence, Unfence and DropShardCopy when the database whose lock
// they take has a pool of one connection (SetMaxOpenConns(1)): the lock
// holds a connection for the whole run, and every other statement on that
// database would wait for it for ever. Nothing is changed; allow the pool
// two connections or more.
var ErrPoolTooSmall = errors.New("shardid: the database's pool allows one connection, which the move lock would hold: allow it two or more")

// These errors can be returned by RollbackSplit and AbortRollback.
var (
	// ErrRollbackRefused is returned when shards cannot be rolled back into
	// the monolith safely: the message names the shard and why. Nothing
	// is changed.
	ErrRollbackRefused = errors.New("shardid: the shard cannot be rolled back into the monolith safely")

	// ErrNotSplit is returned when a shard to roll back did not come from
	// the monolith by a split: the monolith's split state does not hold it
	// sealed with what the split verified, its schema on the database the
	// map names is missing or fenced for good, or another database holds
	// a copy of it (the shard was moved since it was split, or a move of
	// it is under way). errors.Is(err, ErrRollbackRefused) also holds.
	ErrNotSplit error = &kindError{"shardid: the shard was not split out of this monolith", ErrRollbackRefused}

	// ErrKeyCollision is returned when a row of a shard to roll back has
	// a key that a row of another shard holds in the monolith's table (its
	// id, or a value of another unique index), or when a row of the
	// monolith that belongs to no shard (its parent row missing) would
	// join the shard as the child of one of its rows. The message names
	// the table and the key. Found before the roll-back starts, nothing is
	// changed; found while it copies (a key written since), it stops
	// before its fence and the shard stays on its target.
	// errors.Is(err, ErrRollbackRefused) also holds.
	ErrKeyCollision error = &kindError{"shardid: a key of the shard is taken in the monolith", ErrRollbackRefused}

	// ErrMonolithEmptied is returned when a roll-back would take writes
	// into a monolith that the split's last batch emptied (PostgreSQL),
	// without RollbackOptions.AfterLastBatch: its tables refuse every
	// write since, which is what refuses a router whose map is from
	// before the split. Rolling back drops that refusal: such a router's
	// UPDATE or DELETE of a shard still split then finds no row, which the
	// routers' check of a write that changed no row still refuses
	// (ErrShardMoving), but which SQL run outside them, or through the
	// calls they do not check, reports as a success that changed nothing.
	// Nothing is changed; set
	// AfterLastBatch (shardid split rollback --after-last-batch) once
	// every router has loaded the catalog's map since the last batch.
	// errors.Is(err, ErrRollbackRefused) also holds.
	ErrMonolithEmptied error = &kindError{"shardid: the split's last batch emptied the monolith", ErrRollbackRefused}
)
