package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
)

// splitLegacy records where each row of the monolith whose ID is older than
// adopted belongs (reshard.ReadLegacyIDs) and keeps the record in the
// catalog (Catalog.SaveLegacy), for the routers and the split's checks.
func splitLegacy(ctx context.Context, w io.Writer, env *splitEnv, adopted time.Time) error {
	if env.cfg.Layout.Unit() == 0 {
		return badFlag("legacy needs the layout the plugin issues IDs in: add \"Layout\" to the configuration (%s)", layoutNames())
	}
	v := env.cfg.Map.Load()
	mono := env.cfg.Map.DatabaseIndex(env.cfg.Monolith)
	for s := range env.cfg.Map.LogicalShards() {
		if !v.Shared(s) || v.DB(s) != mono {
			// Their rows left the monolith: a record read now would not
			// hold them, and routers given it would lose their IDs.
			return fmt.Errorf("shardid: shard %d is split already: record the legacy IDs before the first batch (the catalog's record, if any, stays as it is)", s)
		}
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: env.dbs, ShardMap: env.cfg.Map, Layout: env.cfg.Layout})
	if err != nil {
		return err
	}
	l, err := reshard.ReadLegacyIDs(ctx, env.dbs[mono], r, adopted, env.cfg.Tables...)
	if err != nil {
		return err
	}
	was, err := env.cfg.Catalog.LoadLegacy(ctx)
	if err != nil {
		return err
	}
	if err := env.cfg.Catalog.SaveLegacy(ctx, l); err != nil {
		return err
	}
	fmt.Fprintf(w, "legacy IDs of %s, issued before %s:\n", env.cfg.Monolith, adopted.UTC().Format(time.RFC3339))
	for _, t := range env.cfg.Tables {
		fmt.Fprintf(w, "  %-24s %12d\n", t.Name, l.Rows(t.Name))
	}
	fmt.Fprintf(w, "recorded in the catalog: IDs up to %d are legacy, the layout's begin at %d\n", l.Max(), l.Floor())
	if was != nil {
		a, _ := was.MarshalBinary()
		b, _ := l.MarshalBinary()
		if !bytes.Equal(a, b) {
			fmt.Fprintln(w, "it replaced another record: rebuild every router from the catalog's record before the first batch (a router keeps the record it was built with)")
		}
	}
	return nil
}
