package routesql

import "fmt"

// Legacy is a record of legacy IDs, as *shardid.LegacyIDs is: the IDs
// below Floor were issued before the database adopted shardid, and the
// record has the shard of each one's row.
type Legacy[ID ~int64] interface {
	comparable
	Floor() ID
	Shard(table string, id ID) (shard int, ok bool, err error)
	ShardOfAny(id ID) (shard int, ok bool, err error)
}

// IDs routes IDs by the rule every router follows: a legacy ID (one below
// the Floor of the router's record of legacy IDs) goes to the shard its
// row was recorded on; any other positive ID to the shard its bits name in
// the router's layout; an ID that is neither is refused.
//
// IDs is safe for concurrent use. Make it with NewIDs.
type IDs struct {
	legacy  legacy // nil without a record
	first   int64  // the first ID routed by its bits: 1, or the record's Floor if more (a record does not change once a router has it)
	invalid error  // shardid.ErrInvalidID
}

// legacy is a record of legacy IDs, with the IDs as int64: IDs is not
// generic, so that its Shard costs a layout ID no more than a comparison.
type legacy interface {
	floor() int64
	shard(table string, id int64) (int, bool, error)
	shardOfAny(id int64) (int, bool, error)
}

// legacyOf is a Legacy as a legacy.
type legacyOf[ID ~int64, L Legacy[ID]] struct{ l L }

func (x legacyOf[ID, L]) floor() int64 { return int64(x.l.Floor()) }
func (x legacyOf[ID, L]) shard(table string, id int64) (int, bool, error) {
	return x.l.Shard(table, ID(id))
}
func (x legacyOf[ID, L]) shardOfAny(id int64) (int, bool, error) { return x.l.ShardOfAny(ID(id)) }

// NewIDs returns the rule for a router with the record l (a nil pointer
// for none) that refuses an ID that is neither legacy nor the layout's with
// an error matching invalid (shardid.ErrInvalidID, which this package
// cannot import).
func NewIDs[ID ~int64, L Legacy[ID]](l L, invalid error) IDs {
	x := IDs{first: 1, invalid: invalid}
	var none L
	if l != none {
		x.legacy = legacyOf[ID, L]{l}
		x.first = max(x.legacy.floor(), 1)
	}
	return x
}

// Shard returns the logical shard of id, in whichever table a legacy ID's
// row was recorded: the record's error (shardid.ErrAmbiguousLegacyID,
// shardid.ErrNoLegacyRow, shardid.ErrInvalidID) when it cannot tell.
// decoded is the shard id's bits name in the router's layout: the caller
// decodes id, so that routing a layout ID costs one comparison.
func (x *IDs) Shard(id int64, decoded int) (int, error) {
	if x.OfLayout(id) {
		return decoded, nil
	}
	return x.belowLayout(true, "", id)
}

// OfLayout reports whether id is routed by its bits: whether Shard and
// TableShard return decoded for it, and no error. It is for a router's hot
// path, which then need not handle an error.
func (x *IDs) OfLayout(id int64) bool { return id >= x.first }

// TableShard is Shard for the row of table whose ID is id: a legacy ID is
// looked up in table alone.
func (x *IDs) TableShard(table string, id int64, decoded int) (int, error) {
	if x.OfLayout(id) {
		return decoded, nil
	}
	return x.belowLayout(false, table, id)
}

// belowLayout is Shard (anyTable) or TableShard for an ID below the
// layout's first, out of line so that those two are inlined: the shard of
// a legacy ID's row, or the refusal of an ID that is not positive.
func (x *IDs) belowLayout(anyTable bool, table string, id int64) (int, error) {
	if x.legacy == nil || id >= x.legacy.floor() {
		return -1, fmt.Errorf("%w: ID %d is not positive", x.invalid, id)
	}
	var s int
	var err error
	if anyTable {
		s, _, err = x.legacy.shardOfAny(id)
	} else {
		s, _, err = x.legacy.shard(table, id)
	}
	return s, err
}
