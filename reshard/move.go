package reshard

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/sqlddl"
	"gorm.io/gorm"
)

// timeNow is the mover's clock, a seam for tests. It only measures
// MoveResult.Fenced: fences are judged by the database's clock.
var timeNow = time.Now

// MoveOptions configures MoveShard.
type MoveOptions struct {
	// Models are the shard's tables, as models. Each must have an "id"
	// primary key. Models or Tables is required.
	Models []any

	// Tables names the shard's tables when there are no models (as in the
	// shardid move command): their definitions are copied from the source,
	// columns and primary key, without other indexes or defaults.
	Tables []string

	// Batch is how many rows each INSERT of the first copy moves on
	// MySQL, and how often Progress is called during a COPY on
	// PostgreSQL. If 0, 1000.
	Batch int

	// FenceFor is how long the source stays fenced if the move dies before
	// it fences the source for good: after that the source is writable
	// again. It is judged by the source database's clock, never the
	// mover's. The last changes and the verification under the fence must
	// finish within it, or the move fails with ErrFenceLapsed. If 0, 1m.
	FenceFor time.Duration

	// Progress, if not nil, is called after every batch with the table and
	// the rows copied from it so far.
	Progress func(table string, copied int64)

	// OnStage, if not nil, is called as the move reaches each stage:
	// "created" (the target's tables exist, fenced for all but the
	// mover), "copied" (the first copy is
	// done), "fenced", "verified", "sealed" (the source is fenced for good)
	// and "flipped" (the catalog and the router name the target).
	OnStage func(stage string)

	// CompareSource, if set, compares the source with the copy once the
	// copy is made, by sums over buckets of keys, which costs a second
	// read of the source's rows. Without it the copy verifies itself: the
	// sum over the target's rows must equal that of the rows sent, hashed
	// as they were read; from then on the change log
	// carries every write. The comparison also catches writes to the
	// source that no trigger saw (a session with session_replication_role
	// = replica, a trigger disabled by hand), which the change log misses.
	CompareSource bool

	// LockWait is how long MoveShard waits for the shard's move lock while
	// another session holds it: a mover that was killed, whose session
	// the server has not ended yet, or a move under way. If 0,
	// DefaultLockWait; if negative, MoveShard tries once. Past it the move
	// fails with ErrMoveInProgress, naming the session that holds the lock.
	LockWait time.Duration
}

// MoveResult says what MoveShard did.
type MoveResult struct {
	Shard    int
	From, To string
	Tables   []TableCheck // as verified on both sides
	Version  int64        // the catalog version of the new map
	Fenced   time.Duration

	// Copied is how many rows the first copy (the snapshot) moved, in
	// CopyTime.
	Copied   int64
	CopyTime time.Duration

	// ComparedSource says that the first copy was checked by comparing
	// both sides, which reads the source's rows a second time: asked for
	// (MoveOptions.CompareSource), or because the copy could not verify
	// itself, its sums on the target differing from those it sent. A
	// difference the comparison then explains (rows written meanwhile, a
	// hash computed differently) costs time, not correctness.
	ComparedSource bool
}

// TableCheck is a table's row count and checksum, equal on both sides.
// The checksum is the sum, modulo 2^64, of a 64-bit hash of each row,
// computed by the databases themselves, over id and then the table's other
// columns in their order. On PostgreSQL a move hashes each integer column
// c at place i of that list (1 for id) with coalesce(hashint8extended(c,
// i) # hashint8extended(c::int8 >> 32, -i), i), each text or varchar
// column with coalesce(hashtextextended(c COLLATE "C", i), i), where the
// target's column is of the same kind, the other columns together with
// hashtextextended(ROW(...)::text, 0), and XORs the terms (#); a split
// hashes every row as hashtextextended(ROW(...)::text, 0). On
// MySQL a row's hash is the first 64 bits of the MD5 of its columns,
// QUOTE'd and joined by commas.
type TableCheck struct {
	Table    string
	Rows     int64
	Checksum uint64
}

