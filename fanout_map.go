package shardid

// fanoutMap returns, from one version of r's shard map, the logical shards
// each database holds (in ascending order, indexed as r.Databases()) and
// a function that names the schema of a shard's tables in that version:
// "" when the shard's tables are its database's own (a router without
// SchemaPattern, or a shard placed Shared). It is the fan-out's only
// reading of the router's map.
func fanoutMap(r *Router) (on [][]int, schemaOf func(shard int) string) {
	v := r.ShardMap().Load()
	on = make([][]int, len(r.Databases()))
	for d := range on {
		on[d] = v.ShardsOn(d)
	}
	return on, v.Schema
}
