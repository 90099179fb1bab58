package shardid_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid"
)

// The checker of the fault test. It judges a run from three sources, each
// written independently of the code under test:
//
//   - the history: one log file per writer process, appended to as things
//     happen (a line per write, so a SIGKILL loses at most the line being
//     written): every claim of a worker id with its fencing token and floor,
//     every batch of IDs the process was given with what became of it
//     (acknowledged, refused, failed, duplicate key);
//   - the rows: every row of every shard table on every physical database,
//     the live copies and the leftovers of moves and splits alike (in the
//     monolith, a row's shard is its key's, or its parent's for a child);
//   - the final shard map, from the catalog.
//
// It checks, and reports each breach as a violation:
//
//  1. no ID was issued twice, anywhere: across processes, shards and tables,
//     whether or not the write that carried it succeeded;
//  2. no insert failed on a duplicate key (each attempt carries fresh IDs);
//  3. no ID is stored twice among the live copies, and every live row sits in
//     the schema of the shard its ID names;
//  4. every acknowledged write is stored exactly once, in the table it was
//     written to, on the database the final map names for its shard, with
//     the content that was written;
//  5. a write refused outright (fenced shard, lost lease, clock behind) left
//     no row anywhere;
//  7. updates and deletes: each writer updates (the sharding key, to another
//     key of the same shard, and Upd) and deletes rows of its own whose
//     insert was acknowledged, one at a time, so a row's history is one
//     process's sequence: its final state (on the database the map names)
//     must be the state some operation of that sequence left, no earlier
//     than the last acknowledged one, and not one that was refused. So an
//     acknowledged update is seen unless a later operation may have
//     overwritten it ("update-lost" otherwise), an acknowledged delete stays
//     deleted ("resurrected"), a refused update or delete changed nothing
//     ("refused-but-applied"), and an acknowledged update or delete found
//     its row ("ack-op-no-row": it matched nothing, the row was gone).
//  6. worker-id exclusivity: the IDs issued under one claim of a worker id
//     (one fencing token) occupy a range of time units that overlaps no other
//     claim's range of that worker id, lies above the floor the store gave
//     the claim, and carries that worker id; where tokens are numbers,
//     a later token's range lies after an earlier one's, and every claim's
//     floor is at or above every unit the claims before it used.
//
// Check 6 is what "no worker id held by two live processes at once" means in
// terms of what the processes did: two holders of one worker id at once can
// only show as IDs of both in overlapping units.

// chaosLayout is the layout of the fault test: 16 logical shards written,
// 32 worker ids, 32 IDs per shard per millisecond per worker.
var chaosLayout, _ = shardid.Instagram.WithWorkerBits(5)

const (
	// chaosShards are the logical shards: the first chaosSchemaShards in
	// schemas of their own on pg1 and pg2 from the start, the others shared
	// in the monolith's tables until a split takes them out.
	chaosShards       = 16
	chaosSchemaShards = 8
	chaosTTL          = 1500 * time.Millisecond
)

// chaosNames are the databases of the map, by index: two PostgreSQL
// servers, and the monolith (a database of pg1's server).
var chaosNames = []string{"pg1", "pg2", "mono"}

// chaosMono is the index of the monolith in chaosNames.
const chaosMono = 2

// chaosTables are the tables every logical shard has: chaos_cs is a child
// of chaos_as (its a_id is the id of its parent row, whose shard it takes).
var chaosTables = []string{"chaos_as", "chaos_bs", "chaos_cs"}

// chaosKeyColumn is the column of table that holds a row's key: the
// sharding key, or for a child its parent's id.
func chaosKeyColumn(table string) string {
	if table == "chaos_cs" {
		return "a_id"
	}
	return "user_id"
}

// chaosClaim is one claim of a worker id, as a process logged it.
type chaosClaim struct {
	Proc   int
	Worker int
	Token  string // the fencing token; unique per claim of a worker id
	Last   int64  // the floor: the last unit an earlier holder may have used
	At     int64  // the process's wall clock at the claim, Unix ns (information only)
}

// chaosAttempt is one batch insert: the IDs the process was given, what
// became of them, and the claim they were issued under ("" when the claim
// changed during the attempt, so that it cannot be told).
type chaosAttempt struct {
	Proc    int
	Seq     int64 // per process
	Table   string
	Outcome string // "ack", "dupkey", or the class of the failure
	Token   string
	At      time.Time     // when the attempt began (information only)
	Took    time.Duration // how long it took
	Rows    []chaosRowRef
}

// chaosRowRef is a row of an attempt: its ID and sharding key.
type chaosRowRef struct {
	ID  shardid.ID
	Key int64
}

// chaosRow is a row as stored.
type chaosRow struct {
	DB      int // index of the physical database, in chaosNames
	Shard   int // the logical shard whose schema holds it (in the monolith: its key's, -1 for an orphan)
	Table   string
	ID      shardid.ID
	Key     int64
	Proc    int
	Attempt int64
	Idx     int
	Upd     int64
}

