package reshard

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
)

// The mover's side of PostgreSQL's row hash. A move's copy on PostgreSQL
// must send, with each row, the hash that rowHash gives it (a split's,
// hashtextextended(ROW(columns)::text, 0); a move's, its integer and text
// columns each hashed by its type's hash function, the others so): the
// target is checked against those sums (verifySent). Computed by the source, in the COPY's query,
// it costs the source as much CPU as the copy itself (on a table of three
// columns, 0.87 s against 0.36 s for 1,000,000 rows, docs/resharding.md).
// copyRowHasher computes the same hash from the row as COPY printed it, in
// the mover, which reads every byte of it anyway: the line's fields
// unescaped (COPY's text format), written out as record_out writes a row
// (a value quoted when it is empty or holds a quote, a backslash, a
// parenthesis, a comma or a space; a NULL as nothing), and hashed as
// hash_bytes_extended does (Bob Jenkins' lookup3, as PostgreSQL adapted
// it, on a little-endian server). An integer is hashed as hashint8extended
// does (its value, and its high 32 bits), a text's bytes as
// hashtextextended does.
//
// A hash that differs from the server's cannot make a wrong copy pass:
// the target's sums, which its server computes, would differ from what the
// mover sent, and the move compares both sides instead, as it does when
// any sum differs (converge). It would only make the move slower, which
// TestCopyRowHashMatchesTheServer guards against for every kind of value.

// copyRowHasher computes rowHash of rows printed by COPY TO in text
// format, with scratch space kept from one row to the next. kinds are
// rowHash's (hashCols.kinds): nil, the row's text; otherwise each typed
// column's own term, and the row's text of the others.
type copyRowHasher struct {
	kinds    []hashKind
	rec, val []byte
}

// hash returns the id (the first column) and the rowHash of l, one row of
// COPY's text format with or without its "\n", whose columns are rowHash's
// in its order.
func (h *copyRowHasher) hash(l []byte) (id int64, sum uint64, err error) {
	l = bytes.TrimSuffix(l, []byte{'\n'})
	h.rec = append(h.rec[:0], '(')
	inRec, n := 0, 0 // columns in the row's text, and in all
	for i := 0; ; i++ {
		n++
		f, rest, more := bytes.Cut(l, []byte{'\t'})
		if i == 0 {
			var ok bool
			if id, ok = parseInt64(f); !ok {
				return 0, 0, fmt.Errorf("shardid: a copied row whose id is %.30q", f)
			}
		}
		kind := hashInRecord
		if h.kinds != nil {
			if i >= len(h.kinds) {
				return 0, 0, fmt.Errorf("shardid: a copied row of more than its %d columns", len(h.kinds))
			}
			kind = h.kinds[i]
		}
		null := bytes.Equal(f, []byte(`\N`))
		switch kind {
		case hashInRecord:
			if inRec > 0 {
				h.rec = append(h.rec, ',')
			}
			inRec++
			if !null {
				if h.val, err = unescapeCopyText(h.val[:0], f); err != nil {
					return 0, 0, err
				}
				h.rec = appendRecordValue(h.rec, h.val)
			}
		case hashInt:
			seed := uint64(i + 1)
			if null {
				sum ^= seed
				break
			}
			v, ok := parseInt64(f)
			if !ok {
				return 0, 0, fmt.Errorf("shardid: a copied integer %.30q", f)
			}
			sum ^= hashInt8PG(v, seed) ^ hashInt8PG(v>>32, -seed)
		case hashText:
			seed := uint64(i + 1)
			if null {
				sum ^= seed
				break
			}
			if h.val, err = unescapeCopyText(h.val[:0], f); err != nil {
				return 0, 0, err
			}
			sum ^= hashBytesPGSeed(h.val, seed)
		}
		if !more {
			break
		}
		l = rest
	}
	if h.kinds != nil && n != len(h.kinds) {
		return 0, 0, fmt.Errorf("shardid: a copied row of %d columns, not %d", n, len(h.kinds))
	}
	if inRec > 0 || h.kinds == nil {
		h.rec = append(h.rec, ')')
		sum ^= hashBytesPG(h.rec)
	}
	return id, sum, nil
}

// parseInt64 parses f, an integer as PostgreSQL prints one: decimal
// digits after an optional minus sign, within an int64.
func parseInt64(f []byte) (int64, bool) {
	neg := len(f) > 0 && f[0] == '-'
	limit := uint64(1<<63 - 1)
	if neg {
		f = f[1:]
		limit = 1 << 63
	}
	if len(f) == 0 {
		return 0, false
	}
	var u uint64
	for _, c := range f {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if u > (limit-d)/10 {
			return 0, false
		}
		u = u*10 + d
	}
	if neg {
		return int64(-u), true // -(1<<63) wraps to itself: the least int64
	}
	return int64(u), true
}

