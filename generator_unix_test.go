//go:build unix

package shardid

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A process stopped (SIGSTOP) while its shards are saturated, as a GC pause,
// CPU throttling or VM steal would stop it: when it runs again, the clock is
// fine and no call may fail, neither with ErrSequenceExhausted ("the clock is
// not advancing") nor with ErrClockBackwards, even on a generator that
// tolerates no step back at all.
func TestGeneratorProcessStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("stops a helper process for about a second")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestGeneratorHelperProcess$", "-test.v=false")
	cmd.Env = append(os.Environ(), "SHARDID_GEN_HELPER=saturate")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill() //nolint:errcheck // a no-op once it has exited
	out := bufio.NewReader(outPipe)
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	const stops = 8
	for range stops {
		time.Sleep(100 * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(120 * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	in.Close()
	rest, _ := io.ReadAll(out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v\n%s", err, rest)
	}
	var ids, fails int
	var first string
	for _, line := range strings.Split(strings.TrimSpace(string(rest)), "\n") {
		switch {
		case strings.HasPrefix(line, "ids "):
			fmt.Sscanf(line, "ids %d fails %d", &ids, &fails)
		case strings.HasPrefix(line, "error "):
			if first == "" {
				first = line
			}
		}
	}
	t.Logf("%d IDs over %d stops of 120ms", ids, stops)
	if ids == 0 {
		t.Fatalf("the helper made no IDs:\n%s", rest)
	}
	if fails > 0 {
		t.Fatalf("%d calls failed after the process was stopped and continued; the first: %s", fails, first)
	}
}

// TestGeneratorHelperProcess is not a test: it is the body of the helper
// process TestGeneratorProcessStopped stops and continues. It saturates
// shards until its standard input closes, then prints how many IDs it made
// and every error it got.
func TestGeneratorHelperProcess(t *testing.T) {
	if os.Getenv("SHARDID_GEN_HELPER") != "saturate" {
		return
	}
	tolerant, err := NewGenerator(Instagram)
	if err != nil {
		t.Fatal(err)
	}
	strict, err := NewGenerator(Instagram, WithMaxClockBackwards(0))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		ids   int
		fails []string
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	run := func(fn func() (int, error)) {
		defer wg.Done()
		n := 0
		for {
			select {
			case <-stop:
				mu.Lock()
				ids += n
				mu.Unlock()
				return
			default:
			}
			k, err := fn()
			if err != nil {
				mu.Lock()
				fails = append(fails, err.Error())
				mu.Unlock()
				continue
			}
			n += k
		}
	}
	batch := make([]ID, 100)
	for _, fn := range []func() (int, error){
		func() (int, error) { _, err := tolerant.Next(1); return 1, err },
		func() (int, error) { _, err := tolerant.Next(1); return 1, err },
		func() (int, error) { _, err := strict.Next(2); return 1, err },
		func() (int, error) { _, err := strict.Next(2); return 1, err },
		func() (int, error) { return len(batch), strict.NextN(3, batch) },
	} {
		wg.Add(1)
		go run(fn)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin) //nolint:errcheck // returns when the parent closes it
	close(stop)
	wg.Wait()
	fmt.Printf("ids %d fails %d\n", ids, len(fails))
	for _, f := range fails {
		fmt.Println("error", f)
	}
	os.Exit(0)
}
