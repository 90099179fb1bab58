// Command shardid decodes and makes sharded IDs, prints the SQL that makes
// them inside PostgreSQL, moves logical shards, and runs a demo of the whole
// library.
//
//	shardid decode [--layout L] [--epoch E] [--json] ID...
//	shardid new    [--layout L] [--shard N | --key K [--shards S]] [--worker W] [-n COUNT]
//	shardid sql    --dialect postgres --schema NAME --shard N [--table T [--column C]] [--worker W]
//	shardid demo   [--postgres DSN | --mysql DSN | --dir DIR] [--shards N] [--users N] [--photos N] [--keep]
//	shardid move   --catalog DSN --shard N (--to NAME [--dry-run] | --abort | --drop-copy-on NAME)
//	shardid rebalance --catalog DSN [--by bytes|rows] [--drain NAMES | --fill NAMES] [--apply [--drop-copies]]
//	shardid split  (plan [--to NAMES] [--batch N] [--out FILE] | run --plan FILE | status | abort) --config FILE
//
// Run "shardid COMMAND --help" for each command's flags. A wrong flag or
// argument exits with status 2 and a message that names it; a command that
// fails exits with status 1.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// errFlags means the flags or arguments were wrong: the command exits 2.
// The flag package has said why, or the error wrapping it (badFlag) says it.
var errFlags = errors.New("bad flags")

// errReported means the command printed its errors and should exit 1.
var errReported = errors.New("errors reported")

type command struct {
	name, summary string
	run           func(args []string, stdin io.Reader, stdout, stderr io.Writer) error
}

var commands = []command{
	{"decode", "print the time, shard, worker and sequence of IDs", runDecode},
	{"new", "make new IDs", runNew},
	{"sql", "print the SQL that makes IDs inside PostgreSQL", runSQL},
	{"demo", "write and read sharded rows end to end (no server needed)", runDemo},
	{"move", "move a logical shard to another database, every ID unchanged", runMove},
	{"rebalance", "plan (and --apply) the moves that even out the databases", runRebalance},
	{"split", "split a monolith into logical shards on other databases, online", runSplit},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			err := c.run(args[1:], stdin, stdout, stderr)
			switch {
			case err == nil, errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errFlags):
				if err != errFlags {
					fmt.Fprintln(stderr, "shardid "+c.name+":", err)
				}
				return 2
			case errors.Is(err, errReported):
				return 1
			}
			fmt.Fprintln(stderr, "shardid "+c.name+":", err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "shardid: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: shardid COMMAND [flags]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-7s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'shardid COMMAND --help' for a command's flags.")
}

// newFlagSet returns a flag set that reports to stderr and returns errors.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("shardid "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: shardid %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args into fs, mapping errors to errFlags.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errFlags
	}
	return nil
}

// usageError is a wrong flag or argument, in the command's own words: the
// command prints it and exits 2.
type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == errFlags }

// badFlag returns a usageError; the message names the flag.
func badFlag(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// noArgs refuses arguments left after the flags.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return badFlag("unexpected argument %q: this command takes flags only", fs.Arg(0))
	}
	return nil
}

// given returns the names of the flags given on the command line.
func given(fs *flag.FlagSet) map[string]bool {
	m := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { m[f.Name] = true })
	return m
}

// inRange refuses v outside [lo, hi] with a message naming the flag.
func inRange(name string, v, lo, hi int64, what string) error {
	if v < lo || v > hi {
		if hi == lo {
			return badFlag("--%s %d: want %d, the only %s", name, v, lo, strings.TrimPrefix(what, "a "))
		}
		return badFlag("--%s %d: want %s from %d to %d", name, v, what, lo, hi)
	}
	return nil
}

// optInt is an integer flag that knows whether it was given. It has no
// default, so --help prints none.
type optInt struct {
	v   int64
	set bool
}

func (o *optInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.FormatInt(o.v, 10)
}

func (o *optInt) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return errors.New("want an integer")
	}
	o.v, o.set = v, true
	return nil
}

// sqlName is what shardid accepts as a schema, table or column name.
var sqlName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// checkName refuses a schema, table or column name shardid would refuse.
func checkName(flagName, v string) error {
	if !sqlName.MatchString(v) {
		return badFlag("--%s %q: want a lowercase SQL name, %s", flagName, v, sqlName)
	}
	return nil
}

// isTerminal reports whether r or w is a terminal (a character device).
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	st, err := file.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// looksNegative reports whether s is a negative number, which the flag
// package would take for a flag.
func looksNegative(s string) bool {
	return len(s) > 1 && s[0] == '-' && strings.IndexByte("0123456789", s[1]) >= 0
}
