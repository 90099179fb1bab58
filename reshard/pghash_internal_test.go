package reshard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/shardid/shardid/internal/testdb"
	"gorm.io/gorm"
)

// copyRowHash must give every row the hash that PostgreSQL's rowHash gives
// it: where it does not, a move's copy no longer verifies itself and
// compares both sides instead (correct, but slower). Every kind of value
// the server prints, with the characters that record_out quotes and that
// COPY escapes, and random text.
func TestCopyRowHashMatchesTheServer(t *testing.T) {
	db := testdb.OpenPostgres(t)
	ctx := context.Background()
	const schema = "shardid_pghash"
	freshSchema(t, db, schema)
	for _, q := range []string{
		`CREATE TYPE ` + schema + `.mood AS ENUM ('ok', 'not ok', 'a,b')`,
		`CREATE TYPE ` + schema + `.pair AS (a text, b int)`,
		`CREATE DOMAIN ` + schema + `.label AS varchar(200)`,
		`CREATE TABLE ` + schema + `.items (id bigint PRIMARY KEY, t text, vc varchar(20), ch char(6), i int, s smallint,
			n numeric(14, 4), f8 float8, f4 float4, b bool, d date, ts timestamp, tz timestamptz, iv interval, tm time,
			by bytea, j json, jb jsonb, u uuid, ip inet, arr text[], ia int[], pt point, bx box, m ` + schema + `.mood,
			p ` + schema + `.pair, money money, tv tsvector, dr daterange, lb ` + schema + `.label, big bigint)`,
		`INSERT INTO ` + schema + `.items VALUES
			(1, 'plain', 'v', 'ab', 1, 2, 3.25, 0.1, 1.5, true, '2026-11-30', '2026-11-30 12:00:00.123456', '2026-11-30 12:00:00+05',
			 '1 day 02:03:04', '12:34:56', '\x00ff10', '{"a": [1, "b c"]}', '{"a": [1, "b c"]}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
			 '10.0.0.1/8', '{"x y","(z)",NULL,""}', '{1,2,3}', '(1.5,2)', '((0,0),(1,1))', 'a,b', '("q""uote", 7)', 12.34, 'a fat cat', '[2026-01-01,2026-02-01)'),
			(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
			 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(-3, '', '', '', 0, 0, -0.0001, '-Infinity', 'NaN', false, 'infinity', '-infinity', '1999-01-08 04:05:06 PST',
			 '-1 year', '00:00:00', '', 'null', '"\\"', '00000000-0000-0000-0000-000000000000', '::1', '{}', '{}', '(0,0)',
			 '((1,1),(1,1))', 'not ok', '(,)', -1, '', 'empty'),
			(4096, E'a\tb\nc\rd\\e"f(g)h,i j\x01k\x7fl', E'\\N', ' x ', -2147483648, -32768, 1e9, 1e-300, 3.4e38, true,
			 '0001-01-01 BC', '2026-01-01', '2026-06-01 00:00:00+00', '1 mon -2 days', '23:59:59.999999', E'\\x5c22', '[]', '{}',
			 'ffffffff-ffff-ffff-ffff-ffffffffffff', '192.168.1.1', ARRAY[E'tab\there', E'back\\slash', 'quo"te', 'NULL'], '{-1}',
			 '(-1,-1e-05)', '((-1,2),(3,-4))', 'ok', '("a b",)', 0, '''quoted'' word:1A', '(,2026-01-01]')`,
	} {
		if err := db.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	// Random text: the characters that matter to record_out and COPY,
	// control characters, spaces of every kind and multi-byte ones.
	rng := rand.New(rand.NewPCG(7, 30))
	alphabet := []string{"a", "Z", "0", " ", "\t", "\n", "\r", "\v", "\f", "\\", `"`, "'", "(", ")", ",", "{", "}", "\x01", "\x1f", "\x7f",
		"é", "\u00a0", "\u0085", "\u2028", "\u3000", "✓", "😀", "N", `\N`}
	for i := range 3000 {
		v := randomText(rng, alphabet)
		big := rng.Int64() >> rng.IntN(64)
		if i%2 == 0 {
			big = -big
		}
		if err := db.Exec("INSERT INTO "+schema+".items (id, t, vc, i, lb, big) VALUES (?, ?, ?, ?, ?, ?)", 10+i*4093, v, fmt.Sprint(i), i, randomText(rng, alphabet), big).Error; err != nil {
			t.Fatal(err)
		}
	}
	text, err := tableColumns(ctx, db, schema, "items")
	if err != nil {
		t.Fatal(err)
	}
	table := quoteTable(db, schema, "items")
	byType := text.byType(text)
	if n := len(byType.kinds) - len(slices.DeleteFunc(slices.Clone(byType.kinds), func(k hashKind) bool { return k != hashInRecord })); n != 7 {
		t.Fatalf("%d columns hashed by their types, want 7 (id, t, vc, i, s, lb, big): %v", n, byType.kinds)
	}
	// In the row's text (a split's hash), and by the columns' types (a
	// move's).
	for _, cols := range []columns{text, byType} {
		t.Run(fmt.Sprintf("typed=%v", cols.kinds != nil), func(t *testing.T) {
			testCopyRowHashMatchesTheServer(t, db, table, cols)
		})
	}
}

func testCopyRowHashMatchesTheServer(t *testing.T, db *gorm.DB, table string, cols columns) {
	ctx := context.Background()
	want, err := bucketSums(ctx, db, table, cols.hashed())
	if err != nil {
		t.Fatal(err)
	}
	server := map[int64]uint64{}
	if err := readSession(ctx, db, func(q querier) error {
		rows, err := q.QueryContext(ctx, "SELECT id, "+rowHash(db, cols.hashed())+" FROM "+table)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, h int64
			if err := rows.Scan(&id, &h); err != nil {
				return err
			}
			server[id] = uint64(h)
		}
		return rows.Err()
	}); err != nil {
		t.Fatal(err)
	}
	// The rows as a move's copy reads them: COPY's text, with the
	// settings of the copy's transaction.
	var out bytes.Buffer
	err = withPgx(ctx, db, func(c *pgx.Conn) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, hashSettingsPG); err != nil {
				return err
			}
			_, err := c.PgConn().CopyTo(ctx, &out, "COPY (SELECT "+columnList(db, cols.all)+" FROM "+table+") TO STDOUT")
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	h := copyRowHasher{kinds: cols.kinds}
	got := bucketSent{}
	seen := 0
	for _, l := range bytes.SplitAfter(out.Bytes(), []byte{'\n'}) {
		if len(l) == 0 {
			continue
		}
		id, sum, err := h.hash(l)
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		seen++
		if w, ok := server[id]; !ok || w != sum {
			t.Errorf("id %d: the mover's hash is %d, the server's %d (ok %v), of the row %q", id, int64(sum), int64(w), ok, l)
		}
		got.add(id%compareBuckets, sum)
	}
	if seen != len(server) || seen < 3004 {
		t.Fatalf("hashed %d rows of %d", seen, len(server))
	}
	for b, w := range want {
		if got[b] != w {
			t.Errorf("bucket %d: the mover's sums %+v, the server's %+v", b, got[b], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d buckets, the server %d", len(got), len(want))
	}

	// A split's copy: each row with its shard in front, its hash from the
	// server (a table with generated columns) or from the mover
	// (copyRouter's hasher), summed by shard alike.
	shards := make([]int, 0, 13)
	for s := -6; s <= 6; s++ {
		shards = append(shards, s)
	}
	routed := func(q string, hasher *copyRowHasher) map[int]*sentRows {
		r := newCopyRouter(shards, func(copyChunkOf) error { return nil }, nil)
		r.hasher = hasher
		err := withPgx(ctx, db, func(c *pgx.Conn) error {
			return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, hashSettingsPG); err != nil {
					return err
				}
				if _, err := c.PgConn().CopyTo(ctx, r, q); err != nil {
					return err
				}
				return r.flushAll()
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if r.total != int64(len(server)) {
			t.Fatalf("routed %d rows of %d", r.total, len(server))
		}
		return r.sent
	}
	list := columnList(db, cols.all)
	byServer := routed("COPY (SELECT MOD(id, 7), "+rowHash(db, cols.hashed())+", "+list+" FROM "+table+") TO STDOUT", nil)
	byMover := routed("COPY (SELECT MOD(id, 7), "+list+" FROM "+table+") TO STDOUT", &copyRowHasher{kinds: cols.kinds})
	for _, s := range shards {
		if *byServer[s] != *byMover[s] {
			t.Errorf("shard %d: the split's copy sent %+v with the server's hashes, %+v with the mover's", s, *byServer[s], *byMover[s])
		}
	}
}

// hashBytesPG is hashtextextended(text, 0) for texts of every length up
// to four of lookup3's 12-byte blocks, of one-byte and multi-byte
// characters.
func TestHashBytesPGMatchesTheServer(t *testing.T) {
	db := testdb.OpenPostgres(t)
	rng := rand.New(rand.NewPCG(1, 2))
	runes := []rune("az09 ,()\\\"\téß€✓😀")
	for n := range 50 {
		var b []byte
		for len(b) < n {
			b = utf8.AppendRune(b, runes[rng.IntN(len(runes))])
		}
		var want int64
		if err := db.Raw("SELECT hashtextextended(?, 0)", string(b)).Scan(&want).Error; err != nil {
			t.Fatal(err)
		}
		if got := hashBytesPG(b); got != uint64(want) {
			t.Errorf("%q (%d bytes): %d, the server %d", b, len(b), int64(got), want)
		}
	}
}

// hashBytesPGSeed and hashInt8PG are hashtextextended and
// hashint8extended with the seeds rowHash gives columns by their place,
// and seeds of every width, for texts of up to two of lookup3's blocks and
// integers of every size and sign.
func TestTypedHashesMatchTheServer(t *testing.T) {
	db := testdb.OpenPostgres(t)
	rng := rand.New(rand.NewPCG(3, 4))
	seeds := []int64{1, 2, 7, 29, 1 << 31, 1<<32 + 5, -1, -1 << 63}
	ints := []int64{0, 1, -1, 2, -2, 1<<31 - 1, -1 << 31, 1 << 32, -1<<32 - 1, 1<<63 - 1, -1 << 63}
	for range 40 {
		v := rng.Int64() >> rng.IntN(64)
		if rng.IntN(2) == 0 {
			v = -v
		}
		ints = append(ints, v)
	}
	runes := []rune("az09 ,()\\\"\téß€✓😀")
	for _, seed := range seeds {
		for n := range 26 {
			var b []byte
			for len(b) < n {
				b = utf8.AppendRune(b, runes[rng.IntN(len(runes))])
			}
			var want int64
			if err := db.Raw(`SELECT hashtextextended(? COLLATE "C", ?)`, string(b), seed).Scan(&want).Error; err != nil {
				t.Fatal(err)
			}
			if got := hashBytesPGSeed(b, uint64(seed)); got != uint64(want) {
				t.Errorf("%q (%d bytes), seed %d: %d, the server %d", b, len(b), seed, int64(got), want)
			}
		}
		for _, v := range ints {
			var want int64
			if err := db.Raw("SELECT hashint8extended(?::int8, ?)", v, seed).Scan(&want).Error; err != nil {
				t.Fatal(err)
			}
			if got := hashInt8PG(v, uint64(seed)); got != uint64(want) {
				t.Errorf("%d, seed %d: %d, the server %d", v, seed, int64(got), want)
			}
			if v == int64(int32(v)) {
				// An int4 column: hashint8extended of its value as an
				// int8, what rowHash asks for.
				var w4 int64
				if err := db.Raw("SELECT hashint8extended(?::int4, ?)", v, seed).Scan(&w4).Error; err != nil {
					t.Fatal(err)
				}
				if w4 != want {
					t.Errorf("%d as an int4, seed %d: %d, as an int8 %d", v, seed, w4, want)
				}
			}
		}
	}
}

// unescapeCopyText reads every escape that COPY's text format has, those
// that COPY TO does not print (octal, hex) too, and refuses a value that
// ends in the middle of one.
func TestUnescapeCopyText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`plain`, "plain"},
		{`a\tb\nc\rd\\e`, "a\tb\nc\rd\\e"},
		{`\b\f\v`, "\b\f\v"},
		{`\101\0612\7`, "A12\a"},
		{`\x41\x4a\xfz\xq`, "AJ\x0fzxq"},
		{`\N`, "N"}, // a NULL is the caller's to see: as a value it is N
		{`\,\"`, `,"`},
	} {
		got, err := unescapeCopyText(nil, []byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("unescapeCopyText(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := unescapeCopyText(nil, []byte(`ends in \`)); err == nil {
		t.Error("a value ending in a backslash: no error")
	}
	var h copyRowHasher
	for _, l := range []string{"", "x\t1\n", "\\N\n", "12a\tb\n"} {
		if _, _, err := h.hash([]byte(l)); err == nil {
			t.Errorf("hash(%q): no error", l)
		}
	}
	// By type: a row of other than its columns, an integer that is not.
	typed := copyRowHasher{kinds: []hashKind{hashInt, hashInt}}
	for _, l := range []string{"1\n", "1\t2\t3\n", "1\tx\n", "1\t99999999999999999999\n"} {
		if _, _, err := typed.hash([]byte(l)); err == nil {
			t.Errorf("by type, hash(%q): no error", l)
		}
	}
	if _, _, err := typed.hash([]byte("1\t\\N\n")); err != nil {
		t.Errorf("by type, a NULL: %v", err)
	}
}

// FuzzCopyRowHash: no line makes the hasher panic, and a row of two
// values, written in COPY's text format, is hashed as the record of those
// values: what COPY escapes is unescaped.
func FuzzCopyRowHash(f *testing.F) {
	f.Add([]byte("abc"), []byte(""), []byte("1\t\\\n"))
	f.Add([]byte("a\tb\nc\\"), []byte(`\N`), []byte("-5\t\\x4\\101\t"))
	f.Fuzz(func(t *testing.T, a, b, l []byte) {
		var h copyRowHasher
		h.hash(l) // any line: an error, never a panic

		line := append([]byte("7\t"), escapeCopyText(a)...)
		line = append(append(line, '\t'), escapeCopyText(b)...)
		id, sum, err := h.hash(append(line, '\n'))
		if err != nil || id != 7 {
			t.Fatalf("hash(%q) = id %d, %v", line, id, err)
		}
		rec := appendRecordValue([]byte("(7,"), a)
		rec = append(appendRecordValue(append(rec, ','), b), ')')
		if want := hashBytesPG(rec); sum != want {
			t.Fatalf("hash(%q) = %d, want the hash of %q", line, sum, rec)
		}

		// By type: the id an integer, a text, b in the row's text.
		typed := copyRowHasher{kinds: []hashKind{hashInt, hashText, hashInRecord}}
		typed.hash(l)
		id, sum, err = typed.hash(append(line, '\n'))
		if err != nil || id != 7 {
			t.Fatalf("by type, hash(%q) = id %d, %v", line, id, err)
		}
		want := hashInt8PG(7, 1) ^ hashInt8PG(0, ^uint64(0)) ^ hashBytesPGSeed(a, 2) ^ hashBytesPG(append(appendRecordValue([]byte("("), b), ')'))
		if sum != want {
			t.Fatalf("by type, hash(%q) = %d, want %d", line, sum, want)
		}
	})
}

// parseInt64 reads what strconv.ParseInt reads in base 10, but for a plus
// sign, which PostgreSQL does not print.
func FuzzParseInt64(f *testing.F) {
	for _, s := range []string{"0", "-0", "7", "-12", "007", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "-9223372036854775809", "99999999999999999999", "", "-", "+1", "1a", " 1", "1e3"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := parseInt64(b)
		want, err := strconv.ParseInt(string(b), 10, 64)
		if len(b) > 0 && b[0] == '+' {
			err = errors.New("a plus sign")
		}
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("parseInt64(%q) = %d, %v; strconv: %d, %v", b, got, ok, want, err)
		}
	})
}

