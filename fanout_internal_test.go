package shardid

import (
	"slices"
	"testing"
)

func TestInlineLimit(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		args        []any
		want        string
		wantArgs    []any
	}{
		{"gorm limit", `SELECT * FROM "s"."t" WHERE likes > $1 ORDER BY id DESC LIMIT $2`, []any{3, 20},
			`SELECT * FROM "s"."t" WHERE likes > $1 ORDER BY id DESC LIMIT 20`, []any{3}},
		{"limit and offset", `SELECT * FROM t LIMIT $1 OFFSET $2`, []any{20, 40}, `SELECT * FROM t LIMIT 20 OFFSET 40`, []any{}},
		{"limit not last", `SELECT * FROM t WHERE a = $2 LIMIT $1`, []any{20, 3}, `SELECT * FROM t WHERE a = $2 LIMIT $1`, []any{20, 3}},
		{"used elsewhere", `SELECT * FROM t WHERE a < $1 LIMIT $1`, []any{20}, `SELECT * FROM t WHERE a < $1 LIMIT $1`, []any{20}},
		{"a string", `SELECT * FROM t LIMIT $1`, []any{"20"}, `SELECT * FROM t LIMIT $1`, []any{"20"}},
		{"a longer placeholder", `SELECT * FROM t WHERE a = $12 LIMIT $1`, []any{20}, `SELECT * FROM t WHERE a = $12 LIMIT $1`, []any{20}},
		{"no limit", `SELECT count(*) FROM t WHERE a = $1`, []any{20}, `SELECT count(*) FROM t WHERE a = $1`, []any{20}},
	} {
		got, args := inlineLimit(tc.query, tc.args)
		if got != tc.want || !slices.Equal(args, tc.wantArgs) {
			t.Errorf("%s: inlineLimit = %q %v, want %q %v", tc.name, got, args, tc.want, tc.wantArgs)
		}
	}
}

func TestInlineLimitMySQL(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		args        []any
		want        string
		wantArgs    []any
	}{
		{"gorm limit", "SELECT * FROM `s`.`t` WHERE likes > ? ORDER BY id DESC LIMIT ?", []any{3, 20},
			"SELECT * FROM `s`.`t` WHERE likes > ? ORDER BY id DESC LIMIT 20", []any{3}},
		{"limit and offset", "SELECT * FROM t LIMIT ? OFFSET ?", []any{20, 40}, "SELECT * FROM t LIMIT 20 OFFSET 40", []any{}},
		{"a ? in a string", "SELECT * FROM t WHERE a = '?' LIMIT ?", []any{20}, "SELECT * FROM t WHERE a = '?' LIMIT ?", []any{20}},
		{"not at the end", "SELECT * FROM t LIMIT ? FOR UPDATE", []any{20}, "SELECT * FROM t LIMIT ? FOR UPDATE", []any{20}},
		{"a string", "SELECT * FROM t LIMIT ?", []any{"20"}, "SELECT * FROM t LIMIT ?", []any{"20"}},
	} {
		got, args := inlineLimitMySQL(tc.query, tc.args)
		if got != tc.want || !slices.Equal(args, tc.wantArgs) {
			t.Errorf("%s: inlineLimitMySQL = %q %v, want %q %v", tc.name, got, args, tc.want, tc.wantArgs)
		}
	}
}

func TestShardList(t *testing.T) {
	for _, tc := range []struct {
		shards []int
		want   string
	}{
		{[]int{3}, "shard 3"},
		{[]int{4, 5, 6, 7, 12}, "shards 4-7, 12 (5 shards)"},
		{[]int{-1}, "its own tables"},
		{[]int{-1, 2, 3}, "shards 2-3 (2 shards) and its own tables"},
		{[]int{0, 2, 4, 6, 8, 10, 12, 14, 16, 18}, "shards 0, 2, 4, 6, 8, 10, 12, 14, … (10 shards)"},
	} {
		if got := shardList(tc.shards); got != tc.want {
			t.Errorf("shardList(%v) = %q, want %q", tc.shards, got, tc.want)
		}
	}
}

func TestUnionable(t *testing.T) {
	for q, want := range map[string]bool{
		"SELECT * FROM t":                      true,
		"select id from t where a = 1":         true,
		"SELECT * FROM t FOR UPDATE":           false,
		"WITH x AS (SELECT 1) SELECT * FROM x": false,
		"SELECTED":                             false,
		"UPDATE t SET a = 1":                   false,
		"SELECT * INTO u FROM t":               false,
	} {
		if got := unionable(q); got != want {
			t.Errorf("unionable(%q) = %v, want %v", q, got, want)
		}
	}
}
