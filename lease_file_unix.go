//go:build unix

package shardid

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on f without waiting. The lock goes away
// with the process.
func lockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
