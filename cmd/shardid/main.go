// Command shardid decodes and makes sharded IDs, prints the SQL that makes
// them inside PostgreSQL, runs a demo of the whole library, keeps the
// catalog of a sharded setup, moves logical shards, and splits a monolith
// into logical shards.
//
//	shardid decode [--layout L] [--epoch E] [--json] [ID...]
//	shardid new    [--layout L] [--shard N | --key K [--shards S]] [--worker W] [-n COUNT]
//	shardid sql    --schema NAME --shard N [--table T [--column C]] [--layout L [--worker-bits B]] [--worker W]
//	shardid demo   [--postgres DSN | --mysql DSN | --dir DIR] [--shards N] [--users N] [--photos N] [--keep]
//	shardid catalog init|show|set --catalog DSN ...
//	shardid move   --catalog DSN --shard N (--to NAME [--dry-run] | --abort | --drop-copy-on NAME)
//	shardid rebalance --catalog DSN [--by bytes|rows] [--drain NAMES | --fill NAMES] [--apply [--drop-copies]]
//	shardid split  (plan [--to NAMES] [--batch N] [--out FILE] | run --plan FILE | status | abort) --config FILE
//	shardid completion bash|zsh|fish|powershell
//	shardid version
//
// Run "shardid COMMAND --help" for each command's flags; help goes to
// standard output. Flags may come before or after arguments. A wrong flag
// or argument exits with status 2 and a message that names it; a command
// that fails exits with status 1.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// errFlags means the flags or arguments were wrong: the command exits 2.
// The error wrapping it (badFlag) says why.
var errFlags = errors.New("bad flags")

// errReported means the command printed its errors and should exit 1.
var errReported = errors.New("errors reported")

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root, ran := newRoot(stdin, stdout, stderr)
	if len(args) == 0 {
		// No command is a wrong command line: the usage, on stderr.
		fmt.Fprint(stderr, root.UsageString())
		return 2
	}
	if args[0] == "decode" {
		args = append([]string{"decode"}, decodeArgs(args[1:])...)
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	if errors.Is(err, errReported) {
		return 1
	}
	prefix := "shardid"
	if cmd != nil {
		prefix = cmd.CommandPath()
	}
	if errors.Is(err, errFlags) || !*ran {
		// Wrong flags or arguments, or an unknown command: cobra's own
		// errors come before the command runs.
		if err != errFlags {
			fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		}
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", prefix)
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
	return 1
}

// usageError is a wrong flag or argument, in the command's own words: the
// command prints it and exits 2.
type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == errFlags }

// badFlag returns a usageError; the message names the flag.
func badFlag(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// noArgs refuses arguments left after the flags.
func noArgs(args []string) error {
	if len(args) > 0 {
		return badFlag("unexpected argument %q: this command takes flags only", args[0])
	}
	return nil
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

// parseInt parses a decimal integer flag value, saying whether it is no
// integer or one out of range.
func parseInt(s string, bits int) (int64, error) {
	v, err := strconv.ParseInt(s, 10, bits)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("out of range: want an integer from %d to %d", int64(-1)<<(bits-1), int64(1)<<(bits-1)-1)
	}
	if err != nil {
		return 0, errors.New("want an integer")
	}
	return v, nil
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
	v, err := parseInt(s, 64)
	if err != nil {
		return err
	}
	o.v, o.set = v, true
	return nil
}

func (o *optInt) Type() string { return "int" }

// intValue is an int flag with a default, read in decimal.
type intValue struct{ p *int }

func (v intValue) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.Itoa(*v.p)
}

func (v intValue) Set(s string) error {
	n, err := parseInt(s, strconv.IntSize)
	if err != nil {
		return err
	}
	*v.p = int(n)
	return nil
}

func (intValue) Type() string { return "int" }

// floatValue is a float64 flag.
type floatValue struct{ p *float64 }

func (v floatValue) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.FormatFloat(*v.p, 'g', -1, 64)
}

func (v floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("want a number")
	}
	*v.p = f
	return nil
}

func (floatValue) Type() string { return "float" }

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
// parser would take for a flag.
func looksNegative(s string) bool {
	return len(s) > 1 && s[0] == '-' && strings.IndexByte("0123456789", s[1]) >= 0
}
