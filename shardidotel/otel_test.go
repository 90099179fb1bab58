package shardidotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardidotel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// point finds the value of instrument name with exactly the attributes kv.
func point(t *testing.T, rm metricdata.ResourceMetrics, name string, kv ...attribute.KeyValue) (float64, bool) {
	t.Helper()
	want := attribute.NewSet(kv...)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			var pts []metricdata.DataPoint[float64]
			switch d := m.Data.(type) {
			case metricdata.Sum[float64]:
				if !d.IsMonotonic {
					t.Errorf("%s is not monotonic", name)
				}
				pts = d.DataPoints
			case metricdata.Gauge[float64]:
				pts = d.DataPoints
			default:
				t.Fatalf("%s: unexpected data %T", name, m.Data)
			}
			for _, p := range pts {
				if p.Attributes.Equals(&want) {
					return p.Value, true
				}
			}
		}
	}
	return 0, false
}

// TestRegister reports a generator (IDs, a clock step back, an error) and a
// lease through a manual reader, before and after the lease closes.
func TestRegister(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	g, err := shardid.NewGenerator(shardid.Instagram, shardid.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := g.Next(3); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Next(-1); !errors.Is(err, shardid.ErrShardRange) {
		t.Fatal(err)
	}
	layout, _ := shardid.Instagram.WithWorkerBits(2)
	lease, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: &shardid.FileLeaseStore{Path: t.TempDir() + "/l"},
		Layout: layout, Prefer: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Close(ctx)

	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
	if _, err := shardidotel.Register(meter, shardidotel.Sources{Leases: map[string]*shardid.Lease{"l": nil}}); !errors.Is(err, shardidotel.ErrNilSource) {
		t.Errorf("a nil lease: %v, want ErrNilSource", err)
	}
	reg, err := shardidotel.Register(meter, shardidotel.Sources{
		Generators: map[string]*shardid.Generator{"g": g},
		Leases:     map[string]*shardid.Lease{"l": lease},
	})
	if err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	g1 := attribute.String("generator", "g")
	l1 := attribute.String("lease", "l")
	for _, c := range []struct {
		name string
		kv   []attribute.KeyValue
		want float64
	}{
		{"shardid.ids.issued", []attribute.KeyValue{g1}, 4},
		{"shardid.generator.errors", []attribute.KeyValue{g1, attribute.String("kind", "shard_range")}, 1},
		{"shardid.generator.errors", []attribute.KeyValue{g1, attribute.String("kind", "clock_backwards")}, 0},
		{"shardid.lease.worker", []attribute.KeyValue{l1}, 2},
		{"shardid.lease.state", []attribute.KeyValue{l1, attribute.String("state", "held")}, 1},
		{"shardid.lease.state", []attribute.KeyValue{l1, attribute.String("state", "closed")}, 0},
		{"shardid.lease.renewals", []attribute.KeyValue{l1}, 1},
		{"shardid.ids.issued", []attribute.KeyValue{attribute.String("generator", "l")}, float64(lease.Generator().Stats().Issued)},
	} {
		v, ok := point(t, rm, c.name, c.kv...)
		if !ok || v != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.kv, v, ok, c.want)
		}
	}
	if v, ok := point(t, rm, "shardid.lease.expires_in", l1); !ok || v <= 0 {
		t.Errorf("shardid.lease.expires_in = %v, %v", v, ok)
	}

	if err := lease.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rm = metricdata.ResourceMetrics{}
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	if v, _ := point(t, rm, "shardid.lease.state", l1, attribute.String("state", "closed")); v != 1 {
		t.Errorf("after Close, state closed = %v, want 1", v)
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	rm = metricdata.ResourceMetrics{}
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	if _, ok := point(t, rm, "shardid.ids.issued", g1); ok {
		t.Error("reported after Unregister")
	}
}
