package reshard_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/shardid/shardid/reshard"
)

// lingeringProxy forwards TCP connections to the test PostgreSQL and, when
// a client's side closes, keeps the server's side open for linger: as a
// load balancer, a NAT or a lost FIN would, the server learns late that
// its client is gone. It returns the proxy's port.
func lingeringProxy(t *testing.T, linger time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", "127.0.0.1:5432")
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				go io.Copy(c, s)
				io.Copy(s, c) // until the client's side closes
				c.Close()
				time.Sleep(linger)
				s.Close()
			}()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// A mover killed at a stage whose server session outlives it for a few
// seconds (the server learns late that it is gone): an abort and the move
// run again at once wait for the dead session's lock (DefaultLockWait)
// instead of failing with ErrMoveInProgress, and succeed.
func TestMoveKilledSessionLingers(t *testing.T) {
	ownDatabases(t)
	if testing.Short() {
		t.Skip("waits for a dead mover's session")
	}
	for _, stage := range []string{"created", "fenced"} {
		t.Run(stage, func(t *testing.T) {
			r, _ := ownMoveSetup(t)
			c := &reshard.Catalog{DB: r.Databases()[0], Table: "shardid_mvl_catalog"}
			loaded(t, r, c)
			ctx := context.Background()
			seeded := seedShard(t, r, 1, 200)
			cmd := helperProcess(t, "mover", "SHARDID_DIE_AT="+stage, "SHARDID_MOVER_PORT="+lingeringProxy(t, 3*time.Second))
			out, _ := cmd.Output()
			if cmd.ProcessState.ExitCode() != 3 {
				t.Fatalf("the mover did not die at %s: %s", stage, out)
			}
			start := time.Now()
			if err := reshard.Unfence(ctx, r, 1, []any{&RPhoto{}}); err != nil {
				if errors.Is(err, reshard.ErrMoveInProgress) {
					t.Fatalf("an abort right after the mover was killed is refused by the dead mover's lock: %v", err)
				}
				t.Fatal(err)
			}
			t.Logf("the abort waited %v for the dead mover's lock", time.Since(start).Round(time.Millisecond))
			if _, err := reshard.MoveShard(ctx, r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 100}); err != nil {
				t.Fatalf("the move run again after a kill at %s: %v", stage, err)
			}
			for _, ph := range seeded {
				var got RPhoto
				if err := r.Get(ctx, &got, ph.ID); err != nil {
					t.Errorf("photo %v: %v", ph.ID, err)
				}
			}
		})
	}
}
