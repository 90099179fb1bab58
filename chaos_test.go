package shardid_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/shardid/shardid/internal/testdb"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

var (
	chaosSeedFlag     = flag.Int64("chaos.seed", 0, "seed of TestChaos's faults (0: from the time; the seed is printed)")
	chaosDurationFlag = flag.Duration("chaos.duration", 30*time.Second, "how long TestChaos injects faults")
	chaosFaultsFlag   = flag.String("chaos.faults", "", "the kinds of fault TestChaos picks from, comma-separated (empty: all)")
)

// The fault test, in the spirit of Jepsen. Six writer processes (this test
// binary, re-executed) take worker ids from three lease stores, a
// PostgreSQL, a MariaDB and a Redis of the test's own, two processes per
// store, and write through routers of their own, following a catalog, into
// 16 logical shards: 8 in a schema each on two PostgreSQL instances of the
// test's own, and 8 shared in the tables of a monolith (a database of the
// first instance) until splits take them out. They write batches of rows
// with the GORM plugin into three tables (chaos_cs rows are children of
// chaos_as rows, in their parent's shard), and update and delete rows they
// inserted (an update changes the row's sharding key to another key of the
// same shard, or leaves it, and stamps the row; a parent is never deleted).
// Two of the six are laggards: they load the catalog's map every 3s and
// 10s instead of following it, as processes that reload their
// configuration now and then. Meanwhile a driver, from a seed, picks faults
// at random (the first nine are one of each kind):
//
//   - pause: SIGSTOP a writer for 1.3 to 3 times the lease TTL, then SIGCONT;
//   - kill: SIGKILL a writer and start a new one in its place, which prefers
//     the worker id of a writer of its store paused for longer than the TTL;
//   - restart: kill one of the four servers (pg1 holds the catalog, pg2 the
//     SQL leases; both hold shards) and start it again;
//   - freeze: SIGSTOP every process of one of the servers for 1.3 to 3 times
//     the TTL, connections open, then SIGCONT;
//   - clock: set a writer's clock (its generator's, WithClock) back or
//     forward by up to 1.5s;
//   - move: move two logical shards at once, each by a router of its own
//     (two operators), to the other database, while the writers write to
//     every shard; one time in three the first runs in a mover process that
//     is killed at a random moment. A failed move is run again, as an
//     operator would, and the old copies are dropped before the next move;
//   - lock: a move, whose first mover loses its move lock at a stage
//     (created to sealed): the server ends the lock's session
//     (pg_terminate_backend of every session holding an advisory lock on
//     the source, as a reaper or a network reset would), or the mover runs
//     on connections with idle_session_timeout = 1s and is slow at that
//     stage. A second operator, who loaded the catalog, then aborts the move
//     (Unfence) or runs it too, while the first waits for it (or not);
//     both must be refused while the first still moves the shard;
//   - stale: a move, after which its first shard is moved again from the
//     map taken before the move, not reloaded (an old command run again, a
//     process that never heard of the move): mostly without the catalog
//     (c == nil), sometimes cancelled at a stage. It must change nothing:
//     right after it the shard's home must take writes and its old copy
//     refuse them.
//   - split: a batch of the monolith's shards split onto pg1 and pg2, its
//     first run killed or paused at a stage (half the pauses in a process
//     whose sessions the server ends once idle in a transaction for 1s,
//     its lock's among them, as a DBA's reaper would), losing its lock with a rival
//     operator, or cancelled at a stage, then run again or aborted as the
//     guide says (chaos_split_test.go); every other split and roll-back
//     runs first as the tables' owner, chaos_owner, not a superuser (with
//     what the guide's "Roles and privileges" asks of a mover: a refusal
//     for a privilege is a violation), its runs again as the other role,
//     as operators may change roles; at times, while a batch is split,
//     the operator first runs the next one with split.json edited (a
//     table's key changed), which every step must refuse, changing
//     nothing;
//   - rollback: a batch that a split took out, or one shard of it, rolled
//     back into the monolith, its first run killed or paused at a stage,
//     losing its lock with a rival operator, or cancelled at a stage, then
//     run again or aborted as the guide says, and its old copies dropped
//     once every router follows the catalog (chaos_rollback_test.go); a
//     later split takes the shards out again.
//
// The operator repairs only what the documentation tells an operator to:
// a failed move is run again until it is done, and when a mover was killed
// or failed saying "run Unfence" and the shard is then found on its target,
// Unfence lifts the fence left on the new home. Nothing else: at the end,
// once every move is over, every shard's home must take writes and every
// other copy of it refuse them (probeWrites; refusals during the run are
// ordinary).
//
// Some writers of one store share their Owner name, as pods configured with
// the same name would. The checker (chaos_check_test.go) then judges the
// logs of every writer against every row of every table. The seed is
// printed, with the count of every fault and of what the operators met;
// -chaos.seed=N replays the same choices (the timing of a busy machine
// differs from run to run), -chaos.duration=10m runs longer. On a failure
// the logs of the run, the driver's among them, are kept.
func TestChaos(t *testing.T) {
	d := *chaosDurationFlag
	if testing.Short() && d == 30*time.Second {
		d = 10 * time.Second
	}
	seed := *chaosSeedFlag
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000_000
	}
	t.Logf("chaos seed %d, duration %v (replay: go test -run '^TestChaos$' -chaos.seed=%d -chaos.duration=%v .)", seed, d, seed, d)
	fmt.Fprintf(os.Stderr, "TestChaos: seed %d, duration %v\n", seed, d)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))

	c := startChaosCluster(t, true)
	var writers []chaosWriterSpec
	for i := range 6 {
		st := []string{"postgres", "mysql", "redis"}[i%3]
		owner := ""
		if rng.IntN(2) == 0 {
			owner = "pod-" + st // the same name in two processes
		}
		var lag time.Duration
		switch i { // two laggards, whose routers hear of moves late
		case 4:
			lag = 3 * time.Second
		case 5:
			lag = 10 * time.Second
		}
		writers = append(writers, chaosWriterSpec{mode: "lease", store: st, owner: owner, prefer: -1, lag: lag})
	}
	run := c.run(chaosRun{seed: seed, rng: rng, duration: d, writers: writers, faults: true})
	run.report(t)
	if len(run.verdict.Violations) > 0 {
		t.Errorf("chaos seed %d: replay with -chaos.seed=%d -chaos.duration=%v", seed, seed, d)
	}
}

// The checker fails a broken configuration: two processes that write with
// one worker id, without a lease ("static"), or with a lease from a store
// that gives the same worker id to every claimant ("liar"). Both write to
// one shard, so that the shared worker id makes equal IDs.
func TestChaosCheckerCatchesSharedWorker(t *testing.T) {
	c := startChaosCluster(t, false)
	for _, mode := range []string{"static", "liar"} {
		t.Run(mode, func(t *testing.T) {
			w := chaosWriterSpec{mode: mode, store: "postgres", prefer: 0, oneShard: true}
			// Two holders of one worker id collide only when they issue in
			// the same millisecond with the same sequence; on a loaded
			// machine a short run may issue too few IDs for that. So the
			// run grows until the checker has something to find (4, 8,
			// 16 s), and fails if even the longest finds nothing.
			var v chaosVerdict
			var overlap, dups int
			for d := 4 * time.Second; d <= 16*time.Second; d *= 2 {
				c.reset(t)
				run := c.run(chaosRun{seed: 1, rng: rand.New(rand.NewPCG(1, 1)), duration: d,
					writers: []chaosWriterSpec{w, w}})
				v = run.verdict
				t.Logf("%v: %d IDs, %d acknowledged, %d rows; %d violations", d, v.IDs, v.Acked, v.Rows, len(v.Violations))
				overlap, dups = 0, 0
				for _, s := range v.Violations {
					switch {
					case strings.HasPrefix(s, "worker-held-twice"), strings.HasPrefix(s, "token-reused"), strings.HasPrefix(s, "foreign-claim"):
						overlap++ // one worker id, two holders
					case strings.Contains(s, "issued twice"), strings.Contains(s, "duplicate key"):
						dups++
					}
				}
				if overlap > 0 && dups > 0 {
					break
				}
			}
			if overlap == 0 || dups == 0 {
				t.Errorf("the checker found %d overlapping claims and %d duplicates, want both; violations: %q",
					overlap, dups, v.Violations[:min(5, len(v.Violations))])
			}
			if v.Acked == 0 {
				t.Error("nothing was written")
			}
		})
	}
}

