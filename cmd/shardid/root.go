package main

import (
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newRoot builds the command tree, reading stdin and writing stdout and
// stderr. ran becomes true once a command starts running: an error before
// that (an unknown command, a flag that does not parse) is a wrong command
// line.
func newRoot(stdin io.Reader, stdout, stderr io.Writer) (*cobra.Command, *bool) {
	ran := new(bool)
	s := &streams{in: stdin, out: stdout, err: stderr}
	root := &cobra.Command{
		Use:   "shardid",
		Short: "Sharded 64-bit IDs: decode and make them, run a demo, keep a catalog, move shards",
		Long: "shardid decodes and makes sharded 64-bit IDs, prints the SQL that makes them inside PostgreSQL,\n" +
			"runs a demo of the library, keeps the catalog of a sharded setup, and moves logical shards\n" +
			"between databases with every ID unchanged.",
		Version:       moduleVersion(debug.ReadBuildInfo()),
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRun: func(*cobra.Command, []string) {
			*ran = true
		},
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("shardid {{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "print the help of any command",
		RunE: func(_ *cobra.Command, args []string) error {
			cmd, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return badFlag("no command %q: see shardid --help", strings.Join(args, " "))
			}
			return cmd.Help()
		},
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cmd, _, err := root.Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []cobra.Completion
			for _, c := range cmd.Commands() {
				if c.IsAvailableCommand() {
					names = append(names, cobra.CompletionWithDesc(c.Name(), c.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
	})
	root.AddCommand(
		newDecodeCmd(s),
		newNewCmd(s),
		newSQLCmd(s),
		newDemoCmd(s),
		newCatalogCmd(s),
		newMoveCmd(s),
		newRebalanceCmd(s),
		newSplitCmd(s),
		&cobra.Command{
			Use:   "version",
			Short: "print the version of shardid",
			Args:  cobra.NoArgs,
			Run: func(cmd *cobra.Command, _ []string) {
				fmt.Fprintf(s.out, "shardid %s\n", root.Version)
			},
		},
	)
	// A lower-case summary, as the others, for cobra's completion command.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "completion":
			c.Short = "print the script that completes shardid's commands and flags in a shell"
		}
	}
	return root, ran
}

// streams are the command's standard input, output and error.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

// moduleVersion returns the version of the shardid module this binary was
// built from (go install ...@v1.2.3 records it), "(devel)" for a build
// from a work tree, with its commit when the build recorded one.
func moduleVersion(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "(devel)"
	}
	v := bi.Main.Version
	if v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		return fmt.Sprintf("(devel) (commit %s%s)", rev, modified)
	}
	return "(devel)"
}

// singleDash finds a long flag given with one dash in pflag's message.
var singleDash = regexp.MustCompile(`^unknown shorthand flag: '.' in -([a-z][a-z-]+)`)

// flagError makes a flag that does not parse a wrong command line (status
// 2); a long flag given with one dash, as Go's flag package took it, is
// told to take two.
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	if m := singleDash.FindStringSubmatch(msg); m != nil && cmd.Flags().Lookup(m[1]) != nil {
		msg += fmt.Sprintf(" (long flags take two dashes: --%s)", m[1])
	}
	return usageError{msg}
}

// completeWords makes a flag complete to words.
func completeWords(cmd *cobra.Command, flag string, words ...string) {
	cmd.RegisterFlagCompletionFunc(flag, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return words, cobra.ShellCompDirectiveNoFileComp
	})
}

// intFlag defines an int flag read in decimal.
func intFlag(fs *pflag.FlagSet, p *int, name string, def int, usage string) {
	*p = def
	fs.Var(intValue{p}, name, usage)
}
