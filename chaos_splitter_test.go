package shardid_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
)

// The splitter processes of the fault test's splits, and the driver's side
// of the splits (chaos_split_test.go).

// splitterProcess runs the batch of plan in a splitter process (SplitShards)
// that is killed after p.killAfter, dies at p.killAt, or stops at
// p.pauseAt for p.pause, as the tables' owner (chaosOwner) if p.owner,
// and returns what became of it.
func (c *chaosCluster) splitterProcess(plan *reshard.SplitPlan, p chaosSplitPlan, rival func() string) string {
	shards := planShards(plan)
	var to []string
	for _, s := range shards {
		to = append(to, plan.To[s])
	}
	return c.stageProcess("splitter", fmt.Sprintf("split of shards %v", shards), shards, to, p, rival)
}

// rollbackProcess rolls shards back into the monolith in a process
// (RollbackSplit, with AfterLastBatch if afterLast), as splitterProcess
// splits them.
func (c *chaosCluster) rollbackProcess(shards []int, afterLast bool, p chaosSplitPlan) string {
	mode := "rollbacker"
	if afterLast {
		mode = "rollbacker-after-last"
	}
	return c.stageProcess(mode, fmt.Sprintf("rollback of the split of shards %v", shards), shards, nil, p, nil)
}

// stageProcess runs a process of the test binary in mode (splitter, or
// rollbacker) over shards (onto to) that is killed after p.killAfter, dies
// at p.killAt, stops at p.pauseAt for p.pause, or stops after p.stopAfter
// while its sessions are ended and rival runs (if not nil), and returns
// what became of it (name says what it does). It connects as chaosOwner if
// p.owner.
func (c *chaosCluster) stageProcess(mode, name string, shards []int, to []string, p chaosSplitPlan, rival func() string) string {
	var list []string
	for _, s := range shards {
		list = append(list, strconv.Itoa(s))
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChaosHelper$", "-test.v=false")
	cmd.Env = append(os.Environ(), "SHARDID_CHAOS_MODE="+mode, "SHARDID_CHAOS_SHARDS="+strings.Join(list, ","),
		"SHARDID_CHAOS_TARGETS="+strings.Join(to, ","), "SHARDID_CHAOS_DIE_AT="+p.killAt, "SHARDID_CHAOS_PAUSE_AT="+p.pauseAt)
	cmd.Env = append(cmd.Env, c.chaosEnvDSNs()...)
	if p.reaped {
		cmd.Env = append(cmd.Env, "SHARDID_CHAOS_REAPED=1")
	}
	as := "a superuser"
	if p.owner {
		cmd.Env = append(cmd.Env, "SHARDID_CHAOS_AS="+chaosOwner)
		as = "the tables' owner " + chaosOwner
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err.Error()
	}
	if err := cmd.Start(); err != nil {
		return fmt.Sprintf("%s: starting a %s: %v", name, mode, err)
	}
	var timer *time.Timer
	if p.killAfter > 0 {
		timer = time.AfterFunc(p.killAfter, func() { cmd.Process.Kill() })
	}
	stopped := make(chan string, 1) // what the rival met while the process was stopped
	if p.stopAfter > 0 && rival != nil {
		timer = time.AfterFunc(p.stopAfter, func() {
			defer cmd.Process.Signal(syscall.SIGCONT)
			if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				stopped <- fmt.Sprintf("not stopped: %v", err)
				return
			}
			n := c.terminateSessionsOf(cmd.Process.Pid)
			c.note("%s: the %s stopped after %v; %d of its sessions ended", name, mode, p.stopAfter, n)
			m := rival()
			c.note("%s: while the %s was stopped: %s", name, mode, m)
			stopped <- m
		})
	}
	var lines []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if sc.Text() == "paused" {
			c.note("%s: the %s stopped at %s, for %v", name, mode, p.pauseAt, p.pause)
			time.Sleep(p.pause)
			cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	err = cmd.Wait()
	if timer != nil && !timer.Stop() && p.stopAfter > 0 && rival != nil {
		lines = append(lines, "stopped: "+<-stopped)
	}
	how := "ran"
	switch {
	case p.killAfter > 0:
		how = fmt.Sprintf("was to be killed after %v", p.killAfter)
	case p.killAt != "":
		how = "was to die at " + p.killAt
	case p.pauseAt != "":
		how = fmt.Sprintf("stopped at %s for %v", p.pauseAt, p.pause)
	case p.stopAfter > 0:
		how = fmt.Sprintf("stopped after %v, its sessions ended, while a rival ran the batch", p.stopAfter)
	}
	return fmt.Sprintf("%s: a %s process as %s %s: %v (%s)", name, mode, as, how, err, strings.Join(lines, "; "))
}

// chaosSplitterMain is a splitter process: it splits the shards
// SHARDID_CHAOS_SHARDS onto SHARDID_CHAOS_TARGETS (SplitShards, as the
// split command runs a batch), or, in mode rollbacker, rolls them back
// into the monolith (RollbackSplit; rollbacker-after-last: with
// AfterLastBatch), says each stage on its standard output,
// and dies (exit 3, no clean-up) at SHARDID_CHAOS_DIE_AT, or stops itself
// (SIGSTOP) at SHARDID_CHAOS_PAUSE_AT until the driver sends SIGCONT. It
// connects as SHARDID_CHAOS_AS if set (chaosOwner), else as a superuser.
func chaosSplitterMain() {
	var dbs []*gorm.DB
	for _, dsn := range chaosDSNs() {
		if role := chaosEnv("AS"); role != "" {
			dsn = testdb.WithPostgresField(dsn, "user", role)
		}
		// Its sessions are its own to end (terminateSessionsOf).
		dsn += " application_name=" + chaosSessionName(os.Getpid())
		if chaosEnv("REAPED") == "1" {
			// The server ends every session of the process that stays
			// idle in a transaction for 1s.
			dsn += " options='-c idle_in_transaction_session_timeout=1000'"
		}
		db, err := gorm.Open(postgres.Open(dsn), gormConfig())
		if err != nil {
			fmt.Println("error", err)
			return
		}
		dbs = append(dbs, db)
	}
	ctx := context.Background()
	m := chaosMap()
	c := chaosCatalog(dbs[0])
	if _, err := c.LoadMap(ctx, m); err != nil {
		fmt.Println("error", err)
		return
	}
	var shards []int
	for _, s := range strings.Split(chaosEnv("SHARDS"), ",") {
		n, _ := strconv.Atoi(s)
		shards = append(shards, n)
	}
	cfg := reshard.SplitConfig{Map: m, DBs: dbs, Monolith: chaosNames[chaosMono], Tables: chaosSplitTables, Catalog: c, Layout: chaosLayout}
	onStage := func(stage string) {
		fmt.Println("stage", stage)
		switch stage {
		case chaosEnv("DIE_AT"):
			os.Exit(3)
		case chaosEnv("PAUSE_AT"):
			fmt.Println("paused")
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		}
	}
	if mode := chaosEnv("MODE"); mode != "splitter" {
		_, err := reshard.RollbackSplit(ctx, cfg, shards, reshard.RollbackOptions{FenceFor: chaosSplitFenceFor,
			AfterLastBatch: mode == "rollbacker-after-last", OnStage: func(_ int, stage string) { onStage(stage) }})
		fmt.Println("rollback", err)
		return
	}
	_, err := reshard.SplitShards(ctx, cfg, shards, strings.Split(chaosEnv("TARGETS"), ","), reshard.SplitOptions{
		FenceFor: chaosSplitFenceFor, OnStage: onStage})
	fmt.Println("split", err)
}

// splitDriver is the driver's side of the splits of a run: one at a time,
// in the background.
type splitDriver struct {
	sp      *chaosSplitter
	busy    atomic.Bool // a split or a roll-back runs
	mu      sync.Mutex
	left    int                    // batches left to split, -1 until known (under mu)
	flipped int                    // batches of the plan split whole (under mu)
	copies  map[int]splitCopy      // old copies that roll-backs left, to drop (by the one split or roll-back running)
	fail    func(kind, msg string) // reports a violation found during the run
}

// exhausted reports whether every batch of the plan is split.
func (d *splitDriver) exhausted() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.left == 0
}

