// Package readme keeps README.md and the guides in docs/ true. Its tests
// build every Go snippet of README.md and docs/*.md against the library,
// check that the snippets they quote from runnable examples are those
// examples word for word, run the snippets that move a shard and grow
// onto a new database on PostgreSQL, and run every "go run ./cmd/shardid"
// line that shows its output on the next line ("# ..."). Its one piece of code, SameOutput,
// lets a test compare what a program printed with the output a Markdown
// file shows under "<!-- output: NAME -->": the examples' tests use it on
// their READMEs.
package readme
