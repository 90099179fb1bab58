package shardid_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/redislease"
	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardpgx"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// ChaosA and ChaosB are tables the fault test's writers fill: every
// logical shard has both, and ChaosC. Proc, Attempt and Idx say which
// write a row came from, so the checker can tell a row from another that
// took its ID. Upd is the sequence number, in its process, of the last
// update of the row (0 for none): with UserID, the row's state, which
// updates change.
type ChaosA struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Proc    int
	Attempt int64
	Idx     int
	Upd     int64
}

// ChaosB is the second table of every shard.
type ChaosB ChaosA

// ChaosC is the third table of every shard, a child of ChaosA: AID is the
// ID of its parent row, so a row goes to its parent's shard (in the
// monolith, a foreign key holds it to its parent, and a split takes it
// with its parent: SplitTable{Parent: "chaos_as", Via: "a_id"}). Its key,
// for the checker, is AID, which no update changes.
type ChaosC struct {
	ID      shardid.ID
	AID     shardid.ID `shardid:"key"`
	Proc    int
	Attempt int64
	Idx     int
	Upd     int64
}

// chaosLog appends events to a writer process's log file, one write per
// line, so that a kill loses at most the line being written.
type chaosLog struct {
	mu   sync.Mutex
	f    *os.File
	proc int
}

func (l *chaosLog) printf(format string, args ...any) {
	line := fmt.Sprintf(format, args...) + "\n"
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.WriteString(line); err != nil {
		fmt.Fprintln(os.Stderr, "chaos log:", err)
		os.Exit(2)
	}
}

func (l *chaosLog) event(kind string) { l.printf("event %d %s", l.proc, kind) }

// chaosStore is the writer's view of a lease store: it gives the process's
// store group its own slice of the worker ids (offset, size), so that
// processes of different stores never share a worker id, and logs every
// claim, with its fencing token, and every release. With lie set it is a
// broken store, for the checker's own test: every claim is told it got the
// first worker id of the slice.
type chaosStore struct {
	inner        shardid.LeaseStore
	offset, size int
	log          *chaosLog
	lie          bool

	mu      sync.Mutex
	innerOf map[int64]int // lying: token → the worker the inner store really gave
}

func (s *chaosStore) Claim(ctx context.Context, workers, prefer int, owner string, ttl time.Duration) (shardid.Claim, error) {
	p := prefer - s.offset
	if p < 0 || p >= s.size {
		p = -1
	}
	c, err := s.inner.Claim(ctx, s.size, p, owner, ttl)
	if err != nil {
		return c, err
	}
	w := c.Worker
	c.Worker += s.offset
	if s.lie {
		c.Worker = s.offset
		s.mu.Lock()
		s.innerOf[c.Token] = w
		s.mu.Unlock()
	}
	s.log.printf("claim %d %d %d %d %d", s.log.proc, c.Worker, c.Token, c.Last, time.Now().UnixNano())
	return c, nil
}

// innerClaim returns c as the inner store knows it.
func (s *chaosStore) innerClaim(c shardid.Claim) shardid.Claim {
	if s.lie {
		s.mu.Lock()
		defer s.mu.Unlock()
		c.Worker = s.innerOf[c.Token]
		return c
	}
	c.Worker -= s.offset
	return c
}

func (s *chaosStore) Renew(ctx context.Context, c shardid.Claim, ttl time.Duration, promise int64) error {
	return s.inner.Renew(ctx, s.innerClaim(c), ttl, promise)
}

func (s *chaosStore) Release(ctx context.Context, c shardid.Claim, last int64) error {
	s.log.printf("release %d %d %d %d", s.log.proc, c.Worker, c.Token, last)
	return s.inner.Release(ctx, s.innerClaim(c), last)
}

// chaosQuiet drops go-redis's reports of connections a restart broke.
type chaosQuiet struct{}

func (chaosQuiet) Printf(context.Context, string, ...any) {}

// chaosEnv reads the writer's configuration.
func chaosEnv(name string) string { return os.Getenv("SHARDID_CHAOS_" + name) }

func chaosEnvInt(name string) int {
	n, err := strconv.Atoi(chaosEnv(name))
	if err != nil {
		fmt.Fprintf(os.Stderr, "SHARDID_CHAOS_%s: %v\n", name, err)
		os.Exit(2)
	}
	return n
}