// chaosCluster is the servers of one fault test: two PostgreSQL data
// databases (pg1 holds the catalog too), the monolith (a database of
// pg1's server), and the lease stores.
type chaosCluster struct {
	t        *testing.T
	dir      string
	pg1, pg2 *testdb.PGInstance
	maria    *testdb.MariaDB
	redis    *redisInstance
	dbs      []*gorm.DB // the driver's connections to pg1, pg2 and the monolith, as chaosNames
	catalog  *reshard.Catalog
	procs    int // writer processes started, for unique process numbers

	logMu sync.Mutex
	dlog  *os.File // the driver's log: every fault and move, with its time
}

// note appends a line to the driver's log.
func (c *chaosCluster) note(format string, args ...any) {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	fmt.Fprintf(c.dlog, "%s %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// startChaosCluster starts the servers; all adds MariaDB and Redis to the
// PostgreSQL lease store.
func startChaosCluster(t *testing.T, all bool) *chaosCluster {
	c := &chaosCluster{t: t, dir: t.TempDir()}
	var err error
	if c.dlog, err = os.Create(filepath.Join(c.dir, "driver.log")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.dlog.Close() })
	c.pg1 = startPostgresInstance(t)
	c.pg2 = startPostgresInstance(t)
	if all {
		c.maria = startMariaDBInstance(t)
		c.redis = startRedisInstance(t)
	}
	for _, dsn := range []string{c.pg1.DSN(), c.pg2.DSN(), c.monoDSN()} {
		if dsn == c.monoDSN() {
			c.retry(func() error {
				return c.dbs[0].Exec("CREATE DATABASE chaos_mono").Error
			})
		}
		db, err := gorm.Open(postgres.Open(dsn), gormConfig())
		if err != nil {
			t.Fatal(err)
		}
		sqlDB, _ := db.DB()
		sqlDB.SetConnMaxIdleTime(time.Second)
		closeAtEnd(t, db)
		c.dbs = append(c.dbs, db)
	}
	c.catalog = chaosCatalog(c.dbs[0])
	c.reset(t)
	return c
}

// monoDSN is the DSN of the monolith, a database of pg1's server.
func (c *chaosCluster) monoDSN() string {
	return strings.Replace(c.pg1.DSN(), "dbname=postgres", "dbname=chaos_mono", 1)
}

// reset drops the shards, the monolith's tables, the catalog and the
// leases, and sets up the shards afresh, 0-3 on pg1 and 4-7 on pg2, each
// in its schema, and 8-15 shared in the monolith's tables, where a foreign
// key holds every chaos_cs row to its chaos_as parent.
func (c *chaosCluster) reset(t *testing.T) {
	ctx := context.Background()
	for _, db := range c.dbs[:chaosMono] {
		for s := range chaosShards {
			c.retry(func() error { return db.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS chaos_%04d CASCADE", s)).Error })
		}
		c.retry(func() error { return db.Exec("DROP TABLE IF EXISTS chaos_workers").Error })
	}
	c.retry(func() error {
		return c.dbs[chaosMono].Exec("DROP TABLE IF EXISTS chaos_cs, chaos_as, chaos_bs, shardid_split_state, shardid_split_changes CASCADE").Error
	})
	c.retry(func() error {
		return c.dbs[0].Exec("DROP TABLE IF EXISTS chaos_catalog, chaos_catalog_version, chaos_catalog_setup, chaos_catalog_shared").Error
	})
	r := c.router(t)
	if err := r.Migrate(ctx, chaosModels()...); err != nil {
		t.Fatal(err)
	}
	c.retry(func() error {
		return c.dbs[chaosMono].Exec("ALTER TABLE chaos_cs ADD CONSTRAINT chaos_cs_parent FOREIGN KEY (a_id) REFERENCES chaos_as (id)").Error
	})
	if _, err := c.catalog.Save(ctx, r); err != nil {
		t.Fatal(err)
	}
	c.grantOwner()
}

// chaosOwner is the role that owns the monolith's sharded tables, the
// mover that half the splitter and roll-back processes run as: not a
// superuser, with what the guide's "Roles and privileges" asks of a
// mover and nothing more (CREATE on the monolith's schema and on the
// targets' databases, the catalog's rows).
const chaosOwner = "chaos_owner"

// grantOwner creates chaosOwner on both servers, gives it the monolith's
// sharded tables and grants it what a mover needs.
func (c *chaosCluster) grantOwner() {
	for _, db := range c.dbs[:chaosMono] {
		c.retry(func() error {
			return db.Exec(`DO $$ BEGIN CREATE ROLE ` + chaosOwner + ` LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`).Error
		})
		c.retry(func() error { return db.Exec("GRANT CREATE ON DATABASE postgres TO " + chaosOwner).Error })
	}
	c.retry(func() error {
		return c.dbs[0].Exec("GRANT SELECT, INSERT, UPDATE, DELETE ON chaos_catalog, chaos_catalog_version, chaos_catalog_setup, chaos_catalog_shared TO " + chaosOwner).Error
	})
	c.retry(func() error {
		return c.dbs[chaosMono].Exec("GRANT CREATE ON SCHEMA public TO " + chaosOwner + "; ALTER TABLE chaos_as OWNER TO " + chaosOwner +
			"; ALTER TABLE chaos_bs OWNER TO " + chaosOwner + "; ALTER TABLE chaos_cs OWNER TO " + chaosOwner).Error
	})
}

// retry runs f until it succeeds, for up to 30s: right after a restart, the
// pool may still hold broken connections.
func (c *chaosCluster) retry(f func() error) {
	c.t.Helper()
	var err error
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(100 * time.Millisecond) {
		if err = f(); err == nil {
			return
		}
	}
	c.t.Fatal(err)
}

// router returns a new router over the driver's connections, without a
// plugin, on the initial map.
func (c *chaosCluster) router(t testing.TB) *shardid.Router {
	r, err := c.newRouter(c.dbs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// newRouter returns a new router over dbs (as chaosNames), without a
// plugin, on the initial map.
func (c *chaosCluster) newRouter(dbs []*gorm.DB) (*shardid.Router, error) {
	return shardid.NewRouter(shardid.RouterConfig{Databases: dbs, ShardMap: chaosMap(), Layout: chaosLayout})
}

// chaosStores are the lease stores, with the slice of worker ids each
// gives out.
var chaosStores = map[string]struct{ offset, size int }{
	"postgres": {0, 8}, "mysql": {8, 8}, "redis": {16, 8},
}

func (c *chaosCluster) storeAddr(kind string) string {
	switch kind {
	case "postgres":
		return c.pg2.DSN()
	case "mysql":
		return c.maria.DSN("test")
	case "redis":
		return c.redis.Addr()
	}
	c.t.Fatalf("no store %q", kind)
	return ""
}

// chaosWriterSpec describes a writer slot.
type chaosWriterSpec struct {
	mode     string // "lease", "static" or "liar"
	store    string
	owner    string        // "" for the default, unique per process
	prefer   int           // worker id to prefer (the worker id itself in static mode)
	oneShard bool          // write to shard 0 only
	lag      time.Duration // a laggard: loads the catalog's map this often, instead of following it
}

// chaosProc is a running writer process.
type chaosProc struct {
	id       int
	spec     chaosWriterSpec
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	done     chan struct{}
	worker   atomic.Int64 // -1 until the process says
	paused   bool
	pausedAt time.Time
	resume   time.Time // when a paused process gets SIGCONT
	offset   time.Duration
	killed   bool  // by the driver
	stopped  bool  // told to stop (its standard input closed)
	exitErr  error // set before done is closed
	started  time.Time
}

func (c *chaosCluster) startWriter(spec chaosWriterSpec, seed int64) *chaosProc {
	c.procs++
	p := &chaosProc{id: c.procs, spec: spec, done: make(chan struct{}), started: time.Now()}
	p.worker.Store(-1)
	st := chaosStores[spec.store]
	cmd := exec.Command(os.Args[0], "-test.run=^TestChaosHelper$", "-test.v=false")
	cmd.Env = append(os.Environ(),
		"SHARDID_CHAOS_MODE="+spec.mode,
		"SHARDID_CHAOS_PROC="+strconv.Itoa(p.id),
		"SHARDID_CHAOS_LOG="+filepath.Join(c.dir, fmt.Sprintf("writer%03d.log", p.id)),
		"SHARDID_CHAOS_SEED="+strconv.FormatInt(seed, 10),
		"SHARDID_CHAOS_STORE="+spec.store,
		"SHARDID_CHAOS_STORE_ADDR="+c.storeAddr(spec.store),
		"SHARDID_CHAOS_OFFSET="+strconv.Itoa(st.offset),
		"SHARDID_CHAOS_GROUP="+strconv.Itoa(st.size),
		"SHARDID_CHAOS_OWNER="+spec.owner,
		"SHARDID_CHAOS_PREFER="+strconv.Itoa(spec.prefer),
		"SHARDID_CHAOS_ONE_SHARD="+strconv.FormatBool(spec.oneShard),
		"SHARDID_CHAOS_FOLLOW_MS="+strconv.FormatInt(spec.lag.Milliseconds(), 10),
	)
	cmd.Env = append(cmd.Env, c.chaosEnvDSNs()...)
	cmd.Stderr = os.Stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		c.t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	p.cmd = cmd
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var w int
			if _, err := fmt.Sscanf(sc.Text(), "worker %d", &w); err == nil {
				p.worker.Store(int64(w))
			}
		}
		p.exitErr = cmd.Wait()
		close(p.done)
	}()
	return p
}

// chaosRun is one run of writers, with or without faults.
type chaosRun struct {
	dir      string // the logs
	seed     int64
	rng      *rand.Rand
	duration time.Duration
	writers  []chaosWriterSpec
	faults   bool

	faultCounts map[string]int
	moves       []string
	started     int
	verdict     chaosVerdict
	history     chaosHistory
	waitTook    time.Duration // from the end of the faults to the end of the last move or split
	stopTook    time.Duration // then until the writers stopped (and the split's clean-up)
	checkTook   time.Duration
}

// run starts the writers, injects faults for r.duration, stops the writers
// and judges what they did.
func (c *chaosCluster) run(r chaosRun) *chaosRun {
	t := c.t
	r.faultCounts = map[string]int{}
	r.dir = c.dir
	c.note("run: seed %d, %v, %d writers", r.seed, r.duration, len(r.writers))
	first := c.procs
	procs := make([]*chaosProc, len(r.writers))
	var all []*chaosProc // every writer started, replaced ones too
	for i, w := range r.writers {
		procs[i] = c.startWriter(w, r.rng.Int64())
		all = append(all, procs[i])
	}
	t.Cleanup(func() { // on a failure midway
		for _, p := range procs {
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.cmd.Process.Kill()
		}
	})

	kinds := []string{"pause", "kill", "restart", "freeze", "clock", "move", "stale", "lock", "split", "rollback"}
	if *chaosFaultsFlag != "" {
		kinds = strings.Split(*chaosFaultsFlag, ",")
	}
	servers := []string{"pg1", "pg2"}
	if c.maria != nil {
		servers = append(servers, "mariadb", "redis")
	}
	frozen := map[string]time.Time{} // server → when it gets SIGCONT
	frozenPids := map[string][]int{}
	thaw := func(s string) {
		for _, pid := range frozenPids[s] {
			syscall.Kill(pid, syscall.SIGCONT)
		}
		delete(frozen, s)
		delete(frozenPids, s)
		c.note("SIGCONT %s", s)
	}
	var plan []string // the first faults: every kind once, in a random order
	for _, i := range r.rng.Perm(len(kinds)) {
		plan = append(plan, kinds[i])
	}
	var (
		moving      sync.WaitGroup
		movesBusy   atomic.Bool
		rollingBack atomic.Bool // a roll-back runs: no move begins
		movesMu     sync.Mutex
		leftovers   = map[int]string{} // shard → database holding its old copy
		splitting   = map[int]bool{}   // the shards of a split batch under way: no move takes them
		moveCounts  = map[string]int{} // what the operators met, for the fault counts
		late        [][2]string        // violations found during the run: kind, message
	)
	count := func(k string) {
		movesMu.Lock()
		moveCounts[k]++
		movesMu.Unlock()
	}
	// The operator of the splits: its plan's batches of 2 to 4 shards, onto
	// pg1 and pg2 in an order of the seed.
	targets := []string{"pg1", "pg2"}
	if r.rng.IntN(2) == 0 {
		targets = []string{"pg2", "pg1"}
	}
	splits := &splitDriver{left: -1, copies: map[int]splitCopy{}, sp: &chaosSplitter{c: c, batch: 2 + r.rng.IntN(3), targets: targets, count: count,
		own: rand.New(rand.NewPCG(uint64(r.seed), 0x6f776e))}}
	splits.fail = func(kind, msg string) {
		movesMu.Lock()
		late = append(late, [2]string{kind, msg})
		movesMu.Unlock()
	}
	splits.sp.fail = splits.fail
	restarts := map[int]time.Time{} // slot → when its killed writer is replaced
	end := time.Now().Add(r.duration)
	next := time.Now().Add(time.Second)
	for now := time.Now(); now.Before(end); now = time.Now() {
		for i, p := range procs {
			if p.paused && now.After(p.resume) {
				p.cmd.Process.Signal(syscall.SIGCONT)
				p.paused = false
				c.note("SIGCONT writer %d", p.id)
			}
			if at, ok := restarts[i]; ok && now.After(at) {
				delete(restarts, i)
				spec := r.writers[i]
				spec.prefer = int(p.worker.Load())
				for _, q := range procs { // take over a paused writer's worker id
					if q.paused && q.spec.store == spec.store && q.worker.Load() >= 0 && now.Sub(q.pausedAt) > chaosTTL {
						spec.prefer = int(q.worker.Load())
					}
				}
				procs[i] = c.startWriter(spec, r.rng.Int64())
				all = append(all, procs[i])
				c.note("started writer %d in slot %d, preferring worker %d", procs[i].id, i, spec.prefer)
				r.started++
			}
		}
		for s, at := range frozen {
			if now.After(at) {
				thaw(s)
			}
		}
		if !r.faults || now.Before(next) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		next = now.Add(time.Duration(300+r.rng.IntN(1700)) * time.Millisecond)
		kind := kinds[r.rng.IntN(len(kinds))]
		if len(plan) > 0 {
			kind, plan = plan[0], plan[1:]
		}
		if kind == "rollback" && !splits.canRollback() {
			kind = "split" // nothing to roll back yet
		}
		// A roll-back and the moves do not overlap: the moves take
		// shards in schemas, a roll-back's among them.
		if (kind == "move" || kind == "stale" || kind == "lock") && (movesBusy.Load() || rollingBack.Load()) ||
			kind == "split" && (splits.busy.Load() || splits.exhausted() || end.Sub(now) < chaosSplitTail) ||
			kind == "rollback" && (splits.busy.Load() || movesBusy.Load() || end.Sub(now) < chaosSplitTail) {
			kind = "clock"
		}
		var running []int
		for i, p := range procs {
			if _, dead := restarts[i]; !dead && !p.paused {
				running = append(running, i)
			}
		}
		if (kind == "pause" || kind == "kill" || kind == "clock") && len(running) == 0 {
			kind = "restart"
		}
		r.faultCounts[kind]++
		c.note("fault %s", kind)
		switch kind {
		case "pause":
			p := procs[running[r.rng.IntN(len(running))]]
			p.cmd.Process.Signal(syscall.SIGSTOP)
			p.paused, p.pausedAt = true, now
			c.note("SIGSTOP writer %d (worker %d)", p.id, p.worker.Load())
			p.resume = now.Add(chaosTTL*13/10 + time.Duration(r.rng.Int64N(int64(chaosTTL)*17/10)))
		case "kill":
			i := running[r.rng.IntN(len(running))]
			procs[i].killed = true
			c.note("SIGKILL writer %d (worker %d)", procs[i].id, procs[i].worker.Load())
			procs[i].cmd.Process.Kill()
			<-procs[i].done
			restarts[i] = now.Add(time.Duration(r.rng.IntN(1000)) * time.Millisecond)
		case "clock":
			p := procs[running[r.rng.IntN(len(running))]]
			p.offset = time.Duration(r.rng.Int64N(int64(3*time.Second))) - 1500*time.Millisecond
			fmt.Fprintf(p.stdin, "clock %d\n", int64(p.offset))
			c.note("clock of writer %d set to %v", p.id, p.offset)
		case "freeze":
			s := servers[r.rng.IntN(len(servers))]
			if _, ok := frozen[s]; ok {
				break
			}
			r.faultCounts["freeze "+s]++
			frozenPids[s] = c.freeze(s)
			c.note("SIGSTOP %s (pids %v)", s, frozenPids[s])
			frozen[s] = now.Add(chaosTTL*13/10 + time.Duration(r.rng.Int64N(int64(chaosTTL)*17/10)))
		case "restart":
			s := servers[r.rng.IntN(len(servers))]
			if _, ok := frozen[s]; ok {
				thaw(s) // a frozen server cannot be stopped
			}
			r.faultCounts["restart "+s]++
			c.note("restarting %s", s)
			down := time.Duration(100+r.rng.IntN(1400)) * time.Millisecond
			switch s {
			case "pg1":
				c.pg1.Stop()
				time.Sleep(down)
				c.pg1.Start()
			case "pg2":
				c.pg2.Stop()
				time.Sleep(down)
				c.pg2.Start()
			case "mariadb":
				c.maria.Stop()
				time.Sleep(down)
				c.maria.Start()
			case "redis":
				c.redis.Stop()
				time.Sleep(down)
				c.redis.Start()
			}
			c.note("restarted %s", s)
		case "split":
			// The choices now, from the seed; the work in the background.
			p := chooseSplit(r.rng, r.faultCounts)
			splits.busy.Store(true)
			moving.Add(1)
			go func() {
				defer moving.Done()
				defer splits.busy.Store(false)
				msgs := splits.run(p, &movesMu, splitting)
				movesMu.Lock()
				r.moves = append(r.moves, msgs...)
				movesMu.Unlock()
			}()
		case "rollback":
			// The choices now, from the seed; the work in the background.
			p := chooseSplitFault(r.rng, r.faultCounts, "rollback", chaosRollbackStages)
			pick, whole := r.rng.IntN(1000), r.rng.IntN(2) == 0
			if whole {
				r.faultCounts["rollback of a batch"]++
			} else {
				r.faultCounts["rollback of a shard"]++
			}
			splits.busy.Store(true)
			rollingBack.Store(true)
			moving.Add(1)
			go func() {
				defer moving.Done()
				defer rollingBack.Store(false)
				defer splits.busy.Store(false)
				msgs := splits.rollback(p, pick, whole, &movesMu, splitting)
				movesMu.Lock()
				r.moves = append(r.moves, msgs...)
				movesMu.Unlock()
			}()
		case "move", "lock", "stale":
			// The choices now, from the seed; the work in the background,
			// so that the driver never waits on a frozen server.
			order := r.rng.Perm(chaosShards)
			var plan chaosMovePlan
			if kind == "lock" {
				// The first mover loses its move lock at a stage (its
				// session terminated, or ended by idle_session_timeout),
				// and a second operator, who loaded the catalog, then
				// aborts the move (Unfence) or runs it too.
				plan.lose = []string{"terminate", "idle"}[r.rng.IntN(2)]
				plan.loseAt = []string{"created", "copied", "fenced", "verified", "sealed"}[r.rng.IntN(5)]
				plan.rival = []string{"unfence", "move"}[r.rng.IntN(2)]
				if w := r.rng.IntN(4); w > 0 {
					plan.rivalWait = time.Duration(w) * 500 * time.Millisecond
				}
				r.faultCounts["lock "+plan.lose]++
				r.faultCounts["rival "+plan.rival]++
			} else if r.rng.IntN(3) == 0 {
				plan.killAfter = time.Duration(200+r.rng.IntN(4000)) * time.Millisecond
				r.faultCounts["move killed"]++
			}
			// stale: once the moves are done, an operator runs the first
			// again from the map taken before it, not reloaded (an old
			// command run again, a process that never heard of the move):
			// mostly without the catalog (c == nil); now and then cancelled
			// at a stage.
			staleCatalog := r.rng.IntN(4) == 0
			staleCancel := []string{"", "", "created", "copied", "fenced", "verified"}[r.rng.IntN(6)]
			if kind == "stale" {
				plan = chaosMovePlan{}
				if !staleCatalog {
					r.faultCounts["stale without catalog"]++
				}
				if staleCancel != "" {
					r.faultCounts["stale cancelled at "+staleCancel]++
				}
			}
			movesBusy.Store(true)
			moving.Add(1)
			go func() {
				defer moving.Done()
				defer movesBusy.Store(false)
				movesMu.Lock()
				c.dropLeftovers(leftovers)
				movesMu.Unlock()
				final, err := c.loadMap()
				var free []int // shards in schemas, with no old copy, and not in a split under way
				movesMu.Lock()
				for _, s := range order {
					if _, ok := leftovers[s]; !ok && err == nil && !final[s].Shared && !splitting[s] {
						free = append(free, s)
					}
				}
				movesMu.Unlock()
				if len(free) < 2 || err != nil {
					movesMu.Lock()
					r.moves = append(r.moves, fmt.Sprintf("skipped: %d shards free to move, loading the map: %v", len(free), err))
					movesMu.Unlock()
					return
				}
				var pair sync.WaitGroup
				for n, shard := range free[:2] {
					to := "pg1"
					if final[shard].DB == 0 {
						to = "pg2"
					}
					p := plan
					if n > 0 {
						p = chaosMovePlan{} // only the first of the two is killed or loses its lock
					}
					pair.Add(1)
					go func() {
						defer pair.Done()
						msgs, from, ok := c.move(shard, to, p, count)
						movesMu.Lock()
						r.moves = append(r.moves, msgs...)
						if ok {
							leftovers[shard] = from
						}
						movesMu.Unlock()
					}()
				}
				pair.Wait()
				if kind == "stale" {
					shard := free[0]
					movesMu.Lock()
					from, ok := leftovers[shard]
					movesMu.Unlock()
					msg := fmt.Sprintf("stale move of shard %d: skipped, its move failed", shard)
					if ok {
						msg = c.staleMove(shard, final, from, staleCatalog, staleCancel, count, func(kind, msg string) {
							movesMu.Lock()
							late = append(late, [2]string{kind, msg})
							movesMu.Unlock()
						})
					}
					movesMu.Lock()
					r.moves = append(r.moves, msg)
					movesMu.Unlock()
				}
			}()
		}
	}
	for s := range frozen {
		thaw(s)
	}
	// Paused writers resume before the moves are waited for: a writer
	// stopped inside a transaction holds its table's lock, which a move's
	// fence (or the drop of its triggers) waits for.
	for i, p := range procs {
		if _, dead := restarts[i]; !dead && p.paused {
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.paused = false
			c.note("SIGCONT writer %d", p.id)
		}
	}
	faultsEnd := time.Now()
	moving.Wait()
	r.waitTook = time.Since(faultsEnd)

	// The end: every writer stops cleanly; then the checker.
	for i, p := range procs {
		if _, dead := restarts[i]; dead {
			continue
		}
		p.stopped = true
		p.stdin.Close()
	}
	for i, p := range procs {
		if _, dead := restarts[i]; dead {
			continue
		}
		select {
		case <-p.done:
		case <-time.After(60 * time.Second):
			t.Errorf("writer %d did not stop within 60s of its standard input closing; killed", p.id)
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	r.started += len(r.writers)
	// The writers are gone: the operator finishes the monolith's clean-up,
	// if the last batch could not (CleanSplit).
	if m := splits.sp.clean(); m != "" {
		c.note("%s", m)
		r.moves = append(r.moves, m)
	}
	for k, n := range moveCounts {
		r.faultCounts[k] += n
	}
	r.stopTook = time.Since(faultsEnd) - r.waitTook
	// A writer that died by itself (a panic, a fatal error) is a failure:
	// only the driver kills them.
	var died []string
	for _, p := range all {
		select {
		case <-p.done:
			if !p.killed && (!p.stopped || p.exitErr != nil) {
				died = append(died, fmt.Sprintf("writer process %d exited by itself (%v); its standard error is above", p.id, p.exitErr))
			}
		default:
		}
	}

	start := time.Now()
	r.history.Other = map[string]int{}
	for id := first + 1; id <= c.procs; id++ {
		err := readChaosLog(filepath.Join(c.dir, fmt.Sprintf("writer%03d.log", id)), &r.history)
		if errors.Is(err, fs.ErrNotExist) {
			r.history.Other["killed before its log"]++ // (a writer that exited by itself is reported below)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	final, rows := c.snapshot(t)
	r.verdict = chaosCheck(r.history, rows, final)
	for _, v := range late {
		r.verdict.fail(v[0], "%s", v[1])
	}
	for _, msg := range died {
		r.verdict.fail("writer-died", "%s", msg)
	}
	c.probeWrites(&r, final)
	c.readBack(t, &r, final, rows)
	r.checkTook = time.Since(start)
	return &r
}

// freeze stops every process of a server with SIGSTOP and returns their
// ids, for SIGCONT later: the server hangs, with its connections open, as
// under a long GC pause, swapping, or a VM stalled by its host.
func (c *chaosCluster) freeze(server string) []int {
	var pid int
	switch server {
	case "redis":
		pid = c.redis.cmd.Process.Pid
	case "mariadb":
		// The instance's own process, found by the port only it listens on.
		port := c.maria.DSN("")[strings.Index(c.maria.DSN(""), ":")+1:]
		pid = chaosPid("mariadbd", "--port="+port[:strings.IndexByte(port, ')')]+" ")
	case "pg1", "pg2":
		pg := c.pg1
		if server == "pg2" {
			pg = c.pg2
		}
		_, port, _ := strings.Cut(pg.DSN(), "port=")
		pid = chaosPid("postgres", "-p "+strings.Fields(port)[0]+" ") // the postmaster
	}
	if pid <= 0 || syscall.Kill(pid, syscall.SIGSTOP) != nil {
		return nil
	}
	// Then its children (PostgreSQL's backends), which the stopped
	// postmaster can no longer add to.
	pids := []int{pid}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after ")".
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) && syscall.Kill(child, syscall.SIGSTOP) == nil {
			pids = append(pids, child)
		}
	}
	return pids
}

// chaosPid returns the id of the process whose command line holds every one
// of parts, or 0.
func chaosPid(parts ...string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		line := strings.ReplaceAll(string(b), "\x00", " ")
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return pid
		}
	}
	return 0
}

// loadMap returns the catalog's placements.
func (c *chaosCluster) loadMap() ([]shardmap.Placement, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := chaosMap()
	if _, err := c.catalog.LoadMap(ctx, m); err != nil {
		return nil, err
	}
	return m.Load().Placements(), nil
}

// chaosMovePlan is what the driver chose for a move, from the seed.
type chaosMovePlan struct {
	killAfter time.Duration // first run in a mover process killed after this long
	lose      string        // "terminate" or "idle": how the first run loses its move lock ("": it does not)
	loseAt    string        // the stage at which it loses it
	rival     string        // what a second operator then does: "unfence" or "move"
	rivalWait time.Duration // how long the first run waits for the rival (0: until it is done)
}

// move moves shard to the database named to, as an operator would: with a
// router of its own loaded from the catalog, run again after a failure
// until it is done (at most 6 times). With plan.killAfter, the first run is
// a mover process of its own, killed after that long; with plan.lose, the
// first run loses its move lock at plan.loseAt and a rival operator acts.
// It returns what happened, the database the shard left, and whether it
// got there.
//
// The operator does what the documentation says, and no more: a failed
// move is run again; when the shard is then found on its target already
// after a mover was killed (it died after its flip), or after a run that
// failed saying "run Unfence" (it could not lift the fence on the new
// home), Unfence lifts the fence left on the shard's new home (MoveShard's
// documentation: the new home refuses writes until then). Nothing else is
// repaired: a shard left refusing writes otherwise is a violation
// (probeWrites).
func (c *chaosCluster) move(shard int, to string, plan chaosMovePlan, count func(string)) ([]string, string, bool) {
	var msgs []string
	c.note("move of shard %d to %s begins", shard, to)
	if plan.killAfter > 0 {
		msgs = append(msgs, c.killedMove(shard, to, plan.killAfter))
		c.note("move: %s", msgs[len(msgs)-1])
	}
	told := plan.killAfter > 0 // to run Unfence if the shard is found moved
	for try := range 6 {
		p := chaosMovePlan{}
		if try == 0 {
			p = plan
		}
		res, from, ok, already := c.moveOnce(shard, to, p, count)
		if try > 0 || plan.killAfter > 0 {
			res[0] += fmt.Sprintf(" (run %d)", try+1)
		}
		for _, m := range res {
			c.note("move: %s", m)
		}
		msgs = append(msgs, res...)
		told = told || strings.Contains(res[0], "run Unfence")
		if ok {
			if already && told {
				m := c.recoverUnfence(shard)
				count("recovery unfence")
				c.note("move: %s", m)
				msgs = append(msgs, m)
			}
			return msgs, from, true
		}
		time.Sleep(time.Second)
	}
	return msgs, "", false
}

// recoverUnfence runs Unfence of shard on its home, as MoveShard's
// documentation tells an operator to after a mover died past its flip,
// trying again while it fails (a move of the shard under way, say).
func (c *chaosCluster) recoverUnfence(shard int) string {
	var err error
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var r *shardid.Router
		if r, err = c.catalogRouter(ctx, c.dbs); err == nil {
			err = reshard.Unfence(ctx, r, shard, chaosModels())
		}
		cancel()
		if err == nil {
			return fmt.Sprintf("shard %d: Unfence, as the documentation says after a mover died or failed past its flip: done", shard)
		}
		time.Sleep(time.Second)
	}
	return fmt.Sprintf("shard %d: Unfence, as the documentation says after a mover died or failed past its flip, failed: %v", shard, err)
}

// catalogRouter returns a router over dbs (as chaosNames) with the
// catalog's map, which shards are shared too.
func (c *chaosCluster) catalogRouter(ctx context.Context, dbs []*gorm.DB) (*shardid.Router, error) {
	r, err := c.newRouter(dbs)
	if err != nil {
		return nil, err
	}
	if _, err := c.catalog.LoadMap(ctx, r.ShardMap()); err != nil {
		return nil, fmt.Errorf("loading the catalog: %w", err)
	}
	return r, nil
}

// killedMove runs a move in a mover process and kills it after d.
func (c *chaosCluster) killedMove(shard int, to string, d time.Duration) string {
	cmd := exec.Command(os.Args[0], "-test.run=^TestChaosHelper$", "-test.v=false")
	cmd.Env = append(os.Environ(), "SHARDID_CHAOS_MODE=mover", "SHARDID_CHAOS_SHARD="+strconv.Itoa(shard),
		"SHARDID_CHAOS_TARGET="+to)
	cmd.Env = append(cmd.Env, c.chaosEnvDSNs()...)
	cmd.Stderr = os.Stderr
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		return fmt.Sprintf("shard %d: starting a mover: %v", shard, err)
	}
	timer := time.AfterFunc(d, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	timer.Stop()
	if err != nil {
		return fmt.Sprintf("shard %d →%s: mover process killed after %v (%s)", shard, to, d, strings.TrimSpace(out.String()))
	}
	return fmt.Sprintf("shard %d →%s: mover process finished before its kill: %s", shard, to, strings.TrimSpace(out.String()))
}

// moveOnce runs one move of shard to the database named to, as p says.
// It returns what happened, the database the shard left, whether it got
// there, and whether it was there already.
func (c *chaosCluster) moveOnce(shard int, to string, p chaosMovePlan, count func(string)) ([]string, string, bool, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dbs := c.dbs
	if p.lose == "idle" {
		// The mover's own connections, which the server ends after a
		// second idle (idle_session_timeout).
		var own []*gorm.DB
		for _, dsn := range []string{c.pg1.DSN(), c.pg2.DSN(), c.monoDSN()} {
			db, err := gorm.Open(postgres.Open(dsn+" idle_session_timeout=1000"), gormConfig())
			if err != nil {
				return []string{fmt.Sprintf("shard %d: %v", shard, err)}, "", false, false
			}
			sqlDB, _ := db.DB()
			sqlDB.SetConnMaxIdleTime(300 * time.Millisecond)
			defer sqlDB.Close()
			own = append(own, db)
		}
		dbs = own
	}
	r, err := c.catalogRouter(ctx, dbs)
	if err != nil {
		return []string{fmt.Sprintf("shard %d: %v", shard, err)}, "", false, false
	}
	from := r.DatabaseName(shard)
	if from == to { // a killed mover got it there
		other := "pg1"
		if to == "pg1" {
			other = "pg2"
		}
		return []string{fmt.Sprintf("shard %d is on %s already", shard, to)}, other, true, true
	}
	var (
		onStage  func(string)
		rivalMsg = make(chan string, 1)
		rivalRan bool
		msgs     = []string{""}
	)
	if p.lose != "" {
		src := slices.Index(r.Names(), from)
		onStage = func(stage string) {
			if stage != p.loseAt || rivalRan {
				return
			}
			rivalRan = true
			switch p.lose {
			case "terminate":
				n := c.terminateLockHolders(src)
				if n == 0 {
					count("lock not found")
				}
				c.note("shard %d at %s: terminated %d sessions holding advisory locks on %s", shard, stage, n, from)
			case "idle":
				time.Sleep(1500 * time.Millisecond) // the lock's session idles past the timeout, if it idles
				c.note("shard %d at %s: the mover slept past idle_session_timeout", shard, stage)
			}
			go func() { rivalMsg <- c.rival(shard, to, p.rival) }()
			if p.rivalWait == 0 {
				msgs = append(msgs, <-rivalMsg)
				return
			}
			select {
			case m := <-rivalMsg:
				msgs = append(msgs, m)
			case <-time.After(p.rivalWait):
			}
		}
	}
	res, err := chaosMove(ctx, r, c.catalog, shard, to, onStage)
	if rivalRan && len(msgs) == 1 {
		msgs = append(msgs, <-rivalMsg)
	}
	lost := ""
	if p.lose != "" {
		lost = fmt.Sprintf(" (its lock lost by %s at %s, rival %s)", p.lose, p.loseAt, p.rival)
	}
	if err != nil {
		msgs[0] = fmt.Sprintf("shard %d %s→%s failed%s: %v", shard, from, to, lost, err)
		return msgs, "", false, false
	}
	rows := int64(0)
	for _, tc := range res.Tables {
		rows += tc.Rows
	}
	msgs[0] = fmt.Sprintf("shard %d %s→%s%s: %d rows, fenced %v, catalog v%d", shard, from, to, lost, rows, res.Fenced.Round(time.Millisecond), res.Version)
	return msgs, from, true, false
}

// rival is a second operator, with a router loaded from the catalog, who
// aborts a move of shard (Unfence) or runs it too, once, while the first
// mover may have lost its move lock. Either must be refused
// (ErrMoveInProgress) while a move runs.
func (c *chaosCluster) rival(shard int, to, kind string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := c.catalogRouter(ctx, c.dbs)
	if err != nil {
		return fmt.Sprintf("rival %s of shard %d: %v", kind, shard, err)
	}
	switch {
	case kind == "unfence":
		err = reshard.Unfence(ctx, r, shard, chaosModels())
	case r.DatabaseName(shard) == to:
		return fmt.Sprintf("rival move of shard %d: on %s already", shard, to)
	default:
		_, err = chaosMove(ctx, r, c.catalog, shard, to, nil)
	}
	if err != nil {
		return fmt.Sprintf("rival %s of shard %d: %v", kind, shard, err)
	}
	return fmt.Sprintf("rival %s of shard %d: done (a move was under way: its lock was lost)", kind, shard)
}

// terminateLockHolders ends every session but the caller's that holds an
// advisory lock on the database of index d, as a reaper of idle sessions,
// a failover of a pooler or a network reset would end the sessions of a
// move's lock, and returns how many it ended.
func (c *chaosCluster) terminateLockHolders(d int) int {
	var n int
	c.dbs[d].Raw(`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM
		(SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()) l`).Scan(&n)
	return n
}

// staleMove runs a move of shard from the database named from, the shard's
// old copy, to its home, by a router on m, a map from before the shard's
// move (not reloaded): an operator who runs an old command again, or a
// process that never heard of the move. Without withCatalog, with no
// catalog (c == nil). With cancelAt, it is cancelled at that stage. It must
// change nothing: the checker finds the rows it lost; right after it, the
// shard's home must take writes and its old copy refuse them (fail is
// told otherwise). Nothing is repaired after it, whatever it says.
func (c *chaosCluster) staleMove(shard int, m []shardmap.Placement, from string, withCatalog bool, cancelAt string, count func(string), fail func(kind, msg string)) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := c.newRouter(c.dbs)
	if err == nil {
		err = r.ShardMap().SetPlacements(m)
	}
	if err != nil {
		return fmt.Sprintf("stale move of shard %d: %v", shard, err)
	}
	home, err := c.catalogRouter(ctx, c.dbs)
	if err != nil {
		return fmt.Sprintf("stale move of shard %d: %v", shard, err)
	}
	to := home.DatabaseName(shard)
	if r.DatabaseName(shard) != from || to == from {
		return fmt.Sprintf("stale move of shard %d: skipped, the catalog names %s, the old map %s, the old copy is on %s", shard, to, r.DatabaseName(shard), from)
	}
	var cat *reshard.Catalog
	if withCatalog {
		cat = c.catalog
	}
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	_, err = chaosMove(mctx, r, cat, shard, to, func(stage string) {
		if stage == cancelAt {
			mcancel()
		}
	})
	how := fmt.Sprintf("stale move of shard %d %s→%s (catalog %v, cancelled at %q)", shard, from, to, withCatalog, cancelAt)
	old, cur := slices.Index(r.Names(), from), slices.Index(r.Names(), to)
	for _, table := range chaosTables {
		if exists, refused, err := c.probe(old, shard, table); err == nil && exists && !refused {
			fail("stray-copy-writable", fmt.Sprintf("after the %s: the old copy of shard %d on %s takes writes to %s", how, shard, from, table))
		}
		if exists, refused, err := c.probe(cur, shard, table); err == nil && exists && refused {
			fail("shard-refuses-writes", fmt.Sprintf("after the %s: shard %d on %s, its home, refuses writes to %s", how, shard, to, table))
		}
	}
	if err == nil {
		count("stale move succeeded")
		return how + ": succeeded"
	}
	c.note("%s: %v", how, err)
	return how + ": " + err.Error()
}

// chaosModels are the shard's tables, for the moves.
func chaosModels() []any { return []any{&ChaosA{}, &ChaosB{}, &ChaosC{}} }

func chaosMove(ctx context.Context, r *shardid.Router, c *reshard.Catalog, shard int, to string, onStage func(string)) (reshard.MoveResult, error) {
	return reshard.MoveShard(ctx, r, c, shard, to, reshard.MoveOptions{Models: chaosModels(),
		Batch: 1000, FenceFor: 30 * time.Second, OnStage: onStage})
}

// dropLeftovers drops the old copies of moved shards that the catalog no
// longer names, so that a shard can move back.
func (c *chaosCluster) dropLeftovers(leftovers map[int]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.catalogRouter(ctx, c.dbs)
	if err != nil {
		return
	}
	for shard, from := range leftovers {
		if r.DatabaseName(shard) == from {
			continue // the catalog names it (a move was undone): keep it
		}
		if err := reshard.DropShardCopy(ctx, r, shard, from); err == nil {
			delete(leftovers, shard)
		}
	}
}

// snapshot returns the catalog's final map and every row of every shard
// table on every database: in the shards' schemas on pg1 and pg2, and in
// the monolith's tables, where a row's shard is its key's (its parent's
// key's for a child; -1 for a child whose parent is missing).
func (c *chaosCluster) snapshot(t *testing.T) ([]int, []chaosRow) {
	ctx := context.Background()
	r := c.router(t)
	var final []int
	c.retry(func() error {
		m, _, err := c.catalog.Load(ctx, r)
		final = m
		return err
	})
	type stored struct {
		ID      shardid.ID
		Shard   int
		UserID  int64
		Proc    int
		Attempt int64
		Idx     int
		Upd     int64
	}
	var rows []chaosRow
	add := func(d int, table string, q string) {
		var got []stored
		c.retry(func() error {
			got = got[:0]
			return c.dbs[d].Raw(q).Scan(&got).Error
		})
		for _, g := range got {
			rows = append(rows, chaosRow{DB: d, Shard: g.Shard, Table: table, ID: g.ID, Key: g.UserID, Proc: g.Proc, Attempt: g.Attempt, Idx: g.Idx, Upd: g.Upd})
		}
	}
	for d := range c.dbs[:chaosMono] {
		var have []struct{ TableSchema, TableName string }
		c.retry(func() error {
			return c.dbs[d].Raw("SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema LIKE 'chaos\\_%'").Scan(&have).Error
		})
		for s := range chaosShards {
			for _, table := range chaosTables {
				if slices.Contains(have, struct{ TableSchema, TableName string }{fmt.Sprintf("chaos_%04d", s), table}) {
					add(d, table, fmt.Sprintf("SELECT id, %d AS shard, %s AS user_id, proc, attempt, idx, upd FROM chaos_%04d.%s", s, chaosKeyColumn(table), s, table))
				}
			}
		}
	}
	for _, table := range chaosTables {
		q := fmt.Sprintf("SELECT id, user_id %% %d AS shard, user_id, proc, attempt, idx, upd FROM %s", chaosShards, table)
		if table == "chaos_cs" {
			q = fmt.Sprintf("SELECT x.id, coalesce(p.user_id %% %d, -1) AS shard, x.a_id AS user_id, x.proc, x.attempt, x.idx, x.upd FROM chaos_cs x LEFT JOIN chaos_as p ON p.id = x.a_id", chaosShards)
		}
		add(chaosMono, table, q)
	}
	return final, rows
}

// probeWrites checks the end state of the shards: once every move and
// split has ended (and the operator did what the documentation asks, see
// move and splitBatch), the home of every shard, by the catalog, takes
// writes, and every other copy of it (an old copy, a failed move's or
// split's target, the rows of a split shard in the monolith) refuses
// them. It tries a write of a row in each table, in a transaction it rolls
// back.
//
// Refusals during the run are ordinary (a move's fence, a router behind
// the catalog); a shard that still refuses writes at the end is a shard
// taken out of service: a violation, "shard-refuses-writes". The fences
// that end by themselves, the temporary fence of a mover that died before
// it sealed (FenceFor, 30s for a move, chaosSplitFenceFor for a split), are
// waited out. A copy the catalog does not name that takes writes is a
// violation too, "stray-copy-writable": a router behind the catalog would
// write there, be acknowledged, and the write would be lost.
func (c *chaosCluster) probeWrites(r *chaosRun, final []int) {
	deadline := time.Now().Add(32 * time.Second)
	for first := true; ; first = false {
		// The probes of each database at once: they are most of the check's
		// time.
		type result struct {
			s, d            int
			table           string
			exists, refused bool
			err             error
		}
		results := make([][]result, len(c.dbs))
		var wg sync.WaitGroup
		for d := range c.dbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for s := range chaosShards {
					if !first && d != final[s] {
						continue // other copies are judged once
					}
					for _, table := range chaosTables {
						exists, refused, err := c.probe(d, s, table)
						results[d] = append(results[d], result{s, d, table, exists, refused, err})
					}
				}
			}()
		}
		wg.Wait()
		var refusing []string
		for _, rs := range results {
			for _, x := range rs {
				switch {
				case x.err != nil:
					r.verdict.fail("probe", "%s shard %d %s: %v", chaosNames[x.d], x.s, x.table, x.err)
				case !x.exists:
				case x.d == final[x.s] && x.refused:
					refusing = append(refusing, fmt.Sprintf("shard %d on %s, its home, refuses writes to %s", x.s, chaosNames[x.d], x.table))
				case x.d != final[x.s] && !x.refused:
					r.verdict.fail("stray-copy-writable", "the copy of shard %d on %s, which the catalog does not name (it names %s), takes writes to %s",
						x.s, chaosNames[x.d], chaosNames[final[x.s]], x.table)
				}
			}
		}
		if len(refusing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, m := range refusing {
				r.verdict.fail("shard-refuses-writes", "%s, 32s after the last move ended", m)
			}
			return
		}
		time.Sleep(time.Second)
	}
}