// MoveShard moves logical shard to the database named target, with every ID
// unchanged: it creates the shard's schema and tables on the target, starts
// a change log on the source (triggers record the key of every row
// written), copies the rows (on PostgreSQL with COPY FREEZE, in one
// transaction that empties the target's tables first), checks that the target
// holds what it sent (by a hash of each row, computed by the databases:
// MoveOptions.CompareSource) and applies the change log, verifying every
// row as it writes it, while the
// source takes writes; then it fences the source (its tables refuse
// writes, so a router still on the old map gets ErrShardMoving instead of
// writing to the wrong place), applies the rest of the change log,
// compares again only the keys still in doubt (ErrCopyDiffers if one
// differs), fences the source for good, and only then flips the map in
// the catalog and in r. The fence covers the tail, not the shard's size.
// A move cancelled through ctx returns an error that wraps ctx's. Writes
// to the shard fail with ErrShardMoving from the fence until routers
// follow the new map; other shards are untouched.
//
// The fence is judged by the source database's clock alone. If it runs out
// before the source is fenced for good (the mover paused longer than
// FenceFor), or someone lifts or replaces it, the move does not flip and
// returns ErrFenceLapsed.
//
// While it runs, the move holds the shard's move lock on the source
// database: a second move of the same shard, Fence, Unfence and
// DropShardCopy of it wait for it (MoveOptions.LockWait, DefaultLockWait)
// and then fail with ErrMoveInProgress, naming the session that holds it.
// The lock lives in a transaction kept open on a connection of its own
// (PostgreSQL; GET_LOCK on MySQL), so a transaction pool (PgBouncer) can
// neither strand it nor hand it to another client, and it goes with the
// mover's session: a mover that dies or is killed leaves none once the
// server has noticed, which the wait of a move run again covers. If the
// server ends the lock's session during the move (idle_session_timeout, a
// reaper, a network reset), the move stops before its next step that must
// not run without it (creating or filling the target, fencing, sealing,
// flipping, lifting a fence), with ErrMoveLockLost, and cleans up as a
// cancelled move does, as far as it can take the lock again: never over
// another mover's work. The lock's connection stays out of the pool for
// the whole move (a transaction pool needs a server connection more).
//
// With a catalog, the move first checks that
// the catalog maps the shard where r does, and flips only that shard's
// entry, on the condition that it still names the source: moves of
// different shards at once never undo each other (ErrCatalogConflict if
// the shard was moved meanwhile).
//
// The source keeps its copy, fenced for good, until DropShardCopy. If the
// move fails before it fences the source for good, the map still points at
// the source, which is writable again at once (the move lifts its fence),
// or after FenceFor if the mover died, or with Unfence; the move can be run
// again. If it fails after (the catalog could not be reached), the source
// refuses writes for good (Fence and Unfence refuse it, ErrShardMoved) until
// the move is run again, which finishes it.
//
// From the moment it creates them until the flip, the target's tables
// refuse every writer but the mover with ErrShardMoving (PostgreSQL: the
// mover's transactions set shardid.mover; MySQL: its sessions set
// @shardid_mover): a router that missed moves of the shard must not write
// into the copy, whose later passes would overwrite or delete its rows.
// The move lifts that fence right after the flip; if the mover dies in
// between, the shard's new home refuses writes until Unfence of the shard
// (on its new home) lifts it. A move that fails before it fences the
// source for good drops the copy it created; a copy it found (left by a
// mover that was killed) stays, fenced, so the copy takes no stray writes
// until the move is run again or the copy dropped (DropShardCopy). On
// PostgreSQL the target's schema, tables and fence are created in one
// transaction, under a staging name renamed at its end: a failure there
// leaves nothing.
//
// The router needs a SchemaPattern (a schema per shard on PostgreSQL, a
// database per shard on MySQL); both databases must be of one kind. A move
// uses up to 3 sessions of each database at once from r's pools, beside
// the application's and its lock's: give the pools room to keep them
// (SetMaxIdleConns(16), as the shardid command does). database/sql keeps
// 2 idle sessions and closes the rest as they come back; each new one is
// a new server process, which on 2 cores beside 4 writers made a bare
// copy of a shard twice as slow (docs/resharding.md).
func MoveShard(ctx context.Context, r *shardid.Router, c *Catalog, shard int, target string, opts MoveOptions) (MoveResult, error) {
	res, err := moveShard(ctx, r, c, shard, target, opts)
	return res, canceled(ctx, err)
}

// canceled makes err, returned while ctx is done, wrap ctx's error: a
// statement cut short by the cancellation fails with whatever the driver
// says ("sql: connection is already closed", "conn closed"), which hides
// why.
func canceled(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%w (%w)", err, ctx.Err())
}

