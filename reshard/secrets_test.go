package reshard_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shardid/shardid/reshard"
)

// The catalog's setup holds no secret: SaveSetup stores DSNs with ${NAME}
// placeholders as they are (read back from the raw table: no password in
// it), LoadSetup expands them from the loading process's environment, an
// unset variable is ErrDSNVariable, and a DSN with a literal password is
// refused with ErrSecretInDSN, nothing stored, unless AllowPasswords.
func TestCatalogSetupHoldsNoSecret(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			db := segmentDB(t, kind)
			db.Exec("DROP TABLE IF EXISTS shardid_sec_catalog, shardid_sec_catalog_version, shardid_sec_catalog_setup")
			c := &reshard.Catalog{DB: db, Table: "shardid_sec_catalog"}
			ctx := context.Background()
			const secret = "Sup3r:s@cret/pw'"
			setup := reshard.CatalogSetup{
				Databases: []reshard.CatalogDatabase{
					{Name: "pg1", Dialect: "postgres", DSN: "postgres://shardid:${SHARDID_T_PG1_PW}@pg1:5432/app"},
					{Name: "pg2", Dialect: "postgres", DSN: "host=pg2 user=shardid password=${SHARDID_T_PG2_PW} dbname=app"},
					{Name: "pg3", Dialect: "postgres", DSN: "host=pg3 user=shardid dbname=app"}, // ~/.pgpass
					{Name: "my1", Dialect: "mysql", DSN: "shardid:${SHARDID_T_MY1_PW}@tcp(my1:3306)/app"},
				},
				LogicalShards: 4, SchemaPattern: "s_%04d", Tables: []string{"photos"},
			}
			if err := c.SaveSetup(ctx, setup); err != nil {
				t.Fatal(err)
			}
			var raw string
			if err := db.Raw("SELECT setup FROM shardid_sec_catalog_setup").Scan(&raw).Error; err != nil {
				t.Fatal(err)
			}
			t.Setenv("SHARDID_T_PG1_PW", secret)
			t.Setenv("SHARDID_T_PG2_PW", secret)
			t.Setenv("SHARDID_T_MY1_PW", "my1-pw")
			if strings.Contains(raw, "Sup3r") || strings.Contains(raw, "my1-pw") || !strings.Contains(raw, "${SHARDID_T_PG1_PW}") {
				t.Errorf("the catalog's raw setup: %s; want placeholders, no password", raw)
			}
			got, err := c.LoadSetup(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{
				"postgres://shardid:Sup3r%3As%40cret%2Fpw%27@pg1:5432/app",
				`host=pg2 user=shardid password='Sup3r:s@cret/pw\'' dbname=app`,
				"host=pg3 user=shardid dbname=app",
				"shardid:my1-pw@tcp(my1:3306)/app",
			}
			for i, d := range got.Databases {
				if d.DSN != want[i] {
					t.Errorf("LoadSetup: %s's DSN is %q, want %q", d.Name, d.DSN, want[i])
				}
			}

			// A variable the loading process does not have.
			t.Setenv("SHARDID_T_MY1_PW", "")
			if err := unsetenv(t, "SHARDID_T_MY1_PW"); err != nil {
				t.Fatal(err)
			}
			if _, err := c.LoadSetup(ctx); !errors.Is(err, reshard.ErrDSNVariable) || !strings.Contains(err.Error(), "SHARDID_T_MY1_PW") {
				t.Errorf("LoadSetup with a variable unset: %v, want ErrDSNVariable naming it", err)
			}

			// A literal password is refused, and nothing is stored.
			literal := setup
			literal.Databases = []reshard.CatalogDatabase{{Name: "pg1", Dialect: "postgres", DSN: "postgres://shardid:" + "hunter2@pg1/app"}}
			for _, dsn := range []string{"postgres://shardid:hunter2@pg1/app", "host=pg1 password=hunter2", "shardid:hunter2@tcp(my1)/app"} {
				literal.Databases[0].DSN = dsn
				if strings.Contains(dsn, "tcp(") {
					literal.Databases[0].Dialect = "mysql"
				}
				if err := c.SaveSetup(ctx, literal); !errors.Is(err, reshard.ErrSecretInDSN) {
					t.Errorf("SaveSetup(%q): %v, want ErrSecretInDSN", dsn, err)
				}
			}
			db.Raw("SELECT setup FROM shardid_sec_catalog_setup").Scan(&raw)
			if strings.Contains(raw, "hunter2") {
				t.Errorf("a refused setup was stored: %s", raw)
			}
			// Unless the caller opts in.
			opted := &reshard.Catalog{DB: db, Table: "shardid_sec_catalog", AllowPasswords: true}
			literal.Databases[0] = reshard.CatalogDatabase{Name: "pg1", Dialect: "postgres", DSN: "postgres://shardid:hunter2@pg1/app"}
			if err := opted.SaveSetup(ctx, literal); err != nil {
				t.Fatalf("SaveSetup with AllowPasswords: %v", err)
			}
			if got, err := opted.LoadSetup(ctx); err != nil || got.Databases[0].DSN != "postgres://shardid:hunter2@pg1/app" {
				t.Errorf("LoadSetup after an opted-in save: %+v, %v", got, err)
			}
		})
	}
}
