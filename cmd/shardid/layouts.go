package main

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shardid/shardid"
)

// layouts are the 64-bit layouts the command knows by name. pinterest and
// uuidshort are schemes of their own, handled apart.
var layouts = map[string]shardid.Layout{
	"instagram":     shardid.Instagram,
	"snowflake":     shardid.Snowflake,
	"sonyflake":     shardid.Sonyflake,
	"simpleflake":   shardid.Simpleflake,
	"simpleflake63": shardid.Simpleflake63,
}

func layoutNames() string { return strings.Join(sortedLayouts(), ", ") }

// sortedLayouts returns the names of the 64-bit layouts, sorted.
func sortedLayouts() []string {
	var names []string
	for n := range layouts {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// decodeLayoutNames are the names decode accepts: the 64-bit layouts, and
// the schemes of their own.
func decodeLayoutNames() string { return layoutNames() + ", pinterest, uuidshort" }

// layoutFor returns the named layout, with its epoch replaced when epoch is
// not empty: an RFC 3339 time or Unix milliseconds.
func layoutFor(name, epoch string) (shardid.Layout, error) {
	l, ok := layouts[name]
	if !ok {
		return shardid.Layout{}, badFlag("--layout %q: unknown layout (want %s)", name, layoutNames())
	}
	if epoch == "" {
		return l, nil
	}
	t, err := parseEpoch(epoch)
	if err != nil {
		return shardid.Layout{}, err
	}
	cfg := l.Config()
	cfg.Epoch = t
	l, err = shardid.NewLayout(cfg)
	if err != nil {
		// The layout itself is fine: only the epoch can make it fail.
		return shardid.Layout{}, badFlag("--epoch %q: the layout %s cannot start then: %v", epoch, name, err)
	}
	return l, nil
}

func parseEpoch(s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, badFlag("--epoch %q: want an RFC 3339 time or Unix milliseconds", s)
	}
	return t, nil
}
