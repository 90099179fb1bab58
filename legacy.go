package shardid

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// ErrInvalidID is the error for an ID that is neither an ID of the router's
// layout, issued since the database adopted shardid, nor a legacy ID that a
// LegacyIDs recorded: looking it up on the shard its bits would name could
// only find a wrong row, so it is looked up nowhere.
var ErrInvalidID = errors.New("shardid: invalid ID: neither a legacy ID nor one of the layout")

// ErrNoLegacyRow is the error for a legacy ID that LegacyIDs has no row of:
// an ID the old sequence skipped, or whose row was deleted before the
// legacy IDs were recorded. Router.Get reports it as gorm.ErrRecordNotFound
// too.
var ErrNoLegacyRow = errors.New("shardid: no row has this legacy ID")

// ErrAmbiguousLegacyID is the error of ForID for a legacy ID that two
// tables recorded on different shards: the old sequences of two tables
// both issued it. Router.Get, which knows the table, and ForTableID find
// the row.
var ErrAmbiguousLegacyID = errors.New("shardid: legacy ID is in several tables, on different shards: name the table")

// legacyChunkBits is the number of low ID bits indexed within one chunk of
// a legacy table: a chunk holds the shards of 65,536 consecutive IDs in
// 128 KiB.
const legacyChunkBits = 16

// LegacyIDs records where the rows of a database that adopted shardid live
// when their IDs were issued before it did: by bigserial or AUTO_INCREMENT,
// so that their bits name no shard. A split out of that database (package
// reshard) puts each such row in the shard of its sharding key; LegacyIDs
// keeps, for each table, the shard of every legacy ID, so that Router.Get,
// ForID and ForTableID still find the row forever.
//
// An ID is legacy when it is at most the largest ID recorded. An ID at
// least Floor, the first ID the layout gives at the time of adoption, is
// an ID of the layout and names its shard. An ID between the two is
// neither, and is refused with ErrInvalidID.
//
// It costs two bytes per ID between a table's smallest and largest legacy
// ID, in chunks of 65,536 IDs: 2 MiB for a million rows numbered densely.
// Build it with Add (or decode a recorded one with UnmarshalBinary), then
// give it to RouterConfig.Legacy; it must not change once a router has it.
type LegacyIDs struct {
	floor  ID
	max    ID
	tables map[string]*legacyTable
}

// legacyTable holds the shards of one table's legacy IDs: chunk c holds
// the IDs c<<legacyChunkBits to (c+1)<<legacyChunkBits - 1, each as its
// shard + 1 (0: no row).
type legacyTable struct {
	chunks map[int64]*[1 << legacyChunkBits]uint16
	max    ID
	rows   int
}

// NewLegacyIDs returns an empty record for a database that adopted layout l
// at time adopted: every ID l gives from then on is at least
// l's ID of that time.
func NewLegacyIDs(l Layout, adopted time.Time) (*LegacyIDs, error) {
	if l.unit == 0 {
		return nil, withDetail(ErrInvalidLayout, "the zero Layout")
	}
	floor, err := l.Compose(Parts{Time: adopted})
	if err != nil {
		return nil, err
	}
	return &LegacyIDs{floor: floor, tables: map[string]*legacyTable{}}, nil
}

// Add records that the row of table with legacy ID id lives in logical
// shard shard. It fails with ErrRange for an ID that is not below Floor
// (not legacy), and with ErrShardRange for a shard outside [0, 8191].
// Adding an ID twice with different shards fails with ErrAmbiguousLegacyID.
func (x *LegacyIDs) Add(table string, id ID, shard int) error {
	switch {
	case id <= 0 || id >= x.floor:
		return withDetail(ErrRange, fmt.Sprintf("legacy ID %d of %s: want an ID in [1, %d), below the first ID of the layout at adoption", int64(id), table, int64(x.floor)))
	case shard < 0 || shard >= 1<<13:
		return withDetail(ErrShardRange, fmt.Sprintf("shard %d of legacy ID %d of %s", shard, int64(id), table))
	case table == "":
		return withDetail(ErrInvalidConfig, "legacy ID with no table")
	}
	t := x.tables[table]
	if t == nil {
		t = &legacyTable{chunks: map[int64]*[1 << legacyChunkBits]uint16{}}
		x.tables[table] = t
	}
	c := t.chunks[int64(id)>>legacyChunkBits]
	if c == nil {
		c = new([1 << legacyChunkBits]uint16)
		t.chunks[int64(id)>>legacyChunkBits] = c
	}
	slot := &c[int64(id)&(1<<legacyChunkBits-1)]
	switch *slot {
	case 0:
		*slot = uint16(shard + 1)
		t.rows++
	case uint16(shard + 1):
	default:
		return withDetail(ErrAmbiguousLegacyID, fmt.Sprintf("%s ID %d recorded on shard %d and on shard %d", table, int64(id), *slot-1, shard))
	}
	t.max = max(t.max, id)
	x.max = max(x.max, id)
	return nil
}

