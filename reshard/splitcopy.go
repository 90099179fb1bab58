package reshard

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"gorm.io/gorm"
)

// splitBatch is one step of a split: shards moving out of the monolith's
// shared tables into their schemas on their targets, copied as a move's
// shardCopier copies one shard (capture, copy, converge, finish), with
// every row told apart by its shard.
type splitBatch struct {
	sp     *splitter
	shards []int       // ascending
	to     map[int]int // shard -> index of its target database
	cols   map[string]columns
	// checks are the verification of each table of each shard
	// (rowcheck.go), once both sides were compared.
	checks map[string]map[int]*rowCheck
	// sent is what the first copy sent of each table of each shard
	// (splitstream.go), for verifyCopy.
	sent map[string]map[int]*sentRows
	// badIDs are the rows the copy found whose IDs would not find them
	// (SplitConfig.Layout).
	badIDs *idMismatches
	// fresh are the shards whose schemas this run created: empty.
	fresh map[int]bool
	// ahead are the schemas RunSplit created ahead of this batch, with
	// an earlier batch's, by shard: the token of the fence for the mover
	// each was created with (targetsAhead).
	ahead map[int]int64
	// seen is what each target held of its shard's schema when the run
	// last found its lock held before it created them (seeTargets).
	seen map[int]targetSeen
	// tokens are the fences this run set on its targets (createTargets),
	// by shard: every transaction of the run that writes to a target
	// first holds them (holdFences).
	tokens map[int]int64
	// grants are the monolith's owners and privileges that each shard's
	// schema gets (PostgreSQL).
	grants *splitGrants
	// defs are the monolith's tables' definitions, as they follow CREATE
	// TABLE name, and indexes their other indexes (PostgreSQL:
	// secondaryIndexesPG), as createTargets created the schemas from.
	defs     map[string]string
	indexes  map[string][]string
	progress func(table string, copied int64)

	// A batch of a group (sub): the shards whose copies the run builds
	// still, this batch's and the later batches' (live), where an entry of
	// the change log of no known shard may belong (whereIs); and only,
	// which limits the entries catchUp reads and forgets to those of this
	// batch's shards and, up to seq unknownUpTo if it is not 0, those of
	// no known shard: the other shards' entries wait for their batch.
	live        []int
	only        bool
	unknownUpTo int64
	// later: batches of the group come after this one, and the entries
	// of no known shard are logged on past its seal, for them.
	later bool
}

// sub returns batch shards (ascending) of the group g, sharing g's copy,
// its checks and its fences; live are g's shards not flipped yet.
func (g *splitBatch) sub(shards, live []int) *splitBatch {
	v := *g
	v.shards, v.live, v.only, v.unknownUpTo = shards, live, true, 0
	return &v
}

// fenceHold is the hold of the fences this run set on the target of
// shards (all on one target): its transactions that write there hold
// them first (fenceHold).
func (b *splitBatch) fenceHold(shards []int) (fenceHold, error) {
	h := fenceHold{mysql: b.sp.mysql, schemas: make([]string, len(shards)), tokens: make([]int64, len(shards))}
	for i, s := range shards {
		tok, ok := b.tokens[s]
		if !ok {
			return h, fmt.Errorf("shardid: split: shard %d has no fence of this run", s)
		}
		h.schemas[i], h.tokens[i], h.on = b.schemaOf(s), tok, b.sp.cfg.Map.Databases()[b.to[s]]
	}
	return h, nil
}

// holdFences holds, in tx, the fences of shards (fenceHold).
func (b *splitBatch) holdFences(ctx context.Context, tx *sql.Tx, shards []int) error {
	h, err := b.fenceHold(shards)
	if err != nil {
		return err
	}
	return h.hold(ctx, tx)
}

// seeTargets reads what each target holds of its shards' schemas
// (seeTarget's, in a few queries a target), for createTargets to find
// them unchanged.
func (b *splitBatch) seeTargets(ctx context.Context) (map[int]targetSeen, error) {
	out := map[int]targetSeen{}
	targets, shards := b.byTarget()
	for _, d := range targets {
		db := b.sp.cfg.DBs[d]
		schemas := shardSchemas(b, shards[d])
		var have, fenced []string
		// As createChunks reads them (pg_namespace lists a schema that
		// information_schema hides from a role without privileges on it).
		q := "SELECT nspname FROM pg_namespace WHERE nspname IN ?"
		if b.sp.mysql {
			q = "SELECT schema_name FROM information_schema.schemata WHERE schema_name IN ?"
		}
		if err := db.WithContext(ctx).Raw(q, schemas).Scan(&have).Error; err != nil {
			return nil, err
		}
		if len(have) > 0 {
			var err error
			if fenced, err = schemasWithTable(ctx, db, have, fenceTable); err != nil {
				return nil, err
			}
		}
		tokens := map[string]int64{}
		for lo := 0; lo < len(fenced); lo += 200 {
			chunk := fenced[lo:min(lo+200, len(fenced))]
			var rows []struct{ I, Token int64 }
			if err := db.WithContext(ctx).Raw(fenceTokensQuery(b.sp.mysql, chunk, false)).Scan(&rows).Error; err != nil {
				return nil, err
			}
			for _, r := range rows {
				tokens[chunk[r.I]] = r.Token
			}
		}
		for _, s := range shards[d] {
			sc := b.schemaOf(s)
			tok, ok := tokens[sc]
			out[s] = targetSeen{exists: slices.Contains(have, sc), fenced: ok, token: tok}
		}
	}
	return out, nil
}

// shardOf is the batch's shard whose schema is schema.
func (b *splitBatch) shardOf(schema string) int {
	for _, s := range b.shards {
		if b.schemaOf(s) == schema {
			return s
		}
	}
	return -1
}

// schemaOf is the schema of shard on its target.
func (b *splitBatch) schemaOf(s int) string { return b.sp.cfg.Map.SchemaOf(s) }

// dst is shard's target database.
func (b *splitBatch) dst(s int) *gorm.DB { return b.sp.cfg.DBs[b.to[s]] }

// byTarget returns the batch's shards grouped by target, in ascending
// order of target and shard.
func (b *splitBatch) byTarget() (targets []int, shards map[int][]int) {
	return b.byTargetOf(b.shards)
}

// byTargetOf is byTarget of some shards of the group.
func (b *splitBatch) byTargetOf(of []int) (targets []int, shards map[int][]int) {
	shards = map[int][]int{}
	for _, s := range of {
		d := b.to[s]
		if shards[d] == nil {
			targets = append(targets, d)
		}
		shards[d] = append(shards[d], s)
	}
	slices.Sort(targets)
	return targets, shards
}

// tableNames are the names of the sharded tables, parents first.
func (sp *splitter) tableNames() []string {
	out := make([]string, len(sp.tables))
	for i, t := range sp.tables {
		out[i] = t.Name
	}
	return out
}

