package reshard

import (
	"errors"

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
)

// These errors can be returned by MoveShard, Fence and Unfence.
var (
	// ErrMoveInProgress is returned when another mover (in this process or
	// another) is moving the same logical shard, or when Unfence is called
	// while a move of the shard runs.
	ErrMoveInProgress = errors.New("shardid: a move of this shard is in progress")

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
	// again to finish it).
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
	// and the source is writable again; the message names the first key.
	ErrCopyDiffers = errors.New("shardid: the copies differ")

	// ErrMoverPrivileges is returned by MoveShard, before it creates
	// anything, when the mover could not give the shard's new copy what
	// the old one has, or could not create it at all. On PostgreSQL: the
	// source's schema or objects belong to a role the mover may not make
	// them belong to on the target (it is not a member of that role, or
	// that role may not create schemas in the target database; run the
	// move as that role, or GRANT it to the mover), or a role granted
	// privileges on the shard may not connect to the target database
	// (GRANT CONNECT ON DATABASE). On MySQL/MariaDB with binary logging,
	// the mover may not create triggers: grant it SUPER, or set
	// log_bin_trust_function_creators = 1 on the server. The message
	// names the role and the fix.
	ErrMoverPrivileges = errors.New("shardid: the mover lacks a privilege the move needs")
)

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