// probe tries a write to table of shard on the database of index d, rolled
// back, and says whether the table exists and whether the write was
// refused by a fence. In the monolith, the shard's "table" is the
// monolith's own, for the shards that started there. A child is written
// under a parent of the shard written first (the monolith's foreign key,
// which a split carries into the shard's schema, holds it to one).
func (c *chaosCluster) probe(d, shard int, table string) (exists, refused bool, err error) {
	q := fmt.Sprintf("chaos_%04d.%s", shard, table)
	if d == chaosMono {
		if shard < chaosSchemaShards {
			return false, false, nil // never in the monolith
		}
		q = table
	}
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(100 * time.Millisecond) {
		if err = c.dbs[d].Raw("SELECT to_regclass(?) IS NOT NULL", q).Scan(&exists).Error; err != nil {
			continue
		}
		if !exists {
			return false, false, nil
		}
		id, _ := chaosLayout.Compose(shardid.Parts{Time: time.Now(), Shard: shard, Worker: 31})
		err = c.dbs[d].Transaction(func(tx *gorm.DB) error {
			key := int64(shard)
			if table == "chaos_cs" { // its parent first: a foreign key may hold it to one
				parent := strings.TrimSuffix(q, "chaos_cs") + "chaos_as"
				if err := tx.Exec("INSERT INTO "+parent+" (id, user_id, proc, attempt, idx, upd) VALUES (?, ?, 0, 0, 0, 0)", int64(id)+1, shard).Error; err != nil {
					return err
				}
				key = int64(id) + 1
			}
			if err := tx.Exec("INSERT INTO "+q+" (id, "+chaosKeyColumn(table)+", proc, attempt, idx, upd) VALUES (?, ?, 0, 0, 0, 0)", int64(id), key).Error; err != nil {
				return err
			}
			return errChaosRollback
		})
		switch {
		case errors.Is(err, errChaosRollback):
			return true, false, nil
		case strings.Contains(err.Error(), shardid.FenceMessage) || strings.Contains(err.Error(), "55000"):
			return true, true, nil
		case strings.Contains(err.Error(), "does not exist"):
			return false, false, nil // dropped meanwhile
		}
	}
	return exists, false, err
}

