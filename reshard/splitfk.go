package reshard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"gorm.io/gorm"
)

// A split carries the monolith's foreign keys between its sharded tables
// (comments to photos, photos to users) into each shard's schema on
// PostgreSQL, as MySQL's SHOW CREATE TABLE carries them into each shard's
// database. It adds them once the batch is flipped, not before: the
// copy and the change log write a shard's tables in no particular order
// of parents and children, and a key added under the fence would hold
// the batch's writes up for as long as it takes. Each is added NOT VALID
// (a short lock of both tables, no scan), so that the targets check every
// write from then on, then validated (a scan that does not block writes).

// foreignKeyPG is a foreign key of the monolith between two of the
// split's tables.
type foreignKeyPG struct {
	Name, Tbl, RefTbl string
	// Clause is what follows REFERENCES table: the referenced columns
	// and the key's options.
	Cols, RefCols, Clause string
}

// splitForeignKeysPG returns the foreign keys of the monolith between the
// split's tables (the plan refuses a key between a sharded table and
// another).
func (sp *splitter) splitForeignKeysPG(ctx context.Context) ([]foreignKeyPG, error) {
	var fks []foreignKeyPG
	q := `SELECT con.conname AS name, c.relname AS tbl, rc.relname AS ref_tbl,
			(SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord) FROM unnest(con.conkey) WITH ORDINALITY AS k(attnum, ord)
				JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum) AS cols,
			(SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord) FROM unnest(con.confkey) WITH ORDINALITY AS k(attnum, ord)
				JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.attnum) AS ref_cols,
			CASE con.confmatchtype WHEN 'f' THEN ' MATCH FULL' ELSE '' END ||
			' ON UPDATE ' || ` + fmt.Sprintf(pgKeyAction, "con.confupdtype") + ` ||
			' ON DELETE ' || ` + fmt.Sprintf(pgKeyAction, "con.confdeltype") + ` ||
			CASE WHEN con.condeferrable THEN ' DEFERRABLE' || CASE WHEN con.condeferred THEN ' INITIALLY DEFERRED' ELSE '' END ELSE '' END AS clause
		FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_class rc ON rc.oid = con.confrelid JOIN pg_namespace rn ON rn.oid = rc.relnamespace
		WHERE con.contype = 'f' AND n.nspname = ? AND rn.nspname = ? ORDER BY 2, 1`
	if err := sp.mono.WithContext(ctx).Raw(q, sp.schema, sp.schema).Scan(&fks).Error; err != nil {
		return nil, err
	}
	return slices.DeleteFunc(fks, func(fk foreignKeyPG) bool {
		_, a := sp.byName[fk.Tbl]
		_, b := sp.byName[fk.RefTbl]
		return !a || !b
	}), nil
}

// addForeignKeysPG adds the monolith's foreign keys between the split's
// tables to each shard of the batch on its target, where missing, NOT
// VALID, then validates them: a script per target and 100 shards.
func (b *splitBatch) addForeignKeysPG(ctx context.Context) error {
	fks, err := b.sp.splitForeignKeysPG(ctx)
	if err != nil || len(fks) == 0 {
		return err
	}
	targets, shards := b.byTarget()
	errs := make(chan error, len(targets))
	var wg sync.WaitGroup
	for _, d := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := b.sp.cfg.DBs[d]
			for lo := 0; lo < len(shards[d]); lo += shardsPerTx {
				hi := min(lo+shardsPerTx, len(shards[d]))
				if err := b.addForeignKeysTo(ctx, db, shards[d][lo:hi], fks); err != nil {
					errs <- fmt.Errorf("shardid: adding the foreign keys of shards %d to %d on %s: %w",
						shards[d][lo], shards[d][hi-1], b.sp.cfg.Map.Databases()[d], err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// addForeignKeysTo adds fks to the schemas of shards on db, where missing.
func (b *splitBatch) addForeignKeysTo(ctx context.Context, db *gorm.DB, shards []int, fks []foreignKeyPG) error {
	schemas := shardSchemas(b, shards)
	var have []struct{ Schema, Name string }
	if err := db.WithContext(ctx).Raw(`SELECT n.nspname AS schema, con.conname AS name FROM pg_constraint con
		JOIN pg_namespace n ON n.oid = con.connamespace WHERE con.contype = 'f' AND n.nspname IN ?`, schemas).Scan(&have).Error; err != nil {
		return err
	}
	exists := map[string]bool{}
	for _, h := range have {
		exists[h.Schema+"."+h.Name] = true
	}
	var add, validate []string
	for _, sc := range schemas {
		for _, fk := range fks {
			if exists[sc+"."+fk.Name] {
				continue
			}
			tbl := quoteTable(db, sc, fk.Tbl)
			add = append(add, "ALTER TABLE "+tbl+" ADD CONSTRAINT "+quoteIdent(db, fk.Name)+" FOREIGN KEY ("+fk.Cols+") REFERENCES "+
				quoteTable(db, sc, fk.RefTbl)+" ("+fk.RefCols+")"+fk.Clause+" NOT VALID")
			validate = append(validate, "ALTER TABLE "+tbl+" VALIDATE CONSTRAINT "+quoteIdent(db, fk.Name))
		}
	}
	if len(add) == 0 {
		return nil
	}
	// Adding takes a short lock of both tables: in one transaction, with
	// lockedTx's lock timeout, tried again while writers hold them.
	if err := lockedTx(ctx, db, schemas[0], func(tx *gorm.DB) error { return tx.Exec(strings.Join(add, ";\n")).Error }); err != nil {
		return err
	}
	return db.WithContext(ctx).Exec(strings.Join(validate, ";\n")).Error
}
