// Package progress draws a progress bar for long CLI work (trace replays, picker comparisons).
//
// On a terminal the bar is one line redrawn in place with '\r' about ten times a second by a
// goroutine that Finish stops. Anywhere else (CI logs, files, pipes, tests) it prints a plain line
// each time another tenth of the total is done, and a final line at Finish: no control characters.
// It reads the wall clock; it is CLI code, not part of the deterministic core.
package progress

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	redrawEvery = 100 * time.Millisecond
	barWidth    = 28
)

// Bar reports progress towards a total. Add and Set are safe for concurrent use and cost one
// atomic operation on the fast path.
type Bar struct {
	w     io.Writer
	total int64
	label string
	tty   bool
	now   func() time.Time
	start time.Time

	n atomic.Int64

	mu       sync.Mutex // serializes output and guards the fields below
	finished bool
	lastLen  int   // length of the last terminal line, to blank leftovers
	decile   int64 // last tenth reported on a plain writer

	nextDecile atomic.Int64 // first count at which a plain line is due (fast-path check)

	stop chan struct{}
	done chan struct{}
}

// New starts a bar that renders to w (callers pass os.Stderr). total <= 0 means unknown: no
// percentage, bar or ETA, and on a plain writer only the final line.
func New(w io.Writer, total int64, label string) *Bar {
	return newBar(w, total, label, isTerminal(w), time.Now, redrawEvery)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newBar(w io.Writer, total int64, label string, tty bool, now func() time.Time, every time.Duration) *Bar {
	b := &Bar{w: w, total: total, label: label, tty: tty, now: now, start: now()}
	b.nextDecile.Store(b.threshold(1))
	if tty {
		b.stop, b.done = make(chan struct{}), make(chan struct{})
		go b.loop(every)
	}
	return b
}

// threshold is the count at which tenth d (0..9) is reached, ceil(total*d/10), computed in 128
// bits so no total overflows; MaxInt64 when no plain line is ever due.
func (b *Bar) threshold(d int64) int64 {
	if b.total <= 0 || d < 0 || d > 9 {
		return math.MaxInt64
	}
	hi, lo := bits.Mul64(uint64(b.total), uint64(d))
	lo, carry := bits.Add64(lo, 9, 0)
	q, _ := bits.Div64(hi+carry, lo, 10)
	return int64(q)
}

// tenths is floor(n*10/total) for 0 <= n < total, and 10 from total on.
func (b *Bar) tenths(n int64) int64 {
	if n >= b.total {
		return 10
	}
	hi, lo := bits.Mul64(uint64(n), 10)
	q, _ := bits.Div64(hi, lo, uint64(b.total)) // hi < total because n < total
	return int64(q)
}

func (b *Bar) loop(every time.Duration) {
	defer close(b.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.mu.Lock()
			if !b.finished {
				b.draw(b.line(b.n.Load(), false))
			}
			b.mu.Unlock()
		}
	}
}

// Add advances the count by n.
func (b *Bar) Add(n int64) { b.check(b.n.Add(n)) }

// Set sets the count to n.
func (b *Bar) Set(n int64) {
	b.n.Store(n)
	b.check(n)
}

// check prints a plain line when the count crossed into a new tenth of the total. Only the
// first caller past a threshold takes the lock.
func (b *Bar) check(n int64) {
	if b.tty || n < b.nextDecile.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		return
	}
	n = b.n.Load() // the latest count, so lines never go backwards
	if n < 0 {
		return
	}
	d := min(b.tenths(n), 9)
	if d <= b.decile {
		return
	}
	b.decile = d
	b.nextDecile.Store(b.threshold(d + 1))
	fmt.Fprintln(b.w, b.line(n, false))
}

// Finish stops redrawing and prints the final line with the elapsed time and rate. Later calls
// do nothing; Add and Set after Finish count but print nothing.
func (b *Bar) Finish() {
	b.mu.Lock()
	if b.finished {
		b.mu.Unlock()
		return
	}
	b.finished = true
	b.mu.Unlock()
	if b.tty {
		close(b.stop)
		<-b.done
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	final := b.line(b.n.Load(), true)
	if b.tty {
		b.draw(final)
		fmt.Fprint(b.w, "\n")
		return
	}
	fmt.Fprintln(b.w, final)
}

// draw rewrites the terminal line, blanking what a longer previous line left behind.
func (b *Bar) draw(s string) {
	pad := ""
	if l := len([]rune(s)); l < b.lastLen {
		pad = strings.Repeat(" ", b.lastLen-l)
	}
	b.lastLen = len([]rune(s))
	fmt.Fprint(b.w, "\r"+s+pad)
}

// line renders the state at count n: the live form, or the final one.
func (b *Bar) line(n int64, final bool) string {
	elapsed := b.now().Sub(b.start)
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(n) / s
	}
	var sb strings.Builder
	if b.label != "" {
		sb.WriteString(b.label)
		sb.WriteString(" ")
	}
	if final {
		fmt.Fprintf(&sb, "done %s in %s (%s)", b.count(n), fmtDuration(elapsed), fmtRate(rate))
		return sb.String()
	}
	if b.total > 0 {
		frac := math.Min(math.Max(float64(n)/float64(b.total), 0), 1)
		if b.tty {
			full := int(frac * barWidth)
			sb.WriteString("[" + strings.Repeat("=", full))
			if full < barWidth {
				sb.WriteString(">" + strings.Repeat(" ", barWidth-full-1))
			}
			sb.WriteString("] ")
		}
		fmt.Fprintf(&sb, "%3.0f%% %s %s", frac*100, b.count(n), fmtRate(rate))
		if rate > 0 && n < b.total {
			fmt.Fprintf(&sb, " ETA %s", fmtDuration(time.Duration(float64(b.total-n)/rate*float64(time.Second))))
		}
		return sb.String()
	}
	fmt.Fprintf(&sb, "%s %s", b.count(n), fmtRate(rate))
	return sb.String()
}

func (b *Bar) count(n int64) string {
	if b.total > 0 {
		return fmt.Sprintf("%d/%d", n, b.total)
	}
	return fmt.Sprint(n)
}

func fmtRate(r float64) string {
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f/s", r)
	case r >= 10:
		return fmt.Sprintf("%.1f/s", r)
	}
	return fmt.Sprintf("%.2f/s", r)
}

// fmtDuration rounds to what a human reads: 850ms, 4.2s, 3m05s, 2h07m.
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
}