// TestChaosHelper is not a test: it is the body of the fault test's writer
// processes. It does nothing in a normal run.
func TestChaosHelper(t *testing.T) {
	switch chaosEnv("MODE") {
	case "":
		return
	case "mover":
		chaosMover()
	case "splitter", "rollbacker", "rollbacker-after-last":
		chaosSplitterMain()
	default:
		chaosWriter(t)
	}
	os.Exit(0)
}

// chaosSession is what a writer holds while it writes: a worker id (leased,
// or static), a router of its own over the two databases following the
// catalog, and the plugin on it.
type chaosSession struct {
	lease *shardid.Lease
	r     *shardid.Router
	// fresh is, for a laggard, a second router on its plugin that follows
	// the catalog: the laggard inserts through either, and changes its rows
	// through r alone. A row inserted on a shard's new home after a flip
	// that r has not heard of is then changed through r on the old one,
	// where it never was: refused, never "0 rows changed" (routesql.Left).
	fresh *shardid.Router
	// batch is, for a laggard, a shardpgx router on r's map (as stale as
	// r's): a third of its changes go through it, in a batch of pgx
	// (SendBatch), whose check rides in the batch (chaosChange).
	batch  *shardpgx.Router
	pools  []*pgxpool.Pool
	dbs    []*gorm.DB
	cancel context.CancelFunc
	token  func() string
}

func (s *chaosSession) close(log *chaosLog) {
	s.cancel()
	if s.lease != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.lease.Close(ctx); err != nil {
			log.event("close-failed")
		}
		cancel()
	}
	for _, db := range s.dbs {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	}
	for _, p := range s.pools {
		p.Close()
	}
}

