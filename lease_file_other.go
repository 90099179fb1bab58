//go:build !unix

package shardid

import "os"

// lockFile does nothing where flock is not available: there, two processes
// must not be given the same state file.
func lockFile(*os.File) error { return nil }
