package artifacts

import (
	"errors"
	"net/url"
	"path"
	"strings"
)

// DefaultHFEndpoint is used when HF_ENDPOINT is unset.
const DefaultHFEndpoint = "https://huggingface.co"

type locationKind int

const (
	locLocal locationKind = iota // a local path or file:// URL
	locHTTP                      // http:// or https://
	locHF                        // hf://<owner>/<repo>/<path>[@rev]
)

// location is where a CheckedFile's bytes live.
type location struct {
	kind locationKind
	// local is the file path (locLocal); url the URL (locHTTP).
	local, url string
	// repo, file and rev are the parts of an hf:// reference.
	repo, file, rev string
}

// parseLocation classifies a CheckedFile path as Dynamo does (anything
// that parses as a URL is one, the rest is a local path) and refuses what
// the router will never read: relative paths, credentials in URLs, and
// schemes other than file, http, https and hf (those are unsupported).
func parseLocation(p string) (location, error) {
	if strings.HasPrefix(p, "/") {
		return location{kind: locLocal, local: path.Clean(p)}, nil
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme == "" {
		return location{}, refusal(ResultRefused, "path", "neither an absolute path nor a URL")
	}
	switch strings.ToLower(u.Scheme) {
	case "file":
		if (u.Host != "" && u.Host != "localhost") || !strings.HasPrefix(u.Path, "/") {
			return location{}, refusal(ResultRefused, "path", "file URL must name an absolute local path")
		}
		return location{kind: locLocal, local: path.Clean(u.Path)}, nil
	case "http", "https":
		if u.Host == "" {
			return location{}, refusal(ResultRefused, "path", "URL has no host")
		}
		if u.User != nil {
			return location{}, refusal(ResultRefused, "path", "URL carries credentials")
		}
		return location{kind: locHTTP, url: u.String()}, nil
	case "hf":
		return parseHF(p)
	}
	return location{}, refusal(ResultUnsupported, "path", "URL scheme %s is not supported", quoteBounded(u.Scheme))
}

// parseHF reads hf://<owner>/<repo>/<path>[@rev]. The revision follows the
// last '@'; without one the file comes from main.
func parseHF(p string) (location, error) {
	rest := p[len("hf://"):]
	if strings.ContainsAny(rest, "?#") {
		return location{}, refusal(ResultRefused, "path", "hf URL must not carry a query or fragment")
	}
	rev := "main"
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rev, rest = rest[i+1:], rest[:i]
		if rev == "" {
			return location{}, refusal(ResultRefused, "path", "hf URL has an empty revision after '@'")
		}
	}
	segs := strings.Split(rest, "/")
	if len(segs) < 3 {
		return location{}, refusal(ResultRefused, "path", "hf URL must be hf://<owner>/<repo>/<path>[@rev]")
	}
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return location{}, refusal(ResultRefused, "path", "hf URL has an empty, '.' or '..' segment")
		}
	}
	return location{kind: locHF, repo: segs[0] + "/" + segs[1], file: strings.Join(segs[2:], "/"), rev: rev}, nil
}

// hfURL maps an hf:// location onto the Hub's resolve endpoint:
// <endpoint>/<owner>/<repo>/resolve/<rev>/<path>.
func (l location) hfURL(endpoint string) (string, error) {
	base, err := url.Parse(strings.TrimRight(endpoint, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return "", errors.New("HF_ENDPOINT is not an http(s) URL")
	}
	var b strings.Builder
	b.WriteString(base.String())
	for _, s := range strings.Split(l.repo, "/") {
		b.WriteString("/" + url.PathEscape(s))
	}
	b.WriteString("/resolve/" + url.PathEscape(l.rev))
	for _, s := range strings.Split(l.file, "/") {
		b.WriteString("/" + url.PathEscape(s))
	}
	return b.String(), nil
}
