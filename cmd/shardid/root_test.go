package main

import (
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// Help, asked for in any way, goes to standard output with status 0; the
// command list is aligned; no command line at all is a wrong one (status
// 2, the usage on standard error).
func TestHelpOnStdout(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"help", "move"}, {"decode", "-h"}, {"catalog", "init", "--help"}, {"help", "catalog", "set"}} {
		code, out, errs := shardidCmd(t, "", args...)
		if code != 0 || errs != "" || !strings.Contains(out, "Usage:\n  shardid") {
			t.Errorf("shardid %q: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
	_, out, _ := shardidCmd(t, "", "--help")
	list := out[strings.Index(out, "Available Commands:\n")+len("Available Commands:\n"):]
	list = list[:strings.Index(list, "\n\n")]
	col := -1
	names := 0
	for _, line := range strings.Split(list, "\n") {
		m := regexp.MustCompile(`^  ([a-z]+)( +)\S`).FindStringSubmatchIndex(line)
		if m == nil {
			t.Fatalf("not a command line: %q", line)
		}
		if col >= 0 && m[5] != col {
			t.Errorf("the summary of %q starts at column %d, the others at %d:\n%s", line[m[2]:m[3]], m[5], col, list)
		}
		col = m[5]
		names++
	}
	if names < 10 { // decode new sql demo catalog move rebalance version help completion
		t.Errorf("%d commands listed:\n%s", names, list)
	}
	code, out, errs := shardidCmd(t, "")
	if code != 2 || out != "" || !strings.Contains(errs, "Usage:\n  shardid [command]") {
		t.Errorf("no command: exit %d, %q, %q", code, out, errs)
	}
	for _, args := range [][]string{{"help", "frob"}, {"help", "catalog", "frob"}} {
		if code, out, errs := shardidCmd(t, "", args...); code != 2 || out != "" || !strings.Contains(errs, "no command \""+strings.Join(args[1:], " ")+"\"") {
			t.Errorf("shardid %q: exit %d, %q, %q", args, code, out, errs)
		}
	}
}

// A long flag with one dash, as Go's flag package took it, is refused with
// a word on the two dashes it takes.
func TestSingleDashLongFlag(t *testing.T) {
	code, out, errs := shardidCmd(t, "", "decode", "-layout", "snowflake", "1")
	if code != 2 || out != "" || !strings.Contains(errs, "unknown shorthand flag: 'l' in -layout (long flags take two dashes: --layout)") {
		t.Errorf("decode -layout: exit %d, %q, %q", code, out, errs)
	}
	if code, _, errs := shardidCmd(t, "", "new", "-nope"); code != 2 || strings.Contains(errs, "two dashes") {
		t.Errorf("new -nope: exit %d, %q", code, errs)
	}
}

// --version and version print the module's version, on standard output.
func TestVersion(t *testing.T) {
	_, a, _ := shardidCmd(t, "", "--version")
	code, b, errs := shardidCmd(t, "", "version")
	if code != 0 || errs != "" || a != b || !strings.HasPrefix(a, "shardid ") || !strings.HasSuffix(a, "\n") {
		t.Errorf("--version %q, version %q (exit %d, %q)", a, b, code, errs)
	}
	if code, _, errs := shardidCmd(t, "", "version", "now"); code != 2 || !strings.Contains(errs, `unknown command "now"`) {
		t.Errorf("version now: exit %d, %q", code, errs)
	}
	for _, tc := range []struct {
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{nil, false, "(devel)"},
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/shardid/shardid", Version: "v1.4.2"}}, true, "v1.4.2"},
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/shardid/shardid", Version: ""}}, true, "(devel)"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0540c8112233445566778899"}, {Key: "vcs.modified", Value: "true"}}}, true, "(devel) (commit 0540c8112233, modified)"},
	} {
		if got := moduleVersion(tc.bi, tc.ok); got != tc.want {
			t.Errorf("moduleVersion(%+v) = %q, want %q", tc.bi, got, tc.want)
		}
	}
}

// Flags may follow the arguments: decode ID --json prints JSON instead of
// taking --json for an ID; a negative-looking ID stays an ID anywhere.
func TestFlagsAfterArguments(t *testing.T) {
	code, out, errs := shardidCmd(t, "", "decode", "182432091342174089", "--json")
	if code != 0 || !strings.HasPrefix(out, `{"id":"182432091342174089"`) || errs != "" {
		t.Errorf("decode ID --json: exit %d, %q, %q", code, out, errs)
	}
	code, out, _ = shardidCmd(t, "", "decode", "1050118621198921728", "--layout", "snowflake", "-7")
	if code != 1 || !strings.Contains(out, "layout=snowflake") {
		t.Errorf("decode ID --layout snowflake -7: exit %d, %q", code, out)
	}
	code, out, errs = shardidCmd(t, "", "decode", "--", "--json")
	if code != 1 || out != "" || !strings.Contains(errs, "--json: shardid: invalid syntax") {
		t.Errorf("decode -- --json: exit %d, %q, %q", code, out, errs)
	}
	if code, _, errs := shardidCmd(t, "", "sql", "--schema", "s", "--shard", "1", "more", "--table", "t"); code != 2 || !strings.Contains(errs, `unexpected argument "more"`) {
		t.Errorf("sql with an argument among its flags: exit %d, %q", code, errs)
	}
}

// completion prints a script for each shell; flags complete to their
// values.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		code, out, errs := shardidCmd(t, "", "completion", sh)
		if code != 0 || errs != "" || !strings.Contains(out, "shardid") || len(out) < 1000 {
			t.Errorf("completion %s: exit %d, %d bytes, %q", sh, code, len(out), errs)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", ""}, "catalog\t"},
		{[]string{"__complete", "catalog", ""}, "init\t"},
		{[]string{"__complete", "decode", "--layout", ""}, "pinterest\n"},
		{[]string{"__complete", "rebalance", "--by", ""}, "rows\n"},
		{[]string{"__complete", "move", "--dr"}, "--dry-run\t"},
		{[]string{"__complete", "help", "catalog", ""}, "show\t"},
	} {
		code, out, errs := shardidCmd(t, "", tc.args...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("shardid %q: exit %d, %q, %q; want %q", tc.args, code, out, errs, tc.want)
		}
	}
}
