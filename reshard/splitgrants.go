package reshard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/shardid/shardid/internal/routesql"
	"gorm.io/gorm"
)

// A split on PostgreSQL gives each shard's schema on its target what the
// monolith's sharded tables have besides their rows: their owners and
// their privileges. The roles that read and write the monolith's rows (an
// application's role that may do nothing else) read and write the
// shards' once they are split, and the role that owns the tables (the one
// that runs the migrations) owns their copies, the fence's state and
// function with them, so that it may alter them and run later moves.
//
// Before it changes anything, a split checks that its mover may do what it
// will do (splitPrivileges): a split that stopped for a missing privilege
// halfway would leave the operator a half-made state to run again.

// splitGrants is what a PostgreSQL split gives each shard's schema.
type splitGrants struct {
	me    string // the mover, quoted
	owner string // the schema's owner, quoted: the first sharded table's
	// tableOwner is each sharded table's owner, quoted, by name.
	tableOwner map[string]string
	// grants are the privileges granted on each sharded table or on its
	// columns, by table name, with whether the grant option goes with them.
	grants map[string]map[tableGrant]bool
	// users are the roles (quoted, or PUBLIC) but the owner that hold a
	// privilege on a sharded table or a column of one: they get USAGE on
	// the schema.
	users []string
	// rowSecurity are the sharded tables with row-level security on,
	// whose policies a split does not carry.
	rowSecurity []string
}

// tableGrant is a privilege granted on a table, or on one of its columns.
type tableGrant struct {
	grantee   string // quoted, or PUBLIC
	privilege string
	column    string // quoted; "" for the whole table
}

// readSplitGrants reads the owners and privileges of tables (the sharded
// tables, parents first) in schema on the monolith mono.
func readSplitGrants(ctx context.Context, mono *gorm.DB, schema string, tables []string) (*splitGrants, error) {
	// The table's ACL, then each column's: column "" for the table.
	var rows []struct {
		Tbl, Owner, Col, Grantee, Privilege string
		Grantable                           bool
	}
	err := mono.WithContext(ctx).Raw(`SELECT c.relname AS tbl, quote_ident(pg_get_userbyid(c.relowner)) AS owner, '' AS col,
			COALESCE(CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END, '') AS grantee,
			COALESCE(a.privilege_type, '') AS privilege, COALESCE(a.is_grantable, false) AS grantable
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN LATERAL aclexplode(COALESCE(c.relacl, acldefault('r', c.relowner))) a ON true
		WHERE n.nspname = ? AND c.relname IN ?
		UNION ALL
		SELECT c.relname, quote_ident(pg_get_userbyid(c.relowner)), quote_ident(att.attname),
			CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(x.grantee)) END,
			x.privilege_type, x.is_grantable
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_attribute att ON att.attrelid = c.oid AND att.attnum > 0 AND NOT att.attisdropped AND att.attacl IS NOT NULL
		CROSS JOIN LATERAL aclexplode(att.attacl) x
		WHERE n.nspname = ? AND c.relname IN ?`, schema, tables, schema, tables).Scan(&rows).Error
	if err != nil {
		return nil, err
	}
	g := &splitGrants{tableOwner: map[string]string{}, grants: map[string]map[tableGrant]bool{}}
	if err := mono.WithContext(ctx).Raw("SELECT quote_ident(current_user)").Scan(&g.me).Error; err != nil {
		return nil, err
	}
	for _, r := range rows {
		g.tableOwner[r.Tbl] = r.Owner
		// The owner holds what it holds as the owner. A privilege granted
		// by two grantors is held with the grant option if either gave it.
		if r.Privilege == "" || r.Grantee == r.Owner {
			continue
		}
		if g.grants[r.Tbl] == nil {
			g.grants[r.Tbl] = map[tableGrant]bool{}
		}
		k := tableGrant{r.Grantee, r.Privilege, r.Col}
		g.grants[r.Tbl][k] = g.grants[r.Tbl][k] || r.Grantable
		if !slices.Contains(g.users, r.Grantee) {
			g.users = append(g.users, r.Grantee)
		}
	}
	err = mono.WithContext(ctx).Raw(`SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = ? AND c.relname IN ? AND c.relrowsecurity ORDER BY 1`, schema, tables).Scan(&g.rowSecurity).Error
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		if o, ok := g.tableOwner[t]; ok {
			g.owner = o
			break
		}
	}
	slices.Sort(g.users)
	g.users = slices.DeleteFunc(g.users, func(u string) bool { return u == g.owner })
	return g, nil
}

