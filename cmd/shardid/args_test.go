package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/shardid/shardid"
)

// Every bad flag or argument is refused with exit status 2 and a message in
// the command's own words that names it; nothing goes to standard output.
func TestBadArguments(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/f"
	os.WriteFile(file, nil, 0o600)
	tests := []struct {
		args []string
		want string // in standard error
	}{
		// new
		{[]string{"new", "--shard", "-2"}, "--shard -2: want a logical shard from 0 to 8191"},
		{[]string{"new", "--shard", "8192"}, "--shard 8192"},
		{[]string{"new", "--key", "-5"}, "--key -5: want a sharding key of 0 or more"},
		{[]string{"new", "--key", "5", "--shards", "0"}, "--shards 0"},
		{[]string{"new", "--key", "5", "--shards", "9000"}, "--shards 9000"},
		{[]string{"new", "--shards", "10"}, "--shards is for --key"},
		{[]string{"new", "--shard", "1", "--key", "2"}, "give --shard or --key, not both"},
		{[]string{"new", "--worker", "1"}, "--worker 1: want 0, the only worker id of layout instagram"},
		{[]string{"new", "--layout", "snowflake", "--worker", "-1"}, "--worker -1"},
		{[]string{"new", "--layout", "snowflake"}, "--worker is required"},
		{[]string{"new", "-n", "-1"}, "-n -1"},
		{[]string{"new", "-n", "0"}, "-n 0"},
		{[]string{"new", "--layout", "nope"}, `--layout "nope"`},
		{[]string{"new", "extra"}, `unexpected argument "extra"`},
		{[]string{"new", "--shard", "x"}, `invalid argument "x" for "--shard" flag: want an integer`},
		// decode
		{[]string{"decode", "--layout", "nope", "1"}, `--layout "nope": unknown layout (want instagram, simpleflake, simpleflake63, snowflake, sonyflake, pinterest, uuidshort)`},
		{[]string{"decode", "--epoch", "yesterday", "1"}, `--epoch "yesterday"`},
		{[]string{"decode", "--layout", "pinterest", "--epoch", "0", "1"}, "--epoch: the pinterest layout has no epoch"},
		{[]string{"decode"}, "no IDs: give them as arguments or on standard input"},
		// sql
		{[]string{"sql", "--schema", "s", "--shard", "-3"}, "--shard -3: want a logical shard from 0 to 8191"},
		{[]string{"sql", "--schema", "s"}, "--schema and --shard are required"},
		{[]string{"sql", "--shard", "1"}, "--schema and --shard are required"},
		{[]string{"sql", "--schema", "S", "--shard", "1"}, `--schema "S"`},
		{[]string{"sql", "--schema", "s", "--shard", "1", "--worker-bits", "-1"}, "--worker-bits -1: want 0 to 9"},
		{[]string{"sql", "--schema", "s", "--shard", "1", "--worker-bits", "10"}, "--worker-bits 10"},
		{[]string{"sql", "--schema", "s", "--shard", "1", "--worker", "2", "--worker-bits", "1"}, "--worker 2: want a worker id of layout instagram+w1 from 0 to 1"},
		{[]string{"sql", "--schema", "s", "--shard", "1", "--column", "uid"}, "--column is for --table"},
		{[]string{"sql", "--schema", "s", "--shard", "1", "--table", "x y"}, `--table "x y"`},
		{[]string{"sql", "--schema", "s", "--shard", "1", "--table", "t", "--column", "A"}, `--column "A"`},
		{[]string{"sql", "--schema", "s", "--shard", "1", "--dialect", "mysql"}, "--dialect mysql"},
		{[]string{"sql", "--schema", "s", "--shard", "1", "more"}, `unexpected argument "more"`},
		// move (all refused before any database is opened)
		{[]string{"move", "--catalog", "x", "--shard", "-4", "--to", "pg2"}, "--shard -4: want a logical shard, 0 or more"},
		{[]string{"move", "--shard", "1", "--to", "pg2"}, "--catalog and --shard are required"},
		{[]string{"move", "--catalog", "x", "--shard", "1"}, "give one of --to, --abort and --drop-copy-on"},
		{[]string{"move", "--catalog", "x", "--shard", "1", "--to", "a", "--abort"}, "give one of --to, --abort and --drop-copy-on"},
		{[]string{"move", "--catalog", "x", "--shard", "1", "--abort", "--dry-run"}, "--dry-run is for a move"},
		{[]string{"move", "--catalog", "x", "--shard", "1", "--abort", "--batch", "5"}, "--batch and --fence-for are for a move"},
		{[]string{"move", "--catalog", "x", "--shard", "1", "--to", "a", "--batch", "0"}, "--batch 0"},
		{[]string{"move", "--catalog", "x", "--shard", "1", "--to", "a", "--fence-for", "-1s"}, "--fence-for -1s"},
		{[]string{"move", "--catalog", "x", "--shard", "1", "--to", "a", "--catalog-table", "T;"}, `--catalog-table "T;"`},
		{[]string{"move", "--catalog", "x", "--shard", "1", "--to", "a", "b"}, `unexpected argument "b"`},
		// demo
		{[]string{"demo", "--shards", "0"}, "--shards 0: want a number of logical shards from 1 to 8192"},
		{[]string{"demo", "--shards", "-1"}, "--shards -1"},
		{[]string{"demo", "--postgres", "x", "--mysql", "y"}, "give --postgres or --mysql, not both"},
		{[]string{"demo", "--postgres", "x", "--dir", dir}, "--dir and --databases are for the embedded SQLite demo"},
		{[]string{"demo", "--dir", "/nonexistent"}, "--dir /nonexistent: stat /nonexistent: no such file or directory"},
		{[]string{"demo", "--dir", file}, "not a directory"},
		{[]string{"demo", "--users", "0"}, "--users 0"},
		{[]string{"demo", "--photos", "0"}, "--photos 0"},
		{[]string{"demo", "--comments", "-1"}, "--comments -1"},
		{[]string{"demo", "--workers", "0"}, "--workers 0"},
		{[]string{"demo", "--databases", "0"}, "--databases 0"},
		{[]string{"demo", "now"}, `unexpected argument "now"`},
	}
	t.Setenv("SHARDID_DEMO_POSTGRES_DSN", "")
	t.Setenv("SHARDID_DEMO_MYSQL_DSN", "")
	for _, tc := range tests {
		code, out, errs := shardidCmd(t, "", tc.args...)
		if code != 2 || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("shardid %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out, errs, tc.want)
		}
		if strings.Contains(errs, "invalid plugin configuration") {
			t.Errorf("shardid %q: %s", tc.args, errs)
		}
	}
}

