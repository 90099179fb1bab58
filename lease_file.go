package shardid

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FileLeaseStore guards one worker id with a local state file, for
// deployments without a shared database: the file holds the last unit the
// generator may have used, so that a restart with the clock set back does
// not repeat IDs. The process holds an exclusive lock on the file while it
// uses the worker id (on Unix), so a second process on the same file gets
// ErrNoFreeWorker.
//
// It guards one worker id, LeaseConfig.Prefer; give each process its own
// file and worker id. Uniqueness across machines is still the deployment's
// part.
type FileLeaseStore struct {
	Path string

	mu sync.Mutex // protects f
	f  *os.File   // open, and locked, while leased
}

// fileRecord is the file's whole content: fixed width, written in place.
const fileRecordFormat = "shardid-state v1 last=%020d\n"

// Claim implements LeaseStore.
func (s *FileLeaseStore) Claim(ctx context.Context, workers, prefer int, owner string, ttl time.Duration) (int, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		return 0, 0, withDetail(ErrNoFreeWorker, s.Path+" is held by this store already")
	}
	f, err := os.OpenFile(s.Path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, 0, err
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return 0, 0, withDetail(ErrNoFreeWorker, s.Path+" is locked by another process")
	}
	b, err := os.ReadFile(s.Path)
	if err != nil {
		f.Close()
		return 0, 0, err
	}
	var last int64
	if len(b) > 0 {
		v, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "shardid-state v1 last=")
		if last, err = strconv.ParseInt(v, 10, 64); !ok || err != nil {
			f.Close()
			return 0, 0, fmt.Errorf("shardid: state file %s is corrupt (%q): refusing to guess its last unit", s.Path, b)
		}
	}
	s.f = f
	return prefer, last, nil
}

// Renew implements LeaseStore: it records promise, durably.
func (s *FileLeaseStore) Renew(ctx context.Context, worker int, owner string, ttl time.Duration, promise int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.write(promise)
}

// Release implements LeaseStore: it records last and unlocks the file.
func (s *FileLeaseStore) Release(ctx context.Context, worker int, owner string, last int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.write(last)
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.f = nil
	return err
}

// write stores last in place and syncs it. It requires that s.mu is held.
func (s *FileLeaseStore) write(last int64) error {
	if s.f == nil {
		return withDetail(ErrLeaseLost, s.Path+" is not held")
	}
	if _, err := s.f.WriteAt([]byte(fmt.Sprintf(fileRecordFormat, last)), 0); err != nil {
		return err
	}
	return s.f.Sync()
}
