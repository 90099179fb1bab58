package reshard

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// columns are a table's columns, "id" first: all of them (what the rows'
// hashes cover) and those a copy writes (not the generated ones, which
// the target computes).
type columns struct {
	all, write []string
	// kinds: how rowHash hashes each of all on PostgreSQL (hashCols);
	// nil, in the row's text. A move hashes by type (byType), a split in
	// the row's text.
	kinds []hashKind
	// types: PostgreSQL's names of the types of all (information_schema's
	// data_type; a domain's is its base type's).
	types []string
	// plainMySQL: on MySQL, every column reads through the driver as the
	// server prints it (plainTypeMySQL, in a session that reads text
	// unconverted), none generated: the mover can hash a row from the
	// values it reads (mysqlRowHash).
	plainMySQL bool
}

// tableColumns returns the columns of schema.table on db in their order,
// "id" first.
func tableColumns(ctx context.Context, db *gorm.DB, schema, table string) (columns, error) {
	var found []struct {
		Name      string
		Generated bool
		Type      string
		Charset   *string
		Results   *string // the session's character_set_results
	}
	q := "SELECT column_name AS name, is_generated = 'ALWAYS' AS generated, data_type AS type FROM information_schema.columns WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position"
	mysql := db.Dialector.Name() == "mysql"
	if mysql {
		// MySQL has no IS_GENERATED; its EXTRA also says DEFAULT_GENERATED
		// of a column with an expression as its default.
		q = "SELECT COLUMN_NAME AS name, (EXTRA LIKE '%VIRTUAL GENERATED%' OR EXTRA LIKE '%STORED GENERATED%' OR EXTRA LIKE '%PERSISTENT GENERATED%') AS `generated`," +
			" LOWER(DATA_TYPE) AS type, LOWER(CHARACTER_SET_NAME) AS charset, LOWER(@@character_set_results) AS results" +
			" FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION"
	}
	if err := db.WithContext(ctx).Raw(q, schema, table).Scan(&found).Error; err != nil {
		return columns{}, err
	}
	out := columns{all: []string{"id"}, write: []string{"id"}, plainMySQL: mysql}
	if !mysql {
		out.types = []string{""}
	}
	hasID := false
	for _, c := range found {
		// As the server prints them, read by a session of db's pool: one
		// that reads text converted to another character set
		// (charset=latin1 in the DSN) gets other bytes than the server
		// hashes.
		if mysql && (c.Generated || !plainTypeMySQL(c.Type, c.Charset) || (c.Results != nil && *c.Results != "utf8mb4")) {
			out.plainMySQL = false
		}
		if c.Name == "id" {
			hasID = true
			if c.Generated {
				return columns{}, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("%s.%s: its id is a generated column", schema, table))
			}
			if !mysql {
				out.types[0] = c.Type
			}
			continue
		}
		out.all = append(out.all, c.Name)
		if !mysql {
			out.types = append(out.types, c.Type)
		}
		if !c.Generated {
			out.write = append(out.write, c.Name)
		}
	}
	if !hasID {
		return columns{}, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("%s.%s has no id column", schema, table))
	}
	return out, nil
}

// byType returns c hashed by its columns' types on PostgreSQL (rowHash):
// integers and text by their own hash functions, the others in the row's
// text. A column is hashed by its type only where on, the same table on
// the other side, has a column of that name of the same kind: the hash is
// one SQL expression for both sides, and hashint8extended takes no
// numeric, nor hashtextextended an integer. On MySQL it returns c.
func (c columns) byType(on columns) columns {
	if c.types == nil {
		return c
	}
	other := map[string]hashKind{}
	for i, name := range on.all {
		if i < len(on.types) {
			other[name] = kindOfPG(on.types[i])
		}
	}
	c.kinds = make([]hashKind, len(c.all))
	for i, t := range c.types {
		if k, ok := other[c.all[i]]; ok && k == kindOfPG(t) {
			c.kinds[i] = k
		}
	}
	return c
}

// kindOfPG is how rowHash can hash a column of PostgreSQL's type t
// (information_schema's data_type).
func kindOfPG(t string) hashKind {
	switch t {
	case "bigint", "integer", "smallint":
		return hashInt
	case "text", "character varying":
		return hashText
	}
	return hashInRecord
}

// hashed returns the columns that c's rows are hashed over, and how.
func (c columns) hashed() hashCols { return hashCols{names: c.all, kinds: c.kinds} }

// bucketSent is what a copy sent of a table, by bucket of keys (id modulo
// compareBuckets), as bucketSums sums a table.
type bucketSent map[int64]sentRows

