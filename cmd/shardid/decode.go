package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/shardid/shardid"
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

func runDecode(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("decode", "[--layout L] [--epoch E] [--json] [ID...]  (IDs from standard input when none are given)", stderr)
	layout := fs.String("layout", "instagram", "the layout: "+decodeLayoutNames())
	epoch := fs.String("epoch", "", "override the layout's epoch: an RFC 3339 time or Unix milliseconds")
	asJSON := fs.Bool("json", false, "print one JSON object per ID")
	// An argument that looks like a negative number is an ID to refuse,
	// not a flag.
	flags, negative := splitNegative(args, map[string]bool{"layout": true, "epoch": true})
	if err := parse(fs, flags); err != nil {
		return err
	}
	if *epoch != "" && (*layout == "pinterest" || *layout == "uuidshort") {
		return badFlag("--epoch: the %s layout has no epoch", *layout)
	}
	decode, err := decoderFor(*layout, *epoch)
	if err != nil {
		return err
	}
	ids := append(negative, fs.Args()...)
	if len(ids) == 0 {
		if isTerminal(stdin) {
			fmt.Fprintln(stderr, "shardid decode: reading IDs from the terminal, one or more per line; end with Ctrl-D (or give them as arguments)")
		}
		sc := bufio.NewScanner(stdin)
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
	enc := json.NewEncoder(stdout)
	for _, s := range ids {
		d, err := decode(s)
		if err != nil {
			fmt.Fprintf(stderr, "shardid decode: %s: %v\n", s, err)
			failed = true
			continue
		}
		if *asJSON {
			if err := enc.Encode(d); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintln(stdout, d.line())
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

// splitNegative takes the arguments that look like negative numbers out of
// args, up to the first argument that is not a flag. valued names the flags
// that take a value as the next argument (--epoch -1000 is an epoch).
func splitNegative(args []string, valued map[string]bool) (flags, negative []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--" || !strings.HasPrefix(a, "-") || a == "-":
			return append(flags, args[i:]...), negative
		case looksNegative(a):
			negative = append(negative, a)
			continue
		}
		flags = append(flags, a)
		if name := strings.TrimLeft(a, "-"); valued[name] && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return flags, negative
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