func moveShard(ctx context.Context, r *shardid.Router, c *Catalog, shard int, target string, opts MoveOptions) (res MoveResult, err error) {
	res = MoveResult{Shard: shard, To: target}
	if err := checkMove(r, shard); err != nil {
		return res, err
	}
	names, dbs := r.Names(), r.Databases()
	to := slices.Index(names, target)
	from := dbOf(r, shard)
	res.From = names[from]
	if to < 0 || to == from {
		return res, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("move shard %d from %s to %q: not another database of the router", shard, res.From, target))
	}
	if d1, d2 := dbs[from].Dialector.Name(), dbs[to].Dialector.Name(); d1 != d2 || (d1 != "postgres" && d1 != "mysql") {
		return res, withDetail(shardid.ErrInvalidConfig, "moving shards needs PostgreSQL or MySQL/MariaDB on both sides, not "+d1+" and "+d2)
	}
	if len(opts.Models) == 0 && len(opts.Tables) == 0 {
		return res, withDetail(shardid.ErrInvalidConfig, "MoveOptions has neither Models nor Tables")
	}
	if opts.Batch <= 0 {
		opts.Batch = 1000
	}
	if opts.FenceFor <= 0 {
		opts.FenceFor = time.Minute
	}
	if opts.LockWait == 0 {
		opts.LockWait = DefaultLockWait
	}
	src, dst, schema := dbs[from], dbs[to], r.Schema(shard)
	// defs are the shard's tables as models, or as names (validated by
	// tableNames) when there are no models.
	defs := opts.Models
	if len(defs) == 0 {
		for _, t := range opts.Tables {
			defs = append(defs, t)
		}
	}
	tables, err := tableNames(src, defs)
	if err != nil {
		return res, err
	}
	if err := guardMove(ctx, []string{res.From, target}, src, dst, schema, tables, opts.Models); err != nil {
		return res, err
	}
	if err := checkCascades(ctx, src, dbs[to], r.Schema(shard), tables); err != nil {
		return res, err
	}
	// The move's record: Router.Stats reports it, the router's Logger
	// gets its events.
	mv := r.RecordMove(shard, res.From, target)
	defer func() { mv.Finish(res.Fenced, err) }()
	opts.Progress = mv.Progress(opts.Progress)
	lock, err := lockMove(ctx, src, schema, opts.LockWait, func(holder string) {
		mv.Stage("waiting for the move lock: " + holder)
	})
	if err != nil {
		return res, fmt.Errorf("shardid: move shard %d: %w", shard, err)
	}
	defer lock.release()
	// A lock lost mid-move stops the move as a cancellation would, and
	// says so.
	if !pausing(ctx) {
		var unwatch func()
		ctx, unwatch = lock.watch(ctx)
		defer unwatch()
	}
	defer func() {
		if lost := lock.lost(); err != nil && lost != nil && !errors.Is(err, ErrMoveLockLost) {
			err = fmt.Errorf("shardid: move shard %d: %w: %w", shard, lost, err)
		}
		err = hintTableChanged(err)
	}()
	if c != nil {
		// Under the lock: nobody else moves the shard from here on.
		name, err := c.shardDB(ctx, shard)
		if err != nil {
			return res, err
		}
		if name == "" {
			return res, withDetail(ErrInvalidCatalog, "the catalog holds no map: save one first (Catalog.Save)")
		}
		if name != res.From {
			return res, &catalogConflict{fmt.Sprintf("the catalog maps shard %d to %s, this router to %s: load the catalog's map first", shard, name, res.From)}
		}
		if err := checkCatalogMap(ctx, r, c); err != nil {
			return res, err
		}
	}
	if old, err := isSealed(ctx, dst, schema); err != nil {
		return res, err
	} else if old {
		return res, withDetail(ErrShardMoved, fmt.Sprintf("%s holds an old copy of shard %d: drop it first (DropShardCopy)", target, shard))
	}
	// A sealed source is taken over only by the move that sealed it, run
	// again: never by a stale router over the shard's live home.
	overSeal, err := checkSealedSource(ctx, src, dst, schema, shard, res.From, target)
	if err != nil {
		return res, err
	}
	// Whether the flip reads the source's seal in the catalog's own
	// transaction (sessionShared), found out before any fence: the
	// flip runs while the shard refuses writes.
	var flipInCatalog bool
	if c != nil {
		if flipInCatalog, err = sessionShared(ctx, c.DB, src); err != nil {
			return res, err
		}
	}
	var claimed int64 // the seal's token once this run took it over
	if overSeal {
		// The seal taken over before the copy is touched, the catalog
		// read again with it held: the run that sealed it, paused before
		// its flip with its lock lost, must not flip the catalog to the
		// copy this run empties and fills again (holdSeal).
		claimed, err = claimSeal(ctx, src, schema, func(ctx context.Context) error { return lock.ensure(ctx, "taking the seal over") })
		if err != nil {
			return res, err
		}
		// Read after the claim: a flip of the run that sealed it
		// commits before the claim is granted (it holds the row), or
		// not at all.
		if c != nil {
			name, err := c.shardDB(ctx, shard)
			if err != nil {
				return res, err
			}
			if name != res.From {
				return res, fmt.Errorf("shardid: move shard %d: %w: the catalog maps it to %s now: the run that sealed %s flipped it", shard, ErrMoveLockLost, name, res.From)
			}
		}
	}
	stage := func(s string) {
		mv.Stage(s)
		if opts.OnStage != nil {
			opts.OnStage(s)
		}
	}

	// 1. The schema and tables on the target, which refuse every writer
	// but the mover until the flip: a router that missed moves of the
	// shard must not write into the copy, whose later passes would
	// overwrite or delete its rows.
	// What a failed move created on the target, it drops (guards.go),
	// under the lock only (see below).
	seen, err := seeTarget(ctx, dst, schema, false)
	if err != nil {
		return res, err
	}
	existed := seen.exists
	sealed := false
	var dstToken int64 // the token of the copy's fence, for this mover alone
	defer func() {
		// Only while it holds the lock: another mover may be filling the
		// copy otherwise. And only if the copy is still this move's own:
		// a rival that took the lock while this move had lost it may have
		// taken the copy over and finished the move.
		if err != nil && !existed && !sealed {
			cctx, cancel := cleanupContext(ctx)
			defer cancel()
			if lock.reclaim(cctx) {
				_ = dropCreatedTarget(cctx, dst, schema, tables, dstToken, lock.lost() == nil)
			}
		}
	}()
	if err := lock.ensure(ctx, "creating the target"); err != nil {
		return res, err
	}
	pauseAt(ctx, "move create")
	dstToken, err = createTarget(ctx, src, dst, schema, tables, opts.Models, seen)
	if err != nil {
		return res, fmt.Errorf("shardid: creating shard %d on %s: %w", shard, target, err)
	}
	stage("created")
	// 2. The change log, before anything is read: from here on every write
	// to the shard's tables is recorded. Then the fence's triggers
	// (unfenced), and a first copy while the source takes writes.
	cp := newShardCopier(src, dst, schema, tables, opts.Batch, opts.Progress)
	cp.fencedTarget = true // createTarget fenced it for the mover
	cp.hold = fenceHold{mysql: dst.Dialector.Name() == "mysql", on: target, schemas: []string{schema}, tokens: []int64{dstToken}}
	cp.compareSource = opts.CompareSource
	cp.caughtUp = mv.CaughtUp
	defer func() {
		// Failed, aborted or done: no trigger is left logging writes.
		// Not when the lock is lost to another mover, whose log it is
		// now.
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		if lock.reclaim(cctx) {
			_ = cp.release(cctx, func(ctx context.Context) error { return lock.ensure(ctx, "dropping the change log") })
		}
	}()
	if err := lock.ensure(ctx, "starting the change log"); err != nil {
		return res, err
	}
	pauseAt(ctx, "move capture")
	// Checked again under the capture's lock: the log it drops may be a
	// rival's otherwise (startCapture).
	if err := cp.capture(ctx, func(ctx context.Context) error { return lock.ensure(ctx, "starting the change log") }); err != nil {
		return res, err
	}
	if err := ensureFence(ctx, src, schema, tables); err != nil {
		return res, fmt.Errorf("shardid: preparing the fence of shard %d on %s: %w", shard, res.From, err)
	}
	if err := lock.ensure(ctx, "copying into the target"); err != nil {
		return res, err
	}
	pauseAt(ctx, "move copy")
	copyStart := timeNow()
	if res.Copied, err = cp.copy(ctx); err != nil {
		return res, err
	}
	res.CopyTime = timeNow().Sub(copyStart)
	stage("copied")
	// Both sides compared, and the change log applied, until little is
	// left for the fence.
	if err := lock.ensure(ctx, "applying changes to the target"); err != nil {
		return res, err
	}
	if err := cp.converge(ctx); err != nil {
		return res, err
	}
	res.ComparedSource = cp.comparedSource
	// 3. The fence: from here on no write reaches the source.
	// Over a seal too, if the source was sealed when the move began: a
	// move run again after one that sealed the source and could not flip
	// the catalog, which (checked above) names the source. Not over a seal
	// made since: a rival's, who finished the move while this one was
	// paused (ErrShardMoved); replacing it, and lifting the fence on the
	// way out, would open the old copy to stale routers.
	// Fenced counts from the try that set it.
	if err := lock.ensure(ctx, "fencing the source"); err != nil {
		return res, err
	}
	pauseAt(ctx, "move fence")
	token, fenced, err := setFence(ctx, src, schema, tables, opts.FenceFor, overSeal, claimed)
	if errors.Is(err, ErrShardMoved) && !overSeal {
		// Sealed since this move began: by a rival who finished it. Not
		// ErrShardMoved, which callers take for an old copy on the target
		// to drop (Plan.Apply with DropCopies): the target is the shard's
		// home now.
		return res, fmt.Errorf("shardid: fencing shard %d on %s: %w: its source was sealed since this move began: another run finished the move", shard, res.From, ErrMoveLockLost)
	}
	if err != nil {
		return res, fmt.Errorf("shardid: fencing shard %d on %s: %w", shard, res.From, err)
	}
	mv.Fenced(opts.FenceFor)
	stage("fenced")
	defer func() {
		if !sealed {
			cctx, cancel := cleanupContext(ctx)
			defer cancel()
			if overSeal {
				// Our fence took a seal over: the old copy stays sealed.
				_ = restoreSeal(cctx, src, schema, token)
				return
			}
			// The source is still the shard's home: let writes through at
			// once rather than when the fence runs out, unless the fence is
			// no longer ours.
			lifted, _ := liftFence(cctx, src, schema, tables, token)
			mv.Lifted(lifted)
		}
	}()
	// 4. The rest of the change log, then 5. the keys still in doubt
	// compared again: never the whole shard.
	if err := lock.ensure(ctx, "applying the last changes"); err != nil {
		return res, err
	}
	if res.Tables, err = cp.finish(ctx); err != nil {
		return res, fmt.Errorf("shardid: shard %d from %s to %s: %w", shard, res.From, target, err)
	}
	stage("verified")
	// 6. The source fenced for good, only if our fence held all along: a
	// router that has not followed the new map yet must never write there.
	if err := lock.ensure(ctx, "fencing the source for good"); err != nil {
		return res, fmt.Errorf("%w; the map is not flipped", err)
	}
	pauseAt(ctx, "move seal")
	if err := sealFence(ctx, src, schema, tables, token, func(ctx context.Context) error { return lock.ensure(ctx, "fencing the source for good") }); err != nil {
		return res, fmt.Errorf("shardid: shard %d on %s: %w; the map is not flipped", shard, res.From, err)
	}
	sealed = true
	r.LogFenceSet(shard, res.From, 0)
	stage("sealed")
	// 7. The flip: the other routers through the catalog, and this one.
	if err := lock.ensure(ctx, "flipping the catalog"); err != nil {
		return res, fmt.Errorf("shardid: shard %d is copied to %s and its old copy on %s fenced for good, "+
			"but the catalog was not flipped (run the move again to finish it): %w", shard, target, res.From, err)
	}
	pauseAt(ctx, "move flip")
	if c != nil {
		// With the seal held as this run made it (holdSeal): a run of
		// the move again, which took the seal over while this one was
		// paused here, is filling the copy again.
		// In one transaction where the catalog's sessions are the
		// source's (one database, one role: one pool, a pooler's too):
		// the lock holds one of them, and a hold and a flip on two more
		// would wait for a third in a pool of two.
		if flipInCatalog {
			res.Version, err = c.flipShardHeld(ctx, shard, res.From, target, func(tx *gorm.DB) error { return sealedAs(tx, schema, token+1, "another run of the move took it over") })
		} else {
			err = holdSeal(ctx, src, schema, token+1, func() (err error) {
				res.Version, err = c.flipShard(ctx, shard, res.From, target)
				return err
			})
		}
		if err != nil {
			return res, fmt.Errorf("shardid: shard %d is copied to %s and its old copy on %s fenced for good, "+
				"but the catalog was not flipped (run the move again to finish it): %w", shard, target, res.From, err)
		}
	}
	if _, err := r.SwapShard(shard, from, to); err != nil {
		return res, err
	}
	// The shard's new home takes writes. If this fails (or the mover dies
	// before), writers there get ErrShardMoving until Unfence of the shard
	// (on its new home) lifts the fence.
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if !lock.reclaim(cctx) {
		return res, fmt.Errorf("shardid: shard %d is moved to %s, but its tables there still refuse writes (run Unfence): %w", shard, target, ErrMoveLockLost)
	}
	if _, err := liftFence(cctx, dst, schema, tables, dstToken); err != nil {
		return res, fmt.Errorf("shardid: shard %d is moved to %s, but its tables there still refuse writes (run Unfence): %w", shard, target, err)
	}
	res.Fenced = timeNow().Sub(fenced)
	stage("flipped")
	return res, nil
}

