// Package traces finds the request traces that cannot be redistributed with
// the project. They live in one directory, named by SWITCHYARD_TRACE_DIR
// (default ../shared/data/traces, beside the project root); tests, scenarios
// and the command line all look there through this package.
package traces

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	// EnvDir names the trace directory.
	EnvDir = "SWITCHYARD_TRACE_DIR"
	// DefaultDir is the trace directory when EnvDir is unset, relative to
	// the project root.
	DefaultDir = "../shared/data/traces"
	// Mooncake is the file name of the Mooncake conversation trace.
	Mooncake = "mooncake_conversation_trace.jsonl"
	// module is the project's module path, which marks its root.
	module = "switchyard"
)

// sources says where each known trace comes from.
var sources = map[string]string{
	Mooncake: "the Mooncake FAST'25 release (https://github.com/kvcache-ai/Mooncake, " +
		"file FAST25-release/traces/conversation_trace.jsonl, Apache-2.0)",
}

// Dir is the trace directory: EnvDir when set, DefaultDir otherwise. A
// relative directory is taken from the project root, so tests, which run
// in their package's directory, and commands run from the root agree.
func Dir() string {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		dir = DefaultDir
	}
	if filepath.IsAbs(dir) {
		return filepath.Clean(dir)
	}
	return filepath.Join(Root(), dir)
}

// Path is where the trace called name is expected.
func Path(name string) string { return filepath.Join(Dir(), name) }

// Find returns the path of the trace called name, or an error that says
// where it was looked for and where to get it.
func Find(name string) (string, error) {
	path := Path(name)
	info, err := os.Stat(path)
	switch {
	case err == nil && info.Mode().IsRegular():
		return path, nil
	case err == nil:
		return "", fmt.Errorf("%s is not a regular file. %s", path, Hint(name))
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("trace %s not found at %s. %s", name, path, Hint(name))
	default:
		return "", fmt.Errorf("trace %s: %w. %s", name, err, Hint(name))
	}
}

// Hint tells a user where the trace called name comes from and where to
// put it.
func Hint(name string) string {
	where := "the trace directory"
	if src, ok := sources[filepath.Base(name)]; ok {
		where = src
		name = filepath.Base(name)
	}
	return fmt.Sprintf("Get it from %s and save it as %s in $%s (default %s beside the project root).",
		where, name, EnvDir, DefaultDir)
}

// Require returns the path of a trace a test cannot run without. When the
// trace is missing the test is skipped with the message of Find, or fails
// with it when the CI environment variable is set: the CI machine has the
// traces, so a missing one there is a broken setup, not an optional test.
func Require(tb testing.TB, name string) string {
	tb.Helper()
	path, err := Find(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") != "" {
		tb.Fatalf("%v (CI is set, so this test may not skip)", err)
	}
	tb.Skip(err)
	return ""
}

// Root is the project root: the nearest directory, from the working
// directory up, whose go.mod declares the project's module. Outside a
// clone it is the working directory.
func Root() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if declaresModule(filepath.Join(dir, "go.mod")) {
			return dir
		}
		if filepath.Dir(dir) == dir {
			return wd
		}
	}
}

// declaresModule reports whether the go.mod at path is the project's.
func declaresModule(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == module
		}
	}
	return false
}
