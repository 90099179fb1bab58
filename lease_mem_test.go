package shardid_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardid/shardid"
)

// memLeaseStore is a LeaseStore in memory that fences with tokens, as the
// real stores do, for tests that need no server. Its leases expire only
// when expire is called. A hook, when set, runs before each Renew and may
// fail it.
type memLeaseStore struct {
	mu      sync.Mutex
	workers map[int]*memLease
	renew   func(ctx context.Context, c shardid.Claim) error // optional
	renews  atomic.Int64                                     // Renew calls
}

type memLease struct {
	owner string
	token int64
	held  bool
	last  int64
}

func (s *memLeaseStore) lease(w int) *memLease {
	if s.workers == nil {
		s.workers = map[int]*memLease{}
	}
	if s.workers[w] == nil {
		s.workers[w] = &memLease{}
	}
	return s.workers[w]
}

func (s *memLeaseStore) Claim(ctx context.Context, workers, prefer int, owner string, ttl time.Duration) (shardid.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	try := func(w int) (shardid.Claim, bool) {
		l := s.lease(w)
		if l.held {
			return shardid.Claim{}, false
		}
		l.held, l.owner = true, owner
		l.token++
		return shardid.Claim{Worker: w, Last: l.last, Token: l.token}, true
	}
	if c, ok := try(prefer); ok {
		return c, nil
	}
	for w := range workers {
		if c, ok := try(w); ok {
			return c, nil
		}
	}
	return shardid.Claim{}, shardid.ErrNoFreeWorker
}

func (s *memLeaseStore) Renew(ctx context.Context, c shardid.Claim, ttl time.Duration, promise int64) error {
	s.renews.Add(1)
	if s.renew != nil {
		if err := s.renew(ctx, c); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lease(c.Worker)
	if l.token != c.Token {
		return shardid.ErrLeaseLost
	}
	// Like the SQL store, it renews an expired lease no one claimed since.
	l.held = true
	l.last = max(l.last, promise)
	return nil
}

func (s *memLeaseStore) Release(ctx context.Context, c shardid.Claim, last int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lease(c.Worker)
	if l.token != c.Token {
		return shardid.ErrLeaseLost
	}
	l.held, l.owner, l.last = false, "", last
	l.token++ // a released claim can be neither renewed nor released again
	return nil
}

// expire lets the lease of worker w run out, as the store's clock would.
func (s *memLeaseStore) expire(w int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lease(w).held = false
}

// state returns worker w's lease as the store has it.
func (s *memLeaseStore) state(w int) memLease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.lease(w)
}

// tinyLayout has two shards, so that a lease costs little to set up.
var tinyLayout, _ = shardid.NewLayout(shardid.LayoutConfig{Name: "tiny",
	Epoch: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), TimeBits: 41, ShardBits: 1, SeqBits: 10})

// A renewal racing Close must never reopen the generator: after Close
// returns, Next fails, and the recorded end covers every ID issued. The
// renewal runs in a loop beside Close, so that Close lands at every point
// of it, including between the closed check and the store of the new
// validity; before the fix, the generator issued IDs after Close in about
// one run in five.
func TestLeaseCloseRacingRenewal(t *testing.T) {
	ctx := context.Background()
	runs, reopened := 1000, 0
	if testing.Short() {
		runs = 200
	}
	for i := range runs {
		store := &memLeaseStore{}
		l, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: store, Layout: tinyLayout, Owner: "same"})
		if err != nil {
			t.Fatal(err)
		}
		var closed atomic.Bool
		done := make(chan struct{})
		go func() {
			defer close(done)
			for !closed.Load() {
				_ = shardid.RenewLease(ctx, l)
			}
		}()
		for range i % 8 {
			runtime.Gosched()
		}
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
		closed.Store(true)
		<-done
		if id, err := l.Generator().Next(1); !errors.Is(err, shardid.ErrLeaseLost) {
			reopened++
			if u := tinyLayout.Decompose(id).Time.Sub(tinyLayout.Epoch()).Milliseconds(); err == nil && u > store.state(l.Worker()).last {
				t.Logf("run %d: after Close, %v in unit %d, past the recorded end %d", i, id, u, store.state(l.Worker()).last)
			}
		}
	}
	if reopened > 0 {
		t.Errorf("in %d of %d runs the generator issued IDs after Close returned", reopened, runs)
	}
}