// checkMove checks that r can move shard: it has a schema per shard, and
// shard is one of its shards.
func checkMove(r *shardid.Router, shard int) error {
	if r.Schema(0) == "" {
		return withDetail(shardid.ErrInvalidConfig, "moving shards needs a SchemaPattern: a schema per logical shard")
	}
	if shard < 0 || shard >= r.LogicalShards() {
		return withDetail(shardid.ErrShardRange, fmt.Sprintf("%d is not in [0, %d)", shard, r.LogicalShards()))
	}
	return nil
}

// dbOf returns the index of the database that holds shard in r's map now.
func dbOf(r *shardid.Router, shard int) int {
	return slices.Index(r.Names(), r.DatabaseName(shard))
}

// Fence makes the tables of shard, on the database that holds it now, refuse
// every write with ErrShardMoving for d (for good when d is 0), judged by
// that database's clock. Changing a fence (from d to for good, say) leaves
// no moment without one. It returns ErrMoveInProgress while a move of the
// shard runs (after waiting DefaultLockWait, or until ctx's deadline, for
// the move lock), and ErrShardMoved for the old copy of a shard that
// moved.
func Fence(ctx context.Context, r *shardid.Router, shard int, models []any, d time.Duration) error {
	if err := checkMove(r, shard); err != nil {
		return err
	}
	if d < 0 {
		return withDetail(shardid.ErrInvalidConfig, "a fence for "+d.String())
	}
	db, schema := r.Databases()[dbOf(r, shard)], r.Schema(shard)
	tables, err := tableNames(db, models)
	if err != nil {
		return err
	}
	lock, err := lockMove(ctx, db, schema, DefaultLockWait, nil)
	if err != nil {
		return err
	}
	defer lock.release()
	if err := ensureFence(ctx, db, schema, tables); err != nil {
		return err
	}
	if err := lock.ensure(ctx, "fencing shard "+strconv.Itoa(shard)); err != nil {
		return err
	}
	if _, _, err = setFence(ctx, db, schema, tables, d, false, 0); err != nil {
		return fmt.Errorf("shardid: fencing shard %d on %s: %w", shard, r.DatabaseName(shard), err)
	}
	r.LogFenceSet(shard, r.DatabaseName(shard), d)
	return nil
}

