package reshard

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestDSNPassword(t *testing.T) {
	for _, tc := range []struct {
		name, dialect, dsn string
		pw                 string
		ok                 bool
	}{
		{"url", "postgres", "postgres://u:s3cret@h:5432/db?sslmode=disable", "s3cret", true},
		{"url escaped", "postgres", "postgresql://u:p%40ss@h/db", "p@ss", true},
		{"url no password", "postgres", "postgres://u@h/db", "", false},
		{"url no user", "postgres", "postgres://h/db", "", false},
		{"url query password", "postgres", "postgres://u@h/db?sslmode=disable&password=x", "x", true},
		{"url placeholder", "postgres", "postgres://u:${PG3_PASSWORD}@h/db", "${PG3_PASSWORD}", true},
		{"keywords", "postgres", "host=h user=u password=s3cret dbname=db", "s3cret", true},
		{"keywords quoted", "postgres", "host=h password='a b\\'c' dbname=db", "a b'c", true},
		{"keywords spaces around =", "postgres", "host=h password = s3cret", "s3cret", true},
		{"keywords none", "postgres", "host=h user=u dbname=db sslmode=disable", "", false},
		{"mysql", "mysql", "u:s3cret@tcp(h:3306)/db?parseTime=true", "s3cret", true},
		{"mysql no password", "mysql", "root@tcp(127.0.0.1:3306)/test?parseTime=true", "", false},
		{"mysql @ in password", "mysql", "u:a@b@tcp(h:3306)/db", "a@b", true},
		{"mysql by its form", "", "u:pw@tcp(h)/db", "pw", true},
		{"mysql empty password", "mysql", "u:@tcp(h)/db", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pw, ok := dsnPassword(tc.dialect, tc.dsn)
			if pw != tc.pw || ok != tc.ok {
				t.Errorf("dsnPassword(%q) = %q, %v, want %q, %v", tc.dsn, pw, ok, tc.pw, tc.ok)
			}
		})
	}
}

func TestCheckDSN(t *testing.T) {
	for _, tc := range []struct {
		name, dialect, dsn string
		allow              bool
		err                error
	}{
		{"placeholder url", "postgres", "postgres://u:${PG_PW}@h/db", false, nil},
		{"placeholder keyword", "postgres", "host=h password=${PG_PW}", false, nil},
		{"placeholder mysql", "mysql", "u:${MY_PW}@tcp(h)/db", false, nil},
		{"no password (pgpass)", "postgres", "host=h user=u dbname=db", false, nil},
		{"literal url", "postgres", "postgres://u:pw@h/db", false, ErrSecretInDSN},
		{"literal keyword", "postgres", "host=h password=pw", false, ErrSecretInDSN},
		{"literal mysql", "mysql", "u:pw@tcp(h)/db", false, ErrSecretInDSN},
		{"half a placeholder", "postgres", "host=h password=x${PG_PW}", false, ErrSecretInDSN},
		{"literal allowed", "postgres", "postgres://u:pw@h/db", true, nil},
		{"bad placeholder", "postgres", "host=${1BAD} user=u", false, ErrInvalidCatalog},
		{"unclosed placeholder", "postgres", "host=h password=${PG_PW", false, ErrInvalidCatalog},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkDSN(CatalogDatabase{Name: "pg3", Dialect: tc.dialect, DSN: tc.dsn}, tc.allow)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Errorf("checkDSN(%q) = %v, want %v", tc.dsn, err, tc.err)
			}
		})
	}
}

// A MySQL DSN's expanded password reads back through the driver.
func TestExpandDSNMySQL(t *testing.T) {
	lookup := func(string) (string, bool) { return "p:a ss", true }
	got, err := expandDSN(CatalogDatabase{Name: "my1", Dialect: "mysql", DSN: "u:${PW}@tcp(h:3306)/db?parseTime=true"}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(got)
	if err != nil || cfg.Passwd != "p:a ss" || cfg.User != "u" {
		t.Errorf("the driver reads %q as user %q password %q (%v)", got, cfg.User, cfg.Passwd, err)
	}
}

func TestExpandDSN(t *testing.T) {
	env := map[string]string{"PW": `p@ss w/o'r\d`, "HOST": "db.example", "SIMPLE": "s3cret"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, tc := range []struct {
		name, dialect, dsn, want string
		err                      error
	}{
		{"url", "postgres", "postgres://u:${PW}@${HOST}/db", "postgres://u:p%40ss%20w%2Fo%27r%5Cd@db.example/db", nil},
		{"keyword quoted", "postgres", "host=${HOST} password=${PW} dbname=db", `host='db.example' password='p@ss w/o\'r\\d' dbname=db`, nil},
		{"mysql", "mysql", "u:${SIMPLE}@tcp(${HOST}:3306)/db", "u:s3cret@tcp(db.example:3306)/db", nil},
		{"mysql refuses a slash", "mysql", "u:${PW}@tcp(h)/db", "", ErrDSNVariable},
		{"unset", "postgres", "host=h password=${NOPE}", "", ErrDSNVariable},
		{"no placeholder", "postgres", "host=h", "host=h", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := expandDSN(CatalogDatabase{Name: "pg3", Dialect: tc.dialect, DSN: tc.dsn}, lookup)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) || got != tc.want {
				t.Errorf("expandDSN(%q) = %q, %v; want %q, %v", tc.dsn, got, err, tc.want, tc.err)
			}
			if err != nil || !strings.Contains(tc.dsn, "password=${PW}") && !strings.Contains(tc.dsn, ":${PW}@") {
				return
			}
			// The driver reads the variable's value back, byte for byte.
			cfg, err := pgconn.ParseConfig(got)
			if err != nil || cfg.Password != env["PW"] {
				t.Errorf("pgx reads the password of %q as %q (%v), want %q", got, cfg.Password, err, env["PW"])
			}
		})
	}
}