// chaosWriter is one writer process: it takes a worker id, writes batches
// of rows to random shards through a router that follows the catalog, logs
// every claim and every batch, and obeys commands on its standard input
// ("clock NANOSECONDS" sets its generator's clock offset) until it closes.
func chaosWriter(t *testing.T) {
	proc := chaosEnvInt("PROC")
	f, err := os.OpenFile(chaosEnv("LOG"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := &chaosLog{f: f, proc: proc}
	// The MySQL driver reports every connection a restart broke.
	mysqldriver.SetLogger(stdlog.New(io.Discard, "", 0))
	rng := rand.New(rand.NewPCG(uint64(chaosEnvInt("SEED")), uint64(proc)))
	mode := chaosEnv("MODE")

	var offset atomic.Int64
	var stopping atomic.Bool
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			if v, ok := strings.CutPrefix(in.Text(), "clock "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				offset.Store(n)
				log.event("clock-set")
			}
		}
		stopping.Store(true)
	}()
	redis.SetLogger(chaosQuiet{})
	clock := shardid.WithClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })

	var store *chaosStore
	if mode != "static" {
		// The store may be down while the process starts (a restart).
		inner, err := chaosLeaseStore(chaosEnv("STORE"), chaosEnv("STORE_ADDR"))
		for err != nil && !stopping.Load() {
			log.event("store-open-failed")
			time.Sleep(100 * time.Millisecond)
			inner, err = chaosLeaseStore(chaosEnv("STORE"), chaosEnv("STORE_ADDR"))
		}
		if err != nil {
			log.event("exit")
			return
		}
		store = &chaosStore{inner: inner, offset: chaosEnvInt("OFFSET"), size: chaosEnvInt("GROUP"), log: log,
			lie: mode == "liar", innerOf: map[int64]int{}}
	}
	prefer := chaosEnvInt("PREFER")
	if prefer < 0 {
		prefer = chaosEnvInt("OFFSET") // AcquireLease wants a worker id in range
	}
	acquireErrs := 0

	open := func() *chaosSession {
		for !stopping.Load() {
			s := &chaosSession{}
			var gen *shardid.Generator
			if store == nil {
				g, err := shardid.NewGenerator(chaosLayout, shardid.WithWorker(prefer), clock)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				token := "static" + strconv.Itoa(proc)
				log.printf("claim %d %d %s -1 %d", proc, prefer, token, time.Now().UnixNano())
				gen, s.token = g, func() string { return token }
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				l, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: store, Layout: chaosLayout, TTL: chaosTTL,
					Prefer: prefer, Wait: true, Owner: chaosEnv("OWNER"), Options: []shardid.GeneratorOption{clock}})
				cancel()
				if err != nil {
					if acquireErrs++; acquireErrs <= 2 {
						fmt.Fprintf(os.Stderr, "chaos writer %d: acquiring a lease: %v\n", proc, err)
					}
					log.event("acquire-failed")
					time.Sleep(100 * time.Millisecond)
					continue
				}
				s.lease, gen = l, l.Generator()
				s.token = func() string { return strconv.FormatInt(l.Token(), 10) }
				prefer = l.Worker()
			}
			fmt.Printf("worker %d\n", gen.Worker())
			if err := s.connect(gen); err != nil {
				log.event("connect-failed")
				s.close(log)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return s
		}
		return nil
	}

	sess := open()
	lastAck := time.Now()
	dupkeys := 0
	var owned []chaosOwned // this process's rows whose insert was acknowledged, not deleted
	for seq := int64(1); !stopping.Load(); seq++ {
		if sess == nil {
			if sess = open(); sess == nil {
				break
			}
			lastAck = time.Now()
		}
		// Most of the time a batch insert; else an update or a delete of
		// one of the process's own rows.
		if x := rng.IntN(20); len(owned) > 0 && x < 11 {
			i := rng.IntN(len(owned))
			if owned[i].kids {
				x = 0 // a parent that may have children is updated, never deleted
			}
			ok := chaosChange(sess.r, sess.batch, log, rng, proc, seq, &owned[i], x < 8)
			if x >= 8 { // a delete: the row is the process's no more, whatever became of it
				owned = slices.Delete(owned, i, i+1)
			}
			if ok {
				time.Sleep(time.Duration(2+rng.IntN(8)) * time.Millisecond)
			} else {
				time.Sleep(time.Duration(10+rng.IntN(40)) * time.Millisecond)
			}
			continue
		}
		shard := rng.IntN(chaosShards)
		if chaosEnv("ONE_SHARD") == "true" {
			shard = 0
		}
		n := 1 + rng.IntN(8)
		table := chaosTables[rng.IntN(len(chaosTables))]
		parent := -1 // for chaos_cs, the index in owned of the parent row
		if table == "chaos_cs" {
			for range 8 {
				if i := rng.IntN(len(owned) + 1); i < len(owned) && owned[i].table == "chaos_as" {
					parent = i
					break
				}
			}
			if parent < 0 {
				table = "chaos_as"
			} else {
				n = 1 + rng.IntN(3)
				// Its children keep it: a parent is never deleted once
				// it may have children (the monolith's foreign key).
				owned[parent].kids = true
			}
		}
		rows := make([]ChaosA, n)
		for i := range rows {
			rows[i] = ChaosA{UserID: int64(shard) + chaosShards*rng.Int64N(1<<30), Proc: proc, Attempt: seq, Idx: i}
			if parent >= 0 {
				rows[i].UserID = int64(owned[parent].id) // the key of a child: its parent's id
			}
		}
		before := sess.token()
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		ins := sess.r
		if sess.fresh != nil && rng.IntN(2) == 0 {
			ins = sess.fresh
		}
		db := ins.ForKey(rows[0].UserID).WithContext(ctx)
		switch table {
		case "chaos_bs":
			bs := make([]ChaosB, n)
			for i := range rows {
				bs[i] = ChaosB(rows[i])
			}
			err = db.Create(&bs).Error
			for i := range rows {
				rows[i].ID = bs[i].ID
			}
		case "chaos_cs":
			cs := make([]ChaosC, n)
			for i, r := range rows {
				cs[i] = ChaosC{AID: shardid.ID(r.UserID), Proc: r.Proc, Attempt: r.Attempt, Idx: r.Idx}
			}
			err = ins.ForID(owned[parent].id).WithContext(ctx).Create(&cs).Error
			for i := range rows {
				rows[i].ID = cs[i].ID
			}
		default:
			err = db.Create(&rows).Error
		}
		cancel()
		token := sess.token()
		if token != before {
			token = "-"
		}
		outcome := chaosOutcome(err)
		refs := make([]string, 0, n)
		for _, r := range rows {
			if r.ID != 0 {
				refs = append(refs, fmt.Sprintf("%d:%d", int64(r.ID), r.UserID))
			}
		}
		list := strings.Join(refs, ",")
		if list == "" {
			list = "-"
		}
		log.printf("attempt %d %d %s %s %s %d %d %s", proc, seq, table, outcome, token, began.UnixMilli(), time.Since(began).Milliseconds(), list)
		switch {
		case err == nil:
			lastAck = time.Now()
			for _, r := range rows {
				owned = append(owned, chaosOwned{id: r.ID, table: table, key: r.UserID})
			}
		case outcome == "dupkey":
			if dupkeys++; dupkeys <= 3 && mode == "lease" { // expected of the broken modes
				fmt.Fprintf(os.Stderr, "chaos writer %d: duplicate key: %v\n", proc, err)
			}
		case outcome == "other":
			msg := strings.Join(strings.Fields(err.Error()), "_")
			log.event("other:" + msg[:min(100, len(msg))])
		}
		// A lease that stays lost (its worker id went to another process)
		// is given up for a new one, as an application would.
		if err != nil && sess.lease != nil && time.Since(lastAck) > 4*chaosTTL && errors.Is(sess.lease.Err(), shardid.ErrLeaseLost) {
			log.event("lease-given-up")
			sess.close(log)
			sess = nil
			continue
		}
		if err != nil {
			time.Sleep(time.Duration(10+rng.IntN(40)) * time.Millisecond)
		} else {
			time.Sleep(time.Duration(2+rng.IntN(8)) * time.Millisecond)
		}
	}
	if sess != nil {
		sess.close(log)
	}
	log.event("exit")
	fmt.Println("done")
}