// readColumns reads the columns of the monolith's tables.
func (b *splitBatch) readColumns(ctx context.Context) error {
	b.cols = map[string]columns{}
	for _, t := range b.sp.tables {
		c, err := tableColumns(ctx, b.sp.mono, b.sp.schema, t.Name)
		if err != nil {
			return err
		}
		b.cols[t.Name] = c
	}
	return nil
}

// createTargets creates each shard's schema and tables on its target, as
// the monolith's tables are (columns, primary key and, on PostgreSQL, the
// other indexes), fenced for every writer but the mover (fenceForMover),
// in transactions of up to 50 shards. A schema that exists is kept (a
// batch run again: emptied before the copy); it must hold no table with
// rows that is not a split's or move's (the plan refuses it, and so does
// checkTargetsEmpty). One created ahead of the batch and found as created
// (aheadAsCreated) is taken as it is, empty. It returns the target fences'
// tokens.
func (b *splitBatch) createTargets(ctx context.Context) (map[int]int64, error) {
	tables := b.sp.tableNames()
	if b.defs == nil {
		if err := b.readDefinitions(ctx); err != nil {
			return nil, err
		}
	}
	defs, indexes := b.defs, b.indexes
	tokens := map[int]int64{}
	b.fresh = map[int]bool{}
	// A schema created ahead of the batch and found as it was left, its
	// fence for the mover set by nobody since (every fence, lift or
	// abort changes or drops it), is the batch's own and empty: nobody
	// but a mover writes through that fence, and a mover takes the
	// split's lock first.
	var todo []int
	for _, s := range b.shards {
		if b.aheadAsCreated(s) {
			tokens[s], b.fresh[s] = b.ahead[s], true
			continue
		}
		todo = append(todo, s)
	}
	var mu sync.Mutex
	targets, shards := b.byTargetOf(todo)
	if b.sp.mysql {
		return tokens, b.createTargetsMySQL(ctx, targets, shards, tables, tokens)
	}
	// On each target, ddlSessions sessions at once, each taking the next
	// chunk of 50 shards: DDL is mostly the server's CPU, and a split must
	// not get less of it than the writers beside it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(targets)*ddlSessions)
	for _, d := range targets {
		// Chunks of at most 50 shards, at least one a session.
		size := min(50, max(1, (len(shards[d])+ddlSessions-1)/ddlSessions))
		chunks := make(chan []int, (len(shards[d])+size-1)/size)
		for lo := 0; lo < len(shards[d]); lo += size {
			chunks <- shards[d][lo:min(lo+size, len(shards[d]))]
		}
		close(chunks)
		for range ddlSessions {
			go func() {
				errs <- b.createChunks(ctx, d, chunks, tables, defs, indexes, tokens, &mu)
			}()
		}
	}
	var first error
	for range len(targets) * ddlSessions {
		if err := <-errs; err != nil && (first == nil || errors.Is(first, context.Canceled)) {
			first = err
			cancel() // the other sessions stop at their next chunk
		}
	}
	return tokens, first
}

// ddlSessions is how many sessions of each target createTargets creates
// schemas in at once.
const ddlSessions = 4

