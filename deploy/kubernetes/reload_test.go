package kubernetes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/router/config/filewatch"
)

// configMapVolume lays out a folder the way the kubelet writes a ConfigMap
// volume: each version of the data in its own timestamped folder, a
// `..data` symlink to the current one, and each key a symlink through
// `..data`.
type configMapVolume struct {
	dir     string
	version int
}

func newConfigMapVolume(t *testing.T, content string) *configMapVolume {
	v := &configMapVolume{dir: t.TempDir()}
	require.NoError(t, v.writeVersion(content))
	require.NoError(t, os.Symlink(v.current(), filepath.Join(v.dir, "..data")))
	require.NoError(t, os.Symlink(filepath.Join("..data", configFile), filepath.Join(v.dir, configFile)))
	return v
}

func (v *configMapVolume) current() string {
	return fmt.Sprintf("..2026_12_01_00_00_00.%09d", v.version)
}

func (v *configMapVolume) writeVersion(content string) error {
	d := filepath.Join(v.dir, v.current())
	if err := os.Mkdir(d, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(d, configFile), []byte(content), 0o644)
}

// swap publishes new content as the kubelet does: a new version folder, a
// temporary symlink to it renamed over `..data`, the old folder removed.
// The file's own symlink never changes.
func (v *configMapVolume) swap(t *testing.T, content string) {
	old := filepath.Join(v.dir, v.current())
	v.version++
	require.NoError(t, v.writeVersion(content))
	tmp := filepath.Join(v.dir, "..data_tmp")
	require.NoError(t, os.Symlink(v.current(), tmp))
	require.NoError(t, os.Rename(tmp, filepath.Join(v.dir, "..data")))
	require.NoError(t, os.RemoveAll(old))
}

// The Deployment mounts the ConfigMap as a folder, and an edited ConfigMap
// reaches the router as a `..data` symlink swap: the router's file watcher
// (the one `switchyard serve` runs on --config) reports the new content.
func TestConfigMapSwapIsSeen(t *testing.T) {
	vol := newConfigMapVolume(t, "version: 0\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := make(chan string, 16)
	done := make(chan error, 1)
	go func() {
		done <- filewatch.Watch(ctx, filepath.Join(vol.dir, configFile), 20*time.Millisecond, func(b []byte) { seen <- string(b) })
	}()

	// The watch gives no sign that it is registered: swap until one
	// change is seen, then once more, which it must see.
	deadline := time.After(30 * time.Second)
	for first := ""; first == ""; {
		vol.swap(t, fmt.Sprintf("version: %d\n", vol.version+1))
		select {
		case first = <-seen:
			require.NotEqual(t, "version: 0\n", first)
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatal("no ConfigMap swap was ever seen")
		}
	}
	for len(seen) > 0 {
		<-seen
	}
	const edited = "version: edited\n"
	vol.swap(t, edited)
	for {
		select {
		case got := <-seen:
			if got == edited {
				cancel()
				require.NoError(t, <-done)
				return
			}
		case <-deadline:
			t.Fatalf("the swap to %q was not seen", edited)
		}
	}
}