// chaosOwned is a row a writer inserted (acknowledged) and may change.
type chaosOwned struct {
	id    shardid.ID
	table string
	key   int64
	kids  bool // a chaos_as row that may have children: never deleted
}

// chaosChange updates (update true) or deletes row o through r, routed by
// its ID, as operation seq of process proc, logs what became of it, and
// reports whether it was acknowledged. With batch (a laggard's), one seq
// in three goes through it instead (the same statement in a batch of
// pgx), and one in three is a WITH ... RETURNING read through r's Raw. Two updates in three change the
// row's sharding key to another key of the same shard (the ID fixes a
// row's shard: a key of another shard would be a new row), but a child's,
// its parent's id, which stays; every update sets Upd to seq, so the
// checker can tell which update a row shows.
func chaosChange(r *shardid.Router, batch *shardpgx.Router, log *chaosLog, rng *rand.Rand, proc int, seq int64, o *chaosOwned, update bool) bool {
	var model any = &ChaosA{}
	switch o.table {
	case "chaos_bs":
		model = &ChaosB{}
	case "chaos_cs":
		model = &ChaosC{}
	}
	key, kind := o.key, "delete"
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	db := r.ForID(o.id).WithContext(ctx)
	var res *gorm.DB
	if update {
		kind = "update"
		if rng.IntN(3) > 0 && o.table != "chaos_cs" { // a child's key is its parent's id: it stays
			key = o.key%chaosShards + chaosShards*rng.Int64N(1<<30)
		}
	}
	// Logged before it runs: a process killed before it logs the outcome
	// leaves the operation pending, which the checker takes as unknown.
	log.printf("pending %d %d %s %s %d %d", proc, seq, o.table, kind, int64(o.id), key)
	var err error
	var n int64
	switch {
	case batch != nil && seq%3 == 1:
		// A WITH that returns what it changed, through GORM's Raw.
		q := "WITH changed AS (DELETE FROM {{schema}}." + o.table + " WHERE id = ? RETURNING id) SELECT id FROM changed"
		args := []any{int64(o.id)}
		if update {
			q = "WITH changed AS (UPDATE {{schema}}." + o.table + " SET " + chaosKeyColumn(o.table) + " = ?, upd = ? WHERE id = ? RETURNING id) SELECT id FROM changed"
			args = []any{key, seq, int64(o.id)}
		}
		var ids []int64
		err = db.Raw(q, args...).Find(&ids).Error
		n = int64(len(ids))
	case batch != nil && seq%3 == 0:
		b := &pgx.Batch{}
		if update {
			b.Queue("UPDATE {{schema}}."+o.table+" SET "+chaosKeyColumn(o.table)+" = $1, upd = $2 WHERE id = $3", key, seq, int64(o.id))
		} else {
			b.Queue("DELETE FROM {{schema}}."+o.table+" WHERE id = $1", int64(o.id))
		}
		br := batch.ForID(o.id).SendBatch(ctx, b)
		var tag pgconn.CommandTag
		tag, err = br.Exec()
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		n = tag.RowsAffected()
	case update:
		res = db.Model(model).Where("id = ?", o.id).Updates(map[string]any{chaosKeyColumn(o.table): key, "upd": seq})
		err, n = res.Error, res.RowsAffected
	default:
		res = db.Where("id = ?", o.id).Delete(model)
		err, n = res.Error, res.RowsAffected
	}
	outcome := chaosOutcome(err)
	log.printf("op %d %d %s %s %s %d %d %d %d %d", proc, seq, o.table, kind, outcome, began.UnixMilli(), time.Since(began).Milliseconds(),
		int64(o.id), key, n)
	if outcome == "other" {
		msg := strings.Join(strings.Fields(err.Error()), "_")
		log.event("other:" + msg[:min(100, len(msg))])
	}
	if err == nil {
		o.key = key
	}
	return err == nil
}

