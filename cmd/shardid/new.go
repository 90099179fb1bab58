package main

import (
	"bufio"
	"fmt"
	"io"

	"github.com/shardid/shardid"
)

func runNew(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("new", "[--layout L] [--shard N | --key K] [--worker W] [-n COUNT]", stderr)
	layout := fs.String("layout", "instagram", "the layout: "+layoutNames())
	shard := fs.Int("shard", -1, "the logical shard (default 0)")
	key := fs.Int64("key", -1, "a sharding key: the shard is key % --shards")
	shards := fs.Int("shards", shardid.DefaultLogicalShards, "the number of logical shards, for --key")
	worker := fs.Int("worker", -1, "the worker id, for layouts with worker bits")
	n := fs.Int("n", 1, "how many IDs")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *shard >= 0 && *key >= 0 {
		fmt.Fprintln(stderr, "shardid new: give --shard or --key, not both")
		return errFlags
	}
	l, err := layoutFor(*layout, "")
	if err != nil {
		return err
	}
	var opts []shardid.GeneratorOption
	if *worker >= 0 {
		opts = append(opts, shardid.WithWorker(*worker))
	}
	g, err := shardid.NewGenerator(l, opts...)
	if err != nil {
		return err
	}
	s := max(*shard, 0)
	if *key >= 0 {
		if *shards < 1 {
			return fmt.Errorf("--shards %d: want at least 1", *shards)
		}
		s = int(*key % int64(*shards))
	}
	if *n < 0 {
		return fmt.Errorf("-n %d: want a count", *n)
	}
	w := bufio.NewWriter(stdout)
	ids := make([]shardid.ID, min(*n, 4096))
	for left := *n; left > 0; left -= len(ids) {
		ids = ids[:min(left, len(ids))]
		if err := g.NextN(s, ids); err != nil {
			return err
		}
		for _, id := range ids {
			b, _ := id.AppendText(nil)
			w.Write(append(b, '\n'))
		}
	}
	return w.Flush()
}
