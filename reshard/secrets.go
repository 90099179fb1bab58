package reshard

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// placeholder matches a ${NAME} placeholder in a DSN.
var placeholder = regexp.MustCompile(`\$\{([^}]*)\}`)

// varName is what a placeholder may name: an environment variable.
var varName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkDSN refuses a DSN whose placeholders are malformed, and, unless
// allowPasswords, one that carries a literal password: a password that is
// not exactly one ${NAME} placeholder.
func checkDSN(db CatalogDatabase, allowPasswords bool) error {
	for _, m := range placeholder.FindAllStringSubmatch(db.DSN, -1) {
		if !varName.MatchString(m[1]) {
			return withDetail(ErrInvalidCatalog, fmt.Sprintf("database %s: %q is not a placeholder of an environment variable (want ${NAME})", db.Name, m[0]))
		}
	}
	if strings.Count(db.DSN, "${") != len(placeholder.FindAllString(db.DSN, -1)) {
		return withDetail(ErrInvalidCatalog, fmt.Sprintf("database %s: an unclosed ${ in its DSN", db.Name))
	}
	if allowPasswords {
		return nil
	}
	pw, ok := dsnPassword(db.Dialect, db.DSN)
	if ok && pw != "" && !isPlaceholder(pw) {
		return withDetail(ErrSecretInDSN, fmt.Sprintf("database %s: its DSN carries a literal password: use a placeholder (${%s_PASSWORD}), a password file, or Catalog.AllowPasswords",
			db.Name, strings.ToUpper(sanitizeName(db.Name))))
	}
	return nil
}

// isPlaceholder reports whether s is exactly one ${NAME} placeholder.
func isPlaceholder(s string) bool {
	m := placeholder.FindStringSubmatchIndex(s)
	return m != nil && m[0] == 0 && m[1] == len(s) && varName.MatchString(s[m[2]:m[3]])
}

// sanitizeName makes a database name usable in an environment variable's
// name, for the hint in an error.
func sanitizeName(n string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, n)
}

// dsnPassword returns the password a DSN carries, in any of the forms the
// drivers read: a URL (postgres://user:pass@host/db), libpq keywords
// (password=... or password='...'), or MySQL's user:pass@tcp(host)/db. ok is
// false when it carries none.
func dsnPassword(dialect, dsn string) (pw string, ok bool) {
	s := strings.TrimSpace(dsn)
	if dialect == "mysql" || strings.Contains(s, "@tcp(") || strings.Contains(s, "@unix(") {
		// [user[:password]@][net[(addr)]]/dbname[?params]: the driver takes
		// the credentials before the last '@' ahead of the last '/'.
		slash := strings.LastIndex(s, "/")
		if slash < 0 {
			slash = len(s)
		}
		at := strings.LastIndex(s[:slash], "@")
		if at < 0 {
			return "", false
		}
		_, pass, has := strings.Cut(s[:at], ":")
		return pass, has
	}
	if i := strings.Index(s, "://"); i >= 0 {
		// The URL form; placeholders are not valid in a URL's userinfo,
		// so read it by hand: scheme://[user[:password]@]host...
		rest := s[i+3:]
		if j := strings.IndexAny(rest, "/?#"); j >= 0 {
			rest = rest[:j]
		}
		at := strings.LastIndex(rest, "@")
		if at < 0 {
			return urlQueryPassword(s)
		}
		_, pass, has := strings.Cut(rest[:at], ":")
		if has {
			if p, err := url.PathUnescape(pass); err == nil {
				pass = p
			}
			return pass, true
		}
		return urlQueryPassword(s)
	}
	return keywordPassword(s)
}

// urlQueryPassword returns a password=... query parameter of a URL DSN.
func urlQueryPassword(s string) (string, bool) {
	_, q, ok := strings.Cut(s, "?")
	if !ok {
		return "", false
	}
	for _, kv := range strings.Split(q, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if k == "password" {
			if p, err := url.QueryUnescape(v); err == nil {
				v = p
			}
			return v, true
		}
	}
	return "", false
}

// keywordPassword returns the value of the password keyword of a libpq
// keyword/value DSN: key=value pairs separated by spaces, a value quoted
// with single quotes and backslash escapes.
func keywordPassword(s string) (string, bool) {
	for _, kv := range keywordPairs(s) {
		if kv[0] == "password" {
			return kv[1], true
		}
	}
	return "", false
}

// keywordPairs splits a keyword/value DSN into its pairs, as libpq does.
func keywordPairs(s string) [][2]string {
	var pairs [][2]string
	for {
		s = strings.TrimLeft(s, " \t\n\r")
		if s == "" {
			return pairs
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return pairs
		}
		key := strings.TrimSpace(s[:eq])
		s = strings.TrimLeft(s[eq+1:], " \t")
		var val strings.Builder
		if strings.HasPrefix(s, "'") {
			i := 1
			for ; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
			}
			s = s[min(i+1, len(s)):]
		} else {
			i := 0
			for ; i < len(s) && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
			}
			s = s[i:]
		}
		pairs = append(pairs, [2]string{key, val.String()})
	}
}

// expandDSN replaces each ${NAME} in dsn with the environment variable NAME,
// escaped for where it stands: percent-encoded in a URL's userinfo or
// query, quoted when it is a whole keyword value. A variable that is not set
// is an ErrDSNVariable; so is a MySQL credential with a '/', which the
// driver would misread.
func expandDSN(db CatalogDatabase, lookup func(string) (string, bool)) (string, error) {
	dsn := db.DSN
	isURL := strings.Contains(dsn, "://")
	isMySQL := db.Dialect == "mysql" || strings.Contains(dsn, "@tcp(") || strings.Contains(dsn, "@unix(")
	var out strings.Builder
	last := 0
	for _, m := range placeholder.FindAllStringSubmatchIndex(dsn, -1) {
		name := dsn[m[2]:m[3]]
		v, ok := lookup(name)
		if !ok {
			return "", withDetail(ErrDSNVariable, fmt.Sprintf("database %s: ${%s} in its DSN is not set in the environment", db.Name, name))
		}
		out.WriteString(dsn[last:m[0]])
		switch {
		case isMySQL:
			if strings.ContainsAny(v, "/@") && m[0] < strings.LastIndex(dsn, "@") {
				return "", withDetail(ErrDSNVariable, fmt.Sprintf("database %s: ${%s} holds a '/' or '@', which a MySQL DSN's credentials cannot carry", db.Name, name))
			}
			out.WriteString(v)
		case isURL:
			out.WriteString(escapeURLPart(v))
		case m[0] > 0 && dsn[m[0]-1] == '=' && (m[1] == len(dsn) || strings.ContainsRune(" \t\n\r", rune(dsn[m[1]]))):
			out.WriteString("'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'")
		default:
			out.WriteString(v)
		}
		last = m[1]
	}
	out.WriteString(dsn[last:])
	return out.String(), nil
}

// escapeURLPart percent-encodes every byte of s but the unreserved ones
// (RFC 3986), so that it stands for itself in a URL's userinfo or query.
func escapeURLPart(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// expandSetup returns setup with the ${NAME} placeholders in its databases'
// DSNs replaced from the environment: what LoadSetup does.
func expandSetup(setup CatalogSetup, lookup func(string) (string, bool)) (CatalogSetup, error) {
	dbs := make([]CatalogDatabase, len(setup.Databases))
	for i, d := range setup.Databases {
		dsn, err := expandDSN(d, lookup)
		if err != nil {
			return setup, err
		}
		d.DSN = dsn
		dbs[i] = d
	}
	setup.Databases = dbs
	return setup, nil
}
