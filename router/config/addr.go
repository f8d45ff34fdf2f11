package config

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// checkHostPort validates a listen address. allowEmptyHost permits ":port"
// (all interfaces); port 0 asks the kernel for a free port.
func checkHostPort(s string, allowEmptyHost bool) string {
	if s == "" {
		return "must not be empty; write host:port"
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "must be host:port (IPv6 hosts need brackets, e.g. [::1]:8080)"
	}
	if host == "" && !allowEmptyHost {
		return "must name a host, e.g. 127.0.0.1:2379"
	}
	if strings.ContainsFunc(host, isSpaceOrControl) {
		return "host must not contain whitespace or control characters"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "port must be a number from 0 to 65535"
	}
	return ""
}

// sameListener reports whether two valid listen addresses would collide:
// equal ports, and hosts that are equal, both loopback, or a wildcard.
func sameListener(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	if isWildcardHost(ha) || isWildcardHost(hb) || strings.EqualFold(ha, hb) {
		return true
	}
	return isLoopbackHost(ha) && isLoopbackHost(hb)
}

func isWildcardHost(h string) bool {
	if h == "" {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.IsUnspecified()
}

func isLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.IsLoopback()
}

// internalSuffixes are DNS suffixes that only resolve inside a cluster or
// a private network.
var internalSuffixes = []string{".svc", ".svc.cluster.local", ".cluster.local", ".local", ".internal", ".localdomain", ".lan", ".home.arpa"}

// appearsExternal guesses whether an etcd host is outside the cluster:
// public IP literals and fully qualified names with a public-looking
// suffix. It is a heuristic for a warning, never for a decision.
func appearsExternal(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		return !(ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified())
	}
	if host == "localhost" || !strings.Contains(host, ".") {
		return false // single-label names resolve through the cluster's search path
	}
	for _, s := range internalSuffixes {
		if strings.HasSuffix(host, s) {
			return false
		}
	}
	// "etcd.dynamo" (service.namespace) is ambiguous with a public name;
	// it is flagged, and writing the .svc form silences the warning.
	return true
}