// Unfence lets writes through to shard's tables again, on the database that
// holds it now: the way to abort a move before its flip, and to lift the
// fence a mover that died right after its flip left on the shard's new
// home. It returns
// ErrMoveInProgress while a move of the shard runs (stop the mover first;
// it waits DefaultLockWait, or until ctx's deadline, for the lock of a
// mover that was killed),
// and ErrShardMoved for the old copy of a shard that a move fenced for good,
// which must stay so (run that move again to finish it).
func Unfence(ctx context.Context, r *shardid.Router, shard int, models []any) error {
	if err := checkMove(r, shard); err != nil {
		return err
	}
	db, schema := r.Databases()[dbOf(r, shard)], r.Schema(shard)
	tables, err := tableNames(db, models)
	if err != nil {
		return err
	}
	lock, err := lockMove(ctx, db, schema, DefaultLockWait, nil)
	if err != nil {
		return err
	}
	defer lock.release()
	if err := lock.ensure(ctx, "lifting the fence of shard "+strconv.Itoa(shard)); err != nil {
		return err
	}
	if _, err = liftFence(ctx, db, schema, tables, 0); err != nil {
		return fmt.Errorf("shardid: lifting the fence of shard %d: %w", shard, err)
	}
	// A mover that died leaves its change log and triggers: an abort drops
	// them.
	if err := lock.ensure(ctx, "dropping the change log of shard "+strconv.Itoa(shard)); err != nil {
		return err
	}
	pauseAt(ctx, "unfence capture")
	// Checked again under the capture's lock (stopCapture).
	if err := stopCapture(ctx, db, schema, func(ctx context.Context) error {
		return lock.ensure(ctx, "dropping the change log of shard "+strconv.Itoa(shard))
	}); err != nil {
		return fmt.Errorf("shardid: dropping the change log of shard %d: %w", shard, err)
	}
	r.LogFenceLifted(shard, r.DatabaseName(shard))
	return nil
}