// Many goroutines closing one lease at once: no panic, one release, and
// every call returns once the generator is stopped.
func TestLeaseConcurrentClose(t *testing.T) {
	ctx := context.Background()
	for range 20 {
		store := &memLeaseStore{}
		l, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: store, Layout: tinyLayout})
		if err != nil {
			t.Fatal(err)
		}
		token := l.Token()
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 32)
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs <- l.Close(ctx)
				if _, err := l.Generator().Next(0); !errors.Is(err, shardid.ErrLeaseLost) {
					t.Errorf("Next after Close returned: %v, want ErrLeaseLost", err)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("Close: %v", err)
			}
		}
		if st := store.state(l.Worker()); st.held || st.token != token+1 {
			t.Errorf("after Close: held %v, token %d; want released once (token %d)", st.held, st.token, token+1)
		}
	}
}

// ctxStore is a store whose calls fail once their context is done, as a
// network store's do.
type ctxStore struct{ shardid.LeaseStore }

func (s *ctxStore) Renew(ctx context.Context, c shardid.Claim, ttl time.Duration, promise int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.LeaseStore.Renew(ctx, c, ttl, promise)
}

func (s *ctxStore) Release(ctx context.Context, c shardid.Claim, last int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.LeaseStore.Release(ctx, c, last)
}

// Close with a done context still stops the generator and says why it
// could not release; a later Close releases, and the one after returns nil.
func TestLeaseCloseRetriesRelease(t *testing.T) {
	mem := &memLeaseStore{}
	l, err := shardid.AcquireLease(context.Background(), shardid.LeaseConfig{Store: &ctxStore{mem}, Layout: tinyLayout})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Generator().Next(1); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Close(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Close with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := l.Generator().Next(1); !errors.Is(err, shardid.ErrLeaseLost) {
		t.Errorf("Next after a failed Close: %v, want ErrLeaseLost", err)
	}
	if !mem.state(l.Worker()).held {
		t.Fatal("released with a cancelled context")
	}
	if err := l.Close(context.Background()); err != nil {
		t.Errorf("the second Close: %v", err)
	}
	if mem.state(l.Worker()).held {
		t.Error("the second Close did not release the worker id")
	}
	if err := l.Close(context.Background()); err != nil {
		t.Errorf("a third Close: %v, want nil", err)
	}
}

// When the store says the lease was claimed by another process, the
// generator stops at once, even though its local validity has not run out.
func TestLeaseLostStopsAtOnce(t *testing.T) {
	ctx := context.Background()
	mem := &memLeaseStore{}
	a, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: mem, Layout: tinyLayout, Owner: "pod-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	if _, err := a.Generator().Next(0); err != nil {
		t.Fatal(err)
	}
	// A's lease expires on the store's clock (A's process was paused, say),
	// and a process with the same owner name claims the worker id.
	mem.expire(a.Worker())
	b, err := mem.Claim(ctx, 1, 0, "pod-1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token <= a.Token() {
		t.Fatalf("the new claim's token %d is not above the old one's, %d", b.Token, a.Token())
	}
	if err := shardid.RenewLease(ctx, a); !errors.Is(err, shardid.ErrLeaseLost) {
		t.Fatalf("A's renewal after B's claim: %v, want ErrLeaseLost", err)
	}
	if id, err := a.Generator().Next(0); !errors.Is(err, shardid.ErrLeaseLost) {
		t.Errorf("A after its renewal was refused: %v, %v; want ErrLeaseLost", id, err)
	}
	if err := a.Close(ctx); !errors.Is(err, shardid.ErrLeaseLost) {
		t.Errorf("closing a lost lease: %v, want ErrLeaseLost", err)
	}
	if st := mem.state(0); !st.held || st.token != b.Token {
		t.Errorf("A's Close touched B's claim: %+v", st)
	}
	if err := a.Close(ctx); err != nil {
		t.Errorf("closing a lost lease again: %v, want nil", err)
	}
}

// A lease that expired and was used by another holder meanwhile is
// claimed again with a new token, and the generator starts after the other
// holder's last unit.
func TestLeaseReclaimRaisesFloor(t *testing.T) {
	ctx := context.Background()
	mem := &memLeaseStore{}
	a, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: mem, Layout: tinyLayout})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	old := a.Token()
	mem.expire(0)
	b, _ := mem.Claim(ctx, 1, 0, "other", time.Second)
	far := time.Now().Add(300*time.Millisecond).UnixMilli() - tinyLayout.Epoch().UnixMilli()
	if err := mem.Release(ctx, b, far); err != nil {
		t.Fatal(err)
	}
	if err := shardid.RenewLease(ctx, a); err != nil {
		t.Fatalf("A's renewal with the id free again: %v", err)
	}
	if a.Token() <= b.Token || a.Token() <= old {
		t.Errorf("A's token after reclaiming: %d, want above %d and %d", a.Token(), old, b.Token)
	}
	id, err := a.Generator().Next(0)
	if err != nil {
		t.Fatal(err)
	}
	if u := tinyLayout.Decompose(id).Time.UnixMilli() - tinyLayout.Epoch().UnixMilli(); u <= far {
		t.Errorf("A's first ID after reclaiming is in unit %d, not after the other holder's last, %d", u, far)
	}
}