// unescapeCopyText appends to dst the value that f, a field of COPY's text
// format (not \N), stands for: backslash sequences \b \f \n \r \t \v, octal
// (\1 to \377) and hex (\x1 to \xff) bytes, and a backslash before any other
// byte, which stands for that byte.
func unescapeCopyText(dst, f []byte) ([]byte, error) {
	for {
		i := bytes.IndexByte(f, '\\')
		if i < 0 {
			return append(dst, f...), nil
		}
		dst = append(dst, f[:i]...)
		f = f[i+1:]
		if len(f) == 0 {
			return dst, fmt.Errorf("shardid: a copied value that ends in a backslash")
		}
		c := f[0]
		f = f[1:]
		switch c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'v':
			dst = append(dst, '\v')
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(c - '0')
			for n := 0; n < 2 && len(f) > 0 && f[0] >= '0' && f[0] <= '7'; n++ {
				v = v*8 + int(f[0]-'0')
				f = f[1:]
			}
			dst = append(dst, byte(v))
		case 'x':
			v, n := 0, 0
			for ; n < 2 && len(f) > 0; n++ {
				d, ok := hexDigit(f[0])
				if !ok {
					break
				}
				v = v*16 + d
				f = f[1:]
			}
			if n == 0 {
				dst = append(dst, 'x') // a backslash before x with no digits: x
			} else {
				dst = append(dst, byte(v))
			}
		default:
			dst = append(dst, c)
		}
	}
}

// recordQuoted marks the bytes for which record_out quotes a value.
var recordQuoted = func() (t [256]bool) {
	for _, c := range []byte("\"\\(), \t\n\v\f\r") {
		t[c] = true
	}
	return t
}()

// needsRecordQuotes reports whether v holds a byte that recordQuoted
// marks (a row's hash tests each value: a table lookup).
func needsRecordQuotes(v []byte) bool {
	for _, c := range v {
		if recordQuoted[c] {
			return true
		}
	}
	return false
}

func hexDigit(c byte) (int, bool) {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0'), true
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10, true
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10, true
	}
	return 0, false
}

// appendRecordValue appends v as record_out writes a column's value in a
// row's text: in double quotes if it is empty or holds a double quote, a
// backslash, a parenthesis, a comma or a space (C's isspace), with each
// double quote and backslash doubled.
func appendRecordValue(dst, v []byte) []byte {
	if len(v) > 0 && !needsRecordQuotes(v) {
		return append(dst, v...)
	}
	dst = append(dst, '"')
	for _, c := range v {
		if c == '"' || c == '\\' {
			dst = append(dst, c)
		}
		dst = append(dst, c)
	}
	return append(dst, '"')
}

// hashBytesPG is PostgreSQL's hash_bytes_extended(k, len(k), 0), what
// hashtextextended(text, 0) hashes a text with, on a little-endian server:
// Bob Jenkins' lookup3 over 12-byte blocks, the result b<<32 | c.
func hashBytesPG(k []byte) uint64 { return hashBytesPGSeed(k, 0) }

// hashBytesPGSeed is hash_bytes_extended(k, len(k), seed): a seed other
// than 0 perturbs the starting state, as if it were 8 more bytes of the key
// mixed in first.
func hashBytesPGSeed(k []byte, seed uint64) uint64 {
	a := 0x9e3779b9 + uint32(len(k)) + 3923095
	b, c := a, a
	if seed != 0 {
		a += uint32(seed >> 32)
		b += uint32(seed)
		a, b, c = lookup3Mix(a, b, c)
	}
	for len(k) >= 12 {
		a += binary.LittleEndian.Uint32(k)
		b += binary.LittleEndian.Uint32(k[4:])
		c += binary.LittleEndian.Uint32(k[8:])
		a, b, c = lookup3Mix(a, b, c)
		k = k[12:]
	}
	// The last 0 to 11 bytes, little-endian into a, b and then c, whose
	// lowest byte is left out (lookup3 reserves it for the length).
	var tail [12]byte
	copy(tail[:], k)
	switch n := len(k); {
	case n > 8:
		c += binary.LittleEndian.Uint32(tail[8:]) << 8
		fallthrough
	case n > 4:
		b += binary.LittleEndian.Uint32(tail[4:])
		fallthrough
	case n > 0:
		a += binary.LittleEndian.Uint32(tail[:])
	}
	_, b, c = lookup3Final(a, b, c)
	return uint64(b)<<32 | uint64(c)
}

// hashInt8PG is hashint8extended(v, seed): the two halves of v folded into
// one word (the high one inverted for a negative v, so that a value hashes
// alike as an int4 and an int8), hashed as hash_uint32_extended does.
func hashInt8PG(v int64, seed uint64) uint64 {
	lo, hi := uint32(v), uint32(v>>32)
	if v >= 0 {
		lo ^= hi
	} else {
		lo ^= ^hi
	}
	a := uint32(0x9e3779b9 + 4 + 3923095)
	b, c := a, a
	if seed != 0 {
		a += uint32(seed >> 32)
		b += uint32(seed)
		a, b, c = lookup3Mix(a, b, c)
	}
	a += lo
	_, b, c = lookup3Final(a, b, c)
	return uint64(b)<<32 | uint64(c)
}

func lookup3Mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func lookup3Final(a, b, c uint32) (uint32, uint32, uint32) {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return a, b, c
}