// add counts a row of key bucket b and hash h.
func (s bucketSent) add(b int64, h uint64) {
	r := s[b]
	r.rows++
	r.sum += h
	s[b] = r
}

// bucketKey is the SQL expression of a row's bucket of keys, as bucketSums
// groups them.
func bucketKey() string { return "MOD(id, " + strconv.Itoa(compareBuckets) + ")" }

// withPgx runs f with the *pgx.Conn under a connection of db's pool, or
// returns errNotPgx when db's driver is not pgx's.
func withPgx(ctx context.Context, db *gorm.DB, f func(*pgx.Conn) error) error {
	pool, err := sqlDB(db)
	if err != nil {
		return err
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNotPgx
		}
		return f(c.Conn())
	})
}

// copyPG pipes COPY TO STDOUT of table on src into COPY FROM STDIN on dc,
// whose transaction the caller holds, in text format, counting rows by
// their line ends (text COPY escapes newlines inside values) and
// reporting them every every rows. freeze writes the rows frozen (COPY's
// FREEZE): dc's transaction must have created or truncated the table. It
// returns the rows copied and what it sent of each bucket of keys (id
// modulo compareBuckets): the rows and the sum of their hashes over
// cols.all (rowHash), for the target to be checked against (verifySent),
// computed by the mover from each row as it passes (copyRowHasher), or,
// when the table has generated columns, which the copy does not send, by
// the source in front of the row's columns, cut off before they go on.
// The source is read in one statement, and so one snapshot.
func copyPG(ctx context.Context, src *gorm.DB, dc *pgx.Conn, table string, cols columns, freeze bool, every int, progress func(int64)) (int64, bucketSent, error) {
	list := columnList(src, cols.write)
	sum := &bucketSummer{sent: bucketSent{}}
	q := "COPY (SELECT " + list + " FROM " + table + ") TO STDOUT"
	if slices.Equal(cols.all, cols.write) {
		sum.hasher = &copyRowHasher{kinds: cols.kinds}
	} else {
		q = "COPY (SELECT " + bucketKey() + ", " + rowHash(src, cols.hashed()) + ", " + list + " FROM " + table + ") TO STDOUT"
	}
	into := "COPY " + table + " (" + list + ") FROM STDIN"
	if freeze {
		into += " WITH (FREEZE)"
	}
	var tag pgconn.CommandTag
	err := withPgx(ctx, src, func(sc *pgx.Conn) error {
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			// In a transaction that prints values as the target's reads
			// them (hashSettingsPG, moverSettingsPG): a date in one
			// DateStyle must not be parsed in another.
			stx, err := sc.Begin(ctx)
			if err == nil {
				_, err = stx.Exec(ctx, hashSettingsPG)
				if err == nil {
					// Buffered: COPY TO writes a message per row, and
					// COPY FROM sends a message per read.
					bw := &rowBuffer{w: pw, every: max(every, 1)}
					sum.w = bw
					if _, err = sc.PgConn().CopyTo(ctx, sum, q); err == nil {
						err = sum.close()
					}
					if err == nil {
						err = bw.Flush()
					}
				}
				_ = stx.Rollback(context.WithoutCancel(ctx))
			}
			pw.CloseWithError(err) // nil: EOF
			done <- err
		}()
		cr := &lineCounter{r: pr, progress: progress, every: int64(max(every, 1)), next: int64(max(every, 1))}
		var err error
		tag, err = dc.PgConn().CopyFrom(ctx, cr, into)
		cr.stop()
		pr.CloseWithError(io.ErrClosedPipe) // unblock the reader side if we stopped early
		if rerr := <-done; rerr != nil && (err == nil || errors.Is(err, io.ErrClosedPipe)) {
			err = rerr
		}
		if err == nil && tag.RowsAffected() != sum.rows {
			err = fmt.Errorf("COPY wrote %d rows of %d sent", tag.RowsAffected(), sum.rows)
		}
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("shardid: copying %s: %w", table, err)
	}
	if progress != nil {
		progress(tag.RowsAffected())
	}
	return tag.RowsAffected(), sum.sent, nil
}

// bucketSummer is the io.Writer that COPY TO STDOUT writes a copy's rows
// to, each as "bucket\thash\tcolumns...\n", or, with a hasher, as
// "columns...\n" (the hasher computes both from the columns): it adds the
// row up in sent and passes its columns on to w, a row a write.
type bucketSummer struct {
	w       io.Writer
	sent    bucketSent
	rows    int64
	partial []byte
	hasher  *copyRowHasher
}

