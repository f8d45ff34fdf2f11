package etcdsource

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
)

// maxDialAddresses bounds the addresses dialErrors remembers; the
// configuration allows at most 16 endpoints.
const maxDialAddresses = 16

// dialErrors makes a pass's connections and remembers the latest dial
// error per address. gRPC reports a failed connection only as a state
// (TRANSIENT_FAILURE); the cause an operator needs (refused, no such
// host, timed out) is known only where the connection is made. The text
// names addresses, so it goes to the log, never to Status.
type dialErrors struct {
	mu   sync.Mutex
	last map[string]string
}

// dial is a gRPC context dialer for the addresses etcd's resolver hands
// out: host:port, or unix:path for a local socket.
func (d *dialErrors) dial(ctx context.Context, addr string) (net.Conn, error) {
	network, address := "tcp", addr
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, address = "unix", strings.TrimPrefix(path, "//")
	}
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, network, address)
	d.note(addr, err)
	return conn, err
}

func (d *dialErrors) note(addr string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		delete(d.last, addr)
		return
	}
	if d.last == nil {
		d.last = map[string]string{}
	}
	if _, known := d.last[addr]; known || len(d.last) < maxDialAddresses {
		d.last[addr] = err.Error()
	}
}

// summary joins the latest dial error of every address still failing, in
// address order; empty when none is.
func (d *dialErrors) summary() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	addrs := make([]string, 0, len(d.last))
	for a := range d.last {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	texts := make([]string, len(addrs))
	for i, a := range addrs {
		texts[i] = d.last[a]
	}
	return strings.Join(texts, "; ")
}
