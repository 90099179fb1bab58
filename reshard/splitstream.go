package reshard

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"
)

// A split's first copy, on PostgreSQL, is one COPY TO STDOUT of each
// monolith table per batch: the batch's rows, each with its shard and its
// hash (rowHash: computed by the splitter from the row's text,
// copyRowHasher, or by the monolith for a table with generated columns),
// routed in Go to a COPY FROM
// STDIN of each shard's table on its target. Every row is read once and
// written once, as a bare COPY does, and the copy verifies itself: what it
// sent of each table of each shard (rows, and the sum of their hashes) is
// compared with what the target then holds (verifyCopy), a sum computed by
// the target, without reading a row back.

const (
	// copyChunk is the size at which a shard's rows of a table are sent
	// to its target (a COPY FROM statement).
	copyChunk = 1 << 20
	// copyBuffered is how much a copy holds in memory at most: past it,
	// every shard's rows gathered so far are sent.
	copyBuffered = 32 << 20
)

// sentRows is what a copy sent of one table of one shard.
type sentRows struct {
	rows int64
	sum  uint64 // of the rows' hashes, modulo 2^64
}

// copyChunkOf is one COPY FROM STDIN: rows (COPY text lines) of a table of
// a shard.
type copyChunkOf struct {
	shard int
	data  []byte
	rows  int64
}

// copyRouter is the io.Writer that COPY TO STDOUT writes the monolith's
// rows to: each line is the row's shard, its hash, then its columns, or,
// with a hasher, the row's shard, then its columns, from which the hasher
// computes its hash. It gathers each shard's lines and sends them on in
// chunks, and counts what it sent.
type copyRouter struct {
	hasher   *copyRowHasher
	send     func(copyChunkOf) error
	bufs     map[int][]byte
	rows     map[int]int64
	sent     map[int]*sentRows
	held     int
	partial  []byte
	total    int64
	progress func(int64)
	// checkID, if not nil, is given each row's ID, column idCol.
	checkID func(id int64, shard int)
	idCol   int
}

func newCopyRouter(shards []int, send func(copyChunkOf) error, progress func(int64)) *copyRouter {
	r := &copyRouter{send: send, bufs: map[int][]byte{}, rows: map[int]int64{}, sent: map[int]*sentRows{}, progress: progress}
	for _, s := range shards {
		r.sent[s] = &sentRows{}
	}
	return r
}

// Write takes in what COPY TO STDOUT sends: a row a call, as pgx passes
// it on, but a row in pieces is put back together.
func (r *copyRouter) Write(p []byte) (int, error) {
	if err := eachLine(&r.partial, p, r.line); err != nil {
		return 0, err
	}
	return len(p), nil
}

// eachLine calls line with each whole line (its "\n" included) of what
// partial holds, the start of a line that a write before cut short, and
// p; it keeps the end of a line that p cuts short in partial.
func eachLine(partial *[]byte, p []byte, line func([]byte) error) error {
	if len(*partial) > 0 {
		p = append(*partial, p...)
		*partial = nil
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			*partial = append([]byte(nil), p...)
			return nil
		}
		if err := line(p[:i+1]); err != nil {
			return err
		}
		p = p[i+1:]
	}
	return nil
}