// chaosOp is an update or a delete of one row by the process that
// inserted it.
type chaosOp struct {
	Proc     int
	Seq      int64 // per process, from the sequence of its attempts
	Table    string
	Kind     string // "update" or "delete"
	Outcome  string // as an attempt's
	At       time.Time
	Took     time.Duration
	ID       shardid.ID
	Key      int64 // the key an update sets
	Affected int64 // rows the statement matched, as the driver said
}

// chaosHistory is every process's log, merged.
type chaosHistory struct {
	Claims   []chaosClaim
	Attempts []chaosAttempt
	Ops      []chaosOp
	Other    map[string]int // other events by kind, for the report
}

// Outcomes of an attempt that mean no row can have been written: the
// statement was refused before or by the database.
var chaosRefused = map[string]bool{"moving": true, "lease": true, "clock": true, "exhausted": true, "wrongshard": true}

// chaosVerdict is the checker's result.
type chaosVerdict struct {
	Violations []string
	Kinds      map[string]int // violations by kind
	IDs        int            // distinct IDs issued, from the history
	Acked      int            // acknowledged rows
	Rows       int            // stored rows, all copies
	LiveRows   int
	Claims     int
	Judged     int // IDs attributed to a claim and judged by check 6
	Ops        int // updates and deletes
	AckedOps   int
}

func (v *chaosVerdict) fail(kind, format string, args ...any) {
	if v.Kinds == nil {
		v.Kinds = map[string]int{}
	}
	v.Kinds[kind]++
	v.Violations = append(v.Violations, kind+": "+fmt.Sprintf(format, args...))
}

// chaosTick returns the time unit of id.
func chaosTick(id shardid.ID) int64 {
	p := chaosLayout.Decompose(id)
	return int64(p.Time.Sub(chaosLayout.Epoch()) / chaosLayout.Unit())
}