// --help prints no default for flags that have none.
func TestHelpDefaults(t *testing.T) {
	for _, c := range commandNames() {
		_, out, _ := shardidCmd(t, "", c, "--help")
		if m := regexp.MustCompile(`\(default (0|-1|"")\)`).FindString(out); m != "" {
			t.Errorf("%s --help prints %s:\n%s", c, m, out)
		}
	}
}

// An argument that looks like a negative number is an ID, refused as one,
// also before the flags and among good IDs; --epoch still takes a negative
// number of milliseconds.
func TestDecodeNegative(t *testing.T) {
	code, out, errs := shardidCmd(t, "", "decode", "-5", "--json", "182432091342174089", "-77")
	if code != 1 || !strings.Contains(out, `"shard":1341`) ||
		!strings.Contains(errs, "-5: shardid: value out of range") || !strings.Contains(errs, "-77: shardid: value out of range") ||
		strings.Contains(errs, "flag provided but not defined") {
		t.Errorf("exit %d, %q, %q", code, out, errs)
	}
	// (Whether the library accepts an epoch before 1970 is its own
	// matter: the value must reach --epoch either way.)
	code, out, errs = shardidCmd(t, "", "decode", "--epoch", "-1000", "--layout", "sonyflake", "7")
	if !(code == 0 && strings.Contains(out, "time=1969-12-31T23:59:59.000Z")) && !(code == 2 && strings.Contains(errs, `--epoch "-1000"`)) {
		t.Errorf("--epoch -1000: exit %d, %q, %q", code, out, errs)
	}
}

// No IDs on standard input is an error; on a terminal (here /dev/null, a
// character device) decode says it is waiting for IDs; on a pipe or a file it
// does not.
func TestDecodeStdin(t *testing.T) {
	for _, in := range []string{"", "  \n\n"} {
		if code, out, errs := shardidCmd(t, in, "decode"); code != 2 || out != "" || !strings.Contains(errs, "no IDs") {
			t.Errorf("stdin %q: exit %d, %q, %q", in, code, out, errs)
		}
	}
	tty, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	var out, errb strings.Builder
	if code := run([]string{"decode"}, tty, &out, &errb); code != 2 || !strings.Contains(errb.String(), "reading IDs from the terminal") {
		t.Errorf("on a terminal: exit %d, %q", code, errb.String())
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("182432091342174089\n")
	w.Close()
	defer r.Close()
	out.Reset()
	errb.Reset()
	if code := run([]string{"decode"}, r, &out, &errb); code != 0 || errb.String() != "" || !strings.Contains(out.String(), "shard=1341") {
		t.Errorf("from a pipe: exit %d, %q, %q", code, out.String(), errb.String())
	}
}

// A key or shard of 0 and the largest ones work; a key makes its shard.
func TestNewEdges(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		shard int
	}{
		{[]string{"new"}, 0},
		{[]string{"new", "--key", "0"}, 0},
		{[]string{"new", "--shard", "8191"}, 8191},
		{[]string{"new", "--key", "7", "--shards", "5"}, 2},
	} {
		code, out, errs := shardidCmd(t, "", tc.args...)
		id, err := shardid.Parse(strings.TrimSpace(out))
		if code != 0 || err != nil || id.Shard() != tc.shard {
			t.Errorf("shardid %q: exit %d, %q (%s), shard %d; want %d", tc.args, code, out, errs, id.Shard(), tc.shard)
		}
	}
}

// Into a pipe or a file the progress is one line per stage, with no
// carriage returns; on a terminal it is a bar redrawn in place.
func TestProgressOnlyOnATerminal(t *testing.T) {
	var b strings.Builder
	p := startProgress(&b, "writing", 10)
	p.Add(10)
	p.Finish()
	if strings.Contains(b.String(), "\r") || !strings.HasPrefix(b.String(), "writing: 10/10 rows in ") || strings.Count(b.String(), "\n") != 1 {
		t.Errorf("into a buffer: %q", b.String())
	}
	code, out, errs := shardidCmd(t, "", "demo", "--users", "5", "--photos", "2", "--shards", "16")
	if code != 0 || strings.Contains(out, "\r") || !strings.Contains(out, "writing: 30/30 rows") {
		t.Errorf("demo into a buffer: exit %d, %q, %s", code, out, errs)
	}
	tty, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	if p := startProgress(tty, "x", 1); !p.tty {
		t.Error("a character device is not taken for a terminal")
	} else {
		p.Finish()
	}
}
