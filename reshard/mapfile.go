package reshard

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/shardid/shardid"
)

// LoadMapFile sets r's shard map from a JSON file, for static set-ups
// without a catalog. The file maps each database name to the shards it
// holds, as single shards or ranges:
//
//	{"pg1": ["0-999"], "pg2": ["1000-1340", "1342-1999"], "pg3": ["1341"]}
//
// Every logical shard must be named exactly once. A file that breaks these
// rules gives an error matching ErrInvalidMap.
func LoadMapFile(r *shardid.Router, path string) error {
	names, shards := r.Names(), r.LogicalShards()
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("shardid: reading the shard map: %w", err)
	}
	var spec map[string][]string
	if err := json.Unmarshal(b, &spec); err != nil {
		return withDetail(ErrInvalidMap, path+": "+err.Error())
	}
	m := make([]int, shards)
	for i := range m {
		m[i] = -1
	}
	for name, ranges := range spec {
		d := slices.Index(names, name)
		if d < 0 {
			return withDetail(ErrInvalidMap, fmt.Sprintf("%s: unknown database %q", path, name))
		}
		for _, rg := range ranges {
			lo, hi, err := parseRange(rg)
			if err != nil || lo < 0 || hi >= shards || lo > hi {
				return withDetail(ErrInvalidMap, fmt.Sprintf("%s: %q is not a range of shards in [0, %d)", path, rg, shards))
			}
			for s := lo; s <= hi; s++ {
				if m[s] >= 0 {
					return withDetail(ErrInvalidMap, fmt.Sprintf("%s: shard %d is named twice", path, s))
				}
				m[s] = d
			}
		}
	}
	if i := slices.Index(m, -1); i >= 0 {
		return withDetail(ErrInvalidMap, fmt.Sprintf("%s: shard %d is not named", path, i))
	}
	return r.SetMap(m)
}

func parseRange(s string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(strings.TrimSpace(s), "-")
	if lo, err = strconv.Atoi(a); err != nil {
		return 0, 0, err
	}
	if !isRange {
		return lo, lo, nil
	}
	hi, err = strconv.Atoi(b)
	return lo, hi, err
}

// WriteMapFile writes r's current shard map in the form LoadMapFile reads,
// with contiguous shards as ranges.
func WriteMapFile(r *shardid.Router, path string) error {
	names := r.Names()
	m := r.Map()
	spec := map[string][]string{}
	for lo := 0; lo < len(m); {
		hi := lo
		for hi+1 < len(m) && m[hi+1] == m[lo] {
			hi++
		}
		rg := strconv.Itoa(lo)
		if hi > lo {
			rg += "-" + strconv.Itoa(hi)
		}
		spec[names[m[lo]]] = append(spec[names[m[lo]]], rg)
		lo = hi + 1
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