// chaosCheck judges a run. finalMap gives the database of each logical
// shard.
func chaosCheck(h chaosHistory, rows []chaosRow, finalMap []int) chaosVerdict {
	var v chaosVerdict
	v.Claims = len(h.Claims)
	v.Rows = len(rows)

	// 1 and 2: every ID issued once; no duplicate key.
	type where struct {
		proc  int
		seq   int64
		table string
	}
	issued := map[shardid.ID]where{}
	for _, a := range h.Attempts {
		if a.Outcome == "dupkey" {
			v.fail("duplicate-key", "process %d attempt %d: insert into %s failed on a duplicate key (IDs %v)", a.Proc, a.Seq, a.Table, chaosIDs(a.Rows, 4))
		}
		for _, r := range a.Rows {
			if r.ID == 0 {
				continue
			}
			if w, ok := issued[r.ID]; ok {
				v.fail("id-issued-twice", "ID %v (worker %d, unit %d) issued twice: process %d attempt %d (%s) and process %d attempt %d (%s)",
					r.ID, chaosLayout.Decompose(r.ID).Worker, chaosTick(r.ID), w.proc, w.seq, w.table, a.Proc, a.Seq, a.Table)
				continue
			}
			issued[r.ID] = where{a.Proc, a.Seq, a.Table}
		}
		if a.Outcome == "ack" {
			v.Acked += len(a.Rows)
		}
	}
	v.IDs = len(issued)

	// 3: the live copies.
	live := map[shardid.ID][]chaosRow{}
	stored := map[shardid.ID]bool{}
	for _, r := range rows {
		stored[r.ID] = true
		if r.Shard < 0 || r.Shard >= len(finalMap) || finalMap[r.Shard] != r.DB {
			continue // a leftover of a move
		}
		v.LiveRows++
		live[r.ID] = append(live[r.ID], r)
		if s := chaosLayout.Decompose(r.ID).Shard; s != r.Shard {
			v.fail("wrong-schema", "row %v (process %d attempt %d) is stored in shard %d's %s, but its ID names shard %d", r.ID, r.Proc, r.Attempt, r.Shard, r.Table, s)
		}
	}
	for id, rs := range live {
		if len(rs) > 1 {
			var at []string
			for _, r := range rs {
				at = append(at, fmt.Sprintf("%s/shard %d/%s (process %d attempt %d)", chaosNames[r.DB], r.Shard, r.Table, r.Proc, r.Attempt))
			}
			slices.Sort(at)
			v.fail("stored-twice", "ID %v is stored %d times: %s", id, len(rs), strings.Join(at, ", "))
		}
	}

	// 4, 5 and 7: acknowledged writes are where the map says, in the state
	// their last operations left; refused ones nowhere.
	ops := map[shardid.ID][]chaosOp{}
	for _, o := range h.Ops {
		if o.Outcome == "idrefused" {
			v.fail("id-refused", "process %d op %d (%s of row %v, key %d) was refused by the split's triggers as a row whose ID names another shard than its key", o.Proc, o.Seq, o.Kind, o.ID, o.Key)
		}
		ops[o.ID] = append(ops[o.ID], o)
		v.Ops++
		if o.Outcome == "ack" {
			v.AckedOps++
		}
	}
	for _, list := range ops {
		sort.Slice(list, func(i, j int) bool { return list[i].Seq < list[j].Seq })
	}
	for _, a := range h.Attempts {
		switch {
		case a.Outcome == "ack":
			for i, r := range a.Rows {
				checkChaosRow(&v, a, i, r, ops[r.ID], live[r.ID], stored[r.ID], finalMap)
			}
		case a.Outcome == "idrefused":
			v.fail("id-refused", "process %d attempt %d (%s, IDs %v) was refused by the split's triggers as rows whose IDs name other shards than their keys", a.Proc, a.Seq, a.Table, chaosIDs(a.Rows, 4))
		case chaosRefused[a.Outcome]:
			for _, r := range a.Rows {
				if r.ID != 0 && stored[r.ID] {
					v.fail("refused-but-stored", "process %d attempt %d was refused (%s), yet its row %v is stored", a.Proc, a.Seq, a.Outcome, r.ID)
				}
			}
		}
	}

	// 6: claims of a worker id own disjoint ranges of units.
	type claimKey struct {
		worker int
		token  string
	}
	type span struct {
		claim    chaosClaim
		lo, hi   int64
		n        int
		loID     shardid.ID
		hiID     shardid.ID
		hasRange bool
	}
	spans := map[claimKey]*span{}
	for _, c := range h.Claims {
		k := claimKey{c.Worker, c.Token}
		if s, ok := spans[k]; ok {
			v.fail("token-reused", "worker %d: token %s was given twice, to process %d and to process %d", c.Worker, c.Token, s.claim.Proc, c.Proc)
			continue
		}
		spans[k] = &span{claim: c}
	}
	for _, a := range h.Attempts {
		if a.Token == "" {
			continue
		}
		for _, r := range a.Rows {
			if r.ID == 0 {
				continue
			}
			w := chaosLayout.Decompose(r.ID).Worker
			s := spans[claimKey{w, a.Token}]
			if s == nil {
				v.fail("foreign-worker", "ID %v of process %d attempt %d carries worker %d, which its claim %s is not of", r.ID, a.Proc, a.Seq, w, a.Token)
				continue
			}
			if s.claim.Proc != a.Proc {
				v.fail("foreign-claim", "ID %v of process %d was issued under the claim %s of process %d", r.ID, a.Proc, a.Token, s.claim.Proc)
			}
			u := chaosTick(r.ID)
			if !s.hasRange || u < s.lo {
				s.lo, s.loID = u, r.ID
			}
			if !s.hasRange || u > s.hi {
				s.hi, s.hiID = u, r.ID
			}
			s.hasRange = true
			s.n++
			v.Judged++
		}
	}
	byWorker := map[int][]*span{}
	for _, s := range spans {
		if !s.hasRange {
			continue
		}
		if s.lo <= s.claim.Last {
			v.fail("below-floor", "worker %d, claim %s of process %d: ID %v in unit %d, at or below the floor %d the store gave the claim",
				s.claim.Worker, s.claim.Token, s.claim.Proc, s.loID, s.lo, s.claim.Last)
		}
		byWorker[s.claim.Worker] = append(byWorker[s.claim.Worker], s)
	}
	for w, ss := range byWorker {
		sort.Slice(ss, func(i, j int) bool {
			return ss[i].lo < ss[j].lo || ss[i].lo == ss[j].lo && ss[i].claim.Token < ss[j].claim.Token
		})
		hi := ss[0]
		for _, s := range ss[1:] {
			if s.lo <= hi.hi {
				v.fail("worker-held-twice", "worker %d held twice at once: claim %s of process %d issued units %d..%d (%d IDs, e.g. %v), claim %s of process %d units %d..%d (%d IDs, e.g. %v)",
					w, hi.claim.Token, hi.claim.Proc, hi.lo, hi.hi, hi.n, hi.hiID, s.claim.Token, s.claim.Proc, s.lo, s.hi, s.n, s.loID)
			}
			if s.hi > hi.hi {
				hi = s
			}
		}
		// Numeric tokens order the claims as the store granted them.
		numeric := true
		tok := make(map[*span]int64, len(ss))
		for _, s := range ss {
			n, err := strconv.ParseInt(s.claim.Token, 10, 64)
			if err != nil {
				numeric = false
				break
			}
			tok[s] = n
		}
		if numeric {
			for i := 1; i < len(ss); i++ {
				if tok[ss[i]] <= tok[ss[i-1]] {
					v.fail("token-order", "worker %d: claim with token %d (process %d) issued units from %d, after the claim with the greater token %d (process %d) issued units up to %d",
						w, tok[ss[i]], ss[i].claim.Proc, ss[i].lo, tok[ss[i-1]], ss[i-1].claim.Proc, ss[i-1].hi)
				}
			}
		}
	}
	// Each claim's floor covers every unit that claims with smaller tokens
	// of its worker id used: the store gives the next holder the last
	// unit any holder may have used.
	all := map[int][]*span{}
	for _, s := range spans {
		if _, err := strconv.ParseInt(s.claim.Token, 10, 64); err == nil {
			all[s.claim.Worker] = append(all[s.claim.Worker], s)
		}
	}
	for w, ss := range all {
		sort.Slice(ss, func(i, j int) bool {
			a, _ := strconv.ParseInt(ss[i].claim.Token, 10, 64)
			b, _ := strconv.ParseInt(ss[j].claim.Token, 10, 64)
			return a < b
		})
		var used *span // the earlier claim that used the highest unit
		for _, s := range ss {
			if used != nil && s.claim.Last < used.hi {
				v.fail("floor-behind", "worker %d: claim %s of process %d was given the floor %d, below unit %d, which claim %s of process %d used (%v)",
					w, s.claim.Token, s.claim.Proc, s.claim.Last, used.hi, used.claim.Token, used.claim.Proc, used.hiID)
			}
			if s.hasRange && (used == nil || s.hi > used.hi) {
				used = s
			}
		}
	}
	return v
}

