// Package bench compares shardid with the ID generators users pick instead,
// in one run, and checks that shardid's presets decode those generators'
// real IDs. It is a module of its own so that the library's go.mod stays
// lean.
package bench