// DropShardCopy drops the copy of shard left on the database named from by
// a move. It refuses while the map still points there, with
// ErrSameDatabase when from is the shard's home under another name, and
// with ErrCopyNotMoved when the copy is not a move's leftover (neither
// fenced for good nor fenced for a move's mover: a live home, the router's
// map stale), or holds a table the shard's home does not, or rows in a
// table that is empty there: never what no move carried over. It refuses
// with ErrShardMoved while the shard's home by r's map is fenced for good:
// a move sealed it, and the copy may be the only one that can take the
// shard's writes (the move is run again to finish it). As Unfence,
// it waits for the shard's move lock and refuses while a move of the
// shard runs (ErrMoveInProgress).
func DropShardCopy(ctx context.Context, r *shardid.Router, shard int, from string) error {
	if err := checkMove(r, shard); err != nil {
		return err
	}
	d := slices.Index(r.Names(), from)
	if d < 0 || dbOf(r, shard) == d {
		return withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("shard %d lives on %q: its copy there is not a leftover", shard, from))
	}
	db, home := r.Databases()[d], r.Databases()[dbOf(r, shard)]
	// Under the move lock of the shard (on its home): no move of the
	// shard runs meanwhile, onto this database or from it.
	lock, err := lockMove(ctx, home, r.Schema(shard), DefaultLockWait, nil)
	if err != nil {
		return err
	}
	defer lock.release()
	// Never what was not moved (guards.go).
	if err := checkDistinct(ctx, []string{r.DatabaseName(shard), from}, []*gorm.DB{home, db}); err != nil {
		return err
	}
	if err := checkCopyHeld(ctx, db, home, r.Schema(shard), from, r.DatabaseName(shard)); err != nil {
		return err
	}
	// Dropped only as found, the lock held (dropCopyAsSeen): a move that
	// took the copy over while this call was paused may have made it the
	// shard's home.
	seen, err := seeTarget(ctx, db, r.Schema(shard), false)
	if err != nil {
		return err
	}
	// The home's tables, whose copies' files MariaDB may leave
	// (dropDatabaseMySQL); PostgreSQL's drops need none.
	var tables []string
	if db.Dialector.Name() == "mysql" {
		if tables, err = baseTables(ctx, home, r.Schema(shard)); err != nil {
			return err
		}
	}
	step := "dropping the copy of shard " + strconv.Itoa(shard) + " on " + from
	// With the home's fence held unsealed (holdUnsealed): a home sealed
	// by a move that finished its copy (and died, or is paused with its
	// lock lost) has its only live copy in a move's target, maybe this
	// one; and r's map is stale when the move flipped since.
	err = holdUnsealed(ctx, home, r.Schema(shard), lock, step, func() error {
		return dropCopyAsSeen(ctx, db, r.Schema(shard), tables, seen, lock, step)
	})
	if errors.Is(err, errHomeSealed) {
		return withDetail(ErrShardMoved, fmt.Sprintf("shard %d: %s, its home by this map, is fenced for good: a move of it sealed it, and %s may hold its only copy; "+
			"load the catalog's map (or re-run the move with the catalog to finish it); nothing was dropped", shard, r.DatabaseName(shard), from))
	}
	return err
}

// tableNames returns the table names of models, validated. A model may be
// a table name itself.
func tableNames(db *gorm.DB, models []any) ([]string, error) {
	var names []string
	for _, m := range models {
		if name, ok := m.(string); ok {
			if !sqlddl.Name.MatchString(name) {
				return nil, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("table name %q: want %s", name, sqlddl.Name))
			}
			names = append(names, name)
			continue
		}
		stmt := &gorm.Statement{DB: db}
		if err := stmt.Parse(m); err != nil {
			return nil, err
		}
		if !sqlddl.Name.MatchString(stmt.Schema.Table) {
			return nil, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("table name %q: want %s", stmt.Schema.Table, sqlddl.Name))
		}
		names = append(names, stmt.Schema.Table)
	}
	return names, nil
}

// createTarget creates the shard's schema and tables on dst (from models,
// or as they are on src) and fences them for every writer but the mover,
// and returns the fence's token.
//
// On PostgreSQL it all happens in one transaction: a new schema is built
// under a staging name (stagingSchema) and renamed once fenced, so no
// writer ever sees its tables unfenced, and a failure leaves nothing
// behind. One transaction also keeps one server connection through a
// transaction pool (PgBouncer), where a session's search_path would reach
// other clients' statements and miss the mover's own. The copy gets the
// source's next_id(), owners and privileges (see carried) before it gets
// its name. On MySQL, which cannot rename a database nor roll DDL back, a
// writer could reach a table in the milliseconds between its creation and
// its fence's triggers.
func createTarget(ctx context.Context, src, dst *gorm.DB, schema string, tables []string, models []any, seen targetSeen) (token int64, err error) {
	carry, err := readCarried(ctx, src, dst, schema, tables)
	if err != nil {
		return 0, err
	}
	if dst.Dialector.Name() == "mysql" {
		// MySQL's DDL commits as it goes: the target is checked first, and
		// its fence again in the transaction that fences it.
		if now, err := seeTarget(ctx, dst, schema, false); err != nil {
			return 0, err
		} else if err := seen.unchanged(now, schema); err != nil {
			return 0, err
		}
		if len(models) > 0 {
			// The database first, with the source's character set and
			// collation, which the tables that models make inherit: made
			// with the target server's defaults, text would change bytes
			// on the way, and the copy's check would refuse it.
			if err = createDatabaseLikeMySQL(ctx, src, dst, schema, schema); err == nil {
				err = shardid.MigrateSchema(ctx, dst, schema, models...)
			}
		} else {
			err = copyDefinitions(ctx, src, dst, schema, schema, tables)
		}
		if err != nil {
			return 0, err
		}
		if token, err = fenceTargetAsSeen(ctx, dst, schema, tables, seen); err != nil {
			return 0, fmt.Errorf("fencing the copy: %w", err)
		}
		return token, nil
	}
	err = lockedTx(ctx, dst, schema, func(tx *gorm.DB) error {
		var n int64
		if err := tx.Raw("SELECT count(*) FROM pg_namespace WHERE nspname = ?", schema).Scan(&n).Error; err != nil {
			return err
		}
		// As the move found it when it began, or another run has been
		// at it since (seen.unchanged). Read without a lock, which would
		// come before the tables' locks (a writer then waits for the one
		// while holding the other): the fence's token is compared again
		// under fenceForMoverTx's, taken after them.
		now, err := seeTarget(ctx, tx, schema, false)
		if err != nil {
			return err
		}
		if err := seen.unchanged(now, schema); err != nil {
			return err
		}
		in := schema
		if n == 0 {
			in = stagingSchema(schema)
			// Left by a mover of an older version that died: nobody
			// else uses it.
			if err := tx.Exec(`DROP SCHEMA IF EXISTS "` + in + `" CASCADE`).Error; err != nil {
				return err
			}
		}
		if len(models) > 0 {
			err = migrateInTx(tx, in, models)
		} else {
			err = copyDefinitions(ctx, src, tx, schema, in, tables)
		}
		if err != nil {
			return err
		}
		if err := ensureFencePG(tx, in, schema, tables); err != nil {
			return fmt.Errorf("fencing the copy: %w", err)
		}
		if token, err = fenceForMoverTx(tx, in, tables); err != nil {
			return fmt.Errorf("fencing the copy: %w", err)
		}
		if seen.fenced && token-1 != seen.token {
			return seen.unchanged(targetSeen{exists: true, fenced: true, token: token - 1}, schema)
		}
		if err := carry.apply(ctx, tx, in, tables); err != nil {
			return fmt.Errorf("giving the copy the source's next_id(), owners and privileges: %w", err)
		}
		// The fence follows the schema's owner, as it does on the source.
		if err := fenceOwnedBySchemaOwner(tx, in); err != nil {
			return err
		}
		if in != schema {
			return tx.Exec(`ALTER SCHEMA "` + in + `" RENAME TO "` + schema + `"`).Error
		}
		return nil
	})
	return token, err
}