// canRollback reports whether a batch of the plan is split whole.
func (d *splitDriver) canRollback() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.flipped > 0
}

// run splits the next batch, as p says, with splitting (under mu) holding
// its shards meanwhile, and returns what happened.
func (d *splitDriver) run(p chaosSplitPlan, mu *sync.Mutex, splitting map[int]bool) []string {
	msgs := d.dropCopies()
	plan, err := d.sp.next(func(s int) bool { _, ok := d.copies[s]; return ok })
	if err != nil {
		return append(msgs, fmt.Sprintf("split: %v", err))
	}
	if plan == nil && len(d.copies) > 0 {
		return append(msgs, "split: skipped, the shards left wait for their old copies to be dropped")
	}
	if plan == nil {
		d.mu.Lock()
		d.left = 0
		d.mu.Unlock()
		return append(msgs, "split: skipped, every batch is split")
	}
	defer holdShards(mu, splitting, planShards(plan))()
	if p.edited {
		msgs = append(msgs, d.sp.edited(plan, d.fail))
	}
	m, _ := d.sp.split(plan, p)
	msgs = append(msgs, m...)
	d.recount()
	return msgs
}

// holdShards marks shards in held (under mu), so that no move takes them
// while a split or a roll-back runs, and returns the function that
// unmarks them.
func holdShards(mu *sync.Mutex, held map[int]bool, shards []int) func() {
	mu.Lock()
	for _, s := range shards {
		held[s] = true
	}
	mu.Unlock()
	return func() {
		mu.Lock()
		for _, s := range shards {
			delete(held, s)
		}
		mu.Unlock()
	}
}

// recount counts the plan's batches left to split and those split whole,
// from the catalog.
func (d *splitDriver) recount() {
	final, err := d.sp.c.loadMap()
	if err != nil {
		return
	}
	left, flipped := 0, 0
	for _, b := range d.sp.plan.Batches {
		if slices.ContainsFunc(b, func(s int) bool { return final[s].Shared }) {
			left++
		} else {
			flipped++
		}
	}
	d.mu.Lock()
	d.left, d.flipped = left, flipped
	d.mu.Unlock()
}

// chaosSessionName is the application_name of the sessions of the
// splitter process pid.
func chaosSessionName(pid int) string { return "shardid_chaos_stage_" + strconv.Itoa(pid) }

// terminateSessionsOf ends every session of the splitter process pid on
// both servers (pg1's, which holds the monolith, and pg2's), as a reaper
// or a network reset would, and returns how many it ended.
func (c *chaosCluster) terminateSessionsOf(pid int) int {
	total := 0
	for _, db := range c.dbs[:2] {
		var n int
		db.Raw("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = ?", chaosSessionName(pid)).Scan(&n)
		total += n
	}
	return total
}
