package artifacts

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/clock"
)

// loaded is the value the test load function builds: the bytes it saw.
type loaded struct{ body string }

func loadFunc(cost int64) LoadFunc[*loaded] {
	return func(data []byte) (*loaded, int64, error) {
		if string(data) == "unloadable" {
			return nil, 0, errors.New("not a tokenizer")
		}
		return &loaded{string(data)}, cost, nil
	}
}

func waitIdle[T any](t *testing.T, l *Loader[T]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, l.Wait(ctx))
}

// getReady starts a load, waits for it and returns the ready value.
func getReady[T any](t *testing.T, l *Loader[T], f CheckedFile) T {
	t.Helper()
	_, st, _ := l.Get("m", f)
	if st != StatusReady {
		waitIdle(t, l)
	}
	v, st, err := l.Get("m", f)
	require.NoError(t, err)
	require.Equal(t, StatusReady, st)
	return v
}

// localArtifacts writes n distinct artifacts and returns them pinned.
func localArtifacts(t *testing.T, n int) ([]CheckedFile, []string) {
	files := make([]CheckedFile, n)
	for i := range files {
		body := []byte(fmt.Sprintf(`{"artifact":%d}`, i))
		files[i] = file(writeFile(t, body), body)
	}
	pins := make([]string, n)
	for i, f := range files {
		pins[i] = string(f.Checksum)
	}
	return files, pins
}

func TestLoaderLoadsInTheBackground(t *testing.T) {
	release := make(chan struct{})
	f := file(writeFile(t, tokenizerBytes), tokenizerBytes)
	s, _ := newTestStore(t, Settings{Pinned: pinned(f.Checksum)})
	l := NewLoader(s, clock.NewManual(t0), func(data []byte) (*loaded, int64, error) {
		<-release
		return &loaded{string(data)}, 1, nil
	}, LoaderLimits{})
	defer l.Close()

	v, st, err := l.Get("m", f)
	assert.Nil(t, v)
	assert.Equal(t, StatusLoading, st, "Get answers at once while the load runs")
	require.NoError(t, err)
	_, st, _ = l.Get("m", f)
	assert.Equal(t, StatusLoading, st)
	close(release)
	v = getReady(t, l, f)
	assert.Equal(t, string(tokenizerBytes), v.body)
}

func TestLoaderUnpinnedLoadsNothing(t *testing.T) {
	o := newOrigin(t)
	f := file(o.put("/t.json", tokenizerBytes), tokenizerBytes)
	s, m := newTestStore(t, Settings{AllowHTTP: true})
	l := NewLoader(s, clock.NewManual(t0), loadFunc(1), LoaderLimits{})
	defer l.Close()
	_, st, err := l.Get("m", f)
	assert.Equal(t, StatusUnpinned, st)
	assert.ErrorIs(t, err, ErrUnpinned)
	waitIdle(t, l)
	assert.Zero(t, o.total())
	assert.Equal(t, 1, count(m, ResultUnpinned))
}

func TestLoaderRetriesAfterFailureOnTheClock(t *testing.T) {
	o := newOrigin(t)
	loc := o.put("/t.json", tokenizerBytes)
	o.fail("/t.json", 500)
	f := file(loc, tokenizerBytes)
	s, m := newTestStore(t, Settings{AllowHTTP: true, Pinned: pinned(f.Checksum)})
	clk := clock.NewManual(t0)
	l := NewLoader(s, clk, loadFunc(1), LoaderLimits{})
	defer l.Close()

	l.Get("m", f)
	waitIdle(t, l)
	_, st, err := l.Get("m", f)
	assert.Equal(t, StatusFailed, st)
	assert.Contains(t, err.Error(), "HTTP 500")
	assert.Equal(t, 1, o.hitsAt("/t.json"))

	o.put("/t.json", tokenizerBytes) // the worker recovers
	clk.Advance(DefaultRetryAfter - time.Second)
	_, st, _ = l.Get("m", f)
	assert.Equal(t, StatusFailed, st, "no retry before 5 minutes")
	waitIdle(t, l)
	assert.Equal(t, 1, o.hitsAt("/t.json"))

	clk.Advance(time.Second)
	v := getReady(t, l, f)
	assert.Equal(t, string(tokenizerBytes), v.body)
	assert.Equal(t, 2, o.hitsAt("/t.json"))
	assert.Equal(t, 1, count(m, ResultFailed))
	assert.Equal(t, 1, count(m, ResultFetched))
}

func TestLoaderLoadErrorIsAFailure(t *testing.T) {
	body := []byte("unloadable")
	f := file(writeFile(t, body), body)
	s, m := newTestStore(t, Settings{Pinned: pinned(f.Checksum)})
	l := NewLoader(s, clock.NewManual(t0), loadFunc(1), LoaderLimits{})
	defer l.Close()
	l.Get("m", f)
	waitIdle(t, l)
	_, st, err := l.Get("m", f)
	assert.Equal(t, StatusFailed, st)
	assert.Contains(t, err.Error(), "not a tokenizer")
	assert.Equal(t, 1, count(m, ResultFailed))
}

func TestLoaderSurvivesAPanickingLoad(t *testing.T) {
	f := file(writeFile(t, tokenizerBytes), tokenizerBytes)
	s, _ := newTestStore(t, Settings{Pinned: pinned(f.Checksum)})
	l := NewLoader(s, clock.NewManual(t0), func([]byte) (*loaded, int64, error) { panic("bad input") }, LoaderLimits{})
	defer l.Close()
	l.Get("m", f)
	waitIdle(t, l)
	_, st, err := l.Get("m", f)
	assert.Equal(t, StatusFailed, st)
	assert.Contains(t, err.Error(), "panicked")
}

