package core

import (
	"os/exec"
	"strings"
	"testing"
)

// forbiddenDeps are packages the routing core must never pull in: sockets,
// HTTP and processes. Every host drives the same core, so an import here
// would tie the simulator and replay to the live router's I/O.
var forbiddenDeps = map[string]bool{"net": true, "net/http": true, "os/exec": true}

// forbiddenTrees are switchyard folders that adapt the core to the world
// (sockets, HTTP, SQLite, etcd): the core is driven by them, never the
// other way round.
var forbiddenTrees = []string{
	"switchyard/router/eventplane",
	"switchyard/router/gateway",
	"switchyard/router/server",
	"switchyard/router/discoverysource",
	"switchyard/router/config",
	"switchyard/recorder",
}

func forbidden(dep string) bool {
	if forbiddenDeps[dep] {
		return true
	}
	for _, tree := range forbiddenTrees {
		if dep == tree || strings.HasPrefix(dep, tree+"/") {
			return true
		}
	}
	return false
}

// TestImportsNoAdapters runs the real `go list -deps` (test dependencies
// are not part of its answer), so the check sees exactly what a build
// links.
func TestImportsNoAdapters(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "switchyard/router/core/...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps listed nothing")
	}
	for _, dep := range deps {
		if forbidden(dep) {
			t.Errorf("router/core depends on %s", dep)
		}
	}
}
