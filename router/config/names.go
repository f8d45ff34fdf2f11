package config

import (
	"regexp"
	"strings"
	"unicode"
)

func isSpaceOrControl(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }

// namespaceProblem checks a Dynamo namespace, which becomes a segment of
// etcd keys and of metric labels.
func namespaceProblem(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case strings.Contains(s, "/"):
		return "must not contain '/'"
	case strings.ContainsFunc(s, isSpaceOrControl):
		return "must not contain whitespace or control characters"
	}
	return ""
}

var (
	dns1123Label     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	labelValue       = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	blake3Checksum   = regexp.MustCompile(`^blake3:[0-9a-f]{64}$`)
	sha256TokenHash  = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// labelProblem checks a Kubernetes namespace name (a DNS-1123 label).
func labelProblem(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if len(s) > 63 || !dns1123Label.MatchString(s) {
		return "must be a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
	}
	return ""
}

// labelValueProblem checks a non-empty Kubernetes label value; Pods are
// selected by these, so anything else could never match.
func labelValueProblem(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if len(s) > 63 || !labelValue.MatchString(s) {
		return "must be a Kubernetes label value: at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
	}
	return ""
}

// dnsNameProblem checks a lowercase DNS name without wildcards, the form a
// certificate's DNS SAN must match.
func dnsNameProblem(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if len(s) > 253 || !dns1123Subdomain.MatchString(s) {
		return "must be a lowercase DNS name (letters, digits, '-' and '.'; no wildcards), as it is matched against client certificate DNS SANs"
	}
	return ""
}