// owners returns the tables' owners and the schema's, but the mover, once
// each, in order.
func (g *splitGrants) owners() []string {
	var out []string
	for _, o := range g.tableOwner {
		if o != g.me && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}

// statements returns what gives schema sc (just created by the mover, or
// found, of a batch run again) on its target the monolith's owners and
// privileges: its tables, the fence's state table and function (fence)
// among them, owned as the monolith's, the schema by the first table's
// owner, and every privilege held on a monolith table or a column of one
// held on its copy, with USAGE on the schema for whoever holds one. It
// grants, and revokes nothing: a fresh table has only its owner's
// privileges (and those the mover's ALTER DEFAULT PRIVILEGES add).
func (g *splitGrants) statements(sc string, tables []string, fence bool) []string {
	if g == nil {
		return nil
	}
	q := func(t string) string { return `"` + sc + `"."` + t + `"` }
	var out []string
	if g.owner != "" && g.owner != g.me {
		out = append(out, fmt.Sprintf(`ALTER SCHEMA "%s" OWNER TO %s`, sc, g.owner))
		if fence {
			out = append(out, fmt.Sprintf(`ALTER TABLE "%s".%s OWNER TO %s`, sc, fenceTable, g.owner),
				fmt.Sprintf(`ALTER FUNCTION "%s".shardid_fence() OWNER TO %s`, sc, g.owner))
		}
	}
	for _, t := range tables {
		if o, ok := g.tableOwner[t]; ok && o != g.me {
			out = append(out, fmt.Sprintf("ALTER TABLE %s OWNER TO %s", q(t), o))
		}
	}
	if len(g.users) > 0 {
		out = append(out, fmt.Sprintf(`GRANT USAGE ON SCHEMA "%s" TO %s`, sc, strings.Join(g.users, ", ")))
	}
	for _, t := range tables {
		// One GRANT a grantee, column and grant option:
		// GRANT INSERT, SELECT ON t TO app; GRANT UPDATE (name) ON t TO app.
		type to struct {
			grantee, column string
			grantable       bool
		}
		privs := map[to][]string{}
		for k, grantable := range g.grants[t] {
			privs[to{k.grantee, k.column, grantable}] = append(privs[to{k.grantee, k.column, grantable}], k.privilege)
		}
		keys := slices.Collect(maps.Keys(privs))
		slices.SortFunc(keys, func(a, b to) int {
			return cmp.Or(strings.Compare(a.grantee, b.grantee), strings.Compare(a.column, b.column), cmp.Compare(boolInt(a.grantable), boolInt(b.grantable)))
		})
		for _, k := range keys {
			p := privs[k]
			slices.Sort(p)
			if k.column != "" {
				for i := range p {
					p[i] += " (" + k.column + ")"
				}
			}
			s := fmt.Sprintf("GRANT %s ON %s TO %s", strings.Join(p, ", "), q(t), k.grantee)
			if k.grantable {
				s += " WITH GRANT OPTION"
			}
			out = append(out, s)
		}
	}
	return out
}

// boolInt is 1 for true, 0 for false: an order of bools.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// splitPrivileges returns what keeps the mover of sp from splitting shards
// onto targets (indexes in cfg.DBs), each naming the privilege and the
// fix, and the monolith's owners and privileges the split gives each
// shard's schema (PostgreSQL; nil on MySQL).
//
// On PostgreSQL the mover needs, on each sharded table of the monolith,
// SELECT, INSERT, UPDATE, DELETE (the change log's replay and a roll
// back), TRIGGER (the split's triggers) and TRUNCATE (the monolith
// emptied at the end), and CREATE on its schema (the split's state and
// functions); on each target, CREATE on the database (the schemas); and to
// give the copies the monolith's owner, membership in its role (with the
// SET option on PostgreSQL 16). The sharded tables must have one owner
// and no row-level security (a split does not carry policies), and every
// role that owns or holds a privilege on one must be able to connect to
// each target.
//
// On MySQL/MariaDB it checks the servers' binary logging (checkTriggers),
// and that the users of the monolith's sharded tables may use the shards'
// databases (usersMySQL), which grants there name: a split cannot carry
// them. It warns when it cannot read other users' privileges.
func (sp *splitter) splitPrivileges(ctx context.Context, targets []int, shards map[int][]int) (problems, warnings []string, g *splitGrants, err error) {
	names := sp.cfg.Map.Databases()
	if sp.mysql {
		for _, d := range append([]int{sp.monoIdx}, targets...) {
			if err := checkTriggers(ctx, sp.cfg.DBs[d]); err != nil {
				var de *detailError
				if !errors.As(err, &de) || !errors.Is(err, ErrMoverPrivileges) {
					return nil, nil, nil, err
				}
				problems = append(problems, names[d]+": "+de.detail)
			}
		}
		users, warnings, readers, err := sp.usersMySQL(ctx, targets, shards)
		return append(problems, users...), warnings, &splitGrants{users: readers}, err
	}
	tables := sp.tableNames()
	g, err = readSplitGrants(ctx, sp.mono, sp.schema, tables)
	if err != nil {
		return nil, nil, nil, err
	}
	if p, err := sp.foreignSplitObjectsPG(ctx); err != nil {
		return nil, nil, nil, err
	} else if p != "" {
		problems = append(problems, p)
	}
	// The mover on the monolith.
	for _, t := range tables {
		var privs string
		err := sp.mono.WithContext(ctx).Raw(`SELECT COALESCE(string_agg(p, ', ' ORDER BY p), '')
			FROM unnest(ARRAY['DELETE', 'INSERT', 'SELECT', 'TRIGGER', 'TRUNCATE', 'UPDATE']) AS p
			WHERE NOT has_table_privilege(CAST(? AS regclass), p)`, sp.q(t)).Scan(&privs).Error
		if err != nil {
			return nil, nil, nil, err
		}
		if privs == "" {
			continue
		}
		problems = append(problems, fmt.Sprintf("%s: the mover (%s) lacks %s on table %s: run the split as its owner (%s), or GRANT %[3]s ON %[4]s TO %[2]s",
			names[sp.monoIdx], g.me, privs, sp.q(t), g.tableOwner[t]))
	}
	var create bool
	if err := sp.mono.WithContext(ctx).Raw("SELECT has_schema_privilege(?, 'CREATE')", sp.schema).Scan(&create).Error; err != nil {
		return nil, nil, nil, err
	}
	if !create {
		problems = append(problems, fmt.Sprintf("%s: the mover (%s) may not create in schema %s (the split's state and functions): GRANT CREATE ON SCHEMA %[3]s TO %[2]s",
			names[sp.monoIdx], g.me, quotePGName(sp.schema)))
	}
	// One owner: a shard's schema has one, and a role may be given a table
	// in it only if it may create there.
	byOwner := map[string][]string{}
	for _, t := range tables {
		if o, ok := g.tableOwner[t]; ok {
			byOwner[o] = append(byOwner[o], t)
		}
	}
	if len(byOwner) > 1 {
		var parts []string
		for _, o := range slices.Sorted(maps.Keys(byOwner)) {
			parts = append(parts, o+" ("+strings.Join(byOwner[o], ", ")+")")
		}
		problems = append(problems, fmt.Sprintf("%s: the sharded tables belong to several roles, %s, and each shard's schema will have one owner: "+
			"give them one (ALTER TABLE ... OWNER TO %s) before the split", names[sp.monoIdx], strings.Join(parts, ", "), g.owner))
	}
	for _, t := range g.rowSecurity {
		problems = append(problems, fmt.Sprintf("%s: table %s has row-level security, whose policies a split does not carry (the shards' copies would show every row): "+
			"disable it (ALTER TABLE %[2]s DISABLE ROW LEVEL SECURITY) or split by hand", names[sp.monoIdx], sp.q(t)))
	}
	// On each target: the schemas, their owners, their users.
	for _, d := range targets {
		db := sp.cfg.DBs[d]
		var dbName string
		if err := db.WithContext(ctx).Raw("SELECT quote_ident(current_database()) AS db, has_database_privilege(current_database(), 'CREATE') AS ok").
			Row().Scan(&dbName, &create); err != nil {
			return nil, nil, nil, err
		}
		if !create {
			problems = append(problems, fmt.Sprintf("%s: the mover (%s) may not create schemas in database %s: GRANT CREATE ON DATABASE %[3]s TO %[2]s", names[d], g.me, dbName))
		}
		for _, o := range g.owners() {
			// Making a role own an object takes SET ROLE to it (the SET
			// option of a membership on PostgreSQL 16 and later), and the
			// mover works on the copies as their owner (USAGE: inherits).
			var ok struct{ Exists, Member, Super bool }
			err := db.WithContext(ctx).Raw(`SELECT r.oid IS NOT NULL AS exists,
				COALESCE(pg_has_role(current_user, r.oid, 'USAGE') AND (current_setting('server_version_num')::int < 160000
					OR pg_has_role(current_user, r.oid, 'SET')), false) AS member,
				COALESCE((SELECT rolsuper FROM pg_roles WHERE oid = r.oid), false) AS super
				FROM (SELECT to_regrole(?) AS oid) AS r`, o).Scan(&ok).Error
			if err != nil {
				return nil, nil, nil, err
			}
			switch {
			case !ok.Exists:
				problems = append(problems, fmt.Sprintf("%s: role %s owns the monolith's sharded tables and does not exist there: create it", names[d], o))
			case !ok.Member && ok.Super:
				problems = append(problems, fmt.Sprintf("%s: role %s, a superuser, owns the monolith's sharded tables, and the mover (%s) may not make it own their copies: "+
					"run the split as a superuser, or give the tables to a role that is not one (ALTER TABLE ... OWNER TO) and run it as that role", names[d], o, g.me))
			case !ok.Member:
				problems = append(problems, fmt.Sprintf("%s: role %s owns the monolith's sharded tables, and the mover (%s) may not make it own their copies: run the split as %[2]s, or GRANT %[2]s TO %[3]s", names[d], o, g.me))
			}
		}
		for _, u := range append(g.owners(), g.users...) {
			if u == "PUBLIC" {
				continue
			}
			var ok bool
			err := db.WithContext(ctx).Raw(`SELECT COALESCE(has_database_privilege(to_regrole(?), current_database(), 'CONNECT'), false)`, u).Scan(&ok).Error
			if err != nil {
				return nil, nil, nil, err
			}
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: role %s owns, reads or writes the monolith's sharded tables, and may not connect to database %s (or does not exist there): GRANT CONNECT ON DATABASE %[3]s TO %[2]s", names[d], u, dbName))
			}
		}
	}
	return problems, nil, g, nil
}

