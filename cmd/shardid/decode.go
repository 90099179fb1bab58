package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/shardid/shardid"
	"github.com/spf13/cobra"
)

// decoded is one decoded ID, as --json prints it.
type decoded struct {
	ID     string `json:"id"`
	Layout string `json:"layout"`
	Time   string `json:"time,omitempty"`
	UnixMs *int64 `json:"unix_ms,omitempty"`
	Shard  int    `json:"shard"`
	Worker *int   `json:"worker,omitempty"`
	Seq    *int64 `json:"seq,omitempty"`
	Type   *int   `json:"type,omitempty"`
	Local  *int64 `json:"local,omitempty"`
}

func newDecodeCmd(s *streams) *cobra.Command {
	var (
		layout, epoch string
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "decode [flags] [ID...]",
		Short: "print the time, shard, worker and sequence of IDs",
		Long: "decode prints the time, logical shard, worker and sequence of each ID, read from the arguments,\n" +
			"or from standard input (one or more per line) when none is given.",
		Example: "  shardid decode 182432091342174089\n  shardid decode --layout snowflake --json 1050118621198921728\n  psql -Atc 'SELECT id FROM photos' | shardid decode",
		RunE: func(cmd *cobra.Command, ids []string) error {
			return runDecode(s, layout, epoch, asJSON, ids)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&layout, "layout", "instagram", "the layout: "+decodeLayoutNames())
	fs.StringVar(&epoch, "epoch", "", "override the layout's epoch: an RFC 3339 time or Unix milliseconds")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object per ID")
	completeWords(cmd, "layout", append(sortedLayouts(), "pinterest", "uuidshort")...)
	return cmd
}

func runDecode(s *streams, layout, epoch string, asJSON bool, ids []string) error {
	if epoch != "" && (layout == "pinterest" || layout == "uuidshort") {
		return badFlag("--epoch: the %s layout has no epoch", layout)
	}
	decode, err := decoderFor(layout, epoch)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		if isTerminal(s.in) {
			fmt.Fprintln(s.err, "shardid decode: reading IDs from the terminal, one or more per line; end with Ctrl-D (or give them as arguments)")
		}
		sc := bufio.NewScanner(s.in)
		for sc.Scan() {
			ids = append(ids, strings.Fields(sc.Text())...)
		}
		if err := sc.Err(); err != nil {
			return err
		}
		if len(ids) == 0 {
			return badFlag("no IDs: give them as arguments or on standard input")
		}
	}
	failed := false
	enc := json.NewEncoder(s.out)
	for _, id := range ids {
		d, err := decode(id)
		if err != nil {
			fmt.Fprintf(s.err, "shardid decode: %s: %v\n", id, err)
			failed = true
			continue
		}
		if asJSON {
			if err := enc.Encode(d); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintln(s.out, d.line())
	}
	if failed {
		return errReported
	}
	return nil
}

func (d decoded) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s layout=%s", d.ID, d.Layout)
	if d.Time != "" {
		fmt.Fprintf(&b, " time=%s", d.Time)
	}
	fmt.Fprintf(&b, " shard=%d", d.Shard)
	if d.Type != nil {
		fmt.Fprintf(&b, " type=%d local=%d", *d.Type, *d.Local)
	}
	if d.Worker != nil {
		fmt.Fprintf(&b, " worker=%d", *d.Worker)
	}
	if d.Seq != nil {
		fmt.Fprintf(&b, " seq=%d", *d.Seq)
	}
	return b.String()
}

const timeFormat = "2006-01-02T15:04:05.000Z07:00" // RFC 3339 with milliseconds

func ptr[T any](v T) *T { return &v }

// decodeArgs puts the IDs of decode's arguments after a "--", in their
// order, so that an ID that looks like a negative number (-5) is an ID to
// refuse, not a flag, before or after the flags. The value of --layout and
// --epoch stays with its flag (--epoch -1000 is an epoch).
func decodeArgs(args []string) []string {
	var flags, ids []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			ids = append(ids, args[i+1:]...)
			i = len(args)
		case a == "-" || !strings.HasPrefix(a, "-") || looksNegative(a):
			ids = append(ids, a)
		default:
			flags = append(flags, a)
			if (a == "--layout" || a == "--epoch") && i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		}
	}
	if len(ids) == 0 {
		return flags
	}
	return append(append(flags, "--"), ids...)
}

// decoderFor returns the function that decodes an ID of the named layout.
func decoderFor(name, epoch string) (func(string) (decoded, error), error) {
	switch name {
	case "pinterest":
		return func(s string) (decoded, error) {
			p, err := shardid.ParsePinterest(s)
			if err != nil {
				return decoded{}, err
			}
			return decoded{ID: s, Layout: name, Shard: p.Shard(), Type: ptr(p.Type()), Local: ptr(p.Local())}, nil
		}, nil
	case "uuidshort":
		return func(s string) (decoded, error) {
			u, err := shardid.ParseUUIDShort(s)
			if err != nil {
				return decoded{}, err
			}
			p := u.Decompose()
			return decoded{ID: s, Layout: name, Time: p.Start.Format(timeFormat), UnixMs: ptr(p.Start.UnixMilli()),
				Shard: p.ServerID, Seq: ptr(int64(p.Counter))}, nil
		}, nil
	}
	if _, ok := layouts[name]; !ok {
		return nil, badFlag("--layout %q: unknown layout (want %s)", name, decodeLayoutNames())
	}
	l, err := layoutFor(name, epoch)
	if err != nil {
		return nil, err
	}
	return func(s string) (decoded, error) {
		// Simpleflake's real values use all 64 bits: read them unsigned.
		v, err := shardid.ParseUUIDShort(s)
		if err != nil {
			return decoded{}, err
		}
		if uint64(v) > 1<<63-1 && name != "simpleflake" {
			return decoded{}, fmt.Errorf("%w: %s is past the largest signed 64-bit ID", shardid.ErrRange, s)
		}
		p := l.DecomposeUint64(uint64(v))
		return decoded{ID: s, Layout: name, Time: p.Time.Format(timeFormat), UnixMs: ptr(p.Time.UnixMilli()),
			Shard: p.Shard, Worker: ptr(p.Worker), Seq: ptr(int64(p.Seq))}, nil
	}, nil
}
