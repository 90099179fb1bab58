package main

import (
	"os"
	"testing"
	"time"
)

// slowWriter takes its time, as a terminal or a pipe may.
type slowWriter struct{}

func (slowWriter) Write(p []byte) (int, error) { time.Sleep(50 * time.Millisecond); return len(p), nil }

// TestInterruptCancelsBeforeItIsSeen: once a first signal is seen
// (Interrupted), the context is cancelled already, however slow the
// message about it is to write. A move that went on between the two (the
// CI's TestMoveInterruptedAtEveryStage/mysql/verified once sealed its
// source for good there, then failed its flip on the cancelled context).
func TestInterruptCancelsBeforeItIsSeen(t *testing.T) {
	for range 5 {
		in := onInterrupt(slowWriter{})
		in.sigs <- os.Interrupt
		for !in.Interrupted() {
			time.Sleep(time.Millisecond)
		}
		if in.ctx.Err() == nil {
			t.Fatal("a signal seen, its context not cancelled yet")
		}
		in.stop()
	}
}