// rowPrivileges are the privileges on rows that a split's shards must
// grant whoever holds them on the monolith's sharded tables.
var rowPrivileges = []string{"DELETE", "INSERT", "SELECT", "UPDATE"}

// usersMySQL returns, for each user that holds a privilege on rows of the
// monolith's sharded tables (by table, or by a grant on the monolith's
// database or a pattern that covers it) and does not hold it on the
// shards' databases on a target (shards: each target's shards of the
// batch, whose first and last databases are checked), the GRANT that
// fixes it: once split, the user's writes to those shards would be
// denied. A user granted privileges on every database holds them there;
// privileges a user holds through a role are not seen (the user is
// refused, naming the GRANT). When the mover may not read other users'
// privileges (SELECT on mysql.*) on a server, it warns instead, naming
// the GRANT to check.
func (sp *splitter) usersMySQL(ctx context.Context, targets []int, shards map[int][]int) (problems, warnings, readers []string, err error) {
	names := sp.cfg.Map.Databases()
	grant := "ON `" + grantPattern(sp.cfg.Map.SchemaPattern()) + "`.*"
	// information_schema shows a user other users' privileges only if it
	// may read the mysql database, on each server.
	for _, d := range append([]int{sp.monoIdx}, targets...) {
		ok, err := seesGrantsMySQL(ctx, sp.cfg.DBs[d])
		if err != nil {
			return nil, nil, nil, err
		}
		if !ok {
			warnings = append(warnings, fmt.Sprintf("the mover may not read other users' privileges on %s (it needs SELECT on mysql.*): make sure each user that reads or writes "+
				"the monolith's sharded tables may on the shards' databases too, e.g. GRANT SELECT, INSERT, UPDATE, DELETE %s TO the user", names[d], grant))
			return nil, warnings, nil, nil
		}
	}
	tables := sp.tableNames()
	var held []struct{ Grantee, Priv string }
	err = sp.mono.WithContext(ctx).Raw(`SELECT GRANTEE AS grantee, PRIVILEGE_TYPE AS priv FROM information_schema.TABLE_PRIVILEGES
			WHERE TABLE_SCHEMA = ? AND TABLE_NAME IN ? AND PRIVILEGE_TYPE IN ?
		UNION SELECT GRANTEE, PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES WHERE ? LIKE TABLE_SCHEMA AND PRIVILEGE_TYPE IN ?
		ORDER BY 1, 2`, sp.schema, tables, rowPrivileges, sp.schema, rowPrivileges).Scan(&held).Error
	if err != nil {
		return nil, nil, nil, err
	}
	need := map[string][]string{}
	var users []string
	for _, h := range held {
		if need[h.Grantee] == nil {
			users = append(users, h.Grantee)
		}
		if !slices.Contains(need[h.Grantee], h.Priv) {
			need[h.Grantee] = append(need[h.Grantee], h.Priv)
		}
	}
	// A role's grants on the monolith are those of each user that holds
	// it active at login: such a user is checked too, on each target with
	// its roles there (a target may be another server, whose users hold
	// other roles), besides the role itself.
	monoRoles, isRole, err := activeRolesMySQL(ctx, sp.mono)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, g := range slices.Clone(users) {
		if !isRole[g] {
			continue
		}
		for _, h := range slices.Sorted(maps.Keys(monoRoles)) {
			if isRole[h] || !slices.Contains(monoRoles[h], g) {
				continue
			}
			if need[h] == nil {
				users = append(users, h)
			}
			for _, p := range need[g] {
				if !slices.Contains(need[h], p) {
					need[h] = append(need[h], p)
				}
			}
		}
	}
	for _, d := range targets {
		db, list := sp.cfg.DBs[d], shards[d]
		if len(list) == 0 {
			continue
		}
		roles, _, err := activeRolesMySQL(ctx, db)
		if err != nil {
			return nil, nil, nil, err
		}
		for _, u := range users {
			var missing []string
			who := append([]string{u}, roles[u]...) // its privileges and its roles'
			for _, s := range []int{list[0], list[len(list)-1]} {
				var have []string
				err := db.WithContext(ctx).Raw(`SELECT PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE IN ? AND ? LIKE TABLE_SCHEMA
					UNION SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE IN ?`, who, sp.cfg.Map.SchemaOf(s), who).Scan(&have).Error
				if err != nil {
					return nil, nil, nil, err
				}
				for _, p := range need[u] {
					if !slices.Contains(have, p) && !slices.Contains(missing, p) {
						missing = append(missing, p)
					}
				}
			}
			if len(missing) > 0 {
				slices.Sort(missing)
				to, what := grantTo(u), "user"
				if to != u {
					what = "role"
				}
				problems = append(problems, fmt.Sprintf("%s: %s %s may %s rows of the monolith's sharded tables, and not on the shards' databases there (%s to %s): GRANT %s %s TO %s",
					names[d], what, to, strings.Join(missing, ", "), sp.cfg.Map.SchemaOf(list[0]), sp.cfg.Map.SchemaOf(list[len(list)-1]), strings.Join(missing, ", "), grant, to))
			}
		}
	}
	// Their routers read the split's state after a write that changed no
	// row (ErrUncheckedWrite when they may not): the split grants them
	// SELECT on it when it creates it, if the mover may grant.
	for _, u := range users {
		var n int64
		who := append([]string{u}, monoRoles[u]...)
		err := sp.mono.WithContext(ctx).Raw(`SELECT
			(SELECT COUNT(*) FROM information_schema.USER_PRIVILEGES WHERE GRANTEE IN ? AND PRIVILEGE_TYPE = 'SELECT') +
			(SELECT COUNT(*) FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE IN ? AND ? LIKE TABLE_SCHEMA AND PRIVILEGE_TYPE = 'SELECT') +
			(SELECT COUNT(*) FROM information_schema.TABLE_PRIVILEGES WHERE GRANTEE IN ? AND TABLE_SCHEMA = ? AND TABLE_NAME = ? AND PRIVILEGE_TYPE = 'SELECT')`,
			who, who, sp.schema, who, sp.schema, splitStateTable).Scan(&n).Error
		if err != nil {
			return nil, nil, nil, err
		}
		if n == 0 {
			readers = append(readers, u)
		}
	}
	if len(readers) > 0 {
		var can int64
		err := sp.mono.WithContext(ctx).Raw(`SELECT
			(SELECT COUNT(*) FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = g.me AND IS_GRANTABLE = 'YES') +
			(SELECT COUNT(*) FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE = g.me AND ? LIKE TABLE_SCHEMA AND IS_GRANTABLE = 'YES')
			FROM `+currentGranteeMySQL+` AS g`, sp.schema).Scan(&can).Error
		if err != nil {
			return nil, nil, nil, err
		}
		if can == 0 {
			for _, u := range readers {
				warnings = append(warnings, fmt.Sprintf("%s writes the monolith's sharded tables and may not read %s, which its routers read after a write that changed no row "+
					"(shardid.ErrUncheckedWrite until it may), and the mover may not grant it: once the first batch has created it, GRANT SELECT ON %[2]s TO %s",
					u, sp.q(splitStateTable), grantTo(u)))
			}
			readers = nil
		}
	}
	return problems, warnings, readers, nil
}