// migrateInTx creates schema in transaction tx (PostgreSQL) and runs
// GORM's AutoMigrate of models inside it, as shardid.MigrateSchema does,
// with the search_path set for the transaction alone (SET LOCAL): nothing
// outlives it on the connection.
func migrateInTx(tx *gorm.DB, schema string, models []any) error {
	if err := tx.Exec(`CREATE SCHEMA IF NOT EXISTS "` + schema + `"`).Error; err != nil {
		return err
	}
	if err := tx.Exec(`SET LOCAL search_path TO "` + schema + `"`).Error; err != nil {
		return err
	}
	return tx.Session(&gorm.Session{NewDB: true}).AutoMigrate(models...)
}

// copyDefinitions creates schema dstSchema and its tables on dst as
// srcSchema's are on src: on MySQL with SHOW CREATE TABLE, on PostgreSQL
// from the columns and the "id" primary key.
func copyDefinitions(ctx context.Context, src, dst *gorm.DB, srcSchema, dstSchema string, tables []string) error {
	var err error
	if dst.Dialector.Name() == "mysql" {
		err = createDatabaseLikeMySQL(ctx, src, dst, srcSchema, dstSchema)
	} else {
		err = dst.WithContext(ctx).Exec(`CREATE SCHEMA IF NOT EXISTS "` + dstSchema + `"`).Error
	}
	if err != nil {
		return err
	}
	for _, t := range tables {
		def, err := tableDefinition(ctx, src, srcSchema, t, false)
		if err != nil {
			return err
		}
		if err := dst.WithContext(ctx).Exec("CREATE TABLE IF NOT EXISTS " + quoteTable(dst, dstSchema, t) + def).Error; err != nil {
			return err
		}
	}
	return nil
}

// createDatabaseLikeMySQL creates database dstSchema on dst, unless it
// exists, with the default character set and collation of srcSchema on
// src.
func createDatabaseLikeMySQL(ctx context.Context, src, dst *gorm.DB, srcSchema, dstSchema string) error {
	like, err := databaseCharsetMySQL(ctx, src, srcSchema)
	if err != nil {
		return err
	}
	return dst.WithContext(ctx).Exec("CREATE DATABASE IF NOT EXISTS `" + dstSchema + "`" + like).Error
}

// databaseCharsetMySQL returns the clause " CHARACTER SET cs COLLATE co"
// of the default character set and collation of database schema on src,
// for a CREATE DATABASE of its tables' new home: the tables that later
// migrations add there inherit them, where the server's default (latin1 on
// MariaDB's own) would store their text in other bytes.
func databaseCharsetMySQL(ctx context.Context, src *gorm.DB, schema string) (string, error) {
	var def struct{ Charset, Collation string }
	if err := src.WithContext(ctx).Raw("SELECT DEFAULT_CHARACTER_SET_NAME AS charset, DEFAULT_COLLATION_NAME AS collation"+
		" FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", schema).Scan(&def).Error; err != nil {
		return "", fmt.Errorf("reading the character set of %s on the source: %w", schema, err)
	}
	if def.Charset == "" {
		return "", fmt.Errorf("reading the character set of %s on the source: the mover's user cannot see the database there", schema)
	}
	if !plainName.MatchString(def.Charset) || !plainName.MatchString(def.Collation) {
		return "", fmt.Errorf("the database %s on the source has the character set %q and the collation %q", schema, def.Charset, def.Collation)
	}
	return " CHARACTER SET " + def.Charset + " COLLATE " + def.Collation, nil
}

