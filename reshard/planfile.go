package reshard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// ParsePlan reads a plan stored as JSON (as json.Marshal writes a Plan),
// strictly: an unknown field, a missing one, trailing data or a plan
// PlanRebalance could not have made give an error matching ErrInvalidPlan.
// It does not check the plan against a map: see Plan.Check.
func ParsePlan(data []byte) (Plan, error) {
	var p Plan
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Plan{}, withDetail(ErrInvalidPlan, err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Plan{}, withDetail(ErrInvalidPlan, "data after the plan")
	}
	// Required fields, told from their zero values by the raw object.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return Plan{}, withDetail(ErrInvalidPlan, err.Error())
	}
	for _, f := range []string{"By", "Tolerance", "Databases", "Moves", "CatalogVersion", "Map", "Before", "After", "Balanced"} {
		if _, ok := raw[f]; !ok {
			return Plan{}, withDetail(ErrInvalidPlan, "no field "+f)
		}
	}
	if err := p.validate(); err != nil {
		return Plan{}, err
	}
	return p, nil
}

// validate checks that p is a plan PlanRebalance could have made.
func (p Plan) validate() error {
	bad := func(format string, a ...any) error { return withDetail(ErrInvalidPlan, fmt.Sprintf(format, a...)) }
	if p.By != ByBytes && p.By != ByRows {
		return bad("By %q: want %q or %q", p.By, ByBytes, ByRows)
	}
	if math.IsNaN(p.Tolerance) || p.Tolerance <= 0 || p.Tolerance > 1 {
		return bad("Tolerance %v: want a fraction above 0, at most 1", p.Tolerance)
	}
	if p.CatalogVersion < 0 {
		return bad("CatalogVersion %d", p.CatalogVersion)
	}
	if len(p.Databases) == 0 {
		return bad("no Databases")
	}
	for i, n := range p.Databases {
		if n == "" || slices.Index(p.Databases, n) != i {
			return bad("Databases %q: an empty name, or a name given twice", p.Databases)
		}
	}
	if len(p.Map) == 0 {
		return bad("no Map")
	}
	for s, d := range p.Map {
		if d < 0 || d >= len(p.Databases) {
			return bad("Map: shard %d on database %d of %d", s, d, len(p.Databases))
		}
	}
	for _, l := range [][]DatabaseLoad{p.Before, p.After} {
		if len(l) != len(p.Databases) {
			return bad("Before and After: want a load for each of the %d databases", len(p.Databases))
		}
		for i, d := range l {
			if d.Database != p.Databases[i] {
				return bad("Before and After: load %d is of %q, want %q", i, d.Database, p.Databases[i])
			}
		}
	}
	seen := map[int]bool{}
	for i, mv := range p.Moves {
		switch {
		case mv.Shard < 0 || mv.Shard >= len(p.Map):
			return bad("move %d: shard %d is not in [0, %d)", i+1, mv.Shard, len(p.Map))
		case seen[mv.Shard]:
			return bad("move %d: shard %d moves twice", i+1, mv.Shard)
		case mv.From != p.Databases[p.Map[mv.Shard]]:
			return bad("move %d: shard %d from %q, but the plan's map puts it on %s", i+1, mv.Shard, mv.From, p.Databases[p.Map[mv.Shard]])
		case !slices.Contains(p.Databases, mv.To) || mv.To == mv.From:
			return bad("move %d: shard %d to %q: not another of the databases %q", i+1, mv.Shard, mv.To, p.Databases)
		}
		seen[mv.Shard] = true
	}
	return nil
}

// Check checks p against m, the map now (database indexes in the order of
// p.Databases, as the router's): it returns an error matching
// ErrStalePlan when a shard p does not move is no longer where p found it,
// or a shard p moves is on neither the move's source nor its target. A
// plan partly carried out passes. A plan without a Map (made by hand)
// passes if its moves fit m. Errors in p itself match ErrInvalidPlan.
func (p Plan) Check(m []int, names []string) error {
	if !slices.Equal(p.Databases, names) {
		return withDetail(ErrStalePlan, fmt.Sprintf("the plan is for the databases %q, the router has %q: make a new plan", p.Databases, names))
	}
	if p.Map == nil {
		return nil
	}
	if err := p.validate(); err != nil {
		return err
	}
	if len(m) != len(p.Map) {
		return withDetail(ErrStalePlan, fmt.Sprintf("the plan maps %d logical shards, the map has %d: make a new plan", len(p.Map), len(m)))
	}
	to := map[int]int{}
	for _, mv := range p.Moves {
		to[mv.Shard] = slices.Index(names, mv.To)
	}
	for s, d := range m {
		if d == p.Map[s] {
			continue
		}
		if t, ok := to[s]; ok && d == t {
			continue
		}
		if d < 0 || d >= len(names) {
			return withDetail(ErrStalePlan, fmt.Sprintf("shard %d is on database %d", s, d))
		}
		want := names[p.Map[s]]
		if t, ok := to[s]; ok {
			want += " or " + names[t]
		}
		return withDetail(ErrStalePlan, fmt.Sprintf("shard %d is on %s now, the plan (catalog version %d) expects it on %s: make a new plan",
			s, names[d], p.CatalogVersion, want))
	}
	return nil
}