// activeRolesMySQL returns the roles that each user (or role) of db's
// server holds active from its login on, as information_schema spells
// grantees ('name'@'host'; a MariaDB role 'name'@”), and which grantees
// are roles: the roles a role holds, and a user's default roles (MariaDB's
// one, MySQL 8's list, or every role granted to it under MySQL 8's
// activate_all_roles_on_login) that it still holds, each with the roles it
// holds in turn. Their privileges are the holder's. A role the user must
// SET ROLE to use is not counted: a pooled session does not keep it. A
// MySQL 8 role is a locked account; one that may log in is a user, whose
// granted roles count only as its defaults. It reads the mysql database
// (seesGrantsMySQL).
func activeRolesMySQL(ctx context.Context, db *gorm.DB) (active map[string][]string, isRole map[string]bool, err error) {
	var tables []string
	err = db.WithContext(ctx).Raw(`SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'mysql'
		AND TABLE_NAME IN ('roles_mapping', 'role_edges', 'default_roles')`).Scan(&tables).Error
	if err != nil {
		return nil, nil, err
	}
	type edge struct{ Holder, Role string }
	var granted, defaults []edge
	isRole = map[string]bool{}
	switch {
	case slices.Contains(tables, "roles_mapping"): // MariaDB
		err = db.WithContext(ctx).Raw(`SELECT CONCAT('''', User, '''@''', Host, '''') AS holder, CONCAT('''', Role, '''@''''') AS role
			FROM mysql.roles_mapping`).Scan(&granted).Error
		if err == nil {
			err = db.WithContext(ctx).Raw(`SELECT CONCAT('''', User, '''@''', Host, '''') AS holder, CONCAT('''', default_role, '''@''''') AS role
				FROM mysql.user WHERE default_role <> ''`).Scan(&defaults).Error
		}
		for _, e := range granted {
			isRole[e.Role] = true
			if strings.HasSuffix(e.Holder, "@''") {
				isRole[e.Holder] = true
			}
		}
	case slices.Contains(tables, "role_edges"): // MySQL 8
		err = db.WithContext(ctx).Raw(`SELECT CONCAT('''', TO_USER, '''@''', TO_HOST, '''') AS holder, CONCAT('''', FROM_USER, '''@''', FROM_HOST, '''') AS role
			FROM mysql.role_edges`).Scan(&granted).Error
		var locked []string
		if err == nil {
			err = db.WithContext(ctx).Raw(`SELECT CONCAT('''', User, '''@''', Host, '''') FROM mysql.user WHERE account_locked = 'Y'`).Scan(&locked).Error
		}
		var all bool
		if err == nil {
			err = db.WithContext(ctx).Raw("SELECT @@activate_all_roles_on_login").Scan(&all).Error
		}
		switch {
		case err != nil:
		case all:
			defaults = granted
		case slices.Contains(tables, "default_roles"):
			err = db.WithContext(ctx).Raw(`SELECT CONCAT('''', USER, '''@''', HOST, '''') AS holder, CONCAT('''', DEFAULT_ROLE_USER, '''@''', DEFAULT_ROLE_HOST, '''') AS role
				FROM mysql.default_roles`).Scan(&defaults).Error
		}
		for _, e := range granted {
			if slices.Contains(locked, e.Role) {
				isRole[e.Role] = true
			}
			if slices.Contains(locked, e.Holder) {
				isRole[e.Holder] = true
			}
		}
	default:
		return nil, isRole, nil // a server without roles
	}
	if err != nil {
		return nil, nil, err
	}
	holds := map[string][]string{} // the roles granted to each holder
	for _, e := range granted {
		holds[e.Holder] = append(holds[e.Holder], e.Role)
	}
	start := map[string][]string{}
	for _, e := range defaults {
		// A default role revoked since stays recorded, and inactive.
		if slices.Contains(holds[e.Holder], e.Role) {
			start[e.Holder] = append(start[e.Holder], e.Role)
		}
	}
	for r := range isRole {
		start[r] = append(start[r], holds[r]...)
	}
	active = map[string][]string{}
	for holder, first := range start {
		var list []string
		for next := first; len(next) > 0; {
			r := next[0]
			next = next[1:]
			if r == holder || slices.Contains(list, r) {
				continue
			}
			list = append(list, r)
			next = append(next, holds[r]...)
		}
		active[holder] = list
	}
	return active, isRole, nil
}

