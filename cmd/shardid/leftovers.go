package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
)

// stageHook is called as a move or a split reaches each stage (OnStage),
// with the command's interrupt. It does nothing; tests pause them there.
var stageHook = func(stage string, in *interrupt) {}

// moveFlags returns the flags that name a catalog, for the advice the
// command prints.
func moveFlags(table string, shard int) string {
	f := "shardid move --catalog DSN"
	if table != "" {
		f += " --catalog-table " + table
	}
	return fmt.Sprintf("%s --shard %d", f, shard)
}

// leavesHint says what a move of shard to target killed now may leave, and
// how to see and remove it.
func leavesHint(_, table string, shard int, target string) string {
	f := moveFlags(table, shard)
	return fmt.Sprintf("the move of shard %d may leave capture triggers and a change log on its source, a fence there (it lapses after --fence-for),\n"+
		"and the copy it was building on %s. See them: %s --to %s --dry-run\nremove them: %s --abort", shard, target, f, target, f)
}

// cleanUp drops what a move of shard to target stopped before its fence
// for good left on other databases (the copy it was building, if the move
// created one and did not drop it), then reports what is left, if
// anything. It runs even once ctx is cancelled.
func cleanUp(ctx context.Context, w io.Writer, r *shardid.Router, shard int, target string, created bool) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	done, err := reshard.DropUnfinishedCopies(cctx, r, shard)
	if errors.Is(err, reshard.ErrMoveInProgress) {
		return // another mover's work, not ours
	}
	for _, s := range done.Staging {
		fmt.Fprintf(w, "cleaning up: dropped the staging schema %s on %s\n", s.Schema, s.Database)
	}
	dropped := false
	for _, c := range done.Copies {
		fmt.Fprintf(w, "cleaning up: dropped the unfinished copy of shard %d on %s\n", shard, c.Database)
		dropped = dropped || c.Database == target
	}
	if err != nil {
		fmt.Fprintf(w, "cleaning up: %v\n", err)
	}
	l, err := reshard.FindLeftovers(cctx, r, shard)
	if err != nil {
		fmt.Fprintf(w, "cleaning up: looking for leftovers: %v\n", err)
		return
	}
	if created && !dropped && !slices.ContainsFunc(l.Copies, func(c reshard.CopyLeft) bool { return c.Database == target }) {
		fmt.Fprintf(w, "cleaning up: the move dropped the unfinished copy of shard %d on %s\n", shard, target)
	}
	if l.Moving || len(l.Capture) > 0 || l.Fence != nil || len(l.Staging) > 0 || hasUnfinished(l) {
		printLeftovers(w, l, "")
	}
}

func hasUnfinished(l reshard.Leftovers) bool {
	for _, c := range l.Copies {
		if c.Unfinished {
			return true
		}
	}
	return false
}

// printLeftovers prints l and how to remove each thing in it. table is the
// --catalog-table flag, for the advice.
func printLeftovers(w io.Writer, l reshard.Leftovers, table string) {
	if l.Empty() {
		fmt.Fprintf(w, "leftovers: none (no change log, fence or other copy of shard %d)\n", l.Shard)
		return
	}
	f := moveFlags(table, l.Shard)
	fmt.Fprintf(w, "leftovers of moves of shard %d (it lives on %s):\n", l.Shard, l.Home)
	if l.Moving {
		fmt.Fprintln(w, "  a move of the shard is running now (it holds the move lock): what follows may be its work under way")
	}
	abort := false
	for _, c := range l.Capture {
		var parts []string
		if len(c.Triggers) > 0 {
			parts = append(parts, "capture triggers on "+strings.Join(c.Triggers, ", "))
		}
		if c.ChangeLog {
			parts = append(parts, fmt.Sprintf("a change log of %d changes", c.Changes))
		}
		what := strings.Join(parts, " and ")
		if c.Database == l.Home {
			fmt.Fprintf(w, "  %s: %s in %s: every write to the shard is still logged\n", c.Database, what, l.Schema)
			abort = true
		} else {
			fmt.Fprintf(w, "  %s: %s in %s, a copy the shard no longer lives in\n", c.Database, what, l.Schema)
		}
	}
	sealed := false
	if fe := l.Fence; fe != nil {
		switch {
		case fe.Sealed:
			sealed = true
			fmt.Fprintf(w, "  %s: fenced for good by a move that did not flip the catalog: run that move again to finish it (%s --to TARGET)\n", fe.Database, f)
		case fe.MoverOnly:
			fmt.Fprintf(w, "  %s: its tables take no writes but a mover's: a move died after its flip: --abort lets writes through\n", fe.Database)
			abort = true
		case fe.ForGood:
			fmt.Fprintf(w, "  %s: fenced with no end (Fence for 0): writes fail with ErrShardMoving until --abort\n", fe.Database)
			abort = true
		default:
			fmt.Fprintf(w, "  %s: fenced for %v more: writes fail with ErrShardMoving until then, or --abort\n", fe.Database,
				time.Duration(fe.Seconds*float64(time.Second)).Round(time.Second))
			abort = true
		}
	}
	for _, c := range l.Copies {
		switch {
		case c.Sealed:
			fmt.Fprintf(w, "  %s: the old copy of a finished move, fenced for good: drop it with %s --drop-copy-on %s\n", c.Database, f, c.Database)
		case c.Unfinished:
			fmt.Fprintf(w, "  %s: the unfinished copy of a move (%s) in %s\n", c.Database, tablesWord(c.Tables), l.Schema)
			abort = true
		default:
			fmt.Fprintf(w, "  %s: a copy of %s (%s) that no move accounts for: not touched; look at it, and drop it with --drop-copy-on %s\n",
				c.Database, l.Schema, tablesWord(c.Tables), c.Database)
		}
	}
	for _, s := range l.Staging {
		fmt.Fprintf(w, "  %s: the staging schema %s of a move killed while it created the copy\n", s.Database, s.Schema)
		abort = true
	}
	switch {
	case sealed:
		fmt.Fprintf(w, "finish the move first (%s --to TARGET); --abort cannot lift a move's seal\n", f)
	case abort && l.Moving:
		fmt.Fprintf(w, "once the move has ended, if it left them: %s --abort\n", f)
	case abort:
		fmt.Fprintf(w, "remove them: %s --abort (lifts the fence, drops the change log, its triggers and the unfinished copies)\n", f)
	}
}

// tablesWord says "1 table", "2 tables".
func tablesWord(n int) string {
	if n == 1 {
		return "1 table"
	}
	return fmt.Sprintf("%d tables", n)
}
