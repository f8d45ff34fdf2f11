package config

import "fmt"

// Issue is one validation finding at a dotted field path.
type Issue struct {
	Path    string
	Message string
}

// String renders "path: message".
func (i Issue) String() string { return i.Path + ": " + i.Message }

// checker collects findings; each validate_*.go file adds one section.
type checker struct {
	errs, warns []Issue
}

func (k *checker) err(path, format string, args ...any) {
	k.errs = append(k.errs, Issue{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (k *checker) warn(path, format string, args ...any) {
	k.warns = append(k.warns, Issue{Path: path, Message: fmt.Sprintf(format, args...)})
}

// errIf records msg as an error when it is non-empty; the *Problem helpers
// return "" for a valid value.
func (k *checker) errIf(path, msg string) {
	if msg != "" {
		k.err(path, "%s", msg)
	}
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// uniqueList checks a list of names: length, per-item problem, duplicates.
// It reports whether every item was valid.
func (k *checker) uniqueList(path string, items []string, limit int, problem func(string) string) bool {
	ok := true
	if limit > 0 && len(items) > limit {
		k.err(path, "at most %d entries, got %d", limit, len(items))
		ok = false
	}
	seen := make(map[string]int, len(items))
	for i, s := range items {
		if msg := problem(s); msg != "" {
			k.err(index(path, i), "%s", msg)
			ok = false
			continue
		}
		if j, dup := seen[s]; dup {
			k.err(index(path, i), "duplicate of %s", index(path, j))
			ok = false
			continue
		}
		seen[s] = i
	}
	return ok
}
