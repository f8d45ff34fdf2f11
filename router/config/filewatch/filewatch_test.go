package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWatchReportsRealChangesOnce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "switchyard.yaml")
	if err := os.WriteFile(path, []byte("a: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 10)
	done := make(chan error)
	go func() { done <- Watch(ctx, path, 50*time.Millisecond, func(b []byte) { got <- string(b) }) }()
	time.Sleep(100 * time.Millisecond) // let the watch register

	// Replace by rename, as editors and ConfigMap swaps do.
	tmp := filepath.Join(dir, ".tmp")
	os.WriteFile(tmp, []byte("a: 2\n"), 0o600)
	os.Rename(tmp, path)
	select {
	case b := <-got:
		if b != "a: 2\n" {
			t.Fatalf("content %q", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no change reported")
	}
	// Touching without a content change reports nothing.
	os.WriteFile(path, []byte("a: 2\n"), 0o600)
	select {
	case b := <-got:
		t.Fatalf("unchanged content reported: %q", b)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
