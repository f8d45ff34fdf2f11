package upstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var errSlowBackend = errors.New("slow backend")

// An exchange deadline ends a wait for the head, with its cause, and
// leaves the request's own context alone.
func TestExchangeDeadlineEndsTheWaitForTheHead(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	tr := newTestTransport(t)
	parent := context.Background()
	start := time.Now()
	_, err := tr.RoundTrip(post(t, WithDeadline(parent, start.Add(100*time.Millisecond), errSlowBackend), srv.URL, "{}"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, errSlowBackend)
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "not before the deadline")
	require.NoError(t, parent.Err())
}

// The deadline bounds the body too: a server that sends its head and
// then stalls fails the body's read with the deadline's cause.
func TestExchangeDeadlineEndsAStalledBody(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		<-release
	})
	tr := newTestTransport(t)
	resp, err := tr.RoundTrip(post(t, WithDeadline(context.Background(), time.Now().Add(150*time.Millisecond), errSlowBackend), srv.URL, "{}"))
	require.NoError(t, err)
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, errSlowBackend)
}

// A connection goes back to the pool with its last deadline set; a
// request after that deadline passed, with or without one of its own,
// gets the same connection, not a timeout and not a new dial.
func TestPooledConnectionOutlivesItsLastDeadline(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	tr := newTestTransport(t)
	_, body := roundTrip(t, tr, post(t, WithDeadline(context.Background(), time.Now().Add(50*time.Millisecond), errSlowBackend), srv.URL, "{}"))
	require.Equal(t, "ok", body)
	time.Sleep(150 * time.Millisecond) // past the deadline, and past peekAfterIdle
	_, body = roundTrip(t, tr, post(t, context.Background(), srv.URL, "{}"))
	require.Equal(t, "ok", body)
	time.Sleep(150 * time.Millisecond)
	_, body = roundTrip(t, tr, post(t, WithDeadline(context.Background(), time.Now().Add(time.Minute), errSlowBackend), srv.URL, "{}"))
	require.Equal(t, "ok", body)
	require.EqualValues(t, 1, conns.Load())
}

// Cancelling the request's context still interrupts an exchange that has
// a deadline, and the error says it was cancelled, not timed out.
func TestCancelBeatsTheExchangeDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	tr := newTestTransport(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := tr.RoundTrip(post(t, WithDeadline(ctx, time.Now().Add(time.Minute), errSlowBackend), srv.URL, "{}"))
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, errSlowBackend)
}

// Another RoundTripper gets the deadline as a context deadline, and the
// error carries its cause just the same.
func TestRoundTripWithAnotherTransport(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	std := &http.Transport{}
	defer std.CloseIdleConnections()
	_, err := RoundTripWith(std, post(t, WithDeadline(context.Background(), time.Now().Add(100*time.Millisecond), errSlowBackend), srv.URL+"/slow", "{}"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, errSlowBackend)

	var seen time.Time
	probe := roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		seen, _ = req.Context().Deadline()
		return std.RoundTrip(req)
	})
	at := time.Now().Add(time.Minute)
	_, body := roundTrip(t, roundTripperFunc(func(req *http.Request) (*http.Response, error) { return RoundTripWith(probe, req) }),
		post(t, WithDeadline(context.Background(), at, errSlowBackend), srv.URL+"/fast", "{}"))
	require.Equal(t, "ok", body)
	require.True(t, seen.Equal(at), "the other transport saw deadline %v, want %v", seen, at)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
