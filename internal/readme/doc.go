// Package readme holds no code: its tests keep README.md true. They build
// every Go snippet of README.md against the library, check that the snippets
// README quotes from runnable examples are those examples word for word, and
// run the snippet that moves a shard on PostgreSQL.
package readme