// plainName matches a character set's or a collation's name.
var plainName = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// tableDefinition returns the definition of schema.table on src, as it
// follows "CREATE TABLE name" (copyDefinitions): on MySQL from SHOW CREATE
// TABLE, on PostgreSQL the columns and the "id" primary key, and, with
// defaults, the columns' defaults but those that draw from a sequence
// (which stays on src).
func tableDefinition(ctx context.Context, src *gorm.DB, schema, t string, defaults bool) (string, error) {
	if src.Dialector.Name() == "mysql" {
		var row struct {
			Table       string `gorm:"column:Table"`
			CreateTable string `gorm:"column:Create Table"`
		}
		if err := src.WithContext(ctx).Raw("SHOW CREATE TABLE `" + schema + "`.`" + t + "`").Scan(&row).Error; err != nil {
			return "", err
		}
		ddl, ok := strings.CutPrefix(row.CreateTable, "CREATE TABLE `"+t+"`")
		if !ok {
			return "", fmt.Errorf("shardid: unexpected definition of %s.%s: %.60q", schema, t, row.CreateTable)
		}
		return ddl, nil
	}
	var cols []struct {
		Name    string
		Type    string
		NotNull bool
		Def     string
	}
	err := src.WithContext(ctx).Raw(`SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
		coalesce(pg_get_expr(d.adbin, d.adrelid), '') AS def
		FROM pg_attribute a JOIN pg_class c ON a.attrelid = c.oid JOIN pg_namespace n ON c.relnamespace = n.oid
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.attgenerated = ''
		WHERE n.nspname = ? AND c.relname = ? AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, schema, t).Scan(&cols).Error
	if err != nil {
		return "", err
	}
	if len(cols) == 0 {
		return "", fmt.Errorf("shardid: %s.%s has no columns on the source", schema, t)
	}
	var defs []string
	for _, c := range cols {
		d := `"` + c.Name + `" ` + c.Type
		if defaults && c.Def != "" && !strings.Contains(c.Def, "nextval(") {
			d += " DEFAULT " + c.Def
		}
		if c.NotNull {
			d += " NOT NULL"
		}
		defs = append(defs, d)
	}
	defs = append(defs, `PRIMARY KEY ("id")`)
	return " (" + strings.Join(defs, ", ") + ")", nil
}

// droppingToken is the token of the fence of a copy that a clean-up is
// about to drop (MySQL, whose DROP DATABASE cannot be in the transaction
// that checks it): no move takes such a copy over (targetSeen.unchanged).
// A new fence's token is never negative (newFenceToken).
const droppingToken = -1

// targetSeen is what a move found of its target's schema: whether it
// existed, whether it held a fence, and that fence's token.
type targetSeen struct {
	exists, fenced bool
	token          int64
}

// seeTarget reads what db (a pool or a transaction) holds of schema on
// the target; with lock, the fence's state row under FOR UPDATE.
func seeTarget(ctx context.Context, db *gorm.DB, schema string, lock bool) (targetSeen, error) {
	var s targetSeen
	var err error
	if s.exists, err = schemaExists(ctx, db, schema); err != nil || !s.exists {
		return s, err
	}
	if s.fenced, err = tableExists(ctx, db, schema, fenceTable); err != nil || !s.fenced {
		return s, err
	}
	q := "SELECT token FROM " + quoteTable(db, schema, fenceTable) + " WHERE id = 1"
	if lock {
		q += " FOR UPDATE"
	}
	// Fenced: the state row is there (a fence table without it, left by
	// a crash between the two, is no fence).
	res := db.WithContext(ctx).Raw(q).Scan(&s.token)
	s.fenced = res.RowsAffected > 0
	return s, res.Error
}

// unchanged returns an error wrapping ErrMoveLockLost unless the target
// is now as the move found it when it began: a move paused after its
// last check of the lock, while another run created the target, or took
// it over and finished the move (its fence lifted, its token moved on),
// must not fence it again for itself (every write to the shard's home
// refused) nor, failing, drop it as its own.
func (s targetSeen) unchanged(now targetSeen, schema string) error {
	if now.fenced && now.token == droppingToken {
		return fmt.Errorf("%w: the target %s is being dropped by a clean-up (DropUnfinishedCopies, DropShardCopy or AbortSplit) that stopped before its drop: "+
			"run it again, then this", ErrMoveInProgress, schema)
	}
	if now == s {
		return nil
	}
	return fmt.Errorf("%w: the target %s changed since this move began (%+v, then %+v): another run has been at it",
		ErrMoveLockLost, schema, s, now)
}

// fenceTargetAsSeen is fenceTarget (MySQL) of a target that must still be
// as seen: its fence's token is compared in the transaction that fences
// it for the mover (targetSeen.unchanged).
//
// A target found with no fence gets one here, whose state row this call
// must then have inserted itself: a row found instead is another run's,
// made while this one was paused after its check.
func fenceTargetAsSeen(ctx context.Context, db *gorm.DB, schema string, tables []string, seen targetSeen) (token int64, err error) {
	pauseAt(ctx, "fence target")
	inserted, err := ensureFenceMySQLAs(ctx, db, schema, tables)
	if err != nil {
		return 0, err
	}
	err = lockedTx(ctx, db, schema, func(tx *gorm.DB) error {
		now, err := seeTarget(ctx, tx, schema, true)
		if err != nil {
			return err
		}
		want := seen
		if !seen.fenced {
			// The row this call inserted, untouched since.
			want = targetSeen{exists: true, fenced: true, token: inserted}
			if inserted == 0 {
				want.token = -1 // found, not inserted: never equal
			}
		}
		if err := want.unchanged(now, schema); err != nil {
			return err
		}
		token, err = fenceForMoverTx(tx, schema, tables)
		return err
	})
	return token, err
}
