package envelope

import (
	"os/exec"
	"strings"
	"testing"
)

// forbiddenDeps are packages a pure codec must never pull in: sockets,
// HTTP and processes. The core and the simulator import this package, so
// anything listed here would leak into them.
var forbiddenDeps = map[string]bool{"net": true, "net/http": true, "os/exec": true}

// forbiddenTrees are switchyard folders that own sockets: the subscription
// layer and its transport.
var forbiddenTrees = []string{"switchyard/router/eventplane"}

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

// TestImportsNoSockets runs the real `go list -deps` (test dependencies are
// not part of its answer), so the check sees exactly what a build links.
func TestImportsNoSockets(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "switchyard/router/envelope/...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps listed nothing")
	}
	for _, dep := range deps {
		if forbidden(dep) {
			t.Errorf("router/envelope depends on %s", dep)
		}
	}
}
