package main

import (
	"bufio"

	"github.com/shardid/shardid"
	"github.com/spf13/cobra"
)

func newNewCmd(s *streams) *cobra.Command {
	var (
		layout             string
		shard, key, worker optInt
		shards, n          int
	)
	cmd := &cobra.Command{
		Use:   "new [flags]",
		Short: "make new IDs",
		Long: "new prints new IDs, one a line, of the logical shard --shard N, or of the shard a sharding key\n" +
			"falls on (--key K: K % --shards).",
		Example: "  shardid new --key 31341 -n 3\n  shardid new --layout snowflake --worker 7 --shard 10",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			if shard.set && key.set {
				return badFlag("give --shard or --key, not both")
			}
			l, err := layoutFor(layout, "")
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("shards") && !key.set {
				return badFlag("--shards is for --key")
			}
			sh := int64(0)
			switch {
			case shard.set:
				if err := inRange("shard", shard.v, 0, int64(l.Shards()-1), "a logical shard"); err != nil {
					return err
				}
				sh = shard.v
			case key.set:
				if key.v < 0 {
					return badFlag("--key %d: want a sharding key of 0 or more", key.v)
				}
				if err := inRange("shards", int64(shards), 1, int64(l.Shards()), "a number of logical shards"); err != nil {
					return err
				}
				sh = key.v % int64(shards)
			}
			opts, err := workerFlag(l, worker)
			if err != nil {
				return err
			}
			if n < 1 {
				return badFlag("-n %d: want a count of 1 or more", n)
			}
			g, err := shardid.NewGenerator(l, opts...)
			if err != nil {
				return err
			}
			w := bufio.NewWriter(s.out)
			ids := make([]shardid.ID, min(n, 4096))
			for left := n; left > 0; left -= len(ids) {
				ids = ids[:min(left, len(ids))]
				if err := g.NextN(int(sh), ids); err != nil {
					return err
				}
				for _, id := range ids {
					b, _ := id.AppendText(nil)
					w.Write(append(b, '\n'))
				}
			}
			return w.Flush()
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&layout, "layout", "instagram", "the layout: "+layoutNames())
	fs.Var(&shard, "shard", "the logical shard `N` of the IDs (0 when neither --shard nor --key is given)")
	fs.Var(&key, "key", "a sharding key `K`, 0 or more: the shard is K % --shards")
	intFlag(fs, &shards, "shards", shardid.DefaultLogicalShards, "the number of logical shards, for --key")
	fs.Var(&worker, "worker", "the worker id `W`, required by layouts with worker bits")
	fs.VarP(intValue{&n}, "count", "n", "how many IDs, 1 or more")
	n = 1
	fs.Lookup("count").DefValue = "1"
	completeWords(cmd, "layout", sortedLayouts()...)
	return cmd
}

// workerFlag checks --worker against layout l: required when l has worker
// bits, within its worker ids.
func workerFlag(l shardid.Layout, worker optInt) ([]shardid.GeneratorOption, error) {
	switch {
	case worker.set:
		if err := inRange("worker", worker.v, 0, int64(l.Workers()-1), "a worker id of layout "+l.Name()); err != nil {
			return nil, err
		}
		return []shardid.GeneratorOption{shardid.WithWorker(int(worker.v))}, nil
	case l.Workers() > 1:
		return nil, badFlag("--worker is required: layout %s has %d worker ids", l.Name(), l.Workers())
	}
	return nil, nil
}
