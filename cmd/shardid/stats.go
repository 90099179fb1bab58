package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardid/shardid"
)

// printStats prints the generator's and the router's figures, the ones
// package shardidprom exports as metrics.
func printStats(out io.Writer, g shardid.GeneratorStats, r shardid.RouterStats) {
	fmt.Fprintln(out, "monitoring (Generator.Stats and Router.Stats, what shardidprom exports):")
	fmt.Fprintf(out, "  generator: %d IDs issued; %d waits for the next millisecond (%v in all, %d shards saturated); "+
		"clock behind %d times (at most %v); %d errors\n",
		g.Issued, g.Waits, g.WaitTime.Round(time.Microsecond), len(g.SaturatedShards),
		g.ClockBehind, g.MaxClockBehind, g.Errors.Total())
	var dbs []string
	for _, d := range r.Databases {
		dbs = append(dbs, fmt.Sprintf("%s %d", d.Name, d.Errors))
	}
	fmt.Fprintf(out, "  router: %d Gather fan-outs, %v on average; failed statements per database: %s; %d shards failing; %d writes fenced\n",
		r.Gather.Count, r.Gather.Mean().Round(time.Microsecond), strings.Join(dbs, ", "), len(r.FailingShards), r.FencedWrites)
}

// moveStats returns the router's figures of the last move of shard.
func moveStats(r *shardid.Router, shard int) shardid.MoveStats {
	for _, m := range r.Stats().Moves {
		if m.Shard == shard {
			return m
		}
	}
	return shardid.MoveStats{Shard: shard}
}
