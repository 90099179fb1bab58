package shardid

import (
	"slices"
	"strconv"
	"strings"
)

// fanoutError is the error of a fan-out (Gather, GatherPage, Aggregate)
// in which queries failed. Unwrap returns a *ShardError for each shard that
// failed (Shard -1 for a database's own tables), then any other error (the
// context's); the message says each cause once per database, with the
// shards it hit, rather than once per shard.
type fanoutError struct {
	errs []error
	msg  string
}

// Error implements error.
func (e *fanoutError) Error() string { return e.msg }

// Unwrap returns the *ShardError of each failed shard, and other errors.
func (e *fanoutError) Unwrap() []error { return e.errs }

// newFanoutError returns the error of failures and others, or nil when
// there are none.
func newFanoutError(names []string, failures []fanFailure, others []error) error {
	if len(failures) == 0 && len(others) == 0 {
		return nil
	}
	type group struct {
		db     int
		err    error
		shards []int
	}
	var (
		groups []*group
		byKey  = map[string]*group{}
		errs   []error
	)
	for _, f := range failures {
		key := strconv.Itoa(f.db) + "\x00" + f.err.Error()
		g := byKey[key]
		if g == nil {
			g = &group{db: f.db, err: f.err}
			byKey[key] = g
			groups = append(groups, g)
		}
		for _, s := range f.shards {
			g.shards = append(g.shards, s)
			errs = append(errs, &ShardError{Shard: s, Database: names[f.db], Err: f.err})
		}
	}
	var lines []string
	for _, g := range groups {
		slices.Sort(g.shards)
		lines = append(lines, "shardid: database "+names[g.db]+", "+shardList(g.shards)+": "+g.err.Error())
	}
	for _, e := range others {
		errs = append(errs, e)
		lines = append(lines, e.Error())
	}
	return &fanoutError{errs: errs, msg: strings.Join(lines, "\n")}
}

// shardList describes sorted shards in a few words: "shards 4-7, 12 (5
// shards)", "shard 3", "its own tables" for -1; past 8 ranges, the rest
// are counted.
func shardList(shards []int) string {
	var b strings.Builder
	own := len(shards) > 0 && shards[0] == -1
	if own {
		shards = shards[1:]
	}
	switch len(shards) {
	case 0:
	case 1:
		b.WriteString("shard " + strconv.Itoa(shards[0]))
	default:
		b.WriteString("shards ")
		ranges := 0
		for i := 0; i < len(shards); {
			j := i
			for j+1 < len(shards) && shards[j+1] == shards[j]+1 {
				j++
			}
			if ranges == 8 {
				b.WriteString(", …")
				break
			}
			if ranges > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.Itoa(shards[i]))
			if j > i {
				b.WriteString("-" + strconv.Itoa(shards[j]))
			}
			ranges++
			i = j + 1
		}
		b.WriteString(" (" + strconv.Itoa(len(shards)) + " shards)")
	}
	if own {
		if b.Len() > 0 {
			b.WriteString(" and ")
		}
		b.WriteString("its own tables")
	}
	return b.String()
}