// checkChaosRow judges row i (r) of acknowledged attempt a against what
// is stored: its live copies (rs), and whether it is stored on any copy;
// ops are the row's updates and deletes, in order.
func checkChaosRow(v *chaosVerdict, a chaosAttempt, i int, r chaosRowRef, ops []chaosOp, rs []chaosRow, stored bool, finalMap []int) {
	s := chaosLayout.Decompose(r.ID).Shard
	where := chaosNames[finalMap[s]]
	// The states the row may be in: that of the last acknowledged
	// operation (the insert, if none), or of any later one that may have
	// been applied (its outcome unknown). A state is (present, key, upd).
	type state struct {
		present bool
		key     int64
		upd     int64
	}
	last := -1 // index in ops of the last acknowledged operation
	for k, o := range ops {
		if o.Proc != a.Proc {
			v.fail("op-foreign", "process %d changed row %v of process %d", o.Proc, r.ID, a.Proc)
		}
		if o.Outcome == "ack" {
			last = k
			if o.Affected == 0 {
				v.fail("ack-op-no-row", "acknowledged %s of row %v (process %d op %d at %s, shard %d, %s) matched no row: the row was not on the database it was routed to",
					o.Kind, r.ID, o.Proc, o.Seq, o.At.UTC().Format("15:04:05.000"), s, a.Table)
			}
		}
	}
	var may []state
	of := func(k int) state {
		if k < 0 {
			return state{true, r.Key, 0}
		}
		if ops[k].Kind == "delete" {
			return state{}
		}
		return state{true, ops[k].Key, ops[k].Seq}
	}
	may = append(may, of(last))
	for k := last + 1; k < len(ops); k++ {
		if !chaosRefused[ops[k].Outcome] {
			may = append(may, of(k))
		}
	}
	lastDesc := fmt.Sprintf("insert (attempt %d at %s, took %v)", a.Seq, a.At.UTC().Format("15:04:05.000"), a.Took)
	if last >= 0 {
		o := ops[last]
		lastDesc = fmt.Sprintf("%s (op %d at %s, took %v)", o.Kind, o.Seq, o.At.UTC().Format("15:04:05.000"), o.Took)
	}
	if len(rs) == 0 {
		if slices.Contains(may, state{}) {
			return // deleted, as it may be
		}
		elsewhere := ""
		if stored {
			elsewhere = " (it is on a copy the map does not name)"
		}
		v.fail("ack-missing", "acknowledged row %v (process %d attempt %d at %s, took %v; shard %d, %s) is missing from %s%s; its last acknowledged operation: %s",
			r.ID, a.Proc, a.Seq, a.At.UTC().Format("15:04:05.000"), a.Took, s, a.Table, where, elsewhere, lastDesc)
		return
	}
	got := rs[0]
	if got.Table != a.Table || got.Proc != a.Proc || got.Attempt != a.Seq || got.Idx != i {
		v.fail("ack-content", "acknowledged row %v (process %d attempt %d row %d, key %d, %s) is stored as %+v", r.ID, a.Proc, a.Seq, i, r.Key, a.Table, got)
		return
	}
	now := state{true, got.Key, got.Upd}
	if slices.Contains(may, now) {
		return
	}
	if last >= 0 && ops[last].Kind == "delete" {
		v.fail("resurrected", "row %v (process %d, shard %d, %s) was deleted by an acknowledged %s, yet is stored on %s (key %d, upd %d)",
			r.ID, a.Proc, s, a.Table, lastDesc, where, got.Key, got.Upd)
		return
	}
	// Which operation's state the row shows, by its Upd.
	for k, o := range ops {
		if got.Upd != 0 && o.Seq == got.Upd && o.Kind == "update" && o.Key == got.Key {
			switch {
			case chaosRefused[o.Outcome]:
				v.fail("refused-but-applied", "row %v (process %d, shard %d, %s) shows update op %d, which was refused (%s)", r.ID, a.Proc, s, a.Table, o.Seq, o.Outcome)
			case k < last:
				v.fail("update-lost", "row %v (process %d, shard %d, %s) on %s shows update op %d (key %d), older than the acknowledged %s, which set %v",
					r.ID, a.Proc, s, a.Table, where, o.Seq, o.Key, lastDesc, of(last))
			}
			return
		}
	}
	if got.Upd == 0 && got.Key == r.Key {
		v.fail("update-lost", "row %v (process %d, shard %d, %s) on %s shows its insert, older than the acknowledged %s, which set %v",
			r.ID, a.Proc, s, a.Table, where, lastDesc, of(last))
		return
	}
	v.fail("ack-content", "acknowledged row %v (process %d attempt %d row %d, %s) is stored as %+v, a state no operation of it left", r.ID, a.Proc, a.Seq, i, a.Table, got)
}