// createChunks creates the schemas of each chunk of shards that chunks
// brings on target d, a chunk a transaction, until chunks is drained.
func (b *splitBatch) createChunks(ctx context.Context, d int, chunks <-chan []int, tables []string, defs map[string]string,
	indexes map[string][]string, tokens map[int]int64, mu *sync.Mutex) error {
	db := b.sp.cfg.DBs[d]
	for chunk := range chunks {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := lockedTx(ctx, db, b.schemaOf(chunk[0]), func(tx *gorm.DB) error {
			var have []string
			if err := tx.Raw("SELECT nspname FROM pg_namespace WHERE nspname IN ?", shardSchemas(b, chunk)).Scan(&have).Error; err != nil {
				return err
			}
			// As the run found them, or another run has been at them
			// since (targetSeen.unchanged).
			for _, s := range chunk {
				if slices.Contains(have, b.schemaOf(s)) != b.seen[s].exists {
					return b.seen[s].unchanged(targetSeen{exists: !b.seen[s].exists}, b.schemaOf(s))
				}
			}
			// New schemas: one script, one round trip.
			var script []string
			for _, s := range chunk {
				sc := b.schemaOf(s)
				if slices.Contains(have, sc) {
					continue
				}
				script = append(script, `CREATE SCHEMA "`+sc+`"`)
				for _, t := range tables {
					script = append(script, "CREATE TABLE "+quoteTable(db, sc, t)+defs[t])
					for _, ix := range indexes[t] {
						script = append(script, fmt.Sprintf(ix, `"`+sc+`"`))
					}
				}
				// fenceForMover's fence, of a fresh state row.
				tok := newFenceToken()
				script = append(script, freshMoverFencePG(sc, tables, tok)...)
				// The monolith's owners and privileges.
				script = append(script, b.grants.statements(sc, tables, true)...)
				mu.Lock()
				tokens[s] = tok
				b.fresh[s] = true
				mu.Unlock()
			}
			if len(script) > 0 {
				if err := tx.Exec(strings.Join(script, ";\n")).Error; err != nil {
					return err
				}
			}
			// Schemas found (a batch run again): as a move does.
			for _, s := range chunk {
				sc := b.schemaOf(s)
				if !slices.Contains(have, sc) {
					continue
				}
				// Without a lock (see createTarget): the token is
				// compared again under fenceForMoverTx's.
				now, err := seeTarget(ctx, tx, sc, false)
				if err != nil {
					return err
				}
				if err := b.seen[s].unchanged(now, sc); err != nil {
					return err
				}
				for _, t := range tables {
					if err := tx.Exec("CREATE TABLE IF NOT EXISTS " + quoteTable(db, sc, t) + defs[t]).Error; err != nil {
						return err
					}
					for _, ix := range indexes[t] {
						if err := tx.Exec(fmt.Sprintf(ix, `"`+sc+`"`)).Error; err != nil {
							return err
						}
					}
				}
				if err := ensureFencePG(tx, sc, sc, tables); err != nil {
					return err
				}
				for _, q := range b.grants.statements(sc, tables, true) {
					if err := tx.Exec(q).Error; err != nil {
						return err
					}
				}
				tok, err := fenceForMoverTx(tx, sc, tables)
				if err != nil {
					return err
				}
				if b.seen[s].fenced && tok-1 != b.seen[s].token {
					return b.seen[s].unchanged(targetSeen{exists: true, fenced: true, token: tok - 1}, sc)
				}
				mu.Lock()
				tokens[s] = tok
				mu.Unlock()
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("shardid: creating shards %d to %d on %s: %w", chunk[0], chunk[len(chunk)-1], b.sp.cfg.Map.Databases()[d], err)
		}
	}
	return nil
}

// secondaryIndexesPG returns the definitions of the indexes of tables of
// schema, but their primary keys, as formats whose %s is the schema to
// create them in (CREATE INDEX IF NOT EXISTS name ON %s.table ...).
func secondaryIndexesPG(ctx context.Context, db *gorm.DB, schema string, tables []string) (map[string][]string, error) {
	var found []struct{ Tbl, Def string }
	err := db.WithContext(ctx).Raw(`SELECT c.relname AS tbl, pg_get_indexdef(i.indexrelid) AS def
		FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = ? AND c.relname IN ? AND NOT i.indisprimary ORDER BY 1, 2`, schema, tables).Scan(&found).Error
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, f := range found {
		// CREATE [UNIQUE] INDEX name ON [ONLY] schema.table USING ...
		on := " ON " + quotePGName(schema) + "." + quotePGName(f.Tbl) + " "
		i := strings.Index(f.Def, on)
		if i < 0 {
			continue // a definition of an unexpected form: left out
		}
		def := strings.Replace(f.Def[:i], " INDEX ", " INDEX IF NOT EXISTS ", 1) + " ON %s." + quotePGName(f.Tbl) + " " + strings.ReplaceAll(f.Def[i+len(on):], "%", "%%")
		out[f.Tbl] = append(out[f.Tbl], def)
	}
	return out, nil
}

// quotePGName quotes name as pg_get_indexdef does: only when it must.
func quotePGName(name string) string {
	if sqlIdentPlain(name) {
		return name
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

func sqlIdentPlain(name string) bool {
	for i, r := range name {
		if !(r >= 'a' && r <= 'z' || r == '_' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return name != ""
}

// checkTargetsEmpty returns ErrTargetHoldsData if a shard's schema on its
// target holds a row in a table that is not a split's or move's own, and
// the shard has no copy in progress of this split (its fence for the
// mover, which a batch run again finds): data the split would overwrite.
func (b *splitBatch) checkTargetsEmpty(ctx context.Context) error {
	// The schemas created ahead of the batch, found as created, are fenced
	// for the mover: not read (a copy in progress of this split).
	var check []int
	for _, s := range b.shards {
		if !b.aheadAsCreated(s) {
			check = append(check, s)
		}
	}
	targets, shards := b.byTargetOf(check)
	for _, d := range targets {
		rows, err := targetRows(ctx, b.sp.cfg.DBs[d], shardSchemas(b, shards[d]))
		if err != nil {
			return err
		}
		for _, r := range rows {
			if r.moverFenced {
				continue
			}
			return withDetail(ErrTargetHoldsData, fmt.Sprintf("%s.%s on %s holds %d row(s) (ids %s): a split writes only into empty schemas",
				r.schema, r.table, b.sp.cfg.Map.Databases()[d], r.rows, joinIDs(r.ids)))
		}
	}
	return nil
}

func shardSchemas(b *splitBatch, shards []int) []string {
	out := make([]string, len(shards))
	for i, s := range shards {
		out[i] = b.schemaOf(s)
	}
	return out
}

// targetTable is a table with rows in a target's schema.
type targetTable struct {
	schema, table string
	rows          int64
	ids           []int64 // the first few
	moverFenced   bool    // the schema is fenced for a mover: a copy under way
}

// targetRows returns the tables of schemas on db that hold rows, but the
// split's and move's own.
func targetRows(ctx context.Context, db *gorm.DB, schemas []string) ([]targetTable, error) {
	if len(schemas) == 0 {
		return nil, nil
	}
	var found []struct{ Schema, Table string }
	// pg_class, which shows a table of another role (tableExists).
	q := `SELECT n.nspname AS "schema", c.relname AS "table" FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname IN ? AND c.relkind IN ('r', 'p') ORDER BY 1, 2`
	if db.Dialector.Name() == "mysql" {
		q = "SELECT TABLE_SCHEMA AS `schema`, TABLE_NAME AS `table` FROM information_schema.TABLES WHERE TABLE_SCHEMA IN ? AND TABLE_TYPE = 'BASE TABLE' ORDER BY 1, 2"
	}
	if err := db.WithContext(ctx).Raw(q, schemas).Scan(&found).Error; err != nil {
		return nil, err
	}
	// Which tables hold a row: one query for 200 tables at a time.
	var tables []struct{ Schema, Table string }
	for _, f := range found {
		if !isInternalSplitTable(f.Table) {
			tables = append(tables, f)
		}
	}
	dual := ""
	if db.Dialector.Name() == "mysql" {
		dual = " FROM DUAL"
	}
	var full []struct{ Schema, Table string }
	for lo := 0; lo < len(tables); lo += 200 {
		chunk := tables[lo:min(lo+200, len(tables))]
		parts := make([]string, len(chunk))
		for i, f := range chunk {
			parts[i] = "SELECT " + strconv.Itoa(i) + dual + " WHERE EXISTS (SELECT 1 FROM " + quoteTable(db, f.Schema, f.Table) + ")"
		}
		var idx []int
		if err := db.WithContext(ctx).Raw(strings.Join(parts, " UNION ALL ")).Scan(&idx).Error; err != nil {
			return nil, err
		}
		for _, i := range idx {
			full = append(full, chunk[i])
		}
	}
	fenced := map[string]bool{}
	var out []targetTable
	for _, f := range full {
		mover, ok := fenced[f.Schema]
		if !ok {
			st, err := readFence(ctx, db, f.Schema)
			if err != nil {
				return nil, err
			}
			mover = st.MoverOnly
			fenced[f.Schema] = mover
		}
		var ids []int64
		if err := db.WithContext(ctx).Raw("SELECT id FROM " + quoteTable(db, f.Schema, f.Table) + " ORDER BY id LIMIT 5").Scan(&ids).Error; err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			continue // emptied since
		}
		var n int64
		if err := db.WithContext(ctx).Raw("SELECT count(*) FROM " + quoteTable(db, f.Schema, f.Table)).Scan(&n).Error; err != nil {
			return nil, err
		}
		out = append(out, targetTable{schema: f.Schema, table: f.Table, rows: n, ids: ids, moverFenced: mover})
	}
	return out, nil
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ", ")
}

// copy empties the batch's tables on their targets (but those it just
// created) and copies every row of the batch's shards into them, table by
// table: one read of each monolith table (COPY on PostgreSQL) whose rows
// go to their shard's schema. It returns the rows copied.
func (b *splitBatch) copy(ctx context.Context) (int64, error) {
	targets, shards := b.byTarget()
	b.sent, b.badIDs = nil, &idMismatches{}
	for _, d := range targets {
		db := b.sp.cfg.DBs[d]
		// The shards this run did not create, emptied shardsPerTx a
		// transaction.
		var stale []int
		for _, s := range shards[d] {
			if !b.fresh[s] {
				stale = append(stale, s)
			}
		}
		var err error
		for lo := 0; lo < len(stale) && err == nil; lo += shardsPerTx {
			err = b.emptyShards(ctx, db, stale[lo:min(lo+shardsPerTx, len(stale))])
		}
		if err != nil {
			return 0, fmt.Errorf("shardid: emptying the batch's shards on %s: %w", b.sp.cfg.Map.Databases()[d], err)
		}
	}
	var total int64
	for _, t := range b.sp.tables {
		var progress func(int64)
		if b.progress != nil {
			progress = func(n int64) { b.progress(t.Name, n) }
		}
		var n int64
		var err error
		if b.sp.mysql {
			n, err = b.copyTableBatches(ctx, t, progress)
		} else {
			n, err = b.copyTablePG(ctx, t, progress)
		}
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, b.badIDs.err("copying shards " + shardList(b.shards))
}

// shardsPerTx is how many shards' tables a transaction of a split's
// copy, check or apply touches at most. Every table, index and TOAST
// table a transaction touches holds a lock until it ends, and the
// server's lock table is shared by every session (PostgreSQL:
// max_locks_per_transaction times max_connections, 6,400 at the
// defaults): a transaction over the 1,000 shards of a target ran it out
// (ERROR: out of shared memory), for the application's writes too.
const shardsPerTx = 64

// emptyShards empties the tables of shards on db (a target), in one
// transaction that holds their fences.
func (b *splitBatch) emptyShards(ctx context.Context, db *gorm.DB, shards []int) error {
	return moverTx(ctx, db, func(tx *sql.Tx) error {
		if err := b.holdFences(ctx, tx, shards); err != nil {
			return err
		}
		for _, s := range shards {
			var all []string
			for _, t := range b.sp.tableNames() {
				all = append(all, quoteTable(db, b.schemaOf(s), t))
			}
			stmts := []string{"TRUNCATE TABLE " + strings.Join(all, ", ")}
			if b.sp.mysql {
				stmts = nil
				for _, t := range all {
					stmts = append(stmts, "DELETE FROM "+t)
				}
			}
			for _, q := range stmts {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// copyTableBatches copies the batch's rows of t (MySQL/MariaDB): one read
// of them on the monolith, each with its shard and its hash, written 20,000
// rows at a time to each target (on a goroutine of each, while the read
// goes on) in one transaction let through its fence,
// with multi-row INSERTs into each shard's table, each after a pass of its
// shard's fence (passFenceMySQL), and counted and summed
// (b.sent) for verifyCopy.
func (b *splitBatch) copyTableBatches(ctx context.Context, t SplitTable, progress func(int64)) (int64, error) {
	cols := b.cols[t.Name].write
	idCol := idColumn(cols)
	q := "SELECT shardid_s, " + rowHash(b.sp.mono, textHashed(b.cols[t.Name].all)) + ", " + columnList(b.sp.mono, cols) + " FROM " + b.sp.rel(t, b.shards)
	sent := map[int]*sentRows{}
	for _, s := range b.shards {
		sent[s] = &sentRows{}
	}
	const page = 20000
	// Each target writes on a goroutine of its own, a page behind the
	// read at most: the read goes on while they write.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	targets, _ := b.byTarget()
	pages := map[int]chan map[int][][]any{}
	var wg sync.WaitGroup
	var copied int64 // and the reports of it: one at a time, in order
	var reported sync.Mutex
	for _, d := range targets {
		ch := make(chan map[int][][]any, 1)
		pages[d] = ch
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := b.sp.cfg.DBs[d]
			for per := range ch {
				if ctx.Err() != nil {
					continue // drained: the reader stops at the cancellation
				}
				n := 0
				err := moverTx(ctx, db, func(tx *sql.Tx) error {
					if err := b.holdFences(ctx, tx, sortedKeys(per)); err != nil {
						return err
					}
					for _, s := range sortedKeys(per) {
						if err := passFenceMySQL(ctx, tx, b.schemaOf(s)); err != nil {
							return fmt.Errorf("shard %d: %w", s, err)
						}
						if err := insertRows(ctx, db, tx.ExecContext, quoteTable(db, b.schemaOf(s), t.Name), cols, per[s], false); err != nil {
							return fmt.Errorf("shard %d: %w", s, err)
						}
						n += len(per[s])
					}
					return nil
				})
				if err != nil {
					cancel(fmt.Errorf("shardid: writing %s to %s: %w", t.Name, b.sp.cfg.Map.Databases()[d], err))
					continue
				}
				reported.Lock()
				copied += int64(n)
				if progress != nil {
					progress(copied)
				}
				reported.Unlock()
			}
		}()
	}
	per := map[int]map[int][][]any{} // by target, by shard
	held := 0
	write := func() error {
		for d, p := range per {
			select {
			case pages[d] <- p:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		per = map[int]map[int][][]any{}
		held = 0
		return nil
	}
	err := readSession(ctx, b.sp.mono, func(qr querier) error {
		rows, err := qr.QueryContext(ctx, q)
		if err != nil {
			return err
		}
		defer rows.Close()
		n := len(cols) + 2
		for rows.Next() {
			vals := make([]any, n)
			ptrs := make([]any, n)
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				return err
			}
			s, err := asInt64(vals[0])
			if err != nil {
				return err
			}
			h, err := hashOf(vals[1])
			if err != nil {
				return err
			}
			st, ok := sent[int(s)]
			if !ok {
				return fmt.Errorf("shardid: a row of %s of shard %d, not one of the batch's", t.Name, s)
			}
			if idCol >= 0 && b.sp.ids != nil {
				id, err := asInt64(vals[2+idCol])
				if err != nil {
					return err
				}
				b.badIDs.check(b.sp.ids, t.Name, id, int(s))
			}
			st.rows++
			st.sum += h
			d := b.to[int(s)]
			if per[d] == nil {
				per[d] = map[int][][]any{}
			}
			per[d][int(s)] = append(per[d][int(s)], vals[2:])
			// Written while the read goes on: the rows held stay few.
			if held++; held == page {
				if err := write(); err != nil {
					return err
				}
			}
		}
		return rows.Err()
	})
	if err == nil {
		err = write()
	}
	for _, ch := range pages {
		close(ch)
	}
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil {
		err = cause // a writer's failure, which stopped the read too
	}
	if err != nil {
		return copied, fmt.Errorf("shardid: copying %s: %w", t.Name, err)
	}
	if b.sent == nil {
		b.sent = map[string]map[int]*sentRows{}
	}
	b.sent[t.Name] = sent
	return copied, nil
}

// compare reads every table of the batch on both sides once (the
// monolith's rows of the batch, each shard's table on its target) and
// sets the verification up: each shard's row count and hash sum on its
// target, and the keys that differ.
func (b *splitBatch) compare(ctx context.Context) error {
	b.checks = map[string]map[int]*rowCheck{}
	for _, t := range b.sp.tables {
		all := b.cols[t.Name].all
		src := map[int]map[int64]uint64{}
		err := b.sp.eachRowHash(ctx, t, b.shards, all, func(id int64, s int, h uint64) {
			if src[s] == nil {
				src[s] = map[int64]uint64{}
			}
			src[s][id] = h
		})
		if err != nil {
			return fmt.Errorf("shardid: reading %s on the monolith: %w", t.Name, err)
		}
		checks := map[int]*rowCheck{}
		for _, s := range b.shards {
			db := b.dst(s)
			checks[s] = &rowCheck{table: quoteTable(db, b.schemaOf(s), t.Name), src: b.sp.rel(t, []int{s}), suspect: map[int64]string{}}
		}
		targets, shards := b.byTarget()
		for _, d := range targets {
			db := b.sp.cfg.DBs[d]
			seen := map[int]map[int64]bool{}
			// Each shard's table, shardsPerTx shards to a query and a
			// transaction.
			var err error
			for lo := 0; lo < len(shards[d]) && err == nil; lo += shardsPerTx {
				chunk := shards[d][lo:min(lo+shardsPerTx, len(shards[d]))]
				err = readSession(ctx, db, func(q querier) error {
					parts := make([]string, len(chunk))
					for i, s := range chunk {
						parts[i] = "SELECT " + strconv.Itoa(s) + ", id, " + rowHash(db, textHashed(all)) + " FROM " + checks[s].table
					}
					rows, err := q.QueryContext(ctx, strings.Join(parts, " UNION ALL "))
					if err != nil {
						return err
					}
					for rows.Next() {
						var s int
						var id int64
						var h any
						if err := rows.Scan(&s, &id, &h); err != nil {
							rows.Close()
							return err
						}
						hv, err := hashOf(h)
						if err != nil {
							rows.Close()
							return err
						}
						rc := checks[s]
						rc.rows++
						rc.sum += hv
						if seen[s] == nil {
							seen[s] = map[int64]bool{}
						}
						seen[s][id] = true
						switch sh, ok := src[s][id]; {
						case !ok:
							rc.suspect[id] = "only on the target"
						case sh != hv:
							rc.suspect[id] = "different on the target"
						}
					}
					rows.Close()
					return rows.Err()
				})
			}
			for _, s := range shards[d] {
				for id := range src[s] {
					if !seen[s][id] {
						checks[s].suspect[id] = "missing on the target"
					}
				}
			}
			if err != nil {
				return fmt.Errorf("shardid: reading %s on %s: %w", t.Name, b.sp.cfg.Map.Databases()[d], err)
			}
		}
		b.checks[t.Name] = checks
	}
	return nil
}

// splitChange is an entry of the split's change log.
type splitChange struct {
	Seq   int64
	Tbl   string
	ID    int64
	Shard int
}

// catchUp applies the split's change log until a read of it finds fewer
// than changeBatchSize entries, and returns how many it
// applied: each entry's row is applied to its shard's table on its target
// (re-read from the monolith among that shard's rows: gone there, it is
// deleted on the target), verified as it is written once the batch was
// compared.
func (b *splitBatch) catchUp(ctx context.Context) (int, error) {
	applied := 0
	for {
		var log []splitChange
		err := readSession(ctx, b.sp.mono, func(q querier) error {
			rows, err := q.QueryContext(ctx, "SELECT seq, tbl, id, shard FROM "+b.sp.q(splitChangeTable)+b.logFilter()+" ORDER BY seq LIMIT "+strconv.Itoa(changeBatchSize))
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var c splitChange
				if err := rows.Scan(&c.Seq, &c.Tbl, &c.ID, &c.Shard); err != nil {
					return err
				}
				log = append(log, c)
			}
			return rows.Err()
		})
		if err != nil {
			return applied, fmt.Errorf("shardid: reading the split's change log: %w", err)
		}
		if len(log) == 0 {
			return applied, nil
		}
		if err := b.apply(ctx, log); err != nil {
			return applied, err
		}
		seqs := make([]int64, len(log))
		for i, c := range log {
			seqs[i] = c.Seq
		}
		if err := forgetChangesIn(ctx, b.sp.mono, b.sp.schema, splitChangeTable, seqs); err != nil {
			return applied, fmt.Errorf("shardid: trimming the split's change log: %w", err)
		}
		applied += len(log)
		// A read short of a full batch had all there was; under the
		// fence (finish) too: the batch's entries are all in by then (the
		// fence waited for their writers), and an entry of no known
		// shard written after the read is not of the batch's rows (its
		// parent would be, and refused). Reading again until the log
		// was empty cost the fence a read session.
		if len(log) < changeBatchSize {
			return applied, nil
		}
	}
}

// logFilter is the WHERE clause of catchUp's reads: none, or for a batch
// of a group (only), its shards' entries and those of no known shard
// (up to seq unknownUpTo, if not 0).
func (b *splitBatch) logFilter() string {
	if !b.only {
		return ""
	}
	unknown := "shard = -1"
	if b.unknownUpTo != 0 {
		unknown = "(shard = -1 AND seq <= " + strconv.FormatInt(b.unknownUpTo, 10) + ")"
	}
	return " WHERE shard " + inList(b.shards) + " OR " + unknown
}

// lastSeq returns the last seq of the split's change log (0 if empty).
func (b *splitBatch) lastSeq(ctx context.Context) (int64, error) {
	var last sql.NullInt64
	err := b.sp.mono.WithContext(ctx).Raw("SELECT max(seq) FROM " + b.sp.q(splitChangeTable)).Scan(&last).Error
	return last.Int64, err
}

// apply applies log entries, grouped by table and shard, a few groups at
// once. An entry of an unknown shard (-1: a child row whose parent was
// gone) is applied to every shard of the batch whose target holds its key,
// and to the shard the monolith now gives it.
func (b *splitBatch) apply(ctx context.Context, log []splitChange) error {
	type group struct {
		table string
		shard int
	}
	keys := map[group][]int64{}
	seen := map[group]map[int64]bool{}
	add := func(g group, id int64) {
		if seen[g] == nil {
			seen[g] = map[int64]bool{}
		}
		if !seen[g][id] {
			seen[g][id] = true
			keys[g] = append(keys[g], id)
		}
	}
	unknown := map[string][]int64{}
	for _, c := range log {
		if _, ok := b.cols[c.Tbl]; !ok {
			return fmt.Errorf("shardid: the split's change log names table %q, not one of the split's", c.Tbl)
		}
		if _, ok := b.to[c.Shard]; ok {
			add(group{c.Tbl, c.Shard}, c.ID)
		} else if c.Shard == -1 {
			unknown[c.Tbl] = append(unknown[c.Tbl], c.ID)
		}
		// A shard outside the batch: its rows stay in the monolith.
	}
	for tbl, ids := range unknown {
		holders, err := b.whereIs(ctx, tbl, ids)
		if err != nil {
			return err
		}
		for id, shards := range holders {
			for _, s := range shards {
				add(group{tbl, s}, id)
			}
		}
	}
	groups := make([]group, 0, len(keys))
	byTable := map[string][]int64{}
	for g := range keys {
		groups = append(groups, g)
		byTable[g.table] = append(byTable[g.table], keys[g]...)
	}
	if err := b.checkApplied(ctx, byTable); err != nil {
		return err
	}
	sort.Slice(groups, func(i, j int) bool {
		if groups[i].table != groups[j].table {
			return groups[i].table < groups[j].table
		}
		return groups[i].shard < groups[j].shard
	})
	// A unit is a table's groups on one target: applied in one
	// transaction there (applyUnit), or, if that fails (a unique value two
	// rows swapped, see applyChunk), group by group as a move does.
	// A unit holds shardsPerTx shards at most: a table's groups on one
	// target are cut into parts.
	type place struct {
		table  string
		target int
	}
	type unit struct {
		place
		part int
	}
	units := map[unit]map[int][]int64{}
	var order []unit
	last := map[place]int{} // the part being filled
	for _, g := range groups {
		p := place{g.table, b.to[g.shard]}
		if len(units[unit{p, last[p]}]) == shardsPerTx {
			last[p]++
		}
		u := unit{p, last[p]}
		if units[u] == nil {
			units[u] = map[int][]int64{}
			order = append(order, u)
		}
		units[u][g.shard] = keys[g]
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, u := range order {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := b.applyUnit(ctx, u.table, u.target, units[u])
			if err != nil && ctx.Err() == nil && !errors.Is(err, ErrMoveLockLost) {
				err = nil
				t := b.sp.byName[u.table]
				for _, s := range sortedKeys(units[u]) {
					var rc *rowCheck
					if b.checks != nil {
						rc = b.checks[u.table][s]
					}
					var h fenceHold
					if h, err = b.fenceHold([]int{s}); err != nil {
						break
					}
					if err = applyKeysFrom(ctx, b.sp.mono, b.dst(s), h, b.sp.rel(t, []int{s}), b.schemaOf(s), u.table, b.cols[u.table], units[u][s], rc); err != nil {
						break
					}
				}
			}
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// applyUnit applies the keys of table, by shard, of shards on target d in
// one transaction there: what applyChunk does for one shard, for all of
// them at once. The monolith's rows are re-read in one query (with their
// shard now: a row gone from a shard, or gone, is deleted from the
// shard's table), the target's hashes before and after the writes read
// in one query each, and every row verified as it is written (rowCheck).
// On an error it changes nothing, and the caller applies the keys group by
// group (applyKeysFrom), which handles unique values two rows swapped.
func (b *splitBatch) applyUnit(ctx context.Context, table string, d int, keys map[int][]int64) error {
	t, c, db := b.sp.byName[table], b.cols[table], b.sp.cfg.DBs[d]
	shards := sortedKeys(keys)
	var all []int64
	for _, s := range shards {
		all = append(all, keys[s]...)
	}
	if len(all) > 5000 {
		return errors.New("too many keys for one transaction")
	}
	type srcRow struct {
		shard int
		vals  []any
		h     uint64
	}
	src := map[int64]srcRow{}
	err := readSession(ctx, b.sp.mono, func(q querier) error {
		for lo := 0; lo < len(all); lo += 1000 {
			chunk := all[lo:min(lo+1000, len(all))]
			args := make([]any, len(chunk))
			for i, id := range chunk {
				args[i] = id
			}
			rs, err := q.QueryContext(ctx, "SELECT shardid_s, "+columnList(b.sp.mono, c.write)+", "+rowHash(b.sp.mono, textHashed(c.all))+
				" FROM "+b.sp.rel(t, shards)+" WHERE id IN ("+placeholders(b.sp.mono, 0, len(chunk))+")", args...)
			if err != nil {
				return err
			}
			rows, err := scanAll(rs, len(c.write)+2)
			if err != nil {
				return err
			}
			for _, r := range rows {
				s, err := asInt64(r[0])
				if err != nil {
					return err
				}
				id, err := asInt64(r[1])
				if err != nil {
					return err
				}
				h, err := hashOf(r[len(r)-1])
				if err != nil {
					return err
				}
				src[id] = srcRow{shard: int(s), vals: r[1 : len(r)-1], h: h}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	hashes := func(tx *sql.Tx) (map[int]map[int64]uint64, error) {
		out := map[int]map[int64]uint64{}
		var parts []string
		var args []any
		for _, s := range shards {
			parts = append(parts, "SELECT "+strconv.Itoa(s)+", id, "+rowHash(db, textHashed(c.all))+" FROM "+quoteTable(db, b.schemaOf(s), table)+
				" WHERE id IN ("+placeholders(db, len(args), len(keys[s]))+")")
			for _, id := range keys[s] {
				args = append(args, id)
			}
			out[s] = map[int64]uint64{}
		}
		rows, err := tx.QueryContext(ctx, strings.Join(parts, " UNION ALL "), args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var s int
			var id int64
			var h any
			if err := rows.Scan(&s, &id, &h); err != nil {
				return nil, err
			}
			if out[s][id], err = hashOf(h); err != nil {
				return nil, err
			}
		}
		return out, rows.Err()
	}
	upsert := !b.sp.mysql
	var old, now map[int]map[int64]uint64
	err = moverTx(ctx, db, func(tx *sql.Tx) (err error) {
		if err := b.holdFences(ctx, tx, shards); err != nil {
			return err
		}
		if old, err = hashes(tx); err != nil {
			return err
		}
		for _, s := range shards {
			qt := quoteTable(db, b.schemaOf(s), table)
			var del []any
			var rows [][]any
			for _, id := range keys[s] {
				r, ok := src[id]
				switch {
				case !ok || r.shard != s:
					del = append(del, id)
				case upsert:
					rows = append(rows, r.vals)
				default:
					del = append(del, id)
					rows = append(rows, r.vals)
				}
			}
			if len(del) > 0 {
				if _, err := tx.ExecContext(ctx, "DELETE FROM "+qt+" WHERE id IN ("+placeholders(db, 0, len(del))+")", del...); err != nil {
					return err
				}
			}
			if err := insertRows(ctx, db, tx.ExecContext, qt, c.write, rows, upsert); err != nil {
				return err
			}
		}
		now, err = hashes(tx)
		return err
	})
	if err != nil {
		return err
	}
	if b.checks != nil {
		for _, s := range shards {
			srcH := map[int64]uint64{}
			for _, id := range keys[s] {
				if r, ok := src[id]; ok && r.shard == s {
					srcH[id] = r.h
				}
			}
			b.checks[table][s].applied(keys[s], srcH, old[s], now[s])
		}
	}
	return nil
}

// whereIs returns, for keys of table, the batch's shards whose target
// holds them, and the shard whose rows hold them on the monolith now.
func (b *splitBatch) whereIs(ctx context.Context, table string, ids []int64) (map[int64][]int, error) {
	out := map[int64][]int{}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	t := b.sp.byName[table]
	var now []struct {
		ID    int64
		Shard int
	}
	live := b.live
	if live == nil {
		live = b.shards
	}
	err := b.sp.mono.WithContext(ctx).Raw("SELECT id, shardid_s AS shard FROM "+b.sp.rel(t, live)+" WHERE id IN ?", ids).Scan(&now).Error
	if err != nil {
		return nil, err
	}
	for _, n := range now {
		out[n.ID] = append(out[n.ID], n.Shard)
	}
	// Each target's shards asked shardsPerTx tables a query, for 500
	// keys at a time.
	targets, shards := b.byTargetOf(live)
	for klo := 0; klo < len(ids); klo += 500 {
		list := joinIDs(ids[klo:min(klo+500, len(ids))])
		for _, d := range targets {
			db := b.sp.cfg.DBs[d]
			for lo := 0; lo < len(shards[d]); lo += shardsPerTx {
				chunk := shards[d][lo:min(lo+shardsPerTx, len(shards[d]))]
				parts := make([]string, len(chunk))
				for i, s := range chunk {
					parts[i] = "SELECT " + strconv.Itoa(s) + " AS shard, id FROM " + quoteTable(db, b.schemaOf(s), table) + " WHERE id IN (" + list + ")"
				}
				var have []struct {
					Shard int
					ID    int64
				}
				if err := db.WithContext(ctx).Raw(strings.Join(parts, " UNION ALL ")).Scan(&have).Error; err != nil {
					return nil, err
				}
				for _, h := range have {
					if !slices.Contains(out[h.ID], h.Shard) {
						out[h.ID] = append(out[h.ID], h.Shard)
					}
				}
			}
		}
	}
	return out, nil
}

// converge compares both sides, then applies the change log round after
// round until little is left for the fence (as shardCopier.converge).
func (b *splitBatch) converge(ctx context.Context) error {
	// A copy that verifies itself needs no comparison, and its
	// verification comes first: the target must still hold what it sent.
	ok, err := b.verifyCopy(ctx)
	if err != nil {
		return err
	}
	if _, err := b.catchUp(ctx); err != nil {
		return err
	}
	if !ok {
		if err := b.compare(ctx); err != nil {
			return err
		}
	}
	return b.settle(ctx)
}

// settle applies the change log round after round until little is left
// for the fence, then fails if a key still differs with nothing in the log
// to explain it: converge's end, and, for a later batch of a group (whose
// shards' entries waited while the batches before it were fenced), all
// there is to do before its fence.
func (b *splitBatch) settle(ctx context.Context) error {
	prev := -1
	for round := 0; ; round++ {
		n, err := b.catchUp(ctx)
		if err != nil {
			return err
		}
		if round == 0 {
			if err := b.recheck(ctx); err != nil {
				return err
			}
			continue
		}
		if n <= smallBacklog || round >= 20 || (round >= 4 && n >= prev) {
			return b.unexplained(ctx)
		}
		prev = n
	}
}

// recheck compares the keys in doubt again.
func (b *splitBatch) recheck(ctx context.Context) error {
	for _, t := range b.sp.tables {
		for _, s := range b.shards {
			rc := b.checks[t.Name][s]
			if err := rc.recheck(ctx, b.sp.mono, b.dst(s), textHashed(b.cols[t.Name].all)); err != nil {
				return err
			}
		}
	}
	return nil
}

// unexplained fails with ErrCopyDiffers if a key still differs with no
// change of it waiting in the log, before the fence.
func (b *splitBatch) unexplained(ctx context.Context) error {
	if err := b.recheck(ctx); err != nil {
		return err
	}
	var pending map[string]map[int64]bool
	for _, t := range b.sp.tables {
		for _, s := range b.shards {
			rc := b.checks[t.Name][s]
			if len(rc.suspect) == 0 {
				continue
			}
			if pending == nil {
				var err error
				if pending, err = pendingKeysIn(ctx, b.sp.mono, b.sp.schema, splitChangeTable); err != nil {
					return err
				}
			}
			for id, why := range rc.suspect {
				if !pending[t.Name][id] {
					return fmt.Errorf("%w: table %s of shard %d, id %d (%s), before the fence", ErrCopyDiffers, t.Name, s, id, why)
				}
			}
		}
	}
	return nil
}

// finish runs under the fence: the rest of the change log, the keys in
// doubt compared again, and each table's rows and checksum over the
// batch, equal on both sides.
func (b *splitBatch) finish(ctx context.Context) ([]TableCheck, error) {
	if _, err := b.catchUp(ctx); err != nil {
		return nil, err
	}
	if err := b.recheck(ctx); err != nil {
		return nil, err
	}
	var out []TableCheck
	for _, t := range b.sp.tables {
		tc := TableCheck{Table: t.Name}
		for _, s := range b.shards {
			rc := b.checks[t.Name][s]
			if len(rc.suspect) > 0 {
				id, why := rc.firstSuspect()
				return nil, fmt.Errorf("%w: table %s of shard %d differs in %d row(s) after the copy, the first with id %d (%s)",
					ErrCopyDiffers, t.Name, s, len(rc.suspect), id, why)
			}
			tc.Rows += rc.rows
			tc.Checksum += rc.sum
		}
		out = append(out, tc)
	}
	return out, nil
}

// shardCheck is what finish verified of one table of one shard.
type shardCheck struct {
	Rows int64  `json:"rows"`
	Sum  uint64 `json:"sum"`
	// Cols are the columns the rows were hashed over, as a JSON array:
	// a migration between two batches may add a column to the monolith's
	// table, and the rows of the batches sealed before it must be summed
	// as they were verified. Empty in a seal stored before it was kept
	// (the table's columns then).
	Cols string `json:"cols,omitempty"`
}

// checkCols is cols as shardCheck keeps them.
func checkCols(cols []string) string {
	j, _ := json.Marshal(cols)
	return string(j)
}

// hashedOver returns the columns c was hashed over, or current if c does
// not say.
func (c shardCheck) hashedOver(current []string) ([]string, error) {
	if c.Cols == "" {
		return current, nil
	}
	var cols []string
	if err := json.Unmarshal([]byte(c.Cols), &cols); err != nil || len(cols) == 0 {
		return nil, fmt.Errorf("shardid: a split's seal names the columns it verified as %q", c.Cols)
	}
	return cols, nil
}

// sameSums reports whether c and o count and sum the same rows, whatever
// columns each says it was hashed over.
func (c shardCheck) sameSums(o shardCheck) bool { return c.Rows == o.Rows && c.Sum == o.Sum }

// verified returns, per shard, what finish verified of each table, as
// JSON: stored with the seal for deleteCopied.
func (b *splitBatch) verified() map[int]string {
	out := map[int]string{}
	for _, s := range b.shards {
		m := map[string]shardCheck{}
		for _, t := range b.sp.tables {
			rc := b.checks[t.Name][s]
			m[t.Name] = shardCheck{Rows: rc.rows, Sum: rc.sum, Cols: checkCols(b.cols[t.Name].all)}
		}
		j, _ := json.Marshal(m)
		out[s] = string(j)
	}
	return out
}

// readDefinitions reads the monolith's tables' definitions into b.defs
// and, on PostgreSQL, their other indexes into b.indexes.
func (b *splitBatch) readDefinitions(ctx context.Context) error {
	tables := b.sp.tableNames()
	defs := map[string]string{}
	for _, t := range tables {
		d, err := tableDefinition(ctx, b.sp.mono, b.sp.schema, t, !b.sp.mysql)
		if err != nil {
			return err
		}
		defs[t] = d
	}
	var indexes map[string][]string
	if !b.sp.mysql {
		var err error
		if indexes, err = secondaryIndexesPG(ctx, b.sp.mono, b.sp.schema, tables); err != nil {
			return err
		}
	}
	b.defs, b.indexes = defs, indexes
	return nil
}

// definitionsKey is what the schemas created from b.defs, b.indexes and
// b.grants were created from, to tell whether the monolith's tables, their
// owners or their privileges changed since (a grant or a revoke between
// two batches must reach the later batches' schemas, as it would have
// without the creation ahead). A MySQL table's next AUTO_INCREMENT value,
// which every insert moves, is left out.
func (b *splitBatch) definitionsKey() string {
	defs := map[string]string{}
	for t, d := range b.defs {
		defs[t] = autoIncrementOption.ReplaceAllString(d, "")
	}
	var g splitGrants
	if b.grants != nil {
		g = *b.grants
		g.users = slices.Sorted(slices.Values(g.users)) // in any order the monolith listed them
	}
	return fmt.Sprintf("%v %v %+v", defs, b.indexes, g) // maps print in key order
}

// autoIncrementOption is the AUTO_INCREMENT table option of MySQL's SHOW
// CREATE TABLE.
var autoIncrementOption = regexp.MustCompile(` AUTO_INCREMENT=[0-9]+`)

// dropStaleAhead drops the schemas created ahead of the batch, found as
// created, if the monolith's tables changed since (a migration between
// two batches: a column added, an index made; an owner or a privilege
// changed): they are empty, and the batch creates them again from the
// tables as they are now, as it would have without them. key is what
// they were created from (definitionsKey).
func (b *splitBatch) dropStaleAhead(ctx context.Context, lock *moveLock, key string) error {
	if b.defs == nil {
		if err := b.readDefinitions(ctx); err != nil {
			return err
		}
	}
	if b.definitionsKey() == key {
		return nil
	}
	for _, s := range b.shards {
		if !b.aheadAsCreated(s) {
			continue
		}
		if err := dropCopyAsSeen(ctx, b.dst(s), b.schemaOf(s), b.sp.tableNames(), b.seen[s], lock, "dropping a schema created ahead of the monolith's tables' change"); err != nil {
			return fmt.Errorf("shardid: split: dropping shard %d's schema, created before the monolith's tables changed: %w", s, err)
		}
		b.seen[s] = targetSeen{}
		delete(b.ahead, s)
	}
	return nil
}

// aheadAsCreated reports whether shard s's schema was created ahead of
// the batch (b.ahead) and seen since, the split's lock held, still fenced
// for the mover with the token it was created with (b.seen).
func (b *splitBatch) aheadAsCreated(s int) bool {
	tok, ok := b.ahead[s]
	return ok && b.seen[s].exists && b.seen[s].fenced && b.seen[s].token == tok
}

// createTargetsMySQL is createTargets on MySQL/MariaDB of shards (by
// target): a database per shard, four at a time on each target. A
// database that does not exist yet is created in one go: its tables from
// the monolith's definitions, and its fence (state row fenced for the
// mover, a new token, and triggers), with
// nothing to check, since nobody can write into it before it exists. One
// that exists (a batch run again) is completed as a move does.
func (b *splitBatch) createTargetsMySQL(ctx context.Context, targets []int, shards map[int][]int, tables []string, tokens map[int]int64) error {
	like, err := databaseCharsetMySQL(ctx, b.sp.mono, b.sp.schema)
	if err != nil {
		return err
	}
	type job struct{ d, s int }
	jobs := make(chan job)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 * len(targets) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				fresh, tok, err := b.createTargetMySQL(ctx, b.sp.cfg.DBs[j.d], b.schemaOf(j.s), tables, like)
				if err != nil {
					cancel(fmt.Errorf("shardid: creating shard %d on %s: %w", j.s, b.sp.cfg.Map.Databases()[j.d], err))
					continue
				}
				mu.Lock()
				tokens[j.s] = tok
				b.fresh[j.s] = fresh
				mu.Unlock()
			}
		}()
	}
	for _, d := range targets {
		for _, s := range shards[d] {
			select {
			case jobs <- job{d, s}:
			case <-ctx.Done():
			}
		}
	}
	close(jobs)
	wg.Wait()
	return context.Cause(ctx)
}

// createTargetMySQL creates the shard database schema on db with tables
// fenced for the mover, with like, the monolith database's character set
// and collation (databaseCharsetMySQL), and reports whether it created the
// database and the fence's token.
func (b *splitBatch) createTargetMySQL(ctx context.Context, db *gorm.DB, schema string, tables []string, like string) (bool, int64, error) {
	var n int64
	if err := db.WithContext(ctx).Raw("SELECT count(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", schema).Scan(&n).Error; err != nil {
		return false, 0, err
	}
	seen := b.seen[b.shardOf(schema)]
	if n > 0 != seen.exists {
		return false, 0, seen.unchanged(targetSeen{exists: n > 0}, schema)
	}
	if n > 0 {
		if err := copyDefinitions(ctx, b.sp.mono, db, b.sp.schema, schema, tables); err != nil {
			return false, 0, err
		}
		tok, err := fenceTargetAsSeen(ctx, db, schema, tables, seen)
		return false, tok, err
	}
	tok := newFenceToken()
	stmts := []string{"CREATE DATABASE `" + schema + "`" + like}
	for _, t := range tables {
		stmts = append(stmts, "CREATE TABLE "+quoteTable(db, schema, t)+b.defs[t])
	}
	stmts = append(stmts, "CREATE TABLE "+quoteTable(db, schema, fenceTable)+
		" (id INT PRIMARY KEY, fenced_until DATETIME(6) NOT NULL, token BIGINT NOT NULL, sealed BOOLEAN NOT NULL, mover_only BOOLEAN NOT NULL DEFAULT FALSE) ENGINE=InnoDB",
		"INSERT INTO "+quoteTable(db, schema, fenceTable)+" (id, fenced_until, token, sealed, mover_only) VALUES (1, '9999-12-31 23:59:59', "+strconv.FormatInt(tok, 10)+", FALSE, TRUE)")
	for _, t := range tables {
		for _, ev := range mysqlFenceEvents {
			stmts = append(stmts, fenceTriggerMySQL(schema, t, fenceTriggerNameMySQL(ev.letter, t), ev.event))
		}
	}
	// Children before their parents too: the foreign keys are checked
	// once the tables exist.
	err := db.WithContext(ctx).Connection(func(c *gorm.DB) error {
		conn, ok := c.Statement.ConnPool.(*sql.Conn)
		if !ok {
			return fmt.Errorf("shardid: gorm's Connection gave a %T, not a session", c.Statement.ConnPool)
		}
		return withSessionVars(ctx, conn, "SET @shardid_fkc = @@session.foreign_key_checks, foreign_key_checks = 0",
			"SET foreign_key_checks = @shardid_fkc, @shardid_fkc = NULL", func() error {
				for _, q := range stmts {
					if _, err := conn.ExecContext(ctx, q); err != nil {
						return err
					}
				}
				return nil
			})
	})
	return true, tok, err
}
