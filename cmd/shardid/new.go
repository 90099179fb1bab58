package main

import (
	"bufio"
	"io"

	"github.com/shardid/shardid"
)

func runNew(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("new", "[--layout L] [--shard N | --key K [--shards S]] [--worker W] [-n COUNT]", stderr)
	layout := fs.String("layout", "instagram", "the layout: "+layoutNames())
	var shard, key, worker optInt
	fs.Var(&shard, "shard", "the logical shard `N` of the IDs (0 when neither --shard nor --key is given)")
	fs.Var(&key, "key", "a sharding key `K`, 0 or more: the shard is K % --shards")
	shards := fs.Int("shards", shardid.DefaultLogicalShards, "the number of logical shards, for --key")
	fs.Var(&worker, "worker", "the worker id `W`, required by layouts with worker bits")
	n := fs.Int("n", 1, "how many IDs, 1 or more")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if shard.set && key.set {
		return badFlag("give --shard or --key, not both")
	}
	l, err := layoutFor(*layout, "")
	if err != nil {
		return err
	}
	if given(fs)["shards"] && !key.set {
		return badFlag("--shards is for --key")
	}
	s := int64(0)
	switch {
	case shard.set:
		if err := inRange("shard", shard.v, 0, int64(l.Shards()-1), "a logical shard"); err != nil {
			return err
		}
		s = shard.v
	case key.set:
		if key.v < 0 {
			return badFlag("--key %d: want a sharding key of 0 or more", key.v)
		}
		if err := inRange("shards", int64(*shards), 1, int64(l.Shards()), "a number of logical shards"); err != nil {
			return err
		}
		s = key.v % int64(*shards)
	}
	var opts []shardid.GeneratorOption
	switch {
	case worker.set:
		if err := inRange("worker", worker.v, 0, int64(l.Workers()-1), "a worker id of layout "+l.Name()); err != nil {
			return err
		}
		opts = append(opts, shardid.WithWorker(int(worker.v)))
	case l.Workers() > 1:
		return badFlag("--worker is required: layout %s has %d worker ids", l.Name(), l.Workers())
	}
	if *n < 1 {
		return badFlag("-n %d: want a count of 1 or more", *n)
	}
	g, err := shardid.NewGenerator(l, opts...)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	ids := make([]shardid.ID, min(*n, 4096))
	for left := *n; left > 0; left -= len(ids) {
		ids = ids[:min(left, len(ids))]
		if err := g.NextN(int(s), ids); err != nil {
			return err
		}
		for _, id := range ids {
			b, _ := id.AppendText(nil)
			w.Write(append(b, '\n'))
		}
	}
	return w.Flush()
}