var errChaosRollback = errors.New("rollback")

// readBack reads a sample of the acknowledged rows through a router that
// follows the catalog, as an application would, and compares what it gets
// with the row on the database the final map names (rows), or its absence.
func (c *chaosCluster) readBack(t *testing.T, r *chaosRun, final []int, rows []chaosRow) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt := c.router(t)
	if err := reshard.Follow(ctx, rt, c.catalog, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if m := rt.Map(); !slices.Equal(m, final) {
		r.verdict.fail("router-map", "a following router has the map %v, the catalog %v", m, final)
	}
	live := map[shardid.ID]chaosRow{}
	for _, row := range rows {
		if row.Shard >= 0 && final[row.Shard] == row.DB {
			live[row.ID] = row
		}
	}
	var acked []chaosAttempt
	for _, a := range r.history.Attempts {
		if a.Outcome == "ack" {
			acked = append(acked, a)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(r.seed), 2))
	for range min(200, len(acked)) {
		a := acked[rng.IntN(len(acked))]
		i := rng.IntN(len(a.Rows))
		id := a.Rows[i].ID
		var got ChaosA
		var err error
		switch a.Table {
		case "chaos_bs":
			var b ChaosB
			err = rt.Get(ctx, &b, id)
			got = ChaosA(b)
		case "chaos_cs":
			var c ChaosC
			err = rt.Get(ctx, &c, id)
			got = ChaosA{ID: c.ID, UserID: int64(c.AID), Proc: c.Proc, Attempt: c.Attempt, Idx: c.Idx, Upd: c.Upd}
		default:
			err = rt.Get(ctx, &got, id)
		}
		want, ok := live[id]
		switch {
		case !ok && errors.Is(err, gorm.ErrRecordNotFound):
		case !ok:
			r.verdict.fail("read-back", "reading row %v of process %d attempt %d, not stored on its shard's home, through the router: %+v, %v", id, a.Proc, a.Seq, got, err)
		case err != nil || got.Proc != a.Proc || got.Attempt != a.Seq || got.Idx != i || got.UserID != want.Key || got.Upd != want.Upd:
			r.verdict.fail("read-back", "reading acknowledged row %v of process %d attempt %d through the router: %+v, %v; stored %+v", id, a.Proc, a.Seq, got, err, want)
		}
	}
}

