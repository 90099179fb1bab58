//go:build unix

package shardid_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/shardid/shardid"
)

// The reproduction, with real processes: A holds the only worker
// id under the owner name pod-7 and is paused (SIGSTOP) past its TTL; B,
// under the same name, claims the id and makes IDs; A is resumed. A must
// make no ID once B holds the id, and no ID is made twice. Matched on the
// owner name, as before, A's renewal succeeded and the two made thousands
// of the same IDs.
func TestLeaseSameOwnerPausedProcess(t *testing.T) {
	ctx := context.Background()
	for _, st := range leaseStores {
		t.Run(st.name, func(t *testing.T) {
			ns := "shardid_paused_" + st.name
			store := st.make(t, ns)
			idsFile := t.TempDir() + "/ids"
			cmd := helperProcess(t, "sameowner", "SHARDID_STORE="+st.name, "SHARDID_NS="+ns, "SHARDID_IDS="+idsFile)
			in, _ := cmd.StdinPipe()
			outPipe, _ := cmd.StdoutPipe()
			out := bufio.NewReader(outPipe)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			line, _ := out.ReadString('\n')
			var tokenA int64
			if _, err := fmt.Sscanf(line, "ready %d", &tokenA); err != nil {
				t.Fatalf("A said %q", line)
			}
			time.Sleep(200 * time.Millisecond) // A makes IDs
			if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			// B's own TTL is long: the test is of A's lease, and a B that
			// renews every 200 ms lost its lease on a loaded machine
			// (a CI run beside the reshard tests).
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			b, err := shardid.AcquireLease(wctx, shardid.LeaseConfig{Store: store, Layout: shardid.Instagram,
				TTL: 5 * time.Second, Owner: "pod-7", Wait: true})
			cancel()
			cmd.Process.Signal(syscall.SIGCONT)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close(ctx)
			if b.Token() <= tokenA {
				t.Errorf("B's token %d is not above A's, %d", b.Token(), tokenA)
			}
			seen := map[shardid.ID]bool{}
			for end := time.Now().Add(time.Second); time.Now().Before(end); {
				id, err := b.Generator().Next(5)
				if err != nil {
					t.Fatalf("B: %v", err)
				}
				seen[id] = true
			}
			in.Close()
			line, _ = out.ReadString('\n')
			cmd.Wait()
			var made, refused int
			var errSet, closeErr bool
			if _, err := fmt.Sscanf(line, "made %d refused %d err %t %t", &made, &refused, &errSet, &closeErr); err != nil {
				t.Fatalf("A said %q", line)
			}
			raw, err := os.ReadFile(idsFile)
			if err != nil {
				t.Fatal(err)
			}
			dups, afterB := 0, 0
			firstB := shardid.ID(1<<63 - 1)
			for id := range seen {
				firstB = min(firstB, id)
			}
			for i := 0; i+8 <= len(raw); i += 8 {
				id := shardid.ID(binary.LittleEndian.Uint64(raw[i:]))
				if seen[id] {
					dups++
				}
				if id >= firstB {
					afterB++
				}
			}
			t.Logf("A made %d IDs (%d refused), B %d", made, refused, len(seen))
			if dups > 0 || afterB > 0 {
				t.Errorf("A made %d IDs at or after B's first, %d of them also made by B", afterB, dups)
			}
			if !errSet || !closeErr {
				t.Errorf("A's lease error set: %v, A's Close failed: %v; want both (its lease was lost)", errSet, closeErr)
			}
		})
	}
}