// Floor returns the first ID of the layout at the time of adoption: IDs at
// least Floor are the layout's.
func (x *LegacyIDs) Floor() ID { return x.floor }

// Max returns the largest legacy ID recorded, of any table.
func (x *LegacyIDs) Max() ID { return x.max }

// Tables returns the names of the tables that have legacy IDs, sorted.
func (x *LegacyIDs) Tables() []string { return slices.Sorted(maps.Keys(x.tables)) }

// Rows returns the number of legacy IDs recorded for table.
func (x *LegacyIDs) Rows(table string) int {
	if t := x.tables[table]; t != nil {
		return t.rows
	}
	return 0
}

// IsLegacy reports whether id is in the legacy range: at most Max.
func (x *LegacyIDs) IsLegacy(id ID) bool { return id > 0 && id <= x.max }

// Shard returns the logical shard of the row of table whose legacy ID is
// id. ok is false when id is not legacy (it is then the layout's, or
// invalid). The error is ErrNoLegacyRow for a legacy ID with no row in
// table, and ErrInvalidID for an ID between Max and Floor, or a table with
// no legacy IDs.
func (x *LegacyIDs) Shard(table string, id ID) (shard int, ok bool, err error) {
	if id >= x.floor {
		return 0, false, nil
	}
	if id <= 0 || id > x.max {
		return -1, false, x.invalid(id)
	}
	t := x.tables[table]
	if t == nil {
		return -1, true, withDetail(ErrInvalidID, fmt.Sprintf("ID %d is legacy (at most %d), and no legacy IDs were recorded for table %s (recorded: %v)",
			int64(id), int64(x.max), table, x.Tables()))
	}
	if s := t.lookup(id); s >= 0 {
		return s, true, nil
	}
	return -1, true, withDetail(ErrNoLegacyRow, table+" "+strconv.FormatInt(int64(id), 10))
}

// ShardOfAny returns the shard of legacy ID id in whichever table recorded
// it: ErrAmbiguousLegacyID when tables put it on different shards, and
// ErrNoLegacyRow when none has it.
func (x *LegacyIDs) ShardOfAny(id ID) (shard int, ok bool, err error) {
	if id >= x.floor {
		return 0, false, nil
	}
	if id <= 0 || id > x.max {
		return -1, false, x.invalid(id)
	}
	shard = -1
	var where []string
	for _, name := range x.Tables() {
		s := x.tables[name].lookup(id)
		if s < 0 {
			continue
		}
		where = append(where, name+" on shard "+strconv.Itoa(s))
		if shard >= 0 && s != shard {
			return -1, true, withDetail(ErrAmbiguousLegacyID, fmt.Sprintf("ID %d: %v: use Router.Get or ForTableID", int64(id), where))
		}
		shard = s
	}
	if shard < 0 {
		return -1, true, withDetail(ErrNoLegacyRow, "no table has ID "+strconv.FormatInt(int64(id), 10))
	}
	return shard, true, nil
}

// ShardOfKey is ShardOfAny for a sharding key that is another row's ID
// (an ID or NullID, or a pointer to one) below the layout's IDs: the
// shard that row was recorded on, or ErrInvalidID for an ID that is
// neither legacy nor the layout's. ok is false for any other key (of
// another type, NULL, or an ID of the layout's), which routes as KeyShard
// says. The routers (Router.ShardOfKey and ForKeyOf, and those of
// shardsql and shardpgx) route keys through it when they have a record.
func (x *LegacyIDs) ShardOfKey(key any) (shard int, ok bool, err error) {
	id, isID := idOfKey(key)
	if !isID || id <= 0 || id >= x.floor {
		return 0, false, nil
	}
	shard, _, err = x.ShardOfAny(id)
	return shard, true, err
}

