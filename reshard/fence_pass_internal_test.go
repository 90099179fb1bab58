package reshard

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"gorm.io/gorm"
)

// A mover on MySQL passes a target's fence once per transaction
// (passFenceMySQL) instead of once per row: the fence's triggers skip
// their read only for a mover's session that passed the fence of their
// own schema, passFenceMySQL refuses as they would, and the fence cannot
// change while the mover's transaction is open.
func TestPassFenceMySQL(t *testing.T) {
	db := testdb.OpenMySQL(t)
	ctx := context.Background()
	const schema, other = "shardid_passfence", "shardid_passfence_other"
	for _, s := range []string{schema, other} {
		db.Exec("DROP DATABASE IF EXISTS " + s)
		if err := db.Exec("CREATE DATABASE " + s).Error; err != nil {
			t.Fatal(err)
		}
		if err := db.Exec("CREATE TABLE " + s + ".items (id BIGINT PRIMARY KEY, v VARCHAR(20))").Error; err != nil {
			t.Fatal(err)
		}
		if err := ensureFenceMySQL(ctx, db, s, []string{"items"}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Exec("DROP DATABASE IF EXISTS " + s) })
	}
	setState := func(until string, moverOnly bool) {
		t.Helper()
		if err := db.Exec("UPDATE "+schema+"."+fenceTable+" SET fenced_until = "+until+", mover_only = ? WHERE id = 1", moverOnly).Error; err != nil {
			t.Fatal(err)
		}
	}
	id := int64(0)
	// insert writes a row into schema's table in a transaction of a mover's
	// session, after the statements of pre, and returns the error.
	insert := func(pass bool, pre ...string) error {
		id++
		return moverTx(ctx, db, func(tx *sql.Tx) error {
			for _, q := range pre {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					return err
				}
			}
			if pass {
				if err := passFenceMySQL(ctx, tx, schema); err != nil {
					return err
				}
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO "+schema+".items VALUES (?, 'x')", id)
			return err
		})
	}
	isFence := func(err error) bool {
		return err != nil && (errors.Is(err, shardid.ErrShardMoving) || strings.Contains(err.Error(), shardid.FenceMessage))
	}

	// Fenced for everybody, the mover included.
	setState("UTC_TIMESTAMP(6) + INTERVAL 1 HOUR", false)
	if err := insert(true); !errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("passFenceMySQL under a fence for all: %v, want ErrShardMoving", err)
	}
	for _, pre := range [][]string{
		nil, // no mark: the trigger reads the fence
		{"SET @shardid_fence_checked = '" + other + "'"},                         // another schema's mark
		{"SET @shardid_fence_checked = '" + schema + "_x'"},                      // a name that only begins alike
		{"SET @shardid_fence_checked = NULL"},                                    // NULL, not a skip
		{"SET @shardid_fence_checked = ''"},                                      // empty
		{"SET @shardid_fence_checked = '" + schema + "', @shardid_mover = NULL"}, // a mark without the mover
	} {
		if err := insert(false, pre...); !isFence(err) {
			t.Errorf("a mover's write after %q under a fence for all: %v, want the fence's refusal", pre, err)
		}
	}
	// A session that is not a mover's, with the mark, is refused too.
	db.Connection(func(c *gorm.DB) error {
		c.Exec("SET @shardid_fence_checked = '" + schema + "'")
		defer c.Exec("SET @shardid_fence_checked = NULL")
		if err := c.Exec("INSERT INTO " + schema + ".items VALUES (9999, 'x')").Error; !isFence(err) {
			t.Errorf("an application's write with the mark under a fence: %v, want the fence's refusal", err)
		}
		return nil
	})

	// Fenced for all but the mover: it passes, with or without the mark.
	setState("UTC_TIMESTAMP(6) + INTERVAL 1 HOUR", true)
	if err := insert(true); err != nil {
		t.Errorf("passFenceMySQL under a mover's fence: %v", err)
	}
	if err := insert(false); err != nil {
		t.Errorf("a mover's write under its fence: %v", err)
	}
	if err := db.Exec("INSERT INTO " + schema + ".items VALUES (9998, 'x')").Error; !isFence(err) {
		t.Errorf("an application's write under a mover's fence: %v, want the fence's refusal", err)
	}

	// The session goes back to the pool without the mark.
	db.Connection(func(c *gorm.DB) error {
		var mark sql.NullString
		c.Raw("SELECT @shardid_fence_checked").Scan(&mark)
		if mark.Valid {
			t.Errorf("a pooled session still holds @shardid_fence_checked = %q", mark.String)
		}
		return nil
	})

	// While a mover's transaction that passed the fence is open, the
	// fence cannot change: an update of its state waits for it.
	passed, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- moverTx(ctx, db, func(tx *sql.Tx) error {
			if err := passFenceMySQL(ctx, tx, schema); err != nil {
				close(passed)
				return err
			}
			close(passed)
			<-release
			_, err := tx.ExecContext(ctx, "INSERT INTO "+schema+".items VALUES (5000, 'x')")
			return err
		})
	}()
	<-passed
	changed := make(chan error, 1)
	go func() {
		changed <- db.Exec("UPDATE " + schema + "." + fenceTable + " SET mover_only = FALSE WHERE id = 1").Error
	}()
	select {
	case err := <-changed:
		t.Errorf("the fence changed under a mover's open transaction that passed it (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("the mover's write: %v", err)
	}
	if err := <-changed; err != nil {
		t.Errorf("the fence's change after the mover's commit: %v", err)
	}
	if err := insert(true); !errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("passFenceMySQL once the fence holds the mover off: %v, want ErrShardMoving", err)
	}

	// Unfenced: everybody writes.
	setState("'1000-01-01'", false)
	if err := db.Exec("INSERT INTO " + schema + ".items VALUES (9997, 'x')").Error; err != nil {
		t.Errorf("an application's write with no fence: %v", err)
	}
}
