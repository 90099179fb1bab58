package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// interrupt turns the first SIGINT or SIGTERM into a cancelled context, so
// that the work under way stops between two statements and cleans up after
// itself, and the second into an exit at once, with a word on what may be
// left and how to see it.
//
// While held (a move between the fence for good of its source and the flip
// of the catalog, where stopping would leave the shard refusing writes
// until the move is run again), the first signal only marks the context to
// be cancelled once the hold ends.
type interrupt struct {
	ctx    context.Context
	cancel context.CancelFunc
	w      io.Writer
	sigs   chan os.Signal
	done   chan struct{}
	exit   func(int) // os.Exit; a seam for tests

	mu      sync.Mutex // protects the fields below
	held    string     // why the first signal must wait, or ""
	pending bool       // a signal came while held
	left    string     // what an exit at once may leave, and how to see it
	got     bool       // the first signal came
}

// onInterrupt starts catching SIGINT and SIGTERM; stop ends it.
func onInterrupt(w io.Writer) *interrupt {
	in := &interrupt{w: w, sigs: make(chan os.Signal, 2), done: make(chan struct{}), exit: os.Exit}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	signal.Notify(in.sigs, os.Interrupt, syscall.SIGTERM)
	go in.loop()
	return in
}

func (in *interrupt) loop() {
	for {
		select {
		case <-in.done:
			return
		case sig := <-in.sigs:
			in.mu.Lock()
			if in.got {
				left := in.left
				in.mu.Unlock()
				fmt.Fprintf(in.w, "\n%v again: exiting at once.\n", sig)
				if left != "" {
					fmt.Fprintln(in.w, left)
				}
				in.exit(130)
				return
			}
			in.got = true
			if in.held != "" {
				in.pending = true
				fmt.Fprintf(in.w, "\n%v: %s; stopping after that (press Ctrl-C again to exit at once)\n", sig, in.held)
				in.mu.Unlock()
				continue
			}
			// Cancelled before the lock is let go: whoever sees the signal
			// (Interrupted) or holds after it (Hold) finds the context
			// cancelled already, never a step begun between the two.
			in.cancel()
			in.mu.Unlock()
			fmt.Fprintf(in.w, "\n%v: stopping and cleaning up (press Ctrl-C again to exit at once)\n", sig)
		}
	}
}

// Interrupted reports whether a first signal came.
func (in *interrupt) Interrupted() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.got
}

// Hold makes a first signal wait until Release; why says what is being
// finished.
func (in *interrupt) Hold(why string) {
	in.mu.Lock()
	in.held = why
	in.mu.Unlock()
}

// Release ends a Hold, and cancels the context if a signal came meanwhile.
func (in *interrupt) Release() {
	in.mu.Lock()
	pending := in.pending
	in.held, in.pending = "", false
	in.mu.Unlock()
	if pending {
		in.cancel()
	}
}

// Leaves sets what an exit at once may leave behind, and how to see it.
func (in *interrupt) Leaves(msg string) {
	in.mu.Lock()
	in.left = msg
	in.mu.Unlock()
}

// stop stops catching signals and cancels the context.
func (in *interrupt) stop() {
	signal.Stop(in.sigs)
	close(in.done)
	in.cancel()
}
