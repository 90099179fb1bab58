package shardid

import (
	"database/sql/driver"
	"fmt"
	"math"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// Scan implements the [database/sql.Scanner] interface. It accepts integers
// of every width, []byte and string holding a canonical decimal ID, and nil,
// which sets id to 0. Negative and out-of-range values fail with ErrRange;
// other types with ErrUnsupportedType.
func (id *ID) Scan(src any) error {
	v, null, err := scanInt64(src)
	if err != nil {
		return err
	}
	if null {
		*id = 0
		return nil
	}
	*id = ID(v)
	return nil
}

// scanInt64 converts what a driver hands back into a non-negative int64.
func scanInt64(src any) (v int64, null bool, err error) {
	switch src := src.(type) {
	case int64:
		v = src
	case []byte:
		v, err = parseDigits(src)
		if err != nil {
			return 0, false, parseError(src, err)
		}
	case string:
		v, err = parseDigits(src)
		if err != nil {
			return 0, false, parseError(src, err)
		}
	case nil:
		return 0, true, nil
	case uint64:
		if src > math.MaxInt64 {
			return 0, false, withDetail(ErrRange, fmt.Sprintf("scanning %d", src))
		}
		v = int64(src)
	case int:
		v = int64(src)
	case int32:
		v = int64(src)
	case int16:
		v = int64(src)
	case int8:
		v = int64(src)
	case uint:
		if uint64(src) > math.MaxInt64 {
			return 0, false, withDetail(ErrRange, fmt.Sprintf("scanning %d", src))
		}
		v = int64(src)
	case uint32:
		v = int64(src)
	case uint16:
		v = int64(src)
	case uint8:
		v = int64(src)
	default:
		return 0, false, withDetail(ErrUnsupportedType, fmt.Sprintf("cannot scan %T into an ID", src))
	}
	if v < 0 {
		return 0, false, withDetail(ErrRange, fmt.Sprintf("scanning %d", v))
	}
	return v, false, nil
}

// Value implements the [database/sql/driver.Valuer] interface. It returns id
// as an int64.
func (id ID) Value() (driver.Value, error) { return int64(id), nil }

// GormDataType returns "shardid". Because it is not "int", GORM never treats
// an ID primary key as auto-increment: no bigserial, no AUTO_INCREMENT, and
// the INSERT carries the ID the plugin assigned.
func (ID) GormDataType() string { return "shardid" }

// GormDBDataType returns the column type for an ID: bigint on every
// dialect (INTEGER affinity on SQLite, without becoming a rowid alias).
func (ID) GormDBDataType(*gorm.DB, *schema.Field) string { return "bigint" }