func chaosIDs(rs []chaosRowRef, n int) []shardid.ID {
	var ids []shardid.ID
	for _, r := range rs[:min(n, len(rs))] {
		ids = append(ids, r.ID)
	}
	return ids
}

// The log format, one event a line, fields separated by single spaces:
//
//	claim PROC WORKER TOKEN LAST UNIXNANO
//	release PROC WORKER TOKEN LAST
//	attempt PROC SEQ TABLE OUTCOME TOKEN UNIXMS MS ID:KEY,ID:KEY,...
//	pending PROC SEQ TABLE KIND ID KEY
//	op PROC SEQ TABLE KIND OUTCOME UNIXMS MS ID KEY AFFECTED
//	event PROC KIND
//
// TOKEN is "-" when unknown. A last line cut short by a kill is ignored.
// An update or delete is logged as pending before it runs, and as an op
// once it returns: one left pending (the process was killed meanwhile)
// counts as an op whose outcome is unknown ("unlogged").

// readChaosLog adds the events of one log file to h.
func readChaosLog(path string, h *chaosHistory) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if h.Other == nil {
		h.Other = map[string]int{}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return err
	}
	pending := map[[2]int64]chaosOp{}
	for i, line := range lines {
		if err := parseChaosLine(line, h, pending); err != nil {
			if i == len(lines)-1 {
				h.Other["torn last line"]++ // the process was killed while writing it
				continue
			}
			return fmt.Errorf("%s line %d: %w: %q", path, i+1, err, line)
		}
	}
	for _, o := range pending {
		h.Ops = append(h.Ops, o)
		h.Other[o.Kind+" "+o.Outcome]++
	}
	return nil
}

// parseChaosLine adds the event of line to h; pending holds the updates
// and deletes logged as pending and not yet as done, by process and
// sequence number.
func parseChaosLine(line string, h *chaosHistory, pending map[[2]int64]chaosOp) error {
	f := strings.Split(line, " ")
	atoi := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			panic(err)
		}
		return n
	}
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("bad line: %v", r)
			}
		}()
		switch {
		case f[0] == "claim" && len(f) == 6:
			h.Claims = append(h.Claims, chaosClaim{Proc: int(atoi(f[1])), Worker: int(atoi(f[2])), Token: f[3], Last: atoi(f[4]), At: atoi(f[5])})
		case f[0] == "release" && len(f) == 5:
			h.Other["release"]++
		case f[0] == "attempt" && len(f) == 9:
			a := chaosAttempt{Proc: int(atoi(f[1])), Seq: atoi(f[2]), Table: f[3], Outcome: f[4], Token: f[5],
				At: time.UnixMilli(atoi(f[6])), Took: time.Duration(atoi(f[7])) * time.Millisecond}
			if a.Token == "-" {
				a.Token = ""
			}
			if f[8] != "-" {
				for _, p := range strings.Split(f[8], ",") {
					id, key, ok := strings.Cut(p, ":")
					if !ok {
						panic("no key in " + p)
					}
					a.Rows = append(a.Rows, chaosRowRef{ID: shardid.ID(atoi(id)), Key: atoi(key)})
				}
			}
			h.Attempts = append(h.Attempts, a)
			h.Other["outcome "+a.Outcome]++
		case f[0] == "pending" && len(f) == 7:
			o := chaosOp{Proc: int(atoi(f[1])), Seq: atoi(f[2]), Table: f[3], Kind: f[4], Outcome: "unlogged",
				ID: shardid.ID(atoi(f[5])), Key: atoi(f[6])}
			if o.Kind != "update" && o.Kind != "delete" {
				panic("unknown op " + o.Kind)
			}
			pending[[2]int64{int64(o.Proc), o.Seq}] = o
		case f[0] == "op" && len(f) == 11:
			o := chaosOp{Proc: int(atoi(f[1])), Seq: atoi(f[2]), Table: f[3], Kind: f[4], Outcome: f[5],
				At: time.UnixMilli(atoi(f[6])), Took: time.Duration(atoi(f[7])) * time.Millisecond,
				ID: shardid.ID(atoi(f[8])), Key: atoi(f[9]), Affected: atoi(f[10])}
			if o.Kind != "update" && o.Kind != "delete" {
				panic("unknown op " + o.Kind)
			}
			delete(pending, [2]int64{int64(o.Proc), o.Seq})
			h.Ops = append(h.Ops, o)
			h.Other[o.Kind+" "+o.Outcome]++
		case f[0] == "event" && len(f) == 3:
			h.Other[f[2]]++
		default:
			err = fmt.Errorf("unknown event")
		}
	}()
	return err
}