// escapeCopyText writes v as COPY TO writes a value in its text format.
func escapeCopyText(v []byte) []byte {
	var out []byte
	for _, c := range v {
		switch c {
		case '\\':
			out = append(out, '\\', '\\')
		case '\b':
			out = append(out, '\\', 'b')
		case '\f':
			out = append(out, '\\', 'f')
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		case '\v':
			out = append(out, '\\', 'v')
		default:
			out = append(out, c)
		}
	}
	return out
}

// BenchmarkCopyRowHasher: the mover's hash of a row of the move
// benchmark's table (id, user_id, caption) as COPY prints it, in the row's
// text (a split's) and by the columns' types (a move's).
func BenchmarkCopyRowHasher(b *testing.B) {
	line := []byte("1234567890123\t987\tphoto number 1234567890123 with a caption\n")
	for _, c := range []struct {
		name  string
		kinds []hashKind
	}{{"text", nil}, {"typed", []hashKind{hashInt, hashInt, hashText}}} {
		b.Run(c.name, func(b *testing.B) {
			h := copyRowHasher{kinds: c.kinds}
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := h.hash(line); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// byType hashes a column by its type only where the other side's column
// of that name is of the same kind: rowHash is one expression for both.
func TestByTypeKeepsTheKindsBothSidesShare(t *testing.T) {
	src := columns{all: []string{"id", "n", "label", "price", "gone"}, types: []string{"bigint", "integer", "character varying", "numeric", "text"}}
	dst := columns{all: []string{"id", "label", "n", "price"}, types: []string{"bigint", "text", "numeric", "numeric"}}
	got := src.byType(dst).kinds
	want := []hashKind{hashInt, hashInRecord, hashText, hashInRecord, hashInRecord}
	if !slices.Equal(got, want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
	if k := (columns{all: []string{"id"}}).byType(dst).kinds; k != nil {
		t.Errorf("MySQL's columns (no types) got kinds %v", k)
	}
}

// hashint8extended folds a bigint's two halves into one word: values whose
// halves fold alike (1 and 2^32, -1 and 2^32-1, halves swapped) hash alike
// under it. A move's hash of an integer column hashes its high half too,
// so that a target storing one where the source holds the other differs.
func TestTypedHashTellsFoldedBigintsApart(t *testing.T) {
	h := copyRowHasher{kinds: []hashKind{hashInt, hashInt}}
	for _, pair := range [][2]int64{{1, 1 << 32}, {-1, 1<<32 - 1}, {0, 1<<32 + 1}, {0x12345678_1abcdef0, 0x1abcdef0_12345678}} {
		if hashInt8PG(pair[0], 2) != hashInt8PG(pair[1], 2) {
			t.Fatalf("%d and %d: hashint8extended no longer folds them alike; the pair tests nothing", pair[0], pair[1])
		}
		_, a, err := h.hash(fmt.Appendf(nil, "7\t%d\n", pair[0]))
		if err != nil {
			t.Fatal(err)
		}
		_, b, err := h.hash(fmt.Appendf(nil, "7\t%d\n", pair[1]))
		if err != nil {
			t.Fatal(err)
		}
		if a == b {
			t.Errorf("rows (7, %d) and (7, %d) hash alike", pair[0], pair[1])
		}
	}
}
