package shardid

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// These errors can be returned by GatherPage.
var (
	// ErrPageToken is returned when a page token is not one GatherPage
	// made for these PageOptions: altered, truncated, made with another
	// Secret, Column or direction.
	ErrPageToken = fmt.Errorf("shardid: invalid page token")

	// ErrPageQuery is returned when the query of GatherPage does not read
	// the page it is given: it ignores the keyset GatherPage put on its
	// *gorm.DB (Raw SQL does), or orders by something else first.
	ErrPageQuery = fmt.Errorf("shardid: the query does not read the page's keyset")
)

// MaxPageSize is the largest PageOptions.Size.
const MaxPageSize = 10000

// PageOptions configures GatherPage.
type PageOptions struct {
	// Size is the number of rows per page. If 0, it is 20. It must be at
	// most MaxPageSize.
	Size int

	// Desc pages in descending ID order, newest first. The default is
	// ascending.
	Desc bool

	// Token continues from the page that returned it as Page.Next; "" reads
	// the first page.
	Token string

	// Column is the ID column the keyset filters and orders by. If "", it
	// is "id"; qualify it ("photos.id") when the query joins.
	Column string

	// Secret, if not empty, signs tokens with HMAC-SHA256: a token can
	// then neither be altered nor made without it. Without it, tokens carry
	// a SHA-256 checksum, which refuses any altered token but not one made
	// by someone who knows the format. A token only says where to continue:
	// it never widens what query may read.
	Secret []byte

	// Workers is how many statements run at once. If 0, it is 8.
	Workers int

	// PerShard runs the query once per logical shard, as
	// GatherOptions.PerShard does, except that a database's shared tables
	// (the shards it holds without a schema of their own) are read once:
	// the query cannot tell their shards' rows apart.
	PerShard bool
}

// Page is one page of GatherPage.
type Page[T any] struct {
	// Rows are the page's rows, in ID order.
	Rows []T
	// Next is the token of the next page, or "" after the last page or
	// when the page failed (read the same token again).
	Next string
}

// GatherPage reads one page of rows across all logical shards, in ID
// order: the first page when opts.Token is "", else the page after the
// one that returned opts.Token.
//
// query gets a *gorm.DB on which GatherPage has put the page's keyset:
// WHERE id > cursor (id < cursor with Desc), ORDER BY id, LIMIT Size+1. It
// adds its filter and reads the rows into a slice:
//
//	func(ctx context.Context, db *gorm.DB) ([]Photo, error) {
//		var ps []Photo
//		return ps, db.Where("user_id = ?", uid).Find(&ps).Error
//	}
//
// It runs as Gather runs it: one statement per database (one arm per
// shard, each using the ID's index) on PostgreSQL and MySQL with a
// SchemaPattern. A page costs the same at any depth (a keyset, never
// OFFSET). Paging is stable under concurrent writes: each row shows up
// once, and none that was there when the first page was read is skipped,
// also when its shard moves to another database between two pages, since
// the cursor is an ID, not a position. Rows added later appear when their
// ID falls in a page still to come (for newest-first paging, IDs are time
// ordered: they are before the first page).
//
// Raw SQL ignores the keyset: a statement run as a union that lacks the
// keyset's ORDER BY is refused with ErrPageQuery, and so is a result with
// a row outside the page, and a statement that does not end with the
// page's LIMIT (a query that sets its own Limit or Offset would read a part
// of each shard's page, and the page would skip the rest). When a shard fails, the page has the rows of the
// others and the error, as Gather's, and no Next: continuing would skip the
// failed shards' rows; read the same token again.
func GatherPage[T any](ctx context.Context, r *Router, opts PageOptions, id func(T) ID,
	query func(ctx context.Context, db *gorm.DB) ([]T, error)) (Page[T], error) {
	defer r.gathered(time.Now())
	var page Page[T]
	size := opts.Size
	if size == 0 {
		size = 20
	}
	if size < 0 || size > MaxPageSize {
		return page, withDetail(ErrInvalidConfig, fmt.Sprintf("PageOptions.Size %d not in [1, %d]", opts.Size, MaxPageSize))
	}
	column := opts.Column
	if column == "" {
		column = "id"
	}
	if !pageColumn(column) {
		return page, withDetail(ErrInvalidConfig, fmt.Sprintf("PageOptions.Column %q is not a column name", column))
	}
	var (
		cursor ID
		after  bool
	)
	if opts.Token != "" {
		c, err := decodePageToken(opts, column)
		if err != nil {
			return page, err
		}
		cursor, after = c, true
	}
	prep := func(db *gorm.DB) *gorm.DB {
		if after {
			op := " > ?"
			if opts.Desc {
				op = " < ?"
			}
			db = db.Where(db.Statement.Quote(column)+op, cursor)
		}
		return db.Order(clause.OrderByColumn{Column: clause.Column{Name: column}, Desc: opts.Desc}).Limit(size + 1)
	}
	rows, err := fanout(ctx, r, fanOptions{perShard: opts.PerShard, sharedOnce: true, workers: opts.Workers, prep: prep,
		orderBy: column, limit: size + 1}, query)
	sortByID(rows, id, opts.Desc)
	for _, row := range rows {
		if v := id(row); after && (opts.Desc && v >= cursor || !opts.Desc && v <= cursor) {
			return page, withDetail(ErrPageQuery, fmt.Sprintf("row %d is not after the cursor %d: does the query use the *gorm.DB it gets (not Raw)?", v, cursor))
		}
	}
	if len(rows) > size {
		rows = rows[:size]
		if err == nil {
			page.Next = encodePageToken(opts, column, id(rows[size-1]))
		}
	}
	page.Rows = rows
	return page, err
}

