package progress

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/internal/syncbuf"
)

// fakeClock advances by step on every reading, so rates and durations are exact.
type fakeClock struct {
	t    atomic.Int64
	step time.Duration
}

func (c *fakeClock) now() time.Time { return time.Unix(0, c.t.Add(int64(c.step))) }

func plainLines(t *testing.T, out string) []string {
	t.Helper()
	if strings.ContainsAny(out, "\r\x1b") {
		t.Fatalf("plain output has control characters: %q", out)
	}
	return strings.Split(strings.TrimSuffix(out, "\n"), "\n")
}

func TestPlainLinesEveryTenth(t *testing.T) {
	var buf bytes.Buffer
	clk := &fakeClock{} // every reading is 0: rate 0, so no ETA
	b := newBar(&buf, 100, "replay", false, clk.now, time.Hour)
	for range 100 {
		b.Add(1)
	}
	clk.step = time.Second // the final reading is 1s after the start
	b.Finish()
	lines := plainLines(t, buf.String())
	if len(lines) != 10 {
		t.Fatalf("%d lines, want 10:\n%s", len(lines), buf.String())
	}
	for i, l := range lines[:9] {
		want := "replay " + pct(10*(i+1)) + " " + itoa(10*(i+1)) + "/100 0.00/s"
		if l != want {
			t.Errorf("line %d = %q, want %q", i, l, want)
		}
	}
	if want := "replay done 100/100 in 1.0s (100/s)"; lines[9] != want {
		t.Errorf("final = %q, want %q", lines[9], want)
	}
}

func pct(p int) string {
	s := itoa(p) + "%"
	return strings.Repeat(" ", 4-len(s)) + s
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestPlainJumpsAndETA(t *testing.T) {
	var buf bytes.Buffer
	clk := &fakeClock{step: time.Second}
	b := newBar(&buf, 1000, "", false, clk.now, time.Hour) // start at 1s
	b.Add(9)                                               // below 10%: nothing
	b.Add(541)                                             // 55%: one line for the 50% tenth
	b.Set(560)                                             // same tenth: nothing
	b.Set(1000)                                            // one line, at 100%
	b.Add(5)                                               // past the total: nothing more
	b.Finish()
	b.Finish() // idempotent
	b.Add(1)   // after Finish: silent
	lines := plainLines(t, buf.String())
	want := []string{
		" 55% 550/1000 550/s ETA 818ms", // clock readings: start at 1s, this line at 2s
		"100% 1000/1000 500/s",
		"done 1005/1000 in 3.0s (335/s)",
	}
	if len(lines) != len(want) {
		t.Fatalf("lines %q, want %q", lines, want)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d = %q, want %q", i, lines[i], want[i])
		}
	}
}

func TestUnknownTotal(t *testing.T) {
	var buf bytes.Buffer
	clk := &fakeClock{step: 500 * time.Millisecond}
	b := newBar(&buf, 0, "scan", false, clk.now, time.Hour)
	for range 1000 {
		b.Add(1)
	}
	b.Finish()
	if got, want := buf.String(), "scan done 1000 in 500ms (2000/s)\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

func TestConcurrentAdds(t *testing.T) {
	var buf bytes.Buffer
	b := New(&buf, 8000, "run")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				b.Add(1)
			}
		})
	}
	wg.Wait()
	b.Finish()
	lines := plainLines(t, buf.String())
	if len(lines) != 10 {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	prev := -1
	for _, l := range lines[:9] {
		var p int
		rest := strings.TrimSpace(strings.TrimPrefix(l, "run "))
		for _, c := range rest[:strings.IndexByte(rest, '%')] {
			p = p*10 + int(c-'0')
		}
		if p <= prev {
			t.Errorf("percentages not increasing: %q", lines)
		}
		prev = p
	}
	if !strings.HasPrefix(lines[9], "run done 8000/8000 in ") {
		t.Errorf("final %q", lines[9])
	}
}

func TestTerminalRedrawsAndStops(t *testing.T) {
	var out syncbuf.Buffer
	clk := &fakeClock{step: 100 * time.Millisecond}
	b := newBar(&out, 200, "sim", true, clk.now, time.Millisecond)
	b.Add(50)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "50/200") {
		if time.Now().After(deadline) {
			t.Fatalf("no redraw: %q", out.String())
		}
		time.Sleep(time.Millisecond)
	}
	b.Add(150)
	b.Finish()
	select {
	case <-b.done:
	case <-time.After(5 * time.Second):
		t.Fatal("redraw goroutine still running after Finish")
	}
	s := out.String()
	if !strings.HasPrefix(s, "\rsim [=======>") || !strings.Contains(s, " 25% 50/200 ") || !strings.Contains(s, "ETA ") {
		t.Errorf("live line: %q", s)
	}
	if strings.Contains(s, "\n") && strings.Index(s, "\n") != len(s)-1 {
		t.Errorf("terminal output has a newline before the end: %q", s)
	}
	last := s[strings.LastIndex(s, "\r")+1:]
	if !strings.HasPrefix(last, "sim done 200/200 in ") || !strings.HasSuffix(last, "\n") {
		t.Errorf("final line %q", last)
	}
	// The final line is padded over the longer live line it replaces.
	live := s[:strings.LastIndex(s, "\r")]
	live = live[strings.LastIndex(live, "\r")+1:]
	if len(strings.TrimSuffix(last, "\n")) < len(live) {
		t.Errorf("final line %q does not cover %q", last, live)
	}
	n := len(out.String())
	time.Sleep(20 * time.Millisecond)
	if len(out.String()) != n {
		t.Error("output after Finish")
	}
}

func TestIsTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) || isTerminal(&bytes.Buffer{}) {
		t.Error("a file or buffer taken for a terminal")
	}
	// A plain file gets plain lines and no goroutine.
	b := New(f, 10, "x")
	if b.tty || b.done != nil {
		t.Error("file bar is in terminal mode")
	}
	b.Set(10)
	b.Finish()
	data, _ := os.ReadFile(f.Name())
	if lines := plainLines(t, string(data)); len(lines) != 2 {
		t.Errorf("file output %q", data)
	}
}

func TestFmtDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{850 * time.Millisecond, "850ms"},
		{4200 * time.Millisecond, "4.2s"},
		{185 * time.Second, "3m05s"},
		{2*time.Hour + 7*time.Minute + 10*time.Second, "2h07m"},
	} {
		if got := fmtDuration(c.d); got != c.want {
			t.Errorf("%v: %q, want %q", c.d, got, c.want)
		}
	}
}

func TestThresholds(t *testing.T) {
	b := &Bar{total: 7}
	for d, want := range []int64{0, 1, 2, 3, 3, 4, 5, 5, 6, 7} {
		if got := b.threshold(int64(d)); got != want {
			t.Errorf("threshold(%d) of 7 = %d, want %d", d, got, want)
		}
		if b.tenths(want) < int64(d) || (want > 0 && b.tenths(want-1) >= int64(d)) {
			t.Errorf("tenths disagrees with threshold at %d", d)
		}
	}
	big := &Bar{total: 1 << 62}
	if big.tenths(1<<61) != 5 || big.threshold(5) != 1<<61 || big.threshold(9) != 9*(1<<62)/10+1 || big.tenths(1<<62) != 10 {
		t.Errorf("big totals overflow: %d %d %d", big.tenths(1<<61), big.threshold(5), big.threshold(9))
	}
}