// line routes one row: "shard\thash\tcolumns...\n", or
// "shard\tcolumns...\n" with a hasher.
func (r *copyRouter) line(l []byte) error {
	var (
		key  int64
		h    uint64
		data []byte
		err  error
	)
	if r.hasher != nil {
		var ok bool
		if key, data, ok = cutInt(l); !ok {
			return fmt.Errorf("shardid: a copied row with no shard: %.60q", l)
		}
		if _, h, err = r.hasher.hash(data); err != nil {
			return err
		}
	} else if key, h, data, err = cutKeyHash(l, "shard"); err != nil {
		return err
	}
	s := int(key)
	sent, ok := r.sent[s]
	if !ok {
		return fmt.Errorf("shardid: a copied row of shard %d, not one of the batch's", s)
	}
	if r.checkID != nil {
		f, ok := copyField(data, r.idCol)
		id, isInt := parseDecimal(f)
		if !ok || !isInt {
			return fmt.Errorf("shardid: a copied row with no id in column %d: %.60q", r.idCol, data)
		}
		r.checkID(id, s)
	}
	r.bufs[s] = append(r.bufs[s], data...)
	r.rows[s]++
	sent.rows++
	sent.sum += h
	r.held += len(data)
	r.total++
	if r.progress != nil && r.total%10000 == 0 {
		r.progress(r.total)
	}
	switch {
	case len(r.bufs[s]) >= copyChunk:
		return r.flush(s)
	case r.held >= copyBuffered:
		return r.flushAll()
	}
	return nil
}

// flush sends what is gathered of shard s.
func (r *copyRouter) flush(s int) error {
	if len(r.bufs[s]) == 0 {
		return nil
	}
	c := copyChunkOf{shard: s, data: r.bufs[s], rows: r.rows[s]}
	r.held -= len(c.data)
	delete(r.bufs, s)
	delete(r.rows, s)
	return r.send(c)
}

// flushAll sends what is gathered of every shard, in shard order.
func (r *copyRouter) flushAll() error {
	for _, s := range sortedKeys(r.bufs) {
		if err := r.flush(s); err != nil {
			return err
		}
	}
	if r.progress != nil {
		r.progress(r.total)
	}
	return nil
}

// cutKeyHash parses the start of a copied row, "key\thash\t", where key
// is what names the row's place (what: its shard, its bucket), and returns
// them and the row's columns after them.
func cutKeyHash(l []byte, what string) (key int64, h uint64, data []byte, err error) {
	key, rest, ok := cutInt(l)
	if !ok {
		return 0, 0, nil, fmt.Errorf("shardid: a copied row with no %s: %.60q", what, l)
	}
	hash, data, ok := cutInt(rest)
	if !ok {
		return 0, 0, nil, fmt.Errorf("shardid: a copied row with no hash: %.60q", l)
	}
	return key, uint64(hash), data, nil
}

// cutInt parses the decimal integer at the start of l, up to a tab, and
// returns it and what follows the tab.
func cutInt(l []byte) (int64, []byte, bool) {
	i := bytes.IndexByte(l, '\t')
	if i <= 0 {
		return 0, nil, false
	}
	v, err := strconv.ParseInt(string(l[:i]), 10, 64)
	return v, l[i+1:], err == nil
}

