package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

const privShards = 2

// privRouter builds a router over the two PostgreSQL databases as role.
func privRouter(t *testing.T, role string) *shardid.Router {
	t.Helper()
	r, err := shardid.NewRouter(shardid.RouterConfig{
		Databases: []*gorm.DB{testdb.OpenRole(t, role, ""), testdb.OpenRole(t, role, "shardid_test2")},
		Names:     []string{"pg1", "pg2"}, LogicalShards: privShards, SchemaPattern: "shardid_pv_%04d",
		Plugin: layoutPlugin(t, moveLayout, privShards, 0)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// privSetup drops the test's schemas on both databases, now and at the
// end (before its roles go).
func privSetup(t *testing.T) (a, b *gorm.DB) {
	a, b = openPostgres(t), testdb.OpenSecondPostgres(t)
	drop := func() {
		for _, db := range []*gorm.DB{a, b} {
			for s := range privShards {
				db.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS shardid_pv_%04d CASCADE", s))
			}
		}
	}
	drop()
	t.Cleanup(drop)
	return a, b
}

// owners returns the owners of the shard's schema and of its table on db.
func owners(t *testing.T, db *gorm.DB, schema string) (string, string) {
	t.Helper()
	var o struct{ Schema, Table string }
	err := db.Raw(`SELECT pg_get_userbyid(n.nspowner) AS schema, pg_get_userbyid(c.relowner) AS table
		FROM pg_namespace n JOIN pg_class c ON c.relnamespace = n.oid WHERE n.nspname = ? AND c.relname = 'r_photos'`, schema).Scan(&o).Error
	if err != nil {
		t.Fatal(err)
	}
	return o.Schema, o.Table
}

// A shard moved by a mover that is not a superuser stays usable by exactly
// the roles that used it before: the application role, granted USAGE on
// the shard's schema, DML on its tables and USAGE on its sequences, writes
// and reads it on its new database, also with IDs made by next_id(); a
// role without grants still cannot. The copy has the source's owner, also
// when it is a role the mover is a member of.
func TestMoveKeepsPrivilegesPostgres(t *testing.T) {
	for _, ownerIsMover := range []bool{true, false} {
		t.Run(fmt.Sprint("owner is mover ", ownerIsMover), func(t *testing.T) {
			ctx := context.Background()
			dstAdmin, srcAdmin := privSetup(t) // shard 1 is on pg2 (shardid_test2), and moves to pg1 (test)
			dbs := "GRANT CREATE, CONNECT ON DATABASE " + testdb.PostgresDatabase() + ", shardid_test2 TO %[1]s"
			owner := testdb.PostgresRole(t, "pvowner", dbs)
			mover := owner
			if !ownerIsMover {
				mover = testdb.PostgresRole(t, "pvmover", dbs, `GRANT "`+owner+`" TO %[1]s`)
			}
			app := testdb.PostgresRole(t, "pvapp", "GRANT CONNECT ON DATABASE "+testdb.PostgresDatabase()+", shardid_test2 TO %[1]s")
			stranger := testdb.PostgresRole(t, "pvstranger", "GRANT CONNECT ON DATABASE "+testdb.PostgresDatabase()+", shardid_test2 TO %[1]s")
			// A role whose quoted name holds a space, granted reads: its
			// grants are carried as the others' (privilegesOf).
			auditor := testdb.PostgresRole(t, "pv Auditor", "GRANT CONNECT ON DATABASE "+testdb.PostgresDatabase()+", shardid_test2 TO %[1]s")

			ro := privRouter(t, owner)
			if err := ro.Migrate(ctx, &RPhoto{}); err != nil {
				t.Fatal(err)
			}
			// IDs made by the database too: worker 1 (Go's is 0).
			if err := ro.InstallPostgresNextID(ctx, 1, "id", "r_photos"); err != nil {
				t.Fatal(err)
			}
			for s := range privShards {
				for _, g := range []string{"GRANT USAGE ON SCHEMA {{schema}} TO %q", "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {{schema}} TO %q",
					"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {{schema}} TO %q"} {
					if err := ro.ForShard(s).Exec(fmt.Sprintf(g, app)).Error; err != nil {
						t.Fatal(err)
					}
				}
				for _, g := range []string{"GRANT USAGE ON SCHEMA {{schema}} TO %q", "GRANT SELECT ON ALL TABLES IN SCHEMA {{schema}} TO %q"} {
					if err := ro.ForShard(s).Exec(fmt.Sprintf(g, auditor)).Error; err != nil {
						t.Fatal(err)
					}
				}
			}
			ra := privRouter(t, app)
			write := func(when string) {
				t.Helper()
				ph := &RPhoto{UserID: 1, Caption: when}
				if err := ra.ForKey(ph.UserID).Create(ph).Error; err != nil {
					t.Fatalf("the application writes shard 1 %s: %v", when, err)
				}
				if s := ra.ShardOf(ph.ID); s != 1 {
					t.Fatalf("user 1's photo is on shard %d", s)
				}
				var got RPhoto
				if err := ra.ForKey(ph.UserID).First(&got, "id = ?", ph.ID).Error; err != nil || got.Caption != when {
					t.Fatalf("the application reads shard 1 %s: %+v, %v", when, got, err)
				}
				var id shardid.ID
				err := ra.ForKey(1).Raw("INSERT INTO "+ra.Schema(1)+".r_photos (user_id, caption) VALUES (1, ?) RETURNING id", when).Scan(&id).Error
				if err != nil || ra.ShardOf(id) != 1 || moveLayout.Decompose(id).Worker != 1 {
					t.Fatalf("the application inserts into shard 1 with next_id() %s: id %d, %v; want one of shard 1, worker 1", when, id, err)
				}
				var n int64
				rs := privRouter(t, stranger)
				rs.SetMap(ra.Map())
				if err := rs.ForKey(1).Model(&RPhoto{}).Count(&n).Error; err == nil {
					t.Fatalf("a role without grants reads shard 1 %s", when)
				}
			}
			write("before the move")
			rm := privRouter(t, mover)
			if _, err := reshard.MoveShard(ctx, rm, nil, 1, "pg1", reshard.MoveOptions{Models: []any{&RPhoto{}}}); err != nil {
				t.Fatalf("the move: %v", err)
			}
			ra.SetMap(rm.Map())
			write("after the move")
			if s, tb := owners(t, dstAdmin, rm.Schema(1)); s != owner || tb != owner {
				t.Errorf("the copy is owned by %s (schema) and %s (table), want %s as on the source", s, tb, owner)
			}
			var fenceOwner string
			if err := dstAdmin.Raw(`SELECT pg_get_userbyid(relowner) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
				WHERE n.nspname = ? AND c.relname = 'shardid_fence_state'`, rm.Schema(1)).Scan(&fenceOwner).Error; err != nil || fenceOwner != owner {
				t.Errorf("the copy's fence is owned by %q, want the shard's owner %s (%v)", fenceOwner, owner, err)
			}
			if src, dst := privilegesOf(t, srcAdmin, rm.Schema(1)), privilegesOf(t, dstAdmin, rm.Schema(1)); src != dst {
				t.Errorf("the copy's privileges:\n%s\nwant the source's:\n%s", dst, src)
			}
		})
	}
}

// privilegesOf lists who holds which privilege on schema, its table,
// next_id() and its sequence on db.
func privilegesOf(t *testing.T, db *gorm.DB, schema string) string {
	t.Helper()
	var rows []string
	err := db.Raw(`WITH o AS (
			SELECT 'schema' AS what, COALESCE(nspacl, acldefault('n', nspowner)) AS acl FROM pg_namespace WHERE nspname = ?
			UNION ALL SELECT relname, COALESCE(relacl, acldefault(CASE relkind WHEN 'S' THEN 's' ELSE 'r' END::"char", relowner))
				FROM pg_class WHERE relnamespace = to_regnamespace(?) AND relname IN ('r_photos', 'next_id_seq')
			UNION ALL SELECT proname, COALESCE(proacl, acldefault('f', proowner)) FROM pg_proc WHERE pronamespace = to_regnamespace(?) AND proname = 'next_id')
		SELECT what || ' ' || CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END || ' ' || a.privilege_type || ' ' || a.is_grantable
		FROM o, aclexplode(o.acl) a ORDER BY 1`, schema, schema, schema).Scan(&rows).Error
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(rows, "\n")
}

// A mover that may not make the source's owner own the copy is refused
// before it creates anything, with ErrMoverPrivileges naming the fix.
func TestMoveRefusesForeignOwnerPostgres(t *testing.T) {
	ctx := context.Background()
	dstAdmin, _ := privSetup(t)
	dbs := "GRANT CREATE, CONNECT ON DATABASE " + testdb.PostgresDatabase() + ", shardid_test2 TO %[1]s"
	owner := testdb.PostgresRole(t, "pvowner", dbs)
	mover := testdb.PostgresRole(t, "pvmover", dbs)
	ro := privRouter(t, owner)
	if err := ro.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	// The mover may read and trigger on the shard, as a mover needs, but
	// is not a member of its owner.
	for _, g := range []string{"GRANT USAGE, CREATE ON SCHEMA {{schema}} TO %q", "GRANT ALL ON ALL TABLES IN SCHEMA {{schema}} TO %q"} {
		if err := ro.ForShard(1).Exec(fmt.Sprintf(g, mover)).Error; err != nil {
			t.Fatal(err)
		}
	}
	rm := privRouter(t, mover)
	_, err := reshard.MoveShard(ctx, rm, nil, 1, "pg1", reshard.MoveOptions{Models: []any{&RPhoto{}}})
	if !errors.Is(err, reshard.ErrMoverPrivileges) {
		t.Fatalf("a move by a mover that may not give the copy its owner: %v, want ErrMoverPrivileges", err)
	}
	var n int64
	dstAdmin.Raw("SELECT count(*) FROM pg_namespace WHERE nspname = ? OR nspname LIKE 'shardid_new_%'", rm.Schema(1)).Scan(&n)
	if n != 0 {
		t.Errorf("the refused move created %d schemas on the target", n)
	}
}

// A fence set up by another role (a superuser who fenced and unfenced the
// shard by hand) does not block the usual mover: a fence that exists as
// the move needs it is used as it is, without DDL that only its owner may
// run ("must be owner of table shardid_fence_state").
func TestMoveOverAnotherRolesFence(t *testing.T) {
	ctx := context.Background()
	privSetup(t)
	owner := testdb.PostgresRole(t, "pvowner", "GRANT CREATE, CONNECT ON DATABASE "+testdb.PostgresDatabase()+", shardid_test2 TO %[1]s")
	ro := privRouter(t, owner)
	if err := ro.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	if err := ro.ForKey(1).Create(&RPhoto{UserID: 1, Caption: "before"}).Error; err != nil {
		t.Fatal(err)
	}
	admin := privRouter(t, "postgres")
	if err := reshard.Fence(ctx, admin, 1, []any{&RPhoto{}}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := reshard.Unfence(ctx, admin, 1, []any{&RPhoto{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.MoveShard(ctx, ro, nil, 1, "pg1", reshard.MoveOptions{Models: []any{&RPhoto{}}}); err != nil {
		t.Fatalf("a move by the shard's owner after a superuser's fence: %v", err)
	}
	var n int64
	if err := ro.ForKey(1).Model(&RPhoto{}).Count(&n).Error; err != nil || n != 1 {
		t.Fatalf("shard 1 after the move: %d rows, %v", n, err)
	}
}

// A role that may not read a shard's fence table still sees that it
// exists: FindLeftovers as that role fails, naming the table, where it
// reported no fence at all while information_schema hid the table from
// it (a move's or a clean-up's check would have judged the shard unfenced).
func TestLeftoversSeeAFenceTheRoleMayNotRead(t *testing.T) {
	ctx := context.Background()
	_, b := privSetup(t)
	owner := testdb.PostgresRole(t, "pvowner", "GRANT CREATE, CONNECT ON DATABASE "+testdb.PostgresDatabase()+", shardid_test2 TO %[1]s")
	ro := privRouter(t, owner)
	if err := ro.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	admin := privRouter(t, "postgres")
	if err := reshard.Fence(ctx, admin, 1, []any{&RPhoto{}}, time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reshard.Unfence(context.Background(), admin, 1, []any{&RPhoto{}}) })
	schema := admin.Schema(1)
	stranger := testdb.PostgresRole(t, "pvstranger", "GRANT CONNECT ON DATABASE "+testdb.PostgresDatabase()+", shardid_test2 TO %[1]s")
	if err := b.Exec(fmt.Sprintf(`GRANT USAGE ON SCHEMA %q TO %q`, schema, stranger)).Error; err != nil {
		t.Fatal(err)
	}
	// The premise: information_schema hides the fence table from it.
	var seen int64
	if err := testdb.OpenRole(t, stranger, "shardid_test2").Raw("SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = 'shardid_fence_state'", schema).Scan(&seen).Error; err != nil || seen != 0 {
		t.Fatalf("information_schema shows the stranger %d fence tables (%v): the test's premise is gone", seen, err)
	}
	l, err := reshard.FindLeftovers(ctx, privRouter(t, stranger), 1)
	if err == nil {
		t.Fatalf("FindLeftovers as a role that may not read the fence: no error, fence %+v", l.Fence)
	}
	if !strings.Contains(err.Error(), "shardid_fence_state") {
		t.Fatalf("the error does not name the fence table: %v", err)
	}
	// As the admin, the fence is there.
	if l, err := reshard.FindLeftovers(ctx, admin, 1); err != nil || l.Fence == nil {
		t.Fatalf("FindLeftovers as the admin: fence %+v, %v", l.Fence, err)
	}
}

// Unfence of a shard with no fence and no change log, by a role without
// USAGE on its schema, has nothing to do and does nothing: it runs no DDL
// there (even DROP ... IF EXISTS needs USAGE on the schema). It did
// once the schema was no longer hidden from such a role (pg_namespace,
// not information_schema): "permission denied for schema".
func TestUnfenceWithNothingLeftNeedsNoSchemaPrivilege(t *testing.T) {
	ctx := context.Background()
	privSetup(t)
	owner := testdb.PostgresRole(t, "pvowner", "GRANT CREATE, CONNECT ON DATABASE "+testdb.PostgresDatabase()+", shardid_test2 TO %[1]s")
	if err := privRouter(t, owner).Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	stranger := testdb.PostgresRole(t, "pvstranger", "GRANT CONNECT ON DATABASE "+testdb.PostgresDatabase()+", shardid_test2 TO %[1]s")
	if err := reshard.Unfence(ctx, privRouter(t, stranger), 1, []any{&RPhoto{}}); err != nil {
		t.Errorf("Unfence with nothing to lift, as a role without USAGE on the schema: %v", err)
	}
}
