package shardidprom_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardidprom"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// clock is a clock the test moves by hand.
type clock struct {
	mu sync.Mutex // protects t
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type Row struct {
	ID     shardid.ID
	UserID int64 `shardid:"key"`
}

func openSQLite(t *testing.T) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(sqlite.Open(t.TempDir()+"/db?_pragma=busy_timeout(5000)"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return db
}

// scrape fetches the exposition from the handler over HTTP and parses it.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	// Legacy validation: every name must be a classic Prometheus name.
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	return fams
}

// series is one sample of a scrape: a family name and its labels as
// name=value pairs joined by commas, in label order.
type series struct{ name, labels string }

func samples(fams map[string]*dto.MetricFamily) map[series]*dto.Metric {
	out := map[series]*dto.Metric{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			out[series{name, strings.Join(ls, ",")}] = m
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

// TestCollectorOverHTTP exports a generator, a lease and a router, drives
// each to events (IDs, a clock step back, an error, a failed statement, a
// Gather), serves a registry with promhttp and checks the scraped series.
func TestCollectorOverHTTP(t *testing.T) {
	ctx := context.Background()
	c0 := &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	g, err := shardid.NewGenerator(shardid.Instagram, shardid.WithClock(c0.Now))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := g.Next(7); err != nil {
			t.Fatal(err)
		}
	}
	c0.Add(-200 * time.Millisecond)
	if _, err := g.Next(7); err != nil {
		t.Fatal(err)
	}
	c0.Add(-time.Hour)
	if _, err := g.Next(7); !errors.Is(err, shardid.ErrClockBackwards) {
		t.Fatal(err)
	}

	layout, _ := shardid.Instagram.WithWorkerBits(3)
	lease, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: &shardid.FileLeaseStore{Path: t.TempDir() + "/leases"},
		Layout: layout, Prefer: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Close(ctx)
	// Generators of one layout and worker share their state in a process,
	// and so their figures: count from here (go test -count=2).
	base := lease.Generator().Stats().Issued
	ids := make([]shardid.ID, 5)
	if err := lease.Generator().NextN(1, ids); err != nil {
		t.Fatal(err)
	}

	plugin, err := shardid.NewPlugin(shardid.PluginConfig{Generator: lease.Generator(), LogicalShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	a, b := openSQLite(t), openSQLite(t)
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{a, b}, Names: []string{"a", "b"},
		LogicalShards: 4, Plugin: plugin})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.AutoMigrate(&Row{}); err != nil { // b has no table: its statements fail
		t.Fatal(err)
	}
	if err := r.ForKey(0).Create(&Row{UserID: 0}).Error; err != nil {
		t.Fatal(err)
	}
	if err := r.ForKey(3).Create(&Row{UserID: 3}).Error; err == nil {
		t.Fatal("a create without a table succeeded")
	}
	_, _ = shardid.Gather(ctx, r, shardid.GatherOptions{}, func(x Row) shardid.ID { return x.ID },
		func(ctx context.Context, db *gorm.DB) ([]Row, error) {
			var out []Row
			return out, db.Find(&out).Error
		})

	col := shardidprom.NewCollector()
	for _, err := range []error{col.AddGenerator("ids", g), col.AddLease("leased", lease), col.AddRouter("main", r)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := col.AddGenerator("ids", g); !errors.Is(err, shardidprom.ErrDuplicateName) {
		t.Errorf("adding a generator twice under one name: %v, want ErrDuplicateName", err)
	}
	if err := col.AddRouter("other", nil); !errors.Is(err, shardidprom.ErrNilSource) {
		t.Errorf("adding a nil router: %v, want ErrNilSource", err)
	}
	if err := col.AddGenerator("leased", g); !errors.Is(err, shardidprom.ErrDuplicateName) {
		t.Errorf("a generator under the name of a lease (whose generator is exported): %v, want ErrDuplicateName", err)
	}

	// A pedantic registry checks that every metric matches its description.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	got := samples(scrape(t, srv.URL))

	want := map[series]float64{
		{"shardid_ids_issued_total", "generator=ids"}:                               11,
		{"shardid_clock_backwards_total", "generator=ids"}:                          2,
		{"shardid_clock_backwards_max_seconds", "generator=ids"}:                    3600.2, // 200ms, then 1h more
		{"shardid_generator_errors_total", "generator=ids,kind=clock_backwards"}:    1,
		{"shardid_generator_errors_total", "generator=ids,kind=sequence_exhausted"}: 0,
		{"shardid_generator_waits_total", "generator=ids"}:                          0,
		{"shardid_generator_worker", "generator=ids"}:                               0,
		{"shardid_ids_issued_total", "generator=leased"}:                            float64(base + 7), // 5, and 2 rows created
		{"shardid_generator_worker", "generator=leased"}:                            5,
		{"shardid_lease_state", "lease=leased,state=held"}:                          1,
		{"shardid_lease_state", "lease=leased,state=lost"}:                          0,
		{"shardid_lease_state", "lease=leased,state=renewing"}:                      0,
		{"shardid_lease_state", "lease=leased,state=closed"}:                        0,
		{"shardid_lease_worker", "lease=leased"}:                                    5,
		{"shardid_lease_renewals_total", "lease=leased"}:                            1,
		{"shardid_lease_renewal_duration_seconds", "lease=leased"}:                  1, // one observation
		{"shardid_lease_losses_total", "lease=leased"}:                              0,
		{"shardid_router_errors_total", "database=a,router=main"}:                   0,
		{"shardid_router_errors_total", "database=b,router=main"}:                   2, // the create and Gather's query
		{"shardid_router_shard_errors_total", "database=b,router=main,shard=3"}:     1,
		{"shardid_router_shard_errors_total", "database=b,router=main,shard=2"}:     1,
		{"shardid_router_logical_shards", "database=a,router=main"}:                 2,
		{"shardid_router_fenced_writes_total", "router=main"}:                       0,
		{"shardid_router_gather_duration_seconds", "router=main"}:                   1,
	}
	for s, v := range want {
		m, ok := got[s]
		if !ok {
			t.Errorf("no series %s{%s}", s.name, s.labels)
			continue
		}
		if value(m) != v {
			t.Errorf("%s{%s} = %v, want %v", s.name, s.labels, value(m), v)
		}
	}
	if m := got[series{"shardid_lease_expires_in_seconds", "lease=leased"}]; m == nil || value(m) <= 0 || value(m) > 10 {
		t.Errorf("shardid_lease_expires_in_seconds = %v, want in (0, 10]", m)
	}
	if h := got[series{"shardid_lease_renewal_duration_seconds", "lease=leased"}].GetHistogram(); h == nil || len(h.GetBucket()) == 0 {
		t.Errorf("the renewal histogram has no buckets: %v", h)
	}
	if _, ok := got[series{"shardid_router_shard_errors_total", "database=a,router=main,shard=0"}]; ok {
		t.Error("a shard with no errors has a series")
	}

	// The lease closed: the state moves.
	if err := lease.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got = samples(scrape(t, srv.URL))
	if v := value(got[series{"shardid_lease_state", "lease=leased,state=closed"}]); v != 1 {
		t.Errorf("after Close, state=closed is %v, want 1", v)
	}
}

// TestCollectorLint runs Prometheus's own linter over every metric, with
// every kind of component present.
func TestCollectorLint(t *testing.T) {
	g, err := shardid.NewGenerator(shardid.Instagram)
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{openSQLite(t)}, LogicalShards: 2})
	if err != nil {
		t.Fatal(err)
	}
	c := shardidprom.NewCollector()
	if err := c.AddGenerator("g", g); err != nil {
		t.Fatal(err)
	}
	if err := c.AddRouter("r", r); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestCollectorConcurrentAdd scrapes while components are added.
func TestCollectorConcurrentAdd(t *testing.T) {
	c := shardidprom.NewCollector()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 50 {
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range 50 {
		g, err := shardid.NewGenerator(shardid.Instagram)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddGenerator(strings.Repeat("g", i+1), g); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}