// copyTablePG copies the batch's rows of t to their shards' tables: one
// COPY TO STDOUT on the monolith, routed (copyRouter) to a transaction on
// each target, let through its fence for the mover, where each chunk is a
// COPY FROM STDIN into its shard's table. It records what it sent in
// b.sent, and returns the rows copied.
func (b *splitBatch) copyTablePG(ctx context.Context, t SplitTable, progress func(int64)) (int64, error) {
	cols := b.cols[t.Name]
	from, shard := b.sp.from(t)
	sel := make([]string, len(cols.write))
	for i, c := range cols.write {
		sel[i] = b.sp.col("x", c)
	}
	all := make([]string, len(cols.all))
	for i, c := range cols.all {
		all[i] = b.sp.col("x", c)
	}
	// The hash is rowHash's, over the same columns: what the target
	// computes over its copy (verifyCopy). The mover computes it from
	// the row as it passes (copyRowHasher), unless a column is
	// generated: the hash covers it, and the copy does not send it.
	var hasher *copyRowHasher
	q := "COPY (SELECT " + shard + ", hashtextextended(ROW(" + strings.Join(all, ", ") + ")::text, 0), " + strings.Join(sel, ", ") +
		" FROM " + from + " WHERE " + shard + " " + inList(b.shards) + ") TO STDOUT"
	if slices.Equal(cols.all, cols.write) {
		hasher = &copyRowHasher{}
		q = "COPY (SELECT " + shard + ", " + strings.Join(sel, ", ") + " FROM " + from + " WHERE " + shard + " " + inList(b.shards) + ") TO STDOUT"
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// copyLanes sessions of each target, each writing its share of the
	// target's shards in a transaction of its own.
	targets, shards := b.byTarget()
	type lane struct{ d, i int }
	laneOf := map[int]lane{}
	laneShards := map[lane][]int{}
	feeds := map[lane]chan copyChunkOf{}
	for _, d := range targets {
		n := lanesOf(b.sp.cfg.DBs[d])
		for i, s := range shards[d] {
			laneOf[s] = lane{d, i % n}
			laneShards[laneOf[s]] = append(laneShards[laneOf[s]], s)
		}
	}
	errs := make(chan error, len(targets)*copyLanes)
	var wg sync.WaitGroup
	for _, l := range slices.Collect(maps.Values(laneOf)) {
		if feeds[l] != nil {
			continue
		}
		feed := make(chan copyChunkOf, 4)
		feeds[l] = feed
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := b.copyInto(ctx, l.d, laneShards[l], t.Name, columnList(b.sp.cfg.DBs[l.d], cols.write), feed)
			if err != nil {
				cancel(fmt.Errorf("shardid: copying %s to %s: %w", t.Name, b.sp.cfg.Map.Databases()[l.d], err))
				for range feed { // the reader stops at the cancellation
				}
			}
			errs <- err
		}()
	}
	send := func(c copyChunkOf) error {
		select {
		case feeds[laneOf[c.shard]] <- c:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	router := newCopyRouter(b.shards, send, progress)
	router.hasher = hasher
	if b.sp.ids != nil {
		router.idCol = idColumn(cols.write)
		router.checkID = func(id int64, s int) { b.badIDs.check(b.sp.ids, t.Name, id, s) }
	}
	err := withPgx(ctx, b.sp.mono, func(c *pgx.Conn) error {
		tx, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := tx.Exec(ctx, hashSettingsPG); err != nil {
			return err
		}
		if _, err := c.PgConn().CopyTo(ctx, router, q); err != nil {
			return err
		}
		return router.flushAll()
	})
	if err != nil {
		// The targets see the cancellation before their feeds close, and
		// roll back.
		cancel(fmt.Errorf("shardid: reading %s on the monolith: %w", t.Name, err))
	}
	for _, feed := range feeds {
		close(feed)
	}
	wg.Wait()
	close(errs)
	if cause := context.Cause(ctx); cause != nil {
		return 0, cause
	}
	for err := range errs {
		if err != nil {
			return 0, err
		}
	}
	if b.sent == nil {
		b.sent = map[string]map[int]*sentRows{}
	}
	b.sent[t.Name] = router.sent
	return router.total, nil
}

// copyKeepAlive is how often, at most, a copy's session on a target that
// waits for rows runs a statement to show it is alive.
const copyKeepAlive = 5 * time.Second

// copyLanes is how many sessions of each target a split's copy writes
// through at once: a COPY into a shard's table is mostly the server's CPU.
const copyLanes = 2

// lanesOf is how many lanes a copy writes to db through: copyLanes, but
// never more than db's pool may open. Each lane holds a session until the
// read ends; a lane waiting for a session that another lane holds would
// wait for ever, and the read with it.
func lanesOf(db *gorm.DB) int {
	pool, err := sqlDB(db)
	if err != nil {
		return 1
	}
	if m := pool.Stats().MaxOpenConnections; m > 0 {
		return max(1, min(copyLanes, m))
	}
	return copyLanes
}

// copyInto writes the chunks of table that feed brings into their shards'
// tables on target d (shards, the lane's, ascending), in transactions let
// through the fence for the mover, each holding the fences of up to
// shardsPerTx of the lane's shards (a window of them, from the first
// shard it is given chunks of: the read sends most of them in shard
// order); a chunk of a shard outside the window commits the transaction
// and begins the next one, and the last is committed once feed is
// closed, unless ctx is cancelled by then. A copy cut short leaves rows
// on the targets, fenced for the mover: the next run empties them first.
func (b *splitBatch) copyInto(ctx context.Context, d int, shards []int, table, list string, feed <-chan copyChunkOf) error {
	db := b.sp.cfg.DBs[d]
	return withPgx(ctx, db, func(c *pgx.Conn) error {
		// The transaction waits for the rows that the monolith's read
		// routes to it, as long as that read takes. A server that ends
		// transactions idle for longer (idle_in_transaction_session_timeout)
		// would end it, and so would a pooler (PgBouncer's
		// idle_transaction_timeout): a statement every 5 s, or every third
		// of the server's timeout if that is shorter, keeps it busy while
		// the mover lives, and lets them end it if the mover stalls
		// (TestSplitThroughAnIdleTransactionReaperPostgres).
		var idleMS int64
		if err := c.QueryRow(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'").Scan(&idleMS); err != nil {
			return err
		}
		every := copyKeepAlive
		if idleMS > 0 {
			every = min(every, max(time.Duration(idleMS)*time.Millisecond/3, 10*time.Millisecond))
		}
		var tx pgx.Tx
		var held []int // the window's shards, ascending: their fences held by tx
		defer func() {
			if tx != nil {
				_ = tx.Rollback(context.WithoutCancel(ctx))
			}
		}()
		// window commits the transaction open, if any, and begins one
		// that holds the fences of the lane's shards from shard s on.
		window := func(s int) error {
			if tx != nil {
				err := tx.Commit(ctx)
				tx = nil
				if err != nil {
					return err
				}
			}
			i, found := slices.BinarySearch(shards, s)
			if !found {
				return fmt.Errorf("shardid: a chunk of shard %d, not one of the lane's", s)
			}
			w := shards[i:min(i+shardsPerTx, len(shards))]
			h, err := b.fenceHold(w)
			if err != nil {
				return err
			}
			next, err := c.Begin(ctx)
			if err != nil {
				return err
			}
			tx = next
			if _, err := tx.Exec(ctx, moverSettingsPG); err != nil {
				return err
			}
			if err := h.holdPgx(ctx, tx); err != nil {
				return err
			}
			held = w
			return nil
		}
		keepAlive := time.NewTicker(every)
		defer keepAlive.Stop()
		for {
			var chunk copyChunkOf
			select {
			case <-keepAlive.C:
				if tx != nil {
					if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
						return err
					}
				}
				continue
			case next, ok := <-feed:
				if !ok { // the read is done, unless ctx was cancelled
					if err := context.Cause(ctx); err != nil {
						return err
					}
					if tx == nil {
						return nil
					}
					err := tx.Commit(ctx)
					tx = nil
					return err
				}
				chunk = next
			}
			if _, ok := slices.BinarySearch(held, chunk.shard); !ok {
				if err := window(chunk.shard); err != nil {
					return err
				}
			}
			q := "COPY " + quoteTable(db, b.schemaOf(chunk.shard), table) + " (" + list + ") FROM STDIN"
			tag, err := c.PgConn().CopyFrom(ctx, bytes.NewReader(chunk.data), q)
			if err != nil {
				return fmt.Errorf("shard %d: %w", chunk.shard, err)
			}
			if tag.RowsAffected() != chunk.rows {
				return fmt.Errorf("shard %d: COPY wrote %d rows of %d sent", chunk.shard, tag.RowsAffected(), chunk.rows)
			}
		}
	})
}

// verifyCopy compares what the copy sent of each table of each shard with
// what the shard's table on its target holds, rows and the sum of their
// hashes, both computed by the target, and on success sets the batch's
// verification up from them (b.checks): no key in doubt. It reports false
// when the copy sent nothing it could check (a copy of another kind) or
// a sum differs: the caller then compares both sides row by row.
func (b *splitBatch) verifyCopy(ctx context.Context) (bool, error) {
	if len(b.sent) != len(b.sp.tables) {
		return false, nil
	}
	checks := map[string]map[int]*rowCheck{}
	targets, shards := b.byTarget()
	// Every table on every target summed at once, a session each.
	type sums struct {
		got map[int]sentRows
		err error
	}
	type job struct {
		t string
		d int
	}
	results := map[job]*sums{}
	var wg sync.WaitGroup
	for _, t := range b.sp.tables {
		for _, d := range targets {
			r := &sums{}
			results[job{t.Name, d}] = r
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.got, r.err = tableSums(ctx, b.sp.cfg.DBs[d], shards[d], b.schemaOf, t.Name, b.cols[t.Name].all)
			}()
		}
	}
	wg.Wait()
	for _, t := range b.sp.tables {
		checks[t.Name] = map[int]*rowCheck{}
		for _, d := range targets {
			db := b.sp.cfg.DBs[d]
			got, err := results[job{t.Name, d}].got, results[job{t.Name, d}].err
			if err != nil {
				return false, fmt.Errorf("shardid: verifying the copy of %s on %s: %w", t.Name, b.sp.cfg.Map.Databases()[d], err)
			}
			for _, s := range shards[d] {
				sent := b.sent[t.Name][s]
				if sent == nil || got[s] != *sent {
					return false, nil
				}
				checks[t.Name][s] = &rowCheck{table: quoteTable(db, b.schemaOf(s), t.Name), src: b.sp.rel(t, []int{s}),
					rows: sent.rows, sum: sent.sum, suspect: map[int64]string{}}
			}
		}
	}
	b.checks = checks
	return true, nil
}

