package reshard

import "testing"

func TestIdentitySame(t *testing.T) {
	base := dbIdentity{key: "1|db|3306|/var/lib/mysql/", started: 1000}
	for _, tc := range []struct {
		name string
		b    dbIdentity
		want bool
	}{
		{"equal", base, true},
		{"start read a second apart", dbIdentity{key: base.key, started: 1001}, true},
		{"started at another time", dbIdentity{key: base.key, started: 1100}, false},
		{"another port", dbIdentity{key: "1|db|3307|/var/lib/mysql/", started: 1000}, false},
		{"another server UUID", dbIdentity{strong: "u2", key: base.key, started: 1000}, true}, // base has none
	} {
		if got := base.same(tc.b); got != tc.want {
			t.Errorf("%s: same(%+v, %+v) = %v, want %v", tc.name, base, tc.b, got, tc.want)
		}
	}
	a, b := dbIdentity{strong: "u1", key: "k"}, dbIdentity{strong: "u2", key: "k"}
	if a.same(b) {
		t.Errorf("same(%+v, %+v) = true: two system identifiers", a, b)
	}
}
