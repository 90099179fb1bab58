package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progress draws a one-line progress bar on w while work is done, from
// another goroutine: rows done, rate and time left. On anything but a
// terminal it draws nothing and prints one line when the work is done.
type progress struct {
	w     io.Writer
	label string
	total int64
	done  atomic.Int64
	start time.Time
	stop  chan struct{}
	ended chan struct{}
	tty   bool
	mu    sync.Mutex // serializes writes to w: the bar's and Printf's
}

func startProgress(w io.Writer, label string, total int64) *progress {
	p := &progress{w: w, label: label, total: total, start: time.Now(), stop: make(chan struct{}), ended: make(chan struct{}),
		tty: isTerminal(w)}
	if !p.tty {
		close(p.ended)
		return p
	}
	go func() {
		defer close(p.ended)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				p.draw()
				fmt.Fprintln(p.w)
				return
			case <-t.C:
				p.draw()
			}
		}
	}()
	return p
}

func (p *progress) Add(n int) { p.done.Add(int64(n)) }

// Printf prints a line of text above the bar.
func (p *progress) Printf(format string, a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K") // clear the bar's line; the next draw puts it back below
	}
	fmt.Fprintf(p.w, format, a...)
}

// Set sets the work done to n.
func (p *progress) Set(n int64) { p.done.Store(n) }

func (p *progress) draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	done := p.done.Load()
	// More rows than announced (writes during a move, an estimate that
	// fell short) fill the bar, never more.
	frac := min(float64(done)/float64(max(p.total, 1)), 1)
	const width = 30
	bar := strings.Repeat("█", int(frac*width)) + strings.Repeat("░", width-int(frac*width))
	el := time.Since(p.start)
	rate := float64(done) / max(el.Seconds(), 1e-9)
	eta := "--"
	if rate > 0 && done < p.total {
		eta = time.Duration(float64(p.total-done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	fmt.Fprintf(p.w, "\r%-9s %s %3.0f%% %d/%d rows %8.0f rows/s eta %s   ", p.label, bar, frac*100, done, p.total, rate, eta)
}

// Finish draws the last state and ends the line.
func (p *progress) Finish() {
	close(p.stop)
	<-p.ended
	if !p.tty {
		el := time.Since(p.start)
		fmt.Fprintf(p.w, "%s: %d/%d rows in %v, %.0f rows/s\n", p.label, p.done.Load(), p.total,
			el.Round(time.Millisecond), float64(p.done.Load())/max(el.Seconds(), 1e-9))
	}
}
