package shardid

// PageToken returns the token GatherPage with opts returns for a page whose
// last row has ID cursor: benchmarks start deep in a fan-out with it.
func PageToken(opts PageOptions, cursor ID) string {
	column := opts.Column
	if column == "" {
		column = "id"
	}
	return encodePageToken(opts, column, cursor)
}
