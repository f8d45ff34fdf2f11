package config

import (
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// EffectiveEndpoints is the etcd client's endpoint list: the embedded
// server's address when it is enabled, else the configured endpoints with
// bare host:port normalized to http://host:port.
func (e EtcdDiscovery) EffectiveEndpoints() []string {
	if e.Embedded.Enabled {
		return []string{"http://" + e.Embedded.Listen}
	}
	out := make([]string, len(e.Endpoints))
	for i, ep := range e.Endpoints {
		out[i] = normalizeEndpoint(ep)
	}
	return out
}

// Namespaces lists the Dynamo namespaces the configured source watches,
// the primary one first.
func (d Discovery) Namespaces() []string {
	if d.Source == SourceKubernetes || d.Source == SourceKubernetesPods {
		if len(d.Kubernetes.DynamoNamespaces) > 0 {
			return d.Kubernetes.DynamoNamespaces
		}
		if d.Kubernetes.DynamoNamespace == "" {
			return nil
		}
		return []string{d.Kubernetes.DynamoNamespace}
	}
	if len(d.Etcd.Namespaces) > 0 {
		return d.Etcd.Namespaces
	}
	return []string{d.Etcd.Namespace}
}

func normalizeEndpoint(ep string) string {
	if strings.Contains(ep, "://") {
		return ep
	}
	return "http://" + ep
}

// parseEndpoint checks one etcd endpoint and returns it parsed, or a
// message. Messages never repeat the endpoint text: it may hold a password.
func parseEndpoint(raw string) (*url.URL, string) {
	if raw == "" {
		return nil, "must not be empty"
	}
	if strings.ContainsFunc(raw, isSpaceOrControl) {
		return nil, "must not contain whitespace or control characters"
	}
	s := normalizeEndpoint(raw)
	rest := s[strings.Index(s, "://")+3:]
	// Checked on the text: url.Parse drops an empty trailing '?' or '#'.
	if strings.Contains(rest, "@") {
		return nil, "must not embed credentials (user:pass@host or user@host); use auth"
	}
	if strings.Contains(rest, "?") {
		return nil, "must not have a query string (not even an empty '?')"
	}
	if strings.Contains(rest, "#") {
		return nil, "must not have a fragment (not even an empty '#')"
	}
	if strings.Contains(rest, "/") {
		return nil, "must not have a path; write scheme://host:port"
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, "is not a valid URL or host:port (IPv6 hosts need brackets, e.g. [::1]:2379)"
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, "scheme must be http:// or https://"
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" {
		return nil, "must be host:port with an explicit port (IPv6 hosts need brackets, e.g. [::1]:2379)"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, "port must be a number from 1 to 65535"
	}
	return u, ""
}

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
