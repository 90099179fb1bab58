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
// not repeat IDs, and the last claim's token. The process holds an exclusive
// lock on the file while it uses the worker id (on Unix), so a second
// process on the same file, or a second FileLeaseStore on it, gets
// ErrNoFreeWorker. The lease does not expire: it is held until released or
// until the process ends.
//
// It guards one worker id, LeaseConfig.Prefer; give each process its own
// file and worker id. Uniqueness across machines is still the deployment's
// part.
//
// FileLeaseStore is safe for concurrent use; it holds one claim at a time.
type FileLeaseStore struct {
	Path string

	mu    sync.Mutex // protects f, token, last
	f     *os.File   // open, and locked, while leased
	token int64      // the token of the claim held
	last  int64      // the last unit recorded in the file
}

var _ LeaseStore = (*FileLeaseStore)(nil)

// fileRecordFormat is the file's whole content: fixed width, written in
// place. Files of version 1 (without a token) are read as token 0.
const fileRecordFormat = "shardid-state v2 last=%020d token=%020d\n"

// Claim implements LeaseStore. It returns prefer, with the next token.
func (s *FileLeaseStore) Claim(ctx context.Context, workers, prefer int, owner string, ttl time.Duration) (Claim, error) {
	if prefer < 0 || prefer >= workers {
		return Claim{}, withDetail(ErrWorkerRange, rangeDetail(prefer, workers))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		return Claim{}, withDetail(ErrNoFreeWorker, s.Path+" is held by this store already")
	}
	f, err := os.OpenFile(s.Path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return Claim{}, err
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return Claim{}, withDetail(ErrNoFreeWorker, s.Path+" is locked by another process")
	}
	b, err := os.ReadFile(s.Path)
	if err != nil {
		f.Close()
		return Claim{}, err
	}
	last, token, err := parseFileRecord(b)
	if err != nil {
		f.Close()
		return Claim{}, fmt.Errorf("shardid: state file %s is corrupt (%q): refusing to guess its last unit", s.Path, b)
	}
	s.f, s.token, s.last = f, token+1, last
	// The new token is durable before it is used.
	if err := s.write(last); err != nil {
		f.Close()
		s.f = nil
		return Claim{}, err
	}
	return Claim{Worker: prefer, Last: last, Token: s.token}, nil
}

// parseFileRecord reads a state file's content; an empty file is last 0,
// token 0.
func parseFileRecord(b []byte) (last, token int64, err error) {
	if len(b) == 0 {
		return 0, 0, nil
	}
	line := strings.TrimSpace(string(b))
	if v, ok := strings.CutPrefix(line, "shardid-state v1 last="); ok {
		last, err = strconv.ParseInt(v, 10, 64)
		return last, 0, err
	}
	v, ok := strings.CutPrefix(line, "shardid-state v2 last=")
	l, t, ok2 := strings.Cut(v, " token=")
	if !ok || !ok2 {
		return 0, 0, strconv.ErrSyntax
	}
	if last, err = strconv.ParseInt(l, 10, 64); err != nil {
		return 0, 0, err
	}
	if token, err = strconv.ParseInt(t, 10, 64); err != nil {
		return 0, 0, err
	}
	if last < 0 || token < 0 {
		return 0, 0, strconv.ErrRange
	}
	return last, token, nil
}

// Renew implements LeaseStore: it records promise, durably, when it is
// above the last unit recorded.
func (s *FileLeaseStore) Renew(ctx context.Context, c Claim, ttl time.Duration, promise int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.holds(c); err != nil {
		return err
	}
	if promise <= s.last {
		return nil
	}
	return s.write(promise)
}

// Release implements LeaseStore: it records last and unlocks the file.
func (s *FileLeaseStore) Release(ctx context.Context, c Claim, last int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.holds(c); err != nil {
		return err
	}
	err := s.write(last)
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.f = nil
	return err
}

// holds reports whether c is the claim held. It requires that s.mu is held.
func (s *FileLeaseStore) holds(c Claim) error {
	if s.f == nil || c.Token != s.token {
		return withDetail(ErrLeaseLost, fmt.Sprintf("%s is not held with token %d", s.Path, c.Token))
	}
	return nil
}

// write stores last in place, with the token, and syncs it. It requires
// that s.mu is held and the file is open.
func (s *FileLeaseStore) write(last int64) error {
	if _, err := s.f.WriteAt([]byte(fmt.Sprintf(fileRecordFormat, last, s.token)), 0); err != nil {
		return err
	}
	if err := s.f.Sync(); err != nil {
		return err
	}
	s.last = last
	return nil
}
