// Package shardidprom exports the figures of shardid's generators, leases,
// routers, segment and ticket allocators to Prometheus.
//
// A Collector reads each component's Stats snapshot when Prometheus scrapes
// it, so the components keep no Prometheus state and pay nothing between
// scrapes:
//
//	c := shardidprom.NewCollector()
//	if err := c.AddLease("ids", lease); err != nil { ... }
//	if err := c.AddRouter("main", router); err != nil { ... }
//	prometheus.MustRegister(c)
//	http.Handle("/metrics", promhttp.Handler())
//
// The metrics are listed in README's "Monitoring" section. Every series
// carries the name given to Add (label generator, lease, router or
// source), so one process can export several components of a kind.
package shardidprom

import (
	"errors"
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shardid/shardid"
)

// These errors can be returned by the Add methods of a Collector.
var (
	// ErrDuplicateName is returned when a component of the same kind was
	// added under the same name: their series would collide.
	ErrDuplicateName = errors.New("shardidprom: name already added")

	// ErrNilSource is returned when the component to add is nil.
	ErrNilSource = errors.New("shardidprom: nil component")
)

// Collector is a prometheus.Collector of shardid components. The zero value
// is not usable; use NewCollector. Collector is safe for concurrent use:
// components may be added while it is scraped.
type Collector struct {
	mu       sync.Mutex // protects the lists below
	gens     []named[*shardid.Generator]
	leases   []named[*shardid.Lease]
	routers  []named[*shardid.Router]
	segments []named[*shardid.SegmentAllocator]
	tickets  []named[*shardid.TicketAllocator]
}

type named[T any] struct {
	name string
	v    T
}

// NewCollector returns a Collector with no components.
func NewCollector() *Collector { return &Collector{} }

func add[T comparable](c *Collector, list *[]named[T], name string, v T) error {
	var zero T
	if v == zero {
		return ErrNilSource
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range *list {
		if x.name == name {
			return errors.Join(ErrDuplicateName, errors.New("shardidprom: "+strconv.Quote(name)))
		}
	}
	*list = append(*list, named[T]{name, v})
	return nil
}

// AddGenerator exports g's figures, labelled generator=name.
func (c *Collector) AddGenerator(name string, g *shardid.Generator) error {
	return add(c, &c.gens, name, g)
}

// AddLease exports l's figures, labelled lease=name, and those of its
// generator, labelled generator=name.
func (c *Collector) AddLease(name string, l *shardid.Lease) error {
	if l == nil {
		return ErrNilSource
	}
	if err := add(c, &c.leases, name, l); err != nil {
		return err
	}
	if err := add(c, &c.gens, name, l.Generator()); err != nil {
		c.mu.Lock()
		c.leases = c.leases[:len(c.leases)-1]
		c.mu.Unlock()
		return err
	}
	return nil
}

// AddRouter exports r's figures, and those of its moves, labelled
// router=name.
func (c *Collector) AddRouter(name string, r *shardid.Router) error {
	return add(c, &c.routers, name, r)
}

// AddSegments exports s's figures, labelled source=name.
func (c *Collector) AddSegments(name string, s *shardid.SegmentAllocator) error {
	return add(c, &c.segments, name, s)
}

// AddTickets exports t's figures, labelled source=name and server (its
// index in TicketConfig.Servers).
func (c *Collector) AddTickets(name string, t *shardid.TicketAllocator) error {
	return add(c, &c.tickets, name, t)
}

// Describe implements [prometheus.Collector]: it sends the descriptions of
// every metric the collector may export.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements [prometheus.Collector]: it takes a snapshot of every
// component and sends its metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	gens, leases, routers := slices.Clone(c.gens), slices.Clone(c.leases), slices.Clone(c.routers)
	segments, tickets := slices.Clone(c.segments), slices.Clone(c.tickets)
	c.mu.Unlock()
	for _, g := range gens {
		collectGenerator(ch, g.name, g.v.Stats())
	}
	for _, l := range leases {
		collectLease(ch, l.name, l.v.Stats())
	}
	for _, r := range routers {
		collectRouter(ch, r.name, r.v.Stats())
	}
	for _, s := range segments {
		collectSegments(ch, s.name, s.v.Stats())
	}
	for _, t := range tickets {
		collectTickets(ch, t.name, t.v.Stats())
	}
}
