package shardid

import (
	"database/sql/driver"
	"fmt"
	"strconv"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// PinterestID is an ID in Pinterest's layout: no time at all, but the shard
// that holds the row, the type of object, and the row's local id (its
// AUTO_INCREMENT in that shard's table):
//
//	 63 62 61            46 45          36 35                     0
//	+-----+----------------+--------------+------------------------+
//	| 0 0 |   16: shard    |   10: type   |     36: local id       |
//	+-----+----------------+--------------+------------------------+
//
// The two reserved bits are zero, so a PinterestID is a positive int64. It is
// stored, scanned and sent in JSON as an ID is.
type PinterestID int64

// ComposePinterest returns the PinterestID of the given parts: shard 0 to
// 65535, typ 0 to 1023 and local 0 to 2^36-1.
func ComposePinterest(shard, typ int, local int64) (PinterestID, error) {
	if shard < 0 || shard >= 1<<16 {
		return 0, withDetail(ErrShardRange, rangeDetail(shard, 1<<16))
	}
	if typ < 0 || typ >= 1<<10 {
		return 0, withDetail(ErrRange, "type "+rangeDetail(typ, 1<<10))
	}
	if local < 0 || local >= 1<<36 {
		return 0, withDetail(ErrSeqRange, "local id "+strconv.FormatInt(local, 10)+" is not in [0, 2^36)")
	}
	return PinterestID(int64(shard)<<46 | int64(typ)<<36 | local), nil
}

// ParsePinterest parses the decimal form of a PinterestID and checks that
// its reserved bits are zero.
func ParsePinterest(s string) (PinterestID, error) {
	id, err := Parse(s)
	if err != nil {
		return 0, err
	}
	p := PinterestID(id)
	return p, p.Validate()
}

// Validate reports an error when p is negative or its reserved bits are set.
func (p PinterestID) Validate() error {
	if p < 0 || p>>62 != 0 {
		return withDetail(ErrRange, fmt.Sprintf("%d has its reserved bits set", int64(p)))
	}
	return nil
}

// Shard returns the shard field.
func (p PinterestID) Shard() int { return int(p >> 46 & (1<<16 - 1)) }

// Type returns the object type field.
func (p PinterestID) Type() int { return int(p >> 36 & (1<<10 - 1)) }

// Local returns the local id field.
func (p PinterestID) Local() int64 { return int64(p) & (1<<36 - 1) }

// String returns the decimal form of p.
func (p PinterestID) String() string { return ID(p).String() }

// MarshalJSON implements the [encoding/json.Marshaler] interface, as
// ID.MarshalJSON does.
func (p PinterestID) MarshalJSON() ([]byte, error) { return ID(p).MarshalJSON() }

// UnmarshalJSON implements the [encoding/json.Unmarshaler] interface, as
// ID.UnmarshalJSON does, and validates the result.
func (p *PinterestID) UnmarshalJSON(b []byte) error {
	if err := (*ID)(p).UnmarshalJSON(b); err != nil {
		return err
	}
	return p.Validate()
}

// Scan implements the [database/sql.Scanner] interface, as ID.Scan does,
// and validates the result.
func (p *PinterestID) Scan(src any) error {
	if err := (*ID)(p).Scan(src); err != nil {
		return err
	}
	return p.Validate()
}

// Value implements the [database/sql/driver.Valuer] interface.
func (p PinterestID) Value() (driver.Value, error) { return int64(p), nil }

// GormDataType returns "shardid_pinterest": not an int, so GORM never
// makes a PinterestID primary key auto-increment (which would number rows
// 1, 2, ... on shard 0, type 0); the plugin fills a zero one or refuses it.
func (PinterestID) GormDataType() string { return "shardid_pinterest" }

// GormDBDataType returns bigint, as ID.GormDBDataType does.
func (PinterestID) GormDBDataType(*gorm.DB, *schema.Field) string { return "bigint" }

// ForPinterestID returns a *gorm.DB for the shard field of id.
func (r *Router) ForPinterestID(id PinterestID) *gorm.DB { return r.ForShard(id.Shard()) }
