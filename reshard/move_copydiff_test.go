package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// A target whose table stores the shard's values otherwise (a decimal of
// a smaller scale, created there by the application's migrations before
// the move) or rewrites them (a trigger of its own) fails the move's check
// with ErrCopyDiffers, and the error names the column and both its
// definitions, or the trigger: what the operator has to fix.
func TestMoveNamesTheDefinitionsThatDifferPostgres(t *testing.T) {
	ownDatabases(t)
	testMoveNamesTheDefinitionsThatDiffer(t, openPostgres(t), openSecondPostgresTB(t), "pg", []string{"pg1", "pg2"},
		"CREATE TABLE %s.items (id bigint PRIMARY KEY, price numeric(10, %d) NOT NULL, note text NOT NULL)",
		[]string{
			"CREATE FUNCTION %[1]s.shout() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.note := upper(NEW.note); RETURN NEW; END $$",
			"CREATE TRIGGER items_shout BEFORE INSERT ON %[1]s.items FOR EACH ROW EXECUTE FUNCTION %[1]s.shout()",
			// A superuser's mover writes in session_replication_role
			// replica, which fires only the triggers enabled ALWAYS.
			"ALTER TABLE %[1]s.items ENABLE ALWAYS TRIGGER items_shout",
		},
		"column price is numeric(10,2) on the source, numeric(10,1) on the target",
		// Triggers that cannot fire for the mover, a superuser: one
		// disabled, one fired only outside replication.
		[]string{
			"CREATE FUNCTION %[1]s.quiet() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.note := 'x'; RETURN NEW; END $$",
			"CREATE TRIGGER items_off BEFORE INSERT ON %[1]s.items FOR EACH ROW EXECUTE FUNCTION %[1]s.quiet()",
			"ALTER TABLE %[1]s.items DISABLE TRIGGER items_off",
			"CREATE TRIGGER items_origin BEFORE INSERT ON %[1]s.items FOR EACH ROW EXECUTE FUNCTION %[1]s.quiet()",
		})
}

func TestMoveNamesTheDefinitionsThatDifferMariaDB(t *testing.T) {
	testMoveNamesTheDefinitionsThatDiffer(t, openMySQL(t), openMariaDBInstance(t), "my", []string{"my1", "my2"},
		// qty's display width differs too (int(2) and int(1)): it
		// changes nothing stored, and must not be named.
		"CREATE TABLE %s.items (id BIGINT PRIMARY KEY, price DECIMAL(10, %d) NOT NULL, note VARCHAR(50) NOT NULL, qty INT(%[2]d) NOT NULL DEFAULT 7)",
		[]string{"CREATE TRIGGER %[1]s.items_shout BEFORE INSERT ON %[1]s.items FOR EACH ROW SET NEW.note = UPPER(NEW.note)"},
		"column price is decimal(10,2) on the source, decimal(10,1) on the target", nil)
}

func testMoveNamesTheDefinitionsThatDiffer(t *testing.T, src, dst *gorm.DB, kind string, names []string, create string, trigger []string, want string, quiet []string) {
	pattern := "shardid_cd" + kind + "_%04d"
	schema := fmt.Sprintf(pattern, 1)
	drop := "DROP SCHEMA IF EXISTS " + schema + " CASCADE"
	if kind == "my" {
		drop = "DROP DATABASE IF EXISTS " + schema
	}
	r := routerOverTwo(t, src, dst, names, pattern, drop)
	exec := func(db *gorm.DB, q string) {
		t.Helper()
		if err := db.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	createSchema := "CREATE SCHEMA " + schema
	if kind == "my" {
		createSchema = "CREATE DATABASE " + schema
	}
	exec(src, createSchema)
	exec(src, fmt.Sprintf(create, schema, 2))
	for i := 1; i <= 200; i++ {
		exec(src, fmt.Sprintf("INSERT INTO %s.items (id, price, note) VALUES (%d, %d.25, 'note %d')", schema, i, i, i))
	}
	ctx := context.Background()
	move := func() error {
		_, err := reshard.MoveShard(ctx, r, nil, 1, names[1], reshard.MoveOptions{Tables: []string{"items"}})
		return err
	}

	// A scale of 1 on the target: 1.25 is stored as 1.3.
	exec(dst, createSchema)
	exec(dst, fmt.Sprintf(create, schema, 1))
	for _, q := range quiet {
		exec(dst, fmt.Sprintf(q, schema))
	}
	err := move()
	if !errors.Is(err, reshard.ErrCopyDiffers) || !strings.Contains(err.Error(), want) {
		t.Fatalf("a target of a smaller scale: %v; want ErrCopyDiffers saying %q", err, want)
	}
	if strings.Contains(err.Error(), "trigger") {
		t.Errorf("a target with no trigger of its own: %v", err)
	}
	if strings.Contains(err.Error(), "column qty") {
		t.Errorf("a column whose display width alone differs is named: %v", err)
	}

	// The same definition, and a trigger that rewrites each row.
	exec(dst, drop)
	exec(dst, createSchema)
	exec(dst, fmt.Sprintf(create, schema, 2))
	for _, q := range trigger {
		exec(dst, fmt.Sprintf(q, schema))
	}
	err = move()
	if !errors.Is(err, reshard.ErrCopyDiffers) || !strings.Contains(err.Error(), "trigger(s) of its own") || !strings.Contains(err.Error(), "items_shout") {
		t.Fatalf("a target with a trigger: %v; want ErrCopyDiffers naming items_shout", err)
	}
	if strings.Contains(err.Error(), "column price") {
		t.Errorf("a target of the same columns: %v", err)
	}

	// Both sides alike: the move goes through.
	exec(dst, drop)
	if err := move(); err != nil {
		t.Fatalf("a target the move creates: %v", err)
	}
}
