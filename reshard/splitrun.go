package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
)

// SplitOptions configures SplitShards and RunSplit.
type SplitOptions struct {
	// FenceFor is how long a batch's rows on the monolith stay fenced if
	// the mover dies before it seals them, by the monolith's clock; the
	// last changes and the verification must finish within it, or the
	// batch fails with ErrFenceLapsed. If 0, 1m.
	FenceFor time.Duration

	// LockWait is how long to wait for the split's lock on the monolith
	// while another session holds it (another operator, or a mover that
	// was killed). If 0, DefaultLockWait; if negative, try once.
	LockWait time.Duration

	// Progress, if not nil, hears the rows copied so far of each table.
	Progress func(table string, copied int64)

	// OnStage, if not nil, is called as a batch reaches each stage:
	// "created", "copied", "fenced", "verified", "sealed", "flipped",
	// "cleaned" (the batch's rows deleted from the monolith). With
	// CopyTogether, "created" and "copied" come once for all the batches
	// copied together, then the other stages batch by batch.
	OnStage func(stage string)

	// CopyTogether makes RunSplit create and copy the batches left
	// together, one read of each monolith table for all of them, and
	// then fence, verify, seal and flip them one at a time (each fence
	// still holds one batch's rows only). Without it each batch reads
	// each monolith table in full for its own rows: a plan of 8 batches
	// reads the monolith 8 times. With it, every write to a shard not yet
	// flipped is logged and then applied row by row, from the start of
	// the copy to that shard's fence, where a batch at a time logs only
	// the batch's own: beside busy writers that costs more than the reads
	// it saves (docs/resharding.md, "What it costs", has the figures), and
	// each batch's fence reads the change log past the entries that wait
	// for the batches after it (the log has no index by shard): a large
	// backlog lengthens every fence. It suits a monolith larger than
	// memory, whose reads are full scans from disk, with few writes.
	// PostgreSQL only: on MySQL/MariaDB each
	// batch is copied on its own (a copy, a comparison or a catch-up over
	// every shard's tables at once overruns the server's table caches at
	// their defaults, and every statement opens its tables again).
	CopyTogether bool

	// idsChecked, set by RunSplit, is true once a batch of the run has
	// checked the ID of every row left in the monolith (checkAllIDs).
	idsChecked *bool
}

// SplitResult says what SplitShards did.
type SplitResult struct {
	Shards   []int
	Tables   []TableCheck  // over the batch, equal on both sides
	Copied   int64         // rows of the first copy (of the batch's shards)
	CopyTime time.Duration // of the first copy (CopyTogether: of every batch's)
	Fenced   time.Duration // from the fence on the monolith to the targets taking writes
	Version  int64         // the catalog's version after the flip
	Deleted  int64         // rows deleted from the monolith once verified
	// Resumed says the batch was found sealed on the monolith, by an
	// earlier run stopped before its end or by another run meanwhile:
	// this run copied nothing, and finished what was left of it (the
	// flip, if Version is not 0; the targets let write).
	Resumed bool
}

// SplitShards moves shards, a batch, out of the shared tables of the
// monolith into their schemas on the databases to names (to[i] for
// shards[i]), while writers keep writing: it creates the schemas and
// tables (fenced for all but the mover), marks the shards moving (a
// trigger of each monolith table logs the writes of their rows), copies
// their rows (one read of each table, COPY on PostgreSQL), compares both
// sides and applies the change log, verifying every row it writes; then
// fences the batch's rows on the monolith (writes to them fail with
// shardid.ErrShardMoving, writes to the other shards go on), applies the
// last changes, compares the keys still in doubt, seals the batch's rows
// (fenced for good), flips the catalog and cfg.Map, lets writes through to
// the targets, and deletes the batch's rows from the monolith, each only
// once its copy on the target is found equal.
//
// On PostgreSQL each shard's schema gets the owners and privileges of the
// monolith's sharded tables: a role that may read and write their rows
// may read and write the shards', and the tables' owner owns the copies.
// The mover needs no superuser: a role that owns the sharded tables (or
// is a member of their owner's role) and may create schemas on the
// targets splits them. What it may not do is refused first, with
// ErrMoverPrivileges naming the privilege and the fix.
//
// A second split of the same monolith waits for the first (LockWait) and
// then fails with ErrMoveInProgress. A batch that fails before its seal
// leaves the monolith the shards' home, unfenced (or fenced until
// FenceFor runs out, if the mover died), and its copies on the targets
// fenced for the mover: run it again, or AbortSplit. A batch that fails
// after the seal is finished by running it again.
func SplitShards(ctx context.Context, cfg SplitConfig, shards []int, to []string, opts SplitOptions) (SplitResult, error) {
	res, err := splitShards(ctx, cfg, shards, to, nil, nil, opts, nil)
	return res, canceled(ctx, err)
}

// targetsAhead are the schemas (MySQL: databases) of a plan's later
// batches, which RunSplit creates with its first batch's: creating an
// empty shard's tables is mostly waiting for the server to sync each new
// index's file, and it is quicker done at once, before the rows and the
// writers have moved to the targets, than batch by batch beside them
// (docs/resharding.md, "What it costs").
type targetsAhead struct {
	// shards and to are the later batches' shards and the index of each
	// one's target, which the first batch creates where no schema exists.
	shards []int
	to     map[int]int
	// tokens are those it created, by shard: the token of each one's
	// fence for the mover. A later batch takes as its own, empty, a
	// schema it finds still fenced with that token (createTargets),
	// unless the monolith's tables changed since they were created from
	// definitions (definitionsKey): it then drops it and creates it again.
	tokens      map[int]int64
	definitions string
}