func TestLoaderRunsAtMostTwoLoadsAtOnce(t *testing.T) {
	files, pins := localArtifacts(t, 5)
	s, _ := newTestStore(t, Settings{Pinned: pins})
	var running, peak atomic.Int32
	started := make(chan struct{}, len(files))
	release := make(chan struct{})
	l := NewLoader(s, clock.NewManual(t0), func(data []byte) (*loaded, int64, error) {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		started <- struct{}{}
		<-release
		running.Add(-1)
		return &loaded{string(data)}, 1, nil
	}, LoaderLimits{})
	defer l.Close()

	for _, f := range files {
		_, st, _ := l.Get("m", f)
		assert.Equal(t, StatusLoading, st)
	}
	<-started
	<-started
	assert.Equal(t, 5, l.Stats().Loading, "the others wait for a slot")
	assert.Equal(t, int32(2), running.Load())
	close(release)
	waitIdle(t, l)
	assert.Equal(t, int32(2), peak.Load())
	assert.Equal(t, 5, l.Stats().Ready)
}

func TestLoaderEvictsByCount(t *testing.T) {
	files, pins := localArtifacts(t, DefaultMaxEntries+1)
	s, _ := newTestStore(t, Settings{Pinned: pins})
	l := NewLoader(s, clock.NewManual(t0), loadFunc(1), LoaderLimits{})
	defer l.Close()
	for _, f := range files[:DefaultMaxEntries] {
		getReady(t, l, f)
	}
	getReady(t, l, files[0]) // files[1] is now the least recently used
	getReady(t, l, files[DefaultMaxEntries])
	assert.Equal(t, DefaultMaxEntries, l.Stats().Ready)
	_, st, _ := l.Get("m", files[0])
	assert.Equal(t, StatusReady, st, "recently used entries stay")
	_, st, _ = l.Get("m", files[1])
	assert.Equal(t, StatusLoading, st, "the least recently used entry was evicted and loads again")
	waitIdle(t, l)
}

func TestLoaderEvictsByBytes(t *testing.T) {
	files, pins := localArtifacts(t, 3)
	s, _ := newTestStore(t, Settings{Pinned: pins})
	l := NewLoader(s, clock.NewManual(t0), loadFunc(100<<20), LoaderLimits{})
	defer l.Close()
	getReady(t, l, files[0])
	getReady(t, l, files[1])
	assert.Equal(t, int64(200<<20), l.Stats().Bytes)
	getReady(t, l, files[2])
	st := l.Stats()
	assert.Equal(t, 2, st.Ready, "a third 100 MiB value does not fit in 256 MiB")
	assert.Equal(t, int64(200<<20), st.Bytes)
	_, status, _ := l.Get("m", files[0])
	assert.Equal(t, StatusLoading, status, "the oldest was evicted")
	waitIdle(t, l)
}

func TestLoaderRefusesAValueOverTheWholeBudget(t *testing.T) {
	files, pins := localArtifacts(t, 1)
	s, m := newTestStore(t, Settings{Pinned: pins})
	l := NewLoader(s, clock.NewManual(t0), loadFunc(DefaultMaxBytes+1), LoaderLimits{})
	defer l.Close()
	l.Get("m", files[0])
	waitIdle(t, l)
	_, st, err := l.Get("m", files[0])
	assert.Equal(t, StatusFailed, st)
	assert.Equal(t, ResultTooLarge, ResultOf(err))
	assert.Equal(t, 1, count(m, ResultTooLarge))
}

func TestRemovingAPinDropsTheLoadedValue(t *testing.T) {
	files, pins := localArtifacts(t, 2)
	s, _ := newTestStore(t, Settings{Pinned: pins})
	l := NewLoader(s, clock.NewManual(t0), loadFunc(10), LoaderLimits{})
	defer l.Close()
	getReady(t, l, files[0])
	getReady(t, l, files[1])

	s.Reload(Settings{Pinned: pins[1:]})
	assert.Equal(t, Stats{Ready: 1, Bytes: 10}, l.Stats(), "dropped at reload, not at the next Get")
	_, st, _ := l.Get("m", files[0])
	assert.Equal(t, StatusUnpinned, st)
	_, st, _ = l.Get("m", files[1])
	assert.Equal(t, StatusReady, st)

	s.Reload(Settings{Pinned: pins})
	assert.Equal(t, string(mustRead(t, files[0].Path)), getReady(t, l, files[0]).body, "pinning again loads again")
}

func TestRemovingAPinDiscardsARunningLoad(t *testing.T) {
	files, pins := localArtifacts(t, 1)
	s, _ := newTestStore(t, Settings{Pinned: pins})
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	l := NewLoader(s, clock.NewManual(t0), func(data []byte) (*loaded, int64, error) {
		once.Do(func() { close(entered) })
		<-release
		return &loaded{string(data)}, 1, nil
	}, LoaderLimits{})
	defer l.Close()
	l.Get("m", files[0])
	<-entered
	s.Reload(Settings{})
	close(release)
	waitIdle(t, l)
	assert.Equal(t, Stats{}, l.Stats(), "the finished load of an unpinned artifact is not kept")
}

func TestCloseStopsQueuedLoads(t *testing.T) {
	files, pins := localArtifacts(t, 3)
	s, _ := newTestStore(t, Settings{Pinned: pins})
	release := make(chan struct{})
	l := NewLoader(s, clock.NewManual(t0), func(data []byte) (*loaded, int64, error) {
		<-release
		return &loaded{string(data)}, 1, nil
	}, LoaderLimits{MaxConcurrent: 1})
	for _, f := range files {
		l.Get("m", f)
	}
	done := make(chan struct{})
	go func() { l.Close(); close(done) }()
	close(release)
	<-done
	assert.Zero(t, l.Stats().Loading)
}