func (x *LegacyIDs) invalid(id ID) error {
	return withDetail(ErrInvalidID, fmt.Sprintf("ID %d: legacy IDs are at most %d, the layout's at least %d", int64(id), int64(x.max), int64(x.floor)))
}

// lookup returns the shard of id, or -1.
func (t *legacyTable) lookup(id ID) int {
	c := t.chunks[int64(id)>>legacyChunkBits]
	if c == nil {
		return -1
	}
	return int(c[int64(id)&(1<<legacyChunkBits-1)]) - 1
}

// legacyMagic begins the binary form of a LegacyIDs.
const legacyMagic = "shardid-legacy-1\n"

// MarshalBinary encodes x, for a catalog to keep (see package reshard).
func (x *LegacyIDs) MarshalBinary() ([]byte, error) {
	b := []byte(legacyMagic)
	b = binary.AppendUvarint(b, uint64(x.floor))
	b = binary.AppendUvarint(b, uint64(x.max))
	b = binary.AppendUvarint(b, uint64(len(x.tables)))
	for _, name := range x.Tables() {
		t := x.tables[name]
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		keys := slices.Sorted(maps.Keys(t.chunks))
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = binary.AppendUvarint(b, uint64(k))
			// Runs of empty slots are common (deleted rows, the start of
			// the first chunk): a slot is its value, and a zero is
			// followed by the length of its run.
			c := t.chunks[k]
			for i := 0; i < len(c); {
				if c[i] != 0 {
					b = binary.AppendUvarint(b, uint64(c[i]))
					i++
					continue
				}
				j := i
				for j < len(c) && c[j] == 0 {
					j++
				}
				b = binary.AppendUvarint(b, 0)
				b = binary.AppendUvarint(b, uint64(j-i))
				i = j
			}
		}
	}
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary encoded into x, replacing its
// contents. A corrupt encoding fails with ErrSyntax.
func (x *LegacyIDs) UnmarshalBinary(data []byte) error {
	bad := func(what string) error { return withDetail(ErrSyntax, "legacy IDs: "+what) }
	if len(data) < len(legacyMagic) || string(data[:len(legacyMagic)]) != legacyMagic {
		return bad("not an encoding of LegacyIDs")
	}
	p := data[len(legacyMagic):]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	floor, ok1 := next()
	maxID, ok2 := next()
	n, ok3 := next()
	if !ok1 || !ok2 || !ok3 || floor > 1<<63-1 || maxID >= floor || n > uint64(len(p)) {
		return bad("corrupt header")
	}
	// No capacity from n: a crafted count would allocate in its proportion.
	out := LegacyIDs{floor: ID(floor), tables: map[string]*legacyTable{}}
	for range n {
		l, ok := next()
		if !ok || l == 0 || l > uint64(len(p)) {
			return bad("corrupt table name")
		}
		name := string(p[:l])
		p = p[l:]
		chunks, ok := next()
		if !ok || chunks > uint64(len(p)) {
			return bad("corrupt chunk count of " + name)
		}
		for range chunks {
			k, ok := next()
			if !ok || k > (1<<63-1)>>legacyChunkBits {
				return bad("corrupt chunk of " + name)
			}
			for i := 0; i < 1<<legacyChunkBits; {
				v, ok := next()
				if !ok {
					return bad("truncated chunk of " + name)
				}
				if v == 0 {
					run, ok := next()
					if !ok || run == 0 || run > uint64(1<<legacyChunkBits-i) {
						return bad("corrupt run in " + name)
					}
					i += int(run)
					continue
				}
				if v > 1<<13 {
					return bad("shard out of range in " + name)
				}
				if err := out.Add(name, ID(int64(k)<<legacyChunkBits|int64(i)), int(v-1)); err != nil {
					return bad(err.Error())
				}
				i++
			}
		}
	}
	if len(p) != 0 || out.max != ID(maxID) {
		return bad("trailing data or a wrong maximum")
	}
	*x = out
	return nil
}
