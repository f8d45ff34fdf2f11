package syncbuf

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
)

var _ io.Writer = (*Buffer)(nil)

// Writers and readers run at once (under -race this checks the locking):
// every read sees whole writes only, and at the end every write is there.
func TestConcurrentWritersAndReaders(t *testing.T) {
	const writers, lines = 4, 500
	var b Buffer
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(&b, "writer %d line %d\n", w, i)
			}
		})
	}
	done := make(chan struct{})
	var readers sync.WaitGroup
	for r := range 2 {
		readers.Go(func() {
			for {
				var s string
				if r == 0 {
					s = b.String()
				} else {
					s = string(b.Bytes())
				}
				if s != "" && !strings.HasSuffix(s, "\n") {
					t.Errorf("a read ends inside a write: %q", s[max(0, len(s)-40):])
					return
				}
				select {
				case <-done:
					return
				default:
				}
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()

	// Every write is there, and each writer's lines are in its own order.
	next := make([]int, writers)
	for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		var w, i int
		if _, err := fmt.Sscanf(line, "writer %d line %d", &w, &i); err != nil || w < 0 || w >= writers {
			t.Fatalf("unexpected line %q", line)
		}
		if i != next[w] {
			t.Fatalf("writer %d: got line %d, want line %d", w, i, next[w])
		}
		next[w]++
	}
	for w, n := range next {
		if n != lines {
			t.Errorf("writer %d: %d lines, want %d", w, n, lines)
		}
	}
}

// Bytes is a snapshot: writing afterwards does not change it, and changing
// it does not change the buffer.
func TestBytesIsACopy(t *testing.T) {
	var b Buffer
	b.Write([]byte("abc"))
	snap := b.Bytes()
	b.Write([]byte("def"))
	snap[0] = 'X'
	if string(snap) != "Xbc" {
		t.Errorf("snapshot = %q, want %q", snap, "Xbc")
	}
	if b.String() != "abcdef" {
		t.Errorf("buffer = %q, want %q", b.String(), "abcdef")
	}
}
