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
// ID 0 is no ID in shardid (the plugin fills a zero ID; a map spells an
// unassigned ID "0"), so a NullID holding 0 is NULL too: Scan and
// UnmarshalJSON make 0 (or "0") NULL, as NullIDOf(0) does, and a NullID
// set by hand to {ID: 0, Valid: true} is written as NULL (Value, JSON),
// prints as NULL, and as a sharding key is no key.
//
// Use the json tag option omitzero, not omitempty, to leave a NULL out of
// JSON: omitempty never omits a struct.
type NullID struct {
	ID    ID
	Valid bool // Valid is true if ID is not NULL
}

// valid reports whether n holds an ID: Valid, and not 0.
func (n NullID) valid() bool { return n.Valid && n.ID != 0 }

// NullIDOf returns a valid NullID holding id, or a NULL one when id is zero.
func NullIDOf(id ID) NullID { return NullID{ID: id, Valid: id != 0} }

// String returns the decimal form of the ID, or "NULL".
func (n NullID) String() string {
	if !n.valid() {
		return "NULL"
	}
	return n.ID.String()
}

// Scan implements the [database/sql.Scanner] interface. It accepts what
// ID.Scan accepts; nil and 0 make n NULL.
func (n *NullID) Scan(src any) error {
	v, _, err := scanInt64(src) // nil reads as 0: NULL either way
	if err != nil {
		return err
	}
	*n = NullIDOf(ID(v))
	return nil
}

// Value implements the [database/sql/driver.Valuer] interface: nil for NULL,
// otherwise the ID as an int64.
func (n NullID) Value() (driver.Value, error) {
	if !n.valid() {
		return nil, nil
	}
	return int64(n.ID), nil
}

// MarshalJSON implements the [encoding/json.Marshaler] interface: null, or
// the ID as a quoted decimal string.
func (n NullID) MarshalJSON() ([]byte, error) {
	if !n.valid() {
		return []byte("null"), nil
	}
	return n.ID.MarshalJSON()
}

// UnmarshalJSON implements the [encoding/json.Unmarshaler] interface: null
// makes n NULL, as 0 and "0" do; a string or integer is decoded as
// ID.UnmarshalJSON does.
func (n *NullID) UnmarshalJSON(b []byte) error {
	v, _, err := unmarshalJSONInt(b) // null reads as 0: NULL either way
	if err != nil {
		return err
	}
	*n = NullIDOf(ID(v))
	return nil
}

// IsZero reports whether n is NULL, for the json tag option omitzero.
func (n NullID) IsZero() bool { return !n.valid() }

// GormDataType returns "shardid", as ID.GormDataType does.
func (NullID) GormDataType() string { return "shardid" }

// GormDBDataType returns bigint, as ID.GormDBDataType does.
func (NullID) GormDBDataType(*gorm.DB, *schema.Field) string { return "bigint" }
