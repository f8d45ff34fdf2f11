// Package depcheck asserts what a package may not link, for the tests that
// keep the routing core and its codecs free of sockets and adapters.
package depcheck

import (
	"os/exec"
	"strings"
	"testing"
)

// IO are the standard packages that do I/O the core must leave to its
// hosts: sockets, HTTP and processes.
var IO = []string{"net", "net/http", "os/exec"}

// Forbid fails tb for every dependency of pattern (a `go list` pattern)
// that forbidden names: a package path names itself only ("net" is not
// "net/netip"); a path ending in "/..." names its whole tree. It runs the real
// `go list -deps`, whose answer leaves test dependencies out, so it sees
// exactly what a build links.
func Forbid(tb testing.TB, pattern string, forbidden ...string) {
	tb.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		tb.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", pattern).Output()
	if err != nil {
		tb.Fatalf("go list -deps %s: %v", pattern, err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		tb.Fatalf("go list -deps %s listed nothing", pattern)
	}
	for _, dep := range deps {
		if named(dep, forbidden) {
			tb.Errorf("%s depends on %s", pattern, dep)
		}
	}
}

func named(dep string, forbidden []string) bool {
	for _, f := range forbidden {
		tree, isTree := strings.CutSuffix(f, "/...")
		if dep == f || isTree && (dep == tree || strings.HasPrefix(dep, tree+"/")) {
			return true
		}
	}
	return false
}
