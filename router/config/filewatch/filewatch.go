// Package filewatch calls back when a configuration file's content changes.
//
// It watches the file's directory rather than the file, because editors
// replace files by rename and Kubernetes ConfigMaps swap a symlink: a watch
// on the old inode would go quiet. Bursts of events are debounced, and the
// callback runs only when the bytes actually differ.
package filewatch

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch blocks until ctx is done, calling onChange (from this goroutine)
// with the new content after each settled change.
func Watch(ctx context.Context, path string, debounce time.Duration, onChange func(content []byte)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		return err
	}
	last, _ := os.ReadFile(path)
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-w.Events:
			if !ok {
				return nil
			}
			settle = time.After(debounce)
		case _, ok := <-w.Errors:
			if !ok {
				return nil
			}
		case <-settle:
			settle = nil
			b, err := os.ReadFile(path)
			if err != nil || bytes.Equal(b, last) {
				continue // mid-swap, or touched without a change
			}
			last = b
			onChange(b)
		}
	}
}
