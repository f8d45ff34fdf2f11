package eventplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// ConnectTimeout bounds resolving and connecting to one publisher.
const ConnectTimeout = 10 * time.Second

// ErrNotAllowed is returned when no resolved address is in the allow list.
var ErrNotAllowed = errors.New("publisher address is outside dynamo.load.direct_allow_cidrs")

// Dialer connects to fleet-authored tcp://host:port endpoints under the
// direct dial policy: the host is resolved once, and only an allowed
// resolved address is dialed, so DNS cannot change the address between the
// policy check and the connection.
type Dialer struct {
	// Allow lists the permitted networks; nil allows any address (the
	// historical behaviour, which config validation warns about).
	Allow    []netip.Prefix
	Resolver *net.Resolver
}

// Dial resolves and connects within ConnectTimeout.
func (d *Dialer) Dial(ctx context.Context, hostPort string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		r := d.Resolver
		if r == nil {
			r = net.DefaultResolver
		}
		ips, err := r.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolve publisher host: %w", err)
		}
		addrs = ips
	}
	var lastErr error = ErrNotAllowed
	var nd net.Dialer
	for _, a := range addrs {
		a = a.Unmap()
		if !d.allowed(a) {
			continue
		}
		conn, err := nd.DialContext(ctx, "tcp", net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func (d *Dialer) allowed(a netip.Addr) bool {
	if d.Allow == nil {
		return true
	}
	for _, p := range d.Allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParseAllow turns configured CIDRs into prefixes; nil in, nil out.
func ParseAllow(cidrs []string) ([]netip.Prefix, error) {
	if cidrs == nil {
		return nil, nil
	}
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