// connect opens the writer's own connections to both databases and a
// router over them with a plugin on gen, following the catalog.
func (s *chaosSession) connect(gen *shardid.Generator) error {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, dsn := range chaosDSNs() {
		db, err := gorm.Open(postgres.Open(dsn), gormConfig())
		if err != nil {
			return err
		}
		sqlDB, _ := db.DB()
		sqlDB.SetConnMaxIdleTime(time.Second)
		s.dbs = append(s.dbs, db)
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{Generator: gen, LogicalShards: chaosShards})
	if err != nil {
		return err
	}
	s.r, err = shardid.NewRouter(shardid.RouterConfig{Databases: s.dbs, ShardMap: chaosMap(), Plugin: p})
	if err != nil {
		return err
	}
	c := chaosCatalog(s.dbs[0])
	lag := time.Duration(chaosEnvInt("FOLLOW_MS")) * time.Millisecond
	if lag <= 0 {
		return reshard.Follow(ctx, s.r, c, 100*time.Millisecond, nil)
	}
	if s.fresh, err = shardid.NewRouter(shardid.RouterConfig{Databases: s.dbs, ShardMap: chaosMap(), Plugin: p}); err != nil {
		return err
	}
	if err := reshard.Follow(ctx, s.fresh, c, 100*time.Millisecond, nil); err != nil {
		return err
	}
	for _, dsn := range chaosDSNs() {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return err
		}
		cfg.MaxConnIdleTime = time.Second
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return err
		}
		s.pools = append(s.pools, p)
	}
	if s.batch, err = shardpgx.New(shardpgx.Config{Pools: s.pools, Map: s.r.ShardMap(), Layout: chaosLayout}); err != nil {
		return err
	}
	// A laggard: it loads the catalog's map every lag, and hears of no
	// move in between (no notification), as a process that reloads its
	// configuration now and then, or a paused one, would.
	load := func() error {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := c.LoadMap(lctx, s.r.ShardMap()) // which shards are shared too
		return err
	}
	if err := load(); err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(lag)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = load()
			}
		}
	}()
	return nil
}

const chaosSchemaPattern = "chaos_%04d"

// chaosMap returns the fault test's first map: shards 0-3 on pg1 and 4-7
// on pg2, each in its schema, and the others shared in the monolith's
// tables.
func chaosMap() *shardmap.Map {
	assign := make([]int, chaosShards)
	var shared []int
	for s := range assign {
		switch {
		case s >= chaosSchemaShards:
			assign[s] = chaosMono
			shared = append(shared, s)
		case s >= chaosSchemaShards/2:
			assign[s] = 1
		}
	}
	m, err := shardmap.New(shardmap.Config{Databases: chaosNames, LogicalShards: chaosShards,
		SchemaPattern: chaosSchemaPattern, Assign: assign, Shared: shared})
	if err != nil {
		panic(err)
	}
	return m
}

