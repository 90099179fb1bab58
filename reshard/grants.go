package reshard

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"gorm.io/gorm"
)

// pgObject is a schema, or an object in it, with its owner and its
// privileges, as PostgreSQL's catalogs hold them.
type pgObject struct {
	// Kind is SCHEMA, TABLE, SEQUENCE, FUNCTION or PROCEDURE.
	Kind string
	// Name is the object's quoted name in the schema, with the identity
	// arguments of a function; "" for the schema itself.
	Name string
	// Owner is the owner's quoted name.
	Owner string
	// Linked is set on a sequence owned by a column: its owner is its
	// table's.
	Linked bool
	// Privileges maps "grantee privilege" (the grantee quoted, or PUBLIC)
	// to whether it is held with the grant option. A default ACL is
	// spelled out (acldefault), so that none means none.
	Privileges map[string]bool
}

// pgObjects reads the owner and privileges of schema and of its tables,
// views, sequences, functions and procedures on db, by kind and name.
func pgObjects(ctx context.Context, db *gorm.DB, schema string) (map[string]*pgObject, error) {
	var rows []struct {
		Kind, Name, Owner, Grantee, Privilege string
		Linked, Grantable                     bool
	}
	err := db.WithContext(ctx).Raw(`WITH s AS (SELECT oid, nspowner, nspacl FROM pg_namespace WHERE nspname = ?),
		objs AS (
			SELECT 'SCHEMA' AS kind, '' AS name, s.nspowner AS owner, false AS linked,
				COALESCE(s.nspacl, acldefault('n', s.nspowner)) AS acl FROM s
			UNION ALL
			SELECT CASE WHEN c.relkind = 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, quote_ident(c.relname), c.relowner,
				c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
					AND d.objid = c.oid AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')),
				COALESCE(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner))
			FROM pg_class c JOIN s ON c.relnamespace = s.oid WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
			UNION ALL
			SELECT CASE WHEN p.prokind = 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END,
				quote_ident(p.proname) || '(' || pg_get_function_identity_arguments(p.oid) || ')', p.proowner, false,
				COALESCE(p.proacl, acldefault('f', p.proowner))
			FROM pg_proc p JOIN s ON p.pronamespace = s.oid WHERE p.prokind IN ('f', 'p'))
		SELECT o.kind, o.name, quote_ident(pg_get_userbyid(o.owner)) AS owner, o.linked,
			COALESCE(CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END, '') AS grantee,
			COALESCE(a.privilege_type, '') AS privilege, COALESCE(a.is_grantable, false) AS grantable
		FROM objs o LEFT JOIN LATERAL aclexplode(o.acl) a ON true`, schema).Scan(&rows).Error
	if err != nil {
		return nil, err
	}
	objs := map[string]*pgObject{}
	for _, r := range rows {
		key := r.Kind + " " + r.Name
		o := objs[key]
		if o == nil {
			o = &pgObject{Kind: r.Kind, Name: r.Name, Owner: r.Owner, Linked: r.Linked, Privileges: map[string]bool{}}
			objs[key] = o
		}
		if r.Privilege != "" {
			o.Privileges[r.Grantee+" "+r.Privilege] = r.Grantable
		}
	}
	return objs, nil
}

// describe names o, in schema, for a message.
func (o *pgObject) describe(schema string) string {
	if o.Kind == "SCHEMA" {
		return "schema " + schema
	}
	return strings.ToLower(o.Kind) + " " + schema + "." + o.Name
}

// carried is what a PostgreSQL move carries from the source's schema to
// the copy besides tables and rows: the next_id() function with its
// sequence and the column defaults that call it, and the owners and
// privileges of the schema and its objects.
type carried struct {
	objs   map[string]*pgObject
	nextID *pgNextID
}

