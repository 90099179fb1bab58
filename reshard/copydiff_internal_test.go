package reshard

import "testing"

// storedType drops only what stores nothing: a MySQL integer's display
// width, not a ZEROFILL column's (padded to it), nor any other type's
// length, precision or scale.
func TestStoredType(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"int(11)", "int"},
		{"int(10) unsigned", "int unsigned"},
		{"bigint(20)", "bigint"},
		{"tinyint(1)", "tinyint(4)"},
		{"smallint(6)", "smallint"},
		{"mediumint(9)", "mediumint"},
	} {
		if storedType(tc.a) != storedType(tc.b) {
			t.Errorf("%s and %s: %q and %q, want one type", tc.a, tc.b, storedType(tc.a), storedType(tc.b))
		}
	}
	for _, tc := range []struct{ a, b string }{
		{"int(5) unsigned zerofill", "int(10) unsigned zerofill"},
		{"int(11)", "bigint(20)"},
		{"varchar(50)", "varchar(49)"},
		{"decimal(10,2)", "decimal(10,1)"},
		{"numeric(10,2)", "numeric(10,1)"},
		{"datetime(6)", "datetime"},
		{"interval(3)", "interval"},
	} {
		if storedType(tc.a) == storedType(tc.b) {
			t.Errorf("%s and %s: both %q, want them apart", tc.a, tc.b, storedType(tc.a))
		}
	}
}