// chaosDSNs are the DSNs of the databases of a helper process, in the
// order of chaosNames.
func chaosDSNs() []string {
	return []string{chaosEnv("DB1"), chaosEnv("DB2"), chaosEnv("MONO")}
}

// chaosEnvDSNs are the environment variables that give a helper process
// the DSNs of c's databases.
func (c *chaosCluster) chaosEnvDSNs() []string {
	return []string{"SHARDID_CHAOS_DB1=" + c.pg1.DSN(), "SHARDID_CHAOS_DB2=" + c.pg2.DSN(), "SHARDID_CHAOS_MONO=" + c.monoDSN()}
}

func chaosCatalog(db *gorm.DB) *reshard.Catalog {
	return &reshard.Catalog{DB: db, Table: "chaos_catalog"}
}

// chaosLeaseStore opens the lease store of a writer's group.
func chaosLeaseStore(kind, addr string) (shardid.LeaseStore, error) {
	switch kind {
	case "redis":
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
			ReadTimeout: time.Second, WriteTimeout: time.Second})
		return &redislease.Store{Client: c, Prefix: "chaos"}, nil
	case "postgres", "mysql":
		// Open without a ping: the store may be down while the process
		// starts; the lease retries.
		var d gorm.Dialector = postgres.Open(addr)
		if kind == "mysql" {
			d = mysql.Open(addr)
		}
		cfg := gormConfig()
		cfg.DisableAutomaticPing = true
		db, err := gorm.Open(d, cfg)
		if err != nil {
			return nil, err
		}
		sqlDB, _ := db.DB()
		sqlDB.SetConnMaxIdleTime(100 * time.Millisecond) // let broken connections go quickly
		return &shardid.SQLLeaseStore{DB: db, Table: "chaos_workers"}, nil
	}
	return nil, fmt.Errorf("unknown store %q", kind)
}

// chaosOutcome classifies the result of a write.
func chaosOutcome(err error) string {
	switch {
	case err == nil:
		return "ack"
	case errors.Is(err, shardid.ErrShardMoving):
		return "moving"
	case errors.Is(err, shardid.ErrLeaseLost):
		return "lease"
	case errors.Is(err, shardid.ErrClockBackwards):
		return "clock"
	case errors.Is(err, shardid.ErrSequenceExhausted):
		return "exhausted"
	case strings.Contains(err.Error(), "names another shard than its sharding key, in a monolith being split"):
		return "idrefused" // the split's triggers (Layout): never right for the writers' rows
	case errors.Is(err, shardid.ErrWrongShard):
		return "wrongshard"
	case strings.Contains(err.Error(), "23505"):
		return "dupkey"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case strings.Contains(err.Error(), "does not exist"):
		return "gone" // an old copy dropped after a move, before the router followed
	case strings.Contains(err.Error(), "connect") || strings.Contains(err.Error(), "EOF") ||
		strings.Contains(err.Error(), "broken pipe") || strings.Contains(err.Error(), "reset by peer") ||
		strings.Contains(err.Error(), "shutting down") || strings.Contains(err.Error(), "57P") ||
		strings.Contains(err.Error(), "closed") || strings.Contains(err.Error(), "starting up"):
		return "db"
	}
	return "other"
}

// chaosMover is a mover process: it moves a shard, as the shardid move
// command would, and is killed at some point by the driver.
func chaosMover() {
	var dbs []*gorm.DB
	for _, dsn := range chaosDSNs() {
		db, err := gorm.Open(postgres.Open(dsn), gormConfig())
		if err != nil {
			fmt.Println("error", err)
			return
		}
		dbs = append(dbs, db)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, ShardMap: chaosMap(), Layout: chaosLayout})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	ctx := context.Background()
	c := chaosCatalog(dbs[0])
	if _, err = c.LoadMap(ctx, r.ShardMap()); err != nil {
		fmt.Println("error", err)
		return
	}
	res, err := chaosMove(ctx, r, c, chaosEnvInt("SHARD"), chaosEnv("TARGET"), nil)
	fmt.Println("moved", res.Fenced, err)
}