func (s *bucketSummer) Write(p []byte) (int, error) {
	if err := eachLine(&s.partial, p, s.line); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (s *bucketSummer) line(l []byte) error {
	if s.hasher != nil {
		id, h, err := s.hasher.hash(l)
		if err != nil {
			return err
		}
		s.sent.add(id%compareBuckets, h)
		s.rows++
		_, err = s.w.Write(l)
		return err
	}
	b, h, data, err := cutKeyHash(l, "bucket")
	if err != nil {
		return err
	}
	s.sent.add(b, h)
	s.rows++
	_, err = s.w.Write(data)
	return err
}

// close fails if the source's output ended inside a row.
func (s *bucketSummer) close() error {
	if len(s.partial) > 0 {
		return fmt.Errorf("shardid: a copy ended in the middle of a row: %.60q", s.partial)
	}
	return nil
}

// rowBuffer gathers the rows that COPY TO writes (a write per row) and
// passes them on every every rows, or 256 KiB: COPY FROM sends a message
// per read, and progress is reported as rows arrive.
type rowBuffer struct {
	w     io.Writer
	buf   []byte
	rows  int
	every int
}

func (b *rowBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if b.rows++; b.rows >= b.every || len(b.buf) >= 256<<10 {
		if err := b.Flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush passes on what is gathered.
func (b *rowBuffer) Flush() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.w.Write(b.buf)
	b.buf, b.rows = b.buf[:0], 0
	return err
}

// lineCounter counts the lines read through it and reports them every
// every lines. pgx reads it on a goroutine of its own: the reports are
// serialized with stop, after which there are none, so that the move's
// callbacks are never called at once.
type lineCounter struct {
	r           io.Reader
	lines, next int64
	every       int64
	progress    func(int64)

	mu      sync.Mutex
	stopped bool
}

// stop ends the reports; when it returns, the last one has returned.
func (c *lineCounter) stop() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
}

func (c *lineCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.progress != nil {
		c.lines += int64(bytes.Count(p[:n], []byte{'\n'}))
		if c.lines >= c.next {
			c.mu.Lock()
			if !c.stopped {
				c.progress(c.lines)
			}
			c.mu.Unlock()
			c.next = c.lines + c.every
		}
	}
	return n, err
}

// copyBatches copies table from src to dst in key order, batch rows per
// multi-row INSERT, reading the next batch while it writes one, each row
// read with its bucket and hash, which it adds up as copyPG does. Each side
// keeps one session for the whole copy; a read is a transaction of its own
// (no snapshot held across the copy), and the writes commit every
// copyCommitRows rows. On MySQL each transaction passes the fence of the
// schema named fence (if not ""), the target's, once (passFenceMySQL), not
// once for each row.
func copyBatches(ctx context.Context, src, dst *gorm.DB, hold fenceHold, fence, table string, columns columns, batch int, progress func(int64)) (int64, bucketSent, error) {
	cols := columns.write
	// The rows' hashes computed by the mover from the values it reads
	// (mysqlRowHash), where every column reads as the server prints it;
	// by the source otherwise, read after the row's columns.
	moverHashes := columns.plainMySQL
	extra := 2
	if moverHashes {
		extra = 0
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type read struct {
		rows [][]any
		err  error
	}
	batches := make(chan read, 1)
	var reader sync.WaitGroup
	defer func() {
		cancel() // the reader stops at its next send, if it has not
		reader.Wait()
	}()
	reader.Add(1)
	go func() {
		defer reader.Done()
		defer close(batches)
		sel := "SELECT " + columnList(src, cols) + ", " + bucketKey() + ", " + rowHash(src, columns.hashed()) + " FROM " + table
		if moverHashes {
			sel = "SELECT " + columnList(src, cols) + " FROM " + table
		}
		order := " ORDER BY id LIMIT " + strconv.Itoa(batch)
		err := readConn(ctx, src, func(conn *sql.Conn, settings string) error {
			var after any // none yet: the first batch has no lower bound
			for {
				q, args := sel+order, []any(nil)
				if after != nil {
					q, args = sel+" WHERE id > "+placeholders(src, 0, 1)+order, []any{after}
				}
				// Read and written in sessions set up alike (readConn,
				// moverSession): a TIMESTAMP is read and written in the
				// session's time zone.
				var b read
				b.err = txOn(ctx, conn, readCommitted, settings, func(tx *sql.Tx) error {
					rs, err := tx.QueryContext(ctx, q, args...)
					if err != nil {
						return err
					}
					b.rows, err = scanAll(rs, len(cols)+extra)
					return err
				})
				if b.err == nil && len(b.rows) > 0 {
					after, b.err = asInt64(b.rows[len(b.rows)-1][0])
				}
				select {
				case batches <- b:
				case <-ctx.Done():
					return nil
				}
				if b.err != nil || len(b.rows) == 0 {
					return nil
				}
			}
		})
		if err != nil {
			select {
			case batches <- read{err: err}:
			case <-ctx.Done():
			}
		}
	}()
	var copied int64 // committed
	// What was sent: if a write fails, the copy does. Without a hash of
	// every row (a value the mover cannot hash as the server would), the
	// copy cannot check itself: it returns none, and the move compares
	// both sides.
	sent := bucketSent{}
	hashed := true
	var buf []byte
	err := moverSession(ctx, dst, func(conn *sql.Conn, settings string) error {
		var tx *sql.Tx
		defer func() {
			if tx != nil {
				_ = tx.Rollback()
			}
		}()
		var inTx int64
		commit := func() error {
			err := tx.Commit()
			tx = nil
			if err != nil {
				return fmt.Errorf("shardid: writing %s: %w", table, err)
			}
			copied += inTx
			inTx = 0

			if fence != "" && dst.Dialector.Name() == "mysql" {
				// The pass held for that transaction only: the next one
				// passes the fence again.
				if _, err := conn.ExecContext(ctx, "SET @shardid_fence_checked = NULL"); err != nil {
					return err
				}
			}
			return nil
		}
		for b := range batches {
			if b.err != nil {
				return fmt.Errorf("shardid: reading %s: %w", table, b.err)
			}
			if len(b.rows) == 0 {
				break
			}
			// The bucket and the hash, added up and cut off.
			for i, row := range b.rows {
				if moverHashes {
					id, err := asInt64(row[0])
					if err != nil {
						return fmt.Errorf("shardid: reading %s: the id: %w", table, err)
					}
					var h uint64
					var ok bool
					h, buf, ok = mysqlRowHash(row, buf)
					hashed = hashed && ok
					sent.add(id%compareBuckets, h)
					continue
				}
				bucket, err := asInt64(row[len(cols)])
				if err != nil {
					return fmt.Errorf("shardid: reading %s: the bucket: %w", table, err)
				}
				h, err := hashOf(row[len(cols)+1])
				if err != nil {
					return fmt.Errorf("shardid: reading %s: %w", table, err)
				}
				sent.add(bucket, h)
				b.rows[i] = row[:len(cols)]
			}
			if tx == nil {
				var err error
				if tx, err = conn.BeginTx(ctx, nil); err != nil {
					return fmt.Errorf("shardid: writing %s: %w", table, err)
				}
				if settings != "" {
					if _, err := tx.ExecContext(ctx, settings); err != nil {
						return fmt.Errorf("shardid: writing %s: %w", table, err)
					}
				}
				if err := hold.hold(ctx, tx); err != nil {
					return err
				}
				if fence != "" && dst.Dialector.Name() == "mysql" {
					if err := passFenceMySQL(ctx, tx, fence); err != nil {
						return err
					}
				}
			}
			if err := insertRows(ctx, dst, tx.ExecContext, table, cols, b.rows, false); err != nil {
				return fmt.Errorf("shardid: writing %s: %w", table, err)
			}
			inTx += int64(len(b.rows))
			if progress != nil {
				progress(copied + inTx)
			}
			if inTx >= copyCommitRows {
				if err := commit(); err != nil {
					return err
				}
			}
		}
		if tx != nil {
			return commit()
		}
		return nil
	})
	if !hashed {
		sent = nil
	}
	if err != nil {
		return copied, sent, err
	}
	return copied, sent, ctx.Err()
}

// copyCommitRows is how many rows copyBatches writes per transaction: few
// enough commits that their flushes cost little beside the rows, and a
// transaction small enough for the target's undo log.
const copyCommitRows = 20000

// asInt64 converts a scanned id to int64.
func asInt64(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case []byte:
		return strconv.ParseInt(string(x), 10, 64)
	case string:
		return strconv.ParseInt(x, 10, 64)
	case uint64:
		return int64(x), nil
	case int32:
		return int64(x), nil
	}
	return 0, fmt.Errorf("an id of type %T", v)
}

// execer is what insertRows writes through: a pool or a transaction.
type execFunc func(ctx context.Context, q string, args ...any) (sql.Result, error)
