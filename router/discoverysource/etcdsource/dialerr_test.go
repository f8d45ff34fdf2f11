package etcdsource

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"switchyard/internal/syncbuf"
	"switchyard/router/clock"
)

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// An unreachable etcd: the warning names the endpoint and the dial error
// itself, not only gRPC's connection state; Status stays address-free.
func TestUnreachableEndpointWarningNamesEndpointAndDialError(t *testing.T) {
	addr := closedPort(t)
	endpoint := "http://" + addr
	logs := &syncbuf.Buffer{}
	w := New(fastBackoff(Config{Endpoints: []string{endpoint}, Namespaces: []string{"dynamo"}}), &recorder{},
		clock.Real{}, slog.New(slog.NewJSONHandler(logs, nil)), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	var line string
	eventually(t, 30*time.Second, "a pass-ended warning with a dial error", func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "etcd discovery pass ended") && strings.Contains(l, "dial_error") {
				line = l
				return true
			}
		}
		return false
	})
	for _, want := range []string{`"level":"WARN"`, endpoint, "dial tcp " + addr, "connection refused"} {
		if !strings.Contains(line, want) {
			t.Errorf("warning lacks %q: %s", want, line)
		}
	}
	if st := w.Status(); strings.Contains(st.LastError, addr) {
		t.Errorf("Status names the address: %q", st.LastError)
	}
}

func TestDialErrorsAreBoundedAndClearedBySuccess(t *testing.T) {
	var d dialErrors
	for i := range maxDialAddresses + 4 {
		d.note(net.JoinHostPort("10.0.0.1", string(rune('a'+i))), net.ErrClosed)
	}
	if n := len(d.last); n != maxDialAddresses {
		t.Fatalf("remembered %d addresses, want %d", n, maxDialAddresses)
	}
	for a := range d.last {
		d.note(a, nil)
	}
	if s := d.summary(); s != "" {
		t.Fatalf("summary after every address connected = %q", s)
	}
}