// splitShards is SplitShards of the shards of batches (nil: one batch of
// all the shards), which it copies together (one read of each monolith
// table for all of them), then fences, verifies, seals and flips batch by
// batch, calling done (if not nil) after each batch with what it did. A
// batch sealed by a run before (its flip left to do) is finished first,
// on its own. It returns the last batch's result, or the failed one's.
//
// ahead, if not nil, are the schemas of later runs: with shards, the run
// creates those of ahead.shards that do not exist yet with its own and
// records their tokens in ahead.tokens; with tokens, the run takes those
// of its shards it finds as created as its own (targetsAhead).
func splitShards(ctx context.Context, cfg SplitConfig, shards []int, to []string, batches [][]int, ahead *targetsAhead, opts SplitOptions, done func(k int, res SplitResult)) (res SplitResult, err error) {
	sp, err := newSplitter(ctx, cfg)
	if err != nil {
		return res, err
	}
	if sp.ids, err = newIDCheck(ctx, cfg); err != nil {
		return res, err
	}
	if len(shards) == 0 || len(shards) != len(to) {
		return res, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("split: %d shards for %d targets", len(shards), len(to)))
	}
	if opts.FenceFor <= 0 {
		opts.FenceFor = time.Minute
	}
	if opts.LockWait == 0 {
		opts.LockWait = DefaultLockWait
	}
	b := &splitBatch{sp: sp, to: map[int]int{}, progress: opts.Progress}
	if ahead != nil {
		b.ahead = ahead.tokens
	}
	for i, s := range shards {
		if s < 0 || s >= sp.shards {
			return res, withDetail(shardid.ErrShardRange, fmt.Sprintf("%d is not in [0, %d)", s, sp.shards))
		}
		if _, dup := b.to[s]; dup {
			return res, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("split: shard %d given twice", s))
		}
		d := cfg.Map.DatabaseIndex(to[i])
		if d < 0 || d == sp.monoIdx {
			return res, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("split: shard %d to %q: not another database of the map", s, to[i]))
		}
		b.to[s] = d
		b.shards = append(b.shards, s)
	}
	slices.Sort(b.shards)
	res.Shards = b.shards
	if batches != nil {
		n, seen := 0, map[int]bool{}
		for _, batch := range batches {
			for _, s := range batch {
				if _, ok := b.to[s]; !ok || seen[s] {
					return res, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("split: shard %d in no batch or in two", s))
				}
				seen[s] = true
				n++
			}
		}
		if n != len(b.shards) {
			return res, withDetail(shardid.ErrInvalidConfig, "split: a shard in no batch")
		}
	}
	// What the mover may not do, refused before it changes anything; of
	// the schemas it creates ahead too.
	targets, byTarget := b.byTarget()
	if ahead != nil && len(ahead.shards) > 0 {
		all := &splitBatch{to: maps.Clone(b.to), shards: sortedCopy(slices.Concat(b.shards, ahead.shards))}
		maps.Copy(all.to, ahead.to)
		targets, byTarget = all.byTarget()
	}
	problems, _, grants, err := sp.splitPrivileges(ctx, targets, byTarget)
	if err != nil {
		return res, fmt.Errorf("shardid: split: reading the privileges it needs: %w", err)
	}
	if len(problems) > 0 && !b.sealedBefore(ctx) {
		return res, withDetail(ErrMoverPrivileges, "split: "+strings.Join(problems, "; "))
	}
	b.grants = grants
	if grants != nil {
		sp.handTo = grants.owner
	}
	stage := func(s string) {
		if opts.OnStage != nil {
			opts.OnStage(s)
		}
	}
	lock, err := lockMove(ctx, sp.mono, sp.schema, opts.LockWait, nil)
	if err != nil {
		return res, fmt.Errorf("shardid: split: %w", err)
	}
	defer lock.release()
	if !pausing(ctx) {
		var unwatch func()
		ctx, unwatch = lock.watch(ctx)
		defer unwatch()
	}
	// A lock lost mid-batch stops it as a cancellation would, and says
	// so, not "context canceled" (ErrMoveLockLost); another error stays
	// what it is.
	defer func() {
		if lost := lock.lost(); errors.Is(err, context.Canceled) && lost != nil && !errors.Is(err, ErrMoveLockLost) {
			err = fmt.Errorf("shardid: split: %w: %w", lost, err)
		}
	}()

	// Where the shards are: shared on the monolith in the map and the
	// catalog, or sealed there by this batch run before (its flip is
	// what is left to do).
	if err := sp.checkColumns(ctx); err != nil {
		return res, err
	}
	if err := lock.ensure(ctx, "recording the split's tables"); err != nil {
		return res, err
	}
	if err := sp.checkDeclared(ctx, true); err != nil {
		return res, err
	}
	var users []string
	if grants != nil {
		users = grants.users
	}
	// Rows whose IDs would not find them, refused before the run
	// installs or changes the triggers, whose ID rule would then refuse
	// the writes of such rows (an old writer's) until the split is
	// aborted; checked again once they are on (below), once a run.
	idsChecked := sp.ids == nil || opts.idsChecked != nil && *opts.idsChecked
	if !idsChecked {
		if err := sp.checkAllIDs(ctx); err != nil {
			return res, err
		}
	}
	// Its objects, created, go to the tables' owner in the same
	// transaction (sp.handTo).
	if err := sp.installTriggers(ctx, users); err != nil {
		return res, fmt.Errorf("shardid: split: installing its triggers on the monolith: %w", err)
	}
	state, err := sp.readSplitState(ctx, b.shards)
	if err != nil {
		return res, err
	}
	if batches == nil {
		batches = [][]int{b.shards}
	}
	if err := b.readColumns(ctx); err != nil {
		return res, err
	}
	// Batches sealed before a flip that failed: the targets hold the
	// verified copies, fenced for the mover. Finished first, each on its
	// own; the others are copied together.
	var rest []int    // the batches (indexes) left to copy
	var copying []int // their shards
	for k, batch := range batches {
		sealedN := 0
		for _, s := range batch {
			if state[s].Sealed {
				sealedN++
			}
		}
		if sealedN > 0 && sealedN < len(batch) {
			return res, withDetail(ErrShardMoved, "some of the batch's shards were split by another batch: give the batch as it ran")
		}
		if sealedN == 0 {
			rest = append(rest, k)
			copying = append(copying, batch...)
			continue
		}
		v := b.sub(sortedCopy(batch), nil)
		res = SplitResult{Shards: v.shards, Resumed: true}
		if err := v.checkPlaced(ctx, true); err != nil {
			return res, err
		}
		tokens, err := v.checkTargetsSealedCopy(ctx)
		if err != nil {
			return res, err
		}
		if err := v.checkSealedCopies(ctx); err != nil {
			return res, err
		}
		if res, err = v.flipAndClean(ctx, lock, res, tokens, nil, nil, time.Time{}, stage); err != nil {
			return res, err
		}
		if done != nil {
			done(k, res)
		}
	}
	if len(rest) == 0 {
		// Nothing left to copy. A change log that an earlier run left on
		// (one killed after a batch's seal, its clean-up never run: the
		// batches after it, and the rows of no known shard) logs for no
		// run now, and the next run starts its own: it ends here.
		var moving int64
		if err := sp.mono.WithContext(ctx).Raw("SELECT count(*) FROM " + sp.q(splitStateTable) + " WHERE moving").Scan(&moving).Error; err != nil {
			return res, err
		}
		if moving > 0 {
			if err := sp.stopChangeLog(ctx, lock, nil); err != nil {
				return res, fmt.Errorf("shardid: split: the batch is finished, but ending the change log an earlier run left on: %w", err)
			}
		}
		return res, nil
	}
	if err := sp.checkStructure(ctx, "split"); err != nil {
		return res, err
	}
	// Every row left in the monolith, once a run: its triggers refuse a
	// write that would leave a row where its ID does not find it from
	// their first run on, but not what was written before them.
	if !idsChecked {
		if err := sp.checkAllIDs(ctx); err != nil {
			return res, err
		}
		if opts.idsChecked != nil {
			*opts.idsChecked = true
		}
	}
	// Copies of these shards on other databases, which an earlier plan
	// chose and a run stopped (or created ahead of their batch) left
	// there: never flipped, empty or not, they would stay behind,
	// fenced, once the shards live elsewhere.
	if _, err := sp.dropUnflippedCopies(ctx, lock, copying, b.to); err != nil {
		return res, fmt.Errorf("shardid: split: dropping what an earlier plan left of the batch's shards on other databases: %w", err)
	}
	slices.Sort(copying)
	b.shards = copying
	res = SplitResult{Shards: copying}
	if err := b.checkPlaced(ctx, false); err != nil {
		return res, err
	}

	// 1. The targets, fenced for all but the mover, found as they were
	// when the lock was last found held (b.seen).
	if b.seen, err = b.seeTargets(ctx); err != nil {
		return res, err
	}
	if err := b.checkTargetsEmpty(ctx); err != nil {
		return res, err
	}
	if len(b.ahead) > 0 {
		if err := b.dropStaleAhead(ctx, lock, ahead.definitions); err != nil {
			return res, err
		}
	}
	if err := lock.ensure(ctx, "creating the targets"); err != nil {
		return res, err
	}
	pauseAt(ctx, "split create")
	dstTokens, err := b.createTargets(ctx)
	if err != nil {
		return res, err
	}
	if ahead != nil && len(ahead.shards) > 0 {
		if err := b.createAhead(ctx, ahead); err != nil {
			return res, err
		}
	}
	b.tokens = dstTokens
	stage("created")
	// from(i) are the shards of the batches left to copy from the i-th on.
	from := func(i int) []int {
		var out []int
		for _, k := range rest[i:] {
			out = append(out, batches[k]...)
		}
		slices.Sort(out)
		return out
	}
	// 2. The change log, then the copy while the monolith takes writes.
	// Stopped if a batch fails before its seal (every batch not flipped
	// is copied again by the next run); after a batch's seal, for the
	// batches after it only.
	var logging []int // the shards still logged
	defer func() {
		if err != nil && len(logging) > 0 {
			cctx, cancel := cleanupContext(ctx)
			defer cancel()
			if lock.reclaim(cctx) {
				var of []int // every shard's
				if len(logging) < len(b.shards) {
					// and the rows of no known shard, logged on past
					// the seals for the batches left (sealShards)
					of = append(slices.Clone(logging), -1)
				}
				_ = sp.stopChangeLog(cctx, lock, of)
			}
		}
	}()
	if err := sp.startChangeLog(ctx, lock, b.shards); err != nil {
		return res, fmt.Errorf("shardid: split: starting the change log: %w", err)
	}
	logging = b.shards
	pauseAt(ctx, "split copy")
	copyStart := timeNow()
	copied, err := b.copy(ctx)
	if err != nil {
		res.Copied = copied
		return res, err
	}
	copyTime := timeNow().Sub(copyStart)
	stage("copied")
	if err := lock.ensure(ctx, "applying changes"); err != nil {
		return res, err
	}
	if err := b.converge(ctx); err != nil {
		return res, err
	}
	for i, k := range rest {
		v := b
		if len(rest) > 1 {
			// Its own entries of the change log only: the others'
			// shards take writes still.
			v = b.sub(sortedCopy(batches[k]), logging)
			v.later = i < len(rest)-1
		}
		res = SplitResult{Shards: v.shards, Copied: copied, CopyTime: copyTime}
		if len(rest) > 1 {
			res.Copied = b.sentRows(v.shards)
		}
		if i > 0 {
			// Its shards' changes since the batches before it.
			if err := lock.ensure(ctx, "applying changes"); err != nil {
				return res, err
			}
			if err := v.settle(ctx); err != nil {
				return res, err
			}
		}
		var sealed bool
		res, sealed, err = v.fenceAndFlip(ctx, lock, res, opts, stage)
		if sealed {
			// Its shards' entries are used up: the log goes on for the
			// batches after it only.
			logging = from(i + 1)
		}
		if err != nil {
			return res, err
		}
		if done != nil {
			done(k, res)
		}
	}
	return res, nil
}