// readCarried checks, before a move creates anything, that the mover
// has the privileges the move needs, and returns ErrMoverPrivileges naming
// the role and the fix otherwise.
//
// On PostgreSQL it reads what the copy must carry from schema on src (see
// carried), and checks that the mover can give the copy on dst the
// source's owners and privileges: that it may make the source's owners own
// the copy, and that every role granted privileges on the schema may
// connect to dst's database.
//
// On MySQL/MariaDB it checks that the mover may create triggers on both
// servers (see checkTriggers), and returns nil privileges: grants there
// name databases, and a pattern such as `app\_%`.* covers the copy.
func readCarried(ctx context.Context, src, dst *gorm.DB, schema string, tables []string) (*carried, error) {
	if dst.Dialector.Name() == "mysql" {
		for _, db := range []*gorm.DB{src, dst} {
			if err := checkTriggers(ctx, db); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	objs, err := pgObjects(ctx, src, schema)
	if err != nil {
		return nil, err
	}
	// The moves' own objects (the fence, the change log), left by earlier
	// moves or fences, belong to whoever ran those: the move makes its own.
	for key, o := range objs {
		if strings.HasPrefix(o.Name, "shardid_") && !slices.Contains(tables, o.Name) {
			delete(objs, key)
		}
	}
	var me string
	if err := dst.WithContext(ctx).Raw("SELECT quote_ident(current_user)").Scan(&me).Error; err != nil {
		return nil, err
	}
	owners := map[string]bool{me: true}
	for _, o := range objs {
		if owners[o.Owner] {
			continue
		}
		owners[o.Owner] = true
		var ok struct{ Exists, Member bool }
		err := dst.WithContext(ctx).Raw(`SELECT to_regrole(?) IS NOT NULL AS exists,
			COALESCE(pg_has_role(current_user, to_regrole(?), 'USAGE'), false) AS member`, o.Owner, o.Owner).Scan(&ok).Error
		if err != nil {
			return nil, err
		}
		switch {
		case !ok.Exists:
			return nil, withDetail(ErrMoverPrivileges, fmt.Sprintf("%s belongs to role %s, which does not exist on the target: create it there", o.describe(schema), o.Owner))
		case !ok.Member:
			return nil, withDetail(ErrMoverPrivileges, fmt.Sprintf("%s belongs to role %s, and the mover (%s) may not make it own the copy: run the move as %[2]s, or GRANT %[2]s TO %[3]s", o.describe(schema), o.Owner, me))
		}
	}
	// The schema's new owner need not may create schemas in the target
	// database: ALTER SCHEMA ... OWNER asks that of the mover, who created
	// the copy (PostgreSQL's AlterSchemaOwner_internal).
	checked := map[string]bool{me: true}
	if s := objs["SCHEMA "]; s != nil {
		for k := range s.Privileges {
			grantee, _ := cutGrant(k)
			if grantee == "PUBLIC" || checked[grantee] {
				continue
			}
			checked[grantee] = true
			var ok bool
			err := dst.WithContext(ctx).Raw(`SELECT COALESCE(has_database_privilege(to_regrole(?), current_database(), 'CONNECT'), false)`, grantee).Scan(&ok).Error
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, withDetail(ErrMoverPrivileges, fmt.Sprintf("role %s uses schema %s on the source, and may not connect to the target database (or does not exist there): GRANT CONNECT ON DATABASE to it", grantee, schema))
			}
		}
	}
	nextID, err := readNextID(ctx, src, schema)
	if err != nil {
		return nil, err
	}
	return &carried{objs: objs, nextID: nextID}, nil
}

// apply gives the schema in (the copy of the shard's schema, under its
// staging name) on dst the source's next_id() (on tables), then gives it
// and the objects in it that the source's schema also has the source's
// owners and exactly the source's privileges: the roles that used the
// shard before the move use it after, and no others. Objects only the copy
// has (the move's own) are left as they are.
func (p *carried) apply(ctx context.Context, dst *gorm.DB, in string, tables []string) error {
	if p == nil {
		return nil
	}
	if err := p.nextID.apply(ctx, dst, in, tables); err != nil {
		return fmt.Errorf("next_id(): %w", err)
	}
	have, err := pgObjects(ctx, dst, in)
	if err != nil {
		return err
	}
	var stmts []string
	// Owners first: an owner change carries the privileges the old owner
	// held as owner over to the new one. Tables before their sequences,
	// whose owner follows theirs. ALTER TABLE serves views too.
	for _, kind := range []string{"SCHEMA", "TABLE", "SEQUENCE", "FUNCTION", "PROCEDURE"} {
		for key, want := range p.objs {
			got := have[key]
			if want.Kind != kind || got == nil || got.Owner == want.Owner || got.Linked {
				continue
			}
			stmts = append(stmts, fmt.Sprintf("ALTER %s %s OWNER TO %s", kind, pgTarget(kind, in, want.Name), want.Owner))
		}
	}
	if len(stmts) > 0 {
		if err := execAll(ctx, dst, stmts); err != nil {
			return err
		}
		if have, err = pgObjects(ctx, dst, in); err != nil {
			return err
		}
		stmts = nil
	}
	for key, want := range p.objs {
		got := have[key]
		if got == nil {
			continue
		}
		on := want.Kind + " " + pgTarget(want.Kind, in, want.Name)
		for k, grantable := range got.Privileges {
			grantee, priv := cutGrant(k)
			wantGrantable, ok := want.Privileges[k]
			switch {
			case !ok:
				stmts = append(stmts, fmt.Sprintf("REVOKE %s ON %s FROM %s CASCADE", priv, on, grantee))
			case grantable && !wantGrantable:
				stmts = append(stmts, fmt.Sprintf("REVOKE GRANT OPTION FOR %s ON %s FROM %s CASCADE", priv, on, grantee))
			}
		}
		for k, grantable := range want.Privileges {
			grantee, priv := cutGrant(k)
			gotGrantable, ok := got.Privileges[k]
			if !ok || (grantable && !gotGrantable) {
				q := fmt.Sprintf("GRANT %s ON %s TO %s", priv, on, grantee)
				if grantable {
					q += " WITH GRANT OPTION"
				}
				stmts = append(stmts, q)
			}
		}
	}
	return execAll(ctx, dst, stmts)
}

// cutGrant splits a key of pgObject.Privileges, "grantee privilege": the
// grantee, quoted, may hold a space ("App Role"), a privilege never does.
func cutGrant(k string) (grantee, privilege string) {
	i := strings.LastIndexByte(k, ' ')
	return k[:i], k[i+1:]
}

// execAll runs stmts in one transaction on db.
func execAll(ctx context.Context, db *gorm.DB, stmts []string) error {
	if len(stmts) == 0 {
		return nil
	}
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for _, q := range stmts {
			if err := tx.Exec(q).Error; err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
}

// pgTarget is the object called name (quoted, with a function's
// arguments) in schema, or the schema itself.
func pgTarget(kind, schema, name string) string {
	if kind == "SCHEMA" {
		return `"` + schema + `"`
	}
	return `"` + schema + `".` + name
}

// checkTriggers returns ErrMoverPrivileges when the MySQL/MariaDB server of
// db would refuse the triggers a move creates (error 1419): binary logging
// is on (MySQL 8's default; MariaDB's log_bin), log_bin_trust_function_creators
// is off, and the session's user lacks SUPER.
func checkTriggers(ctx context.Context, db *gorm.DB) error {
	var v struct {
		LogBin, Trust bool
		User          string
		Super         int64
	}
	err := db.WithContext(ctx).Raw(`SELECT @@log_bin AS log_bin, @@log_bin_trust_function_creators AS trust, CURRENT_USER() AS user,
		(SELECT count(*) FROM information_schema.user_privileges WHERE privilege_type = 'SUPER'
			AND grantee = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')) AS super`).
		Scan(&v).Error
	if err != nil {
		return err
	}
	if !v.LogBin || v.Trust || v.Super > 0 {
		return nil
	}
	var host string
	db.WithContext(ctx).Raw("SELECT CONCAT(@@hostname, ':', @@port)").Scan(&host)
	return withDetail(ErrMoverPrivileges, fmt.Sprintf("the server at %s logs binary (log_bin) with log_bin_trust_function_creators = 0, "+
		"so it refuses the triggers a move or a split creates to %s, who lacks SUPER (error 1419): GRANT SUPER ON *.* TO the mover, "+
		"or SET GLOBAL log_bin_trust_function_creators = 1 (and set it in the server's configuration)", host, v.User))
}
