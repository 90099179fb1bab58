// Command shardid decodes and makes sharded IDs, prints the SQL that makes
// them inside PostgreSQL, and runs a demo of the whole library.
//
//	shardid decode [--layout L] [--epoch E] [--json] ID...
//	shardid new    [--layout L] [--shard N | --key K] [--worker W] [-n COUNT]
//	shardid sql    --dialect postgres --schema NAME --shard N [--table T] [--worker W]
//	shardid demo   [--postgres DSN] [--mysql DSN] [--shards N] [--users N] [--photos N]
//	shardid move   --catalog DSN --shard N --to NAME [--dry-run] [--abort]
//
// Run "shardid COMMAND --help" for each command's flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// errFlags means the flags were wrong; the flag package has said why.
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
