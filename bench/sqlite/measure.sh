#!/usr/bin/env bash
# measure.sh: the cold build time of each driver's program (an empty
# GOCACHE, as on a fresh machine; the module cache stays warm: the script
# runs `go mod download` first), the CPU time that build took (what matters
# on a busy machine, where the wall time depends on the neighbours), the
# binary's size and the workload's time.
# "old" is the driver shardid pinned before (glebarez/go-sqlite v1.21.2 over
# modernc.org/sqlite v1.23.1), built from a scratch module: one module
# cannot hold two versions of modernc.
# Usage: bash measure.sh [modernc] [ncruces] [glebarez] [old]
set -euo pipefail
cd "$(dirname "$0")"
go mod download
out=$(mktemp -d)
old=$(mktemp -d)
mkdir "$old/old"
cp workload.go "$old/"
sed 's#github.com/shardid/shardid/bench/sqlite#old/sqlite#; s/"glebarez (SQLite/"old (SQLite/' glebarez/main.go >"$old/old/main.go"
printf 'module old/sqlite\n\ngo 1.26.0\n\nrequire github.com/glebarez/go-sqlite v1.21.2\n' >"$old/go.mod"
(cd "$old" && go mod tidy >/dev/null 2>&1)
TIMEFORMAT='%R %U %S'
for d in ${@:-modernc ncruces glebarez old}; do
	cache=$(mktemp -d)
	dir=.
	[ "$d" = old ] && dir=$old
	t=$( { time (cd "$dir" && GOCACHE=$cache go build -o "$out/$d" "./$d" >/dev/null); } 2>&1 )
	read -r real user sys <<<"$t"
	printf '%-9s cold build %6.1fs wall, %6.1fs CPU; binary %5.1f MB; ' "$d" "$real" "$(echo "$user + $sys" | bc)" \
		"$(echo "$(stat -c %s "$out/$d") / 1048576" | bc -l)"
	"$out/$d"
	rm -rf "$cache"
done
rm -rf "$out" "$old"
