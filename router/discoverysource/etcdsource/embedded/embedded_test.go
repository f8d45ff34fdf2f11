package embedded

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func get(t *testing.T, endpoint, key string, write bool) string {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if write {
		if _, err := c.Put(ctx, key, "v"); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := c.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// TestRestartKeepsData: the serve command restarts on the same data dir
// and client address; the peer port is picked afresh each time, which a
// single-member cluster must tolerate.
func TestRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	e, err := StartEmbedded(dir, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(e.Endpoint(), "http://127.0.0.1:") || strings.HasSuffix(e.Endpoint(), ":0") {
		t.Fatalf("endpoint %q", e.Endpoint())
	}
	get(t, e.Endpoint(), "k", true)
	listen := e.Options().ClientAddr
	e.Close()
	e.Close() // idempotent

	again, err := StartEmbedded(dir, listen)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.Endpoint() != e.Endpoint() {
		t.Fatalf("endpoint moved: %s -> %s", e.Endpoint(), again.Endpoint())
	}
	if got := get(t, again.Endpoint(), "k", false); got != "v" {
		t.Fatalf("after restart k = %q", got)
	}
}

func TestStartNeedsADir(t *testing.T) {
	if _, err := StartEmbedded("", "127.0.0.1:0"); err == nil {
		t.Fatal("no error without a data dir")
	}
}

func TestStartReportsBusyPort(t *testing.T) {
	e, err := StartEmbedded(t.TempDir(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if other, err := StartEmbedded(t.TempDir(), e.Options().ClientAddr); err == nil {
		other.Close()
		t.Fatal("second member on a busy port started")
	}
}

// A port another process holds fails the start with an error Start
// recognises as a taken port (what makes it pick again when it chose the
// port itself).
func TestTakenPortIsRecognised(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = Start(Options{Dir: t.TempDir(), ClientAddr: l.Addr().String()})
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("err = %v, want one wrapping EADDRINUSE", err)
	}
	if picksPorts(Options{ClientAddr: l.Addr().String(), PeerAddr: l.Addr().String()}) {
		t.Fatal("fixed ports are not picked")
	}
	if !picksPorts(Options{ClientAddr: l.Addr().String()}) || !picksPorts(Options{ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:1"}) {
		t.Fatal("a port left 0 or empty is picked")
	}
}
