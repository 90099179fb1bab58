package reshard

import "testing"

// SetFollowProbeOnly makes Follows started from now on skip their check of
// server processes, so that a pool that check would catch reaches the
// notification probe, until restore is called.
func SetFollowProbeOnly(t testing.TB) (restore func()) {
	sequential(t)
	probeOnly = true
	return func() { probeOnly = false }
}