// The checker, on made-up histories: a clean one passes, and each kind of
// breach is reported. No server is needed.
func TestChaosCheckerJudges(t *testing.T) {
	base := chaosLayout.Epoch().Add(500 * 24 * time.Hour)
	id := func(ms int64, shard, worker, seq int) shardid.ID {
		t.Helper()
		x, err := chaosLayout.Compose(shardid.Parts{Time: base.Add(time.Duration(ms) * time.Millisecond), Shard: shard, Worker: worker, Seq: seq})
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	unit := func(ms int64) int64 { return chaosTick(id(ms, 0, 0, 0)) }
	// clean: worker 3 held by process 1 (token 5), then by process 2
	// (token 9) from a floor above process 1's last unit.
	clean := func() (chaosHistory, []chaosRow, []int) {
		h := chaosHistory{
			Claims: []chaosClaim{{Proc: 1, Worker: 3, Token: "5", Last: unit(0)}, {Proc: 2, Worker: 3, Token: "9", Last: unit(20)}},
			Attempts: []chaosAttempt{
				{Proc: 1, Seq: 1, Table: "chaos_as", Outcome: "ack", Token: "5", Rows: []chaosRowRef{{id(10, 1, 3, 0), 1}, {id(10, 1, 3, 1), 9}}},
				{Proc: 1, Seq: 2, Table: "chaos_bs", Outcome: "db", Token: "5", Rows: []chaosRowRef{{id(11, 2, 3, 0), 2}}},
				{Proc: 1, Seq: 3, Table: "chaos_bs", Outcome: "moving", Token: "5", Rows: []chaosRowRef{{id(12, 2, 3, 0), 2}}},
				{Proc: 2, Seq: 1, Table: "chaos_bs", Outcome: "ack", Token: "9", Rows: []chaosRowRef{{id(30, 5, 3, 0), 5}}},
				{Proc: 2, Seq: 2, Table: "chaos_as", Outcome: "ack", Token: "", Rows: []chaosRowRef{{id(31, 5, 3, 0), 13}}},
				{Proc: 1, Seq: 4, Table: "chaos_as", Outcome: "ack", Token: "5", Rows: []chaosRowRef{{id(13, 3, 3, 0), 3}, {id(13, 3, 3, 1), 11}, {id(13, 3, 3, 2), 19}}},
			},
			// Process 1 changes its rows of attempt 4: the first updated
			// (acknowledged), then updated again (timed out: either state
			// may show); the second deleted; the third's update refused.
			Ops: []chaosOp{
				{Proc: 1, Seq: 5, Table: "chaos_as", Kind: "update", Outcome: "ack", ID: id(13, 3, 3, 0), Key: 27, Affected: 1},
				{Proc: 1, Seq: 6, Table: "chaos_as", Kind: "update", Outcome: "timeout", ID: id(13, 3, 3, 0), Key: 35},
				{Proc: 1, Seq: 7, Table: "chaos_as", Kind: "delete", Outcome: "ack", ID: id(13, 3, 3, 1), Key: 11, Affected: 1},
				{Proc: 1, Seq: 8, Table: "chaos_as", Kind: "update", Outcome: "moving", ID: id(13, 3, 3, 2), Key: 43},
			},
		}
		rows := []chaosRow{
			{DB: 0, Shard: 1, Table: "chaos_as", ID: id(10, 1, 3, 0), Key: 1, Proc: 1, Attempt: 1, Idx: 0},
			{DB: 0, Shard: 1, Table: "chaos_as", ID: id(10, 1, 3, 1), Key: 9, Proc: 1, Attempt: 1, Idx: 1},
			{DB: 0, Shard: 2, Table: "chaos_bs", ID: id(11, 2, 3, 0), Key: 2, Proc: 1, Attempt: 2, Idx: 0}, // a lost acknowledgement: fine
			{DB: 1, Shard: 5, Table: "chaos_bs", ID: id(30, 5, 3, 0), Key: 5, Proc: 2, Attempt: 1, Idx: 0},
			{DB: 0, Shard: 5, Table: "chaos_bs", ID: id(30, 5, 3, 0), Key: 5, Proc: 2, Attempt: 1, Idx: 0}, // an old copy
			{DB: 1, Shard: 5, Table: "chaos_as", ID: id(31, 5, 3, 0), Key: 13, Proc: 2, Attempt: 2, Idx: 0},
			{DB: 0, Shard: 3, Table: "chaos_as", ID: id(13, 3, 3, 0), Key: 27, Proc: 1, Attempt: 4, Idx: 0, Upd: 5},
			{DB: 0, Shard: 3, Table: "chaos_as", ID: id(13, 3, 3, 2), Key: 19, Proc: 1, Attempt: 4, Idx: 2},
		}
		return h, rows, []int{0, 0, 0, 0, 1, 1, 1, 1}
	}
	h, rows, m := clean()
	if v := chaosCheck(h, rows, m); len(v.Violations) != 0 || v.IDs != 9 || v.Acked != 7 || v.LiveRows != 7 || v.Judged != 8 || v.Ops != 4 || v.AckedOps != 2 {
		t.Fatalf("a clean run: %+v", v)
	}
	// The update whose outcome is unknown may show too.
	rows[6].Key, rows[6].Upd = 35, 6
	if v := chaosCheck(h, rows, m); len(v.Violations) != 0 {
		t.Fatalf("a clean run, the timed-out update applied: %+v", v)
	}
	for _, tc := range []struct {
		name   string
		break_ func(h *chaosHistory, rows *[]chaosRow, m []int)
		want   string
	}{
		{"an ID issued twice, in two tables", func(h *chaosHistory, rows *[]chaosRow, m []int) {
			h.Attempts[1].Rows[0].ID = h.Attempts[0].Rows[0].ID
		}, "issued twice"},
		{"a duplicate key", func(h *chaosHistory, rows *[]chaosRow, m []int) { h.Attempts[1].Outcome = "dupkey" }, "duplicate key"},
		{"an acknowledged row missing", func(h *chaosHistory, rows *[]chaosRow, m []int) { *rows = (*rows)[1:] }, "is missing from pg1"},
		{"an acknowledged row only on the old copy", func(h *chaosHistory, rows *[]chaosRow, m []int) {
			*rows = slices.Delete(*rows, 3, 4)
		}, "on a copy the map does not name"},
		{"the map points back at the old copy, missing a row", func(h *chaosHistory, rows *[]chaosRow, m []int) { m[5] = 0 }, "chaos_as) is missing from pg1"},
		{"a row with other content", func(h *chaosHistory, rows *[]chaosRow, m []int) { (*rows)[1].Proc = 7 }, "is stored as"},
		{"a row in another table", func(h *chaosHistory, rows *[]chaosRow, m []int) { (*rows)[1].Table = "chaos_bs" }, "is stored as"},
		{"an ID stored twice", func(h *chaosHistory, rows *[]chaosRow, m []int) {
			r := (*rows)[0]
			r.Table = "chaos_bs"
			*rows = append(*rows, r)
		}, "is stored 2 times"},
		{"a row in the wrong shard", func(h *chaosHistory, rows *[]chaosRow, m []int) {
			*rows = append(*rows, chaosRow{DB: 0, Shard: 2, Table: "chaos_as", ID: id(50, 3, 9, 0)})
		}, "its ID names shard 3"},
		{"a refused write stored", func(h *chaosHistory, rows *[]chaosRow, m []int) {
			*rows = append(*rows, chaosRow{DB: 0, Shard: 2, Table: "chaos_bs", ID: id(12, 2, 3, 0), Key: 2, Proc: 1, Attempt: 3})
		}, "was refused (moving), yet"},
		{"two holders at once", func(h *chaosHistory, rows *[]chaosRow, m []int) {
			h.Attempts[1].Rows[0].ID = id(30, 2, 3, 5)
		}, "worker 3 held twice at once"},
		{"an ID at the floor", func(h *chaosHistory, rows *[]chaosRow, m []int) { h.Claims[1].Last = unit(30) }, "at or below the floor"},
		{"tokens out of order", func(h *chaosHistory, rows *[]chaosRow, m []int) { h.Claims[1].Token, h.Attempts[3].Token = "4", "4" }, "after the claim with the greater token"},
		{"a floor behind an earlier claim's IDs", func(h *chaosHistory, rows *[]chaosRow, m []int) { h.Claims[1].Last = unit(5) }, "was given the floor"},
		{"a token given twice", func(h *chaosHistory, rows *[]chaosRow, m []int) { h.Claims[1].Token = "5" }, "was given twice"},
		{"an ID of a worker not claimed", func(h *chaosHistory, rows *[]chaosRow, m []int) { h.Attempts[3].Rows[0].ID = id(30, 5, 4, 0) }, "which its claim 9 is not of"},
		{"an ID issued under another process's claim", func(h *chaosHistory, rows *[]chaosRow, m []int) { h.Attempts[3].Proc = 1 }, "under the claim 9 of process 2"},
		{"an acknowledged update lost", func(h *chaosHistory, rows *[]chaosRow, m []int) { (*rows)[6].Key, (*rows)[6].Upd = 3, 0 }, "shows its insert, older than the acknowledged update (op 5"},
		{"an updated row missing", func(h *chaosHistory, rows *[]chaosRow, m []int) { *rows = slices.Delete(*rows, 6, 7) }, "last acknowledged operation: update (op 5"},
		{"a deleted row back", func(h *chaosHistory, rows *[]chaosRow, m []int) {
			*rows = append(*rows, chaosRow{DB: 0, Shard: 3, Table: "chaos_as", ID: id(13, 3, 3, 1), Key: 11, Proc: 1, Attempt: 4, Idx: 1})
		}, "was deleted by an acknowledged delete (op 7"},
		{"a deleted row back on a copy the map does not name", func(h *chaosHistory, rows *[]chaosRow, m []int) {
			*rows = append(*rows, chaosRow{DB: 1, Shard: 3, Table: "chaos_as", ID: id(13, 3, 3, 1), Key: 11, Proc: 1, Attempt: 4, Idx: 1})
			m[3] = 1
		}, "resurrected: row"},
		{"a refused update applied", func(h *chaosHistory, rows *[]chaosRow, m []int) { (*rows)[7].Key, (*rows)[7].Upd = 43, 8 }, "shows update op 8, which was refused (moving)"},
		{"an acknowledged update that matched no row", func(h *chaosHistory, rows *[]chaosRow, m []int) { h.Ops[0].Affected = 0 }, "acknowledged update of row"},
		{"an acknowledged delete that matched no row", func(h *chaosHistory, rows *[]chaosRow, m []int) { h.Ops[2].Affected = 0 }, "acknowledged delete of row"},
		{"a row in a state no operation left", func(h *chaosHistory, rows *[]chaosRow, m []int) { (*rows)[6].Key = 99 }, "a state no operation of it left"},
	} {
		h, rows, m := clean()
		tc.break_(&h, &rows, m)
		v := chaosCheck(h, rows, m)
		found := false
		for _, s := range v.Violations {
			found = found || strings.Contains(s, tc.want)
		}
		if !found {
			t.Errorf("%s: want a violation with %q, got %q", tc.name, tc.want, v.Violations)
		}
	}
}

// A log is read back line by line; a last line cut short by a kill is
// dropped, a broken line before it is an error.
func TestChaosLogParse(t *testing.T) {
	dir := t.TempDir()
	good := "claim 3 17 p3c1 -1 1700000000\nattempt 3 1 chaos_as ack p3c1 1700000000000 3 5:13,6:21\nattempt 3 2 chaos_bs lease - 1700000000003 0 -\n" +
		"pending 3 3 chaos_as update 5 21\nop 3 3 chaos_as update ack 1700000000004 2 5 21 1\npending 3 4 chaos_as delete 6 21\nop 3 4 chaos_as delete db 1700000000005 0 6 21 0\n" +
		"pending 3 5 chaos_as update 5 29\nevent 3 exit\n"
	path := filepath.Join(dir, "a.log")
	os.WriteFile(path, []byte(good+"attempt 3 3 chaos_as ack p3c1 1700000000004 1 7:1"), 0o644)
	var h chaosHistory
	if err := readChaosLog(path, &h); err != nil {
		t.Fatal(err)
	}
	if len(h.Claims) != 1 || len(h.Attempts) != 3 || h.Attempts[0].Rows[1] != (chaosRowRef{6, 21}) || h.Attempts[1].Token != "" ||
		len(h.Ops) != 3 || h.Ops[0].Key != 21 || h.Ops[0].Affected != 1 || h.Ops[1].Kind != "delete" || h.Ops[1].Outcome != "db" || h.Ops[1].ID != 6 ||
		h.Ops[2].Outcome != "unlogged" || h.Ops[2].Key != 29 || h.Ops[2].Seq != 5 ||
		h.Other["exit"] != 1 || h.Other["torn last line"] != 0 {
		t.Errorf("parsed %+v", h)
	}
	os.WriteFile(path, []byte(good+"attempt 3 3 chaos_as ack p3c1 1700000000004 1 7:"), 0o644)
	h = chaosHistory{}
	if err := readChaosLog(path, &h); err != nil || h.Other["torn last line"] != 1 {
		t.Errorf("a torn last line: %v, %v", err, h.Other)
	}
	os.WriteFile(path, []byte("attempt 3 3 chaos_as ack p3c1 1700000000004 1 7:\n"+good), 0o644)
	if err := readChaosLog(path, &chaosHistory{}); err == nil {
		t.Error("a broken line in the middle was accepted")
	}
}