// AcquireLease that fails after its first renewal claimed the id again
// releases the claim it holds then, with the floor the other holder left.
func TestLeaseAcquireFailureReleasesCurrentClaim(t *testing.T) {
	ctx := context.Background()
	mem := &memLeaseStore{}
	var calls atomic.Int64
	far := time.Now().Add(time.Hour).UnixMilli() - tinyLayout.Epoch().UnixMilli()
	mem.renew = func(ctx context.Context, c shardid.Claim) error {
		switch calls.Add(1) {
		case 1:
			// Before the first renewal lands, the claim expires, another
			// holder comes and goes, leaving its last unit far ahead.
			mem.expire(c.Worker)
			b, _ := mem.Claim(ctx, 1, c.Worker, "other", time.Second)
			mem.Release(ctx, b, far)
			return nil
		default:
			return errors.New("network is unreachable")
		}
	}
	if _, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: mem, Layout: tinyLayout}); err == nil {
		t.Fatal("AcquireLease succeeded with its renewals failing")
	}
	st := mem.state(0)
	if st.held {
		t.Error("the failed AcquireLease left its claim held")
	}
	if st.last < far {
		t.Errorf("the failed AcquireLease lowered the last unit to %d, below the other holder's %d", st.last, far)
	}
}

// Close cancels a renewal stuck on an unresponsive store instead of
// waiting for it to time out (TTL/3, 3s here; before the fix, Close took
// that long).
func TestLeaseCloseCancelsStuckRenewal(t *testing.T) {
	mem := &memLeaseStore{}
	stuck := make(chan struct{})
	var calls atomic.Int64
	var once sync.Once
	mem.renew = func(ctx context.Context, c shardid.Claim) error {
		if calls.Add(1) == 1 {
			return nil // AcquireLease's own renewal goes through
		}
		once.Do(func() { close(stuck) })
		<-ctx.Done()
		return ctx.Err()
	}
	l, err := shardid.AcquireLease(context.Background(), shardid.LeaseConfig{Store: mem, Layout: tinyLayout, TTL: 9 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	<-stuck // the background renewal, after TTL/3
	start := time.Now()
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("Close took %v, waiting for a stuck renewal", d)
	}
	if mem.state(l.Worker()).held {
		t.Error("Close did not release the worker id")
	}
}

// Bad input to AcquireLease and the stores gets a typed error.
func TestLeaseBadInput(t *testing.T) {
	ctx := context.Background()
	if _, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: &memLeaseStore{}, Layout: tinyLayout,
		Owner: strings.Repeat("x", 201)}); !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Errorf("an owner of 201 bytes: %v, want ErrInvalidConfig", err)
	}
	l, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: &memLeaseStore{}, Layout: tinyLayout})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(l.Owner()); n == 0 || n > 200 {
		t.Errorf("the default owner %q has %d bytes", l.Owner(), n)
	}
	l.Close(ctx)
	fs := &shardid.FileLeaseStore{Path: t.TempDir() + "/state"}
	for _, c := range []struct{ workers, prefer int }{{8, 8}, {8, -1}, {0, 0}} {
		if _, err := fs.Claim(ctx, c.workers, c.prefer, "x", time.Second); !errors.Is(err, shardid.ErrWorkerRange) {
			t.Errorf("FileLeaseStore.Claim(workers %d, prefer %d): %v, want ErrWorkerRange", c.workers, c.prefer, err)
		}
	}
}

// A state file of version 1, without a token, is read as token 0 and
// rewritten with the token.
func TestFileLeaseStoreVersion1(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/state"
	if err := os.WriteFile(path, []byte("shardid-state v1 last=00000000000000001234\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := &shardid.FileLeaseStore{Path: path}
	c, err := fs.Claim(ctx, 1, 0, "x", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c != (shardid.Claim{Worker: 0, Last: 1234, Token: 1}) {
		t.Errorf("claim from a version 1 file: %+v", c)
	}
	b, _ := os.ReadFile(path)
	if want := "shardid-state v2 last=00000000000000001234 token=00000000000000000001\n"; string(b) != want {
		t.Errorf("the file after the claim: %q, want %q", b, want)
	}
	if err := fs.Release(ctx, c, 2000); err != nil {
		t.Fatal(err)
	}
	if c, err = fs.Claim(ctx, 1, 0, "x", time.Second); err != nil || c.Last != 2000 || c.Token != 2 {
		t.Errorf("claim after release: %+v, %v; want last 2000, token 2", c, err)
	}
	fs.Release(ctx, c, 2000)
}