// pagePool is the pool of a page's query run on one shard: it refuses a
// statement that does not read the page's LIMIT (pageLimit).
type pagePool struct {
	*routedPool
	limit int
}

// QueryContext implements [gorm.ConnPool].
func (p *pagePool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := pageLimit(query, args, p.limit); err != nil {
		return nil, err
	}
	return p.routedPool.QueryContext(ctx, query, args...)
}

// pageLimit returns nil if want is 0, or if query, run with args, ends
// with LIMIT want and no OFFSET: it reads the page's rows from the start of
// its keyset. A query that sets its own Limit or Offset (or Raw SQL) reads
// a part of it, and the page, which takes the rows of every shard up to
// its size, would skip the rest. Otherwise the error is ErrPageQuery.
func pageLimit(query string, args []any, want int) error {
	if want == 0 {
		return nil
	}
	q := strings.TrimRight(query, " \t\n;")
	i := strings.LastIndex(strings.ToUpper(q), "LIMIT ")
	if i < 0 {
		return withDetail(ErrPageQuery, fmt.Sprintf("the query's SQL has no LIMIT, where the page put LIMIT %d: a query that removes it (Limit(-1)) reads past the page: %s", want, sqlStart(query)))
	}
	f := strings.Fields(q[i+len("LIMIT "):])
	var got any
	switch {
	case len(f) == 0:
	case len(f) > 1 && !strings.EqualFold(f[1], "FOR"):
		return withDetail(ErrPageQuery, fmt.Sprintf("the query reads from an offset (%s): with the page's keyset, that skips rows; filter, and let the token say where to go on", strings.Join(f, " ")))
	case f[0] == "?" && len(args) > 0:
		got = args[len(args)-1] // LIMIT's is the last argument: only FOR, with none, follows it
	case strings.HasPrefix(f[0], "$"):
		if n, err := strconv.Atoi(f[0][1:]); err == nil && n >= 1 && n <= len(args) {
			got = args[n-1]
		}
	default:
		if n, err := strconv.Atoi(f[0]); err == nil {
			got = n
		}
	}
	if v, ok := asInt(got); !ok || v != int64(want) {
		return withDetail(ErrPageQuery, fmt.Sprintf("the query's LIMIT is %v, not the page's %d (Size + 1): a query that sets its own Limit makes pages skip rows; filter, and let PageOptions.Size size the page", got, want))
	}
	return nil
}

// asInt returns v as an int64, if it is an integer.
func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case int32:
		return int64(x), true
	}
	return 0, false
}

// pageColumn reports whether c is a column name, maybe qualified.
func pageColumn(c string) bool {
	for part := range strings.SplitSeq(c, ".") {
		if !schemaName.MatchString(part) {
			return false
		}
	}
	return true
}

// A page token is base64url (no padding) of: version 1, flags (bit 0:
// descending), the cursor as 8 bytes big-endian, and the first 16 bytes of
// HMAC-SHA256 over those bytes and the column, keyed with the Secret (or
// with a fixed key when there is none).
const pageTokenVersion = 1

// pageTokenKey keys the checksum of tokens made without a Secret.
const pageTokenKey = "shardid page token v1"

func pageMAC(opts PageOptions, column string, payload []byte) []byte {
	key := opts.Secret
	if len(key) == 0 {
		key = []byte(pageTokenKey)
	}
	m := hmac.New(sha256.New, key)
	m.Write(payload)
	m.Write([]byte(column))
	return m.Sum(nil)[:16]
}

func encodePageToken(opts PageOptions, column string, cursor ID) string {
	payload := make([]byte, 10, 26)
	payload[0] = pageTokenVersion
	if opts.Desc {
		payload[1] = 1
	}
	binary.BigEndian.PutUint64(payload[2:], uint64(cursor))
	return base64.RawURLEncoding.EncodeToString(append(payload, pageMAC(opts, column, payload)...))
}

func decodePageToken(opts PageOptions, column string) (ID, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(opts.Token) // Strict: the spare bits of the last character count too
	if err != nil || len(b) != 26 || b[0] != pageTokenVersion {
		return 0, withDetail(ErrPageToken, "not a page token")
	}
	if !hmac.Equal(b[10:], pageMAC(opts, column, b[:10])) {
		return 0, withDetail(ErrPageToken, "altered, or made with another Secret or Column")
	}
	if desc := b[1] == 1; desc != opts.Desc || b[1] > 1 {
		return 0, withDetail(ErrPageToken, "made for the other direction")
	}
	cursor := binary.BigEndian.Uint64(b[2:])
	if cursor > 1<<63-1 {
		return 0, withDetail(ErrPageToken, "cursor out of range")
	}
	return ID(cursor), nil
}