// grantPattern is the MySQL grant pattern of the databases SchemaPattern
// pattern names: its number a wildcard, its other characters literal.
func grantPattern(pattern string) string {
	esc := strings.NewReplacer(`\`, `\\`, "_", `\_`, "%", `\%`)
	loc := schemaVerb.FindStringIndex(pattern)
	if loc == nil {
		return esc.Replace(pattern)
	}
	return esc.Replace(pattern[:loc[0]]) + "%" + esc.Replace(pattern[loc[1]:])
}

// schemaVerb is the verb of a SchemaPattern: %d, %04d.
var schemaVerb = regexp.MustCompile(`%0?[0-9]*d`)

// seesGrantsMySQL reports whether db's user sees other users' privileges
// in information_schema: it may read the mysql database (globally, or by a
// grant on it).
func seesGrantsMySQL(ctx context.Context, db *gorm.DB) (bool, error) {
	var n int64
	err := db.WithContext(ctx).Raw(`SELECT
		(SELECT COUNT(*) FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = g.me AND PRIVILEGE_TYPE = 'SELECT') +
		(SELECT COUNT(*) FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE = g.me AND 'mysql' LIKE TABLE_SCHEMA AND PRIVILEGE_TYPE = 'SELECT')
		FROM ` + currentGranteeMySQL + ` AS g`).Scan(&n).Error
	return n > 0, err
}

// currentGranteeMySQL is a derived table whose column me is the session's
// user as information_schema names grantees: 'name'@'host'.
const currentGranteeMySQL = `(SELECT CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''') AS me)`

// grantTo is what a GRANT names grantee (as information_schema spells it)
// by: 'name'@'host' for a user, name for a MariaDB role (an empty host).
func grantTo(grantee string) string {
	if r, ok := strings.CutSuffix(grantee, "@''"); ok {
		return strings.Trim(r, "'")
	}
	return grantee
}

// splitObjectsPG are the names of the split's own tables and functions in
// the monolith's schema (PostgreSQL).
func (sp *splitter) splitObjectsPG() (tables, functions []string) {
	tables = []string{splitTablesTable, splitStateTable, splitChangeTable, splitBackTable}
	functions = []string{"shardid_split_check", routesql.SplitSealedFunction, splitDoneFunction}
	for _, t := range sp.tables {
		functions = append(functions, splitFunction(t.Name))
	}
	return tables, functions
}

// ownSplitObjectsPG gives the split's own tables and functions on the
// monolith (as they exist) to owner, the sharded tables' owner (quoted),
// where they belong to another role and owner may create in the schema:
// a later batch, a roll-back or an abort run by that owner, not a
// superuser, may then use them, whoever ran the first batch. A mover that
// may not give them away leaves them as they are (splitPrivileges refuses
// a mover that may not use them).
func (sp *splitter) ownSplitObjectsPG(ctx context.Context, owner string) error {
	if sp.mysql || owner == "" {
		return nil
	}
	// Under a lock timeout, retried: ALTER TABLE takes the state table,
	// which every write of the monolith's sharded tables reads, for
	// itself, and must not hold the writers up behind a long transaction.
	return lockedTx(ctx, sp.mono, sp.schema, func(tx *gorm.DB) error { return sp.handOverPG(tx, owner) })
}

// handOverPG is ownSplitObjectsPG in tx, the transaction that creates
// them (or a lockedTx of its own).
func (sp *splitter) handOverPG(tx *gorm.DB, owner string) error {
	if sp.mysql || owner == "" {
		return nil
	}
	tables, functions := sp.splitObjectsPG()
	var alters []string
	err := tx.Raw(`SELECT 'ALTER TABLE ' || quote_ident(n.nspname) || '.' || quote_ident(c.relname) || ' OWNER TO ' || ?
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = ? AND c.relname IN ? AND c.relkind = 'r' AND quote_ident(pg_get_userbyid(c.relowner)) <> ?
			AND has_schema_privilege(to_regrole(?), n.oid, 'CREATE') AND pg_has_role(c.relowner, 'USAGE')
			AND pg_has_role(to_regrole(?), 'USAGE')
		UNION ALL
		SELECT 'ALTER FUNCTION ' || p.oid::regprocedure::text || ' OWNER TO ' || ?
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = ? AND p.proname IN ? AND quote_ident(pg_get_userbyid(p.proowner)) <> ?
			AND has_schema_privilege(to_regrole(?), n.oid, 'CREATE') AND pg_has_role(p.proowner, 'USAGE')
			AND pg_has_role(to_regrole(?), 'USAGE')`,
		owner, sp.schema, tables, owner, owner, owner, owner, sp.schema, functions, owner, owner, owner).Scan(&alters).Error
	if err != nil {
		return err
	}
	for _, q := range alters {
		if err := tx.Exec(q).Error; err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// foreignSplitObjectsPG returns a problem (as splitPrivileges words them)
// when the split's own tables or functions on the monolith belong to a
// role the mover may not act as: a split begun by a superuser, run on by
// the tables' owner before a superuser's run gave them to it.
func (sp *splitter) foreignSplitObjectsPG(ctx context.Context) (string, error) {
	if sp.mysql {
		return "", nil
	}
	tables, functions := sp.splitObjectsPG()
	var found []struct{ Name, Owner string }
	err := sp.mono.WithContext(ctx).Raw(`SELECT c.relname AS name, pg_get_userbyid(c.relowner) AS owner
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = ? AND c.relname IN ? AND c.relkind = 'r' AND NOT pg_has_role(c.relowner, 'USAGE')
		UNION ALL
		SELECT p.proname, pg_get_userbyid(p.proowner) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = ? AND p.proname IN ? AND NOT pg_has_role(p.proowner, 'USAGE') ORDER BY 1`,
		sp.schema, tables, sp.schema, functions).Scan(&found).Error
	if err != nil || len(found) == 0 {
		return "", err
	}
	var names, owners []string
	for _, f := range found {
		names = append(names, f.Name)
		if !slices.Contains(owners, f.Owner) {
			owners = append(owners, f.Owner)
		}
	}
	var me string
	if err := sp.mono.WithContext(ctx).Raw("SELECT current_user").Scan(&me).Error; err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: the split's own objects there (%s) belong to %s, which the mover (%s) may not act as: a run before this one was another role's; "+
		"run this one as %[3]s or a superuser, which gives them to the sharded tables' owner", sp.cfg.Monolith, strings.Join(names, ", "), strings.Join(owners, ", "), me), nil
}

// ownSplitObjectsAsTablesPG is ownSplitObjectsPG for the sharded tables'
// owner, read from the monolith.
func (sp *splitter) ownSplitObjectsAsTablesPG(ctx context.Context) error {
	if sp.mysql {
		return nil
	}
	tables := sp.tableNames()
	g, err := readSplitGrants(ctx, sp.mono, sp.schema, tables)
	if err != nil {
		return err
	}
	return sp.ownSplitObjectsPG(ctx, g.owner)
}
