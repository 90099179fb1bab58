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

	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// The splitter processes of the fault test's splits, and the driver's side
// of the splits (chaos_split_test.go).

// splitterProcess runs the batch of plan in a splitter process (SplitShards)
// that is killed after p.killAfter, dies at p.killAt, or stops at
// p.pauseAt for p.pause, and returns what became of it.
func (c *chaosCluster) splitterProcess(plan *reshard.SplitPlan, p chaosSplitPlan) string {
	shards := plan.Batches[0]
	var list, to []string
	for _, s := range shards {
		list = append(list, strconv.Itoa(s))
		to = append(to, plan.To[s])
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChaosHelper$", "-test.v=false")
	cmd.Env = append(os.Environ(), "SHARDID_CHAOS_MODE=splitter", "SHARDID_CHAOS_SHARDS="+strings.Join(list, ","),
		"SHARDID_CHAOS_TARGETS="+strings.Join(to, ","), "SHARDID_CHAOS_DIE_AT="+p.killAt, "SHARDID_CHAOS_PAUSE_AT="+p.pauseAt)
	cmd.Env = append(cmd.Env, c.chaosEnvDSNs()...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err.Error()
	}
	if err := cmd.Start(); err != nil {
		return fmt.Sprintf("split of shards %v: starting a splitter: %v", shards, err)
	}
	var timer *time.Timer
	if p.killAfter > 0 {
		timer = time.AfterFunc(p.killAfter, func() { cmd.Process.Kill() })
	}
	var lines []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if sc.Text() == "paused" {
			c.note("split of shards %v: the splitter stopped at %s, for %v", shards, p.pauseAt, p.pause)
			time.Sleep(p.pause)
			cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	err = cmd.Wait()
	if timer != nil {
		timer.Stop()
	}
	how := "ran"
	switch {
	case p.killAfter > 0:
		how = fmt.Sprintf("was to be killed after %v", p.killAfter)
	case p.killAt != "":
		how = "was to die at " + p.killAt
	case p.pauseAt != "":
		how = fmt.Sprintf("stopped at %s for %v", p.pauseAt, p.pause)
	}
	return fmt.Sprintf("split of shards %v: a splitter process %s: %v (%s)", shards, how, err, strings.Join(lines, "; "))
}

// chaosSplitterMain is a splitter process: it splits the shards
// SHARDID_CHAOS_SHARDS onto SHARDID_CHAOS_TARGETS (SplitShards, as the
// split command runs a batch), says each stage on its standard output,
// and dies (exit 3, no clean-up) at SHARDID_CHAOS_DIE_AT, or stops itself
// (SIGSTOP) at SHARDID_CHAOS_PAUSE_AT until the driver sends SIGCONT.
func chaosSplitterMain() {
	var dbs []*gorm.DB
	for _, dsn := range chaosDSNs() {
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
	cfg := reshard.SplitConfig{Map: m, DBs: dbs, Monolith: chaosNames[chaosMono], Tables: chaosSplitTables, Catalog: c}
	_, err := reshard.SplitShards(ctx, cfg, shards, strings.Split(chaosEnv("TARGETS"), ","), reshard.SplitOptions{
		FenceFor: chaosSplitFenceFor,
		OnStage: func(stage string) {
			fmt.Println("stage", stage)
			switch stage {
			case chaosEnv("DIE_AT"):
				os.Exit(3)
			case chaosEnv("PAUSE_AT"):
				fmt.Println("paused")
				syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			}
		}})
	fmt.Println("split", err)
}

// splitDriver is the driver's side of the splits of a run: one at a time,
// in the background.
type splitDriver struct {
	sp   *chaosSplitter
	busy atomic.Bool // a split runs
	mu   sync.Mutex
	left int // batches left to split, -1 until known (under mu)
}

// exhausted reports whether every batch of the plan is split.
func (d *splitDriver) exhausted() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.left == 0
}

// run splits the next batch, as p says, with splitting (under mu) holding
// its shards meanwhile, and returns what happened.
func (d *splitDriver) run(p chaosSplitPlan, mu *sync.Mutex, splitting map[int]bool) []string {
	var msgs []string
	plan, err := d.sp.next()
	if err != nil {
		return append(msgs, fmt.Sprintf("split: %v", err))
	}
	if plan == nil {
		d.mu.Lock()
		d.left = 0
		d.mu.Unlock()
		return append(msgs, "split: skipped, every batch is split")
	}
	shards := plan.Batches[0]
	mu.Lock()
	for _, s := range shards {
		splitting[s] = true
	}
	mu.Unlock()
	defer func() {
		mu.Lock()
		for _, s := range shards {
			delete(splitting, s)
		}
		mu.Unlock()
	}()
	m, _ := d.sp.split(plan, p)
	msgs = append(msgs, m...)
	left := 0
	if final, err := d.sp.c.loadMap(); err == nil {
		for _, b := range d.sp.plan.Batches {
			if slices.ContainsFunc(b, func(s int) bool { return final[s].Shared }) {
				left++
			}
		}
		d.mu.Lock()
		d.left = left
		d.mu.Unlock()
	}
	return msgs
}
