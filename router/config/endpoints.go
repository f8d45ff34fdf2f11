package config

import (
	"net"
	"net/url"
	"strconv"
	"strings"
)

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
