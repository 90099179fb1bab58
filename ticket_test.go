package shardid_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
)

// Two MariaDB ticket servers, odd and even; one is killed mid-run:
// allocation goes on from the other, every ID unique; when it returns, both
// serve again.
func TestTicketsOddEvenWithAFailure(t *testing.T) {
	one := openMySQL(t)
	one.Exec("DROP TABLE IF EXISTS shardid_t_oddeven")
	inst := startMariaDBInstance(t)
	two, err := gorm.Open(mysql.Open(inst.DSN("test")), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, two)
	ctx := context.Background()
	tickets, err := shardid.NewTicketAllocator(ctx, shardid.TicketConfig{
		Servers: []*gorm.DB{one, two}, Name: "shardid_t_oddeven", RetryAfter: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	take := func(n int) (odd, even int, ids []int64) {
		for range n {
			id, err := tickets.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
			if id%2 == 1 {
				odd++
			} else {
				even++
			}
		}
		return odd, even, ids
	}
	var all []int64
	odd, even, ids := take(100)
	all = append(all, ids...)
	if odd == 0 || even == 0 {
		t.Errorf("both up: %d odd, %d even; want both servers used", odd, even)
	}
	inst.Stop()
	odd, even, ids = take(100)
	all = append(all, ids...)
	if even != 0 || odd != 100 {
		t.Errorf("the even server down: %d odd, %d even; want every ticket from the odd one", odd, even)
	}
	inst.Start()
	time.Sleep(300 * time.Millisecond) // past RetryAfter
	odd, even, ids = take(100)
	all = append(all, ids...)
	if even == 0 {
		t.Errorf("after the even server returned: %d odd, %d even; want it used again", odd, even)
	}
	slices.Sort(all)
	if len(slices.Compact(all)) != 300 {
		t.Errorf("duplicate tickets among %v", all)
	}
}

// PostgreSQL ticket servers: a sequence each, interleaved.
func TestTicketsPostgres(t *testing.T) {
	a, b := openPostgres(t), openSecondPostgres(t)
	for _, db := range []*gorm.DB{a, b} {
		db.Exec("DROP SEQUENCE IF EXISTS shardid_t_pg")
	}
	tickets, err := shardid.NewTicketAllocator(context.Background(), shardid.TicketConfig{Servers: []*gorm.DB{a, b}, Name: "shardid_t_pg"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				id, err := tickets.Next(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[id] {
					t.Errorf("duplicate ticket %d", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != 800 {
		t.Errorf("%d tickets, want 800", len(seen))
	}
	if _, err := shardid.NewTicketAllocator(context.Background(), shardid.TicketConfig{Servers: []*gorm.DB{a}, Name: "bad name"}); !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Errorf("a bad name: %v", err)
	}
}

func segmentDB(t testing.TB, kind string) *gorm.DB {
	if kind == "mysql" {
		return openMySQLTB(t)
	}
	return openPostgres(t)
}

// helperSegment takes IDs from a shared key with 8 goroutines and writes
// them, one per line, each goroutine's in order, to $SHARDID_OUT; with
// $SHARDID_FOREVER it prints them to stdout until it is killed.
func helperSegment(t *testing.T) {
	kind, key := os.Getenv("SHARDID_STORE"), os.Getenv("SHARDID_NS")
	s, err := shardid.NewSegmentAllocator(context.Background(), shardid.SegmentConfig{
		DB: segmentDB(t, kind), Table: "shardid_seg_test", Key: key, Step: 50, Target: 50 * time.Millisecond})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	if os.Getenv("SHARDID_FOREVER") != "" {
		w := bufio.NewWriter(os.Stdout)
		for {
			id, err := s.Next(context.Background())
			if err != nil {
				fmt.Println("error", err)
				return
			}
			fmt.Fprintln(w, id)
			w.Flush()
		}
	}
	ids := takeSegments(t, s, 8, 2000)
	var b strings.Builder
	for g, list := range ids {
		for _, id := range list {
			fmt.Fprintf(&b, "%d %d\n", g, id)
		}
	}
	os.WriteFile(os.Getenv("SHARDID_OUT"), []byte(b.String()), 0o644)
}

func takeSegments(t testing.TB, s *shardid.SegmentAllocator, goroutines, each int) [][]int64 {
	out := make([][]int64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				id, err := s.Next(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				out[g] = append(out[g], id)
			}
		}()
	}
	wg.Wait()
	return out
}

// 32 goroutines here and 4 processes share one key: every ID unique, and
// each goroutine's IDs increase.
func TestSegmentsShared(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			db := segmentDB(t, kind)
			db.Exec("DROP TABLE IF EXISTS shardid_seg_test")
			key := "orders_" + kind
			dir := t.TempDir()
			var procs []*helperRun
			for i := range 4 {
				out := fmt.Sprintf("%s/p%d", dir, i)
				cmd := helperProcess(t, "segment", "SHARDID_STORE="+kind, "SHARDID_NS="+key, "SHARDID_OUT="+out)
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				procs = append(procs, &helperRun{cmd.Wait, out})
			}
			s, err := shardid.NewSegmentAllocator(context.Background(), shardid.SegmentConfig{
				DB: db, Table: "shardid_seg_test", Key: key, Step: 50, Target: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			lists := takeSegments(t, s, 32, 2000)
			for _, p := range procs {
				p.wait()
				b, err := os.ReadFile(p.out)
				if err != nil {
					t.Fatalf("a helper wrote nothing: %v", err)
				}
				per := map[string][]int64{}
				for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
					g, v, _ := strings.Cut(line, " ")
					id, _ := strconv.ParseInt(v, 10, 64)
					per[g] = append(per[g], id)
				}
				for _, l := range per {
					lists = append(lists, l)
				}
			}
			seen := map[int64]bool{}
			for _, l := range lists {
				for i, id := range l {
					if seen[id] {
						t.Fatalf("duplicate %d", id)
					}
					seen[id] = true
					if i > 0 && id <= l[i-1] {
						t.Fatalf("%d after %d in one goroutine", id, l[i-1])
					}
				}
			}
			if want := 32*2000 + 4*8*2000; len(seen) != want {
				t.Errorf("%d IDs, want %d", len(seen), want)
			}
			if s.Step() <= 50 {
				t.Errorf("the step stayed at %d though blocks lasted far less than the target", s.Step())
			}
		})
	}
}

type helperRun struct {
	wait func() error
	out  string
}

// A process killed in the middle of a block: its restart never reuses an
// ID, not even from the block it was using.
func TestSegmentKilledProcess(t *testing.T) {
	db := openPostgres(t)
	db.Exec("DROP TABLE IF EXISTS shardid_seg_test")
	cmd := helperProcess(t, "segment", "SHARDID_STORE=postgres", "SHARDID_NS=killed", "SHARDID_FOREVER=1")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	var maxSeen int64
	for range 5025 { // mid-block: blocks are 50 or more
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		id, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
		if err != nil {
			t.Fatalf("the helper said %q", line)
		}
		maxSeen = max(maxSeen, id)
	}
	cmd.Process.Kill()
	cmd.Wait()

	s, err := shardid.NewSegmentAllocator(context.Background(), shardid.SegmentConfig{DB: db, Table: "shardid_seg_test", Key: "killed", Step: 50})
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if first <= maxSeen {
		t.Errorf("after the restart the first ID is %d, not above the %d the killed process handed out", first, maxSeen)
	}
}

// OrderLine takes its ID from a segment allocator through the plugin.
type OrderLine struct {
	ID   int64 `gorm:"primaryKey;autoIncrement:false" shardid:"id,source=orders"`
	Item string
}

func TestPluginIDSource(t *testing.T) {
	db := openPostgres(t)
	db.Exec("DROP TABLE IF EXISTS shardid_seg_test")
	seg, err := shardid.NewSegmentAllocator(context.Background(), shardid.SegmentConfig{DB: db, Table: "shardid_seg_test", Key: "order_lines", Step: 100})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{Sources: map[string]shardid.IDSource{"orders": seg}})
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	fresh(t, db, &OrderLine{})
	lines := []OrderLine{{Item: "a"}, {Item: "b"}, {ID: 999999, Item: "preset"}, {Item: "c"}}
	if err := db.Create(&lines).Error; err != nil {
		t.Fatal(err)
	}
	if lines[0].ID != 1 || lines[1].ID != 2 || lines[2].ID != 999999 || lines[3].ID != 3 {
		t.Errorf("IDs %d %d %d %d; want 1 2 999999 3 from the segment", lines[0].ID, lines[1].ID, lines[2].ID, lines[3].ID)
	}
	missing, _ := shardid.NewPlugin(shardid.PluginConfig{})
	db2, _ := gorm.Open(db.Dialector, gormConfig())
	db2.Use(missing)
	if err := db2.Create(&OrderLine{Item: "x"}).Error; !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Errorf("without the source: %v, want ErrInvalidConfig", err)
	}
}

// ticketDBs opens three databases of kind, each a ticket server of its own.
func ticketDBs(t *testing.T, kind string) []*gorm.DB {
	t.Helper()
	if kind == "postgres" {
		main := openPostgres(t)
		var n int64
		main.Raw("SELECT count(*) FROM pg_database WHERE datname = 'shardid_test3'").Scan(&n)
		if n == 0 {
			if err := main.Exec("CREATE DATABASE shardid_test3").Error; err != nil {
				t.Fatal(err)
			}
		}
		dsn := testdb.PostgresDSN("shardid_test3")
		return []*gorm.DB{main, openSecondPostgres(t), openServer(t, "PostgreSQL (third database)", "SHARDID_TEST_POSTGRES3_DSN", dsn, postgres.Open)}
	}
	main := openMySQL(t)
	if err := main.Exec("CREATE DATABASE IF NOT EXISTS shardid_test3").Error; err != nil {
		t.Fatal(err)
	}
	dsn := testdb.MySQLDSN("shardid_test3")
	return []*gorm.DB{main, openSecondMySQL(t), openServer(t, "MySQL/MariaDB (third database)", "SHARDID_TEST_MYSQL3_DSN", dsn, mysql.Open)}
}

// Ticket servers set up as two, restarted as three, reordered, or with
// one left out: no ticket is ever handed out twice; the changed list is
// refused with ErrTicketConfigChanged.
func TestTicketServersChanged(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			dbs := ticketDBs(t, kind)
			a, b, c := dbs[0], dbs[1], dbs[2]
			for _, db := range dbs {
				if kind == "postgres" {
					db.Exec("DROP SEQUENCE IF EXISTS shardid_t_change")
				} else {
					db.Exec("DROP TABLE IF EXISTS shardid_t_change, shardid_t_change_servers")
				}
			}
			ctx := context.Background()
			seen := map[int64]string{}
			take := func(name string, servers ...*gorm.DB) {
				t.Helper()
				tickets, err := shardid.NewTicketAllocator(ctx, shardid.TicketConfig{Servers: servers, Name: "shardid_t_change"})
				if err != nil {
					if !errors.Is(err, shardid.ErrTicketConfigChanged) {
						t.Errorf("%s: %v, want ErrTicketConfigChanged or no error", name, err)
					}
					t.Logf("%s: %v", name, err)
					return
				}
				defer tickets.Close()
				for range 60 {
					id, err := tickets.Next(ctx)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if seen[id] != "" {
						t.Errorf("%s: ticket %d again, handed out first %s", name, id, seen[id])
					}
					seen[id] = name
				}
			}
			take("by servers a, b", a, b)
			take("by a, b, c", a, b, c)
			take("by b, a", b, a)
			take("by a alone", a)
			take("by a, b again", a, b)
			if len(seen) != 120 {
				t.Errorf("%d tickets; want 120, from the two runs with the servers as set up", len(seen))
			}
		})
	}
}

// Close ends the MySQL session a ticket allocator holds, twice at once
// and while Next runs; Next then returns ErrClosed.
func TestTicketAllocatorClose(t *testing.T) {
	db := openMySQL(t)
	db.Exec("DROP TABLE IF EXISTS shardid_t_close, shardid_t_close_servers")
	ctx := context.Background()
	tickets, err := shardid.NewTicketAllocator(ctx, shardid.TicketConfig{Servers: []*gorm.DB{db}, Name: "shardid_t_close"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tickets.Next(ctx); err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	if sqlDB.Stats().InUse == 0 {
		t.Fatal("the allocator holds no session")
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(2)
		go func() { defer wg.Done(); tickets.Close() }()
		go func() {
			defer wg.Done()
			if _, err := tickets.Next(ctx); err != nil && !errors.Is(err, shardid.ErrClosed) {
				t.Errorf("Next racing Close: %v", err)
			}
		}()
	}
	wg.Wait()
	if _, err := tickets.Next(ctx); !errors.Is(err, shardid.ErrClosed) {
		t.Errorf("Next after Close: %v, want ErrClosed", err)
	}
	if n := sqlDB.Stats().InUse; n != 0 {
		t.Errorf("after Close %d sessions are still held", n)
	}
}
