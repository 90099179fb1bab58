package shardid_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardid/shardid"
)

// fenceStores are the lease stores of lease_test.go and the file store, each
// with whether its leases expire (the file store's is held until released).
func fenceStores() []struct {
	name    string
	expires bool
	make    func(t testing.TB, ns string) shardid.LeaseStore
} {
	var out []struct {
		name    string
		expires bool
		make    func(t testing.TB, ns string) shardid.LeaseStore
	}
	for _, st := range leaseStores {
		out = append(out, struct {
			name    string
			expires bool
			make    func(t testing.TB, ns string) shardid.LeaseStore
		}{st.name, true, st.make})
	}
	return append(out, struct {
		name    string
		expires bool
		make    func(t testing.TB, ns string) shardid.LeaseStore
	}{"file", false, func(t testing.TB, ns string) shardid.LeaseStore {
		return &shardid.FileLeaseStore{Path: t.TempDir() + "/" + ns}
	}})
}

// Every store fences renewals and releases with the claim's token: a claim
// that was released, or whose worker id was claimed again after it expired,
// can neither be renewed nor released, even under the same owner name, and
// changes nothing when it tries. Every claim gets a greater token.
func TestLeaseStoreTokens(t *testing.T) {
	ctx := context.Background()
	for _, st := range fenceStores() {
		t.Run(st.name, func(t *testing.T) {
			store := st.make(t, "shardid_tokens_"+st.name)
			const owner = "pod-7" // every claim below, under one name
			if _, err := store.Claim(ctx, 0, 0, owner, time.Second); !errors.Is(err, shardid.ErrWorkerRange) {
				t.Errorf("a claim among 0 worker ids: %v, want ErrWorkerRange", err)
			}
			c1, err := store.Claim(ctx, 1, 0, owner, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if c1.Worker != 0 || c1.Token <= 0 {
				t.Fatalf("first claim: %+v, want worker 0 and a positive token", c1)
			}
			if err := store.Renew(ctx, c1, 10*time.Second, 100); err != nil {
				t.Fatal(err)
			}
			if _, err := store.Claim(ctx, 1, 0, owner, 10*time.Second); !errors.Is(err, shardid.ErrNoFreeWorker) {
				t.Fatalf("a claim while held: %v, want ErrNoFreeWorker", err)
			}
			if err := store.Release(ctx, c1, 50); err != nil {
				t.Fatal(err)
			}
			if err := store.Renew(ctx, c1, 10*time.Second, 1e6); !errors.Is(err, shardid.ErrLeaseLost) {
				t.Errorf("renewing a released claim: %v, want ErrLeaseLost", err)
			}
			if err := store.Release(ctx, c1, 1e6); !errors.Is(err, shardid.ErrLeaseLost) {
				t.Errorf("releasing a released claim: %v, want ErrLeaseLost", err)
			}
			c2, err := store.Claim(ctx, 1, 0, owner, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if c2.Token <= c1.Token || c2.Last != 50 {
				t.Errorf("second claim: %+v, want a token above %d and last 50", c2, c1.Token)
			}
			// c1 again, after c2 took the id: it changes nothing.
			if err := store.Renew(ctx, c1, 10*time.Second, 1e6); !errors.Is(err, shardid.ErrLeaseLost) {
				t.Errorf("renewing an old claim: %v, want ErrLeaseLost", err)
			}
			if err := store.Release(ctx, c1, 1); !errors.Is(err, shardid.ErrLeaseLost) {
				t.Errorf("releasing an old claim: %v, want ErrLeaseLost", err)
			}
			if _, err := store.Claim(ctx, 1, 0, owner, 10*time.Second); !errors.Is(err, shardid.ErrNoFreeWorker) {
				t.Errorf("a claim after an old claim's release: %v, want ErrNoFreeWorker (c2 holds the id)", err)
			}
			if err := store.Renew(ctx, c2, 10*time.Second, 200); err != nil {
				t.Fatal(err)
			}
			last := int64(150)
			if st.expires {
				// A claim for a short TTL runs out; c3 claims the id again,
				// under the same name.
				if err := store.Release(ctx, c2, 250); err != nil {
					t.Fatal(err)
				}
				if c2, err = store.Claim(ctx, 1, 0, owner, 100*time.Millisecond); err != nil {
					t.Fatal(err)
				}
				if err := store.Renew(ctx, c2, 100*time.Millisecond, 300); err != nil {
					t.Fatal(err)
				}
				var c3 shardid.Claim
				deadline := time.Now().Add(10 * time.Second)
				for {
					c3, err = store.Claim(ctx, 1, 0, owner, 10*time.Second)
					if err == nil || !errors.Is(err, shardid.ErrNoFreeWorker) || time.Now().After(deadline) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				if err != nil {
					t.Fatal(err)
				}
				if c3.Token <= c2.Token || c3.Last != 300 {
					t.Errorf("claim after expiry: %+v, want a token above %d and last 300", c3, c2.Token)
				}
				if err := store.Renew(ctx, c2, 10*time.Second, 1e6); !errors.Is(err, shardid.ErrLeaseLost) {
					t.Errorf("renewing an expired claim after another: %v, want ErrLeaseLost", err)
				}
				if err := store.Release(ctx, c2, 1); !errors.Is(err, shardid.ErrLeaseLost) {
					t.Errorf("releasing an expired claim after another: %v, want ErrLeaseLost", err)
				}
				c2, last = c3, 350
			}
			if err := store.Release(ctx, c2, last); err != nil {
				t.Fatal(err)
			}
			c4, err := store.Claim(ctx, 1, 0, owner, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if c4.Token <= c2.Token || c4.Last != last {
				t.Errorf("claim after release: %+v, want a token above %d and last %d (no old claim raised it)", c4, c2.Token, last)
			}
			if err := store.Release(ctx, c4, last); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// errCut is what a store cut off from the process says.
var errCut = errors.New("network is unreachable")

// cutStore is a store that can be cut off from one lease holder: every
// call fails while cut is set.
type cutStore struct {
	shardid.LeaseStore
	cut atomic.Bool
}

func (s *cutStore) Claim(ctx context.Context, workers, prefer int, owner string, ttl time.Duration) (shardid.Claim, error) {
	if s.cut.Load() {
		return shardid.Claim{}, errCut
	}
	return s.LeaseStore.Claim(ctx, workers, prefer, owner, ttl)
}

func (s *cutStore) Renew(ctx context.Context, c shardid.Claim, ttl time.Duration, promise int64) error {
	if s.cut.Load() {
		return errCut
	}
	return s.LeaseStore.Renew(ctx, c, ttl, promise)
}

func (s *cutStore) Release(ctx context.Context, c shardid.Claim, last int64) error {
	if s.cut.Load() {
		return errCut
	}
	return s.LeaseStore.Release(ctx, c, last)
}

// Two processes configured with the same Owner, one worker id: A is cut
// off from the store past its TTL, B claims the id, then A comes back. A's
// renewal must fail with ErrLeaseLost and its generator stay stopped, and
// no ID is made twice. (Before claims had tokens, A's renewal matched on
// the owner name and both made IDs: duplicates by the thousand.) The file
// store does not expire a lease, so there B is refused instead and A goes
// on.
func TestLeaseSameOwnerFencing(t *testing.T) {
	ctx := context.Background()
	for _, st := range fenceStores() {
		t.Run(st.name, func(t *testing.T) {
			store := st.make(t, "shardid_fence_"+st.name)
			const ttl = 600 * time.Millisecond
			// Each lease gets a generator state of its own, as two processes
			// would have.
			own := []shardid.GeneratorOption{shardid.WithClock(time.Now)}
			cfg := shardid.LeaseConfig{Layout: shardid.Instagram, TTL: ttl, Owner: "pod-7", Options: own}
			cfgA := cfg
			cut := &cutStore{LeaseStore: store}
			cfgA.Store = cut
			a, err := shardid.AcquireLease(ctx, cfgA)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close(ctx)
			var mu sync.Mutex
			seen := map[shardid.ID]string{}
			dups := 0
			take := func(who string, l *shardid.Lease, d time.Duration) (n int, err error) {
				for end := time.Now().Add(d); time.Now().Before(end); {
					id, err := l.Generator().Next(5)
					if err != nil {
						return n, err
					}
					mu.Lock()
					if prev, ok := seen[id]; ok {
						dups++
						if dups <= 3 {
							t.Errorf("ID %v made by %s and %s", id, prev, who)
						}
					}
					seen[id] = who
					mu.Unlock()
					n++
				}
				return n, nil
			}
			if _, err := take("A", a, 50*time.Millisecond); err != nil {
				t.Fatal(err)
			}

			cut.cut.Store(true)
			deadline := time.Now().Add(10 * time.Second)
			for {
				if _, err := take("A", a, time.Millisecond); errors.Is(err, shardid.ErrLeaseLost) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					t.Fatal("A, cut off from the store, still makes IDs after 10s")
				}
			}

			if !st.expires {
				cfgB := cfg
				cfgB.Store = &shardid.FileLeaseStore{Path: store.(*shardid.FileLeaseStore).Path}
				time.Sleep(ttl)
				if b, err := shardid.AcquireLease(ctx, cfgB); !errors.Is(err, shardid.ErrNoFreeWorker) {
					if b != nil {
						b.Close(ctx)
					}
					t.Fatalf("B while A holds the file: %v, want ErrNoFreeWorker", err)
				}
				cut.cut.Store(false)
				for a.Err() != nil {
					if time.Now().After(deadline) {
						t.Fatalf("A did not renew once back: %v", a.Err())
					}
					time.Sleep(10 * time.Millisecond)
				}
				if _, err := take("A", a, 50*time.Millisecond); err != nil {
					t.Errorf("A once back: %v", err)
				}
				return
			}

			cfgB := cfg
			cfgB.Store, cfgB.Wait = store, true
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			b, err := shardid.AcquireLease(wctx, cfgB)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close(ctx)
			if b.Worker() != a.Worker() || b.Token() <= a.Token() {
				t.Fatalf("B holds worker %d token %d; A held worker %d token %d", b.Worker(), b.Token(), a.Worker(), a.Token())
			}
			if _, err := take("B", b, 50*time.Millisecond); err != nil {
				t.Fatal(err)
			}

			// A comes back; its next renewal finds B's claim.
			cut.cut.Store(false)
			for errors.Is(a.Err(), errCut) {
				if time.Now().After(deadline) {
					t.Fatal("A did not try to renew within 10s of coming back")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if !errors.Is(a.Err(), shardid.ErrLeaseLost) {
				t.Errorf("A's renewal after B's claim: %v, want ErrLeaseLost", a.Err())
			}
			var wg sync.WaitGroup
			var nA int
			var errA error
			wg.Add(2)
			go func() { defer wg.Done(); nA, errA = take("A", a, 300*time.Millisecond) }()
			go func() {
				defer wg.Done()
				if _, err := take("B", b, 300*time.Millisecond); err != nil {
					t.Errorf("B: %v", err)
				}
			}()
			wg.Wait()
			if nA > 0 || !errors.Is(errA, shardid.ErrLeaseLost) {
				t.Errorf("A made %d IDs after B took its worker id (then %v); want none and ErrLeaseLost", nA, errA)
			}
			if dups > 0 {
				t.Errorf("%d IDs made twice", dups)
			}
			if err := a.Close(ctx); !errors.Is(err, shardid.ErrLeaseLost) {
				t.Errorf("closing A: %v, want ErrLeaseLost", err)
			}
			if _, err := take("B", b, 10*time.Millisecond); err != nil {
				t.Errorf("B after A's Close: %v", err)
			}
		})
	}
}

// Tokens keep growing after Redis lost every key (a restart without
// persistence): a holder from before cannot renew a claim made after.
func TestRedisLeaseTokensAfterDataLoss(t *testing.T) {
	ctx := context.Background()
	const ns = "shardid_tokenloss"
	var store shardid.LeaseStore
	for _, st := range leaseStores {
		if st.name == "redis" {
			store = st.make(t, ns)
		}
	}
	c1, err := store.Claim(ctx, 1, 0, "pod-7", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := openRedis(t)
	keys, _ := c.Keys(ctx, ns+":*").Result()
	if err := c.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	c2, err := store.Claim(ctx, 1, 0, "pod-7", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c2.Token <= c1.Token {
		t.Errorf("token after Redis lost its keys: %d, not above the one before, %d", c2.Token, c1.Token)
	}
	if err := store.Renew(ctx, c1, 10*time.Second, 1); !errors.Is(err, shardid.ErrLeaseLost) {
		t.Errorf("renewing the claim from before: %v, want ErrLeaseLost", err)
	}
	store.Release(ctx, c2, 0)
}

// helperSameOwner is the body of a process that holds a lease under the
// owner name pod-7 and makes IDs on shard 5 until its standard input
// closes, then writes them to $SHARDID_IDS and says how many it made.
func helperSameOwner(store shardid.LeaseStore) {
	ctx := context.Background()
	l, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: store, Layout: shardid.Instagram,
		TTL: 600 * time.Millisecond, Owner: "pod-7"})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println("ready", l.Token())
	var stop atomic.Bool
	go func() {
		bufio.NewReader(os.Stdin).ReadString('\n')
		stop.Store(true)
	}()
	var ids []byte
	lost := 0
	for !stop.Load() {
		id, err := l.Generator().Next(5)
		switch {
		case err == nil:
			ids = binary.LittleEndian.AppendUint64(ids, uint64(id))
		case errors.Is(err, shardid.ErrLeaseLost):
			lost++
			time.Sleep(time.Millisecond)
		default:
			fmt.Println("error", err)
			return
		}
	}
	if err := os.WriteFile(os.Getenv("SHARDID_IDS"), ids, 0o644); err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println("made", len(ids)/8, "refused", lost, "err", l.Err() != nil, l.Close(ctx) != nil)
}