// tableSums returns the rows and the sum of the row hashes (rowHash over
// cols) of table in the schema of each of shards on db, computed by db: a
// query of shardsPerTx tables at a time.
func tableSums(ctx context.Context, db *gorm.DB, shards []int, schemaOf func(int) string, table string, cols []string) (map[int]sentRows, error) {
	out := map[int]sentRows{}
	sum := "coalesce(sum(" + rowHash(db, textHashed(cols)) + "), 0)::text"
	if db.Dialector.Name() == "mysql" {
		sum = "CAST(COALESCE(SUM(" + rowHash(db, textHashed(cols)) + "), 0) AS CHAR)"
	}
	// A query and a transaction of shardsPerTx tables at a time: each
	// holds its tables' locks to its end.
	var err error
	for lo := 0; lo < len(shards) && err == nil; lo += shardsPerTx {
		chunk := shards[lo:min(lo+shardsPerTx, len(shards))]
		err = readSession(ctx, db, func(q querier) error {
			if db.Dialector.Name() != "mysql" {
				// Each of the small tables is read by this session alone: a
				// parallel plan would have its workers, new sessions, open
				// every table again (3 to 4 times slower).
				if _, err := q.ExecContext(ctx, "SELECT set_config('max_parallel_workers_per_gather', '0', true)"); err != nil {
					return err
				}
			}
			parts := make([]string, len(chunk))
			for i, s := range chunk {
				parts[i] = "SELECT " + strconv.Itoa(s) + ", count(*), " + sum + " FROM " + quoteTable(db, schemaOf(s), table)
			}
			rows, err := q.QueryContext(ctx, strings.Join(parts, " UNION ALL "))
			if err != nil {
				return err
			}
			for rows.Next() {
				var s int
				var n int64
				var total string
				if err := rows.Scan(&s, &n, &total); err != nil {
					rows.Close()
					return err
				}
				sum, err := sumOf(total)
				if err != nil {
					rows.Close()
					return err
				}
				out[s] = sentRows{rows: n, sum: sum}
			}
			rows.Close()
			return rows.Err()
		})
	}
	return out, err
}