// report logs what the run did and fails the test with the violations.
func (r *chaosRun) report(t *testing.T) {
	t.Helper()
	v := r.verdict
	var kinds []string
	for k, n := range r.faultCounts {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	var other []string
	for k, n := range r.history.Other {
		other = append(other, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(other)
	t.Logf("seed %d, %v: faults %s", r.seed, r.duration, strings.Join(kinds, " "))
	t.Logf("writer processes %d; claims %d; events %s", r.started, v.Claims, strings.Join(other, " "))
	for _, m := range r.moves {
		if strings.HasPrefix(m, "split") || strings.Contains(m, "of the split of shards") {
			t.Logf("%s", m)
			continue
		}
		t.Logf("move: %s", m)
	}
	t.Logf("checked: %d IDs issued (%d judged against their claims), %d acknowledged rows, %d stored rows (%d live), %d updates and deletes (%d acknowledged); %v to check; %d violations",
		v.IDs, v.Judged, v.Acked, v.Rows, v.LiveRows, v.Ops, v.AckedOps, r.checkTook.Round(time.Millisecond), len(v.Violations))
	t.Logf("after the faults: %v until the last move or split ended, %v until the writers stopped, %v to check",
		r.waitTook.Round(time.Millisecond), r.stopTook.Round(time.Millisecond), r.checkTook.Round(time.Millisecond))
	var names []string
	for k := range v.Kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		t.Errorf("%d violations of kind %s, e.g.:", v.Kinds[k], k)
		shown := 0
		for _, s := range v.Violations {
			if strings.HasPrefix(s, k+": ") && shown < 5 {
				t.Errorf("  %s", s)
				shown++
			}
		}
	}
	if v.Acked == 0 {
		t.Error("no write was acknowledged: the run tested nothing")
	}
	// Kept on a violation, or when SHARDID_CHAOS_KEEP asks for them.
	if len(v.Violations) > 0 || os.Getenv("SHARDID_CHAOS_KEEP") != "" {
		keep := filepath.Join(os.TempDir(), fmt.Sprintf("shardid-chaos-%d-%d", r.seed, time.Now().Unix()))
		if err := os.CopyFS(keep, os.DirFS(r.dir)); err == nil && len(v.Violations) > 0 {
			t.Errorf("the logs of the run (driver.log, writerNNN.log) are kept in %s", keep)
		} else if err == nil {
			t.Logf("the logs of the run (driver.log, writerNNN.log) are kept in %s", keep)
		}
	}
}
