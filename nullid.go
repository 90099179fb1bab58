package shardid

import (
	"database/sql/driver"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// NullID is an ID that may be NULL, for nullable columns such as an optional
// foreign key. SQL NULL and JSON null both map to Valid == false. The zero
// NullID is NULL.
//
// Use the json tag option omitzero, not omitempty, to leave a NULL out of
// JSON: omitempty never omits a struct.
type NullID struct {
	ID    ID
	Valid bool // Valid is true if ID is not NULL
}

// NullIDOf returns a valid NullID holding id, or a NULL one when id is zero.
func NullIDOf(id ID) NullID { return NullID{ID: id, Valid: id != 0} }

// String returns the decimal form of the ID, or "NULL".
func (n NullID) String() string {
	if !n.Valid {
		return "NULL"
	}
	return n.ID.String()
}

// Scan implements the [database/sql.Scanner] interface. It accepts what
// ID.Scan accepts; nil makes n NULL.
func (n *NullID) Scan(src any) error {
	v, null, err := scanInt64(src)
	if err != nil {
		return err
	}
	*n = NullID{ID: ID(v), Valid: !null}
	return nil
}

// Value implements the [database/sql/driver.Valuer] interface: nil for NULL,
// otherwise the ID as an int64.
func (n NullID) Value() (driver.Value, error) {
	if !n.Valid {
		return nil, nil
	}
	return int64(n.ID), nil
}

// MarshalJSON implements the [encoding/json.Marshaler] interface: null, or
// the ID as a quoted decimal string.
func (n NullID) MarshalJSON() ([]byte, error) {
	if !n.Valid {
		return []byte("null"), nil
	}
	return n.ID.MarshalJSON()
}

// UnmarshalJSON implements the [encoding/json.Unmarshaler] interface: null
// makes n NULL; a string or integer is decoded as ID.UnmarshalJSON does.
func (n *NullID) UnmarshalJSON(b []byte) error {
	v, null, err := unmarshalJSONInt(b)
	if err != nil {
		return err
	}
	*n = NullID{ID: ID(v), Valid: !null}
	return nil
}

// IsZero reports whether n is NULL, for the json tag option omitzero.
func (n NullID) IsZero() bool { return !n.Valid }

// GormDataType returns "shardid", as ID.GormDataType does.
func (NullID) GormDataType() string { return "shardid" }

// GormDBDataType returns bigint, as ID.GormDBDataType does.
func (NullID) GormDBDataType(*gorm.DB, *schema.Field) string { return "bigint" }