// createAhead creates the schemas of ahead.shards that do not exist yet
// on their targets, fenced for the mover as the batch's own are, and
// records their tokens in ahead.tokens. A schema that exists already (a
// run stopped before) is left to its batch, which finds it as any run
// again does.
func (b *splitBatch) createAhead(ctx context.Context, ahead *targetsAhead) error {
	later := &splitBatch{sp: b.sp, to: ahead.to, shards: sortedCopy(ahead.shards), grants: b.grants, defs: b.defs, indexes: b.indexes}
	seen, err := later.seeTargets(ctx)
	if err != nil {
		return err
	}
	var fresh []int
	for _, s := range later.shards {
		if !seen[s].exists {
			fresh = append(fresh, s)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	later.shards, later.seen = fresh, seen
	pauseAt(ctx, "split create ahead")
	tokens, err := later.createTargets(ctx)
	if err != nil {
		return fmt.Errorf("shardid: split: creating the later batches' shards ahead: %w", err)
	}
	ahead.tokens, ahead.definitions = map[int]int64{}, later.definitionsKey()
	for s, tok := range tokens {
		if later.fresh[s] {
			ahead.tokens[s] = tok
		}
	}
	return nil
}

// sortedCopy returns shards in ascending order, a copy.
func sortedCopy(shards []int) []int {
	out := slices.Clone(shards)
	slices.Sort(out)
	return out
}

// sentRows is what the copy sent of shards, all tables.
func (b *splitBatch) sentRows(shards []int) int64 {
	var n int64
	for _, byShard := range b.sent {
		for _, s := range shards {
			if r := byShard[s]; r != nil {
				n += r.rows
			}
		}
	}
	return n
}

// fenceAndFlip fences batch v's rows on the monolith, applies the last
// changes and compares the keys still in doubt, seals the rows, flips the
// catalog and the map, and lets writes through to the targets (and, the
// last batch, cleans the monolith). It reports whether it sealed the
// batch; an error before the seal lifts the fence.
func (v *splitBatch) fenceAndFlip(ctx context.Context, lock *moveLock, res SplitResult, opts SplitOptions, stage func(string)) (_ SplitResult, sealed bool, err error) {
	sp := v.sp
	// 3. The fence of the batch's rows on the monolith.
	if err := lock.ensure(ctx, "fencing the monolith's rows"); err != nil {
		return res, false, err
	}
	// The catalog as the flip will find it, read before the fence
	// rather than under it; a version that moved by the flip is read
	// again then (retryFlip).
	var read *catalogRead
	if flipped, version, err := v.flippedInCatalog(ctx); err == nil {
		read = &catalogRead{flipped, version}
	}
	fenced := timeNow()
	tokens, err := sp.fenceShards(ctx, v.shards, opts.FenceFor.Microseconds())
	if err != nil {
		return res, false, fmt.Errorf("shardid: split: fencing the batch on the monolith: %w", err)
	}
	stage("fenced")
	defer func() {
		if err != nil && !sealed {
			cctx, cancel := cleanupContext(ctx)
			defer cancel()
			pauseAt(ctx, "split unfence")
			_ = sp.liftShards(cctx, v.shards, tokens)
		}
	}()
	// 4. The last changes, and the keys in doubt compared again: the
	// entries of no known shard logged before the fence held (none
	// after it can be of the batch's rows).
	if err := lock.ensure(ctx, "applying the last changes"); err != nil {
		return res, false, err
	}
	if v.only {
		if v.unknownUpTo, err = v.lastSeq(ctx); err != nil {
			return res, false, err
		}
		if v.unknownUpTo == 0 {
			v.unknownUpTo = -1 // an empty log: none
		}
	}
	if res.Tables, err = v.finish(ctx); err != nil {
		return res, false, fmt.Errorf("shardid: split: %w", err)
	}
	stage("verified")
	dst := map[int]int64{}
	for _, s := range v.shards {
		dst[s] = v.tokens[s]
	}
	// The targets' sessions for the lift, readied while the monolith
	// seals and the catalog flips.
	warm := v.warmLift(ctx, dst)
	defer warm.release()
	// 5. The seal: the batch's rows on the monolith are an old copy.
	if err := lock.ensure(ctx, "sealing the monolith's rows"); err != nil {
		return res, false, fmt.Errorf("%w; the map is not flipped", err)
	}
	pauseAt(ctx, "split seal")
	if err := sp.sealShards(ctx, tokens, v.verified(), !v.later, func(ctx context.Context) error { return lock.ensure(ctx, "sealing the monolith's rows") }); err != nil {
		return res, false, fmt.Errorf("shardid: split: %w; the map is not flipped", err)
	}
	sealed = true
	stage("sealed")
	res, err = v.flipAndClean(ctx, lock, res, dst, read, warm, fenced, stage)
	return res, true, err
}

// pauseAt calls the pause a test set in ctx (runPause), if any, at the
// point at.
func pauseAt(ctx context.Context, at string) {
	if pause := pauseOf(ctx); pause != nil {
		pause(at)
	}
}

// pausing reports whether a test set a pause in ctx (runPause): its run's
// lock is not watched then.
func pausing(ctx context.Context) bool { return pauseOf(ctx) != nil }

// pauseOf returns the pause a test set in ctx, or nil.
func pauseOf(ctx context.Context) func(string) {
	pause, _ := ctx.Value(runPause{}).(func(string))
	return pause
}

// runPause is the key of a pause, set by tests only in the context of a
// run (func(at string)): it is called at the named points of a split's
// or a move's run, and the run's lock is not watched then: a test pauses
// the run there as a machine would pause the process, before its lock's
// keep-alive finds the lock lost. The points: "split create", "move
// create" (before the targets are created), "split copy", "move copy"
// (after the change log started, before the copy empties and fills the
// targets), "fence target" (MySQL: before a target created is fenced),
// "abort lift" (before AbortSplit lifts the monolith's fences), "rollback
// copy" (before a roll-back copies into the monolith), "rollback copy
// <table>" (before its first copy reads each table), "unfence
// capture" (before Unfence drops the change log), "move forget" (before
// a move forgets the changes it applied), "move fence" (before the move
// fences its source), "clean monolith" (before the clean-up empties the
// monolith), "drop split copy" (before DropSplitCopy drops), "abort
// orphans" (before AbortRollback deletes the rows of no shard), "flip
// back" (before a roll-back lifts the monolith's seal), "drop database"
// (MySQL: between a copy's check and its DROP DATABASE), "split lift"
// (before a batch lifts its targets' fences, after its flip), "split
// unfence" (before a failed batch lifts its fences on the monolith),
// "move flip" (before a move flips the catalog), "abort unseal" (before
// AbortRollback lifts the roll-back's fence of the
// shard's schema), "rollback token" (before a roll-back records its
// fence's token), "rollback seal", "move seal" and "split seal" (before
// the seal, after the last check of the lock), "seal held" (inside
// sealFence's transaction, its check passed), "split flip" (before a
// batch flips the catalog), "unflip back" (before a roll-back places
// the shard back in the monolith in the catalog), "abort forget" and "abort forget held"
// (AbortSplit forgetting the split's tables: before its transaction, and
// inside it, the check passed).
type runPause struct{}

// flipAndClean flips the catalog and the map, lets writes through to the
// targets and deletes the batch's verified rows from the monolith.
func (b *splitBatch) flipAndClean(ctx context.Context, lock *moveLock, res SplitResult, dstTokens map[int]int64, read *catalogRead, warm *liftSessions, fenced time.Time, stage func(string)) (SplitResult, error) {
	sp := b.sp
	names := sp.cfg.Map.Databases()
	moves := map[int]string{}
	for _, s := range b.shards {
		moves[s] = names[b.to[s]]
	}
	// The catalog read before the lock is asked, and flipped only if it
	// is still that version: an abort that took the lock once this run
	// lost it changes the version before it lifts the batch's seal (and
	// drops its targets), and a flip after it must fail. A version moved
	// by anything else (a move of another shard), the lock held all
	// along, is read again and the flip tried again: the batch is sealed,
	// its shards refuse writes until it flips.
	err := retryFlip(lock, func() error {
		var flipped bool
		var version int64
		if read != nil { // the first try, with the catalog read before the fence
			flipped, version, read = read.flipped, read.version, nil
		} else {
			var err error
			if flipped, version, err = b.flippedInCatalog(ctx); err != nil {
				return err
			}
		}
		if err := lock.ensure(ctx, "flipping the catalog"); err != nil {
			return err
		}
		pauseAt(ctx, "split flip")
		if c := sp.cfg.Catalog; c != nil && !flipped {
			v, err := c.flipShared(ctx, sp.cfg.Monolith, moves, version)
			if err != nil {
				return err
			}
			res.Version = v
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("shardid: split: the batch is copied and sealed on the monolith, but the catalog was not flipped (run the batch again to finish it): %w", err)
	}
	err = sp.cfg.Map.Update(func(p []shardmap.Placement) error {
		for _, s := range b.shards {
			p[s] = shardmap.Placement{DB: b.to[s]}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	// The targets take writes.
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if !lock.reclaim(cctx) {
		return res, fmt.Errorf("shardid: split: the batch is flipped, but its targets still refuse writes (run the batch again): %w", ErrMoveLockLost)
	}
	pauseAt(ctx, "split lift")
	if err := b.liftTargets(cctx, dstTokens, warm); err != nil {
		return res, fmt.Errorf("shardid: split: the batch is flipped, but its targets still refuse writes (run the batch again): %w", err)
	}
	if !fenced.IsZero() {
		res.Fenced = timeNow().Sub(fenced)
	}
	stage("flipped")
	if !sp.mysql {
		if err := b.addForeignKeysPG(ctx); err != nil {
			return res, fmt.Errorf("shardid: split: the batch is split, but %w (run the plan again to add them)", err)
		}
	}
	// The batch's rows stay on the monolith, sealed: a router whose map
	// is stale finds them there and is refused, where it would find
	// nothing to update or delete, and report success. They leave with
	// the last batch's (cleanMonolith), on PostgreSQL; on MySQL, when the
	// operator runs CleanSplit.
	if sp.mysql || sp.holdsShared() {
		return res, nil
	}
	// A roll-back under way (of another shard, stopped) copies its rows
	// into the monolith: the clean-up waits for it (CleanSplit, after).
	if back, err := sp.rollingBack(ctx); err != nil || len(back) > 0 {
		return res, err
	}
	n, err := sp.cleanMonolith(ctx, lock)
	res.Deleted = n
	if err != nil {
		return res, fmt.Errorf("shardid: split: the last batch is flipped; deleting the split rows from the monolith (run CleanSplit to finish): %w", err)
	}
	stage("cleaned")
	return res, nil
}

// catalogRead is what flippedInCatalog found.
type catalogRead struct {
	flipped bool
	version int64
}

// flippedInCatalog reports whether the catalog (if any) places every shard
// of the batch on its target already: a batch run again after its flip.
func (b *splitBatch) flippedInCatalog(ctx context.Context) (bool, int64, error) {
	c := b.sp.cfg.Catalog
	if c == nil {
		return false, 0, nil
	}
	p, version, err := c.loadPlacements(ctx, b.sp.cfg.Map.Databases(), b.sp.shards)
	if err != nil {
		return false, 0, err
	}
	for _, s := range b.shards {
		if p[s].Shared || p[s].DB != b.to[s] {
			return false, version, nil
		}
	}
	return true, version, nil
}

// liftTargets lifts the mover's fences of the batch's targets, those with
// the tokens given (by shard) only: a shard with none, or whose fence has
// another token by now (a move of it, or an operator's Fence, since), keeps
// its fence. It lifts them on warm's sessions where it has them (nil:
// none), and through the pools otherwise or when a session fails.
func (b *splitBatch) liftTargets(ctx context.Context, tokens map[int]int64, warm *liftSessions) error {
	targets, shards := b.tokenShards(tokens)
	sessions := warm.wait()
	defer warm.release() // before the foreign keys, which want every session
	errs := make(chan error, len(targets))
	for _, d := range targets {
		go func() {
			if on := sessions[d]; on != nil {
				if err := b.liftOn(ctx, on, shards[d], tokens); err == nil {
					errs <- nil
					return
				}
				// A session that failed: the lift again, through the
				// pool (an update whose token is gone changes nothing).
			}
			errs <- b.liftOn(ctx, b.sp.cfg.DBs[d], shards[d], tokens)
		}()
	}
	var first error
	for range targets {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// tokenShards returns the batch's targets and, by target, its shards
// that have a token in tokens: those liftTargets lifts.
func (b *splitBatch) tokenShards(tokens map[int]int64) (targets []int, shards map[int][]int) {
	targets, all := b.byTarget()
	shards = map[int][]int{}
	for d, ss := range all {
		for _, s := range ss {
			if _, ok := tokens[s]; ok {
				shards[d] = append(shards[d], s)
			}
		}
	}
	return targets, shards
}

// liftOn lifts the fences of shards, those with their tokens, on db (a
// target, or a session of one): liftFence's update of each shard's fence,
// in scripts of 200 shards (a statement each on MySQL, in one
// transaction).
func (b *splitBatch) liftOn(ctx context.Context, db *gorm.DB, shards []int, tokens map[int]int64) error {
	for lo := 0; lo < len(shards); lo += 200 {
		chunk := shards[lo:min(lo+200, len(shards))]
		script := make([]string, len(chunk))
		for i, s := range chunk {
			cond := "token = " + strconv.FormatInt(tokens[s], 10)
			open := "'-infinity'"
			if b.sp.mysql {
				open = "'1000-01-01'"
			}
			script[i] = "UPDATE " + quoteTable(db, b.schemaOf(s), fenceTable) + " SET fenced_until = " + open + ", token = token + 1, mover_only = FALSE WHERE id = 1 AND " + cond
		}
		err := lockedTx(ctx, db, b.schemaOf(chunk[0]), func(tx *gorm.DB) error {
			if !b.sp.mysql {
				return tx.Exec(strings.Join(script, ";\n")).Error
			}
			for _, q := range script {
				if err := tx.Exec(q).Error; err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("lifting the fences of shards %d to %d: %w", chunk[0], chunk[len(chunk)-1], err)
		}
	}
	return nil
}

// liftSessions are sessions of a batch's PostgreSQL targets, one each
// (none of a pool of one session),
// readied in the background for liftTargets: each has read the fence of
// every shard of the batch on its target. A session that has never opened
// a table pays for it at the first statement that does: lifting 125
// shards' fences took 53 ms on a new session against 11 ms on one that had
// read them (a quiet machine), and 73 to 385 ms under a benchmark's
// writers, the largest part of a fence. The read runs while the monolith
// seals and the catalog flips; it holds no lock once done (it is a
// transaction of its own).
type liftSessions struct {
	done     chan struct{}
	once     sync.Once
	sessions map[int]*gorm.DB // by target, those readied
	conns    []*sql.Conn
}

// warmLift starts readying liftSessions for the shards of tokens (by
// shard) on their targets. On MySQL, or with nothing to lift, it readies
// none.
func (b *splitBatch) warmLift(ctx context.Context, tokens map[int]int64) *liftSessions {
	w := &liftSessions{done: make(chan struct{}), sessions: map[int]*gorm.DB{}}
	if b.sp.mysql {
		close(w.done)
		return w
	}
	targets, byTarget := b.tokenShards(tokens)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, d := range targets {
		shards := byTarget[d]
		if len(shards) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := b.sp.cfg.DBs[d]
			sqlDB, err := db.DB()
			// A pool of one session: that session is the one the lift
			// gets, and held here it would keep the seal's catalog (if
			// on this database) from its flip.
			if err != nil || sqlDB.Stats().MaxOpenConnections == 1 {
				return
			}
			conn, err := sqlDB.Conn(ctx)
			if err != nil {
				return
			}
			on := db.Session(&gorm.Session{NewDB: true, Context: ctx})
			on.Statement.ConnPool = conn
			script := make([]string, len(shards))
			for i, s := range shards {
				script[i] = "SELECT token FROM " + quoteTable(db, b.schemaOf(s), fenceTable) + " WHERE id = 1"
			}
			err = on.Transaction(func(tx *gorm.DB) error {
				if err := tx.Exec(fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", lockWait.Milliseconds())).Error; err != nil {
					return err
				}
				return tx.Exec(strings.Join(script, ";\n")).Error
			})
			mu.Lock()
			defer mu.Unlock()
			w.conns = append(w.conns, conn)
			if err == nil {
				w.sessions[d] = on
			}
		}()
	}
	go func() {
		wg.Wait()
		close(w.done)
	}()
	return w
}

// wait waits until the sessions are readied (or failed to be) and returns
// them by target. A nil w has none.
func (w *liftSessions) wait() map[int]*gorm.DB {
	if w == nil {
		return nil
	}
	<-w.done
	return w.sessions
}

// release gives the sessions back to their pools, once they are readied;
// liftTargets releases them as soon as it is done with them. A nil w has
// none.
func (w *liftSessions) release() {
	if w == nil {
		return
	}
	<-w.done
	w.once.Do(func() {
		for _, c := range w.conns {
			_ = c.Close()
		}
	})
}

// checkPlaced checks that the map (and the catalog) place every shard of
// the batch in the monolith's shared tables, or, after, where the batch
// flips it (a batch run again after its flip).
func (b *splitBatch) checkPlaced(ctx context.Context, sealed bool) error {
	v := b.sp.cfg.Map.Load()
	check := func(where string, p []shardmap.Placement) error {
		for _, s := range b.shards {
			if p[s].Shared && p[s].DB == b.sp.monoIdx {
				continue
			}
			if sealed && !p[s].Shared && p[s].DB == b.to[s] {
				continue
			}
			return withDetail(ErrNotShared, fmt.Sprintf("%s places shard %d on %s (shared: %v), not in the shared tables of %s",
				where, s, b.sp.cfg.Map.Databases()[p[s].DB], p[s].Shared, b.sp.cfg.Monolith))
		}
		return nil
	}
	if err := check("the map", v.Placements()); err != nil {
		return err
	}
	if c := b.sp.cfg.Catalog; c != nil {
		p, _, err := c.loadPlacements(ctx, b.sp.cfg.Map.Databases(), b.sp.shards)
		if err != nil {
			return err
		}
		if err := check("the catalog", p); err != nil {
			return err
		}
	}
	return nil
}

// checkTargetsSealedCopy checks, for a batch run again after its seal,
// that each target still holds the copy, fenced for the mover or
// already taking writes (a flip done, the run died after), and returns the
// tokens of the fences for the mover it finds (by shard): the fences the
// run lifts once it has flipped, and no other (liftTargets). A fence of
// another kind, or set after this read, is a move's or an operator's.
func (b *splitBatch) checkTargetsSealedCopy(ctx context.Context) (map[int]int64, error) {
	tokens := map[int]int64{}
	for _, s := range b.shards {
		db, sc := b.dst(s), b.schemaOf(s)
		ok, err := tableExists(ctx, db, sc, fenceTable)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, withDetail(ErrNoCopy, fmt.Sprintf("shard %d is sealed on the monolith but %s has no copy of it", s, b.sp.cfg.Map.Databases()[b.to[s]]))
		}
		var f []struct {
			Token     int64
			Sealed    bool
			MoverOnly bool
		}
		if err := db.WithContext(ctx).Raw("SELECT token, sealed, mover_only FROM " + quoteTable(db, sc, fenceTable) + " WHERE id = 1").Scan(&f).Error; err != nil {
			return nil, err
		}
		if len(f) == 1 && f[0].MoverOnly && !f[0].Sealed && f[0].Token != droppingToken {
			tokens[s] = f[0].Token
		}
	}
	return tokens, nil
}

// checkSealedCopies compares each copy of b's shards on its target, a
// batch sealed on the monolith before a flip that did not come, with what
// its seal recorded as verified (each table's rows and sum): the flip is
// to the copy that was verified, never to another schema of the shard
// there, fenced for the mover as a copy is (one created ahead of its
// batch, empty, by a plan that sends the shard to another database than
// the one that sealed it). It returns ErrCopyDiffers naming the first
// table that differs.
func (b *splitBatch) checkSealedCopies(ctx context.Context) error {
	verified, err := b.sp.readVerified(ctx, b.shards)
	if err != nil {
		return err
	}
	// The sums of the copies, by target, table and the columns they
	// were verified over: a query of many shards' tables at a time.
	type group struct {
		d            int
		table, which string
	}
	groups := map[group][]int{}
	colsOf := map[group][]string{}
	for _, s := range b.shards {
		for _, t := range b.sp.tables {
			want, ok := verified[s][t.Name]
			if !ok {
				return withDetail(ErrCopyDiffers, fmt.Sprintf("shard %d is sealed on the monolith with no verification of %s: it was not sealed by a split's batch", s, t.Name))
			}
			cols, err := want.hashedOver(b.cols[t.Name].all)
			if err != nil {
				return fmt.Errorf("%w (shard %d, table %s)", err, s, t.Name)
			}
			g := group{b.to[s], t.Name, checkCols(cols)}
			groups[g] = append(groups[g], s)
			colsOf[g] = cols
		}
	}
	names := b.sp.cfg.Map.Databases()
	var differ []string
	first := -1
	for g, shards := range groups {
		got, err := tableSums(ctx, b.sp.cfg.DBs[g.d], shards, b.schemaOf, g.table, colsOf[g])
		if err != nil {
			return fmt.Errorf("shardid: split: reading the copies of %s on %s: %w", g.table, names[g.d], err)
		}
		for _, s := range shards {
			want := verified[s][g.table]
			if c := got[s]; c.rows != want.Rows || c.sum != want.Sum {
				if first < 0 || s < first {
					first = s
				}
				differ = append(differ, fmt.Sprintf("shard %d's %s on %s: %d rows, %d verified", s, g.table, names[g.d], c.rows, want.Rows))
			}
		}
	}
	if len(differ) > 0 {
		slices.Sort(differ)
		list := strings.Join(differ[:min(len(differ), 6)], "; ")
		if len(differ) > 6 {
			list += fmt.Sprintf("; and %d more", len(differ)-6)
		}
		return withDetail(ErrCopyDiffers, fmt.Sprintf("shard %d was sealed on the monolith once its copy was verified, and its schema on %s is not that copy (%s): "+
			"run the plan that sealed it (the shard's copy is on the database it sent it to), or abort the split, which lifts the seal",
			first, names[b.to[first]], list))
	}
	return nil
}

// startChangeLog empties the split's change log and marks shards moving
// (their writes logged from then on), in one transaction that holds the
// shards' state rows before it asks whether lock is still held. A run
// whose lock was lost (to a rival, who may be logging its own copy's
// changes by now: the verification trusts that log) changes nothing; a
// rival that takes the lock after the question waits for those rows, so
// its log starts after this one's, never before it.
func (sp *splitter) startChangeLog(ctx context.Context, lock *moveLock, shards []int) error {
	return lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
		if _, err := sp.lockStates(tx, shards); err != nil {
			return err
		}
		if err := lock.ensure(ctx, "starting the change log"); err != nil {
			return err
		}
		if err := tx.Exec("DELETE FROM " + sp.q(splitChangeTable)).Error; err != nil {
			return err
		}
		// Only this batch's shards are logged from here: a batch that
		// failed with its lock lost leaves its own marked (its lift
		// leaves the logging to the lock holder), and the log is this
		// run's now.
		keep := inList(append([]int{-1}, shards...))
		if err := tx.Exec("UPDATE " + sp.q(splitStateTable) + " SET moving = FALSE WHERE moving AND shard NOT " + keep).Error; err != nil {
			return err
		}
		return tx.Exec("UPDATE "+sp.q(splitStateTable)+" SET moving = ? WHERE shard "+keep, true).Error
	})
}

// stopChangeLog ends the logging of shards and forgets their entries (of
// every shard, and the whole log, if shards is nil: a run's clean-up, or
// an abort; the batches of a group after one sealed, otherwise), as
// startChangeLog does: under their state rows, and only while lock is
// held.
func (sp *splitter) stopChangeLog(ctx context.Context, lock *moveLock, shards []int) error {
	return lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error {
		of := ""
		if shards == nil {
			if err := tx.Raw("SELECT shard FROM " + sp.q(splitStateTable) + " ORDER BY shard FOR UPDATE").Scan(&shards).Error; err != nil {
				return err
			}
		} else {
			if _, err := sp.lockStates(tx, shards); err != nil {
				return err
			}
			of = " AND shard " + inList(shards)
		}
		if err := lock.ensure(ctx, "ending the change log"); err != nil {
			return err
		}
		if err := tx.Exec("UPDATE " + sp.q(splitStateTable) + " SET moving = FALSE WHERE moving" + of).Error; err != nil {
			return err
		}
		return tx.Exec("DELETE FROM " + sp.q(splitChangeTable) + strings.Replace(of, " AND", " WHERE", 1)).Error
	})
}

// sealedBefore reports whether a run before this one sealed every shard
// of the batch: what is left (the flip, the targets let through) needs no
// privilege the mover did not use then, and the shards take no writes
// until it is done, so no check refuses it.
func (b *splitBatch) sealedBefore(ctx context.Context) bool {
	state, err := b.sp.readSplitState(ctx, b.shards)
	if err != nil || len(state) == 0 {
		return false
	}
	for _, s := range b.shards {
		if !state[s].Sealed {
			return false
		}
	}
	return true
}
