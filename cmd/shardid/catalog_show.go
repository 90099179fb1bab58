package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/shardid/shardid/reshard"
	"github.com/spf13/cobra"
)

func newCatalogShowCmd(s *streams) *cobra.Command {
	var (
		cf     catalogFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "show --catalog DSN [--json] [flags]",
		Short: "print the catalog: its version, setup and map",
		Long: "show prints the catalog's version, its setup (DSNs as stored, with their ${NAME} placeholders,\n" +
			"any literal password masked) and which logical shards each database holds. It only reads,\n" +
			"and opens no database but the catalog's.",
		Example: "  shardid catalog show --catalog \"$CATALOG\"\n  shardid catalog show --catalog \"$CATALOG\" --json",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			if err := cf.check(); err != nil {
				return err
			}
			db, c, err := openCatalog(&cf)
			if err != nil {
				return err
			}
			defer closeGorm(db)
			ctx := cmd.Context()
			if err := catalogExists(ctx, db, cf.table); err != nil {
				return err
			}
			st, err := readCatalog(ctx, db, c, cf.tableName())
			if err != nil {
				return err
			}
			if asJSON {
				return printCatalogJSON(s.out, cf.tableName(), st)
			}
			return printCatalog(s.out, cf.tableName(), st)
		},
	}
	cf.define(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print it as JSON: {\"catalog\", \"version\", \"setup\", \"map\"}, the setup as --from reads it, the map as --map reads it")
	return cmd
}

// shardRanges writes sorted shards as ranges: 0, 2-5, 9.
func shardRanges(shards []int) []string {
	shards = slices.Sorted(slices.Values(shards))
	var out []string
	for i := 0; i < len(shards); {
		j := i
		for j+1 < len(shards) && shards[j+1] == shards[j]+1 {
			j++
		}
		if i == j {
			out = append(out, fmt.Sprint(shards[i]))
		} else {
			out = append(out, fmt.Sprintf("%d-%d", shards[i], shards[j]))
		}
		i = j + 1
	}
	return out
}

// printCatalog prints what the catalog holds.
func printCatalog(w io.Writer, table string, st catalogState) error {
	setup, err := parseStoredSetup(st.setup)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "catalog %s: version %d; %d logical shards in schemas %s; tables %s\n",
		table, st.version, setup.LogicalShards, setup.SchemaPattern, strings.Join(setup.Tables, ", "))
	held := map[string][]int{}
	for _, row := range st.rows {
		held[row.DBName] = append(held[row.DBName], row.Shard)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "database\tdialect\tshards\tDSN")
	for _, d := range setup.Databases {
		which := "none"
		if len(held[d.Name]) > 0 {
			which = fmt.Sprintf("%d: %s", len(held[d.Name]), strings.Join(shardRanges(held[d.Name]), ", "))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Name, d.Dialect, which, maskDSN(d.DSN))
		delete(held, d.Name)
	}
	for _, n := range slices.Sorted(maps.Keys(held)) {
		fmt.Fprintf(tw, "%s\t?\t%d: %s\t(not in the setup)\n", n, len(held[n]), strings.Join(shardRanges(held[n]), ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.rows) == 0 {
		fmt.Fprintln(w, "no map yet")
	}
	return nil
}

// printCatalogJSON prints what the catalog holds as one JSON object.
func printCatalogJSON(w io.Writer, table string, st catalogState) error {
	setup, err := parseStoredSetup(st.setup)
	if err != nil {
		return err
	}
	for i := range setup.Databases {
		setup.Databases[i].DSN = maskDSN(setup.Databases[i].DSN)
	}
	held := map[string][]int{}
	for _, row := range st.rows {
		held[row.DBName] = append(held[row.DBName], row.Shard)
	}
	m := map[string][]string{}
	for n, shards := range held {
		m[n] = shardRanges(shards)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Catalog string               `json:"catalog"`
		Version int64                `json:"version"`
		Setup   reshard.CatalogSetup `json:"setup"`
		Map     map[string][]string  `json:"map"`
	}{table, st.version, setup, m})
}

// The forms of a literal password in a DSN: a URL's user:password@, libpq's
// password=..., MySQL's user:password@tcp(...).
var (
	urlPassword   = regexp.MustCompile(`^([a-z][a-z0-9+.-]*://[^:/@]*:)(.*)(@[^@]*)$`)
	kwPassword    = regexp.MustCompile(`(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']\S*)`)
	mysqlPassword = regexp.MustCompile(`^([^:/@()]*:)(.*)(@(?:tcp|unix)\(.*)$`)
	onePlacehold  = regexp.MustCompile(`^'?\$\{[A-Za-z_][A-Za-z0-9_]*\}'?$`)
)

// maskDSN replaces a literal password in dsn with xxxxx; a ${NAME}
// placeholder stays.
func maskDSN(dsn string) string {
	for _, re := range []*regexp.Regexp{urlPassword, mysqlPassword} {
		if m := re.FindStringSubmatch(dsn); m != nil {
			if m[2] == "" || onePlacehold.MatchString(m[2]) {
				return dsn
			}
			return m[1] + "xxxxx" + m[3]
		}
	}
	return kwPassword.ReplaceAllStringFunc(dsn, func(s string) string {
		m := kwPassword.FindStringSubmatch(s)
		if onePlacehold.MatchString(m[2]) {
			return s
		}
		return m[1] + "xxxxx"
	})
}
